# Typing stub for the Cython module core/_state_views.pyx (mypy reads this, not the .pyx).
from typing import Any

from esched.core._state import ClusterState

__all__ = ["reclamation_view", "summary"]

def summary(self: ClusterState) -> dict[str, Any]: ...
def reclamation_view(self: ClusterState) -> dict[str, Any]: ...
