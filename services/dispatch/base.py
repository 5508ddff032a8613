"""What every part of the dispatcher shares: one instance's attributes."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from esched.core import ClusterState, Placer
from esched.core.admission import Admission, Rejection
from esched.core.overload import Episodes
from esched.core.validation import Validator
from esched.services.bus import Bus, BusProducer
from esched.services.dispatch.config import SERVICE, DispatchConfig, DispatchTotals
from esched.services.faults import retry_transient
from esched.services.lease import Lease, LocalLease
from esched.services.store.base import EventStore, StoredEvent
from esched.services.store.feed import FeedWriter
from esched.services.store.follower import LogFollower
from esched.services.store.snapshots import payload_pairs


@dataclass(slots=True)
class Parked:
    """A pod reported unschedulable, waiting for capacity (and its backoff)."""

    reports: int
    not_before: float
    #: Capacity events seen when parked; re-publish only once this has grown.
    capacity_seq: int


class _DispatchBase:
    """The attributes of one dispatcher; each module of this package adds one job on top
    (wake-ups from the fold, reclaim, the outbox)."""

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
        self._parked: dict[str, Parked] = {}
        self._reports: dict[str, int] = {}  # pod -> unschedulable reports so far
        # Pods reported OtherScheduler (they name a scheduler esched does not run): not
        # parked (nor reclaimed for), not published again until resubmitted.
        self._foreign: dict[str, None] = {}
        self._delayed: list[tuple[float, str]] = []  # heap of (due, pod) after rejections
        self._capacity_seq = 0
        self._capacity_position = 0  # position of the newest capacity event
        # Overload handling (overload.py): node -> id of the last usage report naming
        # it, not yet planned; per (node, resource) the overload episode (when it
        # began, on the log's clock) and the throttles appended in it; the plan
        # awaiting its append.
        self._overload_nodes: dict[str, str] = {}
        self._episodes = Episodes()
        self._throttled: dict[tuple[str, str], set[str]] = {}
        self._overload_out: list[tuple[dict[str, Any], str, str, bool]] = []
        self._overload_head = 0
        self._overload_conflicts = 0
        #: The feed's writer while leading with ``config.feed`` (its fold is the
        #: leader's: see _apply).
        self._feed: FeedWriter | None = None
        self.leading = False

    @property
    def state(self) -> ClusterState:
        assert self.follower is not None and self.follower.state is not None
        return self.follower.state

    @property
    def position(self) -> int:
        return -1 if self.follower is None else self.follower.position

    def _apply(self, rows: Sequence[StoredEvent]) -> None:
        """Fold stored rows into the state: through the feed's writer when publishing
        it (it cuts the pods' claims records around the other events), else from
        their bytes."""
        if self._feed is not None:
            self._feed.fold(rows)
        else:
            self.state.apply_payloads(payload_pairs(rows))

    async def _log_tail(self) -> AsyncIterator[list[StoredEvent]]:
        """The log read backwards from the folded position a page at a time, each page
        newest row first, at most ``takeover_scan`` rows (a new leader's look at what
        its predecessor did); the caller stops when it has found what it needs."""
        upto = int(self.state.position)
        lowest = max(0, upto - self.config.takeover_scan)
        page = 5000
        while upto > lowest:
            after = max(lowest, upto - page)
            rows = await retry_transient(
                functools.partial(self.store.read, after, page, upto),
                what="read the log tail",
                service=SERVICE,
                peer="store",
            )
            yield rows[::-1]
            upto = after
