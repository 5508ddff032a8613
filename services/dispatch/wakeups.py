"""Wake-ups from the fold: which pods and gangs became placeable work, parking
unschedulable pods until capacity frees, re-publishing rejected ones after a delay."""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Iterable
from typing import Any

import orjson

from esched.core import PHASE_PENDING, PHASE_RUNNING
from esched.core.admission import OBSERVED, Fact
from esched.core.reasons import OTHER_SCHEDULER
from esched.schemas.events import (
    JOB_SUBMITTED,
    NAMESPACE_DELETED,
    NAMESPACE_UPSERTED,
    NODE_ADDED,
    NODE_REMOVED,
    NODE_UPDATED,
    PLACEMENT_COMMITTED,
    PLACEMENT_REJECTED,
    POD_DELETED,
    POD_EVICTED,
    POD_FAILED,
    POD_SUBMITTED,
    POD_SUCCEEDED,
    POD_UNSCHEDULABLE,
    POD_UPDATED,
    PODGROUP_SUBMITTED,
    QUEUE_UPSERTED,
)
from esched.services import metrics
from esched.services.dispatch.base import Parked, _DispatchBase
from esched.services.store.base import StoredEvent
from esched.services.store.rows import KEYED, row_fact

log = logging.getLogger(__name__)


#: Events after which a parked (unschedulable) pod may fit: capacity freed or added,
#: or a Namespace relabelled (pod affinity terms' namespaceSelector match anew).
_CAPACITY = frozenset(
    {
        POD_SUCCEEDED,
        POD_FAILED,
        POD_DELETED,
        POD_EVICTED,
        NODE_ADDED,
        NODE_UPDATED,
        NAMESPACE_UPSERTED,
        NAMESPACE_DELETED,
    }
)
#: Events this or admission reads (their :func:`row_fact`: only a pod's key for the
#: bulk, :data:`KEYED`); the rest are only folded.
_READ = OBSERVED | KEYED | {POD_EVICTED, PLACEMENT_REJECTED, POD_UNSCHEDULABLE}


class _WakeUps(_DispatchBase):
    """Fold the log and note what became work, now or after a delay."""

    def _fold(self, rows: list[StoredEvent]) -> None:
        """Fold a batch from its stored bytes, noting which pods/gangs may have become
        pending; only the events this reads (:meth:`_facts`) are decoded."""
        st = self.state
        # Dicts, not sets: arrival order is the allocation order's last tie-breaker.
        pods: dict[str, None] = {}
        gangs: dict[str, None] = {}
        start = 0
        for i, r in enumerate(rows):
            if r.type == NODE_REMOVED:
                # Its pods are unbound by the fold: find them before it runs.
                self._apply(rows[start:i])
                start = i
                data = orjson.loads(r.payload).get("data")
                name: Any = ((data if isinstance(data, dict) else {}).get("metadata") or {}).get(
                    "name"
                )
                idx = st.node_index.get(name)
                if idx is not None:
                    pods.update(dict.fromkeys(st.pods_on_node(idx)))
        self._apply(rows[start:])
        facts = self._facts(rows)
        self._rejections.extend(self.admission.observe(st, facts))
        reconsider = False
        now = time.monotonic()
        for pos, etype, key, fact_data in facts:
            data = fact_data or {}  # a decision's or report's data is a dict; the rest unread
            if etype == POD_SUBMITTED or etype == POD_EVICTED or etype == POD_UPDATED:
                # An update may have removed a pod's last scheduling gate: work now.
                pods[key] = None
                if etype == POD_SUBMITTED and self._foreign:
                    self._foreign.pop(key, None)  # a resubmit may name esched now
            elif etype == PODGROUP_SUBMITTED or etype == JOB_SUBMITTED:
                # (a Job's first submission implies its first pods, in its gang)
                gangs[key] = None
            elif etype == PLACEMENT_REJECTED:
                for pod in data.get("pods") or [b.get("pod") for b in data.get("bindings") or ()]:
                    heapq.heappush(self._delayed, (now + self.config.rejected_delay, str(pod)))
            elif etype == PLACEMENT_COMMITTED:
                for b in data.get("bindings") or ():
                    self._parked.pop(b.get("pod"), None)
                    self._reports.pop(b.get("pod"), None)
            elif etype == POD_UNSCHEDULABLE:
                if set(data.get("reasons") or ()) == {OTHER_SCHEDULER}:
                    # Another scheduler's pod: no capacity makes it esched's.
                    self._foreign[key] = None
                    self._parked.pop(key, None)
                else:
                    self._park(key, int(data.get("position") or pos), now)
            if etype in _CAPACITY or etype == QUEUE_UPSERTED:
                reconsider = True
            if etype in _CAPACITY:
                self._capacity_seq += 1
                self._capacity_position = pos
                if etype == POD_DELETED:
                    self._parked.pop(key, None)
                    self._reports.pop(key, None)
                    self._foreign.pop(key, None)
        position = int(st.position)
        for cause, kind, key in self._ready(pods, gangs):
            self._queue(cause, kind, key, position)
        if reconsider:
            # Held jobs (queue capability, a Closed queue) may be admitted now.
            self._outbox.extend(self.admission.reconsider())
        if self._outbox or self._rejections or self._feed is not None:
            self._wake.set()

    def _facts(self, rows: list[StoredEvent]) -> list[Fact]:
        """What this and admission read of a folded batch, decoding as little as
        possible (:func:`row_fact`): committed placements only while some pod is
        parked or has been reported (they unpark it), capacity events by type alone."""
        out: list[Fact] = []
        for r in rows:
            etype = r.type
            if etype in _READ or (etype == PLACEMENT_COMMITTED and (self._parked or self._reports)):
                fact = row_fact(r)
                if fact is not None:
                    out.append(fact)
            elif etype in _CAPACITY:
                out.append((r.position, etype, "", None))
        return out

    def _park(self, pod: str, seen: int, now: float) -> None:
        """An unschedulable report: wait for capacity (and backoff) before re-publishing."""
        idx = self.state.pod_index.get(pod)
        if idx is None or self.state.phase_of(idx) != PHASE_PENDING:
            return  # placed (or gone) meanwhile, e.g. through a duplicate work item
        reports = self._reports.get(pod, 0) + 1
        self._reports[pod] = reports
        delay = min(self.config.backoff_base * 2 ** (reports - 1), self.config.backoff_max)
        # Capacity freed after the state the replica judged on counts already: without
        # this a pod finishing between the verdict and its report would be a lost wake-up.
        seq = self._capacity_seq - 1 if self._capacity_position > seen else self._capacity_seq
        self._parked[pod] = Parked(reports, now + delay, seq)
        metrics.DISPATCH_PARKED.set(len(self._parked))

    def _ready(
        self, pods: Iterable[str], gangs: Iterable[str], cause: str = "pending"
    ) -> list[tuple[str, str, str]]:
        """``(cause, kind, key)`` for those of ``pods``/``gangs`` that are placeable work now."""
        st = self.state
        out: list[tuple[str, str, str]] = []
        gang_set = dict.fromkeys(gangs)
        rejecting = self.admission.rejecting
        gated = st.gated
        for pod in pods:
            idx = st.pod_index.get(pod)
            if idx is None or st.phase_of(idx) != PHASE_PENDING or pod in rejecting:
                continue
            if gated and pod in gated:
                continue  # kube's SchedulingGates: waits for an update to ungate it
            if pod in self._foreign:
                continue
            g = st.gang_of(idx)
            if g >= 0:
                gang_set[st.gang_keys[g]] = None
            else:
                out.append((cause, "pod", pod))
        for gang in gang_set:
            gi = st.gang_index.get(gang)
            if gi is None or self.admission.gang_rejected(gang):
                continue
            pending = st.gang_count(gi, PHASE_PENDING)
            need = st.gang_min_of(gi)
            # A gang is work once its pending members can reach minMember together with
            # the running ones (counted only when the pending ones fall short: a one-pod
            # Job's never do); earlier, no placement could be committed anyway.
            if pending > 0 and (
                pending >= need or pending + st.gang_count(gi, PHASE_RUNNING) >= need
            ):
                out.append((cause, "gang", gang))
        return out

    async def _recover_parked(self) -> None:
        """Park again what the previous leader had parked, from the log.

        A pod stays parked if its newest unschedulable report was judged at or after
        the newest capacity event (nothing freed since the verdict). So the log is read
        backwards from the head only down to that capacity event: in a cluster with
        churn, a short read. Without it a takeover re-published every unschedulable
        pod once (each re-judged and re-reported).
        """
        st = self.state
        capacity_at = 0  # position of the newest capacity event, 0: none in the window
        reports: dict[str, list[int]] = {}  # pod -> judged-at positions, newest first
        foreign: dict[str, None] = {}  # pods whose newest report is OtherScheduler
        async for rows in self._log_tail():
            for row in rows:
                if row.type in _CAPACITY:
                    capacity_at = row.position
                    break
                if row.type == POD_UNSCHEDULABLE:
                    data = orjson.loads(row.payload).get("data") or {}
                    judged = int(data.get("position") or 0) or row.position
                    pod = str(data.get("pod"))
                    if pod not in reports and set(data.get("reasons") or ()) == {OTHER_SCHEDULER}:
                        foreign[pod] = None  # its newest report: another scheduler's pod
                    reports.setdefault(pod, []).append(judged)
            if capacity_at:
                break
        now = time.monotonic()
        for pod, judged_at in reports.items():
            idx = st.pod_index.get(pod)
            if idx is None or st.phase_of(idx) != PHASE_PENDING:
                continue
            if pod in foreign:
                self._foreign[pod] = None
                continue
            # A report judged before the newest capacity event has seen room freed since.
            if judged_at[0] < capacity_at:
                continue
            n = len(judged_at)
            self._reports[pod] = n
            delay = min(self.config.backoff_base * 2 ** (n - 1), self.config.backoff_max)
            self._parked[pod] = Parked(n, now + delay, self._capacity_seq)
        metrics.DISPATCH_PARKED.set(len(self._parked))
        if self._parked:
            log.info(
                "dispatcher: %d pod(s) still parked from the log (unschedulable, no "
                "capacity freed since)",
                len(self._parked),
            )

    def _publish_all_pending(self, position: int) -> int:
        st = self.state
        parked = self._parked
        items = self._ready((p for p in st.pending_pods() if p not in parked), (), cause="start")
        for cause, kind, key in items:
            self._queue(cause, kind, key, position)
        return len(items)

    def _queue(self, cause: str, kind: str, key: str, position: int) -> None:
        self._outbox.append((cause, kind, key, position))

    def _timers(self) -> None:
        """Move due delayed (rejected) and parked (unschedulable) pods to the outbox."""
        if not (self._delayed or self._parked):
            return
        now = time.monotonic()
        due: list[str] = []
        while self._delayed and self._delayed[0][0] <= now:
            pod = heapq.heappop(self._delayed)[1]
            # Parked: a replica judged it unschedulable after the rejection; it waits
            # for capacity like any unschedulable pod.
            if pod not in self._parked:
                due.append(pod)
        retry: list[str] = []
        for pod, p in list(self._parked.items()):
            if p.capacity_seq < self._capacity_seq and p.not_before <= now:
                del self._parked[pod]
                retry.append(pod)
        metrics.DISPATCH_PARKED.set(len(self._parked))
        position = self.position
        for cause, kind, key in self._ready(due, (), "rejected") + self._ready(retry, (), "retry"):
            self._queue(cause, kind, key, position)
