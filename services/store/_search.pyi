# Typing stub for the Cython module services/store/_search.pyx (mypy reads this, not the .pyx).
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

_R = TypeVar("_R", bound=Sequence[Any])

def mentioning(rows: Iterable[_R], needle: bytes) -> list[_R]: ...
def all_hold(rows: Iterable[Sequence[Any]], needle: bytes) -> bool: ...
