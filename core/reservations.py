"""Borg's resource reclamation (Verma et al., EuroSys 2015, section 5.5): the
configuration of the reservation rule.

**Off by default**, for Kubernetes parity: kube-scheduler's NodeResourcesFit places
a pod by its requests only (``limits`` never enter placement), so with
``reclamation.enabled: false`` esched judges every pod by its requests as well: a
class's limit *is* its requests, and a pod whose limits exceed its requests is placed
wherever its requests fit, as kube would. ``enabled: true`` turns on Borg's rule below.

With reclamation on, every running pod has a **limit** per resource (its Kubernetes
``limits``, else its requests; see ``docs/scheduling.md``) and a **reservation**: what the scheduler
expects it to use. The fold (``ClusterState``, ``core/_fold_usage.pyx``) keeps the
reservation per pod and resource from the ``pods[]`` part of
``esched.usage.reported`` events, on the log's clock (each event's ``time``), so a
replay gives the same reservations. The rule itself is one inline function,
``next_reservation`` in ``core/_reservations.pxd``:

- at binding the reservation equals the limit;
- for ``hold`` seconds after the pod's first usage report (start-up transients) it
  only rises;
- then it decays exponentially toward the **target**, usage + ``margin`` x limit:
  ``R(t) = T + (R0 - T) * exp(-dt / time_constant)``, dt the seconds since the
  previous report (or since the hold ended);
- it rises at once to the target when the target exceeds it (usage came close to
  or above it);
- a resource whose ``overcommit`` switch is off (memory by default: it is not
  compressible) never has a reservation above its limit; one whose switch is on
  (cpu by default) follows usage above the limit;
- resources not listed in ``reclaim`` (pods, GPUs, extended resources) keep
  reservation = limit.

Production pods are placed against the limits of the pods on a node; non-production
pods against their reservations, so they run in reclaimed resources. A node keeps
``burst`` x capacity of each reclaimed resource back for bursts: the accounting by
reservations of a node is ``min(limits, reservations + burst x allocatable)``.

Configured in the config file's ``reclamation:`` section (defaults after Borg where
the paper gives a figure: the 300 s hold; esched's choices otherwise)::

    reclamation:
      enabled: false         # default: every pod is judged by its requests (as kube)
      hold: 300              # seconds after start before a reservation decays (Borg)
      time_constant: 600     # seconds: the decay's e-folding time ("slowly")
      margin: 0.1            # safety margin, a fraction of the limit
      burst: 0.1             # share of a node's capacity kept back for bursts
      reclaim: [cpu, memory] # resources whose reservations decay
      overcommit:            # may a pod use more than its limit (reservation above it)
        cpu: true            #   compressible: yes
        memory: false        #   not compressible: no
      overload: true         # evict / throttle when a node's pods use more than it holds
      compressible: [cpu]    # throttled first; the others (memory) are evicted at once
      evict_after: 60        # seconds a compressible overload lasts before evictions

Overload handling (``core/overload.py``, the dispatcher's
``services/dispatch/overload.py``) acts only with ``enabled`` and ``overload`` both
true, on the resources in ``reclaim``.

Every service that folds the log must use the same section (like ``bands:``): the
CLI reads it from the config file once (:func:`use_reclamation`) and every
``ClusterState()`` of the process starts with it (:func:`current_reclamation`), so
the replicas, the commit service, the dispatcher, the audit, replay and the
simulator of one process fold alike. Changing ``enabled`` on a state that already
holds pods (a snapshot folded under the other setting, restored into this process)
recomputes every class's limit and each node's sums from the pods' specs; the
reservations restart at their limits, as at binding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_RECLAMATION",
    "ReclamationConfig",
    "ReclamationConfigError",
    "current_reclamation",
    "parse_reclamation",
    "use_reclamation",
]

#: Borg: "after 300 s, to allow for startup transients".
DEFAULT_HOLD_S = 300.0
#: Borg decays "slowly" without a figure: two hold periods per e-fold.
DEFAULT_TIME_CONSTANT_S = 600.0
#: Safety margin above measured usage, as a share of the limit (esched's choice).
DEFAULT_MARGIN = 0.1
#: Share of capacity a node keeps back for bursts (esched's choice; the seed's
#: "整机会预留一个百分比").
DEFAULT_BURST = 0.1
#: Borg evicts on a compressible resource "if things do not improve", without a
#: figure: six 10-second usage reports in a row (esched's choice).
DEFAULT_EVICT_AFTER_S = 60.0


class ReclamationConfigError(ValueError):
    """A ``reclamation:`` section that cannot be used; names the field."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


@dataclass(frozen=True)
class ReclamationConfig:
    """The reservation rule's parameters (see the module docstring)."""

    #: Off by default: every pod is judged by its requests, as kube-scheduler does.
    enabled: bool = False
    hold: float = DEFAULT_HOLD_S
    time_constant: float = DEFAULT_TIME_CONSTANT_S
    margin: float = DEFAULT_MARGIN
    burst: float = DEFAULT_BURST
    reclaim: frozenset[str] = frozenset({"cpu", "memory"})
    overcommit: Mapping[str, bool] = field(default_factory=lambda: {"cpu": True, "memory": False})
    #: Overload handling (core/overload.py) on: evictions and throttles as events.
    overload: bool = True
    #: Resources throttled before anything is evicted (rate-based: cpu).
    compressible: frozenset[str] = frozenset({"cpu"})
    #: Seconds, on the log's clock, a compressible overload lasts before evictions.
    evict_after: float = DEFAULT_EVICT_AFTER_S

    def reclaims(self, resource: str) -> bool:
        """Whether ``resource``'s reservations decay (else reservation = limit)."""
        return self.enabled and resource in self.reclaim

    def overcommits(self, resource: str) -> bool:
        """Whether a pod may use more than its limit of ``resource`` (compressible)."""
        return bool(self.overcommit.get(resource, False))

    def handles_overload(self) -> bool:
        """Whether overloaded nodes get evictions and throttles (core/overload.py)."""
        return self.enabled and self.overload

    def as_dict(self) -> dict[str, Any]:
        """The section as written in a config file (for reports and ``esched replay``)."""
        return {
            "enabled": self.enabled,
            "hold": self.hold,
            "time_constant": self.time_constant,
            "margin": self.margin,
            "burst": self.burst,
            "reclaim": sorted(self.reclaim),
            "overcommit": dict(self.overcommit),
            "overload": self.overload,
            "compressible": sorted(self.compressible),
            "evict_after": self.evict_after,
        }


DEFAULT_RECLAMATION = ReclamationConfig()


def _number(raw: Mapping[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ReclamationConfigError(f"reclamation.{key}", "must be a number")
    if not low <= float(value) <= high:
        raise ReclamationConfigError(f"reclamation.{key}", f"must be within [{low}, {high}]")
    return float(value)


def _flag(raw: Mapping[str, Any], key: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ReclamationConfigError(f"reclamation.{key}", "must be true or false")
    return value


def _names(raw: Mapping[str, Any], key: str, default: frozenset[str]) -> frozenset[str]:
    value = raw.get(key, sorted(default))
    if not isinstance(value, list) or not all(isinstance(r, str) for r in value):
        raise ReclamationConfigError(f"reclamation.{key}", "must be a list of resource names")
    return frozenset(value)


def parse_reclamation(raw: Any) -> ReclamationConfig:
    """The config file's ``reclamation:`` section (None: the defaults)."""
    if raw is None:
        return DEFAULT_RECLAMATION
    if not isinstance(raw, Mapping):
        raise ReclamationConfigError("reclamation", "must be a mapping")
    unknown = set(raw) - {
        "enabled", "hold", "time_constant", "margin", "burst", "reclaim", "overcommit",
        "overload", "compressible", "evict_after",
    }  # fmt: skip
    if unknown:
        raise ReclamationConfigError(f"reclamation.{sorted(unknown)[0]}", "unknown key")
    over = raw.get("overcommit", dict(DEFAULT_RECLAMATION.overcommit))
    if not isinstance(over, Mapping) or not all(isinstance(v, bool) for v in over.values()):
        raise ReclamationConfigError("reclamation.overcommit", "must map resources to true/false")
    tau = _number(raw, "time_constant", DEFAULT_TIME_CONSTANT_S, 1e-3, 1e9)
    return ReclamationConfig(
        enabled=_flag(raw, "enabled", False),
        hold=_number(raw, "hold", DEFAULT_HOLD_S, 0.0, 1e9),
        time_constant=tau,
        margin=_number(raw, "margin", DEFAULT_MARGIN, 0.0, 10.0),
        burst=_number(raw, "burst", DEFAULT_BURST, 0.0, 1.0),
        reclaim=_names(raw, "reclaim", DEFAULT_RECLAMATION.reclaim),
        overcommit={str(k): bool(v) for k, v in over.items()},
        overload=_flag(raw, "overload", True),
        compressible=_names(raw, "compressible", DEFAULT_RECLAMATION.compressible),
        evict_after=_number(raw, "evict_after", DEFAULT_EVICT_AFTER_S, 0.0, 1e9),
    )


_current: list[ReclamationConfig] = [DEFAULT_RECLAMATION]


def use_reclamation(cfg: ReclamationConfig) -> None:
    """Make ``cfg`` the configuration every new ``ClusterState`` of this process starts
    with (the CLI calls it with the config file's section)."""
    _current[0] = cfg


def current_reclamation() -> ReclamationConfig:
    """The configuration a new ``ClusterState`` starts with (see :func:`use_reclamation`)."""
    return _current[0]
