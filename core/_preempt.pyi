# Typing stub for the Cython module core/_preempt.pyx (mypy reads this, not the .pyx).
from typing import Any

import numpy.typing as npt

from esched.core._state import ClusterState

__all__ = ["select_victims"]

def select_victims(
    state: ClusterState,
    used: npt.NDArray[Any],
    alloc: npt.NDArray[Any],
    ok: npt.NDArray[Any],
    cid: int,
    class_band: npt.NDArray[Any],
    evicted: npt.NDArray[Any],
    exclude_gang: int = -1,
    cache: dict[Any, Any] | None = None,
    must: npt.NDArray[Any] | None = None,
) -> tuple[int, list[int], list[int], tuple[Any, int, int]] | None: ...
