"""The ingest service: input topics → validation → event store, dead-letter for bad input.

A consumer-group member reads a batch, validates every message against
``schemas/``, appends the valid events to the store in one atomic batch, sends
the invalid ones to the dead-letter topic with the original bytes and the
reason, and only then commits the batch's offsets. A crash anywhere before the
commit redelivers the batch, and the store's idempotence on event id makes
that harmless: at-least-once in, exactly-once in the log.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import orjson

from esched.schemas.events import IMPLIES, stored_form, stream_of
from esched.schemas.kafka_binding import decode_record
from esched.schemas.validator import MAX_EVENT_BYTES, InvalidEvent
from esched.services import metrics
from esched.services.bus import Bus, BusConsumer, BusError, BusProducer, Message
from esched.services.bus.deadletter import Dead, send_deadletters
from esched.services.faults import count_retry, is_transient, poll_or_pause
from esched.services.retry import retry_until
from esched.services.store.base import EventStore, NewEvent, StoreError

__all__ = ["BatchResult", "IngestConfig", "IngestService"]

log = logging.getLogger(__name__)

SERVICE = "ingest"


@dataclass(frozen=True, slots=True)
class IngestConfig:
    """Tuning of the ingest loop."""

    group: str = "esched-ingest"
    #: Messages per store transaction: large enough to amortize the round trip and
    #: the commit, small enough that a redelivered batch is cheap.
    batch_size: int = 2000
    poll_timeout_ms: int = 200
    max_event_bytes: int = MAX_EVENT_BYTES
    #: Messages validated between two turns of the event loop. Validation is CPU in
    #: this process; the previous batch's append is a chain of round trips to
    #: PostgreSQL, each of which only moves on when the loop turns. Validating a
    #: whole batch in one go would leave PostgreSQL idle until it is done.
    prepare_slice: int = 50


@dataclass(slots=True)
class BatchResult:
    """What one batch did."""

    polled: int = 0
    stored: int = 0
    duplicates: int = 0
    deadlettered: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Prepared:
    """A validated batch waiting to be appended."""

    started: float
    events: list[NewEvent] = field(default_factory=list)
    sources: list[Message] = field(default_factory=list)
    dead: list[Dead] = field(default_factory=list)


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


# What an append may raise for the content of one event (the store refusing it, a
# value a driver cannot encode): isolated by bisection and dead-lettered.
_REFUSALS = (StoreError, ArithmeticError, ValueError, TypeError)
# Duplicate positions at most this far apart are read back in one range.
_RUN_GAP = 256


def _duplicates(positions: list[int], first: int) -> list[int]:
    """Indices of an append's inputs that were duplicates: stored before the append
    (at or below ``first``, the head it started from) or repeating an earlier input."""
    seen: set[int] = set()
    out = []
    for i, pos in enumerate(positions):
        if pos <= first or pos in seen:
            out.append(i)
        seen.add(pos)
    return out


def _runs(positions: list[int], gap: int) -> list[tuple[int, int]]:
    """Sorted ``positions`` grouped into ``(first, last)`` ranges with small gaps."""
    runs: list[tuple[int, int]] = []
    for pos in positions:
        if runs and pos - runs[-1][1] <= gap:
            runs[-1] = (runs[-1][0], pos)
        else:
            runs.append((pos, pos))
    return runs


def _same_content(a: bytes, b: bytes) -> bool:
    """Whether two envelopes say the same: byte-equal, or equal as JSON apart from
    ``time`` (a producer may re-serialize on retry, and one that stamps ``time`` when
    it sends, as ``esched publish`` does, re-sends the same event with a later one;
    CloudEvents identifies an event by ``source`` and ``id``) and ingest's own marker
    (a Job stored before ingest marked Jobs, sent again: the stored one stands)."""
    if a == b:
        return True
    try:
        x, y = orjson.loads(a), orjson.loads(b)
    except orjson.JSONDecodeError:
        return False
    if isinstance(x, dict) and isinstance(y, dict):
        for attr in ("time", IMPLIES):
            x.pop(attr, None)
            y.pop(attr, None)
    return bool(x == y)


class IngestService:
    """Consumes the input topics into the event store. See the module docstring."""

    def __init__(self, bus: Bus, store: EventStore, config: IngestConfig | None = None) -> None:
        self.bus = bus
        self.store = store
        self.config = config or IngestConfig()
        self.totals = BatchResult()
        self._consumer: BusConsumer | None = None
        self._producer: BusProducer | None = None
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        """Connect to the bus (retrying while it is unreachable) and join the group."""
        await retry_until(
            self.bus.ensure_topics,
            retriable=is_transient,
            what="create topics",
            on_retry=count_retry(SERVICE, "bus"),
        )
        self._producer = self.bus.producer()
        await retry_until(
            self._producer.start,
            retriable=is_transient,
            what="producer start",
            on_retry=count_retry(SERVICE, "bus"),
        )
        self._consumer = self.bus.consumer(self.bus.topics.inputs, self.config.group)
        await retry_until(
            self._consumer.start,
            retriable=is_transient,
            what="consumer start",
            on_retry=count_retry(SERVICE, "bus"),
        )

    async def stop(self) -> None:
        """Leave the group and disconnect; safe to call twice."""
        self._stopping.set()
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            await consumer.stop()
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await producer.stop()

    async def run(
        self, *, exit_when_idle: bool = False, idle_polls: int = 3, max_messages: int | None = None
    ) -> BatchResult:
        """Process batches until :meth:`stop`, until idle when ``exit_when_idle``, or
        once ``max_messages`` have been handled.

        Pipelined one deep: while batch N is being appended and committed, batch N+1
        is polled and validated, so the database and the validator work at once.
        Batches still finish (and commit offsets) strictly in order.
        Idle means ``idle_polls`` consecutive empty polls with nothing left to consume.
        """
        empty = seen = 0
        inflight: asyncio.Task[BatchResult] | None = None
        try:
            while not self._stopping.is_set():
                if max_messages is not None and seen >= max_messages:
                    break
                msgs = await self._poll()
                seen += len(msgs)
                prepared = await self._prepare(msgs) if msgs else None
                if inflight is not None:
                    await inflight
                    inflight = None
                if prepared is not None:
                    empty = 0
                    inflight = asyncio.ensure_future(self._finish(msgs, prepared))
                    continue
                empty += 1
                if self._consumer is None:  # stopped
                    break
                if exit_when_idle and empty >= idle_polls and await self._consumer.lag() == 0:
                    break
        finally:
            if inflight is not None:
                await inflight
        return self.totals

    async def run_once(self) -> BatchResult:
        """Poll one batch, store it, dead-letter the bad part, then commit its offsets."""
        msgs = await self._poll()
        if not msgs:
            return BatchResult()
        return await self._finish(msgs, await self._prepare(msgs))

    async def _poll(self) -> list[Message]:
        if self._consumer is None:  # not started, or stopped
            return []
        return await poll_or_pause(
            self._consumer,
            self.config.poll_timeout_ms,
            self.config.batch_size,
            service=SERVICE,
            pause=1.0,
        )

    async def _prepare(self, msgs: Sequence[Message]) -> _Prepared:
        """Validate a batch: the events to append and the dead letters.

        The loop turns before each slice of ``prepare_slice`` messages (see
        :class:`IngestConfig`), so the append in flight overlaps the validation.
        """
        prepared = _Prepared(time.perf_counter())
        step = max(1, self.config.prepare_slice)
        for start in range(0, len(msgs), step):
            await asyncio.sleep(0)
            self._validate(msgs[start : start + step], prepared)
        return prepared

    def _validate(self, msgs: Sequence[Message], prepared: _Prepared) -> None:
        """Validate ``msgs`` into ``prepared`` (CPU only)."""
        max_bytes = self.config.max_event_bytes
        for m in msgs:
            # Either CloudEvents content mode, or a batch: one record may hold several
            # events (kafka_binding), each stored or dead-lettered on its own.
            try:
                decoded = list(decode_record(m.value, m.headers, max_bytes=max_bytes))
                events: list[NewEvent] = []
                for one in decoded:
                    if isinstance(one, InvalidEvent):
                        prepared.dead.append((m, one.reason, str(one), one.field))
                        continue
                    # (a Job marked, as checked, as implying its first pods; a
                    # producer's marker not trusted: stored_form)
                    ev, payload = stored_form(*one)
                    # Positional: a frozen dataclass's keyword call costs a third more.
                    events.append(
                        NewEvent(
                            ev["id"],
                            ev["type"],
                            stream_of(ev),
                            payload,
                            _parse_time(ev.get("time")),
                        )
                    )
            except Exception as exc:  # a message this code cannot handle: never twice
                log.exception("cannot handle %s/%d@%d", m.topic, m.partition, m.offset)
                prepared.dead.append((m, "unhandled", f"{type(exc).__name__}: {exc}", None))
                continue
            for new in events:
                prepared.events.append(new)
                prepared.sources.append(m)

    async def _finish(self, msgs: Sequence[Message], prepared: _Prepared) -> BatchResult:
        """Append, dead-letter, then commit the batch's offsets (in that order)."""
        result = BatchResult(polled=len(msgs))
        dead = prepared.dead
        if prepared.events:
            stored, duplicates, rejected = await self._append(prepared.events, prepared.sources)
            result.stored += stored
            result.duplicates += duplicates
            dead = dead + rejected
        if dead:
            await self._deadletter(dead)
            result.deadlettered = len(dead)
            for _m, reason, _text, _f in dead:
                result.reasons[reason] = result.reasons.get(reason, 0) + 1
        offsets: dict[tuple[str, int], int] = {}
        for m in msgs:
            key = (m.topic, m.partition)
            if m.offset + 1 > offsets.get(key, -1):
                offsets[key] = m.offset + 1
        consumer = self._consumer
        if consumer is None:
            # Stopped while this batch was being stored: it is durable, and its offsets
            # are simply read again by the next member (the store acknowledges them).
            log.debug("stopped before committing offsets; the batch will be redelivered")
        else:
            try:
                await consumer.commit(offsets)
            except BusError as exc:
                # The batch is durable; after a rebalance its new owner re-reads it and the
                # store acknowledges the duplicates. Nothing is lost.
                log.warning("offset commit failed (%s); batch will be redelivered", exc)
        metrics.INGEST_BATCH_SECONDS.observe(time.perf_counter() - prepared.started)
        self._add_totals(result)
        return result

    async def _append(
        self, events: list[NewEvent], sources: list[Message]
    ) -> tuple[int, int, list[Dead]]:
        """Append with retry on transient errors; isolate events the store refuses."""
        try:
            res = await retry_until(
                lambda: self.store.append(events),
                retriable=is_transient,
                what="store append",
                on_retry=count_retry(SERVICE, "store"),
            )
        except _REFUSALS as exc:
            if len(events) == 1:
                return 0, 0, [(sources[0], "store_rejected", str(exc), None)]
            log.warning("store refused a batch of %d (%s); isolating the culprit", len(events), exc)
        else:
            conflicts = await self._id_conflicts(
                events, sources, res.positions, res.head, res.duplicates
            )
            duplicates = res.duplicates - len(conflicts)
            return len(events) - res.duplicates, duplicates, conflicts
        # Bisect so one poison event costs O(log n) appends and the rest still land.
        mid = len(events) // 2
        a = await self._append(events[:mid], sources[:mid])
        b = await self._append(events[mid:], sources[mid:])
        return a[0] + b[0], a[1] + b[1], a[2] + b[2]

    async def _id_conflicts(
        self,
        events: list[NewEvent],
        sources: list[Message],
        positions: list[int],
        head: int,
        duplicates: int,
    ) -> list[Dead]:
        """The duplicates of an append whose stored event differs from the one sent:
        an id reused for other content is dead-lettered (``id_conflict``), not taken
        for a redelivery."""
        first = head - (len(events) - duplicates)  # positions above: stored by this append
        dup = _duplicates(positions, first)
        if not dup:
            return []
        stored: dict[int, bytes] = {}
        # This batch's own events by position; the earlier ones read in runs.
        for i, pos in enumerate(positions):
            if pos > first and pos not in stored:
                stored[pos] = events[i].payload
        wanted = sorted({positions[i] for i in dup if positions[i] not in stored})
        for lo, hi in _runs(wanted, gap=_RUN_GAP):
            rows = await retry_until(
                functools.partial(self.store.read_payloads, lo - 1, hi - lo + 1),
                retriable=is_transient,
                what="store read",
                on_retry=count_retry(SERVICE, "store"),
            )
            for pos, payload in rows:
                stored[pos] = bytes(payload)
        out: list[Dead] = []
        for i in dup:
            was = stored.get(positions[i])
            if was is not None and not _same_content(was, events[i].payload):
                text = (
                    f"id: event id {events[i].id!r} is already stored at position "
                    f"{positions[i]} with other content"
                )
                out.append((sources[i], "id_conflict", text, "id"))
        return out

    async def _deadletter(self, dead: list[Dead]) -> None:
        assert self._producer is not None
        await send_deadletters(self._producer, self.bus.topics.deadletter, dead, service=SERVICE)

    def _add_totals(self, r: BatchResult) -> None:
        t = self.totals
        t.polled += r.polled
        t.stored += r.stored
        t.duplicates += r.duplicates
        t.deadlettered += r.deadlettered
        for reason, n in r.reasons.items():
            t.reasons[reason] = t.reasons.get(reason, 0) + n
        metrics.INGEST_EVENTS.labels("stored").inc(r.stored)
        metrics.INGEST_EVENTS.labels("duplicate").inc(r.duplicates)
        metrics.INGEST_EVENTS.labels("deadletter").inc(r.deadlettered)
