"""The work loop: poll batches of work items, up to ``pipeline`` in flight, commit
their offsets in poll order."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import orjson

from esched.core import PHASE_PENDING
from esched.core.schedule import Target
from esched.services import metrics
from esched.services.bus import BusConsumer, BusError, Message
from esched.services.bus.deadletter import Dead, send_deadletters
from esched.services.bus.signing import split_signed
from esched.services.faults import poll_or_pause, retry_transient
from esched.services.replica.config import SERVICE, ReplicaTotals
from esched.services.replica.feed import FeedFollower
from esched.services.replica.share import _Share

log = logging.getLogger(__name__)

#: An idle check's poll (ms): the round trip of one fetch request that finds records
#: waiting (a broker answers it at once, tansu included). Shorter than the fetch's
#: wait on the broker: the check pauses again before an empty answer comes back, and
#: aiokafka sends the next fetch request as soon as one does.
IDLE_CHECK_MS = 10


class _WorkLoop(_Share):
    """Poll work and hand each batch to a task of its own."""

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
        self._idle_since = time.monotonic()  # poll a while before going idle
        try:
            while not self._stopping.is_set() and self._failed is None:
                if self._joining is not None and self._joining.done():
                    await self._joined()
                elif self._joining is None:
                    await self._bridge_rebalance()
                provisional = self._provisional is not None
                consumer = self._provisional if provisional else self._consumer
                if consumer is None:
                    break
                await slots.acquire()
                started = False
                try:
                    msgs = await self._poll_or_idle(consumer)
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

    async def _poll_or_idle(self, consumer: BusConsumer) -> list[Message]:
        """:meth:`poll_batch`, but once idle (empty polls for ``idle_after`` s and no
        event in the log that may make work) stop fetching until such an event comes
        or ``idle_poll`` s pass: an idle replica sends no fetch requests."""
        cfg = self.config
        may_come = self._work_may_come
        timeout_ms: int | None = None  # a whole poll
        now = time.monotonic()
        if may_come.is_set():
            may_come.clear()
            self._idle_since = now
        elif now - self._idle_since >= cfg.idle_after and not self._batches:
            consumer.pause_fetching()
            try:
                await asyncio.wait_for(may_come.wait(), cfg.idle_poll)
                woken = True
            except TimeoutError:
                woken = False
            finally:
                consumer.resume_fetching()
            if self._stopping.is_set():
                return []
            may_come.clear()
            if not woken:
                # The idle check: one fetch request, not a whole poll's (at the 20 ms
                # wait a 100 ms poll sent five): work found starts a batch as usual;
                # none, and the next pass pauses again.
                timeout_ms = min(cfg.poll_timeout_ms, IDLE_CHECK_MS)
        msgs = await self.poll_batch(consumer, timeout_ms)
        if msgs:
            self._idle_since = time.monotonic()
        return msgs

    def _batch_done(self, task: asyncio.Task, slots: asyncio.Semaphore) -> None:
        self._batches.discard(task)
        slots.release()
        if not task.cancelled() and task.exception() is not None and self._failed is None:
            # Surfaced by run(): a batch that failed (e.g. the log follower died) must
            # end the service, as it did before batches ran in tasks.
            self._failed = task.exception()

    async def poll_batch(
        self, consumer: BusConsumer, timeout_ms: int | None = None
    ) -> list[Message]:
        """One batch of work items from ``consumer``, as :meth:`run` polls them
        (lingering briefly while more keeps arriving); the first poll waits
        ``timeout_ms`` (default ``poll_timeout_ms``).

        A broker blip is an empty poll (:func:`poll_or_pause`); one while lingering
        ends the batch with the items already polled (the consumer's position is past
        them: dropping them would lose them).
        """
        msgs = await self._poll(
            consumer,
            self.config.poll_timeout_ms if timeout_ms is None else timeout_ms,
            self.config.batch_size,
        )
        # Under load, linger briefly while work keeps arriving: one pass over a full
        # batch costs about as much round-trip overhead (proposal send, decision
        # append, fold wake-up) as a pass over a handful of pods.
        linger_until = time.monotonic() + self.config.linger
        while (
            self.config.linger_min <= len(msgs) < self.config.batch_size
            and time.monotonic() < linger_until
        ):
            more = await self._poll(
                consumer, self.config.linger_poll_ms, self.config.batch_size - len(msgs)
            )
            if not more:
                break
            msgs.extend(more)
        return msgs

    async def _poll(
        self, consumer: BusConsumer, timeout_ms: int, max_records: int
    ) -> list[Message]:
        """One poll (:func:`poll_or_pause`), counted in the totals."""
        msgs = await poll_or_pause(consumer, timeout_ms, max_records, service=SERVICE, pause=0.5)
        self.totals.polls += 1
        if not msgs:
            self.totals.empty_polls += 1
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

            # The next batch commits after this one and every one before it (a batch
            # that commits nothing does not wait for the one before it to commit).
            def pass_turn(_prev: object = None) -> None:
                if not turn.done():
                    turn.set_result(None)

            if prev.done():
                pass_turn()
            else:
                prev.add_done_callback(pass_turn)

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
        began = self.totals.clock()
        targets: dict[tuple[str, str], Target] = {}
        origin: dict[tuple[str, str], Message] = {}
        # Following the feed: the pods to enter from their submissions, with the
        # positions of their items (a gang's item names its Pending members).
        feed = self.follower if isinstance(self.follower, FeedFollower) else None
        entering: list[tuple[str, int]] = []
        # Work not written by the dispatcher is refused before it is read.
        readable, dead = split_signed(self.bus.keyring if self.bus is not None else None, msgs)
        upto = 0  # the furthest position named
        for m in readable:
            try:
                item = orjson.loads(m.value)
                kind = "gang" if item.get("gang") else "pod"
                key = str(item[kind])
                position = int(item.get("position") or 0)
                if feed is not None:
                    members = [key] if kind == "pod" else item.get("pods") or ()
                    entering += [(str(pod), position) for pod in members]
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
                dead.append((m, "malformed_work", "not a work item (pod or gang, position)", None))
                continue
            tk = (kind, key)
            prev_t = targets.get(tk)
            if prev_t is None or prev_t.position < position:
                targets[tk] = Target(kind, key, position)
                origin[tk] = m
                if position > upto:
                    upto = position
        self.totals.work_items += len(msgs)
        self.totals.batches += 1
        self.totals.add_cpu("work", began)
        if (
            targets
            and upto > self.follower.position
            and not await self.follower.wait_for(upto, self.config.head_check_after)
        ):
            # A work item names a log position the fold must reach first; one beyond
            # the log's head (forged, or garbage) would stall every replica forever.
            # The fold is usually a read behind the work, so the head is read (a
            # round trip per batch) only for items it has not reached by then.
            head = await retry_transient(
                self.store.head, what="store head", service=SERVICE, peer="store"
            )
            for tk in [tk for tk, t in targets.items() if t.position > head]:
                text = f"position: {targets.pop(tk).position} is beyond the log head {head}"
                dead.append((origin[tk], "position_beyond_head", text, "position"))
            upto = max((t.position for t in targets.values()), default=0)
        if dead:
            await self._deadletter(dead)
        if targets:
            t0 = time.perf_counter()
            # The fold must have the event that made each item pending; it is in the log.
            while not await self.follower.wait_for(upto, 5.0):
                log.warning(
                    "replica %s: fold at %d, waiting for work position %d",
                    self.id,
                    self.follower.position,
                    upto,
                )
            if feed is not None and entering and await feed.enter(entering):
                self._view_at = (-1, -1)  # (pods entered: the view is made again)
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
        began = self.totals.clock()
        consumer = self._consumer
        if commit and consumer is not None and consumer.moving_share() is not None:
            # The group is rebalancing: this share is revoked, so a commit fails, and
            # it would first wait behind the group's join on the coordinator's
            # connection (seconds), holding a pipeline slot the bridge needs. The
            # items are redelivered to the share's next owner, which skips them.
            commit = False
        if prev is not None and commit:
            # Offsets in poll order: committing this batch's offsets first would also
            # commit the earlier batch's items on the same partitions, still undecided.
            self.totals.add_cpu("commit", began)
            await asyncio.shield(prev)
            began = self.totals.clock()
        offsets: dict[tuple[str, int], int] = {}
        for m in msgs:
            k = (m.topic, m.partition)
            offsets[k] = max(offsets.get(k, 0), m.offset + 1)
        if consumer is not None and commit:
            self.totals.add_cpu("commit", began)
            self.totals.commits += 1
            try:
                await consumer.commit(offsets)
            except BusError as exc:
                # Everything is durable; redelivered items are skipped (no longer pending).
                log.warning("work offset commit failed (%s); items will be redelivered", exc)
            began = self.totals.clock()
        metrics.REPLICA_PENDING.labels(self.id).set(self.pending_count())
        if self.placer is not None:
            metrics.REPLICA_CACHE_HIT_RATE.labels(self.id).set(
                self.placer.stats()["cache_hit_rate"]
            )
        self.totals.add_cpu("commit", began)

    async def _deadletter(self, dead: list[Dead]) -> None:
        """Refuse work items this replica cannot act on (their offsets are committed
        with the batch's, so none is read twice)."""
        if self._producer is None:  # an in-process submit function: nowhere to send
            for m, reason, text, _f in dead:
                log.warning(
                    "refused work item %s/%d@%d (%s): %s",
                    m.topic,
                    m.partition,
                    m.offset,
                    reason,
                    text,
                )
            return
        await send_deadletters(self._producer, self.bus.topics.deadletter, dead, service=SERVICE)

    def pending_count(self) -> int:
        """Pods pending in this replica's fold (its ``REPLICA_PENDING`` gauge)."""
        return self.state.phase_count(PHASE_PENDING)
