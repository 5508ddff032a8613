"""Proposal validation: is a placement proposal still valid against a ClusterState?

The one judge of proposals: the commit service decides with it, the audit
re-decides recorded decisions with it, the dispatcher checks its reclaim plans with
it. Each binding is checked by the core (:meth:`Placer.binding_reasons`), gangs
all-or-nothing against ``minMember``, preemption victims by band (Borg) and reclaim
victims by queue (Volcano, :mod:`esched.core.reclaim`), queue capabilities across
the batch. Rejections carry one reason code of a closed vocabulary (:data:`REASONS`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from esched.core import reasons
from esched.core._placer import RESOURCE_REASON_SHIFT, Placer
from esched.core._state import ClusterState
from esched.core.bands import Band, BandConfig, may_preempt
from esched.core.devices import DeviceLedger
from esched.core.phases import PHASE_PENDING, PHASE_RUNNING, PHASES
from esched.core.profile import Profile
from esched.core.queues import QueueTree, check_hierarchy, queue_view, state_queue_specs
from esched.core.reasons import (
    EXISTING_ANTI_AFFINITY,
    NODE_NAME,
    NODE_PORTS,
    NOT_ALIVE,
    POD_AFFINITY,
    POD_ANTI_AFFINITY,
    SELECTOR,
    SPREAD,
    SPREAD_LABEL,
    TAINT,
    TEXTS,
    UNSCHEDULABLE,
    USAGE,
    constraint_code,
    decision_code,
    reason_code,
    taint_text,
    untolerated_taint,
)
from esched.core.reclaim import victims_legal
from esched.core.schedule import member_task

__all__ = [
    "DEVICE_UNAVAILABLE",
    "GANG_INCOMPLETE",
    "GANG_UNKNOWN",
    "MALFORMED",
    "NODE_GONE",
    "NODE_RESERVED",
    "POD_NOT_PENDING",
    "POD_UNKNOWN",
    "PREEMPTED",
    "PREEMPTION_ILLEGAL",
    "QUEUE_CAPABILITY",
    "QUEUE_CLOSED",
    "REASONS",
    "RECLAIMED",
    "RECLAIM_ILLEGAL",
    "RESOURCES_MISMATCH",
    "SCHEDULING_GATED",
    "VICTIM_GANG_SPLIT",
    "VICTIM_GONE",
    "Validator",
    "Verdict",
]

# Reason codes of rejected decisions: a closed vocabulary, spelled as every reason code on
# the wire (core/reasons.py); a resource short is Insufficient.<name> (TooManyPods), a
# constraint the kube plugin's code (NodeUnschedulable, NodeAffinity, TaintToleration).
MALFORMED = "Malformed"
POD_UNKNOWN = "PodUnknown"
POD_NOT_PENDING = "PodNotPending"
NODE_GONE = reason_code(TEXTS[NOT_ALIVE])  # NodeNotFound
RESOURCES_MISMATCH = "ResourcesMismatch"
GANG_UNKNOWN = "GangUnknown"
GANG_INCOMPLETE = "GangIncomplete"
VICTIM_GONE = "VictimGone"
PREEMPTION_ILLEGAL = "PreemptionIllegal"
VICTIM_GANG_SPLIT = "VictimGangSplit"
NODE_RESERVED = reasons.NODE_RESERVED
#: The pod still has scheduling gates: it may not be bound (kube's SchedulingGates).
SCHEDULING_GATED = reasons.SCHEDULING_GATED
#: A reclaim (Volcano queues) whose victims are not legal (core/reclaim.py).
RECLAIM_ILLEGAL = "ReclaimIllegal"
#: The pod's Volcano queue is Closed: it schedules nothing (core/admission.py).
QUEUE_CLOSED = "QueueClosed"
#: The bindings would take a queue (or an ancestor) over its ``capability``.
QUEUE_CAPABILITY = "QueueCapability"
#: A GPU device the binding names lacks room (or the node has no such device).
DEVICE_UNAVAILABLE = reasons.INSUFFICIENT_GPU_DEVICES  # the pass's code for it
#: Constraint bit -> its rejection code (the unschedulable reports' code of the bit).
CONSTRAINT_CODES = {
    bit: constraint_code(bit)
    for bit in (
        UNSCHEDULABLE,
        SELECTOR,
        TAINT,
        NODE_NAME,
        NODE_PORTS,
        POD_AFFINITY,
        POD_ANTI_AFFINITY,
        EXISTING_ANTI_AFFINITY,
        SPREAD,
        SPREAD_LABEL,
        USAGE,
    )
}
#: Reason code -> what it means (``Insufficient.<resource>`` is open-ended).
REASONS = {
    MALFORMED: "the proposal contradicts itself (same pod twice, pod outside its gang)",
    POD_UNKNOWN: "no such pod in the log (never submitted, or deleted)",
    POD_NOT_PENDING: "the pod is already bound (or finished), or bound earlier in this batch",
    NODE_GONE: "no such node (removed, or never added)",
    RESOURCES_MISMATCH: "the claimed resources are not the pod's requests",
    "Insufficient.<resource>": "the node no longer has room for that resource "
    "(TooManyPods for pods)",
    CONSTRAINT_CODES[UNSCHEDULABLE]: "the node is unschedulable (cordoned)",
    CONSTRAINT_CODES[SELECTOR]: "the node does not match the pod's node selector / affinity",
    CONSTRAINT_CODES[TAINT]: "the node has a taint the pod does not tolerate",
    CONSTRAINT_CODES[NODE_NAME]: "the pod's spec.nodeName names another node",
    CONSTRAINT_CODES[NODE_PORTS]: "a host port the pod asks for is taken on the node",
    CONSTRAINT_CODES[POD_AFFINITY]: "no pod the pod's required affinity asks for is in the "
    "node's topology domain",
    CONSTRAINT_CODES[POD_ANTI_AFFINITY]: "a pod the pod's required anti-affinity excludes is "
    "in the node's topology domain (or bound earlier in this batch)",
    CONSTRAINT_CODES[EXISTING_ANTI_AFFINITY]: "a bound pod's required anti-affinity excludes "
    "the pod from the node's topology domain",
    CONSTRAINT_CODES[SPREAD]: "the node's topology domain would exceed a DoNotSchedule spread "
    "constraint's maxSkew",
    CONSTRAINT_CODES[SPREAD_LABEL]: "the node lacks a topology spread constraint's key",
    CONSTRAINT_CODES[USAGE]: "the node's measured load is above the profile's Usage threshold",
    GANG_UNKNOWN: "the proposal names a gang (PodGroup) the log does not have",
    GANG_INCOMPLETE: "running + proposed members would stay below the gang's minMember",
    VICTIM_GONE: "a victim is no longer running on the node the proposal names (or is "
    "evicted earlier in this batch, or is one of the proposal's own pods)",
    RECLAIM_ILLEGAL: "the reclaiming queue would exceed its deserved share, or a victim is "
    "not preemptable (volcano.sh/preemptable false), or its queue is not reclaimable, is not "
    "above its deserved share or would fall below its guarantee",
    PREEMPTION_ILLEGAL: "the preemptor's preemptionPolicy is Never, or a victim's band is not "
    "strictly lower than the preemptor's, or both "
    "are prod (Borg: prod never preempts prod)",
    VICTIM_GANG_SPLIT: "the victims would leave a gang running below its minMember (or a "
    "Volcano Job's task below its minAvailable): a gang is evicted whole or not at all",
    NODE_RESERVED: "the node is reserved for a starving gang the pod is not a member of",
    SCHEDULING_GATED: "the pod still has scheduling gates (spec.schedulingGates)",
    QUEUE_CLOSED: "the pod's queue is Closed: it schedules nothing",
    QUEUE_CAPABILITY: "the bound pods of the pod's queue (or of an ancestor queue), with the "
    "earlier bindings of the batch and this proposal's, would exceed its "
    "capability for a resource",
    DEVICE_UNAVAILABLE: "a GPU device the binding names has no room for the pod's share (or "
    "the node has no such device, or the devices do not match the GPU request)",
}
#: ``reason`` of the esched.pod.evicted events written for a committed preemption.
PREEMPTED = "Preempted"
#: ``reason`` of the evictions of a committed reclaim (proposal ``"reclaim": true``).
RECLAIMED = "Reclaimed"
#: ``reason`` of the evictions and throttles of an overloaded node (core/overload.py).
OVERLOADED = "Overloaded"


class Verdict(NamedTuple):
    """The outcome of validating one proposal (a named tuple: one per proposal)."""

    ok: bool
    reason: str | None = None
    message: str = ""
    #: Pods of the proposal, in binding order.
    pods: tuple[str, ...] = ()


class Validator:
    """Fine-grained validation of proposals against a :class:`ClusterState`.

    Shared by the commit service (decide) and the audit (re-decide). Each binding is
    checked by the core (:meth:`Placer.binding_reasons`: resource by resource, then
    selector, affinity, taints, unschedulable) on the placer's overlay: the state's
    allocation plus the bindings accepted since :meth:`begin` (assumed) and the
    proposal's own earlier bindings and victims. The state itself is never modified.
    """

    def __init__(
        self,
        state: ClusterState,
        bands: BandConfig | None = None,
        profile: Profile | None = None,
        queue_hierarchy: str = "parent",
    ) -> None:
        self.state = state
        self.bands = bands
        #: where the queue tree comes from (``esched.core.queues.QUEUE_HIERARCHIES``):
        #: capabilities checked up the tree, fair shares of the reclaim rule
        self.queue_hierarchy = check_hierarchy(queue_hierarchy)
        # The real capacity of reserved nodes: a reservation is checked by name here.
        # ``profile``: the replicas' configuration, for its NodeAffinity addedAffinity
        # (a filter of each pod's profile); scores play no part here.
        self.placer = Placer(state, profile, hide_reserved=False, bands=bands)
        self.devices = DeviceLedger(state)
        self.begin()

    def begin(self) -> None:
        """Start a batch: forget the bindings accepted so far (the state has them now)."""
        self.placer.sync()  # drops the previous batch's assumptions
        self.devices.begin()
        self._bound: set[str] = set()  # pods bound by the batch
        self._gang_extra: dict[int, int] = {}  # gang id -> members bound by the batch
        self._evicted: set[str] = set()  # pods evicted by the batch
        self._gang_evicted: dict[int, int] = {}  # gang id -> members evicted by the batch
        self._capabilities()

    def _capabilities(self) -> None:
        """Queue capabilities as of the state: per queue id, the capped queues on its
        path to the root (itself first) and what each of those subtrees holds now.
        None when no queue has a capability (nothing to check, the common case). Plain
        ints over the few capped resources: this runs per proposal."""
        st = self.state
        nq, nres = st.n_queues, st.n_res
        #: queue id -> [(capped queue name, {resource column: limit})]
        self._cap_chain: dict[int, list[tuple[str, dict[int, int]]]] | None = None
        if not any(st.queue_meta[q].get("capability") for q in range(nq)):
            return
        tree = QueueTree(state_queue_specs(st, self.queue_hierarchy))
        limits: dict[str, dict[int, int]] = {}
        for name, spec in tree.specs.items():
            cols = {
                st.res_index[r]: int(v)
                for r, v in spec.capability.items()
                if r in st.res_index and st.res_index[r] < nres
            }
            if cols:
                limits[name] = cols
        alloc = st.queue_allocations()
        #: capped queue name -> {column: units its subtree holds (bound, then the batch's)}
        self._cap_used: dict[str, dict[int, int]] = {}
        self._cap_chain = {}
        for q in range(nq):
            chain = []
            a: str | None = st.queue_names[q]
            while a is not None:
                lim = limits.get(a)
                if lim is not None:
                    chain.append((a, lim))
                    used = self._cap_used.setdefault(a, dict.fromkeys(lim, 0))
                    for c in lim:
                        used[c] += int(alloc[q, c])
                a = tree.parent.get(a)
            self._cap_chain[q] = chain

    def _over_capability(
        self, delta: dict[int, np.ndarray], pods: tuple[str, ...]
    ) -> tuple[Verdict | None, dict[str, dict[int, int]]]:
        """Check queue capabilities against ``delta`` (queue id -> units the proposal
        binds minus what its victims free): (rejection or None, per capped queue the
        units to add to the batch's usage)."""
        chains = self._cap_chain
        add: dict[str, dict[int, int]] = {}
        if not chains:
            return None, add
        limits: dict[str, dict[int, int]] = {}
        for q, units in delta.items():
            for name, lim in chains.get(q, ()):
                acc = add.get(name)
                if acc is None:
                    acc = add[name] = {}
                    limits[name] = lim
                for c in lim:
                    acc[c] = acc.get(c, 0) + int(units[c])
        for name, acc in add.items():
            used = self._cap_used[name]
            lim = limits[name]
            for c, amount in acc.items():
                if amount > 0 and used[c] + amount > lim[c]:
                    st = self.state
                    return Verdict(
                        False,
                        QUEUE_CAPABILITY,
                        f"queue {name}: {st.res_names[c]} {used[c] + amount} bound "
                        f"with this proposal > capability {lim[c]} "
                        f"(queue of {pods[0]})",
                        pods,
                    ), add
        return None, add

    def band_of_pod(self, pidx: int) -> Band:
        """The Borg band of the pod in slot ``pidx`` under this validator's bands."""
        return Band(int(self.placer.class_bands(self.bands)[self.state.class_of(pidx)]))

    def _victims(
        self, data: dict[str, Any], pods: tuple[str, ...]
    ) -> tuple[Verdict | None, list[int], dict[int, int]]:
        """Check a preemption's victims: (rejection or None, victim pod slots, members
        evicted per gang)."""
        st = self.state
        victims = data.get("victims") or []
        freed: list[int] = []
        by_gang: dict[int, int] = {}
        if not victims:
            return None, freed, by_gang
        names = [v.get("pod") for v in victims]
        if len(set(names)) != len(names):
            return Verdict(False, MALFORMED, "the same victim appears twice", pods), freed, by_gang
        if not all(p in st.pod_index for p in pods):
            return None, freed, by_gang  # the bindings' check names the unknown pod
        never = [p for p in pods if not st.class_preempts(st.class_of(st.pod_index[p]))]
        if never:
            # kube's preemptionPolicy: Never, the pod's own or its PriorityClass's (a
            # gang evicts only if every member may; Volcano's reclaim skips them too).
            text = f"{', '.join(never)} may not preempt: its preemptionPolicy is Never"
            return Verdict(False, PREEMPTION_ILLEGAL, text, pods), freed, by_gang
        # A gang is as strong as its weakest member.
        preemptor = min(self.band_of_pod(st.pod_index[p]) for p in pods)
        own = set(pods)
        reclaim = bool(data.get("reclaim"))
        if reclaim:
            # Volcano's reclaim: legality is the queues' (fair shares, reclaimable,
            # guarantees), not the bands'; for one pod or one gang's members (one queue).
            view = (
                None if self.queue_hierarchy == "parent" else queue_view(st, self.queue_hierarchy)
            )
            who = pods if len(pods) > 1 else pods[0]
            why = victims_legal(
                st, who, names, taken=self._evicted, view=view, hierarchy=self.queue_hierarchy
            )
            if why is not None:
                return Verdict(False, RECLAIM_ILLEGAL, why, pods), freed, by_gang
        for v in victims:
            pod, node = v.get("pod"), v.get("node")
            pidx = st.pod_index.get(pod)
            nidx = st.node_index.get(node)
            if (
                pidx is None
                or nidx is None
                or pod in own
                or pod in self._evicted
                or st.phase_of(pidx) != PHASE_RUNNING
                or st.node_of(pidx) != nidx
            ):
                return (
                    Verdict(False, VICTIM_GONE, f"victim {pod} is not running on {node}", pods),
                    freed,
                    by_gang,
                )
            band = self.band_of_pod(pidx)
            if not reclaim and not may_preempt(preemptor, band):
                return (
                    Verdict(
                        False,
                        PREEMPTION_ILLEGAL,
                        f"{preemptor.label} may not preempt {pod} ({band.label})",
                        pods,
                    ),
                    freed,
                    by_gang,
                )
            freed.append(pidx)
            g = st.gang_of(pidx)
            if g >= 0:
                by_gang[g] = by_gang.get(g, 0) + 1
        for g, k in by_gang.items():
            running = (
                st.gang_count(g, PHASE_RUNNING)
                + self._gang_extra.get(g, 0)
                - self._gang_evicted.get(g, 0)
            )
            left = running - k
            if 0 < left < st.gang_min_of(g):
                return (
                    Verdict(
                        False,
                        VICTIM_GANG_SPLIT,
                        f"gang {st.gang_keys[g]}: evicting {k} of {running} running "
                        f"leaves {left} < minMember {st.gang_min_of(g)}",
                        pods,
                    ),
                    freed,
                    by_gang,
                )
            short = self._task_split(g, names) if left > 0 else None
            if short is not None:
                return Verdict(False, VICTIM_GANG_SPLIT, short, pods), freed, by_gang
        return None, freed, by_gang

    def _task_split(self, g: int, victims: list[Any]) -> str | None:
        """Why evicting ``victims`` would leave a task of gang ``g`` (a Volcano Job's
        PodGroup with ``minTaskMember``) running below its ``minAvailable`` while the
        gang keeps running, or None (the gang plugin's per-task check)."""
        st = self.state
        min_task = st.gang_meta[g].get("minTaskMember") or {}
        if not min_task:
            return None
        gang = st.gang_keys[g]
        running: dict[str, int] = {}
        for m in st.gang_members(gang, "Running"):
            got = member_task(gang, m)
            if got is not None:
                running[got[0]] = running.get(got[0], 0) + 1
        lost: dict[str, int] = {}
        for v in victims:
            got = member_task(gang, str(v))
            if got is not None and st.gang_of(st.pod_index[v]) == g:
                lost[got[0]] = lost.get(got[0], 0) + 1
        for task, k in lost.items():
            left = running.get(task, 0) - k
            if 0 <= left < int(min_task.get(task, 0)):
                return (
                    f"gang {gang}: evicting {k} of task {task}'s {running.get(task, 0)} running "
                    f"leaves {left} < its minAvailable {min_task[task]}"
                )
        return None

    def check(self, data: dict[str, Any], *, record: bool = True) -> Verdict:
        """Validate one proposal (``data`` of ``esched.placement.proposed``).

        With ``record`` an accepted proposal's bindings join the batch overlay, so
        later proposals of the batch see them.
        """
        st = self.state
        bindings = data.get("bindings") or []
        pods = tuple([b.get("pod") for b in bindings])
        if not bindings:
            return Verdict(False, MALFORMED, "no bindings", pods)
        if len(set(pods)) != len(pods):
            return Verdict(False, MALFORMED, "the same pod appears twice in the proposal", pods)
        gang_name = data.get("gang")
        if gang_name is not None and gang_name not in st.gang_index:
            return Verdict(False, GANG_UNKNOWN, f"no PodGroup {gang_name}", pods)
        rejected, victims, victim_gangs = self._victims(data, pods)
        if rejected is not None:
            return rejected
        placer = self.placer
        for v in victims:
            placer.assume_evicted(v)
        taken: list[tuple[int, int]] = []  # (pod slot, node slot) assumed so far
        took: list[tuple[int, int, list[int]]] = []  # GPU devices taken so far
        gangs: dict[int, int] = {}
        queue_delta: dict[int, np.ndarray] = {}
        if self._cap_chain:
            for vidx in victims:
                vq = st.queue_of(vidx)
                units = st.allocation_of(vidx).astype(np.int64)
                queue_delta[vq] = queue_delta[vq] - units if vq in queue_delta else -units
        verdict = self._bindings(bindings, pods, gang_name, taken, gangs, queue_delta, took)
        if verdict is None:
            for g, proposed in gangs.items():
                need_members = st.gang_min_of(g)
                if proposed >= need_members:
                    continue  # (a one-pod Job's gang): whatever runs already
                running = st.gang_count(g, PHASE_RUNNING) + self._gang_extra.get(g, 0)
                if running + proposed < need_members:
                    verdict = Verdict(
                        False,
                        GANG_INCOMPLETE,
                        f"gang {st.gang_keys[g]}: {running} running + {proposed} "
                        f"proposed < minMember {need_members}",
                        pods,
                    )
                    break
        cap_add: dict[str, dict[int, int]] = {}
        if verdict is None:
            verdict, cap_add = self._over_capability(queue_delta, pods)
        if verdict is not None or not record:
            # Not accepted (or only asked): the overlay is as it was before this proposal.
            for pidx, nidx in reversed(taken):
                placer.assume_binding(pidx, nidx, -1)
            for pidx, nidx, devs in took:
                self.devices.give_back(pidx, nidx, devs)
            for v in victims:
                placer.assume_evicted(v, -1)
            return verdict if verdict is not None else Verdict(True, None, "", pods)
        for name, acc in cap_add.items():
            used = self._cap_used[name]
            for c, amount in acc.items():
                used[c] += amount
        self._bound.update(pods)
        for g, k in gangs.items():
            self._gang_extra[g] = self._gang_extra.get(g, 0) + k
        if victims:
            self._evicted.update([v["pod"] for v in data["victims"]])
            for g, k in victim_gangs.items():
                self._gang_evicted[g] = self._gang_evicted.get(g, 0) + k
        return Verdict(True, None, "", pods)

    def _bindings(
        self,
        bindings: list[dict[str, Any]],
        pods: tuple[str, ...],
        gang_name: str | None,
        taken: list[tuple[int, int]],
        gangs: dict[int, int],
        queue_delta: dict[int, np.ndarray],
        took: list[tuple[int, int, list[int]]],
    ) -> Verdict | None:
        """Check each binding in order, assuming each one that fits (into ``taken``;
        the GPU devices a binding names into ``took``;
        members per gang into ``gangs``, requests per queue into ``queue_delta`` when
        capabilities are checked); the first rejection, or None."""
        st = self.state
        placer = self.placer
        for b in bindings:
            pod, node = b["pod"], b["node"]
            pidx = st.pod_index.get(pod)
            if pidx is None:
                return Verdict(False, POD_UNKNOWN, f"pod {pod} is not in the log", pods)
            if st.phase_of(pidx) != PHASE_PENDING or pod in self._bound:
                where = st.node_of(pidx)
                on = f" (on {st.node_names[where]})" if where >= 0 else ""
                return Verdict(
                    False,
                    POD_NOT_PENDING,
                    f"pod {pod} is {PHASES[st.phase_of(pidx)]}{on}"
                    if pod not in self._bound
                    else f"pod {pod} was bound earlier in this batch",
                    pods,
                )
            if st.gated and pod in st.gated:
                return Verdict(
                    False,
                    SCHEDULING_GATED,
                    f"pod {pod} waits for scheduling gates {list(st.gated[pod])}",
                    pods,
                )
            q = st.queue_of(pidx)
            if st.queue_meta[q].get("state") == "Closed":
                return Verdict(
                    False, QUEUE_CLOSED, f"pod {pod}: queue {st.queue_names[q]} is Closed", pods
                )
            g = st.gang_of(pidx)
            if gang_name is not None and (g < 0 or st.gang_keys[g] != gang_name):
                return Verdict(False, MALFORMED, f"pod {pod} is not a member of {gang_name}", pods)
            nidx = st.node_index.get(node)
            if nidx is None:
                return Verdict(False, NODE_GONE, f"node {node} does not exist", pods)
            holder = st.reserved_nodes.get(node)
            if holder is not None and (g < 0 or st.gang_keys[g] != holder):
                return Verdict(
                    False, NODE_RESERVED, f"node {node} is reserved for gang {holder}", pods
                )
            cid = st.class_of(pidx)
            requests = st.class_specs[cid]["requests"]
            claimed = b.get("resources") or {}
            if not _same_resources(claimed, requests):
                return Verdict(
                    False,
                    RESOURCES_MISMATCH,
                    f"pod {pod} claims {dict(claimed)}, requests {requests}",
                    pods,
                )
            bits = placer.binding_reasons(pidx, nidx)
            if bits:
                return self._rejection(pod, node, pidx, nidx, bits, pods)
            devices = b.get("devices")
            if devices is not None:
                why = self.devices.take(pidx, nidx, devices)
                if why is not None:
                    return Verdict(False, DEVICE_UNAVAILABLE, f"pod {pod}: {why}", pods)
                took.append((pidx, nidx, devices))
            placer.assume_binding(pidx, nidx)
            taken.append((pidx, nidx))
            if g >= 0:
                gangs[g] = gangs.get(g, 0) + 1
            if self._cap_chain:
                need = st.class_requests()[cid].astype(np.int64)
                queue_delta[q] = queue_delta[q] + need if q in queue_delta else need
        return None

    def _rejection(
        self, pod: str, node: str, pidx: int, nidx: int, bits: int, pods: tuple[str, ...]
    ) -> Verdict:
        """The verdict for a binding the core found not fitting (reason ``bits``):
        the first resource short, else the constraints."""
        st = self.state
        if bits >> RESOURCE_REASON_SHIFT:
            nres = st.n_res
            need = st.class_requests()[st.class_of(pidx)].astype(np.int64)
            used = self.placer.used_array()[nidx, :nres].astype(np.int64)
            cap = st.node_allocatable()[nidx].astype(np.int64)
            r = int(np.flatnonzero((need > 0) & (used + need > cap))[0])
            name = st.res_names[r]
            return Verdict(
                False,
                decision_code(name),
                f"pod {pod} needs {name}={int(need[r])} on node {node}, "
                f"{max(int(cap[r] - used[r]), 0)} free",
                pods,
            )
        if bits == NOT_ALIVE:
            return Verdict(False, NODE_GONE, f"node {node} is not alive", pods)
        problems = self.placer.reason_texts(pidx, nidx, bits)
        if bits & TAINT:
            # kube names the taint (TaintToleration's message); so does the rejection.
            cons = st.class_specs[st.class_of(pidx)]["constraints"] or {}
            taint = untolerated_taint(st.node_taint_list[nidx], cons.get("tolerations") or ())
            if taint is not None:
                problems = [taint_text(*taint) if p == TEXTS[TAINT] else p for p in problems]
        return Verdict(
            False, constraint_code(bits), f"pod {pod} on node {node}: {'; '.join(problems)}", pods
        )


def _same_resources(claimed: dict[str, Any], requests: dict[str, int]) -> bool:
    """Whether a binding claims exactly the pod's requests (``pods`` may be left out)."""
    if claimed == requests:  # what replicas send: the class's requests as they are
        return True
    for name in set(claimed) | set(requests):
        want = requests.get(name, 0)
        got = claimed.get(name, want if name == "pods" else 0)
        if got != want:
            return False
    return True
