"""Admission and allocation order: what the dispatcher lets through, and in which order.

Volcano's *enqueue* and the order of its *allocate* action, on the dispatcher's fold
(the dispatcher is the one place that hands out work, so this is where queues act;
the audit replays the same rules):

**Rejected at submission** (an ``esched.pod.rejected`` event; the fold makes the pod
Failed, it is never scheduled, nothing waits forever):

* ``QueueNotFound``: its queue (a PodGroup's ``spec.queue`` for its members, else the
  pod's queue annotation or label) was never declared by an ``esched.queue.upserted``
  before the submission, as Volcano's PodGroup and Job webhooks refuse a queue they
  cannot find (``default`` always exists);

* ``QueueClosing`` / ``QueueClosed``: its queue admits nothing new;
* ``QuotaExceeded``: its requests would take a quota of its queue or namespace
  (overall or of its band) over its limit (:mod:`esched.core.quota`). Quota counts
  active pods (Pending or Running) in log order, so the verdict is deterministic.
  A gang is admitted whole or not at all: when one member is rejected, its other
  pending members and those submitted later are rejected too (until its PodGroup
  is submitted again, or a Volcano Job of its name, which stands for it), so no
  part of a gang waits forever below ``minMember``.

**Held** (a job -- a pod, or a gang as a whole -- stays pending, not handed out, and is
looked at again when capacity frees or a queue changes):

* ``QueueClosed``: a Closed queue schedules nothing (pods submitted before it closed
  wait for it to reopen);
* ``QueueCapability``: the job's minimum resources (a PodGroup's ``minResources``,
  else the requests of the members it still needs to reach ``minMember``; a pod's
  requests) on top of what its queue holds -- bound pods plus jobs already let
  through and still pending ("Inqueue") -- exceed the ``capability`` of its queue or
  of an ancestor;
* ``ClusterCapacity``: a gang whose minimum exceeds the whole cluster's allocatable
  (a single pod is instead reported unschedulable by a replica, with its reasons);
* ``QueueOverused``: Volcano's proportion plugin (``overused`` and ``allocatable``):
  while another queue waits, a queue's job is let through only if what the queue
  holds plus the job's minimum stays within its deserved share (water-filled,
  :func:`esched.core.queues.deserved`) in every resource the job asks for. A
  queue alone with work takes what is free. Another queue's ``guarantee`` is
  never lent: a top-level queue's capability is at most the cluster minus the
  other top-level queues' guarantees (Volcano's ``realCapability``; held as
  ``QueueCapability``).

A job already let through (a pod re-published after an unschedulable report) is
not judged again: it holds its room until it is placed or ends (Volcano's
Inqueue).

**Order** of what is let through, as Volcano's allocate: queue priority (high
first); among queues of equal priority the lowest dominant share (allocated plus
what this pass lets through, over the queue's fair share: weights act here);
within a queue job priority (high first: its Borg band, so a ``priorityClassName``
mapped by ``bands.classes`` counts, then its numeric priority), then arrival order. The queues are
interleaved job by job, so two busy queues of weights 2:1 get work in about
that ratio.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from esched.core._state import ClassMemo, ClusterState
from esched.core.hdrf import PENDING_PODS, RUNNING_PODS, state_tree
from esched.core.phases import PHASE_PENDING, PHASE_RUNNING
from esched.core.queues import (
    DEFAULT_QUEUE,
    SHARE_IGNORED,
    QueueSpec,
    QueueTree,
    check_hierarchy,
    cluster_allocatable,
    deserved,
    state_queue_specs,
)
from esched.core.quota import Quota, QuotaExceeded
from esched.schemas.events import (
    JOB_SUBMITTED,
    POD_DELETED,
    POD_FAILED,
    POD_REJECTED,
    POD_SUBMITTED,
    POD_SUCCEEDED,
    PODGROUP_SUBMITTED,
    QUEUE_UPSERTED,
    metadata_key,
    split_key,
)

__all__ = [
    "OBSERVED",
    "QUEUE_NOT_FOUND",
    "Admission",
    "Fact",
    "Rejection",
    "WorkItem",
    "event_key",
    "gang_rows",
    "pending_members",
]

log = logging.getLogger(__name__)

_TERMINAL = frozenset({POD_SUCCEEDED, POD_FAILED, POD_DELETED, POD_REJECTED})
#: The rejection of a pod whose queue (its own, or its PodGroup's) was never declared.
QUEUE_NOT_FOUND = "QueueNotFound"
#: The event types :meth:`Admission.observe` reads.
OBSERVED = frozenset({QUEUE_UPSERTED, POD_SUBMITTED, PODGROUP_SUBMITTED, JOB_SUBMITTED}) | _TERMINAL

#: Jobs let through that :meth:`Admission.release` keeps without pruning them (no
#: queue has a capability, so nothing reads them): pruned at twice the size left
#: by the last pruning, at least this, so the pruning is O(1) per job amortized.
_PRUNE_MIN = 4096
#: int64's least: the priority of a gang without pending members (``np.iinfo`` builds
#: an object per call: ~8,000 instructions a release).
_INT64_MIN = int(np.iinfo(np.int64).min)

#: (cause, kind "pod"|"gang", key, log position)
WorkItem = tuple[str, str, str, int]
#: What admission reads of one event: (log position, type, the :func:`event_key` of a
#: pod or PodGroup event, its ``data`` where the type needs more than the key: queue
#: upserts; else may be None).
Fact = tuple[int, str, str, dict[str, Any] | None]


@dataclass(frozen=True, slots=True)
class Rejection:
    """A submission refused at admission; becomes one ``esched.pod.rejected`` event."""

    pod: str
    queue: str
    reason: str  #: QuotaExceeded | QueueClosing | QueueClosed | QueueNotFound
    message: str
    event_id: str
    quota: QuotaExceeded | None = None

    def data(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pod": self.pod,
            "queue": self.queue,
            "reason": self.reason,
            "message": self.message,
        }
        if self.quota is not None:
            out["quota"] = self.quota.as_dict()
        return out


def event_key(data: dict[str, Any]) -> str:
    """The ``namespace/name`` of the pod (or PodGroup) an event's ``data`` is about:
    internal records name it (``"pod"``), Kubernetes objects in their metadata."""
    if "pod" in data:
        return str(data["pod"])
    return metadata_key(data.get("metadata"))


def _member_rejection(first: Rejection, gang: str, pod: str, pos: int) -> Rejection:
    """The rejection of ``pod`` at log position ``pos``, a member of ``gang``, which
    ``first`` rejected: its queue, reason and quota."""
    return Rejection(
        pod,
        first.queue,
        first.reason,
        f"gang {gang} was rejected: {first.message}",
        f"rejected-{pod}-{pos}",
        first.quota,
    )


def gang_rows(
    k: int, rows: np.ndarray, req: np.ndarray, prio: np.ndarray, band: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row of ``k`` (each an asked gang), over the pending members in ``rows``
    with their requests, priorities and bands: the requests summed, the count, the
    highest priority (int64's least without members) and the highest band."""
    gang_req = np.zeros((k, req.shape[1]), dtype=np.int64)
    gang_n = np.bincount(rows, minlength=k).astype(np.int64)
    gang_prio = np.full(k, _INT64_MIN, dtype=np.int64)
    gang_band = np.zeros(k, dtype=np.int64)
    if len(rows) and gang_n.max() == 1:
        # One pending member a gang (one-pod Jobs): its values are the gang's
        # (ufunc.at costs ~1,000 instructions an element).
        gang_req[rows] = req
        gang_prio[rows] = prio
        gang_band[rows] = band
    elif len(rows):
        np.add.at(gang_req, rows, req)
        np.maximum.at(gang_prio, rows, prio)
        np.maximum.at(gang_band, rows, band)
    return gang_req, gang_n, gang_prio, gang_band


def pending_members(st: ClusterState, gangs: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The slots of the Pending members of ``gangs`` (distinct gang ids) and each
    one's gang id: the pending pods whose gang is one of them, read off the gangs'
    own slots (:meth:`ClusterState.gang_members`) instead of every pending pod."""
    index, keys, gang_members = st.pod_index, st.gang_keys, st.gang_members
    slots: list[int] = []
    members: list[int] = []
    # One loop, no comprehension per gang (a one-pod Job's gang: one member).
    for g in gangs:
        for p in gang_members(keys[g], "Pending"):
            slots.append(index[p])
            members.append(g)
    return np.array(slots, dtype=np.int64), np.array(members, dtype=np.int64)


class Admission:
    """Quota accounting, rejections, holding and ordering for one dispatcher's fold.

    :param quota: limits from the config (:func:`esched.core.quota.parse_quota`).
    """

    def __init__(self, quota: Quota | None = None, queue_hierarchy: str = "parent") -> None:
        self.quota = quota if quota is not None else Quota()  # no limits may still carry bands
        #: where the queue tree comes from (``esched.core.queues.QUEUE_HIERARCHIES``)
        self.queue_hierarchy = check_hierarchy(queue_hierarchy)
        #: pod -> (scopes, band, requests) it is charged with
        self._charged: dict[str, tuple[list[str], str, dict[str, int]]] = {}
        self._used: dict[tuple[str, str | None], dict[str, int]] = {}
        #: pods whose rejection is decided but not yet folded
        self.rejecting: set[str] = set()
        #: (kind, key) -> why it is held
        self.held: dict[tuple[str, str], str] = {}
        self._held_items: dict[tuple[str, str], WorkItem] = {}
        #: jobs let through and maybe still pending (they hold their queue's capability)
        self._inflight: set[tuple[str, str]] = set()
        #: without capabilities, prune ``_inflight`` once it is this large
        self._prune_at = _PRUNE_MIN
        self.rejected_total: dict[str, int] = {}
        #: gang -> the rejection of its first refused member
        self._rejected_gangs: dict[str, Rejection] = {}
        #: queue -> its state as of the event being judged (a batch is folded before
        #: it is judged, so the fold's state may be from a later upsert of the batch)
        self._queue_state: dict[str, str] = {}
        #: queues upserted as of the event being judged (``default`` always exists)
        self._declared: set[str] = set()
        #: band per class id for the job order, and the memo of the state they are of
        #: (its reused() ids: bands to resolve again)
        self._bands = np.zeros(0, dtype=np.int64)
        self._band_memo = ClassMemo()

    # ------------------------------------------------------------------ quota accounting

    def _charge(self, pod: str, scopes: list[str], band: str, req: dict[str, int]) -> None:
        self._charged[pod] = (scopes, band, req)
        for scope in scopes:
            for b in (None, band):
                used = self._used.setdefault((scope, b), {})
                for r, v in req.items():
                    used[r] = used.get(r, 0) + v

    def _uncharge(self, pod: str) -> None:
        entry = self._charged.pop(pod, None)
        if entry is None:
            return
        scopes, band, req = entry
        for scope in scopes:
            for b in (None, band):
                used = self._used[(scope, b)]
                for r, v in req.items():
                    used[r] -= v

    def used(self, scope: str, band: str | None = None) -> dict[str, int]:
        """Requests of the active pods charged to ``scope`` (``queue/x``, ``namespace/y``)."""
        return {r: v for r, v in (self._used.get((scope, band)) or {}).items() if v}

    def _verdict(
        self, st: ClusterState, pod: str, idx: int, event_id: str, check_state: bool
    ) -> Rejection | None:
        """Charge a Pending pod, or return why it is rejected (not charged)."""
        q = st.queue_of(idx)
        queue = st.queue_names[q]
        if queue not in self._declared and queue != DEFAULT_QUEUE:
            # Volcano's PodGroup (and Job) webhook: the queue must exist at submission.
            return Rejection(
                pod,
                queue,
                QUEUE_NOT_FOUND,
                f'unable to find queue: queue.scheduling.volcano.sh "{queue}" not found '
                "(no Queue of that name before this submission in the log)",
                event_id,
            )
        state = self._queue_state.get(queue) or st.queue_meta[q].get("state") or "Open"
        if check_state and state in ("Closing", "Closed"):
            return Rejection(
                pod,
                queue,
                f"Queue{state}",
                f"queue {queue} is {state}: it admits no new pods",
                event_id,
            )
        if not self.quota:
            return None
        namespace = split_key(pod)[0]
        scopes = self.quota.scopes(queue, namespace)
        if not scopes:
            return None
        spec = st.class_specs[st.class_of(idx)]
        band = self.quota.band(st.priority_of(idx), spec.get("priorityClassName"))
        req = spec["requests"]
        over = self.quota.check(scopes, band, req, self._used)
        if over is not None:
            return Rejection(pod, queue, "QuotaExceeded", over.message(pod), event_id, over)
        self._charge(pod, scopes, band, dict(req))
        return None

    def _charge_active(self, st: ClusterState, pod: str, idx: int) -> None:
        if not self.quota:
            return
        q = st.queue_of(idx)
        scopes = self.quota.scopes(st.queue_names[q], split_key(pod)[0])
        if scopes:
            spec = st.class_specs[st.class_of(idx)]
            band = self.quota.band(st.priority_of(idx), spec.get("priorityClassName"))
            self._charge(pod, scopes, band, dict(spec["requests"]))

    def gang_rejected(self, gang: str) -> bool:
        """Whether ``gang`` was refused at admission (its members are rejected)."""
        return gang in self._rejected_gangs

    def _reject_gang(
        self, st: ClusterState, gang: str, first: Rejection, pos: int
    ) -> list[Rejection]:
        """A gang is admitted whole or not at all: once a member is rejected, its other
        pending members (and members submitted later) are rejected too and give their
        quota back, so no part of it waits forever below minMember."""
        self._rejected_gangs[gang] = first
        out = []
        for pod in st.gang_members(gang, "Pending"):
            if pod == first.pod or pod in self.rejecting:
                continue
            self._uncharge(pod)
            self.rejecting.add(pod)
            out.append(_member_rejection(first, gang, pod, pos))
        return out

    def _rejected(self, rejections: list[Rejection]) -> list[Rejection]:
        for r in rejections:
            self.rejecting.add(r.pod)
            self.rejected_total[r.reason] = self.rejected_total.get(r.reason, 0) + 1
            log.info("rejected %s: %s", r.pod, r.message)
        return rejections

    def start(self, st: ClusterState) -> list[Rejection]:
        """Take over: charge every active pod of the fold, in slot order; a Pending pod
        the quota has no room for is rejected (a leader that died before writing a
        rejection). Pending pods of a Closing queue were admitted before it closed."""
        self._charged.clear()
        self._used.clear()
        self.rejecting.clear()
        self._rejected_gangs.clear()
        self._queue_state = {
            st.queue_names[q]: st.queue_meta[q].get("state") or "Open" for q in range(st.n_queues)
        }
        self._declared = {
            st.queue_names[q] for q in range(st.n_queues) if not st.queue_meta[q].get("implicit")
        }
        self.held.clear()
        self._held_items.clear()
        self._inflight.clear()
        out = []
        phase = st.pod_phases()
        keys = cast("list[str]", st.pod_keys)  # every running or pending slot has a key
        for idx in np.flatnonzero(phase == PHASE_RUNNING):
            self._charge_active(st, keys[idx], int(idx))
        for idx in np.flatnonzero(phase == PHASE_PENDING):
            pod = keys[idx]
            if pod in self.rejecting:
                continue  # taken down with its gang already
            r = self._verdict(st, pod, int(idx), f"rejected-{pod}-at-{st.position}", False)
            if r is not None:
                out.append(r)
                self.rejecting.add(pod)
                g = st.gang_of(idx)
                if g >= 0:
                    out.extend(self._reject_gang(st, st.gang_keys[g], r, int(st.position)))
        return self._rejected(out)

    def observe(self, st: ClusterState, events: Iterable[Fact]) -> list[Rejection]:
        """After a batch is folded: admit or reject its submissions, in log order, and
        release the quota of pods that ended. ``events``: the batch's :data:`Fact` of
        each event admission reads (the rest may be left out)."""
        out: list[Rejection] = []
        for pos, etype, key, data in events:
            if etype == QUEUE_UPSERTED:
                # Submissions are judged against the queue's state at their own position.
                queue = data or {}
                name = (queue.get("metadata") or {}).get("name")
                if isinstance(name, str) and name:
                    self._declared.add(name)
                    self._queue_state[name] = str(
                        (queue.get("status") or {}).get("state") or "Open"
                    )
            elif etype == POD_SUBMITTED:
                self._submitted(st, key, pos, out)
            elif etype == PODGROUP_SUBMITTED or etype == JOB_SUBMITTED:
                # A PodGroup submitted (again) starts a fresh admission of its members;
                # a Volcano Job stands for its PodGroup (the gang of the Job's key,
                # which its first submission implies), so a gang rejected before its
                # Job came (pods naming it early) is judged afresh from the Job on; a
                # Job published again counts as its PodGroup published again.
                self._rejected_gangs.pop(key, None)
                if etype == JOB_SUBMITTED:
                    # Its first submission implies its first pods (the fold has them,
                    # in its gang): each judged as a submission at the Job's position.
                    # Members already judged are skipped, so a Job published again,
                    # which implies nothing, judges nothing.
                    for pod in st.gang_members(key):
                        self._submitted(st, pod, pos, out)
            elif etype in _TERMINAL:
                self._uncharge(key)
                if etype == POD_REJECTED or etype == POD_DELETED:
                    self.rejecting.discard(key)
        return self._rejected(out)

    def _submitted(self, st: ClusterState, pod: str, pos: int, out: list[Rejection]) -> None:
        """Admit or reject the submission of ``pod`` at log position ``pos``."""
        idx = st.pod_index.get(pod)
        if idx is None or pod in self._charged or pod in self.rejecting:
            return  # invalid, a resubmission the fold ignored, or rejected
        phase = st.phase_of(idx)
        if phase == PHASE_RUNNING:
            self._charge_active(st, pod, idx)  # already running: nothing to decide
        elif phase == PHASE_PENDING:
            g = st.gang_of(idx)
            gang = st.gang_keys[g] if g >= 0 else None
            first = self._rejected_gangs.get(gang) if gang else None
            r: Rejection | None
            if first is not None and gang is not None:
                r = _member_rejection(first, gang, pod, pos)
            else:
                r = self._verdict(st, pod, idx, f"rejected-{pod}-{pos}", True)
            if r is not None:
                out.append(r)
                self.rejecting.add(r.pod)
                if gang and first is None:
                    out.extend(self._reject_gang(st, gang, r, pos))

    # ------------------------------------------------------------------ holding and order

    def release(self, st: ClusterState, items: list[WorkItem]) -> list[WorkItem]:
        """The items to hand out now, in allocation order; the rest are held."""
        refused = self.rejecting, self._rejected_gangs
        items = [it for it in items if it[2] not in refused[it[1] == "gang"]]
        if not items:
            return []
        nq, nr = st.n_queues, st.n_res
        if nq == 0:
            return items
        res_names = list(st.res_names[:nr])
        phase = st.pod_phases()
        class_req = st.class_requests()
        # Job priority is (band, priority): a priorityClassName mapped to a band by
        # bands.classes ranks by that band whatever its number (as preemption does).
        class_band = self._class_bands(st)
        # The state's queues in row order, then any intermediate ones of the tree.
        specs = state_queue_specs(st, self.queue_hierarchy)
        tree = QueueTree(specs)
        caps = {
            name: {r: v for r, v in s.capability.items() if r in st.res_index}
            for name, s in tree.specs.items()
            if s.capability
        }
        guaranteed = any(s.guarantee for s in tree.specs.values())
        # The queue of each item (a gang's from its PodGroup); unknown ones are dropped.
        located: list[tuple[int, WorkItem, int]] = []  # (queue, item, pod slot or gang id)
        for it in items:
            if it[1] == "pod":
                idx = st.pod_index.get(it[2])
                if idx is not None:
                    located.append((st.queue_of(idx), it, idx))
            else:
                g = st.gang_index.get(it[2])
                if g is not None:
                    q = st.queue_index.get(st.gang_meta[g].get("queue") or DEFAULT_QUEUE, 0)
                    located.append((q, it, g))
        gangs_asked = any(it[1] == "gang" for _q, it, _i in located)
        # Fair shares order the queues: only needed when the items span several.
        several = len({q for q, _it, _i in located}) > 1
        # Every pending pod's requests, queue and gang: O(pending pods) of numpy per
        # release, so only when a gang's minimum, a capability or the shares read them
        # (several queues: whether another one waits, for the deserved share).
        # Only those read every pending pod; a gang's members are found by its own slots.
        all_pending = bool(caps) or guaranteed or several or nq > 1
        if all_pending:
            pend_idx = np.flatnonzero(phase == PHASE_PENDING)
            pend_req = class_req[st.pod_classes()[pend_idx]]
            pend_q = st.pod_queues()[pend_idx]
            pend_g = st.pod_gangs()[pend_idx]
        else:
            pend_idx = pend_q = pend_g = np.zeros(0, dtype=np.int64)
            pend_req = np.zeros((0, nr), dtype=np.int64)
        # Per asked gang (row ``row[g]``): its pending members' requests and count (for
        # its minimum), their highest priority and band. Rows for the asked gangs only:
        # rows for every gang cost O(gangs) per release, and one-pod Jobs make a gang
        # per pod.
        asked_ids = sorted({i for _q, it, i in located if it[1] == "gang"})
        row = {g: r for r, g in enumerate(asked_ids)}
        # Per asked gang's row: its minimum, pending members, highest priority and band
        # (as lists: a numpy scalar read per gang cost a one-pod Job more than its value).
        gang_mins: list[np.ndarray] = []
        gang_n: list[int] = []
        gang_prio: list[int] = []
        gang_band: list[int] = []
        if asked_ids:
            asked = np.array(asked_ids, dtype=np.int64)
            # Only the asked gangs' members: with one-pod Volcano Jobs every pending pod
            # is some gang's, and summing them all cost O(pending pods) per release.
            if all_pending:
                sel = np.flatnonzero(np.isin(pend_g, asked, kind="table"))
                of, members = pend_idx[sel], pend_g[sel]
            else:
                # Without the pending pods' arrays (the common case, one queue without
                # capabilities), the members from each gang's own slots: finding every
                # pending pod's cost a one-pod Job ~27,000 instructions per release.
                of, members = pending_members(st, asked_ids)
            cids = st.pod_classes()[of]
            rows_req, rows_n, rows_prio, rows_band = gang_rows(
                len(asked_ids),
                np.searchsorted(asked, members),
                class_req[cids],
                st.pod_priorities()[of],
                class_band[cids],
            )
            gang_n, gang_prio, gang_band = rows_n.tolist(), rows_prio.tolist(), rows_band.tolist()
            mins = self._gang_minima(st, asked_ids, rows_req, gang_n, res_names)
            gang_mins = list(mins)
        # Queues with pending work: while two or more wait, each is held to its deserved
        # share (proportion's overused check; one queue alone takes what is free).
        waiting = np.zeros((nq, nr), dtype=np.int64)
        if len(pend_idx) and nq > 1:  # (one queue is never contended)
            np.add.at(waiting, pend_q, pend_req)
        contended = int(np.count_nonzero(waiting.any(axis=1))) > 1
        # What each queue holds: bound pods plus jobs let through and still pending. Only
        # capabilities and the deserved check read it; without them the jobs let through
        # are only pruned now and then (a pass over them per release cost O(backlog) per
        # flush under load).
        held_q = np.array(st.queue_allocations(), dtype=np.int64)
        if self._inflight and (
            caps or guaranteed or contended or len(self._inflight) > self._prune_at
        ):
            slots, gangs = [], []
            for kind, key in list(self._inflight):
                if kind == "pod":
                    idx = st.pod_index.get(key)
                    if idx is None or phase[idx] != PHASE_PENDING:
                        self._inflight.discard((kind, key))
                        continue
                    slots.append(idx)
                else:
                    g = st.gang_index.get(key)
                    if g is None or st.gang_count(g, PHASE_PENDING) == 0:
                        self._inflight.discard((kind, key))
                        continue
                    gangs.append(g)
            self._prune_at = 2 * len(self._inflight) + _PRUNE_MIN
            if caps or guaranteed or contended:
                mask = np.isin(pend_idx, slots) if slots else np.zeros(len(pend_idx), dtype=bool)
                if gangs:
                    mask |= np.isin(pend_g, gangs)
                if mask.any():
                    np.add.at(held_q, pend_q[mask], pend_req[mask])
        alloc = np.asarray(st.queue_allocations(), dtype=np.int64)
        # O(nodes): only the shares, the guarantees and a gang's cluster-capacity check
        # read it.
        cluster = (
            cluster_allocatable(st) if several or gangs_asked or contended or guaranteed else {}
        )
        if guaranteed:
            self._guarantee_caps(tree, caps, cluster, st)
        fair: dict[str, dict[str, Any]] = {}
        if several or contended:
            demand = {
                specs[q].name: {res_names[r]: int(alloc[q, r] + waiting[q, r]) for r in range(nr)}
                for q in range(nq)
            }
            fair = deserved(specs, cluster, demand)
        # Capability is checked on the queue and its ancestors (subtree totals).
        sub_used: dict[str, np.ndarray] = {}
        for q in range(nq if caps else 0):
            name = specs[q].name
            a: str | None = name
            while a is not None:
                sub_used.setdefault(a, np.zeros(nr, dtype=np.int64))
                sub_used[a] += held_q[q]
                a = tree.parent.get(a)

        # Volcano's drf plugin with enableHierarchy orders the queues (and drf the jobs)
        # under the annotations tree: esched.core.hdrf.
        hdrf = (
            state_tree(st, tree, cluster, pend_idx, pend_req)
            if several and self.queue_hierarchy == "annotations"
            else None
        )
        # A gang whose minimum exceeds the cluster is held (ClusterCapacity): checked
        # for every asked gang at once (one comparison per gang cost a one-pod Job ~2 µs).
        over_rows: list[bool] = []
        if asked_ids:
            cluster_vec = np.array([cluster.get(n, 0) for n in res_names], dtype=np.int64)
            over_rows = cast("list[bool]", (mins > cluster_vec).any(axis=1).tolist())
        oversized: set[int] = set()  # the seq of each such gang's item
        # Per queue: its items, ordered by job priority (band, then priority; high
        # first), then (hdrf) the job's dominant share (low first), then arrival.
        per_queue: dict[int, list[tuple[int, int, float, int, WorkItem, np.ndarray]]] = {}
        for seq, (q, it, i) in enumerate(located):
            drf = 0.0
            if it[1] == "pod":
                cid = st.class_of(i)
                prio = st.priority_of(i)
                band = int(class_band[cid])
                req = class_req[cid].astype(np.int64)
            else:
                r = row[i]
                prio = gang_prio[r] if gang_n[r] else 0
                band = gang_band[r]
                req = gang_mins[r]
                if over_rows[r]:
                    oversized.add(seq)
                if hdrf is not None:
                    drf = hdrf.job_share(specs[q].name, f"gang:{it[2]}")
            per_queue.setdefault(q, []).append((-band, -prio, drf, seq, it, req))
        for lst in per_queue.values():
            lst.sort(key=lambda t: (t[0], t[1], t[2], t[3]))

        def share_of(q: int, extra: np.ndarray) -> float:
            if not several:
                return 0.0  # one queue: nothing to order it against
            f = fair.get(specs[q].name) or {}
            best = 0.0
            for r in range(nr):
                name = res_names[r]
                a = alloc[q, r] + extra[r]
                if a <= 0 or name == "pods":
                    continue
                d = f.get(name, 0)
                s = a / d if d > 0 else 1.0
                best = max(best, s)
            return best

        released_q = {q: np.zeros(nr, dtype=np.int64) for q in per_queue}
        # The deserved share as a cap (leaf queues; a parent's share is its children's).
        share_cap: dict[int, np.ndarray] = {}
        if contended:
            share_cols = np.array([name not in SHARE_IGNORED for name in res_names], dtype=bool)
            for q in per_queue:
                name = specs[q].name
                if not tree.children.get(name):
                    f = fair.get(name) or {}
                    share_cap[q] = np.array([int(f.get(n, 0)) for n in res_names], dtype=np.int64)
        heap = (
            [(-specs[q].priority, share_of(q, released_q[q]), specs[q].name, q) for q in per_queue]
            if hdrf is None
            else []
        )
        heapq.heapify(heap)
        # hdrf: a release moves its queue's ancestors' shares, so every queue's key is
        # read afresh at each turn (a heap would keep stale keys).
        live = set(per_queue) if hdrf is not None else set()
        cursor = dict.fromkeys(per_queue, 0)
        out: list[WorkItem] = []
        while heap or live:
            if hdrf is not None:
                q = min(live, key=lambda q: (-specs[q].priority, hdrf.queue_key(specs[q].name), q))
                live.discard(q)
            else:
                q = heapq.heappop(heap)[3]
            lst = per_queue[q]
            i = cursor[q]
            _nb, _np, _drf, seq, it, req = lst[i]
            cursor[q] = i + 1
            job = (it[1], it[2])
            again = job in self._inflight  # let through before: holds its room already
            reason = (
                "QueueClosed"
                if again and specs[q].state == "Closed"
                else None
                if again
                else self._hold_reason(specs[q], tree, caps, sub_used, req, st, seq in oversized)
            )
            cap = share_cap.get(q)
            if reason is None and cap is not None and not again:
                used = held_q[q] + released_q[q] + req
                if bool(np.any(share_cols & (req > 0) & (used > cap))):
                    reason = "QueueOverused"
            if reason is None:
                a = specs[q].name if caps else None
                while a is not None:
                    sub_used[a] += req
                    a = tree.parent.get(a)
                if several or contended:  # only the shares and the deserved cap read it
                    released_q[q] += req
                if hdrf is not None:
                    amount = req.astype(np.float64)
                    if it[1] == "gang":
                        hdrf.allocate(specs[q].name, f"gang:{it[2]}", amount)
                    else:  # the pod's job now holds all it asks for
                        hdrf.allocate(specs[q].name, RUNNING_PODS, amount, asks=True)
                        hdrf.take(specs[q].name, PENDING_PODS, amount)
                self._inflight.add(job)
                self.held.pop(job, None)
                self._held_items.pop(job, None)
                out.append(it)
            else:
                if self.held.get(job) != reason:
                    log.info("holding %s %s: %s", it[1], it[2], reason)
                self.held[job] = reason
                self._held_items[job] = it
            if cursor[q] < len(lst):
                if hdrf is not None:
                    live.add(q)
                else:
                    heapq.heappush(
                        heap, (-specs[q].priority, share_of(q, released_q[q]), specs[q].name, q)
                    )
        return out

    def _class_bands(self, st: ClusterState) -> np.ndarray:
        """The band of every equivalence class (at least one entry), cached: only the
        ids new since, or given to a new class since (:class:`ClassMemo`), are resolved."""
        memo = self._band_memo.on(st)
        if memo is not self._band_memo:
            self._band_memo, have = memo, np.zeros(0, dtype=np.int64)
        else:
            have = self._bands
            reused = memo.reused()
            if reused:
                have = have[: reused[0]]
        n = max(int(st.n_classes), 1)
        if len(have) < n:
            bands = self.quota.bands
            specs = st.class_specs
            # By (priority, priorityClassName): new classes mostly share a few (each
            # one-pod Volcano Job's pod is a class of its own), and band_of is a call.
            by_key: dict[tuple[Any, Any], int] = {}
            new: list[int] = []
            for c in range(len(have), n):
                spec = specs[c] if c < len(specs) else None
                if spec is None:
                    new.append(0)
                    continue
                key = (spec["priority"], spec.get("priorityClassName"))
                band = by_key.get(key)
                if band is None:
                    band = by_key[key] = int(bands.band_of(int(key[0]), key[1]))
                new.append(band)
            have = np.concatenate([have, np.array(new, dtype=np.int64)])
        self._bands = have
        return have

    @staticmethod
    def _guarantee_caps(
        tree: QueueTree, caps: dict[str, dict[str, int]], cluster: dict[str, int], st: ClusterState
    ) -> None:
        """Volcano's ``realCapability``: a top-level queue may use at most the cluster less
        the other top-level queues' guarantees (a guarantee is reserved, never lent);
        merged into ``caps`` (the smaller limit wins)."""
        tops = tree.children.get(None, [])
        total: dict[str, int] = {}
        for t in tops:
            for r, v in tree.specs[t].guarantee.items():
                total[r] = total.get(r, 0) + v
        for t in tops:
            own = tree.specs[t].guarantee
            limits = caps.setdefault(t, {})
            for r, g in total.items():
                if r not in st.res_index or r not in cluster:
                    continue
                real = max(0, cluster[r] - (g - own.get(r, 0)))
                limits[r] = min(limits.get(r, real), real)
            if not limits:
                del caps[t]

    @staticmethod
    def _gang_minima(
        st: ClusterState,
        gangs: list[int],
        pending_req: np.ndarray,
        n_pending: list[int],
        res_names: list[str],
    ) -> np.ndarray:
        """Each gang's minimum, row by row: its PodGroup's minResources, else the
        requests of the pending members it still needs to reach minMember (pro rata of
        its pending members, rounded up; none without pending members). One array for
        all of them: a vector built per gang (or looked up by minResources, which
        one-pod Jobs rarely repeat) was a third of a one-pod Job's release."""
        meta = st.gang_meta
        nr = len(res_names)
        given_res: list[Any] = [meta[g].get("minResources") for g in gangs]
        if all(given_res):  # (one-pod Jobs: every gang's PodGroup names its minimum)
            # (the fold keeps minResources in base units, ints: read by map, no call
            # of Python code per value)
            zeros = [0] * nr
            flat: list[int] = []
            for m in given_res:
                flat += map(m.get, res_names, zeros)
            return np.array(flat, dtype=np.int64).reshape(len(gangs), nr)
        given: list[int] = []
        given_rows: list[list[int]] = []
        need = [0] * len(gangs)
        for r, g in enumerate(gangs):
            min_res = given_res[r]
            if min_res:
                given.append(r)
                given_rows.append([int(min_res.get(n, 0)) for n in res_names])
            elif n_pending[r] > 0:
                short = st.gang_min_of(g) - st.gang_count(g, PHASE_RUNNING)
                need[r] = min(max(0, short), n_pending[r])
        n = np.maximum(np.array(n_pending, dtype=np.int64), 1)[:, None]
        mins = (pending_req * np.array(need, dtype=np.int64)[:, None] + n - 1) // n
        if given:
            mins[given] = given_rows
        return mins

    @staticmethod
    def _hold_reason(
        spec: QueueSpec,
        tree: QueueTree,
        caps: dict[str, dict[str, int]],
        sub_used: dict[str, np.ndarray],
        req: np.ndarray,
        st: ClusterState,
        oversized: bool,
    ) -> str | None:
        """Why a job asking ``req`` is held in queue ``spec`` (``oversized``: a gang
        whose minimum exceeds the cluster's allocatable); None when it may go."""
        if spec.state == "Closed":
            return "QueueClosed"
        a: str | None = spec.name
        while a is not None:
            cap = caps.get(a)
            if cap:
                used = sub_used[a]
                for r, limit in cap.items():
                    col = st.res_index[r]
                    if req[col] and used[col] + req[col] > limit:
                        return "QueueCapability"
            a = tree.parent.get(a)
        if oversized:
            return "ClusterCapacity"
        return None

    def reconsider(self) -> list[WorkItem]:
        """Every held job, to go through :meth:`release` again (capacity freed, a queue
        changed)."""
        items = list(self._held_items.values())
        self._held_items.clear()
        self.held.clear()
        return items

    def held_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for reason in self.held.values():
            out[reason] = out.get(reason, 0) + 1
        return out
