"""The commit service: the single writer of placement decisions (Omega's shared state).

Replicas place pods on their own fold of the log and send *proposals*
(``esched.placement.proposed``: one pod or one whole gang, the log position
they saw and the resources they claim per node). The commit service holds the
authoritative state (the fold of the log, its own decisions included) and
decides each proposal:

* **fine-grained validation**, binding by binding: the pod exists and is still
  Pending and is not bound twice; the node exists and is alive; the claimed
  resources are the pod's requests; and it still fits, resource by resource and
  constraint by constraint, counting the earlier accepted bindings of the same
  batch. A node that changed since the replica's ``position`` is fine as long as
  the pod still fits: no coarse per-node version check (Omega measured 2-3x more
  conflicts with one).
* **gangs all-or-nothing**: every binding fits (on a scratch overlay) and the
  gang's running members plus the proposed ones reach ``minMember``, else the
  whole proposal is rejected with one reason.

Decisions (``esched.placement.committed`` / ``.rejected`` with a reason code) are
appended to the store in batches, id ``decision-<proposal>`` so a redelivered
proposal is answered with the decision already recorded; then published on the
decisions topic; only then are the proposals' offsets committed.

**One leader.** A :mod:`~esched.services.lease` keeps a single instance active;
standbys wait on it and, on takeover, rebuild the state from the newest snapshot
plus the tail of the log. Every batch is appended with ``expected_version`` on
the ``decisions`` stream (the version this instance folded), so if another
instance wrote decisions meanwhile the store refuses the batch
(:class:`~esched.services.store.ConflictError`) and this instance steps down.

**Valid at its own position.** The ``expected_version`` fence orders decisions
against decisions only, so each batch is also appended with ``expected_head``:
the log position it was validated at. If an external event (node removed or
shrunk, pod deleted, appended by ingest) got in between the catch-up and the
append, the store refuses the batch
(:class:`~esched.services.store.HeadConflictError`, nothing stored); this service
folds the new events and validates the batch's proposals again, so every
decision is valid at its own position. After ``_HEAD_ATTEMPTS`` refusals in a
row (a log that never stops moving) it appends once without the head check,
logging a warning and counting ``esched_commit_head_conflicts_total{outcome=
"unchecked"}``; an event interleaved then is tolerated by the fold (the binding
is ignored and counted as an anomaly), logged here, and reported by ``esched audit``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

import numpy as np
import orjson

from esched.core import PHASES, ClusterState
from esched.core._placer import RESOURCE_REASON_SHIFT, Placer
from esched.core.bands import Band, BandConfig, may_preempt
from esched.core.devices import DeviceLedger
from esched.core.queues import QueueSpec, QueueTree
from esched.core.reasons import NOT_ALIVE, decision_code
from esched.core.reclaim import victims_legal
from esched.schemas.events import (
    DECISIONS_STREAM,
    PLACEMENT_COMMITTED,
    PLACEMENT_PROPOSED,
    PLACEMENT_REJECTED,
    POD,
    POD_EVICTED,
    POD_SUBMITTED,
    POD_UNSCHEDULABLE,
    envelope,
    proposal_envelope,
    proposal_key,
    stream_name,
    timestamp,
)
from esched.schemas.validator import MAX_EVENT_BYTES, InvalidEvent, parse_event, validate_event
from esched.services import metrics
from esched.services.admission import KEYED, row_fact
from esched.services.bus import Bus, BusConsumer, BusError, BusProducer, Message
from esched.services.faults import count_retry, is_transient, poll_or_pause
from esched.services.ingest import deadletter_record
from esched.services.lease import Lease, LocalLease
from esched.services.replay import (
    SNAPSHOT_NAME,
    freeze_heap,
    payload_pairs,
    store_snapshot,
    thaw_heap,
)
from esched.services.retry import retry_until
from esched.services.store.base import (
    ConflictError,
    EventStore,
    HeadConflictError,
    NewEvent,
    StoredEvent,
    StoreError,
)

__all__ = [
    "DEVICE_UNAVAILABLE",
    "FENCE_SNAPSHOT",
    "QUEUE_CAPABILITY",
    "REASONS",
    "CommitConfig",
    "CommitService",
    "CommitTotals",
    "NotLeader",
    "Validator",
    "Verdict",
    "decision_event",
    "decision_id",
    "eviction_events",
]

log = logging.getLogger(__name__)

SERVICE = "commit"

#: Companion snapshot series: the decisions stream's version at each state snapshot
#: this service saves, so a new leader knows its fence without re-reading the log.
FENCE_SNAPSHOT = "commit-fence"

# Reason codes of rejected decisions (closed vocabulary; resources add insufficient_<name>).
MALFORMED = "malformed"
POD_UNKNOWN = "pod_unknown"
POD_NOT_PENDING = "pod_not_pending"
NODE_GONE = "node_gone"
RESOURCES_MISMATCH = "resources_mismatch"
CONSTRAINT = "constraint"
GANG_UNKNOWN = "gang_unknown"
GANG_INCOMPLETE = "gang_incomplete"
VICTIM_GONE = "victim_gone"
PREEMPTION_ILLEGAL = "preemption_illegal"
VICTIM_GANG_SPLIT = "victim_gang_split"
NODE_RESERVED = "node_reserved"
#: A reclaim (Volcano queues) whose victims are not legal (core/reclaim.py).
RECLAIM_ILLEGAL = "reclaim_illegal"
#: The pod's Volcano queue is Closed: it schedules nothing (services/admission.py).
QUEUE_CLOSED = "queue_closed"
#: The bindings would take a queue (or an ancestor) over its ``capability``.
QUEUE_CAPABILITY = "queue_capability"
#: A GPU device the binding names lacks room (or the node has no such device).
DEVICE_UNAVAILABLE = "device_unavailable"
#: Reason code -> what it means (``insufficient_<resource>`` is open-ended).
REASONS = {
    MALFORMED: "the proposal contradicts itself (same pod twice, pod outside its gang)",
    POD_UNKNOWN: "no such pod in the log (never submitted, or deleted)",
    POD_NOT_PENDING: "the pod is already bound (or finished), or bound earlier in this batch",
    NODE_GONE: "no such node (removed, or never added)",
    RESOURCES_MISMATCH: "the claimed resources are not the pod's requests",
    "insufficient_<resource>": "the node no longer has room for that resource",
    CONSTRAINT: "node selector / affinity, taints, or the node is unschedulable",
    GANG_UNKNOWN: "the proposal names a gang (PodGroup) the log does not have",
    GANG_INCOMPLETE: "running + proposed members would stay below the gang's minMember",
    VICTIM_GONE: "a victim is no longer running on the node the proposal names (or is "
    "evicted earlier in this batch, or is one of the proposal's own pods)",
    RECLAIM_ILLEGAL: "a victim's queue is not reclaimable, has a higher priority than the "
    "reclaiming queue, would fall below its guarantee, or (equal "
    "priorities) the reclaiming queue is not below its fair share or the "
    "victim's would fall below its own",
    PREEMPTION_ILLEGAL: "a victim's band is not strictly lower than the preemptor's, or both "
    "are prod (Borg: prod never preempts prod)",
    VICTIM_GANG_SPLIT: "the victims would leave a gang running below its minMember: a gang "
    "is evicted whole or not at all",
    NODE_RESERVED: "the node is reserved for a starving gang the pod is not a member of",
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

_PENDING = PHASES.index("Pending")
_RUNNING = PHASES.index("Running")


def decision_id(proposal: str) -> str:
    """The event id of the decision on ``proposal``: the store's idempotency key."""
    return f"decision-{proposal}"


class Verdict(NamedTuple):
    """The outcome of validating one proposal (a named tuple: one per proposal)."""

    ok: bool
    reason: str | None = None
    message: str = ""
    #: Pods of the proposal, in binding order.
    pods: tuple[str, ...] = ()


def eviction_events(
    data: dict[str, Any], source: str = "esched/commit", time_: str | None = None
) -> list[dict[str, Any]]:
    """The ``esched.pod.evicted`` envelopes of a committed preemption, one per victim.

    They go into the log in the same append as the decision and just before it, so
    the fold frees the victims' room and then binds the preemptor. Ids are
    deterministic (``evicted-<proposal>-<pod>``): a redelivered proposal dedupes.
    """
    by = proposal_key(data)
    reason, what = (RECLAIMED, "reclaimed") if data.get("reclaim") else (PREEMPTED, "preempted")
    out = []
    for v in data.get("victims") or ():
        body = {
            "pod": v["pod"],
            "node": v["node"],
            "reason": reason,
            "message": f"{what} to make room for {by}",
            "by": by,
            "decision": decision_id(data["proposal"]),
        }
        out.append(
            envelope(
                POD_EVICTED,
                source,
                body,
                id=f"evicted-{data['proposal']}-{v['pod']}",
                time=time_,
            )
        )
    return out


def decision_event(
    data: dict[str, Any], verdict: Verdict, source: str = "esched/commit", time_: str | None = None
) -> dict[str, Any]:
    """The CloudEvents envelope recording ``verdict`` on proposal ``data``.

    Both kinds carry the proposal's bindings, so an audit can re-validate a
    rejection as well as a commit.
    """
    body: dict[str, Any] = {
        "proposal": data["proposal"],
        "replica": data["replica"],
        "position": data["position"],
        "gang": data.get("gang"),
        "bindings": data["bindings"],
    }
    if data.get("victims"):
        body["victims"] = data["victims"]
    if data.get("reclaim"):
        body["reclaim"] = True
    if verdict.ok:
        etype = PLACEMENT_COMMITTED
    else:
        etype = PLACEMENT_REJECTED
        body["pods"] = list(verdict.pods) or [b["pod"] for b in data["bindings"]]
        body["reason"] = verdict.reason
        body["message"] = verdict.message
    return envelope(etype, source, body, id=decision_id(data["proposal"]), time=time_)


class Validator:
    """Fine-grained validation of proposals against a :class:`ClusterState`.

    Shared by the commit service (decide) and the audit (re-decide). Each binding is
    checked by the core (:meth:`Placer.binding_reasons`: resource by resource, then
    selector, affinity, taints, unschedulable) on the placer's overlay: the state's
    allocation plus the bindings accepted since :meth:`begin` (assumed) and the
    proposal's own earlier bindings and victims. The state itself is never modified.
    """

    def __init__(self, state: ClusterState, bands: BandConfig | None = None) -> None:
        self.state = state
        self.bands = bands
        # The real capacity of reserved nodes: a reservation is checked by name here.
        self.placer = Placer(state, hide_reserved=False)
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
        specs = [QueueSpec.from_meta(st.queue_names[q], st.queue_meta[q]) for q in range(nq)]
        tree = QueueTree(specs)
        limits: dict[str, dict[int, int]] = {}
        for name, spec in tree.specs.items():
            cols = {
                st.res_index[r]: int(v)
                for r, v in spec.capability.items()
                if r in st.res_index and st.res_index[r] < nres
            }
            if cols:
                limits[name] = cols
        alloc = st.queue_alloc_np
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
        return Band(int(self.placer.class_bands(self.bands)[int(self.state.pod_class_np[pidx])]))

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
        # A gang is as strong as its weakest member.
        preemptor = min(self.band_of_pod(st.pod_index[p]) for p in pods)
        own = set(pods)
        reclaim = bool(data.get("reclaim"))
        if reclaim:
            # Volcano's reclaim: legality is the queues' (fair shares, reclaimable,
            # guarantees), not the bands'; for one pod or one gang's members (one queue).
            why = victims_legal(st, pods if len(pods) > 1 else pods[0], names, taken=self._evicted)
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
                or st.pod_phase_np[pidx] != _RUNNING
                or st.pod_node_np[pidx] != nidx
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
            g = int(st.pod_gang_np[pidx])
            if g >= 0:
                by_gang[g] = by_gang.get(g, 0) + 1
        for g, k in by_gang.items():
            running = (
                int(st.gang_counts_np[g, _RUNNING])
                + self._gang_extra.get(g, 0)
                - self._gang_evicted.get(g, 0)
            )
            left = running - k
            if 0 < left < int(st.gang_min_np[g]):
                return (
                    Verdict(
                        False,
                        VICTIM_GANG_SPLIT,
                        f"gang {st.gang_keys[g]}: evicting {k} of {running} running "
                        f"leaves {left} < minMember {int(st.gang_min_np[g])}",
                        pods,
                    ),
                    freed,
                    by_gang,
                )
        return None, freed, by_gang

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
            nres = st.n_res
            for vidx in victims:
                vq = int(st.pod_queue_np[vidx])
                units = st.pod_alloc_np[vidx, :nres].astype(np.int64)
                queue_delta[vq] = queue_delta[vq] - units if vq in queue_delta else -units
        verdict = self._bindings(bindings, pods, gang_name, taken, gangs, queue_delta, took)
        if verdict is None:
            for g, proposed in gangs.items():
                running = int(st.gang_counts_np[g, _RUNNING]) + self._gang_extra.get(g, 0)
                need_members = int(st.gang_min_np[g])
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
            if st.pod_phase_np[pidx] != _PENDING or pod in self._bound:
                where = st.pod_node_np[pidx]
                on = f" (on {st.node_names[where]})" if where >= 0 else ""
                return Verdict(
                    False,
                    POD_NOT_PENDING,
                    f"pod {pod} is {PHASES[st.pod_phase_np[pidx]]}{on}"
                    if pod not in self._bound
                    else f"pod {pod} was bound earlier in this batch",
                    pods,
                )
            q = int(st.pod_queue_np[pidx])
            if st.queue_meta[q].get("state") == "Closed":
                return Verdict(
                    False, QUEUE_CLOSED, f"pod {pod}: queue {st.queue_names[q]} is Closed", pods
                )
            g = int(st.pod_gang_np[pidx])
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
            cid = int(st.pod_class_np[pidx])
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
                need = st.class_req_np[cid, : st.n_res].astype(np.int64)
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
            need = st.class_req_np[int(st.pod_class_np[pidx]), :nres].astype(np.int64)
            used = self.placer.used_array()[nidx, :nres].astype(np.int64)
            cap = st.allocatable_np[nidx, :nres].astype(np.int64)
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
        return Verdict(False, CONSTRAINT, f"pod {pod} on node {node}: {'; '.join(problems)}", pods)


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


@dataclass(frozen=True, slots=True)
class CommitConfig:
    """Tuning of the commit service."""

    group: str = "esched-commit"
    #: Proposals per decision batch (one store transaction, one fence check).
    batch_size: int = 1000
    #: Short, so a lost lease is noticed between polls within ~0.1 s.
    poll_timeout_ms: int = 100
    #: Save a snapshot after this many events folded since the last one (0: never).
    snapshot_every: int = 50_000
    source: str = "esched/commit"
    max_proposal_bytes: int = MAX_EVENT_BYTES
    #: After stepping down, wait this long before contending for the lease again, so a
    #: standby (retrying every 0.5 s) takes over rather than the instance that just failed.
    stepdown_backoff: float = 2.0
    #: How long :meth:`CommitService.stop` waits for an in-flight batch.
    stop_timeout: float = 10.0
    #: Proposal ids remembered (with the position of their decision) for idempotency
    #: without a store round trip; older redeliveries fall back to the store's own.
    remember: int = 200_000
    #: Priority bands for preemption legality (None: the documented defaults).
    bands: BandConfig | None = None


@dataclass(slots=True)
class CommitTotals:
    """What the service did so far."""

    proposals: int = 0
    committed: int = 0
    rejected: int = 0
    duplicates: int = 0
    deadlettered: int = 0
    takeovers: int = 0
    stepdowns: int = 0
    #: Pods evicted by committed preemptions.
    evicted: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "proposals": self.proposals,
            "committed": self.committed,
            "rejected": self.rejected,
            "duplicates": self.duplicates,
            "deadlettered": self.deadlettered,
            "takeovers": self.takeovers,
            "stepdowns": self.stepdowns,
            "evicted": self.evicted,
            "reasons": dict(sorted(self.reasons.items())),
        }


class NotLeader(Exception):
    """This instance is not (or no longer) the leader; nothing was decided."""


#: Rows per log read while catching up.
_PAGE = 10_000
#: Head-conditional appends of one batch before it is appended without the head check.
_HEAD_ATTEMPTS = 20


class CommitService:
    """The commit service facade: :meth:`start`, :meth:`run`, :meth:`decide`, :meth:`stop`.

    :param store: the event store (connected, migrated).
    :param bus: the bus for proposals in and decisions out; None in the embedded mode,
        where replicas call :meth:`decide` directly.
    :param lease: the leader lease (:func:`esched.services.lease.open_lease`); default a
        :class:`LocalLease` (one process only; the fence still guards the log).
    """

    def __init__(
        self,
        store: EventStore,
        bus: Bus | None = None,
        *,
        lease: Lease | None = None,
        config: CommitConfig | None = None,
    ) -> None:
        self.store = store
        self.bus = bus
        self.lease = lease or LocalLease("commit")
        self.config = config or CommitConfig()
        self.totals = CommitTotals()
        self.state: ClusterState | None = None
        self._validator: Validator | None = None
        #: Version of the decisions stream as of :attr:`state` (the fence).
        self.decisions_version = 0
        self._leading = False
        self._stopping = asyncio.Event()
        self._lock = asyncio.Lock()  # one decision batch at a time
        #: held while a polled batch is decided and handed to _finish (see stop)
        self._handling = asyncio.Lock()
        self._lead_lock = asyncio.Lock()  # one takeover at a time
        self._producer: BusProducer | None = None
        self._consumer: BusConsumer | None = None
        self._decided: OrderedDict[str, int] = OrderedDict()  # proposal -> decision position
        self._submitted: dict[str, float] = {}  # pending pod -> submit time (epoch s)
        self._expected: set[str] = set()  # decision ids of the batch being appended
        self._foreign: list[int] = []  # positions of decisions some other writer made
        self._snapshot_at = 0
        #: The last decided batch being published (see _handle)
        self._outgoing: asyncio.Task | None = None
        #: The snapshot being written (see _snapshot)
        self._snapshotting: asyncio.Task | None = None
        #: id(envelope) -> (envelope, its JSON) of the last appended batch, for _publish
        self._payloads: dict[int, tuple[dict[str, Any], bytes]] = {}

    # ------------------------------------------------------------------ lifecycle

    @property
    def leading(self) -> bool:
        """Whether this instance is the active leader with a built state."""
        return self._leading and not self.lease.lost.is_set()

    async def start(self) -> None:
        """Connect to the bus (if any), retrying while it is unreachable. Does not wait
        for the lease: :meth:`run` and :meth:`decide` do."""
        if self.bus is None:
            return
        await retry_until(
            self._ensure_topics,
            retriable=is_transient,
            what="create topics",
            on_retry=count_retry(SERVICE, "bus"),
        )
        self._producer = self.bus.producer()
        await retry_until(
            self._producer.start,
            retriable=is_transient,
            what="producer start",
            on_retry=count_retry(SERVICE, "bus"),
        )

    async def stop(self) -> None:
        """Stop deciding, leave the group, give the lease up, disconnect; idempotent."""
        self._stopping.set()
        # Let an in-flight batch finish first (a polled one until its publishing is
        # under way, a decide() call), but not forever: a batch waiting out a database
        # outage must not keep a SIGTERM from ending the process.
        held: list[asyncio.Lock] = []
        try:
            async with asyncio.timeout(self.config.stop_timeout):
                for lock in (self._handling, self._lock):
                    await lock.acquire()
                    held.append(lock)
        except TimeoutError:
            log.warning("stopping with a decision batch still in flight")
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.stop_timeout):
                    await self._drain_snapshot()
            await self._stop_consumer()
            if self._leading:
                self._leading = False
                metrics.COMMIT_LEADER.set(0)
                thaw_heap()
            await self.lease.release()
        finally:
            for lock in reversed(held):
                lock.release()
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await producer.stop()

    async def run(self, *, exit_when_idle: bool = False, idle_polls: int = 3) -> CommitTotals:
        """Lead, decide proposals from the bus, step down on a lost lease or a fence
        conflict and stand by again, until :meth:`stop` (or idle, with
        ``exit_when_idle``: ``idle_polls`` empty polls and no lag)."""
        if self.bus is None:
            raise RuntimeError("run() needs a bus; in the embedded mode call decide()")
        while not self._stopping.is_set():
            if not await self._become_leader():
                break
            try:
                if await self._serve(exit_when_idle, idle_polls):
                    break
            except NotLeader as exc:
                log.warning("stepped down: %s; standing by", exc)
                await self._stop_consumer()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self.config.stepdown_backoff)
            finally:
                await self._stop_consumer()
        return self.totals

    async def _ensure_topics(self) -> None:
        assert self.bus is not None
        await self.bus.ensure_topics()

    async def _stop_consumer(self) -> None:
        try:
            await self._drain_outgoing()  # its offsets are committed with this consumer
        except BusError as exc:
            log.warning(
                "publishing the last batch failed (%s); its proposals will be redelivered", exc
            )
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            with contextlib.suppress(BusError):
                await consumer.stop()

    # ------------------------------------------------------------------ leadership

    async def _become_leader(self) -> bool:
        """Wait for the lease (or :meth:`stop`), then rebuild the state; False if stopping."""
        if self.leading:
            return True
        if not await self.lease.wait_unless(self._stopping):
            await self.lease.release()
            return False
        started = time.perf_counter()
        await self._rebuild()
        freeze_heap()
        self._leading = True
        self.totals.takeovers += 1
        metrics.COMMIT_LEADER.set(1)
        assert self.state is not None
        log.info(
            "commit service leading from position %d (decisions version %d), rebuilt in %.2fs",
            self.state.position,
            self.decisions_version,
            time.perf_counter() - started,
            extra={"position": self.state.position, "decisions_version": self.decisions_version},
        )
        return True

    async def _step_down(self, cause: str, why: str) -> None:
        """Stop deciding, drop the state and the lease (another instance may lead)."""
        if self._leading:
            log.error("commit service stepping down: %s", why, extra={"cause": cause})
            self.totals.stepdowns += 1
            metrics.COMMIT_STEPDOWNS.labels(cause).inc()
        self._leading = False
        metrics.COMMIT_LEADER.set(0)
        self.state = None
        self._validator = None
        thaw_heap()
        await self.lease.release()

    async def _rebuild(self) -> None:
        """State = newest snapshot (with its fence companion) + the tail of the log."""
        state = ClusterState()
        version = 0
        # Start from this service's newest fence and the state snapshot at the same
        # position. A state snapshot without a fence (e.g. `esched replay
        # --save-snapshot`) cannot be used: the fence version would be a guess.
        fence = await retry_transient_call(lambda: self.store.load_snapshot(FENCE_SNAPSHOT))
        if fence is not None:
            snap = await retry_transient_call(
                lambda: self.store.load_snapshot(SNAPSHOT_NAME, fence[0])
            )
            if snap is not None and snap[0] == fence[0]:
                state = ClusterState.from_bytes(snap[1])
                version = int(orjson.loads(fence[1])["decisions_version"])
                log.info("restored snapshot at position %d", snap[0])
            else:
                log.info("no state snapshot at fence position %d; folding the whole log", fence[0])
        self.state = state
        self.decisions_version = version
        self._validator = Validator(state, self.config.bands)
        self._decided.clear()
        self._submitted.clear()
        self._snapshot_at = state.position
        await self._catch_up(live=False)

    # ------------------------------------------------------------------ the fold

    async def _catch_up(self, *, live: bool) -> list[tuple[str, str]]:
        """Fold every event after :attr:`state`'s position up to the head; returns the
        ``(type, stream)`` of each event folded."""
        assert self.state is not None
        folded: list[tuple[str, str]] = []
        while True:
            after = self.state.position
            rows = await retry_transient_call(lambda a=after: self.store.read(a, _PAGE))
            self._fold_rows(rows, live)
            folded.extend((r.type, r.stream) for r in rows)
            if len(rows) < _PAGE:
                break
        n = self.state.n_pods
        metrics.COMMIT_PENDING_PODS.set(int((self.state.pod_phase_np[:n] == _PENDING).sum()))
        return folded

    def _fold_rows(self, rows: list[StoredEvent], live: bool) -> None:
        """Fold stored events from their bytes (the fold's bytes path) and keep the
        books; decoded are only decisions (proposal ids, bindings) and pod events whose
        stream does not name their pod (``pod/<namespace>/<name>``)."""
        assert self.state is not None
        self.state.apply_payloads(payload_pairs(rows))
        submitted = self._submitted
        for r in rows:
            etype, stream = r.type, r.stream
            if stream == DECISIONS_STREAM:
                data = orjson.loads(r.payload).get("data")
                self._decision_books(
                    r.position,
                    r.id,
                    etype,
                    r.stream_version,
                    data if isinstance(data, dict) else {},
                    r.recorded_at.timestamp(),
                    live,
                )
            elif etype in KEYED:  # submit times booked; ended before a commit: dropped
                fact = row_fact(r)
                if fact is None:
                    continue
                key = fact[2]
                if etype == POD_SUBMITTED:
                    submitted[key] = (r.time or r.recorded_at).timestamp()
                else:
                    submitted.pop(key, None)

    def _decision_books(
        self,
        position: int,
        id_: str,
        type_: str,
        stream_version: int,
        data: dict[str, Any],
        recorded_at: float,
        live: bool,
    ) -> None:
        """The service's books on one event of the decisions stream: the fence version,
        foreign writers, decided proposals, submit → commit times."""
        self.decisions_version = stream_version
        if live and id_ not in self._expected:
            self._foreign.append(position)
        proposal = data.get("proposal")
        if isinstance(proposal, str):
            self._remember(proposal, position)
        if type_ == PLACEMENT_COMMITTED:
            for b in data.get("bindings") or ():
                t0 = self._submitted.pop(b.get("pod"), None)
                if live and t0 is not None:
                    metrics.SUBMIT_TO_COMMIT_SECONDS.observe(max(0.0, recorded_at - t0))

    def _remember(self, proposal: str, position: int) -> None:
        self._decided[proposal] = position
        self._decided.move_to_end(proposal)
        while len(self._decided) > self.config.remember:
            self._decided.popitem(last=False)

    # ------------------------------------------------------------------ deciding

    async def decide(self, proposals: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Decide proposals directly (the embedded mode); one decision envelope each,
        in order. Each item is a ``esched.placement.proposed`` envelope or just its
        ``data``. Waits for the lease if this instance is not leading.

        Raises :class:`~esched.schemas.validator.InvalidEvent` for a proposal that is
        not a valid proposal, and :class:`NotLeader` if leadership is lost (nothing
        of this call was decided, or the decisions were recorded by a fenced append
        only if the store accepted them; redeliver to the new leader, it is idempotent).
        """
        items = [_proposal_data(p) for p in proposals]
        if not self.leading:
            # One caller takes the lease and rebuilds the state; concurrent first calls
            # wait here and find it leading (a second rebuild would refold the log).
            async with self._lead_lock:
                if not await self._become_leader():
                    raise NotLeader("the service is stopping")
        decisions = await self._decide_batch(items)
        await self._publish(decisions, self._appended_payloads())
        return decisions

    async def _decide_batch(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Validate, append (fenced), fold; returns the recorded decision per item."""
        async with self._lock:
            if not self.leading:
                await self._step_down("lease_lost", "lease lost before deciding")
                raise NotLeader("lease lost")
            assert self.state is not None
            attempt = 0
            revalidate = True
            while True:
                # Validate against the fold up to ``before`` and append only if the log
                # is still there: an event that got in first means validating again,
                # unless every such event leaves the verdicts as they are.
                attempt += 1
                if revalidate:
                    await self._catch_up(live=True)
                    if self._foreign:
                        await self._foreign_writer()
                    out, fresh = self._validate(items)
                positions: dict[str, int] = {}
                before = self.state.position
                if not fresh:
                    break
                checked = attempt <= _HEAD_ATTEMPTS
                if not checked:
                    metrics.COMMIT_HEAD_CONFLICTS.labels("unchecked").inc()
                    log.warning(
                        "the log head moved under %d attempts in a row; appending "
                        "%d decisions without the head check",
                        _HEAD_ATTEMPTS,
                        len(fresh),
                        extra={"attempts": _HEAD_ATTEMPTS},
                    )
                try:
                    positions = await self._append(fresh, before if checked else None)
                except HeadConflictError as exc:
                    moved = await self._catch_up(live=True)
                    if self._foreign:
                        await self._foreign_writer()
                    revalidate = not _verdicts_hold(moved, fresh)
                    if revalidate:
                        metrics.COMMIT_HEAD_CONFLICTS.labels("revalidated").inc()
                        log.info(
                            "log head moved to %d before appending at %d; validating again",
                            exc.actual,
                            exc.expected,
                        )
                    else:
                        metrics.COMMIT_HEAD_CONFLICTS.labels("unaffected").inc()
                    continue
                break
            decisions = await self._resolve(out, fresh, positions, before)
            if (
                self.config.snapshot_every
                and self.state.position - self._snapshot_at >= self.config.snapshot_every
            ):
                self._snapshot()
            return decisions

    def _validate(
        self, items: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any] | int], list[dict[str, Any]]]:
        """Decide ``items`` on the current fold: (placeholders for :meth:`_resolve`,
        the fresh decision envelopes to append)."""
        assert self._validator is not None
        validator = self._validator
        validator.begin()
        out: list[dict[str, Any] | int] = []  # envelope, or position of a known decision
        fresh: list[dict[str, Any]] = []
        in_batch: dict[str, int] = {}
        now = timestamp()
        for data in items:
            pid = data["proposal"]
            known = self._decided.get(pid)
            if known is not None:
                out.append(known)
                continue
            if pid in in_batch:
                out.append(-1 - in_batch[pid])  # same proposal twice in one batch
                continue
            verdict = validator.check(data)
            env = decision_event(data, verdict, self.config.source, now)
            if verdict.ok:
                # Victims first: the fold frees their room, then binds the preemptor.
                fresh.extend(eviction_events(data, self.config.source, now))
            in_batch[pid] = len(fresh)
            fresh.append(env)
            out.append(env)
        return out, fresh

    async def _append(
        self, fresh: list[dict[str, Any]], expected_head: int | None
    ) -> dict[str, int]:
        """Append one batch fenced on the decisions stream and, unless None, on the log
        head; fold it. Returns id -> position. Raises :class:`HeadConflictError` (nothing
        stored) if the head is not ``expected_head``."""
        assert self.state is not None
        if self.lease.lost.is_set():
            await self._step_down("lease_lost", "lease lost before appending")
            raise NotLeader("lease lost")
        expected = self.decisions_version
        now = datetime.now(UTC)
        events = [
            NewEvent(
                id=env["id"],
                type=env["type"],
                stream=DECISIONS_STREAM,
                payload=orjson.dumps(env),
                time=now,
                # The first event carries the fence; the rest follow it atomically.
                expected_version=expected if i == 0 else None,
            )
            for i, env in enumerate(fresh)
        ]
        # The same bytes go to the decisions topic (see _publish).
        self._payloads = {id(env): (env, ev.payload) for env, ev in zip(fresh, events, strict=True)}
        self._expected = {env["id"] for env in fresh}
        try:
            res = await retry_transient_call(
                lambda: self.store.append(events, expected_head=expected_head)
            )
        except HeadConflictError:
            self._expected = set()
            raise
        except ConflictError as exc:
            metrics.COMMIT_CONFLICTS.labels("fenced").inc()
            await self._step_down(
                "fenced",
                f"decisions stream is at {exc.actual}, this instance expected "
                f"{exc.expected}: another commit service wrote decisions",
            )
            raise NotLeader(str(exc)) from exc
        anomalies = dict(self.state.anomalies)
        try:
            # Our own decisions, applied at once. After a head-checked append that
            # stored every event, they are exactly positions head+1.. of the log, in
            # this order: fold them from memory instead of reading them back (a read
            # and a decode of every decision). Otherwise read the log from the store.
            start = self.state.position + 1
            if (
                expected_head is not None
                and expected_head == self.state.position
                and res.duplicates == 0
                and res.positions == list(range(start, start + len(fresh)))
            ):
                stamp = datetime.now(UTC).timestamp()
                for i, (env, ev) in enumerate(zip(fresh, events, strict=True)):
                    self.state.apply(env, start + i)
                    self._decision_books(
                        start + i, ev.id, ev.type, expected + 1 + i, env["data"], stamp, True
                    )
            else:
                await self._catch_up(live=True)
        finally:
            self._expected = set()
        stale = {
            k: v - anomalies.get(k, 0)
            for k, v in self.state.anomalies.items()
            if k.startswith("commit_") and v != anomalies.get(k, 0)
        }
        if stale:
            # Only after an unchecked append (see the module docstring): an external
            # event landed between catch-up and append.
            log.warning(
                "external events interleaved with a decision batch: %s",
                stale,
                extra={"anomalies": stale},
            )
        if self._foreign:
            await self._foreign_writer()
        return {env["id"]: pos for env, pos in zip(fresh, res.positions, strict=True)}

    async def _foreign_writer(self) -> None:
        where = self._foreign[:5]
        self._foreign = []
        metrics.COMMIT_CONFLICTS.labels("foreign_writer").inc()
        await self._step_down(
            "foreign_writer", f"decisions at positions {where} were written by another instance"
        )
        raise NotLeader(f"another commit service wrote decisions at {where}")

    async def _resolve(
        self,
        out: list[dict[str, Any] | int],
        fresh: list[dict[str, Any]],
        positions: dict[str, int],
        before: int,
    ) -> list[dict[str, Any]]:
        """Turn placeholders into recorded decisions and count the outcomes.

        ``out`` holds a fresh envelope, the position of a decision remembered from
        the log (>= 0), or ``-1 - i`` for a repeat of ``fresh[i]`` in the same batch.
        A fresh decision whose id the store already had (at or before ``before``: a
        redelivered proposal older than this instance's memory) is answered with the
        stored one, which is what the log says.
        """
        wanted = {p for p in out if isinstance(p, int) and p >= 0}
        wanted |= {pos for pos in positions.values() if pos <= before}
        stored: dict[int, dict[str, Any]] = {}
        for pos in sorted(wanted):
            rows = await retry_transient_call(lambda p=pos: self.store.read(p - 1, 1))
            if rows and rows[0].position == pos:
                stored[pos] = orjson.loads(rows[0].payload)
        recorded = [stored.get(positions[env["id"]], env) for env in fresh]
        result: list[dict[str, Any]] = []
        tally = {"duplicate": 0, "committed": 0, "rejected": 0, "pods": 0}
        for item in out:
            if isinstance(item, int) and item >= 0:
                env, kind = stored[item], "duplicate"
            elif isinstance(item, int):
                env, kind = recorded[-1 - item], "duplicate"
            else:
                env = recorded[fresh.index(item)] if positions[item["id"]] <= before else item
                kind = "duplicate" if env is not item else "fresh"
            result.append(env)
            self._count(env, kind, tally)
        # Metrics once per batch: labelled lookups per decision are measurable here.
        for outcome, n in tally.items():
            if n:
                metrics.COMMIT_PROPOSALS.labels(outcome).inc(n)
        if tally["pods"]:
            metrics.COMMITTED_PODS.inc(tally["pods"])
        return result

    def _count(self, env: dict[str, Any], kind: str, tally: dict[str, int]) -> None:
        """Count one decision in the totals and in ``tally`` (the batch's metrics)."""
        t = self.totals
        t.proposals += 1
        if kind == "duplicate":
            t.duplicates += 1
            tally["duplicate"] += 1
            return
        data = env["data"]
        if env["type"] == PLACEMENT_COMMITTED:
            t.committed += 1
            tally["committed"] += 1
            tally["pods"] += len(data["bindings"])
            if data.get("victims"):
                t.evicted += len(data["victims"])
                metrics.COMMIT_EVICTED.inc(len(data["victims"]))
        else:
            t.rejected += 1
            tally["rejected"] += 1
            reason = data["reason"]
            t.reasons[reason] = t.reasons.get(reason, 0) + 1
            metrics.COMMIT_CONFLICTS.labels(reason).inc()
            log.info(
                "rejected %s: %s (%s)",
                data["proposal"],
                reason,
                data["message"],
                extra={"proposal": data["proposal"], "replica": data["replica"], "reason": reason},
            )

    def _snapshot(self) -> None:
        """Snapshot the state and its fence version (same position) for fast takeovers:
        serialized now, written to the store in the background, one at a time (writing
        megabytes held the next decision batch back for the whole round trip)."""
        assert self.state is not None
        if self._snapshotting is not None and not self._snapshotting.done():
            return  # the previous one is still being written; a later batch tries again
        position = self.state.position
        self._snapshot_at = position
        self._snapshotting = asyncio.create_task(
            self._save_snapshot(position, self.state.to_bytes(), self.decisions_version),
            name="commit-snapshot",
        )

    async def _save_snapshot(self, position: int, data: bytes, version: int) -> None:
        try:
            await store_snapshot(self.store, position, data)
            await self.store.save_snapshot(
                FENCE_SNAPSHOT, position, orjson.dumps({"decisions_version": version})
            )
            await self.store.prune_snapshots(FENCE_SNAPSHOT, keep=10)
        except StoreError as exc:
            # Only a faster takeover is lost: the next one folds a longer tail.
            log.warning("snapshot at position %d not saved: %s", position, exc)
            return
        log.info("snapshot saved at position %d", position)

    async def _drain_snapshot(self) -> None:
        """Wait for the snapshot being written, if any."""
        task, self._snapshotting = self._snapshotting, None
        if task is not None:
            await task

    def _appended_payloads(self) -> dict[int, tuple[dict[str, Any], bytes]]:
        """The JSON of the batch just appended, for :meth:`_publish` (taken once)."""
        encoded, self._payloads = self._payloads, {}
        return encoded

    async def _publish(
        self, decisions: list[dict[str, Any]], encoded: dict[int, tuple[dict[str, Any], bytes]]
    ) -> None:
        """Send decisions to the decisions topic (after they are durable in the store);
        ``encoded``: their JSON as appended (:meth:`_appended_payloads`)."""
        if self._producer is None or not decisions or self.bus is None:
            return
        records = []
        for env in decisions:
            # A fresh decision as appended: its stored bytes; a duplicate answered from
            # the log (another object) is encoded here.
            hit = encoded.get(id(env))
            payload = hit[1] if hit is not None and hit[0] is env else orjson.dumps(env)
            records.append((_decision_key(env), payload))
        producer, topic = self._producer, self.bus.topics.decisions
        await retry_until(
            lambda: producer.send_many(topic, records),
            retriable=is_transient,
            what="decisions send",
            on_retry=count_retry(SERVICE, "bus"),
        )

    # ------------------------------------------------------------------ the bus loop

    async def _serve(self, exit_when_idle: bool, idle_polls: int) -> bool:
        """Consume proposals while leading; True when done (stopped or idle)."""
        assert self.bus is not None
        # Exclusive: the lease already makes this the only reader; group membership would
        # make a standby wait out the dead leader's session before reading anything.
        self._consumer = self.bus.consumer(
            [self.bus.topics.proposals], self.config.group, exclusive=True
        )
        await retry_until(
            self._consumer.start,
            retriable=is_transient,
            what="consumer start",
            on_retry=count_retry(SERVICE, "bus"),
        )
        empty = 0
        while not self._stopping.is_set():
            if self.lease.lost.is_set():
                await self._step_down("lease_lost", "lease lost")
                raise NotLeader("lease lost")
            msgs = await self._poll()
            if msgs:
                empty = 0
                async with self._handling:
                    await self._handle(msgs)
                continue
            empty += 1
            if exit_when_idle and empty >= idle_polls and await self._consumer.lag() == 0:
                return True
        return True

    async def _poll(self) -> list[Message]:
        assert self._consumer is not None
        return await poll_or_pause(
            self._consumer,
            self.config.poll_timeout_ms,
            self.config.batch_size,
            service=SERVICE,
            pause=0.5,
        )

    async def _handle(self, msgs: Sequence[Message]) -> None:
        """Decide a polled batch; then, in the background while the next batch is
        decided, publish its decisions, dead-letter its bad proposals and commit its
        offsets (:meth:`_finish`, one batch after the other, in order)."""
        consumer = self._consumer
        assert consumer is not None
        items: list[dict[str, Any]] = []
        dead: list[tuple[Message, str, str, str | None]] = []
        for m in msgs:
            try:
                ev = parse_event(
                    m.value,
                    allowed_types=(PLACEMENT_PROPOSED,),
                    max_bytes=self.config.max_proposal_bytes,
                )
            except InvalidEvent as exc:
                dead.append((m, exc.reason, str(exc), exc.field))
                continue
            items.append(ev["data"])
        # NotLeader: this batch's offsets stay uncommitted (the previous batch finishes).
        decisions = await self._decide_batch(items) if items else []
        encoded = self._appended_payloads()
        offsets: dict[tuple[str, int], int] = {}
        for m in msgs:
            key = (m.topic, m.partition)
            offsets[key] = max(offsets.get(key, 0), m.offset + 1)
        # The previous batch's Kafka round trips (decisions acknowledged, offsets
        # committed) ran while this one was decided; this one's start once they are done.
        await self._drain_outgoing()
        self._outgoing = asyncio.create_task(
            self._finish(consumer, decisions, encoded, dead, offsets), name="commit-publish"
        )

    async def _finish(
        self,
        consumer: BusConsumer,
        decisions: list[dict[str, Any]],
        encoded: dict[int, tuple[dict[str, Any], bytes]],
        dead: list[tuple[Message, str, str, str | None]],
        offsets: dict[tuple[str, int], int],
    ) -> None:
        """Publish a decided batch (durable in the store already), dead-letter its bad
        proposals, then commit its offsets."""
        await self._publish(decisions, encoded)
        if dead:
            await self._deadletter(dead)
        try:
            await consumer.commit(offsets)
        except BusError as exc:
            # Decisions are durable; the next leader re-reads these proposals and the
            # decision ids make them duplicates. Nothing is decided twice.
            log.warning("offset commit failed (%s); proposals will be redelivered", exc)

    async def _drain_outgoing(self) -> None:
        """Wait for the batch being published (its failure is raised here)."""
        task, self._outgoing = self._outgoing, None
        if task is not None:
            await task

    async def _deadletter(self, dead: list[tuple[Message, str, str, str | None]]) -> None:
        assert self._producer is not None and self.bus is not None
        producer, topic = self._producer, self.bus.topics.deadletter
        records = [
            (m.key, deadletter_record(m, reason, text, f, service=SERVICE))
            for m, reason, text, f in dead
        ]
        await retry_until(
            lambda: producer.send_many(topic, records),
            retriable=is_transient,
            what="dead-letter send",
            on_retry=count_retry(SERVICE, "bus"),
        )
        for m, reason, text, _f in dead:
            self.totals.deadlettered += 1
            metrics.DEADLETTER.labels(SERVICE, reason).inc()
            log.info("dead-letter %s/%d@%d: %s", m.topic, m.partition, m.offset, text)


#: Events that change no verdict of a batch they interleave with (unless they name one
#: of its pods): a new pod is only more pending work, a report changes nothing.
_NEUTRAL = frozenset({POD_SUBMITTED, POD_UNSCHEDULABLE})


def _verdicts_hold(moved: list[tuple[str, str]], fresh: list[dict[str, Any]]) -> bool:
    """Whether the decisions ``fresh`` stay exactly what validation said after the
    events ``moved`` got into the log first, so they may be appended after them
    without validating again. Only pod submissions and unschedulable reports of
    other pods qualify (ingest appending new work is the usual case under load), and
    only for batches without victims: preemption and reclaim legality depend on
    queue demand, which a new pod changes.
    """
    if not moved or any(t not in _NEUTRAL for t, _stream in moved):
        return False
    pods: set[str] = set()
    for env in fresh:
        data = env["data"]
        if data.get("victims") or data.get("reclaim"):
            return False
        pods.update(stream_name(POD, b["pod"]) for b in data["bindings"])
    return not any(stream in pods for _t, stream in moved)


def _decision_key(env: dict[str, Any]) -> bytes:
    """Partition key of a decision: its gang, else its first pod (per-object order)."""
    return proposal_key(env["data"]).encode()


def _proposal_data(item: dict[str, Any]) -> dict[str, Any]:
    """The ``data`` of a proposal given as an envelope or as bare data, validated."""
    if "specversion" in item and "data" in item:
        env = item
    else:
        env = proposal_envelope(item, f"esched/replica/{item.get('replica')}")
    return validate_event(env, allowed_types=(PLACEMENT_PROPOSED,))["data"]


async def retry_transient_call(fn: Any) -> Any:
    """``fn()`` retried on transient store errors with backoff, forever: a commit
    service whose database went away waits for it rather than dying."""
    return await retry_until(
        fn, retriable=is_transient, what="store operation", on_retry=count_retry(SERVICE, "store")
    )
