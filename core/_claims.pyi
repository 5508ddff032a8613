# Typing stub for the Cython module core/_claims.pyx (mypy reads this, not the .pyx).
from collections.abc import Callable

from esched.core._state import ClusterState

__all__ = ["MAGIC", "NONE", "NOT_PREEMPTABLE", "NO_PARTITION", "ClaimsError", "claims_record"]

MAGIC: bytes
NONE: int
NO_PARTITION: int
NOT_PREEMPTABLE: int

class ClaimsError(ValueError): ...

def claims_record(
    state: ClusterState, partition_of: Callable[[str], int] | None = None
) -> bytes: ...
