# Typing stub for the Cython module services/bus/_hash.pyx (mypy reads this, not the .pyx).
from collections.abc import Sequence
from typing import TypeVar

_P = TypeVar("_P")

def murmur2(data: bytes | bytearray | memoryview) -> int: ...
def partition(key: bytes | None, all_partitions: Sequence[_P], available: Sequence[_P]) -> _P: ...
