"""The dispatcher facade: the leader loop, idleness."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from esched.core import PHASE_PENDING
from esched.core.admission import Rejection, WorkItem
from esched.services.bus import BusError
from esched.services.dispatch.config import SERVICE, DispatchTotals
from esched.services.dispatch.outbox import _Outbox
from esched.services.faults import retry_transient
from esched.services.store.base import StoredEvent
from esched.services.store.feed import FeedWriter
from esched.services.store.follower import LogFollower

log = logging.getLogger(__name__)


class Dispatcher(_Outbox):
    """The work dispatcher: :meth:`start`, :meth:`run`, :meth:`stop`, :meth:`idle`.

    :param store: the event store (connected, migrated).
    :param bus: the bus with the work topic.
    :param lease: its leadership lease (``open_lease(store_url, "dispatch")``);
        default a :class:`LocalLease` (one process only).
    :param admission: queue admission and quota (default: no quota).
    :param submit: decides reclaim proposals directly (the embedded mode's
        ``CommitService.decide``); default: send them on ``{prefix}proposals``.
    """

    async def start(self) -> None:
        """Create the topics and connect the producer (retrying while unreachable)."""
        await retry_transient(
            self.bus.ensure_topics, what="create topics", service=SERVICE, peer="bus"
        )
        self._producer = self.bus.producer()
        await retry_transient(
            self._producer.start, what="producer start", service=SERVICE, peer="bus"
        )

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
        self._overload_nodes.clear()
        self._episodes.clear()
        self._throttled.clear()
        self._overload_out.clear()
        self._placer = None
        self._validator = None
        self.follower = LogFollower(self.store, handle=self._fold)
        self._feed = None
        state = await self.follower.start()
        if self.config.feed:
            # (from the position the fold has reached: a follower bridges the rest)
            self._feed = FeedWriter(state)
        self.totals.takeovers += 1
        self.leading = True
        self._rejections.extend(self.admission.start(state))
        await self._recover_parked()
        await self._recover_overload()
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
            self._plan_overload()
            await self._flush()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.config.tick)
        await self._flush()

    def idle(self) -> bool:
        """Nothing to publish now or later without new events: the outbox is empty, no
        rejected pod awaits its re-publish, and no parked pod has seen capacity free up."""
        if (
            not self.leading
            or self._outbox
            or (self._feed is not None and self._feed.pending)
            or self._rejections
            or self._reclaims
            or self._overload_nodes
            or self._overload_out
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

    def fold_and_release(self, rows: list[StoredEvent]) -> tuple[list[WorkItem], list[Rejection]]:
        """Fold stored rows that follow the state's position and take what became of
        them, as the leader's fold and flush do but without publishing or appending
        (in-process use: benchmarks, tests): the work admission hands out now, in
        allocation order, and the rejections it decided."""
        self._fold(rows)
        rejections, self._rejections = self._rejections, []
        return self._release(), rejections

    @property
    def parked(self) -> int:
        """Unschedulable pods waiting for capacity."""
        return len(self._parked)

    @property
    def reclaiming(self) -> frozenset[str]:
        """Pods a reclaim was planned for, not planned again until its decision or
        timeout."""
        return frozenset(self._reclaiming)
