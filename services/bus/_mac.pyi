# Typing stub for the Cython module services/bus/_mac.pyx (mypy reads this, not the .pyx).
from collections.abc import Iterable
from typing import Protocol, TypeVar

class _Record(Protocol):
    @property
    def headers(self) -> Iterable[tuple[str, bytes | None]]: ...
    @property
    def value(self) -> bytes: ...

_R = TypeVar("_R", bound=_Record)

UNSIGNED: int
TWO_HEADERS: int
TOO_LONG: int
UNKNOWN_KEY: int
MISMATCH: int

class Mac:
    def __init__(self, secret: bytes) -> None: ...
    def hexdigest(self, value: bytes) -> bytes: ...
    def signature(self, prefix: bytes, value: bytes) -> bytes: ...

def signed(
    mac: Mac, prefix: bytes, header: str, records: list[tuple[bytes | None, bytes]]
) -> list[tuple[bytes | None, bytes, tuple[tuple[str, bytes], ...]]]: ...
def refusal(
    macs: dict[bytes, Mac],
    header: str,
    headers: Iterable[tuple[str, bytes | None]],
    value: bytes,
    max_header: int,
) -> tuple[int, object] | None: ...
def split(
    macs: dict[bytes, Mac], header: str, msgs: Iterable[_R], max_header: int
) -> tuple[list[_R], list[tuple[_R, int, object]]]: ...
