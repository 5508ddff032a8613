"""esched.core: the Cython scheduling core.

``ClusterState`` is the cluster as typed arrays, built only by its fold
(:meth:`ClusterState.apply` / :meth:`ClusterState.apply_many`, and
:meth:`ClusterState.apply_payloads` for stored envelope bytes). ``Placer`` places
pods on it: feasibility, relaxed randomization, scoring plugins from a
KubeSchedulerConfiguration profile, and the equivalence-class cache.

Build note: the package is installed from ``core/`` under the name ``esched.core``.
Cython resolves ``cimport esched.core.X`` (and mypy ``esched.core``) through
``build/package-view/esched/core``, a link to this directory the build makes (setup.py).
The Cython modules are typed for mypy by the ``.pyi`` stubs next to their ``.pyx``.
"""

from esched.core._placer import Placer, num_feasible_nodes_to_find
from esched.core._state import PHASES, ClusterState, PositionError
from esched.core.profile import DEFAULT_PROFILE, Profile, ProfileError, load_profile, parse_profile

__all__ = [
    "DEFAULT_PROFILE",
    "PHASES",
    "ClusterState",
    "Placer",
    "PositionError",
    "Profile",
    "ProfileError",
    "load_profile",
    "num_feasible_nodes_to_find",
    "parse_profile",
]
