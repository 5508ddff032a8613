"""The core's kernel body chosen for a test, and the default restored after."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def kernel_body(isa: str) -> Iterator[None]:
    """Run the block with the vectorized kernels' ``isa`` body (``avx512``, ``avx2``
    or ``baseline``: capped at what the CPU has), then choose by CPU again."""
    from esched.core import _placer

    before = _placer.SIMD
    try:
        _placer._py_set_simd(isa)
        yield
    finally:
        _placer._py_set_simd("" if before != "baseline" else "baseline")
