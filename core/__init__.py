"""esched.core: the Cython scheduling core.

``ClusterState`` is the cluster as typed arrays, built only by its fold
(:meth:`ClusterState.apply` / :meth:`ClusterState.apply_many`).
"""

from esched.core._state import PHASES, ClusterState, PositionError

__all__ = ["PHASES", "ClusterState", "PositionError"]
