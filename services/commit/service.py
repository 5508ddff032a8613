"""The commit service facade: lifecycle, the leader loop and the embedded mode's
:meth:`CommitService.decide`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from esched.core import ClusterState
from esched.services import metrics
from esched.services.commit.config import SERVICE, CommitTotals, NotLeader
from esched.services.commit.consumer import _ProposalConsumer
from esched.services.commit.decisions import proposal_data
from esched.services.faults import retry_transient
from esched.services.store.base import StoredEvent
from esched.services.store.snapshots import thaw_heap

log = logging.getLogger(__name__)


class CommitService(_ProposalConsumer):
    """The commit service facade: :meth:`start`, :meth:`run`, :meth:`decide`, :meth:`stop`;
    and deciding in process on a given state, without a store or a lease
    (:meth:`adopt`, :meth:`fold_rows`, :meth:`validate`, :meth:`apply_decisions`), each
    step as a leader's batch runs it (benchmarks and tests).

    :param store: the event store (connected, migrated).
    :param bus: the bus for proposals in and decisions out; None in the embedded mode,
        where replicas call :meth:`decide` directly.
    :param lease: the leader lease (:func:`esched.services.lease.open_lease`); default a
        :class:`LocalLease` (one process only; the fence still guards the log).
    """

    async def start(self) -> None:
        """Connect to the bus (if any), retrying while it is unreachable. Does not wait
        for the lease: :meth:`run` and :meth:`decide` do."""
        if self.bus is None:
            return
        await retry_transient(
            self._ensure_topics,
            what="create topics",
            service=SERVICE,
            peer="bus",
        )
        self._producer = self.bus.producer()
        await retry_transient(
            self._producer.start,
            what="producer start",
            service=SERVICE,
            peer="bus",
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

    async def decide(self, proposals: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Decide proposals directly (the embedded mode); one decision envelope each,
        in order. Each item is a ``esched.placement.proposed`` envelope or just its
        ``data``. Waits for the lease if this instance is not leading.

        Raises :class:`~esched.schemas.validator.InvalidEvent` for a proposal that is
        not a valid proposal, and :class:`NotLeader` if leadership is lost (nothing
        of this call was decided, or the decisions were recorded by a fenced append
        only if the store accepted them; redeliver to the new leader, it is idempotent).
        """
        items = [proposal_data(p) for p in proposals]
        if not self.leading:
            # One caller takes the lease and rebuilds the state; concurrent first calls
            # wait here and find it leading (a second rebuild would refold the log).
            async with self._lead_lock:
                if not await self._become_leader():
                    raise NotLeader("the service is stopping")
        decisions = await self._decide_batch(items)
        await self._publish(decisions, self._appended_payloads())
        return decisions

    def adopt(self, state: ClusterState) -> None:
        """Take ``state`` as the authoritative fold (with its validator, as a rebuild
        leaves it), without a store, a lease or leading."""
        self.state = state
        self._validator = self._new_validator(state)

    def fold_rows(self, rows: list[StoredEvent]) -> None:
        """Fold stored rows that follow :attr:`state`'s position, with the books, as a
        leader's catch-up does (a decision not made by :meth:`apply_decisions` counts
        in :attr:`foreign_decisions`)."""
        self._fold_rows(rows, True)

    def validate(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The decision envelopes (a preemptor's evictions before its decision) for the
        proposals' ``data`` in ``items`` on the current fold, as a batch appends them."""
        return self._validate(items)[1]

    def apply_decisions(self, fresh: list[dict[str, Any]], start: int, version: int) -> None:
        """Fold :meth:`validate`'s envelopes ``fresh`` from memory at log positions
        ``start``.. and decisions-stream versions ``version``.., with the books, as
        after a head-checked append that stored them all."""
        self._expected = {env["id"] for env in fresh}
        try:
            self._fold_own(fresh, start, version)
        finally:
            self._expected = set()

    @property
    def foreign_decisions(self) -> int:
        """Decisions folded since the last batch that another writer made."""
        return len(self._foreign)
