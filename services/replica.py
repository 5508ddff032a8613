"""The replica scheduler: optimistic placement on a private fold of the log (Omega).

Each replica folds the whole log into its own :class:`~esched.core.ClusterState`
(newest snapshot, then :meth:`EventStore.subscribe`), takes its share of pending
work from the ``{prefix}work`` topic as a member of the consumer group
``esched-replicas`` (work items ``{"pod"|"gang": "ns/name", "position": P}`` from
the :mod:`~esched.services.dispatch` dispatcher), and per polled batch:

1. waits until its fold has reached every item's ``position`` (so it sees the
   event that made the work pending), and skips pods no longer Pending;
2. places pods with the core's :class:`~esched.core._placer.Placer` (each pod
   assumed, so a batch never double-books a node in the replica's own view) and
   gangs with :meth:`Placer.plan_gang` (all-or-nothing on a scratch overlay);
3. sends one proposal per pod or per gang, carrying the log position it saw and
   the resources claimed per binding (the pod's requests in base units);
4. waits for the decisions *in its fold*, retries rejected pods/gangs with fresh
   state, with backoff and a retry limit (after which the dispatcher re-publishes
   them). Meanwhile it already polls and places the next batch (``pipeline``
   batches in flight): the claims of proposals still undecided are *assumed* in
   its view (kube-scheduler's assume cache), so the next batch never counts room
   they took; a decision folded into the state replaces its claim, a rejection
   simply releases it;
5. reports pods no node fits as ``esched.pod.unschedulable`` (kube-style reason
   counts, deterministic id ``unschedulable-<pod>-<position>`` so a redelivered
   work item dedupes in the store); the dispatcher re-publishes them only when
   capacity may have freed, with backoff, so nothing is retried in a hot loop;
6. commits the work offsets only after all of that is durable in the store.

Proposals go to the commit service either directly (``submit``: the embedded
mode's :meth:`CommitService.decide`) or on the ``{prefix}proposals`` topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import orjson

from esched.core import PHASE_PENDING, ClusterState, Profile
from esched.core._placer import Placer
from esched.core.bands import BandConfig
from esched.core.devices import FoldedDevices
from esched.core.reasons import reason_code, unschedulable_message
from esched.core.schedule import PassConfig, PassResult, SchedulingPass, Target
from esched.schemas.events import (
    GANG,
    GANG_RESERVED,
    PLACEMENT_COMMITTED,
    PLACEMENT_REJECTED,
    POD,
    POD_UNSCHEDULABLE,
    envelope,
    proposal_envelope,
    proposal_key,
    stream_name,
    timestamp,
)
from esched.services import metrics
from esched.services.bus import Bus, BusConsumer, BusError, BusProducer, Message
from esched.services.faults import is_transient, poll_or_pause
from esched.services.retry import retry_until
from esched.services.store.base import EventStore, NewEvent, TransientStoreError
from esched.services.store.follower import LogFollower

__all__ = [
    "REPLICA_GROUP",
    "Replica",
    "ReplicaConfig",
    "ReplicaTotals",
    "SharedConsumer",
    "reason_code",
    "unschedulable_id",
]

log = logging.getLogger(__name__)

SERVICE = "replica"
#: Consumer group of the work topic: every replica process joins it, so Kafka
#: spreads the work partitions over them and moves a dead member's partitions.
REPLICA_GROUP = "esched-replicas"


Submit = Callable[[list[dict[str, Any]]], Awaitable[Any]]


def unschedulable_id(pod: str, position: int) -> str:
    """Event id of the unschedulable report for ``pod`` from work at ``position``:
    deterministic, so a redelivered work item is answered by the same (deduped) event."""
    return f"unschedulable-{pod}-{position}"


# ---------------------------------------------------------------------- shared consumer


class SharedConsumer(BusConsumer):
    """One in-process consumer shared by several replicas of one process.

    The in-process bus has one partition per topic and no group rebalancing, so
    replicas of the embedded mode take turns polling one consumer instead of each
    reading everything. Offsets only matter within the process there (the bus dies
    with it; on restart the dispatcher re-publishes every pending pod).
    """

    def __init__(self, inner: BusConsumer) -> None:
        self.inner = inner
        self._lock = asyncio.Lock()
        self._started = 0
        self._committed: dict[tuple[str, int], int] = {}

    async def start(self) -> None:
        async with self._lock:
            if self._started == 0:
                await self.inner.start()
            self._started += 1

    async def stop(self) -> None:
        async with self._lock:
            self._started -= 1
            if self._started == 0:
                await self.inner.stop()

    async def poll(self, timeout_ms: int, max_records: int) -> list[Message]:
        async with self._lock:
            return await self.inner.poll(timeout_ms, max_records)

    async def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        merged = {k: max(v, self._committed.get(k, 0)) for k, v in offsets.items()}
        self._committed.update(merged)
        await self.inner.commit(merged)

    async def lag(self) -> int:
        return await self.inner.lag()

    def assignment(self) -> frozenset[tuple[str, int]]:
        return self.inner.assignment()


# ---------------------------------------------------------------------- the replica


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """Tuning of a replica."""

    group: str = REPLICA_GROUP
    #: Work items per poll: one placement pass, one proposal send, one decision wait.
    batch_size: int = 1000
    #: Batches in flight at once: a batch's proposals wait for their decisions (a
    #: round trip through the commit service and the store, 10x the placement time)
    #: while the next batches are placed with the earlier claims assumed. 1: place a
    #: batch only once the previous one is decided.
    pipeline: int = 8
    poll_timeout_ms: int = 100
    #: Keep polling for up to this many seconds while more work arrives (batching), but
    #: only when the first poll brought at least ``linger_min`` items: a backlog, where
    #: fuller batches save round trips. A handful of items (light load) goes at once:
    #: lingering only added its time to every pod's latency.
    linger: float = 0.01
    linger_poll_ms: int = 10
    linger_min: int = 50
    #: Attempts after the first for proposals the commit service rejected.
    max_retries: int = 3
    retry_backoff: float = 0.02
    retry_backoff_max: float = 1.0
    #: Re-send proposals still undecided after this long (idempotent on proposal id:
    #: covers a commit service that failed over with our proposals unread).
    decision_timeout: float = 30.0
    #: On stop, how long batches in flight may wait for their decisions.
    stop_grace: float = 2.0
    #: On a restart, work the share of the work partitions this replica had (recorded
    #: in the store) while the group join is under way (see Replica._start_provisional).
    resume_share: bool = True
    source_prefix: str = "esched/replica/"
    #: Let pods and gangs that fit nowhere propose evicting pods of lower bands.
    preemption: bool = True
    #: Priority bands (None: the documented defaults of :mod:`esched.core.bands`).
    bands: BandConfig | None = None
    #: Starvation guard: a gang that has not fitted for this many seconds (as this
    #: replica saw it) gets nodes reserved (``esched.gang.reserved``), one gang at a
    #: time; None turns it off.
    reserve_after: float | None = 60.0
    #: Place GPU requests device by device (core.devices: the fold's devices, exact
    #: fit, each binding names its devices, which the commit service checks). None:
    #: when the profile has the FGD plugin (which scores by devices).
    devices: bool | None = None


@dataclass(slots=True)
class ReplicaTotals:
    """What a replica did so far."""

    work_items: int = 0
    skipped: int = 0
    proposals: int = 0
    committed: int = 0
    placed_pods: int = 0
    conflicts: int = 0
    retries: int = 0
    gave_up: int = 0
    unschedulable: int = 0
    gangs_waiting: int = 0
    #: Proposals that evict pods of lower bands, and the victims they name.
    preemptions: int = 0
    victims: int = 0
    #: Gang reservations made (starvation guard).
    reservations: int = 0
    #: Work items read from the previous share while the group join of a restart
    #: was under way (see Replica._start_provisional).
    early_items: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    #: perf_counter() of the first proposal sent and of the last decision received
    #: (the window a placement rate is measured over); 0.0 until then.
    first_proposal_at: float = 0.0
    last_decision_at: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "work_items": self.work_items,
            "skipped": self.skipped,
            "proposals": self.proposals,
            "committed": self.committed,
            "placed_pods": self.placed_pods,
            "conflicts": self.conflicts,
            "retries": self.retries,
            "gave_up": self.gave_up,
            "unschedulable": self.unschedulable,
            "gangs_waiting": self.gangs_waiting,
            "preemptions": self.preemptions,
            "victims": self.victims,
            "reservations": self.reservations,
            "early_items": self.early_items,
            "conflict_reasons": dict(sorted(self.reasons.items())),
        }


class Replica:
    """A replica scheduler: :meth:`start`, :meth:`run`, :meth:`stop`.

    :param store: the event store (connected, migrated).
    :param bus: the bus carrying the work topic (and proposals, without ``submit``).
    :param replica_id: this replica's name (in every proposal it sends).
    :param submit: async callable deciding proposal ``data`` dicts directly (the
        embedded mode: :meth:`CommitService.decide`); None sends them on the
        proposals topic.
    :param consumer: a work consumer to use instead of a new group member (the
        embedded mode's :class:`SharedConsumer`).
    """

    def __init__(
        self,
        store: EventStore,
        bus: Bus,
        replica_id: str,
        *,
        profile: Profile | None = None,
        seed: int = 0,
        config: ReplicaConfig | None = None,
        submit: Submit | None = None,
        consumer: BusConsumer | None = None,
    ) -> None:
        self.store = store
        self.bus = bus
        self.id = replica_id
        self.profile = profile
        self.seed = seed
        self.config = config or ReplicaConfig()
        self.totals = ReplicaTotals()
        self._submit = submit
        self._consumer = consumer
        self._producer: BusProducer | None = None
        self.follower = LogFollower(
            store, after_fold=self._on_fold, decode=(PLACEMENT_COMMITTED, PLACEMENT_REJECTED)
        )
        self.placer: Placer | None = None
        self._waiting: dict[str, asyncio.Future] = {}
        self._stopping = asyncio.Event()
        #: Claims of proposals sent and not yet decided in the fold, by proposal id:
        #: ([(pod, node, GPU devices)], [victim pods]); assumed in the placer's view
        #: (and the device table's) (see _resync).
        self._inflight: dict[str, tuple[list[tuple[str, str, tuple[int, ...]]], list[str]]] = {}
        #: pod -> proposal id of its undecided claim
        self._inflight_pods: dict[str, str] = {}
        #: bumped whenever a claim is added or released: the view must be renewed
        self._claims_version = 0
        #: (state position, claims version) the placer's view was last made for
        self._view_at: tuple[int, int] = (-1, -1)
        #: batches being worked on (placed, proposed, waiting for decisions)
        self._batches: set[asyncio.Task] = set()
        self._failed: BaseException | None = None
        self._requests: dict[int, dict[str, int]] = {}
        #: Proposal ids: the replica, a random part per instance (a restarted process
        #: never reuses an id: the decision's id is derived from it) and a counter (a
        #: uuid4 per proposal showed in the profile).
        self._pid_prefix = f"{replica_id}-{uuid.uuid4().hex[:12]}-"
        self._pid_seq = itertools.count()
        #: the placement policy (core.schedule), made with the placer in start()
        self.scheduler: SchedulingPass | None = None
        #: GPU devices of the fold (with config.devices / an FGD profile), from start()
        self.devices: FoldedDevices | None = None
        #: reservations decided by the last placement pass, appended after it
        self._to_reserve: list[dict[str, Any]] = []
        #: While the group join of a restart is under way: a reader of this replica's
        #: previous share of the work partitions (no group membership, no offset
        #: commits) and the join itself. See start().
        self._provisional: BusConsumer | None = None
        self._joining: asyncio.Future | None = None
        #: The share last recorded in the store (share_snapshot_name).
        self._saved_share: frozenset[tuple[str, int]] = frozenset()

    @property
    def busy(self) -> bool:
        """True while a polled batch is being worked on (for `esched up`'s idle check)."""
        return bool(self._batches)

    @property
    def state(self) -> ClusterState:
        assert self.follower.state is not None
        return self.follower.state

    @property
    def consumer(self) -> BusConsumer | None:
        """The work consumer (None before :meth:`start` and after :meth:`stop`)."""
        return self._consumer

    @property
    def joining(self) -> bool:
        """Whether the work group's join of :meth:`start` is still under way (a restart
        reads its previous share of the work meanwhile)."""
        return self._joining is not None

    @property
    def inflight(self) -> dict[str, str]:
        """Pods of this replica's proposals awaiting their decision: pod -> proposal id."""
        return dict(self._inflight_pods)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Fold the log, start following it, connect to the bus and join the group.

        The group join runs while the log is folded: a join waits on the broker
        (seconds: tansu holds every JoinGroup about 5 s, Kafka an empty group's
        ``group.initial.rebalance.delay.ms``), the fold of a snapshot plus the tail
        takes about one, so a restarted replica pays the longer of the two, not both.
        Work polled only once both are done.
        """
        started = time.perf_counter()
        if self._consumer is None:
            await retry_until(self.bus.ensure_topics, retriable=is_transient, what="create topics")
            # Static membership under the replica's name: a restarted replica takes its
            # old place (and partitions) at once instead of after its old session.
            self._consumer = self.bus.consumer(
                [self.bus.topics.work], self.config.group, instance=f"{self.config.group}/{self.id}"
            )
            await self._start_provisional()
        joining = asyncio.ensure_future(
            retry_until(self._consumer.start, retriable=is_transient, what="consumer start")
        )
        joined: list[float] = []
        joining.add_done_callback(lambda _f: joined.append(time.perf_counter()))
        try:
            state = await self.follower.start()
            folded = time.perf_counter()
            self.placer = Placer(state, self.profile, self.seed)
            cfg = self.config
            fgd = any(p.kind == "FGD" for p in self.placer.profile.plugins)
            if cfg.devices if cfg.devices is not None else fgd:
                self.devices = FoldedDevices(state, fgd=fgd)
            self.scheduler = SchedulingPass(
                state,
                self.placer,
                PassConfig(
                    preemption=cfg.preemption, bands=cfg.bands, reserve_after=cfg.reserve_after
                ),
                devices=None if self.devices is None else self.devices.table,
            )
            if self._submit is None:
                self._producer = self.bus.producer()
                await retry_until(
                    self._producer.start, retriable=is_transient, what="producer start"
                )
            if self._provisional is None:
                await joining
        except BaseException:
            joining.cancel()
            with contextlib.suppress(BaseException):
                await joining
            await self._stop_provisional()
            raise
        if self._provisional is not None:
            # Work the previous share now; run() switches to the group once joined.
            self._joining = joining
            log.info(
                "replica %s ready at position %d in %.2fs (fold %.2fs); working its "
                "previous share %s while it rejoins the group",
                self.id,
                state.position,
                time.perf_counter() - started,
                folded - started,
                _partitions(self._provisional.assignment()),
                extra={"replica": self.id},
            )
            return
        log.info(
            "replica %s ready at position %d in %.2fs (fold %.2fs, group join %.2fs)",
            self.id,
            state.position,
            time.perf_counter() - started,
            folded - started,
            joined[0] - started,
            extra={"replica": self.id},
        )

    # ------------------------------------------------------------------ its share of the work

    @property
    def share_snapshot_name(self) -> str:
        """Snapshot series recording this replica's share of the work partitions."""
        return f"replica-share/{self.config.group}/{self.id}"

    async def _start_provisional(self) -> None:
        """Read the previous share of the work partitions while the group join runs.

        A restarted replica rejoins the group under its static name and gets its old
        partitions back, but the join takes the broker's time (tansu holds it about 8 s;
        Kafka answers a static member's rejoin at once). Until then it reads the share
        it had, recorded in the store, from the group's committed offsets, without
        joining and without committing offsets: redelivered to whoever owns them
        after the join, the items are skipped (their pods are no longer pending). If
        the share moved meanwhile (this replica was away longer than its session),
        two replicas may propose the same pod for a moment: the commit service
        commits one and rejects the other, so nothing is placed twice.
        """
        if not self.config.resume_share:
            return
        try:
            saved = await self.store.load_snapshot(self.share_snapshot_name)
        except TransientStoreError as exc:
            log.warning(
                "replica %s: previous share unknown (%s); waiting for the group", self.id, exc
            )
            return
        if saved is None:
            return
        share = [(str(t), int(p)) for t, p in orjson.loads(saved[1]) if t == self.bus.topics.work]
        if not share:
            return
        provisional = self.bus.consumer(
            [self.bus.topics.work], self.config.group, exclusive=True, partitions=share
        )
        try:
            await provisional.start()
        except BusError as exc:
            log.warning(
                "replica %s: cannot read its previous share (%s); waiting for the group",
                self.id,
                exc,
            )
            return
        self._provisional = provisional

    async def _stop_provisional(self) -> None:
        if self._provisional is not None:
            provisional, self._provisional = self._provisional, None
            with contextlib.suppress(BusError):
                await provisional.stop()

    async def _joined(self) -> None:
        """The group join of a restart is done: stop reading the previous share."""
        joining, self._joining = self._joining, None
        await self._stop_provisional()
        if joining is not None:
            joining.result()  # a failed join ends the service, as in start()
            log.info(
                "replica %s joined the group; share %s",
                self.id,
                _partitions(self._consumer.assignment() if self._consumer else ()),
            )

    async def _record_share(self, consumer: BusConsumer) -> None:
        """Record this replica's share of the work partitions when it changed."""
        share = consumer.assignment()
        if not share or share == self._saved_share:
            return
        try:
            await self.store.save_snapshot(
                self.share_snapshot_name, self.follower.position, orjson.dumps(sorted(share))
            )
            await self.store.prune_snapshots(self.share_snapshot_name, keep=2)
        except TransientStoreError as exc:
            log.warning("replica %s: share not recorded (%s)", self.id, exc)
            return
        self._saved_share = share

    async def stop(self) -> None:
        """Leave the group (uncommitted work is redelivered), stop following; idempotent.

        Batches in flight get ``stop_grace`` seconds to see their decisions (so their
        offsets are committed and nothing is redelivered); then they are cancelled:
        their proposals are still decided by the commit service, and the new owner
        of their work items skips pods that are no longer pending.
        """
        self._stopping.set()
        if self._joining is not None:
            self._joining.cancel()
            with contextlib.suppress(BaseException):
                await self._joining
            self._joining = None
        if self._batches:
            _done, pending = await asyncio.wait(set(self._batches), timeout=self.config.stop_grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        await self._stop_provisional()
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            with contextlib.suppress(BusError):
                await consumer.stop()
        if self._producer is not None:
            producer, self._producer = self._producer, None
            with contextlib.suppress(BusError):
                await producer.stop()
        await self.follower.stop()

    async def run(self) -> ReplicaTotals:
        """Poll work and place it until :meth:`stop`.

        Up to ``pipeline`` batches are in flight: a batch is polled and placed as soon
        as the previous one has sent its proposals, and each batch then waits for its
        own decisions (retrying rejections) in a task of its own. Work offsets are
        committed in poll order, each batch after the one before it.
        """
        loop = asyncio.get_running_loop()
        slots = asyncio.Semaphore(max(1, self.config.pipeline))
        turn: asyncio.Future = loop.create_future()
        turn.set_result(None)
        try:
            while not self._stopping.is_set() and self._failed is None:
                if self._joining is not None and self._joining.done():
                    await self._joined()
                provisional = self._provisional is not None
                consumer = self._provisional if provisional else self._consumer
                if consumer is None:
                    break
                await slots.acquire()
                started = False
                try:
                    msgs = await self._poll(consumer)
                    if provisional:
                        self.totals.early_items += len(msgs)
                    else:
                        await self._record_share(consumer)
                    if not msgs or self._stopping.is_set():
                        continue
                    planned = asyncio.Event()
                    prev, turn = turn, loop.create_future()
                    task = asyncio.create_task(
                        self._batch(msgs, planned, prev, turn, commit=not provisional),
                        name=f"replica-{self.id}-batch",
                    )
                    started = True
                    self._batches.add(task)
                    task.add_done_callback(lambda t: self._batch_done(t, slots))
                    # The next batch is placed once this one's claims are in the view.
                    waiter = asyncio.ensure_future(planned.wait())
                    try:
                        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        waiter.cancel()
                finally:
                    if not started:
                        slots.release()
            if self._batches:
                await asyncio.gather(*set(self._batches), return_exceptions=True)
        finally:
            if self._failed is not None:
                raise self._failed
        return self.totals

    def _batch_done(self, task: asyncio.Task, slots: asyncio.Semaphore) -> None:
        self._batches.discard(task)
        slots.release()
        if not task.cancelled() and task.exception() is not None and self._failed is None:
            # Surfaced by run(): a batch that failed (e.g. the log follower died) must
            # end the service, as it did before batches ran in tasks.
            self._failed = task.exception()

    async def _poll(self, consumer: BusConsumer) -> list[Message]:
        """One batch of work items (lingering briefly while more keeps arriving).

        A broker blip is an empty poll (:func:`poll_or_pause`); one while lingering
        ends the batch with the items already polled (the consumer's position is past
        them: dropping them would lose them).
        """
        msgs = await poll_or_pause(
            consumer,
            self.config.poll_timeout_ms,
            self.config.batch_size,
            service=SERVICE,
            pause=0.5,
        )
        # Under load, linger briefly while work keeps arriving: one pass over a full
        # batch costs about as much round-trip overhead (proposal send, decision
        # append, fold wake-up) as a pass over a handful of pods.
        linger_until = time.monotonic() + self.config.linger
        while (
            self.config.linger_min <= len(msgs) < self.config.batch_size
            and time.monotonic() < linger_until
        ):
            more = await poll_or_pause(
                consumer,
                self.config.linger_poll_ms,
                self.config.batch_size - len(msgs),
                service=SERVICE,
                pause=0.5,
            )
            if not more:
                break
            msgs.extend(more)
        return msgs

    async def _batch(
        self,
        msgs: Sequence[Message],
        planned: asyncio.Event,
        prev: asyncio.Future,
        turn: asyncio.Future,
        *,
        commit: bool,
    ) -> None:
        """One batch in its task: place and decide, then commit its offsets after the
        previous batch's (``prev``), then let the next batch commit (``turn``)."""
        try:
            await self.handle(msgs, planned, prev, commit=commit)
        finally:
            planned.set()
            if not turn.done():
                turn.set_result(None)

    # ------------------------------------------------------------------ one batch

    async def handle(
        self,
        msgs: Sequence[Message],
        planned: asyncio.Event | None = None,
        prev: asyncio.Future | None = None,
        *,
        commit: bool = True,
    ) -> None:
        """Work one polled batch end to end, then commit its offsets (unless not
        ``commit``: items read from the previous share before the group join).

        ``planned`` is set once the batch's first proposals are claimed (the next batch
        may be placed); ``prev`` is awaited before committing offsets (poll order).
        """
        targets: dict[tuple[str, str], Target] = {}
        for m in msgs:
            try:
                item = orjson.loads(m.value)
                kind = "gang" if item.get("gang") else "pod"
                key = str(item[kind])
                position = int(item.get("position") or 0)
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
                log.warning(
                    "ignoring malformed work item at %s/%d@%d", m.topic, m.partition, m.offset
                )
                continue
            prev_t = targets.get((kind, key))
            if prev_t is None or prev_t.position < position:
                targets[(kind, key)] = Target(kind, key, position)
        self.totals.work_items += len(msgs)
        if targets:
            upto = max(t.position for t in targets.values())
            t0 = time.perf_counter()
            # The fold must have the event that made each item pending; it is in the log.
            while not await self.follower.wait_for(upto, 5.0):
                log.warning(
                    "replica %s: fold at %d, waiting for work position %d",
                    self.id,
                    self.follower.position,
                    upto,
                )
            t1 = time.perf_counter()
            await self._place(list(targets.values()), planned)
            log.debug(
                "replica %s: %d work items; fold wait %.1f ms, place+decide %.1f ms",
                self.id,
                len(targets),
                (t1 - t0) * 1e3,
                (time.perf_counter() - t1) * 1e3,
            )
        if planned is not None:
            planned.set()
        if prev is not None:
            # Offsets in poll order: committing this batch's offsets first would also
            # commit the earlier batch's items on the same partitions, still undecided.
            await asyncio.shield(prev)
        offsets: dict[tuple[str, int], int] = {}
        for m in msgs:
            k = (m.topic, m.partition)
            offsets[k] = max(offsets.get(k, 0), m.offset + 1)
        consumer = self._consumer
        if consumer is not None and commit:
            try:
                await consumer.commit(offsets)
            except BusError as exc:
                # Everything is durable; redelivered items are skipped (no longer pending).
                log.warning("work offset commit failed (%s); items will be redelivered", exc)
        metrics.REPLICA_PENDING.labels(self.id).set(self._pending_count())
        if self.placer is not None:
            metrics.REPLICA_CACHE_HIT_RATE.labels(self.id).set(
                self.placer.stats()["cache_hit_rate"]
            )

    def _pending_count(self) -> int:
        return self.state.phase_count(PHASE_PENDING)

    async def _place(self, targets: list[Target], planned: asyncio.Event | None = None) -> None:
        """Place, propose, wait, retry rejected ones; report the unplaceable.

        An unschedulable verdict is final only if every claim in the view it was
        reached on was committed: this pass's proposals and those of other batches
        still in flight (assumed). Otherwise the view held room that is in fact free,
        so those pods are judged again on fresh state. Verdicts still in doubt when
        the retries run out are reported as provisional (data ``position`` 0: "judged
        on no particular state"), which the dispatcher re-publishes after backoff
        once any capacity event is in the log. A gang with a member in another
        batch's undecided proposal is planned once that one is decided.
        """
        assert self.placer is not None
        # pod -> (work position, reasons, message, position the verdict was reached on)
        unschedulable: dict[str, tuple[int, dict[str, int], str, int]] = {}
        attempt = 0
        while targets and not self._stopping.is_set():
            self._resync()
            # Undecided claims of other batches this pass's view assumes.
            foreign = [f for pid in self._inflight if (f := self._waiting.get(pid)) is not None]
            candidates: dict[str, tuple[Target, dict[str, int], str]] = {}
            blocked: list[tuple[Target, list[asyncio.Future]]] = []
            judged_at = int(self.state.position)  # the state this pass's verdicts see
            t0 = time.perf_counter()
            proposals, by_proposal = self._plan(targets, candidates, blocked)
            t1 = time.perf_counter()
            retry: list[Target] = []
            if proposals:
                retry = await self._decided(proposals, by_proposal, planned)
            elif planned is not None:
                planned.set()
            log.debug(
                "replica %s: planned %d in %.1f ms, decided in %.1f ms",
                self.id,
                len(proposals),
                (t1 - t0) * 1e3,
                (time.perf_counter() - t1) * 1e3,
            )
            doubt = bool(retry)
            if candidates and not doubt and foreign:
                done, pending = await asyncio.wait(foreign, timeout=self.config.decision_timeout)
                doubt = bool(pending) or any(
                    f.cancelled() or f.result()["type"] != PLACEMENT_COMMITTED for f in done
                )
            again: dict[tuple[str, str], Target] = {}
            if doubt:
                for t in retry:
                    again[(t.kind, t.key)] = t
                for t, _reasons, _msg in candidates.values():
                    again.setdefault((t.kind, t.key), t)
            else:
                for pod, (t, reasons, msg) in candidates.items():
                    unschedulable[pod] = (t.position, reasons, msg, judged_at)
            if blocked:
                await asyncio.wait(
                    {f for _t, fs in blocked for f in fs}, timeout=self.config.decision_timeout
                )
                for t, _fs in blocked:
                    again.setdefault((t.kind, t.key), t)
            if not again:
                break
            targets = list(again.values())
            if not doubt:
                continue  # only blocked gangs: planned now, not a retry
            attempt += 1
            if attempt > self.config.max_retries:
                # The dispatcher re-publishes a rejected proposal's pods after a delay,
                # and provisional verdicts after backoff.
                for pod, (t, reasons, msg) in candidates.items():
                    unschedulable[pod] = (t.position, reasons, msg, 0)
                self.totals.gave_up += len(targets)
                log.info(
                    "replica %s: %d target(s) still conflicting after %d retries",
                    self.id,
                    len(targets),
                    self.config.max_retries,
                )
                break
            self.totals.retries += len(targets)
            # Backoff with jitter: replicas that collided should not collide again in step.
            delay = min(
                self.config.retry_backoff * 2 ** (attempt - 1), self.config.retry_backoff_max
            )
            await asyncio.sleep(delay * (0.5 + np.random.random()))
        if unschedulable:
            await self._report_unschedulable(unschedulable)
        if self._to_reserve:
            await self._reserve()

    async def _decided(
        self,
        proposals: list[dict[str, Any]],
        by_proposal: dict[str, Target],
        planned: asyncio.Event | None = None,
    ) -> list[Target]:
        """Propose, wait for the decisions, count them; the targets of rejected ones."""
        decisions = await self._propose(proposals, planned)
        retry: list[Target] = []
        committed = placed = 0
        for pid, env in decisions.items():
            data = env["data"]
            if env["type"] == PLACEMENT_COMMITTED:
                committed += 1
                placed += len(data["bindings"])
            else:
                reason = str(data.get("reason"))
                self.totals.conflicts += 1
                self.totals.reasons[reason] = self.totals.reasons.get(reason, 0) + 1
                metrics.REPLICA_PROPOSALS.labels(self.id, "rejected").inc()
                metrics.REPLICA_CONFLICTS.labels(self.id, reason).inc()
                retry.append(by_proposal[pid])
        # Counted once per pass: labelled metric lookups per pod are measurable here.
        self.totals.committed += committed
        self.totals.placed_pods += placed
        metrics.REPLICA_PROPOSALS.labels(self.id, "committed").inc(committed)
        metrics.REPLICA_PLACED_PODS.labels(self.id).inc(placed)
        return retry

    # ------------------------------------------------------------------ claims in flight

    def _resync(self) -> None:
        """Make the placer's view the fold plus every undecided claim (assumed).

        Cheap when nothing changed: the view a pass leaves behind already holds its
        own claims, so the next batch placed before any fold starts from it as is.
        """
        assert self.placer is not None
        now = (int(self.state.position), self._claims_version)
        if self._view_at == now:
            return
        self.placer.sync()
        if self._inflight:
            st = self.state
            pods: list[int] = []
            nodes: list[int] = []
            victims: list[int] = []
            for bindings, evicted in self._inflight.values():
                for pod, node, _devices in bindings:
                    p = st.pod_index.get(pod)
                    n = st.node_index.get(node)
                    if p is not None and n is not None:
                        pods.append(p)
                        nodes.append(n)
                victims.extend(v for pod in evicted if (v := st.pod_index.get(pod)) is not None)
            self.placer.assume_claims(pods, nodes, victims)
        if self.devices is not None:
            assert self.scheduler is not None
            self.devices.sync()
            self.scheduler.use_gpu_resource(self.devices.resource, self.devices.scale)
            self.devices.claim(b for bindings, _ in self._inflight.values() for b in bindings)
        self._view_at = now

    def _claim(self, proposals: list[dict[str, Any]]) -> None:
        """Record the claims of proposals about to be sent (already in the view)."""
        for p in proposals:
            pairs = [(b["pod"], b["node"], tuple(b.get("devices") or ())) for b in p["bindings"]]
            self._inflight[p["proposal"]] = (pairs, [v["pod"] for v in p.get("victims") or ()])
            for pod, _node, _devices in pairs:
                self._inflight_pods[pod] = p["proposal"]
        self._claims_version += 1
        # The view already holds them (the pass assumed each placement as it went).
        self._view_at = (int(self.state.position), self._claims_version)

    def _release(self, pid: str) -> None:
        """Forget a claim whose decision is in the fold (committed: the fold has it)."""
        claim = self._inflight.pop(pid, None)
        if claim is None:
            return
        for pod, _node, _devices in claim[0]:
            if self._inflight_pods.get(pod) == pid:
                del self._inflight_pods[pod]
        self._claims_version += 1

    def _requests_of(self, cid: int) -> dict[str, int]:
        req = self._requests.get(cid)
        if req is None:
            req = dict(self.state.class_specs[cid]["requests"])
            self._requests[cid] = req
        return req

    def _plan(
        self,
        targets: list[Target],
        unschedulable: dict[str, tuple[Target, dict[str, int], str]],
        blocked: list[tuple[Target, list[asyncio.Future]]] | None = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Target]]:
        """Proposals for ``targets`` by one scheduling pass on the current view (pods
        assumed as placed); pods no node fits go to ``unschedulable`` (pod -> target,
        reasons, message).

        A pod with an undecided claim (another batch proposed it) is skipped: that
        batch retries it if it is rejected. A gang with a member in an undecided
        proposal goes to ``blocked`` with the futures of those decisions.
        """
        assert self.scheduler is not None
        result = self.scheduler.run(
            targets,
            now=time.monotonic(),
            in_flight=self._inflight_pods,
            reserving={r["gang"] for r in self._to_reserve},
        )
        proposals, by_proposal = self._proposals(result)
        unschedulable.update(result.unschedulable)
        self.totals.skipped += result.skipped
        self.totals.gangs_waiting += result.gangs_waiting
        for t, busy in result.blocked:
            futures = [f for pid in busy if (f := self._waiting.get(pid)) is not None]
            if blocked is not None and futures:
                blocked.append((t, futures))
            else:
                self.totals.skipped += 1
        self._to_reserve.extend(result.reservations)
        return proposals, by_proposal

    def _proposals(self, result: PassResult) -> tuple[list[dict[str, Any]], dict[str, Target]]:
        """The ``esched.placement.proposed`` data of a pass's placements (one proposal
        per placement: all or nothing), and the target of each by proposal id."""
        st = self.state
        position = int(st.position)
        proposals: list[dict[str, Any]] = []
        by_proposal: dict[str, Target] = {}
        for pl in result.placements:
            pid = f"{self._pid_prefix}{next(self._pid_seq):x}"
            proposal: dict[str, Any] = {
                "proposal": pid,
                "replica": self.id,
                "position": position,
                "gang": pl.gang,
                "bindings": [
                    _binding(pod, node, self._requests_of(st.pod_class_id(pod)), devices)
                    for pod, node, devices in pl.bindings
                ],
            }
            if pl.victims:
                # One transaction: the commit service evicts these and binds, or neither.
                proposal["victims"] = pl.victims
                self.totals.preemptions += 1
                self.totals.victims += len(pl.victims)
            proposals.append(proposal)
            by_proposal[pid] = pl.target
        return proposals, by_proposal

    async def _reserve(self) -> None:
        """Append the reservations of the last pass (deterministic ids: dedupe)."""
        now = datetime.now(UTC)
        events = []
        for r in self._to_reserve:
            data = {k: v for k, v in r.items() if k != "position"}
            env = envelope(
                GANG_RESERVED,
                self.config.source_prefix + self.id,
                data,
                id=f"reserve-{r['gang']}-{r['position']}",
                time=timestamp(),
            )
            events.append(
                NewEvent(
                    id=env["id"],
                    type=GANG_RESERVED,
                    stream=stream_name(GANG, r["gang"]),
                    payload=orjson.dumps(env),
                    time=now,
                )
            )
        self._to_reserve = []
        res = await retry_until(
            lambda: self.store.append(events), retriable=is_transient, what="reservation append"
        )
        self.totals.reservations += len(events) - res.duplicates
        for e in events:
            log.info("replica %s: %s", self.id, orjson.loads(e.payload)["data"]["message"])

    async def _propose(
        self, proposals: list[dict[str, Any]], planned: asyncio.Event | None = None
    ) -> dict[str, dict[str, Any]]:
        """Claim and send proposals and wait until their decisions are in this
        replica's fold. ``planned`` is set once the claims are recorded (before the
        first await: the view and the claims never disagree)."""
        loop = asyncio.get_running_loop()
        if not self.totals.first_proposal_at:
            self.totals.first_proposal_at = time.perf_counter()
        futures = {p["proposal"]: loop.create_future() for p in proposals}
        self._waiting.update(futures)
        self._claim(proposals)
        if planned is not None:
            planned.set()
        self.totals.proposals += len(proposals)
        try:
            pending = list(proposals)
            while True:
                await self._send(pending)
                await asyncio.wait(futures.values(), timeout=self.config.decision_timeout)
                pending = [p for p in proposals if not futures[p["proposal"]].done()]
                if not pending:
                    break
                if self._stopping.is_set():
                    raise asyncio.CancelledError
                log.warning(
                    "replica %s: %d proposal(s) undecided after %.0fs; re-sending",
                    self.id,
                    len(pending),
                    self.config.decision_timeout,
                )
            self.totals.last_decision_at = time.perf_counter()
            return {pid: f.result() for pid, f in futures.items()}
        finally:
            for pid in futures:
                self._waiting.pop(pid, None)

    async def _send(self, proposals: list[dict[str, Any]]) -> None:
        if self._submit is not None:
            await self._submit(proposals)
            return
        assert self._producer is not None
        now = timestamp()
        records = [
            (
                proposal_key(p).encode(),
                orjson.dumps(proposal_envelope(p, self.config.source_prefix + self.id, time=now)),
            )
            for p in proposals
        ]
        producer = self._producer
        await retry_until(
            lambda: producer.send_many(self.bus.topics.proposals, records),
            retriable=is_transient,
            what="proposals send",
        )

    def _on_fold(self, events: list[tuple[int, dict[str, Any]]]) -> None:
        """Release the claims of our proposals whose decisions just got folded (in the
        same step as the fold: the state has a committed claim exactly when the
        ledger has not) and resolve their futures."""
        if not self._waiting and not self._inflight:
            return
        for _pos, ev in events:
            if ev.get("type") in (PLACEMENT_COMMITTED, PLACEMENT_REJECTED):
                pid: Any = (ev.get("data") or {}).get("proposal")  # as stored: any JSON
                if pid in self._inflight:
                    self._release(pid)
                fut = self._waiting.get(pid)
                if fut is not None and not fut.done():
                    fut.set_result(ev)

    async def _report_unschedulable(
        self, pods: dict[str, tuple[int, dict[str, int], str, int]]
    ) -> None:
        """Append one ``esched.pod.unschedulable`` per pod (deterministic ids: dedupe)."""
        st = self.state
        n_nodes = len(st.node_index)
        now = datetime.now(UTC)
        events = []
        for pod, (position, reasons, extra, judged_at) in pods.items():
            message = unschedulable_message(n_nodes, reasons, extra)
            # position: the state the verdict was reached on (not the fold's position
            # now), so the dispatcher can tell whether capacity freed after it: no lost
            # wake-ups.
            data = {"pod": pod, "reasons": reasons, "message": message, "position": judged_at}
            env = envelope(
                POD_UNSCHEDULABLE,
                self.config.source_prefix + self.id,
                data,
                id=unschedulable_id(pod, position),
                time=timestamp(),
            )
            events.append(
                NewEvent(
                    id=env["id"],
                    type=POD_UNSCHEDULABLE,
                    stream=stream_name(POD, pod),
                    payload=orjson.dumps(env),
                    time=now,
                )
            )
        res = await retry_until(
            lambda: self.store.append(events), retriable=is_transient, what="unschedulable append"
        )
        fresh = len(events) - res.duplicates
        self.totals.unschedulable += fresh
        metrics.REPLICA_UNSCHEDULABLE.labels(self.id).inc(fresh)

    def stats(self) -> dict[str, Any]:
        """Totals plus the placer's counters (cache hit rate)."""
        out = self.totals.as_dict()
        if self.placer is not None:
            s = self.placer.stats()
            out["cache_hit_rate"] = s["cache_hit_rate"]
            metrics.REPLICA_CACHE_HIT_RATE.labels(self.id).set(s["cache_hit_rate"])
        out["position"] = self.follower.position
        return out


def _binding(pod: str, node: str, resources: dict[str, int], devices: tuple[int, ...]) -> dict:
    """One binding of a proposal; ``devices`` only when GPU devices were chosen."""
    b: dict[str, Any] = {"pod": pod, "node": node, "resources": resources}
    if devices:
        b["devices"] = list(devices)
    return b


def _partitions(share: Any) -> str:
    """``topic[0,3]``-style text of a set of (topic, partition) pairs, for logs."""
    by_topic: dict[str, list[int]] = {}
    for topic, part in share:
        by_topic.setdefault(topic, []).append(part)
    return " ".join(f"{t}{sorted(ps)}" for t, ps in sorted(by_topic.items())) or "[]"
