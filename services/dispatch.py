"""The work dispatcher: turns "this pod (or gang) is now pending" into work items.

It follows the log with its own fold and publishes ``{"pod": "ns/name",
"position": P}`` or ``{"gang": "ns/name", "position": P}`` on ``{prefix}work``,
keyed by gang or pod (so Kafka spreads the work over the replicas' consumer
group, and one gang is always one item), where ``P`` is the log position the
replica's fold must reach before acting on it. Causes:

* a pod submitted (a gang's member: the gang, once it has enough pending members
  to reach minMember together with its running ones), a PodGroup submitted;
* a pod evicted; the pods of a removed node (looked up *before* folding the
  removal, which unbinds them);
* a rejected proposal's pods, after a short delay (the replica retries first;
  this covers a replica that gave up or died) — only if still pending;
* pods reported ``esched.pod.unschedulable`` are *parked*, and re-published when
  capacity may have freed (a pod finished or was deleted or evicted, a node was
  added or updated) after the report's position, with per-pod exponential
  backoff — never in a hot loop;
* on start (and on every takeover), every pending pod and ready gang of the fold.
  Duplicates are harmless: replicas skip pods no longer Pending and the commit
  service rejects a second binding.

**Queues and quota** (:mod:`~esched.core.admission`): a submission to a Closing
or Closed queue or over a quota is rejected (an ``esched.pod.rejected`` event,
appended here with a deterministic id), a job its queue's capability (or a Closed
queue) does not admit is held until capacity frees or the queue changes, and what
is let through is published in Volcano's allocation order (queue priority, share,
job priority, arrival).

**Reclaim** (:mod:`~esched.core.reclaim`): every ``reclaim_interval`` the parked
(unschedulable) pods of queues below their fair share (or above a queue of lower
priority) are looked at, one pod or gang per such queue; if evicting pods of
reclaimable queues (of lower priority, or of equal priority above their fair share)
makes room (for a gang: for every member it needs to reach minMember, or nothing), a
proposal binding the pod or those members with those victims (``"reclaim": true``)
goes to the commit service, which checks it again and commits the evictions and the
bindings as one transaction.

**Exactly one active, on its own lease** (:mod:`~esched.services.lease`, name
``dispatch``) rather than inside the commit service's leadership: the commit
service is another engineer's module with its own state and lifecycle, and the
dispatcher only needs a fold of the log, so coupling the two would buy nothing
but a shared failure. With its own lease it can run in the commit process
(``esched commit --dispatch``), in ``esched up`` or alone (``esched dispatch``),
and a standby takes over within the lease's retry interval; the takeover
re-publishes everything pending, so no wake-up is lost in the switch.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from esched.core import PHASE_PENDING, PHASE_RUNNING, ClusterState, Placer
from esched.core.admission import OBSERVED, Admission, Fact, Rejection
from esched.core.queues import queue_view
from esched.core.reclaim import may_reclaim, plan_gang_reclaim, plan_reclaim
from esched.core.validation import Validator
from esched.schemas.events import (
    NODE_ADDED,
    NODE_REMOVED,
    NODE_UPDATED,
    PLACEMENT_COMMITTED,
    PLACEMENT_REJECTED,
    POD,
    POD_DELETED,
    POD_EVICTED,
    POD_FAILED,
    POD_REJECTED,
    POD_SUBMITTED,
    POD_SUCCEEDED,
    POD_UNSCHEDULABLE,
    PODGROUP_SUBMITTED,
    QUEUE_UPSERTED,
    envelope,
    proposal_envelope,
    proposal_key,
    stream_name,
    timestamp,
)
from esched.services import metrics
from esched.services.bus import Bus, BusError, BusProducer
from esched.services.faults import count_retry, is_transient
from esched.services.lease import Lease, LocalLease
from esched.services.retry import retry_until
from esched.services.store.base import EventStore, NewEvent, StoredEvent
from esched.services.store.follower import LogFollower
from esched.services.store.rows import KEYED, row_fact
from esched.services.store.snapshots import payload_pairs

__all__ = ["DispatchConfig", "DispatchTotals", "Dispatcher", "work_item"]

log = logging.getLogger(__name__)

SERVICE = "dispatch"

#: Events after which a parked (unschedulable) pod may fit: capacity freed or added.
_CAPACITY = frozenset(
    {POD_SUCCEEDED, POD_FAILED, POD_DELETED, POD_EVICTED, NODE_ADDED, NODE_UPDATED}
)
#: Events this or admission reads (their :func:`row_fact`: only a pod's key for the
#: bulk, :data:`KEYED`); the rest are only folded.
_READ = OBSERVED | KEYED | {POD_EVICTED, PLACEMENT_REJECTED, POD_UNSCHEDULABLE}


def work_item(kind: str, key: str, position: int) -> tuple[bytes, bytes]:
    """The ``(key, value)`` record of one work item."""
    return key.encode(), orjson.dumps({kind: key, "position": position})


@dataclass(frozen=True, slots=True)
class DispatchConfig:
    """Tuning of the dispatcher."""

    #: Re-publish a rejected proposal's still-pending pods after this delay (the
    #: replica's own retries, ~0.1 s, come first).
    rejected_delay: float = 3.0
    #: Backoff of an unschedulable pod: base * 2**(reports-1), capped.
    backoff_base: float = 0.5
    backoff_max: float = 60.0
    #: How often the timers (delays, backoff) are looked at.
    tick: float = 0.1
    #: Items per send on start (the whole pending set may be large).
    chunk: int = 5000
    #: On takeover, read at most this many events back from the head to find the
    #: pods still parked (reported unschedulable after the newest capacity event);
    #: pods reported before the window are published once more (harmless).
    takeover_scan: int = 200_000
    #: Seconds between reclaim passes over starved queues' parked pods (0: no reclaim).
    reclaim_interval: float = 0.5
    #: A pod with a reclaim proposal in flight is not planned again for this long.
    reclaim_timeout: float = 10.0


@dataclass(slots=True)
class DispatchTotals:
    """What the dispatcher published so far, by cause."""

    published: int = 0
    by_cause: dict[str, int] = field(default_factory=dict)
    takeovers: int = 0
    #: Submissions rejected at admission (new events appended), by reason.
    rejected: dict[str, int] = field(default_factory=dict)
    #: Jobs held now (not admitted to their queue), by reason.
    held: dict[str, int] = field(default_factory=dict)
    #: Reclaim proposals sent.
    reclaims: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "published": self.published,
            "by_cause": dict(sorted(self.by_cause.items())),
            "takeovers": self.takeovers,
            "rejected": dict(sorted(self.rejected.items())),
            "held": dict(sorted(self.held.items())),
            "reclaims": self.reclaims,
        }


@dataclass(slots=True)
class _Parked:
    reports: int
    not_before: float
    #: Capacity events seen when parked; re-publish only once this has grown.
    capacity_seq: int


class Dispatcher:
    """The work dispatcher: :meth:`start`, :meth:`run`, :meth:`stop`, :meth:`idle`.

    :param store: the event store (connected, migrated).
    :param bus: the bus with the work topic.
    :param lease: its leadership lease (``open_lease(store_url, "dispatch")``);
        default a :class:`LocalLease` (one process only).
    :param admission: queue admission and quota (default: no quota).
    :param submit: decides reclaim proposals directly (the embedded mode's
        ``CommitService.decide``); default: send them on ``{prefix}proposals``.
    """

    def __init__(
        self,
        store: EventStore,
        bus: Bus,
        *,
        lease: Lease | None = None,
        config: DispatchConfig | None = None,
        admission: Admission | None = None,
        submit: Callable[[list[dict[str, Any]]], Awaitable[Any]] | None = None,
    ) -> None:
        self.store = store
        self.bus = bus
        self.lease = lease or LocalLease("dispatch")
        self.config = config or DispatchConfig()
        self.totals = DispatchTotals()
        self.follower: LogFollower | None = None
        self._producer: BusProducer | None = None
        self._stopping = asyncio.Event()
        self.admission = admission or Admission()
        self._outbox: list[tuple[str, str, str, int]] = []  # (cause, kind, key, position)
        self._rejections: list[Rejection] = []  # decided, not yet appended
        self._submit = submit
        self._reclaims: list[dict[str, Any]] = []  # proposals not yet sent
        self._reclaiming: dict[str, float] = {}  # pod -> not planned again before
        self._next_reclaim = 0.0
        self._reclaim_seen = -1  # state position of the last reclaim pass
        self._placer: Placer | None = None
        self._validator: Validator | None = None
        self._flushed = asyncio.Event()
        self._wake = asyncio.Event()
        self._parked: dict[str, _Parked] = {}
        self._reports: dict[str, int] = {}  # pod -> unschedulable reports so far
        self._delayed: list[tuple[float, str]] = []  # heap of (due, pod) after rejections
        self._capacity_seq = 0
        self._capacity_position = 0  # position of the newest capacity event
        self.leading = False

    @property
    def state(self) -> ClusterState:
        assert self.follower is not None and self.follower.state is not None
        return self.follower.state

    @property
    def position(self) -> int:
        return -1 if self.follower is None else self.follower.position

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Create the topics and connect the producer (retrying while unreachable)."""
        await retry_until(self.bus.ensure_topics, retriable=is_transient, what="create topics")
        self._producer = self.bus.producer()
        await retry_until(self._producer.start, retriable=is_transient, what="producer start")

    async def stop(self) -> None:
        """Stop dispatching and give the lease up; idempotent."""
        self._stopping.set()
        self._wake.set()

    async def run(self) -> DispatchTotals:
        """Lead (wait for the lease), dispatch until :meth:`stop` or a lost lease, then
        stand by again."""
        try:
            while not self._stopping.is_set():
                if not await self.lease.wait_unless(self._stopping):
                    break
                try:
                    await self._lead()
                finally:
                    self.leading = False
                    if self.follower is not None:
                        await self.follower.stop()
                    await self.lease.release()
        finally:
            if self._producer is not None:
                producer, self._producer = self._producer, None
                with contextlib.suppress(BusError):
                    await producer.stop()
        return self.totals

    async def _lead(self) -> None:
        self._parked.clear()
        self._delayed.clear()
        self._outbox.clear()
        self._rejections.clear()
        self._reclaims.clear()
        self._reclaiming.clear()
        self._reclaim_seen = -1
        self._placer = None
        self._validator = None
        self.follower = LogFollower(self.store, handle=self._fold)
        state = await self.follower.start()
        self.totals.takeovers += 1
        self.leading = True
        self._rejections.extend(self.admission.start(state))
        await self._recover_parked()
        n = self._publish_all_pending(int(state.position))
        log.info(
            "dispatcher leading at position %d; %d pending work item(s) published",
            state.position,
            n,
        )
        while not self._stopping.is_set():
            if self.lease.lost.is_set():
                log.warning("dispatcher lost its lease; standing by")
                return
            if self.follower.error is not None:
                raise RuntimeError("dispatcher fold failed") from self.follower.error
            self._timers()
            self._plan_reclaims()
            await self._flush()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.config.tick)
        await self._flush()

    # ------------------------------------------------------------------ the fold

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
                st.apply_payloads(payload_pairs(rows[start:i]))
                start = i
                data = orjson.loads(r.payload).get("data")
                name: Any = ((data if isinstance(data, dict) else {}).get("metadata") or {}).get(
                    "name"
                )
                idx = st.node_index.get(name)
                if idx is not None:
                    pods.update(dict.fromkeys(st.pods_on_node(idx)))
        st.apply_payloads(payload_pairs(rows[start:]))
        facts = self._facts(rows)
        self._rejections.extend(self.admission.observe(st, facts))
        reconsider = False
        now = time.monotonic()
        for pos, etype, key, fact_data in facts:
            data = fact_data or {}  # a decision's or report's data is a dict; the rest unread
            if etype == POD_SUBMITTED or etype == POD_EVICTED:
                pods[key] = None
            elif etype == PODGROUP_SUBMITTED:
                gangs[key] = None
            elif etype == PLACEMENT_REJECTED:
                for pod in data.get("pods") or [b.get("pod") for b in data.get("bindings") or ()]:
                    heapq.heappush(self._delayed, (now + self.config.rejected_delay, str(pod)))
            elif etype == PLACEMENT_COMMITTED:
                for b in data.get("bindings") or ():
                    self._parked.pop(b.get("pod"), None)
                    self._reports.pop(b.get("pod"), None)
            elif etype == POD_UNSCHEDULABLE:
                self._park(key, int(data.get("position") or pos), now)
            if etype in _CAPACITY or etype == QUEUE_UPSERTED:
                reconsider = True
            if etype in _CAPACITY:
                self._capacity_seq += 1
                self._capacity_position = pos
                if etype == POD_DELETED:
                    self._parked.pop(key, None)
                    self._reports.pop(key, None)
        position = int(st.position)
        for cause, kind, key in self._ready(pods, gangs):
            self._queue(cause, kind, key, position)
        if reconsider:
            # Held jobs (queue capability, a Closed queue) may be admitted now.
            self._outbox.extend(self.admission.reconsider())
        if self._outbox or self._rejections:
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
        self._parked[pod] = _Parked(reports, now + delay, seq)
        metrics.DISPATCH_PARKED.set(len(self._parked))

    def _ready(
        self, pods: Iterable[str], gangs: Iterable[str], cause: str = "pending"
    ) -> list[tuple[str, str, str]]:
        """``(cause, kind, key)`` for those of ``pods``/``gangs`` that are placeable work now."""
        st = self.state
        out: list[tuple[str, str, str]] = []
        gang_set = dict.fromkeys(gangs)
        rejecting = self.admission.rejecting
        for pod in pods:
            idx = st.pod_index.get(pod)
            if idx is None or st.phase_of(idx) != PHASE_PENDING or pod in rejecting:
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
            running = st.gang_count(gi, PHASE_RUNNING)
            # A gang is work once its pending members can reach minMember together with
            # the running ones; earlier, no placement could be committed anyway.
            if pending > 0 and pending + running >= st.gang_min_of(gi):
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
        upto = int(st.position)
        lowest = max(0, upto - self.config.takeover_scan)
        capacity_at = 0  # position of the newest capacity event, 0: none in the window
        reports: dict[str, list[int]] = {}  # pod -> judged-at positions, newest first
        page = 5000
        while upto > lowest and not capacity_at:
            after = max(lowest, upto - page)
            rows = await retry_until(
                functools.partial(self.store.read, after, page, upto),
                retriable=is_transient,
                what="read the log tail",
            )
            for row in reversed(rows):
                if row.type in _CAPACITY:
                    capacity_at = row.position
                    break
                if row.type == POD_UNSCHEDULABLE:
                    data = orjson.loads(row.payload).get("data") or {}
                    judged = int(data.get("position") or 0) or row.position
                    reports.setdefault(str(data.get("pod")), []).append(judged)
            upto = after
        now = time.monotonic()
        for pod, judged_at in reports.items():
            idx = st.pod_index.get(pod)
            if idx is None or st.phase_of(idx) != PHASE_PENDING:
                continue
            # A report judged before the newest capacity event has seen room freed since.
            if judged_at[0] < capacity_at:
                continue
            n = len(judged_at)
            self._reports[pod] = n
            delay = min(self.config.backoff_base * 2 ** (n - 1), self.config.backoff_max)
            self._parked[pod] = _Parked(n, now + delay, self._capacity_seq)
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

    def _plan_reclaims(self) -> None:
        """Reclaim proposals for starved queues' parked pods (one pod per queue per pass)."""
        if not self._reclaim_due():
            return
        now = time.monotonic()
        if now < self._next_reclaim:
            return
        self._next_reclaim = now + self.config.reclaim_interval
        st = self.state
        self._reclaim_seen = int(st.position)
        view = queue_view(st)
        prios = {int(m.get("priority") or 0) for m in st.queue_meta[: st.n_queues]}
        if len(prios) < 2 and not any(v["share"] < 1.0 for v in view.values()):
            return  # nobody starved, and no queue above another: nothing to reclaim
        if self._placer is None:
            self._placer = Placer(st)
        position = int(st.position)
        tried: set[str] = set()
        for pod in list(self._parked):
            if self._reclaiming.get(pod, 0.0) > now:
                continue
            idx = st.pod_index.get(pod)
            if idx is None or st.phase_of(idx) != PHASE_PENDING:
                continue
            q = st.queue_of(idx)
            queue = st.queue_names[q]
            if (
                queue in tried
                or not may_reclaim(st, queue, view)
                or st.queue_meta[q].get("state") == "Closed"
            ):
                continue  # a Closed queue schedules nothing: it reclaims nothing either
            g = st.gang_of(idx)
            if g >= 0:
                # A gang member: reclaim for the whole gang, all or nothing.
                gang = st.gang_keys[g]
                if self.admission.gang_rejected(gang):
                    continue
                tried.add(queue)
                gplan = plan_gang_reclaim(st, self._placer, gang, view)
                if gplan is None:
                    continue
                requests = {
                    p: dict(st.class_specs[st.pod_class_id(p)]["requests"])
                    for p, _n in gplan.bindings
                }
                data = gplan.proposal(f"reclaim-{gang}-{position}", position, requests)
                for member in st.gang_members(gang, "Pending"):
                    self._reclaiming[member] = now + self.config.reclaim_timeout
                if not self._valid(data):
                    continue
                self._reclaims.append(data)
                log.info(
                    "reclaim for gang %s (queue %s): %d member(s), evicting %s",
                    gang,
                    queue,
                    len(gplan.bindings),
                    ", ".join(p for p, _n in gplan.victims),
                )
                continue
            tried.add(queue)
            plan = plan_reclaim(st, self._placer, pod, view)
            if plan is None:
                continue
            pod_requests = dict(st.class_specs[st.class_of(idx)]["requests"])
            data = plan.proposal(f"reclaim-{pod}-{position}", position, pod_requests)
            self._reclaiming[pod] = now + self.config.reclaim_timeout
            if not self._valid(data):
                continue
            self._reclaims.append(data)
            log.info(
                "reclaim for %s (queue %s) on %s: evicting %s",
                pod,
                queue,
                plan.node,
                ", ".join(plan.victims),
            )
        for pod, until in list(self._reclaiming.items()):
            if until <= now:
                del self._reclaiming[pod]

    def _valid(self, data: dict[str, Any]) -> bool:
        """Whether the commit service would accept reclaim proposal ``data`` on this fold
        (its own :class:`~esched.core.validation.Validator`: fit, constraints, queue
        capability, the reclaim rule), so a plan it must refuse, e.g. one taking the
        reclaiming queue over its capability, is not sent round again and again."""
        if self._validator is None or self._validator.state is not self.state:
            self._validator = Validator(self.state, self.admission.quota.bands)
        self._validator.begin()
        verdict = self._validator.check(data, record=False)
        if not verdict.ok:
            log.info(
                "reclaim for %s not proposed: %s (%s)",
                proposal_key(data),
                verdict.reason,
                verdict.message,
            )
        return verdict.ok

    def _reclaim_due(self) -> bool:
        """Parked pods, and the state changed since the last reclaim pass."""
        return bool(
            self.config.reclaim_interval and self._parked and self._reclaim_seen != self.position
        )

    async def _send_reclaims(self) -> None:
        if not self._reclaims:
            return
        batch, self._reclaims = self._reclaims, []
        if self._submit is not None:
            await self._submit(batch)
        else:
            assert self._producer is not None
            producer = self._producer
            stamp = timestamp()
            records = [
                (
                    proposal_key(p).encode(),
                    orjson.dumps(proposal_envelope(p, "esched/dispatch", time=stamp)),
                )
                for p in batch
            ]
            await retry_until(
                lambda: producer.send_many(self.bus.topics.proposals, records),
                retriable=is_transient,
                what="reclaim proposals send",
                on_retry=count_retry(SERVICE, "bus"),
            )
        self.totals.reclaims += len(batch)

    async def _append_rejections(self) -> None:
        """Append the decided rejections (deterministic ids: a retry or a second
        leader's copy dedupes)."""
        if not self._rejections:
            return
        rejections = list(self._rejections)
        now = datetime.now(UTC)
        stamp = timestamp(now)
        events = []
        for r in rejections:
            env = envelope(
                POD_REJECTED, "esched/dispatch", r.data(), id=r.event_id, time=stamp, subject=r.pod
            )
            events.append(
                NewEvent(
                    id=r.event_id,
                    type=POD_REJECTED,
                    stream=stream_name(POD, r.pod),
                    payload=orjson.dumps(env),
                    time=now,
                )
            )
        res = await retry_until(
            lambda: self.store.append(events),
            retriable=is_transient,
            what="rejection append",
            on_retry=count_retry(SERVICE, "store"),
        )
        self._rejections = self._rejections[len(rejections) :]
        if res.duplicates == 0:
            # (A batch with duplicates is a retry or another leader's copy: counted there.)
            for r in rejections:
                self.totals.rejected[r.reason] = self.totals.rejected.get(r.reason, 0) + 1
                metrics.ADMISSION_REJECTED.labels(r.reason).inc()

    async def _flush(self) -> None:
        """Append rejections; publish the outbox in allocation order, holding what the
        queues do not admit (at-least-once; duplicates are harmless)."""
        await self._append_rejections()
        await self._send_reclaims()
        if not self._outbox or self._producer is None:
            return
        items, self._outbox = self._outbox, []
        admitted = self.admission.release(self.state, items)
        held = self.admission.held_counts()
        self.totals.held = held
        for reason in ("QueueClosed", "QueueCapability", "ClusterCapacity"):
            metrics.DISPATCH_HELD.labels(reason).set(held.get(reason, 0))
        batch = [(cause, work_item(kind, key, position)) for cause, kind, key, position in admitted]
        producer = self._producer
        topic = self.bus.topics.work
        for i in range(0, len(batch), self.config.chunk):
            chunk = batch[i : i + self.config.chunk]
            records = [rec for _cause, rec in chunk]
            await retry_until(
                functools.partial(producer.send_many, topic, records),
                retriable=is_transient,
                what="work send",
                on_retry=count_retry(SERVICE, "bus"),
            )
            counts: dict[str, int] = {}
            for cause, _rec in chunk:
                counts[cause] = counts.get(cause, 0) + 1
            # Metrics once per cause: a labelled lookup per item showed in the profile.
            for cause, n in counts.items():
                self.totals.by_cause[cause] = self.totals.by_cause.get(cause, 0) + n
                metrics.DISPATCH_WORK.labels(cause).inc(n)
            self.totals.published += len(chunk)

    # ------------------------------------------------------------------ idleness

    def idle(self) -> bool:
        """Nothing to publish now or later without new events: the outbox is empty, no
        rejected pod awaits its re-publish, and no parked pod has seen capacity free up."""
        if (
            not self.leading
            or self._outbox
            or self._rejections
            or self._reclaims
            or self._reclaim_due()
        ):
            return False
        st = self.state
        for _due, pod in self._delayed:
            if pod in self._parked:
                continue
            idx = st.pod_index.get(pod)
            if idx is not None and st.phase_of(idx) == PHASE_PENDING:
                return False
        return all(p.capacity_seq >= self._capacity_seq for p in self._parked.values())

    @property
    def parked(self) -> int:
        """Unschedulable pods waiting for capacity."""
        return len(self._parked)

    @property
    def reclaiming(self) -> frozenset[str]:
        """Pods a reclaim was planned for, not planned again until its decision or
        timeout."""
        return frozenset(self._reclaiming)
