"""One contract for every bus adapter: in-process and Kafka (a real broker)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from types import SimpleNamespace

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.consumer.group_coordinator import GroupCoordinator

from esched.services.bus import Bus, TopicNames, open_bus
from esched.services.bus.base import DEFAULT_WORK_PARTITIONS
from esched.services.bus.kafka import (
    GENERATION_ATTRIBUTE,
    GROUP_INSTANCE_ATTRIBUTE,
    FetchWait,
    KafkaBus,
    leave_group_on_stop,
)
from support.aio import eventually


@pytest.fixture(params=["memory", "kafka"])
def bus(request, topic_prefix) -> Bus:
    if request.param == "memory":
        return open_bus(None, topic_prefix)
    # A short session timeout: the redelivery test waits for the group to drop a member.
    return KafkaBus(
        request.getfixturevalue("kafka_bootstrap"),
        TopicNames(topic_prefix),
        session_timeout_ms=3000,
    )


async def _drain(consumer, want: int):
    got = []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(20):
            while len(got) < want:
                got.extend(await consumer.poll(200, 1000))
    return got


async def test_sent_records_are_consumed_with_keys_and_offsets(bus):
    await bus.ensure_topics(partitions=1)
    producer = bus.producer()
    await producer.start()
    await producer.send_many(bus.topics.pods, [(b"k1", b"v1"), (None, b"v2"), (b"k1", b"v3")])
    await producer.stop()
    consumer = bus.consumer([bus.topics.pods], "g")
    await consumer.start()
    msgs = await _drain(consumer, 3)
    await consumer.stop()
    assert [m.value for m in msgs] == [b"v1", b"v2", b"v3"]
    assert [m.key for m in msgs] == [b"k1", None, b"k1"]
    assert [m.offset for m in msgs] == [0, 1, 2]
    assert {m.topic for m in msgs} == {bus.topics.pods}


async def test_record_headers_travel_in_order_and_plain_records_have_none(bus):
    # CloudEvents binary mode carries its attributes in headers (ingest reads them).
    await bus.ensure_topics(partitions=1)
    headers = (("ce_specversion", b"1.0"), ("ce_id", b"e1"), ("content-type", b"application/json"))
    producer = bus.producer()
    await producer.start()
    await producer.send_with_headers(bus.topics.pods, [(b"k", b"{}", headers)])
    await producer.send_many(bus.topics.pods, [(None, b"plain")])
    await producer.stop()
    consumer = bus.consumer([bus.topics.pods], "h")
    await consumer.start()
    msgs = await _drain(consumer, 2)
    await consumer.stop()
    assert [(m.value, m.headers) for m in msgs] == [(b"{}", headers), (b"plain", ())]


async def test_uncommitted_messages_are_redelivered_to_the_group(bus):
    await bus.ensure_topics(partitions=1)
    producer = bus.producer()
    await producer.start()
    await producer.send_many(bus.topics.nodes, [(None, b"a"), (None, b"b"), (None, b"c")])
    await producer.stop()

    first = bus.consumer([bus.topics.nodes], "g")
    await first.start()
    msgs = await _drain(first, 3)
    await first.commit({(msgs[0].topic, msgs[0].partition): msgs[0].offset + 1})  # only "a"
    await first.stop()

    second = bus.consumer([bus.topics.nodes], "g")
    await second.start()
    again = await _drain(second, 2)
    await second.stop()
    assert [m.value for m in again] == [b"b", b"c"]


async def test_stop_is_safe_to_call_twice(bus):
    producer = bus.producer()
    await producer.start()
    await producer.stop()
    await producer.stop()
    consumer = bus.consumer([bus.topics.pods], "g")
    await consumer.start()
    await consumer.stop()
    await consumer.stop()


def test_event_types_route_to_the_contract_topics():
    topics = open_bus(None, "x.").topics
    assert topics.for_event_type("esched.node.added") == "x.nodes"
    assert topics.for_event_type("esched.usage.reported") == "x.usage"
    assert topics.for_event_type("esched.pod.submitted") == "x.pods"
    assert topics.for_event_type("esched.podgroup.submitted") == "x.pods"
    assert topics.inputs == ("x.nodes", "x.pods", "x.usage")


async def test_an_exclusive_consumer_reads_every_partition_from_the_committed_offsets(bus):
    await bus.ensure_topics(partitions=3)
    producer = bus.producer()
    await producer.start()
    await producer.send_many(bus.topics.pods, [(f"k{i}".encode(), b"%d" % i) for i in range(30)])
    await producer.stop()

    first = bus.consumer([bus.topics.pods], "solo", exclusive=True)
    await first.start()
    msgs = await _drain(first, 30)
    assert sorted(int(m.value) for m in msgs) == list(range(30))
    # Commit all but the last message of each partition, then "die" (no commit more).
    last: dict[tuple[str, int], int] = {}
    for m in msgs:
        last[(m.topic, m.partition)] = max(last.get((m.topic, m.partition), -1), m.offset)
    await first.commit(dict(last))  # next offset = the last one: it is redelivered
    await first.stop()

    # The next holder of the lease reads at once from there (no group rebalance).
    second = bus.consumer([bus.topics.pods], "solo", exclusive=True)
    await second.start()
    again = await _drain(second, len(last))
    await second.stop()
    assert len(again) == len(last)
    assert {(m.topic, m.partition, m.offset) for m in again} == {
        (t, p, o) for (t, p), o in last.items()
    }


async def test_a_large_send_keeps_each_keys_order_on_the_default_partitioners_partition(
    kafka_bootstrap, topic_prefix
):
    # From BATCH_MIN_RECORDS on, send_many builds one record batch per partition itself:
    # the same partitions as aiokafka's own send (murmur2, as the Java client), and the
    # order of each key's records kept.
    from esched.services.bus._hash import murmur2
    from esched.services.bus.kafka import BATCH_MIN_RECORDS

    bus = KafkaBus(kafka_bootstrap, TopicNames(topic_prefix), work_partitions=4)
    await bus.ensure_topics(partitions=4)
    keys = [f"ns/pod-{k}".encode() for k in range(10)]
    records = [(keys[i % 10], f"{i}".encode()) for i in range(BATCH_MIN_RECORDS * 4)]
    producer = bus.producer()
    await producer.start()
    await producer.send_many(bus.topics.work, records)
    await producer.stop()
    consumer = bus.consumer([bus.topics.work], "g")
    await consumer.start()
    msgs = await _drain(consumer, len(records))
    await consumer.stop()
    assert len(msgs) == len(records)
    for key in keys:
        mine = sorted((m for m in msgs if m.key == key), key=lambda m: m.offset)
        assert {m.partition for m in mine} == {(murmur2(key) & 0x7FFFFFFF) % 4}
        assert [m.value for m in mine] == [v for k, v in records if k == key]


async def test_a_kafka_consumer_fetches_with_the_longer_wait_while_records_keep_coming(
    kafka_bootstrap, topic_prefix
):
    bus = KafkaBus(
        kafka_bootstrap, TopicNames(topic_prefix), fetch_max_wait_ms=20, fetch_max_wait_busy_ms=40
    )
    await bus.ensure_topics(partitions=1)
    consumer = bus.consumer([bus.topics.pods], "g")
    await consumer.start()
    try:
        assert consumer.fetch_wait_ms == 20  # idle: the short wait
        producer = bus.producer()
        await producer.start()
        await producer.send(bus.topics.pods, b"v")
        await producer.stop()
        assert len(await _drain(consumer, 1)) == 1
        assert consumer.fetch_wait_ms == 40  # records came: the longer wait
        assert await consumer.poll(100, 10) == []
        assert consumer.fetch_wait_ms == 20  # nothing came: short again
    finally:
        await consumer.stop()


def test_the_installed_aiokafka_reads_the_fetch_wait_into_every_fetch_request():
    # FetchWait adapts private attributes of aiokafka: if a release renames them or
    # stops reading the wait per request, this fails (and FetchWait needs a look).
    attr = f"self.{FetchWait.ATTRIBUTE}"
    assert f"{attr} = " in inspect.getsource(Fetcher.__init__)
    assert attr in inspect.getsource(Fetcher._get_actions_per_node)  # builds FetchRequests
    assert "self._fetcher = Fetcher(" in inspect.getsource(AIOKafkaConsumer.start)


def test_the_fetch_wait_switches_only_when_polls_change_between_records_and_none():
    fetcher = SimpleNamespace(**{FetchWait.ATTRIBUTE: 500})
    wait = FetchWait(20, 40)
    assert wait.attach(SimpleNamespace(_fetcher=fetcher))
    assert wait.current_ms == 20  # attached: the idle wait replaces the constructor's
    wait.records_came(True)
    assert wait.current_ms == 40
    setattr(fetcher, FetchWait.ATTRIBUTE, 7)  # not rewritten while still busy
    wait.records_came(True)
    assert wait.current_ms == 7
    wait.records_came(False)
    assert wait.current_ms == 20


def test_the_fetch_wait_stays_idle_with_a_warning_without_the_private_attribute(caplog):
    wait = FetchWait(20, 40)
    with caplog.at_level(logging.WARNING, logger="esched.services.bus.kafka"):
        assert not wait.attach(SimpleNamespace(_fetcher=SimpleNamespace()))
    assert "no per-request fetch wait" in caplog.text
    wait.records_came(True)
    assert wait.current_ms == 20


def test_the_installed_aiokafka_skips_leave_group_only_for_a_named_static_member():
    # leave_group_on_stop clears a private attribute so that close() sends LeaveGroup:
    # if a release renames it or changes when it leaves, this fails.
    leave = inspect.getsource(GroupCoordinator._maybe_leave_group)
    assert f"self.{GROUP_INSTANCE_ATTRIBUTE} is None" in leave
    assert f"self.{GENERATION_ATTRIBUTE} > 0" in leave
    assert "LeaveGroupRequest(" in leave
    assert "self._maybe_leave_group()" in inspect.getsource(GroupCoordinator.close)
    assert "self._coordinator = GroupCoordinator(" in inspect.getsource(AIOKafkaConsumer.start)


def test_leave_group_on_stop_clears_the_static_name_and_warns_without_it(caplog):
    coordinator = SimpleNamespace(**{GROUP_INSTANCE_ATTRIBUTE: "g/r1"})
    assert leave_group_on_stop(SimpleNamespace(_coordinator=coordinator))
    assert getattr(coordinator, GROUP_INSTANCE_ATTRIBUTE) is None
    assert leave_group_on_stop(SimpleNamespace())  # never joined: nothing to leave
    # tansu's first generation is 0: the member still leaves (LeaveGroup has no
    # generation); one aiokafka already forgot (member id "") is left alone.
    first = SimpleNamespace(**{GROUP_INSTANCE_ATTRIBUTE: None, GENERATION_ATTRIBUTE: 0})
    first.member_id = "g/r1-1"
    assert leave_group_on_stop(SimpleNamespace(_coordinator=first))
    assert getattr(first, GENERATION_ATTRIBUTE) == 1
    reset = SimpleNamespace(**{GROUP_INSTANCE_ATTRIBUTE: None, GENERATION_ATTRIBUTE: -1})
    reset.member_id = ""
    assert leave_group_on_stop(SimpleNamespace(_coordinator=reset))
    assert getattr(reset, GENERATION_ATTRIBUTE) == -1
    with caplog.at_level(logging.WARNING, logger="esched.services.bus.kafka"):
        assert not leave_group_on_stop(SimpleNamespace(_coordinator=SimpleNamespace()))
    assert "without LeaveGroup" in caplog.text


def test_the_heartbeat_must_come_within_the_session():
    with pytest.raises(ValueError, match="heartbeat"):
        KafkaBus("127.0.0.1:9", session_timeout_ms=3000, heartbeat_interval_ms=3000)
    assert KafkaBus("127.0.0.1:9", session_timeout_ms=6000).heartbeat_interval_ms == 1000


async def test_a_static_member_sends_leave_group_when_it_stops(
    kafka_bootstrap, topic_prefix, caplog
):
    # KIP-345 static members skip LeaveGroup on close (aiokafka's _maybe_leave_group);
    # esched's stop sends it, so on Apache Kafka the partitions move at once. tansu
    # answers it but keeps the member until its session ends (docs/operations.md).
    bus = KafkaBus(kafka_bootstrap, TopicNames(topic_prefix), work_partitions=1)
    await bus.ensure_topics(partitions=1)
    member = bus.consumer([bus.topics.work], "g", instance="a")
    await member.start()
    polling = asyncio.ensure_future(_poll_forever(member))
    try:
        await eventually(lambda: len(member.assignment()) == 1, 60)
    finally:
        polling.cancel()
        with caplog.at_level(logging.INFO, logger="aiokafka.consumer.group_coordinator"):
            await member.stop()
    assert "LeaveGroup request succeeded" in caplog.text


async def test_the_work_topic_is_created_with_the_configured_partition_count(
    kafka_bootstrap, topic_prefix
):
    bus = open_bus(kafka_bootstrap, topic_prefix, work_partitions=30)
    await bus.ensure_topics(partitions=2)
    reader = bus.consumer([bus.topics.work, bus.topics.pods], "g", exclusive=True)
    await reader.start()
    try:
        share = reader.assignment()
    finally:
        await reader.stop()
    assert len({p for t, p in share if t == bus.topics.work}) == 30
    assert len({p for t, p in share if t == bus.topics.pods}) == 2


def test_the_default_work_partitions_share_equally_among_up_to_24_replicas():
    assert DEFAULT_WORK_PARTITIONS >= 24
    assert open_bus(None).work_partitions == DEFAULT_WORK_PARTITIONS
    for replicas in (1, 2, 3, 4, 6, 8, 12, 24):
        assert DEFAULT_WORK_PARTITIONS % replicas == 0


def test_work_item_keys_spread_evenly_over_the_work_partitions():
    # The dispatcher keys a work item by its pod (or gang): the default partitioner's
    # murmur2 of such keys puts about as many items on each partition. 48,000 pods
    # over 24 partitions: 2,000 each expected, the binomial's sigma about 44; every
    # partition within 10% (~4.5 sigma) of the mean.
    from esched.services.bus._hash import murmur2
    from esched.services.dispatch import work_item

    parts = DEFAULT_WORK_PARTITIONS
    counts = [0] * parts
    for i in range(48_000):
        key, _value = work_item("pod", f"team-{i % 7}/job-{i // 100}-pod-{i % 100}", i)
        counts[(murmur2(key) & 0x7FFFFFFF) % parts] += 1
    mean = 48_000 / parts
    assert max(counts) <= 1.1 * mean and min(counts) >= 0.9 * mean, counts


async def test_a_paused_consumer_fetches_nothing_until_resumed(kafka_bootstrap, topic_prefix):
    bus = KafkaBus(kafka_bootstrap, TopicNames(topic_prefix))
    await bus.ensure_topics(partitions=1)
    consumer = bus.consumer([bus.topics.pods], "g")
    await consumer.start()
    producer = bus.producer()
    await producer.start()
    try:
        await _drain(consumer, 0)
        consumer.pause_fetching()
        assert not consumer.fetching
        await producer.send(bus.topics.pods, b"v")
        assert await consumer.poll(500, 10) == []  # sent, but not fetched
        consumer.resume_fetching()
        assert consumer.fetching
        assert [m.value for m in await _drain(consumer, 1)] == [b"v"]
    finally:
        await producer.stop()
        await consumer.stop()


async def test_a_paused_consumers_fetcher_sleeps_until_resumed(
    kafka_bootstrap, topic_prefix, monkeypatch
):
    # aiokafka's fetch routine, with no fetch in flight, looked at its partitions every
    # consumer_timeout_ms (200 by default) to find them still paused: five wake-ups a
    # second of an idle replica. Now resuming wakes it, and nothing else is needed.
    looks = 0
    look = Fetcher._get_actions_per_node

    def counted(self, assignment):
        nonlocal looks
        looks += 1
        return look(self, assignment)

    monkeypatch.setattr(Fetcher, "_get_actions_per_node", counted)
    bus = KafkaBus(kafka_bootstrap, TopicNames(topic_prefix))
    await bus.ensure_topics(partitions=1)
    consumer = bus.consumer([bus.topics.pods], "g")
    await consumer.start()
    producer = bus.producer()
    await producer.start()
    try:
        await _drain(consumer, 0)
        consumer.pause_fetching()
        assert await consumer.poll(300, 10) == []  # the fetch in flight answers
        before = looks
        assert await consumer.poll(1000, 10) == []
        assert looks - before <= 1
        await producer.send(bus.topics.pods, b"v")
        consumer.resume_fetching()
        assert [m.value for m in await _drain(consumer, 1)] == [b"v"]
    finally:
        await producer.stop()
        await consumer.stop()


async def test_a_fetching_consumer_finds_new_records_soon_after_a_missed_wake_up(
    kafka_bootstrap, topic_prefix, monkeypatch
):
    # aiokafka's fetch routine waits, with records buffered and no fetch in flight, for
    # a wake-up when they are taken; one missed left a commit service's fetcher asleep
    # for its whole consumer_timeout_ms (5 s) with 1,703 proposals waiting. Taking the
    # records here wakes nothing; the next records still come within the fetching
    # consumer's bound (200 ms), not the paused one's.
    def lossy(self, future):  # the wake-up on records taken is missed
        if future is not None and future is not self._wait_consume_future:
            if not future.done():
                future.set_result(None)

    monkeypatch.setattr(Fetcher, "_notify", lossy)
    bus = KafkaBus(kafka_bootstrap, TopicNames(topic_prefix))
    await bus.ensure_topics(partitions=1)
    consumer = bus.consumer([bus.topics.pods], "g")
    await consumer.start()
    producer = bus.producer()
    await producer.start()
    try:
        await _drain(consumer, 0)
        await producer.send(bus.topics.pods, b"first")
        fetcher = consumer._consumer._fetcher  # type: ignore[attr-defined]
        await eventually(lambda: bool(fetcher._records), within=10)
        # Buffered past the prefetch backoff (0.1 s): the routine now waits for the
        # records to be taken, with no fetch in flight.
        await asyncio.sleep(0.3)
        assert [m.value for m in await consumer.poll(100, 10)] == [b"first"]
        await producer.send(bus.topics.pods, b"second")
        t0 = asyncio.get_running_loop().time()
        assert [m.value for m in await _drain(consumer, 1)] == [b"second"]
        assert asyncio.get_running_loop().time() - t0 < 2.0
    finally:
        await producer.stop()
        await consumer.stop()


async def test_records_waiting_are_fetched_at_once_whatever_the_fetch_wait(
    kafka_bootstrap, topic_prefix
):
    # A replica's idle check polls for one fetch's round trip, not its wait: the broker
    # answers a fetch that finds records at once (tansu included), so a check finds
    # the work waiting for it long before a 2 s wait would have ended.
    bus = KafkaBus(
        kafka_bootstrap,
        TopicNames(topic_prefix),
        fetch_max_wait_ms=2000,
        fetch_max_wait_busy_ms=2000,
        fetch_max_wait_idle_ms=2000,
    )
    await bus.ensure_topics(partitions=1)
    consumer = bus.consumer([bus.topics.pods], "g")
    await consumer.start()
    producer = bus.producer()
    await producer.start()
    try:
        await eventually(lambda: bool(consumer.assignment()), within=20)
        consumer.pause_fetching()
        assert await consumer.poll(2500, 10) == []  # the fetch in flight answers
        await producer.send(bus.topics.pods, b"v")
        consumer.resume_fetching()
        loop = asyncio.get_running_loop()
        began = loop.time()
        assert [m.value for m in await consumer.poll(1500, 10)] == [b"v"]
        assert loop.time() - began < 1.0
    finally:
        await producer.stop()
        await consumer.stop()


@pytest.mark.scale
async def test_a_member_leaving_the_group_moves_only_its_own_partitions(
    kafka_bootstrap, topic_prefix
):
    # The sticky assignor (aiokafka's port of the Java client's StickyAssignor,
    # kafka clients/.../consumer/StickyAssignor.java): when one of three members
    # leaves, the other two keep every partition they had and share out only the
    # leaver's. Round robin would reassign from scratch (a: 0,3 -> 0,2,4).
    bus = KafkaBus(kafka_bootstrap, TopicNames(topic_prefix), work_partitions=6)
    await bus.ensure_topics(partitions=1)
    members = {n: bus.consumer([bus.topics.work], "g", instance=n) for n in "abc"}
    polls = {}
    try:
        for name, member in members.items():
            await member.start()
            polls[name] = asyncio.ensure_future(_poll_forever(member))
        await eventually(lambda: all(len(m.assignment()) == 2 for m in members.values()), 60)
        before = {n: m.assignment() for n, m in members.items()}
        polls.pop("b").cancel()
        await members.pop("b").stop()
        await eventually(lambda: all(len(m.assignment()) == 3 for m in members.values()), 60)
        for name, member in members.items():
            assert before[name] <= member.assignment(), (name, before, member.assignment())
    finally:
        for task in polls.values():
            task.cancel()
        for member in members.values():
            await member.stop()


async def _poll_forever(consumer):
    while True:
        await consumer.poll(100, 10)


async def test_a_member_names_its_share_while_the_group_rebalances_and_polls_on_time(
    kafka_bootstrap, topic_prefix
):
    # aiokafka's rebalance is eager: a member gives up its whole share and its getmany
    # waits for the next assignment, whatever its timeout. The bus names the share
    # that is moving (a replica works it meanwhile) and polls return on time.
    bus = KafkaBus(kafka_bootstrap, TopicNames(topic_prefix), work_partitions=4)
    await bus.ensure_topics(partitions=1)
    first = bus.consumer([bus.topics.work], "g", instance="a")
    second = bus.consumer([bus.topics.work], "g", instance="b")
    await first.start()
    joining = None
    try:
        work = {(bus.topics.work, p) for p in range(4)}
        await eventually(lambda: first.assignment() == work, 60)
        assert first.moving_share() is None
        joining = asyncio.ensure_future(second.start())  # the group rebalances
        await eventually(lambda: first.moving_share() == work, 60, interval=0.01)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert await first.poll(100, 10) == []
        assert loop.time() - t0 < 1.0
        await joining
        await eventually(
            lambda: first.moving_share() is None and first.assignment(), 60, interval=0.05
        )
        assert first.assignment() | second.assignment() == work
    finally:
        if joining is not None:
            joining.cancel()
            with contextlib.suppress(BaseException):
                await joining
        await second.stop()
        await first.stop()


class _Partitions:
    """The two calls the sticky assignor makes of aiokafka's ClusterMetadata."""

    def __init__(self, topic: str, count: int) -> None:
        self._topic, self._count = topic, count

    def topics(self) -> set[str]:
        return {self._topic}

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self._count)) if topic == self._topic else None


def _sticky_round(
    topic: str, count: int, owned: dict[str, set[int]], generation: int
) -> dict[str, set[int]]:
    """One rebalance of the replicas' group as the broker's elected leader runs it
    with the assignor esched's group members prefer (``ASSIGNORS[0]``): each member's metadata
    carries its previous share, as aiokafka's member sends it."""
    from aiokafka.structs import TopicPartition

    from esched.services.bus.kafka import ASSIGNORS

    sticky = ASSIGNORS[0]

    members = {
        m: sticky._metadata([topic], [TopicPartition(topic, p) for p in sorted(ps)], generation)
        for m, ps in owned.items()
    }
    out = sticky.assign(_Partitions(topic, count), members)
    return {m: {p for _t, ps in a.assignment for p in ps} for m, a in out.items()}


def test_a_replica_joining_or_leaving_moves_only_its_share_of_the_default_work_partitions():
    # Kafka's AbstractStickyAssignorTest (clients/src/test/.../consumer/internals/
    # AbstractStickyAssignorTest.java, testAddRemoveConsumerOneTopic and
    # testStickiness): a member joining takes partitions only from the others' excess,
    # a member leaving hands over only its own, and shares stay within one partition
    # of each other. Here for every replica count the default 24 partitions allow.
    topic, parts = "work", DEFAULT_WORK_PARTITIONS
    owned: dict[str, set[int]] = {"r0": set()}
    generation = 1
    owned = _sticky_round(topic, parts, owned, generation)
    for joining in range(1, 24):
        before = owned
        generation += 1
        owned = _sticky_round(topic, parts, {**before, f"r{joining}": set()}, generation)
        moved = sum(len(before[m] - owned[m]) for m in before)
        assert moved == len(owned[f"r{joining}"]), (joining, before, owned)
        for m in before:
            assert owned[m] <= before[m], (joining, m)
        sizes = [len(ps) for ps in owned.values()]
        assert max(sizes) - min(sizes) <= 1 and sum(sizes) == parts
    for leaving in range(23, 0, -1):
        before = owned
        generation += 1
        rest = {m: ps for m, ps in before.items() if m != f"r{leaving}"}
        owned = _sticky_round(topic, parts, rest, generation)
        for m in rest:
            assert before[m] <= owned[m], (leaving, m)
        gained = sum(len(owned[m] - before[m]) for m in rest)
        assert gained == len(before[f"r{leaving}"])
        sizes = [len(ps) for ps in owned.values()]
        assert max(sizes) - min(sizes) <= 1 and sum(sizes) == parts


async def test_the_feed_topic_is_created_with_its_retention(kafka_bootstrap, topic_prefix):
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    bus = KafkaBus(kafka_bootstrap, TopicNames(topic_prefix), feed_retention_ms=123_456)
    await bus.ensure_topics(partitions=1)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        described = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, bus.topics.feed)]
        )
    finally:
        await admin.close()
    entries = {e[0]: e[1] for r in described for e in r.resources[0][4]}
    assert entries.get("retention.ms") == "123456"


async def test_a_reader_sees_its_partitions_bounds_and_reads_from_where_it_seeks(bus):
    await bus.ensure_topics(partitions=1)
    producer = bus.producer()
    await producer.start()
    for k in range(5):
        await producer.send(bus.topics.feed, b"v%d" % k)
    await producer.stop()
    consumer = bus.consumer([bus.topics.feed], "seeker", exclusive=True)
    await consumer.start()
    try:
        assert await consumer.bounds() == {(bus.topics.feed, 0): (0, 5)}
        consumer.seek(bus.topics.feed, 0, 3)
        assert [m.value for m in await _drain(consumer, 2)] == [b"v3", b"v4"]
        consumer.seek(bus.topics.feed, 0, 1)
        assert [m.value for m in await consumer.poll(5000, 1)] == [b"v1"]
    finally:
        await consumer.stop()
