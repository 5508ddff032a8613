"""esched.core: the Cython scheduling core.

``ClusterState`` is the cluster as typed arrays, built only by its fold
(:meth:`ClusterState.apply` / :meth:`ClusterState.apply_many`, and
:meth:`ClusterState.apply_payloads` for stored envelope bytes) and read through its
read API with the ``PHASE_*`` codes (:mod:`esched.core.phases`). ``Placer`` places
pods on it: feasibility, relaxed randomization, scoring plugins from a
KubeSchedulerConfiguration profile, and the equivalence-class cache.

The rules the services apply live here too, one module each: proposals are judged
by :mod:`esched.core.validation`, submissions admitted and ordered by
:mod:`esched.core.admission`, queue shares computed by :mod:`esched.core.queues`,
reclaim victims chosen by :mod:`esched.core.reclaim`. ``claims_record`` and
:meth:`ClusterState.apply_claims` let a state follow other partitions' pods by
compact records of their bindings instead of their events.

Build note: the package is installed from ``core/`` under the name ``esched.core``.
Cython resolves ``cimport esched.core.X`` (and mypy ``esched.core``) through
``build/package-view/esched/core``, a link to this directory the build makes (setup.py).
The Cython modules are typed for mypy by the ``.pyi`` stubs next to their ``.pyx``.
"""

from esched.core._claims import ClaimsError, claims_record
from esched.core._fold_bytes import committed_proposal
from esched.core._placer import Placer, num_feasible_nodes_to_find
from esched.core._state import ClassMemo, ClusterState, PositionError
from esched.core.phases import (
    PHASE_FAILED,
    PHASE_FREE,
    PHASE_PENDING,
    PHASE_RUNNING,
    PHASE_SUCCEEDED,
    PHASES,
    phase_code,
)
from esched.core.profile import DEFAULT_PROFILE, Profile, ProfileError, load_profile, parse_profile

__all__ = [
    "DEFAULT_PROFILE",
    "PHASES",
    "PHASE_FAILED",
    "PHASE_FREE",
    "PHASE_PENDING",
    "PHASE_RUNNING",
    "PHASE_SUCCEEDED",
    "ClaimsError",
    "ClassMemo",
    "ClusterState",
    "Placer",
    "PositionError",
    "Profile",
    "ProfileError",
    "claims_record",
    "committed_proposal",
    "load_profile",
    "num_feasible_nodes_to_find",
    "parse_profile",
    "phase_code",
]
