"""Pod phases: the codes a :class:`~esched.core.ClusterState` stores, and their names.

The codes are ``PHASE_*`` of ``core/_types.pxd`` (the fold checks at import that
both agree). Callers compare against these constants instead of deriving a code
from a name (``PHASES.index("Pending")``).
"""

from __future__ import annotations

__all__ = [
    "PHASES",
    "PHASE_FAILED",
    "PHASE_FREE",
    "PHASE_PENDING",
    "PHASE_RUNNING",
    "PHASE_SUCCEEDED",
    "phase_code",
]

#: An empty pod slot (a deleted pod's, reusable); never a pod's phase.
PHASE_FREE = -1
PHASE_PENDING = 0
PHASE_RUNNING = 1
PHASE_SUCCEEDED = 2
PHASE_FAILED = 3

#: Phase names by code, in summary order.
PHASES = ("Pending", "Running", "Succeeded", "Failed")


def phase_code(name: str) -> int:
    """The code of a phase name (``"Pending"`` -> :data:`PHASE_PENDING`); ValueError if
    it is not one of :data:`PHASES`."""
    try:
        return PHASES.index(name)
    except ValueError:
        raise ValueError(f"unknown pod phase {name!r}; expected one of {PHASES}") from None
