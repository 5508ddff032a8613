"""The Kafka consumer's adaptive fetch wait: short while work may come, long once idle."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace

from esched.services.bus import BusConsumer, BusProducer, TopicNames
from esched.services.bus.kafka import FetchWait, KafkaBus


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _attached(clock: _Clock) -> tuple[FetchWait, SimpleNamespace]:
    fetcher = SimpleNamespace(**{FetchWait.ATTRIBUTE: 500})
    wait = FetchWait(20, 40, 200, grow_after=1.0, clock=clock)
    assert wait.attach(SimpleNamespace(_fetcher=fetcher))
    return wait, fetcher


def _empty_polls(wait: FetchWait, clock: _Clock, n: int, every: float = 0.125) -> list[int]:
    seen = []
    for _ in range(n):
        wait.records_came(False)
        seen.append(wait.current_ms)
        clock.now += every
    return seen


def test_the_fetch_wait_grows_after_a_second_of_empty_polls_up_to_the_ceiling():
    clock = _Clock()
    wait, _ = _attached(clock)
    seen = _empty_polls(wait, clock, 14)
    # Short for the first second of empty polls, then doubling, never above the ceiling.
    assert seen[:8] == [20] * 8
    assert seen[8:] == [40, 80, 160, 200, 200, 200]


def test_records_bring_the_busy_wait_back_at_once_and_the_next_empty_poll_the_short_one():
    clock = _Clock()
    wait, _ = _attached(clock)
    _empty_polls(wait, clock, 20)
    assert wait.current_ms == 200
    wait.records_came(True)
    assert wait.current_ms == 40
    # The empty run starts again: short for a second, however long the idle before.
    assert _empty_polls(wait, clock, 9) == [20] * 8 + [40]


def test_pausing_or_resuming_brings_the_short_wait_back_and_restarts_the_empty_run():
    clock = _Clock()
    wait, _ = _attached(clock)
    _empty_polls(wait, clock, 20)
    wait.restart()  # paused
    assert wait.current_ms == 20
    clock.now += 5.0  # paused a long time: no empty polls meanwhile
    wait.restart()  # resumed
    assert _empty_polls(wait, clock, 8) == [20] * 8


def test_the_fetch_wait_ceiling_is_never_below_the_short_wait():
    assert FetchWait(20, 40, 5).ceiling_ms == 20
    assert FetchWait(20, 40).ceiling_ms == 20  # no ceiling given: it does not grow


async def _poll_until(consumer, want: int, limit: float) -> float:
    """Seconds until ``want`` records came (polling as the services do)."""
    t0 = time.monotonic()
    got = 0
    async with asyncio.timeout(limit):
        while got < want:
            got += len(await consumer.poll(100, 100))
    return time.monotonic() - t0


async def _poll_empty(consumer, seconds: float) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        assert await consumer.poll(100, 100) == []


@contextlib.asynccontextmanager
async def _started(
    bootstrap: str, prefix: str, topic: str, *, ceiling_ms: int
) -> AsyncIterator[tuple[KafkaBus, BusConsumer, BusProducer]]:
    """A bus whose consumers wait 20 ms idle, 40 busy, and grow to ``ceiling_ms``
    after 0.3 s of empty polls (its topics made with one partition each), with a
    started consumer of ``topic`` (the bus's topic of that name) and a started
    producer, both stopped on the way out."""
    bus = KafkaBus(
        bootstrap,
        TopicNames(prefix),
        fetch_max_wait_ms=20,
        fetch_max_wait_busy_ms=40,
        fetch_max_wait_idle_ms=ceiling_ms,
        fetch_wait_grow_after=0.3,
    )
    await bus.ensure_topics(partitions=1)
    consumer = bus.consumer([getattr(bus.topics, topic)], "g", exclusive=True)
    await consumer.start()
    try:
        producer = bus.producer()
        await producer.start()
        try:
            yield bus, consumer, producer
        finally:
            await producer.stop()
    finally:
        await consumer.stop()


async def test_an_idle_kafka_consumer_waits_longer_per_fetch_and_still_gets_records(
    kafka_bootstrap, topic_prefix
):
    async with _started(kafka_bootstrap, topic_prefix, "pods", ceiling_ms=200) as (
        bus,
        consumer,
        producer,
    ):
        await _poll_empty(consumer, 1.2)
        assert consumer.fetch_wait_ms == 200  # grown to the ceiling, not above
        await producer.send_many(bus.topics.pods, [(None, b"v")])
        # The record comes within the ceiling (and a poll's own slack).
        assert await _poll_until(consumer, 1, 5) < 0.2 + 0.3
        assert consumer.fetch_wait_ms == 40  # records came: the busy wait at once


async def test_a_partition_resumed_after_an_idle_pause_is_fetched_within_the_short_wait(
    kafka_bootstrap, topic_prefix
):
    # A replica's work consumer: empty polls, paused once idle (before the wait grows),
    # resumed on an event, paused again after a poll ... A pause does not end a fetch
    # already sent, and a resumed partition is fetched only once it is answered, which
    # tansu does on its own schedule (~440 ms into a 1,000 ms wait): were the empty run
    # to carry over the pauses, the wait would have grown to the ceiling here.
    took = []
    async with _started(kafka_bootstrap, topic_prefix, "work", ceiling_ms=1000) as (
        bus,
        consumer,
        producer,
    ):
        for _ in range(3):
            for _ in range(4):
                consumer.resume_fetching()
                await _poll_empty(consumer, 0.25)
                consumer.pause_fetching()
                await asyncio.sleep(0.02)
            consumer.resume_fetching()
            await producer.send_many(bus.topics.work, [(None, b"w")])
            took.append(await _poll_until(consumer, 1, 5))
    assert statistics.median(took) < 0.1, took


async def test_the_fetch_right_after_records_already_asks_for_the_busy_wait(
    kafka_bootstrap, topic_prefix
):
    # aiokafka sends the next fetch as soon as a poll has taken the records: the wait
    # must be set before its fetcher runs again, or the first fetch of a burst after
    # an idle spell still waits the idle ceiling (on tansu, ~100 ms at 200 ms).
    events: list[int | str] = []
    async with _started(kafka_bootstrap, topic_prefix, "pods", ceiling_ms=200) as (
        bus,
        consumer,
        producer,
    ):
        # What the fetcher plans (each fetch request's wait) and when a poll takes
        # records (aiokafka's internals: a contract test of what FetchWait relies on).
        fetcher = consumer._consumer._fetcher
        plan, taken = fetcher._get_actions_per_node, fetcher.fetched_records

        def planning(assignment):
            actions = plan(assignment)
            events.extend(request._max_wait_ms for _node, request in actions[0])
            return actions

        async def taking(*args, **kwargs):
            records = await taken(*args, **kwargs)
            if records:
                events.append("records")
            return records

        fetcher._get_actions_per_node, fetcher.fetched_records = planning, taking
        await _poll_empty(consumer, 1.2)
        assert consumer.fetch_wait_ms == 200
        await producer.send_many(bus.topics.pods, [(None, b"v")])
        await _poll_until(consumer, 1, 5)
        await _poll_empty(consumer, 0.15)
        at = events.index("records")
        assert events[at - 1] == 200  # the fetch that brought the record
        assert events[at + 1] == 40, events  # the next one: the busy wait at once


async def test_a_consumer_given_its_wait_keeps_it_and_gets_a_record_before_it_ends(
    kafka_bootstrap, topic_prefix
):
    # A replica's feed reader (wait_ms): one long fetch at a time whether records come
    # or not, so a topic whose messages come far apart costs few empty fetches; the
    # broker answers before the wait ends when a record comes (tansu: 0.6-0.8 s into
    # a 2 s wait, a record sent 0.2 s in).
    bus = KafkaBus(kafka_bootstrap, TopicNames(topic_prefix))
    await bus.ensure_topics(partitions=1)
    consumer = bus.consumer([bus.topics.pods], "g", exclusive=True, wait_ms=2000)
    await consumer.start()
    producer = bus.producer()
    await producer.start()
    try:
        await _poll_empty(consumer, 0.3)
        assert consumer.fetch_wait_ms == 2000
        took = []
        for _ in range(3):
            await asyncio.sleep(0.2)  # into a fetch's wait
            await producer.send_many(bus.topics.pods, [(None, b"v")])
            took.append(await _poll_until(consumer, 1, 5))
            assert consumer.fetch_wait_ms == 2000  # records came: the same wait
        assert statistics.median(took) < 1.5, took
    finally:
        await producer.stop()
        await consumer.stop()


async def test_a_consumer_given_its_wait_and_an_idle_wait_grows_it_while_idle_and_not_before(
    kafka_bootstrap, topic_prefix
):
    # The feed's reader: its wait while messages come, a longer one (fewer fetches)
    # once nothing has come for a while, its own wait again at the first record.
    bus = KafkaBus(kafka_bootstrap, TopicNames(topic_prefix))
    await bus.ensure_topics(partitions=1)
    consumer = bus.consumer(
        [bus.topics.pods], "g", exclusive=True, wait_ms=50, idle_wait=(400, 0.5)
    )
    await consumer.start()
    producer = bus.producer()
    await producer.start()
    try:
        await _poll_empty(consumer, 0.3)
        assert consumer.fetch_wait_ms == 50  # not idle long enough yet
        await _poll_empty(consumer, 1.0)
        assert consumer.fetch_wait_ms == 400
        await producer.send_many(bus.topics.pods, [(None, b"v")])
        await _poll_until(consumer, 1, 5)
        assert consumer.fetch_wait_ms == 50
    finally:
        await producer.stop()
        await consumer.stop()
