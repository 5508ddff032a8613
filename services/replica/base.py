"""What every part of a replica shares: one instance's attributes."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Sequence
from typing import Any

import orjson

from esched.core import ClassMemo, ClusterState, Profile, committed_proposal
from esched.core._placer import Placer
from esched.core.devices import FoldedDevices
from esched.core.quincy import QuincyRounds
from esched.core.schedule import SchedulingPass
from esched.schemas.events import PLACEMENT_COMMITTED, PLACEMENT_REJECTED
from esched.services.bus import Bus, BusConsumer, BusProducer
from esched.services.replica.config import ReplicaConfig, ReplicaTotals, Submit
from esched.services.replica.feed import FEED_IDLE_WAIT, FEED_WAIT_MS, FeedFollower
from esched.services.replica.proposals import Proposed
from esched.services.store._search import all_hold
from esched.services.store.base import EventStore
from esched.services.store.follower import LogFollower

#: In a payload: a committed placement (a false match, e.g. a pod naming the type in
#: a label, only means one fetch more).
_COMMITTED = orjson.dumps(PLACEMENT_COMMITTED)


def may_make_work(rows: Sequence[tuple[int, bytes]]) -> bool:
    """Whether a folded batch of ``(position, payload)`` pairs holds an event work may
    follow: any but a committed placement (the dispatcher makes work of submissions,
    rejections, capacity)."""
    return not all_hold(rows, _COMMITTED)


def own_decision(payload: bytes) -> dict[str, Any]:
    """One of this replica's decisions as it reads them (:mod:`.claims`,
    :meth:`~.placing._Placing._decided`): a committed placement as its type and
    proposal id, read off the bytes by the fold's scanner (a full decode cost ~6x
    more); any other decision decoded whole (a rejection's reason is read)."""
    pid = committed_proposal(payload)
    if pid is None:
        return orjson.loads(payload)
    return {"type": PLACEMENT_COMMITTED, "data": {"proposal": pid}}


class _ReplicaBase:
    """The attributes of one replica; each module of this package adds one job on top
    (claims in flight, reports, placing, its share of the work, the work loop)."""

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
        if self.config.count_cpu:
            self.totals.clock = time.thread_time
        #: process and thread CPU seconds when placing started (Replica.start_placing)
        self._started_cpu: tuple[float, float] | None = None
        #: and the monotonic time then, and the work loop thread's (voluntary,
        #: involuntary) context switches then
        self._started_at = 0.0
        self._started_switches = (0, 0)
        self._submit = submit
        self._consumer = consumer
        self._producer: BusProducer | None = None
        #: Proposal ids: the replica, a random part per instance (a restarted process
        #: never reuses an id: the decision's id is derived from it) and a counter (a
        #: uuid4 per proposal showed in the profile).
        self._pid_prefix = f"{replica_id}-{uuid.uuid4().hex[:12]}-"
        self._pid_seq = itertools.count()
        #: Set when the log shows an event that may make work (see ReplicaConfig.idle_after).
        self._work_may_come = asyncio.Event()
        #: monotonic time since which polls found no work and the log announced none
        self._idle_since = 0.0
        follower_args: dict[str, Any] = {}
        if self.config.follow == "feed":
            follower_class: type[LogFollower] = FeedFollower
            follower_args.update(
                open_feed=self._open_feed,
                keyring=bus.keyring if bus is not None else None,
                on_work=self._work_may_come.set,
            )
        elif self.config.follow == "log":
            follower_class = LogFollower
        else:
            raise ValueError(f"follow: {self.config.follow!r} is neither 'log' nor 'feed'")
        self.follower = follower_class(
            store,
            **follower_args,
            after_fold=self._on_fold,
            decode=(PLACEMENT_COMMITTED, PLACEMENT_REJECTED),
            # Only our decisions are decoded: their payloads hold our proposal ids
            # (as JSON writes the prefix); every other replica's are folded only.
            mentions=orjson.dumps(self._pid_prefix)[1:-1],
            decoder=own_decision,
            interval=self.config.follow_interval,
            busy_interval=self.config.follow_busy_interval,
            on_batch=self._on_batch,
        )
        #: Whether the prefix is its own JSON (no escapes): ids are then spliced into
        #: proposal records as their UTF-8 text.
        self._pid_prefix_plain = orjson.dumps(self._pid_prefix) == b'"%s"' % (
            self._pid_prefix.encode()
        )
        self.placer: Placer | None = None
        #: The batch of each proposal awaiting its decision, by proposal id: a batch
        #: awaits one future for all its decisions, not one per proposal.
        self._waiting: dict[str, Proposed] = {}
        self._stopping = asyncio.Event()
        #: Claims of proposals sent and not yet decided in the fold, by proposal id:
        #: ([(pod, node, GPU devices)], [victim pods], the bindings' slots kept by
        #: _claims.claimed_slots); assumed in the placer's view (and the device
        #: table's) (see _resync).
        self._inflight: dict[
            str,
            tuple[Sequence[tuple[str, str, tuple[int, ...]]], Sequence[str], list[int]],
        ] = {}
        #: pod -> proposal id of its undecided claim
        self._inflight_pods: dict[str, str] = {}
        #: bumped whenever a claim is added or released: the view must be renewed
        self._claims_version = 0
        #: (state position, claims version) the placer's view was last made for
        self._view_at: tuple[int, int] = (-1, -1)
        #: batches being worked on (placed, proposed, waiting for decisions)
        self._batches: set[asyncio.Task] = set()
        self._failed: BaseException | None = None
        #: each class's requests, and their JSON and each node's name's, as proposals
        #: carry them (the class ids' keyed by the follower's state once it has one)
        self._requests = ClassMemo()
        self._resources_json = ClassMemo()
        self._node_json: dict[str, bytes] = {}
        #: the placement policy (core.schedule), made with the placer in start()
        self.scheduler: SchedulingPass | None = None
        #: Quincy's rounds over that pass (config.quincy), from start(); None: the pass
        self.rounds: QuincyRounds | None = None
        #: GPU devices of the fold (with config.devices / an FGD profile), from start()
        self.devices: FoldedDevices | None = None
        #: reservations decided by the last placement pass, appended after it
        self._to_reserve: list[dict[str, Any]] = []
        #: While the group join of a restart is under way: a reader of this replica's
        #: previous share of the work partitions (no group membership, no offset
        #: commits) and the join itself. See start().
        self._provisional: BusConsumer | None = None
        self._joining: asyncio.Future | None = None
        #: The provisional reader is bridging a rebalance (not a restart's join).
        self._bridging = False
        #: The share last recorded in the store (share_snapshot_name).
        self._saved_share: frozenset[tuple[str, int]] = frozenset()

    def _open_feed(self) -> BusConsumer:
        """A reader of the whole feed topic from its beginning: a group of this
        instance's own, not joined (no rebalance), its offsets never committed."""
        return self.bus.consumer(
            [self.bus.topics.feed],
            f"{self.config.group}-feed-{self._pid_prefix}",
            exclusive=True,
            wait_ms=FEED_WAIT_MS,
            idle_wait=FEED_IDLE_WAIT,
        )

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
    def proposal_prefix(self) -> str:
        """How every proposal id of this instance begins (its decisions hold it)."""
        return self._pid_prefix

    @property
    def bridging(self) -> bool:
        """Whether the replica works its previous share by assignment while its group
        rebalances (see ``ReplicaConfig.bridge_rebalance``)."""
        return self._bridging

    @property
    def inflight(self) -> dict[str, str]:
        """Pods of this replica's proposals awaiting their decision: pod -> proposal id."""
        return dict(self._inflight_pods)

    def _on_batch(self, rows: Sequence[tuple[int, bytes]]) -> None:
        """After each batch folded: wake an idle work loop if work may follow."""
        if not self._work_may_come.is_set() and may_make_work(rows):
            self._work_may_come.set()

    def _on_fold(self, events: list[tuple[int, dict[str, Any]]]) -> None:
        """Called by the follower after each fold step (see :mod:`.claims`)."""
        raise NotImplementedError
