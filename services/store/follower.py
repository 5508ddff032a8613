"""A live fold of the log: the state every service that follows the store keeps.

Replicas, the dispatcher and (through its own catch-up) the commit service build a
:class:`~esched.core.ClusterState` with :func:`~esched.services.store.snapshots.fold_log`
and then follow :meth:`EventStore.subscribe`, folding each batch as it arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

import orjson

from esched.core import ClusterState
from esched.core.reservations import ReclamationConfig
from esched.services.faults import is_transient
from esched.services.metrics import publish_anomalies, publish_reclamation
from esched.services.retry import retry_until
from esched.services.store._search import mentioning
from esched.services.store.base import EventStore, StoredEvent, Subscription
from esched.services.store.snapshots import fold_log, freeze_heap, thaw_heap

__all__ = ["LogFollower"]

log = logging.getLogger(__name__)

#: Seconds between two updates of the reclamation gauges (services/metrics.py).
RECLAIM_EVERY = 10.0


class LogFollower:
    """A live fold of the log: newest snapshot + catch-up, then :meth:`EventStore.subscribe`.

    By default a batch is read as ``(position, payload)`` pairs and folded from its
    bytes (``state.apply_payloads``, the fold's bytes path, as catch-up does), and
    ``after_fold(events)`` then gets the ``(position, envelope)`` pairs of the batch's
    events whose type is in ``decode`` (None: all): every replica follows every
    event, so only what a handler reads is decoded, and with ``mentions`` only
    payloads holding those bytes are decoded at all (a replica's proposal id
    prefix: the decisions of other replicas' proposals are folded, never decoded);
    ``decoder(payload)`` decodes them (default ``orjson.loads``: whole envelopes).
    ``handle(rows)`` instead folds a batch of stored events itself: a handler that
    needs to look at the state *before* an event (the dispatcher, for a removed
    node's pods).

    ``interval``, ``busy_interval``: the least time (s) between live reads, at light
    load and in a burst (see :class:`~esched.services.store.base.Subscription`): one
    read gathers the appends of that time. ``on_advance()`` runs after each batch is folded;
    ``on_batch(pairs)`` too, with the batch's ``(position, payload)`` pairs (not with
    ``handle``): a replica looks for events that may make work.
    """

    def __init__(
        self,
        store: EventStore,
        *,
        handle: Callable[[list[StoredEvent]], None] | None = None,
        after_fold: Callable[[list[tuple[int, dict[str, Any]]]], None] | None = None,
        decode: Collection[str] | None = None,
        mentions: bytes | None = None,
        decoder: Callable[[bytes], dict[str, Any]] | None = None,
        batch: int = 5000,
        interval: float = 0.0,
        busy_interval: float = 0.0,
        on_advance: Callable[[], None] | None = None,
        on_batch: Callable[[Sequence[tuple[int, bytes]]], None] | None = None,
        reclamation: ReclamationConfig | None = None,
    ) -> None:
        self.store = store
        #: the reservation rule's configuration (None: the defaults), see fold_log
        self.reclamation = reclamation
        self._reclaim_published = 0.0
        self.state: ClusterState | None = None
        self._handle = handle
        self._after = after_fold
        self._decode = None if decode is None else frozenset(decode)
        self._mentions = mentions
        self._decoder = orjson.loads if decoder is None else decoder
        self._batch = batch
        self._interval = interval
        self._busy_interval = busy_interval
        self._on_advance = on_advance
        if on_batch is not None and handle is not None:
            raise ValueError("on_batch gets the folded pairs: not with handle")
        self._on_batch = on_batch
        self._task: asyncio.Task | None = None
        self._sub: Subscription | None = None
        self._advanced = asyncio.Event()
        self.error: BaseException | None = None
        #: Seconds of this thread's CPU following after :meth:`start`'s catch-up:
        #: folding the batches read (their reads' waits left out), the callbacks
        #: included. What a profiler's clock and overhead misplace (the fold is Cython).
        self.follow_cpu = 0.0

    @property
    def position(self) -> int:
        return -1 if self.state is None else int(self.state.position)

    @property
    def reads(self) -> int:
        """Live reads of the log so far (0 before following starts): what following
        costs while nothing is appended."""
        return 0 if self._sub is None else self._sub.reads

    @property
    def rows_read(self) -> int:
        """Rows the live reads brought so far: ``rows_read / reads`` is a read's size."""
        return 0 if self._sub is None else self._sub.rows

    async def start(self) -> ClusterState:
        """Build the state up to the head and start following; returns the state."""
        self.state = await retry_until(
            lambda: fold_log(self.store, reclamation=self.reclamation),
            retriable=is_transient,
            what="fold the log",
        )
        publish_anomalies(self.state.anomalies)
        self._publish_reclamation()
        freeze_heap()
        self._task = asyncio.create_task(self._follow(), name="log-follower")
        return self.state

    def _publish_reclamation(self) -> None:
        # The reclamation gauges, at most every RECLAIM_EVERY seconds (a pass over the
        # node tables; usage reports come every few seconds anyway).
        now = time.monotonic()
        if self.state is not None and now - self._reclaim_published >= RECLAIM_EVERY:
            self._reclaim_published = now
            publish_reclamation(self.state)

    async def stop(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            # Python 3.11's asyncio.wait_for (the subscription's wait for a signal)
            # swallows a cancellation that arrives as the signal does: cancel again
            # until the task has ended, or stop() would wait on a live follower.
            while not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=1.0)
            with contextlib.suppress(asyncio.CancelledError):
                await task
            thaw_heap()

    def fold_batch(self, batch: list[Any]) -> None:
        """Fold one batch as :meth:`start`'s subscription hands it over (stored rows
        for ``handle``, else ``(position, payload)`` pairs; rows at or before the
        state's position are skipped), then run the callbacks: everything following
        costs per batch besides the read (``esched.services.bench_follow`` measures
        it)."""
        state = self.state
        assert state is not None
        rows = batch
        if rows[0][0] <= state.position:  # a row's or a pair's position
            rows = [r for r in rows if r[0] > state.position]
            if not rows:
                return
        if self._handle is not None:
            self._handle(rows)
        else:
            state.apply_payloads(rows)
            after = self._after
            if after is not None:
                mentions = self._mentions
                loads = self._decoder
                found = [
                    (pos, loads(payload))
                    for pos, payload in (rows if mentions is None else mentioning(rows, mentions))
                ]
                decode = self._decode
                if decode is not None:
                    found = [(p, e) for p, e in found if e.get("type") in decode]
                if found:
                    after(found)
            if self._on_batch is not None:
                self._on_batch(rows)
        self._advance()

    def _advance(self) -> None:
        """After the state moved: its anomalies and reclamation published, waiters
        (:meth:`wait_for`) and ``on_advance`` told."""
        state = self.state
        assert state is not None
        if state.anomalies:
            publish_anomalies(state.anomalies)
        self._publish_reclamation()
        self._advanced.set()
        if self._on_advance is not None:
            self._on_advance()

    async def _follow_live(self) -> None:
        """Fold what follows the state's position as it comes: the store's
        subscription (a subclass may follow something else)."""
        state = self.state
        assert state is not None
        self._sub = self.store.subscribe(
            state.position,
            self._batch,
            payloads=self._handle is None,
            min_interval=self._interval,
            busy_interval=self._busy_interval,
        )
        async with self._sub as sub:
            async for batch in sub:
                began = time.thread_time()
                self.fold_batch(batch)
                self.follow_cpu += time.thread_time() - began

    async def _follow(self) -> None:
        try:
            await self._follow_live()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # surfaced to waiters: a dead fold must not hang them
            log.exception("log follower failed")
            self.error = exc
            self._advanced.set()
            if self._on_advance is not None:
                self._on_advance()
            raise

    async def wait_for(self, position: int, within: float | None = None) -> bool:
        """Wait until the fold has reached ``position``; False after ``within`` s."""
        deadline = None if within is None else time.monotonic() + within
        while self.position < position:
            if self.error is not None:
                raise RuntimeError("the log follower died") from self.error
            self._advanced.clear()
            if self.position >= position:
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._advanced.wait(), left)
        return True
