"""Volcano queues: deserved shares by weighted water-filling, dominant share, order.

Pure functions over plain dicts (resource name -> integer base units), so the
dispatcher, replay, audit and the tests use exactly the same arithmetic.

**Deserved** (Volcano's proportion/capacity plugins, per resource independently).
Siblings share their parent's deserved; top-level queues share the cluster's
allocatable. Within one set of siblings, queue ``i`` gets::

    deserved_i = clamp(weight_i * L, floor_i, cap_i)

with one water level ``L`` chosen so that the siblings' deserved add up to the
amount shared (or every queue is at its cap). ``cap_i`` is the smallest of the
queue's ``capability``, its ``spec.deserved`` (when set: what it asks for when
the cluster has enough) and, when demands are given, its demand (allocated plus
waiting requests: an idle queue lends its share to busy ones); ``floor_i`` is its
``guarantee`` (a guarantee raises the cap too: it is never cut). If the
guarantees alone exceed the amount, every queue gets its guarantee. Integer
units: the level is exact (a :class:`~fractions.Fraction`), each share is
rounded down and the leftover units go to the largest remainders, ties by name,
so the result is deterministic and adds up exactly.

**Hierarchy**: ``parent`` is the parent queue's name or a dotted path whose last
segment names it (``root.eng`` -> ``eng``); ``root`` (or no parent) is the
cluster. A parent named but not declared is an implicit queue of weight 1 with
no limits. Jobs belong in leaf queues; a parent's own pods compete as one more
child (``QueueTree.SELF``) of weight 1 and no limits.

**Hierarchy from annotations** (``--queue-hierarchy annotations``; off by default, as
Volcano reads them only in its drf plugin with ``enableHierarchy``): a queue's place
is its ``volcano.sh/hierarchy`` path (``root/eng/prod``) and its weight at each level
the matching segment of ``volcano.sh/hierarchy-weights`` (``1/2/8``: ``eng`` weighs 2
among root's children, ``prod`` 8 among ``eng``'s); ``spec.parent`` and
``spec.weight`` are then not read. Path prefixes no queue names are intermediate
queues (named by the path, ``root/eng``) with no limits, weighted by the first queue
(by name) that passes through them, as Volcano's hdrf builds its tree. A queue
without both annotations, or whose weights do not match its path segment for
segment, sits under root with its ``spec.weight``. See :func:`hierarchy_specs`.

**Share**: ``allocated / deserved`` of the dominant resource (the largest ratio;
a resource with nothing deserved but something allocated counts 1), ignoring
the ``pods`` count.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np

from esched.core.phases import PHASE_PENDING
from esched.schemas.objects import DEFAULT_QUEUE

__all__ = [
    "DEFAULT_QUEUE",
    "NODE_GROUP_LABEL",
    "QUEUE_HIERARCHIES",
    "ROOT",
    "QueueSpec",
    "QueueTree",
    "allocation_order_key",
    "check_hierarchy",
    "cluster_allocatable",
    "deserved",
    "deserved_room",
    "dominant_share",
    "hierarchy_specs",
    "node_group_terms",
    "parent_name",
    "queue_view",
    "state_queue_specs",
    "summary_view",
    "water_fill",
]

ROOT = "root"
#: Resources left out of the dominant share (a count, not a capacity).
SHARE_IGNORED = frozenset({"pods"})
#: The node label naming a node's group, as Volcano's nodegroup plugin reads it.
NODE_GROUP_LABEL = "volcano.sh/nodegroup-name"
#: Where the queue tree comes from: ``spec.parent`` (Volcano's proportion and
#: capacity plugins; the default) or the hdrf annotations (``volcano.sh/hierarchy``).
QUEUE_HIERARCHIES = ("parent", "annotations")

Resources = Mapping[str, int]


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """The fields of a queue that the arithmetic reads (see ``ClusterState.queue_meta``)."""

    name: str
    weight: int = 1
    priority: int = 0
    parent: str | None = None
    capability: Mapping[str, int] = field(default_factory=dict)
    deserved: Mapping[str, int] = field(default_factory=dict)
    guarantee: Mapping[str, int] = field(default_factory=dict)
    reclaimable: bool = True
    state: str = "Open"
    #: ``volcano.sh/hierarchy`` and ``volcano.sh/hierarchy-weights`` as written.
    hierarchy: str | None = None
    hierarchy_weights: str | None = None
    #: ``parent`` is a queue's name as is (not a dotted path): set by
    #: :func:`hierarchy_specs`, whose intermediate queues are named by their path.
    exact_parent: bool = False

    @classmethod
    def from_meta(cls, name: str, meta: Mapping[str, Any]) -> QueueSpec:
        return cls(
            name=name,
            weight=max(1, int(meta.get("weight") or 1)),
            priority=int(meta.get("priority") or 0),
            parent=meta.get("parent") or None,
            capability=dict(meta.get("capability") or {}),
            deserved=dict(meta.get("deserved") or {}),
            guarantee=dict(meta.get("guarantee") or {}),
            reclaimable=bool(meta.get("reclaimable", True)),
            state=str(meta.get("state") or "Open"),
            hierarchy=meta.get("hierarchy"),
            hierarchy_weights=meta.get("hierarchy_weights"),
        )

    def parent_queue(self) -> str | None:
        """The parent queue's name; None = root."""
        if self.exact_parent:
            return self.parent
        return parent_name(self.parent)


def parent_name(parent: str | None) -> str | None:
    """The parent queue's name from ``spec.parent`` (``root.eng`` -> ``eng``); None = root."""
    if not parent:
        return None
    last = parent.rsplit(".", 1)[-1].strip()
    return None if not last or last == ROOT else last


def _annotated_path(s: QueueSpec) -> tuple[list[str], list[int]] | None:
    """(path segments below root, weight per segment) of a queue's hdrf annotations,
    or None when they are missing or do not match segment for segment. As Volcano's
    hdrf: the first segment is the root, a weight below 1 counts 1."""
    if not s.hierarchy or not s.hierarchy_weights:
        return None
    path = s.hierarchy.strip().split("/")
    raw = s.hierarchy_weights.strip().split("/")
    if len(path) != len(raw) or len(path) < 2 or any(not p for p in path):
        return None
    weights = []
    for w in raw[1:]:
        try:
            weights.append(max(1, int(float(w))))
        except ValueError:
            return None
    return path[1:], weights


def check_hierarchy(mode: str) -> str:
    """``mode`` if it is one of :data:`QUEUE_HIERARCHIES`; else ValueError."""
    if mode not in QUEUE_HIERARCHIES:
        raise ValueError(f"queue hierarchy {mode!r}: expected one of {QUEUE_HIERARCHIES}")
    return mode


def hierarchy_specs(specs: Iterable[QueueSpec], mode: str = "parent") -> list[QueueSpec]:
    """The queues as the tree of ``mode`` (one of :data:`QUEUE_HIERARCHIES`) sees them.

    ``parent``: unchanged. ``annotations``: each queue's parent and weight from its
    hdrf annotations, intermediate queues added (see the module doc); every
    returned spec names its parent exactly (``exact_parent``).
    """
    specs = list(specs)
    if check_hierarchy(mode) == "parent":
        return specs
    parsed = {s.name: p for s in specs if (p := _annotated_path(s)) is not None}
    # The queue standing at each path: the first by name when several name one path.
    at_path: dict[tuple[str, ...], str] = {}
    for name in sorted(parsed):
        at_path.setdefault(tuple(parsed[name][0]), name)
    made: dict[str, QueueSpec] = {}

    def node(path: tuple[str, ...], weights: list[int]) -> str | None:
        """The queue at ``path`` (below root), an intermediate one made if none."""
        if not path:
            return None
        if path in at_path:
            return at_path[path]
        key = "/".join((ROOT, *path))
        if key not in made:
            made[key] = QueueSpec(
                name=key,
                weight=weights[len(path) - 1],
                parent=node(path[:-1], weights),
                exact_parent=True,
            )
        return key

    out = []
    for s in sorted(specs, key=lambda s: s.name):
        p = parsed.get(s.name)
        if p is None:
            out.append(replace(s, parent=None, exact_parent=True))
            continue
        path, weights = p
        parent = node(tuple(path[:-1]), weights)
        out.append(replace(s, weight=weights[-1], parent=parent, exact_parent=True))
    return out + [made[k] for k in sorted(made)]


def water_fill(
    amount: int,
    weights: Mapping[str, int],
    caps: Mapping[str, int | None],
    floors: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """Share ``amount`` units among ``weights``' keys: ``clamp(w * L, floor, cap)``.

    ``caps[k]`` None means no cap. A floor above its cap raises the cap. Returns
    integer shares that add up to ``min(amount, sum of caps)``, or to the sum of
    the floors when those alone exceed ``amount``.
    """
    floors = floors or {}
    names = sorted(weights)
    lo = {k: max(0, int(floors.get(k, 0))) for k in names}
    hi: dict[str, int | None] = {}
    for k in names:
        c = caps.get(k)
        hi[k] = None if c is None else max(int(c), lo[k])
    if sum(lo.values()) >= amount:
        return lo
    capped_total = sum(v for v in hi.values() if v is not None)
    if all(v is not None for v in hi.values()) and capped_total <= amount:
        return {k: int(hi[k]) for k in names}  # type: ignore[arg-type]

    def filled(level: Fraction) -> Fraction:
        total = Fraction(0)
        for k in names:
            v = max(Fraction(lo[k]), weights[k] * level)
            if (cap := hi[k]) is not None:
                v = min(v, Fraction(cap))
            total += v
        return total

    # Breakpoints of the piecewise-linear fill(L): where a queue leaves its floor or
    # reaches its cap. Between two of them the fill is linear in L; solve exactly.
    points = sorted(
        {Fraction(lo[k], weights[k]) for k in names}
        | {Fraction(cap, weights[k]) for k in names if (cap := hi[k]) is not None}
    )
    prev = Fraction(0)
    level: Fraction | None = None
    for p in points:
        if filled(p) >= amount:
            level = _solve(prev, p, amount, filled)
            break
        prev = p
    if level is None:
        # Past the last breakpoint only uncapped queues still grow (slope = their weights).
        slope = sum(weights[k] for k in names if hi[k] is None)
        level = prev + (amount - filled(prev)) / slope
    exact = {}
    for k in names:
        v = max(Fraction(lo[k]), weights[k] * level)
        if (cap := hi[k]) is not None:
            v = min(v, Fraction(cap))
        exact[k] = v
    out = {k: int(v) for k, v in exact.items()}  # floor (non-negative)
    left = amount - sum(out.values())
    # Leftover units from rounding down go to the largest remainders (ties by name),
    # never above a cap.
    order = sorted(names, key=lambda k: (-(exact[k] - out[k]), k))
    for k in order:
        if left <= 0:
            break
        if exact[k] != out[k] and ((cap := hi[k]) is None or out[k] < cap):
            out[k] += 1
            left -= 1
    return out


def _solve(a: Fraction, b: Fraction, amount: int, filled) -> Fraction:
    """The level in [a, b] where the (linear on [a, b]) fill equals ``amount``."""
    fa, fb = filled(a), filled(b)
    if fb == fa:
        return b
    return a + (b - a) * (amount - fa) / (fb - fa)


class QueueTree:
    """Queues arranged by ``parent``: children, cycles broken, implicit parents added."""

    #: The pseudo-child standing for a parent queue's own pods.
    SELF = "(self)"

    def __init__(self, specs: Iterable[QueueSpec]) -> None:
        self.specs: dict[str, QueueSpec] = {s.name: s for s in specs}
        self.problems: list[str] = []
        for s in list(self.specs.values()):
            p = s.parent_queue()
            if p is not None and p not in self.specs:
                self.specs[p] = QueueSpec(name=p)
        self.parent: dict[str, str | None] = {}
        for name, s in self.specs.items():
            p = s.parent_queue()
            self.parent[name] = None if p == name else p
        for name in sorted(self.specs):
            seen = {name}
            p = self.parent[name]
            while p is not None:
                if p in seen:
                    self.problems.append(f"queue {name!r}: parent cycle; treated as top-level")
                    self.parent[name] = None
                    break
                seen.add(p)
                p = self.parent[p]
        self.children: dict[str | None, list[str]] = {}
        for name in sorted(self.specs):
            self.children.setdefault(self.parent[name], []).append(name)

    def path(self, name: str) -> str:
        """``root.eng.dev`` for queue ``dev`` under ``eng``; ``root/eng/dev`` (the
        annotation) in a tree from :func:`hierarchy_specs` ``annotations``."""
        s = self.specs.get(name)
        if s is not None and s.exact_parent:
            annotated = _annotated_path(s)
            if annotated is not None:
                return "/".join((ROOT, *annotated[0]))
            return name if name.startswith(ROOT + "/") else f"{ROOT}/{name}"
        parts = [name]
        p = self.parent.get(name)
        while p is not None:
            parts.append(p)
            p = self.parent[p]
        return ".".join([ROOT, *reversed(parts)])


def deserved(
    specs: Iterable[QueueSpec], cluster: Resources, demand: Mapping[str, Resources] | None = None
) -> dict[str, dict[str, int]]:
    """Deserved resources per queue (see the module doc), for every resource of ``cluster``.

    ``demand``: queue -> allocated plus waiting requests; None = no demand cap (the
    static entitlement). Implicit parents appear in the result too.
    """
    tree = QueueTree(specs)
    demand = demand or {}
    # A parent's demand is its children's plus its own pods'.
    total_demand: dict[str, dict[str, int]] = {}

    def subtree_demand(name: str) -> dict[str, int]:
        if name in total_demand:
            return total_demand[name]
        d = dict(demand.get(name) or {})
        for c in tree.children.get(name, ()):
            for r, v in subtree_demand(c).items():
                d[r] = d.get(r, 0) + v
        total_demand[name] = d
        return d

    out: dict[str, dict[str, int]] = {}

    def share(amounts: Mapping[str, int], members: list[str], own: str | None) -> None:
        specs_of = {m: tree.specs[m] for m in members}
        weights = {m: s.weight for m, s in specs_of.items()}
        if own is not None and demand.get(own):
            weights[QueueTree.SELF] = 1
        result: dict[str, dict[str, int]] = {m: {} for m in weights}
        for r, amount in amounts.items():
            caps: dict[str, int | None] = {}
            floors: dict[str, int] = {}
            for m in weights:
                if m == QueueTree.SELF:
                    # SELF is a member only when own is (see weights above)
                    caps[m] = (
                        (demand.get(own) or {}).get(r, 0) if demand and own is not None else None
                    )
                    continue
                s = specs_of[m]
                cap = _min_opt(s.capability.get(r), s.deserved.get(r))
                if demand:
                    cap = _min_opt(cap, subtree_demand(m).get(r, 0))
                caps[m] = cap
                floors[m] = s.guarantee.get(r, 0)
            for m, v in water_fill(int(amount), weights, caps, floors).items():
                result[m][r] = v
        for m in members:
            out[m] = result[m]
            kids = tree.children.get(m)
            if kids:
                share(out[m], kids, m)

    share(dict(cluster), tree.children.get(None, []), None)
    return out


def _min_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def dominant_share(allocated: Resources, deserved_: Resources) -> float:
    """``max_r allocated[r] / deserved[r]`` (1 where nothing is deserved but some allocated)."""
    best = 0.0
    for r, a in allocated.items():
        if a <= 0 or r in SHARE_IGNORED:
            continue
        d = deserved_.get(r, 0)
        s = a / d if d > 0 else 1.0
        if s > best:
            best = s
    return best


def allocation_order_key(
    queue_priority: int, share: float, job_priority: int, submitted: int
) -> tuple[int, float, int, int]:
    """Sort key of pending work: queue priority (high first), then the queue's share
    (low first; the weights act through deserved), then job priority (high first),
    then submission order (early first)."""
    return (-queue_priority, share, -job_priority, submitted)


def node_group_terms(affinity: Mapping[str, Any] | None) -> dict[str, list[str]] | None:
    """``spec.affinity`` of a Queue -> ``{"required", "preferred", "anti"}`` group lists
    (only non-empty ones), or None when the queue constrains nothing."""
    if not affinity:
        return None
    aff = affinity.get("nodeGroupAffinity") or {}
    anti = affinity.get("nodeGroupAntiAffinity") or {}
    out = {
        "required": sorted(set(aff.get("requiredDuringSchedulingIgnoredDuringExecution") or ())),
        "preferred": sorted(set(aff.get("preferredDuringSchedulingIgnoredDuringExecution") or ())),
        "anti": sorted(set(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or ())),
    }
    out = {k: v for k, v in out.items() if v}
    return out or None


# ---------------------------------------------------------------------- state views


def _state_arrays(state: Any) -> tuple[list[str], Any, Any]:
    """(resource names, per-queue allocated [q, r], per-queue pending requests [q, r])."""
    alloc = np.asarray(state.queue_allocations(), dtype=np.int64)
    waiting = np.zeros(alloc.shape, dtype=np.int64)
    pending = state.pods_in_phase(PHASE_PENDING)
    if pending.size:
        req = np.asarray(state.class_requests(), dtype=np.int64)[state.pod_classes()[pending]]
        np.add.at(waiting, state.pod_queues()[pending], req)
    return list(state.res_names[: state.n_res]), alloc, waiting


def cluster_allocatable(state: Any) -> dict[str, int]:
    """Allocatable resources of the alive nodes, summed."""
    # A product with the alive flags (exact in int64) instead of summing the rows a
    # mask selects: the mask's copy and the strided sum cost the dispatcher ~700,000
    # instructions per release with gangs on 2,000 nodes, 4x the product.
    total = state.node_alive().astype(np.int64) @ state.node_allocatable()
    return {state.res_names[r]: int(total[r]) for r in range(state.n_res)}


def state_queue_specs(state: Any, hierarchy: str = "parent") -> list[QueueSpec]:
    """The state's queues, in queue-row order, as :class:`QueueSpec` (for the tree
    of ``hierarchy``, see :func:`hierarchy_specs`; intermediate queues follow the
    rows)."""
    rows = [
        QueueSpec.from_meta(state.queue_names[q], state.queue_meta[q])
        for q in range(state.n_queues)
    ]
    if hierarchy == "parent":
        return rows
    by_name = {s.name: s for s in hierarchy_specs(rows, hierarchy)}
    ordered = [by_name.pop(s.name) for s in rows]
    return ordered + [by_name[k] for k in sorted(by_name)]


def deserved_room(state: Any, hierarchy: str = "parent") -> dict[int, np.ndarray] | None:
    """Per leaf queue row, its deserved share less what it holds, per resource column
    (ignored columns, :data:`SHARE_IGNORED`, unbounded): what it may still take while
    another queue waits (Volcano's proportion ``allocatable``). None when fewer than
    two queues have pending pods (a queue alone takes what is free). ``hierarchy``:
    where the queue tree comes from (:data:`QUEUE_HIERARCHIES`)."""
    names, alloc, waiting = _state_arrays(state)
    if int(np.count_nonzero(waiting.any(axis=1))) < 2:
        return None
    specs = state_queue_specs(state, hierarchy)
    rows = specs[: state.n_queues]
    demand = {
        s.name: {names[r]: int(alloc[q, r] + waiting[q, r]) for r in range(len(names))}
        for q, s in enumerate(rows)
    }
    fair = deserved(specs, cluster_allocatable(state), demand)
    tree = QueueTree(specs)
    big = np.iinfo(np.int64).max // 4
    out: dict[int, np.ndarray] = {}
    for q, s in enumerate(rows):
        if tree.children.get(s.name):
            continue  # a parent's share is its children's
        f = fair.get(s.name) or {}
        room = np.array([int(f.get(n, 0)) for n in names], dtype=np.int64) - alloc[q]
        for r, n in enumerate(names):
            if n in SHARE_IGNORED:
                room[r] = big
        out[q] = room
    return out


def queue_view(state: Any, hierarchy: str = "parent") -> dict[str, dict[str, Any]]:
    """Per queue of a ClusterState: ``path``, ``fairShare`` (deserved now: water-filled
    and capped by demand = allocated + waiting), ``allocated``, ``waiting`` and
    ``share`` (dominant, against ``fairShare``); the tree of ``hierarchy``
    (:data:`QUEUE_HIERARCHIES`; its intermediate queues are not listed)."""
    names, alloc, waiting = _state_arrays(state)
    specs = state_queue_specs(state, hierarchy)
    rows = specs[: state.n_queues]
    allocated = {
        s.name: {names[r]: int(alloc[q, r]) for r in range(len(names)) if alloc[q, r]}
        for q, s in enumerate(rows)
    }
    wait = {
        s.name: {names[r]: int(waiting[q, r]) for r in range(len(names)) if waiting[q, r]}
        for q, s in enumerate(rows)
    }
    demand = {
        k: {r: allocated[k].get(r, 0) + wait[k].get(r, 0) for r in set(allocated[k]) | set(wait[k])}
        for k in allocated
    }
    fair = deserved(specs, cluster_allocatable(state), demand)
    tree = QueueTree(specs)
    out = {}
    for s in rows:
        d = {r: v for r, v in sorted(fair.get(s.name, {}).items()) if v}
        out[s.name] = {
            "path": tree.path(s.name),
            "fairShare": d,
            "allocated": dict(sorted(allocated[s.name].items())),
            "waiting": dict(sorted(wait[s.name].items())),
            "share": round(dominant_share(allocated[s.name], fair.get(s.name, {})), 6),
        }
    return out


def summary_view(
    queues: dict[str, dict[str, Any]], state: Any, hierarchy: str = "parent"
) -> dict[str, dict[str, Any]]:
    """``queues`` (``ClusterState.summary()["queues"]``, whose ``path``, ``fairShare``
    and ``share`` come from the ``spec.parent`` tree) with those three from the tree
    of ``hierarchy`` instead; updated in place and returned."""
    if hierarchy == "parent":
        return queues
    view = queue_view(state, hierarchy)
    for name, entry in queues.items():
        if name in view:
            entry.update({k: view[name][k] for k in ("path", "fairShare", "share")})
    return queues
