"""Overload handling (Borg, EuroSys 2015, section 5.5 and the Borglet's control loop):
which pods of one node to evict or throttle when their measured usage exceeds what
the node can hold. A pure function of one node and one resource; the one home of
the order, shared by the live service (``services/dispatch/overload.py``), the audit
and the simulator.

The seed's order (Borg: "from lowest to highest priority, until the remaining
reservations can be met"; the survey: "non-production tasks first, then production
tasks above their soft bound"):

1. **non-production** pods, lowest priority first (then larger usage first, then the
   pod key: a total order, so every caller decides alike);
2. **production** pods whose usage exceeds their limit (the soft bound), lowest
   priority first (then larger excess first, then the key).

A production pod within its limit is never a candidate: the scheduler placed it
against its limits, so it is not the cause of the overload.

* **Not compressible** (memory): evict candidates in that order while the node's
  **need** (the sum over its remaining pods of max(usage, reservation)) exceeds its
  capacity, so both the usage and the reservations fit again afterwards.
* **Compressible** (cpu): throttle first, favouring latency-sensitive pods (the seed
  counts every production pod as latency-sensitive): walk the same order and cut
  each candidate's usage just enough, a non-production pod down to at most zero, a
  production pod down to its limit, until the usage fits. Evictions (by the memory
  rule) only when the caller says the overload has lasted (``evict=True``).

Quantities are integers in the core's base units (milli-cpu, bytes). The planner is
per node and per resource over the pods of one node (tens of rows): plain Python.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from esched.core.bands import DEFAULT_BANDS, BandConfig, is_prod

if TYPE_CHECKING:
    from esched.core._state import ClusterState

__all__ = [
    "Episodes",
    "OverloadPlan",
    "PodLoad",
    "Throttle",
    "candidates",
    "log_seconds",
    "log_time",
    "need",
    "node_loads",
    "overloads",
    "plan_overload",
    "usage_by_node",
]


@dataclass(frozen=True, slots=True)
class PodLoad:
    """One running pod of the node, for one resource (base units)."""

    pod: str
    #: Production or monitoring band (Borg's prod; the seed's latency-sensitive).
    prod: bool
    priority: int
    #: The soft bound: the pod's Kubernetes limits, else its requests.
    limit: int
    #: Its reservation (core/_reservations.pxd), = limit until reported.
    reservation: int
    #: Its last reported usage (0 when never reported).
    usage: int


@dataclass(frozen=True, slots=True)
class Throttle:
    """Hold ``pod`` at ``cap`` (its usage was ``usage``)."""

    pod: str
    usage: int
    cap: int


@dataclass(frozen=True, slots=True)
class OverloadPlan:
    """What to do on one node for one resource. Empty when not ``overloaded``."""

    capacity: int
    #: Sum of the pods' usage (before any action).
    usage: int
    #: Sum of max(usage, reservation) (before any action): see :func:`need`.
    need: int
    #: Pods to evict, in order.
    evictions: tuple[str, ...] = ()
    #: Pods to throttle, in order (compressible resources only).
    throttles: tuple[Throttle, ...] = ()

    @property
    def overloaded(self) -> bool:
        """Whether the pods use more than the node's capacity."""
        return self.usage > self.capacity


def need(rows: Iterable[PodLoad]) -> int:
    """What the pods need of the node: the sum of max(usage, reservation). An eviction
    for overload is needed while this exceeds the capacity (the audit's check)."""
    return sum(max(r.usage, r.reservation) for r in rows)


def candidates(rows: Iterable[PodLoad]) -> list[PodLoad]:
    """The pods that may be evicted or throttled, in the seed's order (module
    docstring); production pods within their limits are not among them."""
    nonprod = sorted((r for r in rows if not r.prod), key=lambda r: (r.priority, -r.usage, r.pod))
    over = sorted(
        (r for r in rows if r.prod and r.usage > r.limit),
        key=lambda r: (r.priority, r.limit - r.usage, r.pod),
    )
    return nonprod + over


def plan_overload(
    capacity: int,
    rows: Sequence[PodLoad],
    *,
    compressible: bool,
    evict: bool = False,
) -> OverloadPlan:
    """The evictions and throttles that bring one node's resource back within
    ``capacity`` (module docstring for the order and the rules).

    :param capacity: the node's allocatable amount of the resource.
    :param rows: the node's running pods (any order).
    :param compressible: cpu-like (throttle first) rather than memory-like (evict).
    :param evict: for a compressible resource, the overload has lasted: evict too
        (ignored for a non-compressible one, which always evicts).
    """
    used = sum(r.usage for r in rows)
    needed = need(rows)
    plan = OverloadPlan(capacity, used, needed)
    if used <= capacity:
        return plan
    order = candidates(rows)
    evicted: list[str] = []
    if not compressible or evict:
        left = needed
        for r in order:
            if left <= capacity:
                break
            evicted.append(r.pod)
            left -= max(r.usage, r.reservation)
            used -= r.usage
    throttles: list[Throttle] = []
    if compressible:
        gone = set(evicted)
        excess = used - capacity
        for r in order:
            if excess <= 0:
                break
            if r.pod in gone:
                continue
            floor = r.limit if r.prod else 0
            cut = min(excess, r.usage - floor)
            if cut > 0:
                throttles.append(Throttle(r.pod, r.usage, r.usage - cut))
                excess -= cut
    return OverloadPlan(capacity, plan.usage, needed, tuple(evicted), tuple(throttles))


class Episodes:
    """Overload episodes on the log's clock, per (node, resource): the one rule for
    when a compressible overload "has lasted" (Borg: evict "if things do not
    improve"), shared by the dispatcher and the simulator.

    An episode starts at the first usage report after which the node's pods use more
    than its capacity (:meth:`observe` with ``overloaded=True``; its ``clock`` is
    that report's) and ends at the first report after which they fit again. A caller
    that takes over an episode it did not see begin (a new dispatcher leader)
    :meth:`resume` it from the ``since`` of the episode's throttles in the log.
    """

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since: dict[tuple[str, str], float] = {}

    def observe(self, key: tuple[str, str], overloaded: bool, clock: float) -> float | None:
        """Note the state of ``key`` after a report at ``clock``: the episode's start
        if overloaded (``clock`` if this report begins it), else None (and it ends)."""
        if not overloaded:
            self._since.pop(key, None)
            return None
        return self._since.setdefault(key, clock)

    def resume(self, key: tuple[str, str], since: float) -> None:
        """Take over an episode of ``key`` that began at ``since`` (the earlier start
        wins: one episode is one episode, however it was learnt)."""
        now = self._since.get(key)
        self._since[key] = since if now is None else min(now, since)

    def since(self, key: tuple[str, str]) -> float | None:
        """When the current episode of ``key`` began (None: not overloaded)."""
        return self._since.get(key)

    def lasted(self, key: tuple[str, str], clock: float, evict_after: float) -> bool:
        """Whether the episode of ``key`` has lasted ``evict_after`` seconds at ``clock``."""
        since = self._since.get(key)
        return since is not None and clock - since >= evict_after

    def clear(self) -> None:
        """Forget every episode."""
        self._since.clear()

    def __len__(self) -> int:
        return len(self._since)


def node_loads(
    state: ClusterState, node: int, resource: str, bands: BandConfig | None = None
) -> list[PodLoad]:
    """The rows of :func:`plan_overload` for node slot ``node`` and ``resource``, read
    from a folded state: each running pod's band (under ``bands``, default Borg's
    thresholds), priority, limit, reservation and last reported usage (0 if none)."""
    if resource not in state.res_names:
        return []
    cfg = bands or DEFAULT_BANDS
    r = state.res_names.index(resource)
    rows: list[PodLoad] = []
    for key in state.pods_on_node(node):
        p = state.pod_index[key]
        spec = state.class_specs[state.class_of(p)]
        prio = int(spec["priority"])
        rows.append(
            PodLoad(
                key,
                is_prod(cfg.band_of(prio, spec.get("priorityClassName"))),
                prio,
                int(state.pod_limit(p)[r]),
                int(state.pod_reservation(p)[r]),
                int((state.pod_usage.get(key) or {}).get(resource, 0)),
            )
        )
    return rows


#: Up to this many nodes, :func:`usage_by_node` reads their pods rather than every
#: pod's report.
_FEW_NODES = 8


def usage_by_node(state: ClusterState, nodes: Iterable[int]) -> dict[int, dict[str, int]]:
    """The summed last reported usage of the running pods of each node slot in
    ``nodes``, by resource name: one pass over the reports, so a caller checks many
    nodes before reading the few overloaded ones' rows (:func:`node_loads`)."""
    want: dict[int, dict[str, int]] = {n: {} for n in nodes}
    if not want:
        return want
    usage = state.pod_usage
    if len(want) <= _FEW_NODES:
        # A report naming a node or two (a node agent's): its pods only, not every
        # report in the state (pods_on_node is one vector pass over the pod table).
        for n, sums in want.items():
            for key in state.pods_on_node(n):
                for name, units in (usage.get(key) or {}).items():
                    sums[name] = sums.get(name, 0) + units
        return want
    index = state.pod_index
    for key, used in usage.items():
        p = index.get(key)
        if p is None:
            continue
        row = want.get(state.node_of(p))
        if row is not None:
            for name, units in used.items():
                row[name] = row.get(name, 0) + units
    return want


def overloads(
    state: ClusterState, nodes: Iterable[int], resources: Iterable[str]
) -> Iterator[tuple[int, str, bool]]:
    """(slot, resource, whether the node's pods use more than its allocatable) for
    node slots ``nodes`` and each of ``resources`` the state has, on the state as it
    is now: the one overload test, before any node's rows are read (the dispatcher's
    episodes and plan, ``esched bench usage``)."""
    resources = list(resources)
    allocatable = state.node_allocatable()
    for n, used in usage_by_node(state, nodes).items():
        for resource in resources:
            r = state.res_index.get(resource)
            if r is not None:
                yield n, resource, used.get(resource, 0) > int(allocatable[n, r])


def log_time(clock: float) -> str:
    """The log's clock (``ClusterState.clock``, seconds since the epoch) as an event
    ``time`` or an overload's ``since``."""
    return datetime.fromtimestamp(clock, UTC).isoformat().replace("+00:00", "Z")


def log_seconds(text: Any) -> float | None:
    """:func:`log_time` read back (None if not an RFC 3339 time)."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
