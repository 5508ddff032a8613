# Typing stub for the Cython module core/_fold_bytes.pyx (mypy reads this, not the .pyx).
# The bytes path is cdef functions (core/_fold_bytes.pxd): ClusterState.apply_payloads
# is its Python entry point.

from typing import Any

from esched.core._state import ClusterState

__all__ = ["committed_proposal", "job_fold_parts"]

def committed_proposal(payload: object) -> str | None: ...
def job_fold_parts(payload: object) -> tuple[str, float | str, Any] | None: ...
def _py_scanner_accepts(payload: bytes) -> bool: ...
def _py_job_group_spec(state: ClusterState, payload: bytes) -> dict[str, Any] | None: ...
