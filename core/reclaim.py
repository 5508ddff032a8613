"""Volcano's reclaim: a queue below its deserved share takes back room from queues above theirs.

Volcano's reclaim action with its proportion plugin (``pkg/scheduler/actions/reclaim``,
``pkg/scheduler/plugins/proportion``): a pending pod that fits no node as things are
may evict running pods of other queues when

* the reclaiming queue may take the pod: what it holds plus the pod's requests stays
  within its deserved share (:func:`esched.core.queues.queue_view` ``fairShare``) in
  every resource the pod asks for (proportion's ``Preemptive``, the same check as its
  ``allocatable``), and its ``preemptionPolicy`` is not ``Never``;
* each victim's queue is ``reclaimable``, is not the reclaiming queue, and holds more
  than its deserved share in some resource before the eviction (counting the victims
  already chosen: proportion's ``Reclaimable``); it keeps its ``guarantee`` (after
  the eviction it still holds at least the guaranteed amount of every guaranteed
  resource; capacity's ``checkGuaranteeConstraint``);
* the victim pod is preemptable: ``volcano.sh/preemptable: "false"`` (annotation or
  label) keeps it running;
* a victim that is a gang member is taken only while its gang keeps ``minMember``
  running, and each task of a Volcano Job keeps its ``minAvailable``
  (``minTaskMember``; the gang plugin's ``Reclaimable``): a gang is never split (the
  commit service would refuse it, ``VictimGangSplit``), and nodes reserved for a
  starving gang are left alone.

**Queue priority** orders, it does not permit: the dispatcher tries the queues of
higher ``priority`` first (Volcano's ``QueueOrderFn``), and victims are taken from the
queues of lowest priority first, then lowest pod priority, then slot (deterministic).
A queue of lower priority may reclaim what a queue of higher priority holds above its
deserved share, as Volcano's ``reclaim_test.go`` ("different queue priority") expects;
the Volcano seed describes queue priority as absolute (a higher-priority queue
reclaims from a lower one whatever the shares). esched follows Volcano here: its
scheduler is what runs these objects, its deserved share is the one line both
allocation and reclaim respect, so pods only ever move from a queue above its share
to one that stays within its own (no back and forth), whatever the priorities.

Victims are chosen per node in that order until the pod fits; among nodes the plan
with the lowest highest-victim priority, then the fewest victims, then the lowest node
slot wins. The plan is a proposal like a preemption (``victims`` plus the pod's
binding, one transaction, with ``"reclaim": true``); the commit service re-checks
legality with :func:`victims_legal` against its authoritative state.

**hdrf** (``--queue-hierarchy annotations``: Volcano's drf plugin with
``enableHierarchy``, which registers a ``reclaimableFn`` in the tier of proportion's):
a victim must also be one hdrf's reclaim gives, :meth:`esched.core.hdrf.HdrfTree.
reclaimable`, judged per victim as Volcano's tier intersects its plugins' victims
(the reclaimer's queue strictly before the victim's once the reclaimer holds its
request and the victim's job no longer holds the victim's).

**Gangs** (:func:`plan_gang_reclaim`) reclaim all or nothing: the members the gang
still needs to reach ``minMember`` are placed one after the other on a scratch
overlay (free room, then victims chosen as for a pod, counting the victims and
members already planned); if any of them cannot be placed even with reclaim,
nothing is planned and nothing is evicted. The proposal binds those members and
names every victim, as one transaction (``"gang"`` set), so the commit service
accepts it whole (the gang then runs at ``minMember``) or not at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from esched.core.hdrf import HdrfTree, state_tree
from esched.core.phases import PHASE_PENDING, PHASE_RUNNING
from esched.core.queues import DEFAULT_QUEUE, SHARE_IGNORED, queue_view
from esched.core.reasons import is_resource_text
from esched.core.schedule import member_task

__all__ = [
    "GangReclaimPlan",
    "ReclaimPlan",
    "may_reclaim",
    "plan_gang_reclaim",
    "plan_reclaim",
    "reclaim_order",
    "victim_ok",
    "victims_legal",
]


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    """Bind ``pod`` to ``node`` after evicting ``victims`` (pod keys, all on ``node``)."""

    pod: str
    queue: str
    node: str
    victims: tuple[str, ...]

    def proposal(
        self, proposal_id: str, position: int, requests: dict[str, int], replica: str = "dispatch"
    ) -> dict[str, Any]:
        """The proposal ``data``: the pod's binding plus its victims, marked reclaim."""
        return {
            "proposal": proposal_id,
            "replica": replica,
            "position": position,
            "gang": None,
            "reclaim": True,
            "bindings": [{"pod": self.pod, "node": self.node, "resources": requests}],
            "victims": [{"pod": v, "node": self.node} for v in self.victims],
        }


@dataclass(frozen=True, slots=True)
class GangReclaimPlan:
    """Bind the members ``bindings`` (pod, node) of ``gang`` after evicting ``victims``
    (pod, node): enough members to reach ``minMember``, all or nothing."""

    gang: str
    queue: str
    bindings: tuple[tuple[str, str], ...]
    victims: tuple[tuple[str, str], ...]

    def proposal(
        self,
        proposal_id: str,
        position: int,
        requests: dict[str, dict[str, int]],
        replica: str = "dispatch",
    ) -> dict[str, Any]:
        """The proposal ``data``; ``requests``: member -> its requests."""
        return {
            "proposal": proposal_id,
            "replica": replica,
            "position": position,
            "gang": self.gang,
            "reclaim": True,
            "bindings": [{"pod": p, "node": n, "resources": requests[p]} for p, n in self.bindings],
            "victims": [{"pod": p, "node": n} for p, n in self.victims],
        }


def _alloc_of(state: Any, p: int, names: list[str]) -> dict[str, int]:
    row = state.allocation_of(p)
    return {names[r]: int(row[r]) for r in range(len(names)) if row[r]}


def _sub(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) - v
    return out


def _over(alloc: dict[str, int], fair: dict[str, int]) -> bool:
    """Whether ``alloc`` exceeds ``fair`` in some resource (proportion: not
    ``allocated.LessEqual(deserved)``; the ``pods`` count aside)."""
    return any(v > fair.get(r, 0) for r, v in alloc.items() if r not in SHARE_IGNORED)


def victim_ok(
    queue: str, meta: dict, alloc: dict[str, int], fair: dict[str, int], victim: dict[str, int]
) -> str | None:
    """Why evicting ``victim`` from ``queue`` (holding ``alloc``) is illegal, or None."""
    if not meta.get("reclaimable", True):
        return f"queue {queue} is not reclaimable"
    if not _over(alloc, fair):
        return f"queue {queue} is not above its deserved share"
    after = _sub(alloc, victim)
    for r, g in (meta.get("guarantee") or {}).items():
        if victim.get(r, 0) and after.get(r, 0) < g:
            return f"queue {queue} would fall below its guarantee of {r}"
    return None


def _preemptive(
    queue: str, held: dict[str, int], fair: dict[str, int], req: dict[str, int]
) -> str | None:
    """Why ``queue`` (holding ``held``) may not reclaim for ``req``, or None: it must stay
    within its deserved share in every resource asked for (proportion's
    ``Preemptive``)."""
    for r, v in req.items():
        if v > 0 and r not in SHARE_IGNORED and held.get(r, 0) + v > fair.get(r, 0):
            return (
                f"queue {queue} would exceed its deserved share of {r} "
                f"({held.get(r, 0) + v} > {fair.get(r, 0)})"
            )
    return None


def _requests(state: Any, slots: Iterable[int], names: list[str]) -> dict[str, int]:
    req = np.zeros(len(names), dtype=np.int64)
    cls = state.class_requests()
    for p in slots:
        req += cls[state.class_of(int(p))][: len(names)]
    return {names[r]: int(req[r]) for r in range(len(names)) if req[r]}


def _reclaimer(state: Any, who: str | Iterable[str]) -> tuple[str | None, list[int], str | None]:
    """(queue, pod slots it would bind, None) of the reclaiming pod, gang (key: the
    pending members it needs to reach minMember) or pods (all in one queue), or (None,
    [], why not)."""
    if isinstance(who, str):
        idx = state.pod_index.get(who)
        if idx is not None:
            return state.queue_names[state.queue_of(idx)], [int(idx)], None
        g = state.gang_index.get(who)
        if g is None:
            return None, [], f"pod {who} is not in the log"
        members = np.flatnonzero(state.pod_gangs() == g)
        if not len(members):
            return str(state.gang_meta[g].get("queue") or DEFAULT_QUEUE), [], None
        pending = [int(p) for p in members if state.phase_of(int(p)) == PHASE_PENDING]
        need = max(1, state.gang_min_of(g) - state.gang_count(g, PHASE_RUNNING))
        return state.queue_names[state.queue_of(members[0])], pending[:need], None
    queues = set()
    slots = []
    for pod in who:
        idx = state.pod_index.get(pod)
        if idx is None:
            return None, [], f"pod {pod} is not in the log"
        queues.add(state.queue_names[state.queue_of(idx)])
        slots.append(int(idx))
    if len(queues) != 1:
        return None, [], f"a reclaim is for one queue, its pods are in {sorted(queues)}"
    return queues.pop(), slots, None


def victims_legal(
    state: Any,
    pod: str | Iterable[str],
    victims: Iterable[str],
    view: dict[str, dict[str, Any]] | None = None,
    taken: Iterable[str] = (),
    hierarchy: str = "parent",
) -> str | None:
    """Why reclaiming ``victims`` for ``pod`` is illegal now, or None if legal.

    ``pod``: the pending pod, a gang's key, or the pods a proposal binds (a gang's
    members: one queue). ``taken``: running pods already evicted by earlier decisions
    of the same batch (their queues hold that much less). ``hierarchy``
    ``annotations``: each victim must also be one hdrf gives for one of the pods
    bound (see the module doc).
    """
    view = view if view is not None else queue_view(state)
    q, slots, why = _reclaimer(state, pod)
    if q is None:
        return why
    names = list(state.res_names[: state.n_res])
    held = {name: dict(v["allocated"]) for name, v in view.items()}
    for t in taken:
        tidx = state.pod_index.get(t)
        if tidx is not None and state.phase_of(tidx) == PHASE_RUNNING:
            tq = state.queue_names[state.queue_of(tidx)]
            held[tq] = _sub(held[tq], _alloc_of(state, int(tidx), names))
    own = [int(p) for p in slots if state.phase_of(int(p)) == PHASE_PENDING]
    why = _preemptive(q, held[q], view[q]["fairShare"], _requests(state, own, names))
    if why is not None:
        return why
    not_preemptable = state.not_preemptable
    hdrf = _HdrfVictims(state) if hierarchy == "annotations" and own else None
    for v in victims:
        vidx = state.pod_index.get(v)
        if vidx is None:
            return f"victim {v} is not in the log"
        vq = state.queue_names[state.queue_of(vidx)]
        if vq == q:
            return f"victim {v} is in the reclaiming queue {q}"
        if not_preemptable and v in not_preemptable:
            return f"victim {v} is not preemptable (volcano.sh/preemptable: false)"
        alloc = _alloc_of(state, int(vidx), names)
        why = victim_ok(
            vq, state.queue_meta[state.queue_index[vq]], held[vq], view[vq]["fairShare"], alloc
        )
        if why is not None:
            return f"victim {v}: {why}"
        if hdrf is not None and not any(hdrf.ok(p, int(vidx)) for p in own):
            return f"victim {v}: queue {q} does not come before queue {vq} in hdrf's order"
        held[vq] = _sub(held[vq], alloc)
    return None


class _HdrfVictims:
    """hdrf's reclaim rule over one state (``--queue-hierarchy annotations``): whether
    a running pod may be evicted for a reclaiming task, cached per (reclaimer's job
    and class, victim's job and class)."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.tree: HdrfTree = state_tree(state)
        self.nr = int(state.n_res)
        self._memo: dict[tuple[Any, ...], bool] = {}

    def _job(self, p: int) -> str | None:
        g = self.state.gang_of(p)
        return None if g < 0 else f"gang:{self.state.gang_keys[g]}"

    def ok(self, reclaimer: int, victim: int) -> bool:
        """Whether pod slot ``victim`` is a victim hdrf gives for pending slot
        ``reclaimer``."""
        st = self.state
        q, vq = st.queue_names[st.queue_of(reclaimer)], st.queue_names[st.queue_of(victim)]
        job, vjob = self._job(reclaimer), self._job(victim)
        cid = st.class_of(reclaimer)
        key = (q, job, cid, vq, vjob, st.class_of(victim))
        got = self._memo.get(key)
        if got is None:
            req = np.asarray(st.class_requests()[cid][: self.nr], dtype=np.float64)
            held = np.asarray(st.allocation_of(victim)[: self.nr], dtype=np.float64)
            got = self._memo[key] = self.tree.reclaimable(q, job, req, vq, vjob, held)
        return got


def _queue_priority(state: Any, name: str) -> int:
    return int(state.queue_meta[state.queue_index[name]].get("priority") or 0)


def may_reclaim(state: Any, queue: str, view: dict[str, dict[str, Any]]) -> bool:
    """Whether pods of ``queue`` could have victims at all: it is not overused (below
    its deserved share in some resource: proportion's ``Overused`` is false) and some
    other queue is above its own."""
    v = view[queue]
    fair, alloc = v["fairShare"], v["allocated"]
    if not any(alloc.get(r, 0) < d for r, d in fair.items() if r not in SHARE_IGNORED):
        return False
    return any(_over(w["allocated"], w["fairShare"]) for name, w in view.items() if name != queue)


def reclaim_order(
    state: Any, view: dict[str, dict[str, Any]]
) -> dict[str, tuple[int, float, str]] | None:
    """Sort key per queue for trying reclaims (Volcano's ``QueueOrderFn``: queue priority
    high first, then dominant share low first, then name), or None when no reclaim can
    be legal (no queue is above its deserved share)."""
    if not any(_over(v["allocated"], v["fairShare"]) for v in view.values()):
        return None
    return {
        name: (-_queue_priority(state, name), float(v["share"]), name) for name, v in view.items()
    }


def _task_key(state: Any, g: int, pod: str) -> str | None:
    """The task (of a Volcano Job's gang with ``minTaskMember``) ``pod`` belongs to."""
    min_task = state.gang_meta[g].get("minTaskMember") or {}
    if not min_task:
        return None
    got = member_task(state.gang_keys[g], pod)
    return got[0] if got is not None and got[0] in min_task else None


class _Overlay:
    """Free room per node, what each queue holds and which pods are still running, as
    planned victims and bindings change them (nothing is written to the state)."""

    def __init__(
        self,
        state: Any,
        view: dict[str, dict[str, Any]],
        q: int,
        gang: int = -1,
        hdrf: _HdrfVictims | None = None,
    ) -> None:
        self.state = state
        self.hdrf = hdrf
        #: the pending pod slot victims are chosen for (hdrf judges victims per task)
        self.reclaimer = -1
        self.names = list(state.res_names[: state.n_res])
        self.view = view
        self.free = np.asarray(state.node_allocatable(), dtype=np.int64) - np.asarray(
            state.node_allocated(), dtype=np.int64
        )
        self.held = {name: dict(v["allocated"]) for name, v in view.items()}
        qprio = np.array(
            [int(state.queue_meta[i].get("priority") or 0) for i in range(state.n_queues)],
            dtype=np.int64,
        )
        # Queues that may give: reclaimable and above their deserved share now.
        giving = np.array(
            [
                bool(state.queue_meta[i].get("reclaimable", True))
                and _over(
                    view[state.queue_names[i]]["allocated"],
                    view[state.queue_names[i]]["fairShare"],
                )
                for i in range(state.n_queues)
            ],
            dtype=bool,
        )
        pq = state.pod_queues()
        pg = state.pod_gangs()
        cand = np.flatnonzero(
            (state.pod_phases() == PHASE_RUNNING)
            & (pq != q)
            & giving[pq]
            & ((pg != gang) | (gang < 0))
        )
        if state.not_preemptable:
            keys = state.pod_keys
            cand = np.array(
                [p for p in cand if keys[p] not in state.not_preemptable], dtype=np.int64
            )
        # Lowest queue priority first, then lowest pod priority, then slot.
        cand = cand[np.lexsort((cand, state.pod_priorities()[cand], qprio[pq[cand]]))]
        self.by_node: dict[int, list[int]] = {}
        for p in cand:
            self.by_node.setdefault(state.node_of(p), []).append(int(p))
        #: gang id -> running members left after the planned victims
        self.gang_running: dict[int, int] = {}
        #: (gang id, task) -> running members of the task left after the planned victims
        self.task_running: dict[tuple[int, str], int] = {}
        self.gone: set[int] = set()

    def _task_left(self, g: int, task: str) -> int:
        key = (g, task)
        left = self.task_running.get(key)
        if left is None:
            st = self.state
            gang = st.gang_keys[g]
            left = sum(1 for m in st.gang_members(gang, "Running") if _task_key(st, g, m) == task)
        return left

    def victim_ok(self, p: int) -> bool:
        st = self.state
        if self.hdrf is not None and not self.hdrf.ok(self.reclaimer, p):
            return False
        qi = st.queue_of(p)
        vq = st.queue_names[qi]
        if (
            victim_ok(
                vq,
                st.queue_meta[qi],
                self.held[vq],
                self.view[vq]["fairShare"],
                _alloc_of(st, p, self.names),
            )
            is not None
        ):
            return False
        g = st.gang_of(p)
        if g >= 0:
            left = self.gang_running.get(g, st.gang_count(g, PHASE_RUNNING))
            if left - 1 < st.gang_min_of(g):
                return False  # a gang is evicted whole or not at all: never split one
            task = _task_key(st, g, st.pod_keys[p])
            if task is not None:
                minimum = int(st.gang_meta[g]["minTaskMember"][task])
                if self._task_left(g, task) - 1 < minimum:
                    return False  # nor a task below its minAvailable
        return True

    def _evict(self, p: int) -> None:
        """Count ``p`` out of its queue, gang and task (planned, not applied)."""
        st = self.state
        vq = st.queue_names[st.queue_of(p)]
        self.held[vq] = _sub(self.held[vq], _alloc_of(st, p, self.names))
        g = st.gang_of(p)
        if g >= 0:
            self.gang_running[g] = self.gang_running.get(g, st.gang_count(g, PHASE_RUNNING)) - 1
            task = _task_key(st, g, st.pod_keys[p])
            if task is not None:
                self.task_running[(g, task)] = self._task_left(g, task) - 1

    def plan_node(self, n: int, need: np.ndarray) -> list[int] | None:
        """Victims on node ``n`` (in victim order) that make room for ``need``; [] if it
        fits already; None if it cannot be made to fit."""
        st = self.state
        free = self.free[n].copy()
        if np.all(free >= need):
            return []
        saved = (
            {k: dict(v) for k, v in self.held.items()},
            dict(self.gang_running),
            dict(self.task_running),
        )
        chosen: list[int] = []
        try:
            for p in self.by_node.get(n, ()):
                if np.all(free >= need):
                    break
                if p in self.gone or not self.victim_ok(p):
                    continue
                units = np.asarray(st.allocation_of(p), dtype=np.int64)
                # Only a victim that frees some resource the pod is still short of helps.
                if not np.any((need > free) & (units > 0)):
                    continue
                chosen.append(p)
                self._evict(p)
                free = free + units
        finally:
            self.held, self.gang_running, self.task_running = saved
        return chosen if np.all(free >= need) else None

    def take(self, n: int, victims: list[int], need: np.ndarray) -> None:
        """Apply a plan: evict ``victims`` from node ``n`` and bind ``need`` there."""
        st = self.state
        for p in victims:
            self.gone.add(p)
            self._evict(p)
            self.free[n] += np.asarray(st.allocation_of(p), dtype=np.int64)
        self.free[n] -= need


def _hdrf_for(state: Any, hierarchy: str) -> _HdrfVictims | None:
    return _HdrfVictims(state) if hierarchy == "annotations" else None


def _usable_nodes(
    state: Any,
    placer: Any,
    pod: str,
    gang: str | None,
    cache: dict[tuple[int, int], bool],
    cid: int,
    nodes: Iterable[int],
) -> list[int]:
    """Those alive ``nodes`` where ``pod`` passes every constraint (resources aside),
    not reserved for another gang, in slot order."""
    out = []
    reserved = state.reserved_nodes
    for n in sorted(nodes):
        if not state.is_alive(n):
            continue
        name = state.node_names[n]
        if reserved and reserved.get(name, gang) != gang:
            continue
        key = (cid, n)
        ok = cache.get(key)
        if ok is None:
            ok = not [r for r in placer.fits(pod, name) if not is_resource_text(r)]
            cache[key] = ok
        if ok:
            out.append(n)
    return out


def plan_reclaim(
    state: Any,
    placer: Any,
    pod: str,
    view: dict[str, dict[str, Any]] | None = None,
    hierarchy: str = "parent",
) -> ReclaimPlan | None:
    """The best legal reclaim for pending ``pod`` (see the module doc), or None;
    ``hierarchy`` ``annotations``: hdrf's reclaim rule too."""
    idx = state.pod_index.get(pod)
    if idx is None or state.phase_of(idx) != PHASE_PENDING:
        return None
    view = view if view is not None else queue_view(state)
    q = state.queue_of(idx)
    qname = state.queue_names[q]
    if not may_reclaim(state, qname, view):
        return None
    cid = state.class_of(idx)
    if not state.class_preempts(cid):
        return None  # preemptionPolicy: Never evicts nobody, reclaim included
    names = list(state.res_names[: state.n_res])
    v = view[qname]
    if _preemptive(qname, v["allocated"], v["fairShare"], _requests(state, [idx], names)):
        return None
    need = np.asarray(state.class_requests()[cid], dtype=np.int64)
    overlay = _Overlay(state, view, q, hdrf=_hdrf_for(state, hierarchy))
    overlay.reclaimer = int(idx)
    if not overlay.by_node:
        return None
    best: tuple[tuple[int, int, int], ReclaimPlan] | None = None
    for n in _usable_nodes(state, placer, pod, None, {}, cid, overlay.by_node):
        chosen = overlay.plan_node(n, need)
        if not chosen:  # None: cannot help; []: fits without reclaim (not this job)
            continue
        cost = (int(max(state.priority_of(p) for p in chosen)), len(chosen), n)
        if best is None or cost < best[0]:
            best = (
                cost,
                ReclaimPlan(
                    pod, qname, state.node_names[n], tuple(state.pod_keys[p] for p in chosen)
                ),
            )
    return None if best is None else best[1]


def plan_gang_reclaim(
    state: Any,
    placer: Any,
    gang: str,
    view: dict[str, dict[str, Any]] | None = None,
    hierarchy: str = "parent",
) -> GangReclaimPlan | None:
    """A legal all-or-nothing reclaim for pending ``gang`` (see the module doc), or None;
    ``hierarchy`` ``annotations``: hdrf's reclaim rule too, per member.

    The members it still needs to reach ``minMember`` (at least one) are planned in
    slot order, each on the node that needs no victim (lowest slot), else on the node
    whose victims are cheapest (lowest highest priority, then fewest, then slot);
    victims and members already planned count for the next member.
    """
    g = state.gang_index.get(gang)
    if g is None:
        return None
    pending = np.flatnonzero((state.pod_gangs() == g) & (state.pod_phases() == PHASE_PENDING))
    if not len(pending):
        return None
    need_members = max(1, state.gang_min_of(g) - state.gang_count(g, PHASE_RUNNING))
    if len(pending) < need_members:
        return None
    if not all(state.class_preempts(state.class_of(p)) for p in pending):
        return None  # preemptionPolicy: Never on a member (the commit check's rule)
    view = view if view is not None else queue_view(state)
    q = state.queue_of(pending[0])
    qname = state.queue_names[q]
    if not may_reclaim(state, qname, view) or np.any(state.pod_queues()[pending] != q):
        return None
    names = list(state.res_names[: state.n_res])
    v = view[qname]
    if _preemptive(
        qname, v["allocated"], v["fairShare"], _requests(state, pending[:need_members], names)
    ):
        return None
    overlay = _Overlay(state, view, q, int(g), hdrf=_hdrf_for(state, hierarchy))
    fits_cache: dict[tuple[int, int], bool] = {}
    bindings: list[tuple[str, str]] = []
    victims: list[tuple[str, str]] = []
    for p in pending[:need_members]:
        pod = state.pod_keys[p]
        overlay.reclaimer = int(p)
        cid = state.class_of(p)
        need = np.asarray(state.class_requests()[cid], dtype=np.int64)
        best: tuple[tuple[int, int, int], int, list[int]] | None = None
        # Nodes with room now, or with victims to take.
        roomy = np.flatnonzero(np.all(overlay.free >= need, axis=1))
        nodes = set(overlay.by_node) | {int(n) for n in roomy}
        for n in _usable_nodes(state, placer, pod, gang, fits_cache, cid, nodes):
            chosen = overlay.plan_node(n, need)
            if chosen is None:
                continue
            if not chosen:
                best = ((-1, 0, n), n, [])
                break  # room without reclaim: the lowest such slot
            cost = (int(max(state.priority_of(v) for v in chosen)), len(chosen), n)
            if best is None or cost < best[0]:
                best = (cost, n, chosen)
        if best is None:
            return None  # all or nothing: this member cannot be placed even with reclaim
        _cost, n, chosen = best
        overlay.take(n, chosen, need)
        node = state.node_names[n]
        bindings.append((pod, node))
        victims.extend((state.pod_keys[v], node) for v in chosen)
    if not victims:
        return None  # it fits without reclaim: a replica places it
    return GangReclaimPlan(gang, qname, tuple(bindings), tuple(victims))
