# Typing stub for the Cython module core/_fold.pyx (mypy reads this, not the .pyx).
# The fold's handlers are cdef functions (core/_fold.pxd): ClusterState.apply and
# apply_many are their Python entry points.
from collections.abc import Iterable

__all__ = ["GANG_SIZE_ANNOTATION", "MAX_POD_DEVICES", "device_bits"]

GANG_SIZE_ANNOTATION: str
MAX_POD_DEVICES: int

def device_bits(devices: Iterable[int]) -> int: ...
