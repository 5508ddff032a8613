"""Replica schedulers against real PostgreSQL and the real broker.

Two replicas in the `esched-replicas` group share the work of one dispatcher and
one commit service on a contended cluster: both place pods, no pod is bound
twice, every placeable pod is placed, `esched audit` passes; the conflict count
is measured. Plus the pieces: reason codes, the shared in-process consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from esched.core import Placer
from esched.schemas.events import PLACEMENT_COMMITTED, PLACEMENT_REJECTED
from esched.services.audit import audit_store
from esched.services.bus import Bus, BusConsumer, BusError, Message, open_bus
from esched.services.bus.memory import MemoryBus
from esched.services.commit import CommitConfig, CommitService
from esched.services.dispatch import Dispatcher, work_item
from esched.services.lease import open_lease
from esched.services.replica import (
    Replica,
    ReplicaConfig,
    SharedConsumer,
    reason_code,
)
from esched.services.store import EventStore, open_store
from esched.services.store._search import all_hold, mentioning
from esched.services.store.follower import LogFollower
from esched.services.store.snapshots import fold_log
from esched.services.synth import node_event, pod_event
from esched.services.up import system_idle
from support.aio import eventually
from support.events import append_events, ev, node, placement, pod

log = logging.getLogger(__name__)


def test_reason_codes_match_the_schema_vocabulary() -> None:
    assert reason_code("Insufficient cpu") == "Insufficient.cpu"
    assert reason_code("Insufficient nvidia.com/gpu") == "Insufficient.nvidia.com/gpu"
    assert reason_code("Too many pods") == "TooManyPods"
    assert reason_code("node(s) had untolerated taint") == "TaintToleration"
    assert reason_code("something else (odd)") == "something_else__odd"


async def test_shared_consumer_hands_each_message_to_one_replica() -> None:
    bus = MemoryBus()
    for i in range(10):
        bus.append(bus.topics.work, *work_item("pod", f"t/p{i}", i))
    shared = SharedConsumer(bus.consumer([bus.topics.work], "g"))
    await shared.start()
    await shared.start()
    a = await shared.poll(0, 6)
    b = await shared.poll(0, 6)
    assert [m.offset for m in a + b] == list(range(10))
    await shared.commit({(bus.topics.work, 0): 10})
    await shared.commit({(bus.topics.work, 0): 6})  # a late, older commit never rewinds
    assert await shared.lag() == 0
    await shared.stop()
    await shared.stop()


class _WorkConsumer(BusConsumer):
    """The in-process work topic's consumer (group ``group``), wrapped: each test's
    subclass changes what a poll does; ``polls`` counts them."""

    def __init__(self, bus: MemoryBus, group: str = "g") -> None:
        self.bus = bus
        self.inner = bus.consumer([bus.topics.work], group)
        self.polls = 0

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()

    async def poll(self, timeout_ms: int, max_records: int) -> list[Message]:
        self.polls += 1
        return await self.inner.poll(timeout_ms, max_records)

    async def commit(self, offsets) -> None:
        await self.inner.commit(offsets)

    async def lag(self) -> int:
        return await self.inner.lag()


class _WorkKeepsArriving(_WorkConsumer):
    """A consumer of the in-process work topic after each poll of which one more work
    item arrives (a steady stream); counts the polls."""

    async def poll(self, timeout_ms: int, max_records: int) -> list[Message]:
        msgs = await super().poll(timeout_ms, max_records)
        self.bus.append(self.bus.topics.work, *work_item("pod", f"t/late{self.polls}", 1))
        return msgs


def _lingering_replica(store, bus: MemoryBus) -> Replica:
    """Batches of 10, lingering (without a time limit) from 5 items on."""
    return Replica(
        store,
        bus,
        "r",
        config=ReplicaConfig(batch_size=10, linger=3600.0, linger_poll_ms=0, linger_min=5),
    )


async def test_a_replica_lingers_for_more_work_only_when_a_backlog_arrives(store) -> None:
    bus = MemoryBus()
    replica = _lingering_replica(store, bus)
    consumer = _WorkKeepsArriving(bus)
    await consumer.start()
    # Light load: fewer items than linger_min go at once, without waiting for more.
    for i in range(3):
        bus.append(bus.topics.work, *work_item("pod", f"t/p{i}", 1))
    assert len(await replica.poll_batch(consumer)) == 3 and consumer.polls == 1
    # A backlog (the one that arrived plus 5): poll on while work arrives, up to a batch.
    for i in range(3, 8):
        bus.append(bus.topics.work, *work_item("pod", f"t/p{i}", 1))
    assert len(await replica.poll_batch(consumer)) == 10 and consumer.polls == 1 + 5
    # Every poll counted in the replica's stats, the empty ones apart.
    assert (replica.stats()["polls"], replica.stats()["empty_polls"]) == (6, 0)
    # (the consumer it wraps: nothing arrives after its polls)
    assert len(await replica.poll_batch(consumer.inner)) == 1  # the one that arrived
    assert await replica.poll_batch(consumer.inner, 0) == []
    assert (replica.stats()["polls"], replica.stats()["empty_polls"]) == (8, 1)
    await consumer.stop()


class _BrokerBlipsWhileLingering(_WorkKeepsArriving):
    """The steady stream, with a retriable broker error on the second poll."""

    async def poll(self, timeout_ms: int, max_records: int) -> list[Message]:
        if self.polls == 1:
            self.polls += 1
            raise BusError("broker away", retriable=True)
        return await super().poll(timeout_ms, max_records)


async def test_work_polled_before_a_broker_blip_while_lingering_is_kept(store) -> None:
    bus = MemoryBus()
    replica = _lingering_replica(store, bus)
    consumer = _BrokerBlipsWhileLingering(bus)
    await consumer.start()
    for i in range(6):
        bus.append(bus.topics.work, *work_item("pod", f"t/p{i}", 1))
    # The first poll took all six (the consumer's position is past them); the linger
    # poll fails: the batch is the six, not nothing.
    got = await replica.poll_batch(consumer)
    assert [orjson.loads(m.value)["pod"] for m in got] == [f"t/p{i}" for i in range(6)]
    await consumer.stop()


async def _bindings_per_pod(es) -> Counter:
    """How many committed bindings each pod has in the log."""
    rows = await es.read(0, 1_000_000)
    return Counter(
        b["pod"]
        for r in rows
        if r.type == PLACEMENT_COMMITTED
        for b in orjson.loads(r.payload)["data"]["bindings"]
    )


async def _stop_all(
    es,
    commit: CommitService,
    dispatcher: Dispatcher,
    replicas: list[Replica],
    tasks: list[asyncio.Task],
) -> None:
    for r in replicas:
        await r.stop()
    await dispatcher.stop()
    await commit.stop()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await es.close()


async def _services_on(
    pg_url: str, kafka_bootstrap: str, topic_prefix: str
) -> tuple[EventStore, Bus, CommitService, Dispatcher]:
    """A migrated PostgreSQL store, a Kafka bus with its topics made, and a commit
    service and a dispatcher on them, each with its lease; the groups are this
    test's own (stale members of another test would delay rebalances)."""
    es = open_store(pg_url)
    await es.connect()
    await es.migrate()
    bus = open_bus(kafka_bootstrap, topic_prefix)
    await bus.ensure_topics()
    commit = CommitService(
        es,
        bus,
        lease=open_lease(pg_url, "commit"),
        config=CommitConfig(group=f"{topic_prefix}commit"),
    )
    return es, bus, commit, Dispatcher(es, bus, lease=open_lease(pg_url, "dispatch"))


async def test_two_replicas_share_work_on_postgres_and_kafka(
    pg_url: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    es, bus, commit, dispatcher = await _services_on(pg_url, kafka_bootstrap, topic_prefix)
    replicas = [
        Replica(es, bus, f"r{i}", seed=i, config=ReplicaConfig(group=f"{topic_prefix}replicas"))
        for i in range(2)
    ]
    tasks: list[asyncio.Task] = []
    try:
        await commit.start()
        tasks.append(asyncio.create_task(commit.run()))
        await dispatcher.start()
        tasks.append(asyncio.create_task(dispatcher.run()))
        # Concurrently: each join waits out the broker's group rebalance delay.
        await asyncio.gather(*(r.start() for r in replicas))
        tasks.extend(asyncio.create_task(r.run()) for r in replicas)
        # Both members must own work partitions before the work arrives.
        waited_from = time.monotonic()
        await eventually(
            lambda: all(r.consumer is not None and r.consumer.assignment() for r in replicas),
            30,
            interval=0.1,
            message="the group never gave both replicas work",
        )

        # A contended cluster: 30 nodes, 1,500 pods (about half fit), in bursts.
        rng = random.Random(7)
        await append_events(es, *[node_event(i) for i in range(30)])
        pods = [pod_event(j, rng) for j in range(1500)]
        for i in range(0, len(pods), 250):
            await append_events(es, *pods[i : i + 250])
            await asyncio.sleep(0.05)

        log.warning("replicas ready and workload appended in %.1fs", time.monotonic() - waited_from)
        started = time.monotonic()
        idle_in_row = 0
        while idle_in_row < 5:
            assert time.monotonic() - started < 40, [r.stats() for r in replicas]
            for t in tasks:
                assert not t.done(), t
            idle_in_row = idle_in_row + 1 if await system_idle(es, dispatcher, replicas) else 0
            await asyncio.sleep(0.1)

        log.warning("scheduled in %.1fs", time.monotonic() - started)
        stats = [r.stats() for r in replicas]
        assert all(s["work_items"] > 0 and s["placed_pods"] > 0 for s in stats), stats
        # The counters a run's read and batch sizes come from (bench e2e reports them).
        assert all(0 < s["batches"] <= s["work_items"] for s in stats), stats
        assert all(0 < s["log_reads"] <= s["log_rows"] for s in stats), stats
        # Its wake-ups: each batch is a poll that found work (and its lingering ones),
        # committed once (none lost to a rebalance here); the loop thread blocked.
        assert all(0 < s["batches"] <= s["polls"] - s["empty_polls"] for s in stats), stats
        assert all(0 < s["commits"] <= s["batches"] for s in stats), stats
        assert all(s["loop_wakeups_after_start"] > 0 < s["after_start_s"] for s in stats), stats
        placed = sum(s["placed_pods"] for s in stats)
        conflicts = sum(s["conflicts"] for s in stats)
        committed = sum(s["committed"] for s in stats)
        log.warning(
            "2 replicas: placed %d, conflicts %d (%.3f per commit), reasons %s",
            placed,
            conflicts,
            conflicts / max(committed, 1),
            [s["conflict_reasons"] for s in stats],
        )
        assert commit.totals.committed == committed
        assert commit.totals.rejected == conflicts

        # No pod bound twice; every placeable pod placed; the audit agrees.
        bound = await _bindings_per_pod(es)
        assert bound and max(bound.values()) == 1
        assert len(bound) == placed
        state = await fold_log(es)
        assert state.summary()["pods"]["Running"] == placed
        placer = Placer(state)
        assert [p for p in state.pending_pods() if placer.place(p, assume=False)] == []
        report = await audit_store(es)
        assert report["ok"], report["violations"][:5]
    finally:
        await _stop_all(es, commit, dispatcher, replicas, tasks)


async def test_up_against_postgres_and_kafka(
    pg_url: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """`esched up --kafka --store postgresql://...`: the same services through the broker."""
    from esched.services.bus.base import TopicNames
    from esched.services.up import Up, UpConfig, generated_records

    records = list(generated_records(10, 300, TopicNames(topic_prefix), seed=3))
    runner = Up(
        UpConfig(
            store=pg_url,
            kafka=kafka_bootstrap,
            topic_prefix=topic_prefix,
            exit_when_idle=True,
            progress_every=0,
            group_prefix=topic_prefix,
        ),
        records,
    )
    summary = await asyncio.wait_for(runner.run(), 50)
    assert summary["ingest"]["stored"] == 310
    assert summary["placed"] > 0
    assert summary["placed"] + summary["unschedulable"] == 300
    assert summary["commit"]["committed"] == summary["proposals"] - summary["conflicts"]
    es = open_store(pg_url)
    await es.connect()
    try:
        state = await fold_log(es)
        placer = Placer(state)
        assert [p for p in state.pending_pods() if placer.place(p, assume=False)] == []
        assert (await audit_store(es))["ok"]
    finally:
        await es.close()


# ---------------------------------------------------------------------- pipelining


async def _embedded_replica(store, **config):
    """A replica deciding through a commit service in the same process, with a gate:
    proposals naming a pod in ``held`` wait until ``gate`` is set."""
    from support.events import NAMESPACE

    commit = CommitService(store)
    gate = asyncio.Event()
    held: set[str] = set()
    sent: list[list[str]] = []

    async def submit(proposals):
        pods = [b["pod"] for p in proposals for b in p["bindings"]]
        sent.append(pods)
        if held & set(pods):
            await gate.wait()
        return await commit.decide(proposals)

    bus = MemoryBus()
    replica = Replica(
        store, bus, "r1", submit=submit, config=ReplicaConfig(retry_backoff=0.001, **config)
    )
    await replica.start()
    return replica, commit, gate, held, sent, NAMESPACE


def _work(topic: str, offset: int, pod: str, position: int):
    from esched.services.bus import Message

    key, value = work_item("pod", pod, position)
    return Message(topic, 0, offset, key, value)


async def test_a_rejected_claim_of_an_earlier_batch_is_released_for_the_next_one(store):
    """Batch 2 is placed while batch 1's proposal is undecided: the room batch 1 claims
    is assumed taken (b fits nowhere then), so b's verdict waits for that decision;
    batch 1 is rejected (its pod was deleted meanwhile), the claim is released and b
    is placed in the room, not reported unschedulable."""
    from support.events import node, pod

    await append_events(store, node("n1", cpu="2"), pod("a", "2"), pod("b", "2"))
    replica, commit, gate, held, sent, ns = await _embedded_replica(store)
    try:
        head = await store.head()
        held.add(f"{ns}/a")
        planned = asyncio.Event()
        topic = replica.bus.topics.work
        first = asyncio.create_task(replica.handle([_work(topic, 0, f"{ns}/a", head)], planned))
        await asyncio.wait_for(planned.wait(), 5)
        assert list(replica.inflight) == [f"{ns}/a"]
        second = asyncio.create_task(replica.handle([_work(topic, 1, f"{ns}/b", head)]))
        await asyncio.sleep(0.2)
        assert not second.done() and sent == [[f"{ns}/a"]]  # b: no room in the view
        await append_events(
            store,
            {
                "specversion": "1.0",
                "id": "del-a",
                "source": "t",
                "type": "esched.pod.deleted",
                "data": {"metadata": {"name": "a", "namespace": ns}},
            },
        )
        gate.set()
        await asyncio.wait_for(asyncio.gather(first, second), 10)
        assert sent == [[f"{ns}/a"], [f"{ns}/b"]]
        assert replica.totals.conflicts == 1 and replica.totals.placed_pods == 1
        assert replica.totals.unschedulable == 0
        assert replica.inflight == {}
        state = await fold_log(store)
        assert state.pod(f"{ns}/b")["node"] == "n1"
        assert (await audit_store(store))["ok"]
    finally:
        await replica.stop()
        await commit.stop()


async def test_a_replica_counts_the_cpu_of_each_part_of_placing(store):
    """A batch placed counts its thread's CPU to its parts (work items read, the pass,
    the claims, the decisions counted); the loop thread's CPU is within the process's.

    The parts are read off a clock that steps a millisecond a reading: a part of a
    one-pod batch may take less than the stats' microsecond rounding of the real one."""
    from support.events import node, pod

    await append_events(store, node("n1", cpu="4"), pod("a"))
    replica, commit, _gate, _held, _sent, ns = await _embedded_replica(store, count_cpu=True)
    assert replica.totals.clock is time.thread_time
    readings = itertools.count()
    replica.totals.clock = lambda: next(readings) / 1000
    try:
        head = await store.head()
        topic = replica.bus.topics.work
        await asyncio.wait_for(replica.handle([_work(topic, 0, f"{ns}/a", head)]), 10)
        stats = replica.stats()
        parts = stats["cpu_s"]
        assert stats["placed_pods"] == 1
        assert all(parts[k] > 0 for k in ("work", "renew", "plan", "claim", "decided")), parts
        # (each rounded to the microsecond)
        assert stats["loop_cpu_after_start_s"] <= stats["cpu_after_start_s"] + 2e-6
    finally:
        await replica.stop()
        await commit.stop()


async def test_a_replica_reads_no_cpu_clock_per_part_unless_asked(store, monkeypatch):
    """Without ``count_cpu`` placing a batch reads no thread CPU clock (a system call
    per read) and its parts stay at zero."""
    from support.events import node, pod

    await append_events(store, node("n1", cpu="4"), pod("a"))
    replica, commit, _gate, _held, _sent, ns = await _embedded_replica(store)
    reads = 0
    thread_time = time.thread_time

    def counted() -> float:
        nonlocal reads
        # the placing path's reads (the follower counts its own folds apart)
        caller = sys._getframe(1).f_code.co_filename
        if "/replica/" in caller and not caller.endswith("feed.py"):
            reads += 1
        return thread_time()

    try:
        head = await store.head()
        topic = replica.bus.topics.work
        monkeypatch.setattr(time, "thread_time", counted)
        await asyncio.wait_for(replica.handle([_work(topic, 0, f"{ns}/a", head)]), 10)
        monkeypatch.undo()
        stats = replica.stats()
        assert stats["placed_pods"] == 1
        assert set(stats["cpu_s"].values()) == {0.0}
        assert reads == 0
    finally:
        await replica.stop()
        await commit.stop()


async def test_a_pod_with_an_undecided_claim_is_not_proposed_again(store):
    """A redelivered work item of a pod whose proposal is still undecided is skipped
    (the batch that proposed it retries it if it is rejected): one proposal only."""
    from support.events import node, pod

    await append_events(store, node("n1", cpu="4"), pod("a"))
    replica, commit, gate, held, sent, ns = await _embedded_replica(store)
    try:
        head = await store.head()
        held.add(f"{ns}/a")
        planned = asyncio.Event()
        topic = replica.bus.topics.work
        first = asyncio.create_task(replica.handle([_work(topic, 0, f"{ns}/a", head)], planned))
        await asyncio.wait_for(planned.wait(), 5)
        await asyncio.wait_for(replica.handle([_work(topic, 1, f"{ns}/a", head)]), 5)
        assert replica.totals.skipped == 1
        gate.set()
        await asyncio.wait_for(first, 10)
        assert sent == [[f"{ns}/a"]] and replica.totals.placed_pods == 1
        assert (await fold_log(store)).pod(f"{ns}/a")["node"] == "n1"
    finally:
        await replica.stop()
        await commit.stop()


async def test_a_restarted_replica_works_its_previous_share_while_it_rejoins(
    pg_url: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """The share of the work partitions a replica had is recorded in the store; the
    same replica restarted reads it at once (no group membership, no offset
    commits) while its group join is under way, then switches to the group. Pods
    submitted while it was away are placed once each; the audit passes."""
    es, bus, commit, dispatcher = await _services_on(pg_url, kafka_bootstrap, topic_prefix)
    config = ReplicaConfig(group=f"{topic_prefix}replicas")
    tasks: list[asyncio.Task] = []
    replicas: list[Replica] = []
    rng = random.Random(11)
    try:
        await commit.start()
        tasks.append(asyncio.create_task(commit.run()))
        await dispatcher.start()
        tasks.append(asyncio.create_task(dispatcher.run()))
        await append_events(es, *[node_event(i) for i in range(20)])

        async def placed_all(pods: list[dict], within: float) -> None:
            keys = {
                f"{p['data']['metadata']['namespace']}/{p['data']['metadata']['name']}"
                for p in pods
            }

            async def running() -> bool:
                for t in tasks:
                    assert not t.done(), t
                state = await fold_log(es)
                return all(state.pod(k)["phase"] == "Running" for k in keys)

            await eventually(running, within, interval=0.1, message="pods not placed in time")

        first = Replica(es, bus, "r1", seed=1, config=config)
        replicas.append(first)
        await first.start()
        first_run = asyncio.create_task(first.run())
        tasks.append(first_run)
        wave1 = [pod_event(j, rng, "w1") for j in range(100)]
        await append_events(es, *wave1)
        await placed_all(wave1, 30)
        assert await es.load_snapshot(first.share_snapshot_name) is not None
        assert first.totals.early_items == 0  # nothing recorded before its first start
        await first.stop()
        replicas.remove(first)
        await first_run
        tasks.remove(first_run)

        wave2 = [pod_event(j, rng, "w2") for j in range(100)]
        await append_events(es, *wave2)  # published as work on r1's (unowned) partitions
        again = Replica(es, bus, "r1", seed=1, config=config)
        replicas.append(again)
        t0 = time.monotonic()
        await again.start()
        started = time.monotonic() - t0
        tasks.append(asyncio.create_task(again.run()))
        await placed_all(wave2, 30)
        placed_at = time.monotonic() - t0
        if again.joining:  # a slow join (tansu): placed before it was done
            assert again.totals.early_items > 0
            assert placed_at < 5, placed_at
        await eventually(
            lambda: (
                not again.joining and again.consumer is not None and again.consumer.assignment()
            ),
            30,
            interval=0.05,
            message="the restarted replica never joined",
        )
        log.warning(
            "restart: ready %.2fs, wave placed %.2fs, early items %d",
            started,
            placed_at,
            again.totals.early_items,
        )
        bound = await _bindings_per_pod(es)
        assert len(bound) == 200 and max(bound.values()) == 1
        report = await audit_store(es)
        assert report["ok"], report["violations"][:5]
        # Stopped while its join is still under way: it stops at once, cleanly.
        await again.stop()
        replicas.remove(again)
        third = Replica(es, bus, "r1", seed=1, config=config)
        replicas.append(third)
        await third.start()
        t0 = time.monotonic()
        await asyncio.wait_for(third.stop(), 10)
        assert time.monotonic() - t0 < 5 and third.consumer is None
    finally:
        await _stop_all(es, commit, dispatcher, replicas, tasks)


async def test_a_replica_joining_mid_run_takes_work_without_double_placement(
    pg_url: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    """Pipelined replicas across a rebalance: r1 has batches in flight (undecided
    claims, uncommitted offsets) when r2 joins and partitions move; items r1 had
    polled are redelivered to r2, which may propose pods r1 already proposed. The
    commit service commits each pod once; every placeable pod is placed; the audit
    passes."""
    es, bus, commit, dispatcher = await _services_on(pg_url, kafka_bootstrap, topic_prefix)
    config = ReplicaConfig(group=f"{topic_prefix}replicas", batch_size=40, pipeline=4)
    r1 = Replica(es, bus, "r1", seed=1, config=config)
    r2 = Replica(es, bus, "r2", seed=2, config=config)
    tasks: list[asyncio.Task] = []
    rng = random.Random(21)
    try:
        await commit.start()
        tasks.append(asyncio.create_task(commit.run()))
        await dispatcher.start()
        tasks.append(asyncio.create_task(dispatcher.run()))
        await r1.start()
        tasks.append(asyncio.create_task(r1.run()))
        await append_events(es, *[node_event(i) for i in range(40)])
        t0 = time.monotonic()
        joining: asyncio.Task | None = None
        after_join = 0
        wave = 0
        # Waves of pods (and of new nodes, so there is room to place) until r2 has
        # joined and taken part for a few waves: the join's timing is the broker's.
        while after_join < 4:
            assert wave < 80, "r2 never joined"
            await append_events(
                es,
                *[node_event(40 + 2 * wave + k) for k in range(2)],
                *[pod_event(j, rng, f"w{wave}") for j in range(60)],
            )
            if wave == 2:
                joining = asyncio.create_task(r2.start())
            if joining is not None and joining.done():
                if len(tasks) == 3:
                    joining.result()
                    tasks.append(asyncio.create_task(r2.run()))
                    log.warning("r2 joined %.1fs after the first wave", time.monotonic() - t0)
                after_join += 1
            wave += 1
            await asyncio.sleep(0.75)
        idle_in_row = 0
        started = time.monotonic()
        while idle_in_row < 5:
            assert time.monotonic() - started < 60, [r1.stats(), r2.stats()]
            for t in tasks:
                assert not t.done(), t
            idle_in_row = idle_in_row + 1 if await system_idle(es, dispatcher, [r1, r2]) else 0
            await asyncio.sleep(0.1)
        stats = [r1.stats(), r2.stats()]
        log.warning(
            "rebalance: %s",
            [{k: s[k] for k in ("placed_pods", "conflicts", "skipped")} for s in stats],
        )
        assert all(s["placed_pods"] > 0 for s in stats), stats
        bound = await _bindings_per_pod(es)
        assert bound and max(bound.values()) == 1
        assert len(bound) == sum(s["placed_pods"] for s in stats)
        state = await fold_log(es)
        placer = Placer(state)
        assert [p for p in state.pending_pods() if placer.place(p, assume=False)] == []
        report = await audit_store(es)
        assert report["ok"], report["violations"][:5]
    finally:
        await _stop_all(es, commit, dispatcher, [r1, r2], tasks)


async def test_log_follower_folds_the_bytes_and_decodes_only_what_after_fold_reads(store):
    # Catch-up and the live fold both fold stored bytes; after_fold sees the decoded
    # envelopes of its types only, once the batch is in the state.
    await append_events(store, node("n1", cpu="8"), pod("a"))
    seen: list[tuple[int, dict, int]] = []
    follower = LogFollower(
        store,
        after_fold=lambda events: seen.extend(
            (pos, e, follower.state.position) for pos, e in events
        ),
        decode=(PLACEMENT_COMMITTED, PLACEMENT_REJECTED),
    )
    state = await follower.start()
    try:
        assert state.position == 2 and state.pod("t/a")["phase"] == "Pending"
        assert follower.follow_cpu == 0  # the catch-up is not following
        await append_events(
            store,
            pod("b"),
            pod("c"),
            ev("c1", PLACEMENT_COMMITTED, placement("p1", [("a", "n1")])),
            ev("r1", PLACEMENT_REJECTED, placement("p2", [("b", "n1")])),
        )
        assert await follower.wait_for(6, within=10)
        assert state.pod("t/a")["phase"] == "Running" and state.pod("t/a")["node"] == "n1"
        assert state.pod("t/c")["phase"] == "Pending"
        assert [(pos, e["type"]) for pos, e, _ in seen] == [
            (5, PLACEMENT_COMMITTED),
            (6, PLACEMENT_REJECTED),
        ]
        assert all(folded_to >= pos for pos, _, folded_to in seen)
        assert seen[0][1]["data"]["proposal"] == "p1"
        assert 0 < follower.follow_cpu < 60  # the live fold's CPU, counted
    finally:
        await follower.stop()


class _CountingConsumer(_WorkConsumer):
    """The in-process work consumer, counting polls and whether fetching is paused."""

    def __init__(self, bus: MemoryBus) -> None:
        super().__init__(bus)
        self.paused = False

    def pause_fetching(self) -> None:
        self.paused = True

    def resume_fetching(self) -> None:
        self.paused = False

    @property
    def fetching(self) -> bool:
        return not self.paused


class _TimedConsumer(_CountingConsumer):
    """A counting consumer whose fetch requests wait 20 ms, recording each poll's
    timeout and whether fetching was paused just before it."""

    fetch_wait_ms = 20

    def __init__(self, bus: MemoryBus) -> None:
        super().__init__(bus)
        self.timeouts: list[int] = []

    async def poll(self, timeout_ms: int, max_records: int) -> list[Message]:
        self.timeouts.append(timeout_ms)
        return await super().poll(timeout_ms, max_records)


@contextlib.asynccontextmanager
async def _idle_replica(
    pg_url: str, consumer_type: type[_CountingConsumer], config: ReplicaConfig
) -> AsyncIterator[tuple[EventStore, _CountingConsumer, Replica]]:
    """A replica running on a one-node log with ``consumer_type`` as its work
    consumer (the store's safety-net poll set out of any test's window)."""
    store = open_store(pg_url, poll_interval=60.0)
    await store.connect()
    await store.migrate()
    bus = MemoryBus()
    consumer = consumer_type(bus)
    await consumer.start()
    replica = Replica(store, bus, "r", consumer=consumer, config=config)
    await append_events(store, node("n1", cpu="8"))
    await replica.start()
    task = asyncio.create_task(replica.run())
    try:
        yield store, consumer, replica
    finally:
        await replica.stop()
        await asyncio.wait_for(task, 10)
        await consumer.stop()
        await store.close()


async def test_an_idle_replicas_check_for_work_is_one_fetch_and_an_event_polls_at_once(
    pg_url,
) -> None:
    # Once idle, the check each idle_poll is a poll of one fetch request's round trip,
    # shorter than its wait on the broker (20 ms here): not a whole poll (100 ms: five
    # requests at a 20 ms wait), nor the wait and round trip (aiokafka sends the next
    # request as the empty answer comes: two per check); an event that may make work
    # resumes a whole poll at once.
    config = ReplicaConfig(idle_after=0.05, idle_poll=0.05, poll_timeout_ms=100)
    async with _idle_replica(pg_url, _TimedConsumer, config) as (store, consumer, _r):
        assert isinstance(consumer, _TimedConsumer)
        await eventually(lambda: consumer.paused, within=10)
        seen = len(consumer.timeouts)
        await eventually(lambda: len(consumer.timeouts) >= seen + 3, within=10)
        checks = consumer.timeouts[seen : seen + 3]
        assert all(0 < t < consumer.fetch_wait_ms for t in checks), checks
        checks = len(consumer.timeouts)
        await append_events(store, pod("b"))
        await eventually(lambda: 100 in consumer.timeouts[checks:], within=10)


async def test_an_idle_replica_neither_polls_work_nor_reads_the_log(pg_url) -> None:
    # Counted, not timed: over a window with nothing appended, an idle replica sends
    # no fetch (its work consumer is paused) and reads nothing from the store (the
    # LISTEN connection wakes it; the safety-net poll is set out of the window). Any
    # event that may make work (a pod submitted) resumes fetching; the committed
    # placements of other replicas do not.
    config = ReplicaConfig(idle_after=0.1, idle_poll=60.0, poll_timeout_ms=20)
    async with _idle_replica(pg_url, _CountingConsumer, config) as (store, consumer, replica):
        await eventually(lambda: consumer.paused, within=10)
        polls, reads = consumer.polls, replica.follower.reads
        await asyncio.sleep(1.0)  # the window the idle cost is counted over
        assert (consumer.polls, replica.follower.reads) == (polls, reads)
        # Another replica's decision: folded, no fetch.
        await append_events(
            store, pod("a"), ev("c1", PLACEMENT_COMMITTED, placement("x", [("a", "n1")]))
        )
        await eventually(lambda: replica.follower.position == 3, within=10)
        await eventually(lambda: consumer.paused, within=10)
        polls = consumer.polls
        await append_events(store, ev("c2", PLACEMENT_COMMITTED, placement("y", [("a", "n1")])))
        await eventually(lambda: replica.follower.position == 4, within=10)
        await asyncio.sleep(0.3)
        assert consumer.polls == polls and consumer.paused
        # A pod submitted may make work: fetching resumes at once.
        await append_events(store, pod("b"))
        await eventually(lambda: consumer.polls > polls, within=10)


@pytest.mark.parametrize("count", [0, 1, 7, 8, 40])
def test_the_batch_searches_find_what_a_search_per_payload_finds(count) -> None:
    # The follower's searches over a fetched batch (memmem per payload, in C): a
    # needle at either end of a payload, in several payloads, twice in one, split
    # over two payloads (never a match), payloads that are not bytes (bytearray), the empty needle.
    rng = random.Random(count)
    needle = b"r1-abc-"
    pieces = [needle, b"r1-", b"abc-", b"x", b'{"a":1}', b"r1-abc", b"-"]
    rows: list[tuple[int, Any]] = [
        (i + 1, b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 5))))
        for i in range(count)
    ]
    rows += [(count + 1, b"r1-ab"), (count + 2, b"c-r1-abc-r1-abc-")]
    rows += [(count + 3, bytearray(b"r1-abc-")), (count + 4, bytearray(b"r1-ab"))]
    for n in (needle, b"-", b"", b"not there"):
        assert mentioning(rows, n) == [r for r in rows if n in r[1]]
        assert all_hold(rows, n) == all(n in r[1] for r in rows)
        assert all_hold([r for r in rows if n in r[1]], n)
    assert all_hold([], needle)


@settings(max_examples=200, deadline=None)
@given(
    payloads=hst.lists(
        hst.binary(max_size=300) | hst.text('r01-ab"', max_size=300).map(str.encode), max_size=6
    ),
    needle=hst.text('r01-ab"', max_size=300).map(str.encode) | hst.binary(max_size=4),
    cut=hst.tuples(hst.integers(0, 300), hst.integers(0, 300)),
)
def test_the_pair_search_finds_what_a_search_per_payload_finds(payloads, needle, cut) -> None:
    # Horspool on byte pairs (needles of 2..255 bytes; memmem for the others) over
    # payloads of few distinct bytes (many near misses), a needle cut out of one of
    # them among those.
    if payloads and cut[0] < cut[1]:
        needle = payloads[0][cut[0] : cut[1]] or needle
    rows = list(enumerate(payloads))
    assert mentioning(rows, needle) == [r for r in rows if needle in r[1]]
    assert all_hold(rows, needle) == all(needle in r[1] for r in rows)


async def test_a_replica_decodes_only_the_decisions_of_its_own_proposals(store) -> None:
    # The follower folds every event but decodes only payloads naming this replica's
    # proposal id prefix: other replicas' decisions never reach after_fold.
    seen: list[str] = []
    follower = LogFollower(
        store,
        after_fold=lambda events: seen.extend(e["data"]["proposal"] for _p, e in events),
        decode=(PLACEMENT_COMMITTED, PLACEMENT_REJECTED),
        mentions=b"mine-",
    )
    await append_events(store, node("n1", cpu="8"), pod("a"), pod("b"))
    await follower.start()
    try:
        await append_events(
            store,
            ev("c1", PLACEMENT_COMMITTED, placement("other-1", [("a", "n1")])),
            ev("c2", PLACEMENT_REJECTED, placement("mine-1", [("b", "n1")])),
        )
        assert await follower.wait_for(5, within=10)
        assert follower.state.pod("t/a")["phase"] == "Running"  # folded all the same
        assert seen == ["mine-1"]
    finally:
        await follower.stop()


class _Rebalancing(_WorkConsumer):
    """A member of the work group whose share the test revokes: from revocation until
    the next assignment (aiokafka's eager rebalance) it fetches nothing."""

    def __init__(self, bus: MemoryBus, group: str) -> None:
        super().__init__(bus, group)
        self.moving: frozenset[tuple[str, int]] | None = None

    async def poll(self, timeout_ms: int, max_records: int) -> list[Message]:
        if self.moving is None:
            return await super().poll(timeout_ms, max_records)
        await asyncio.sleep(timeout_ms / 1000)  # a poll that waits, as getmany's
        return []

    def assignment(self) -> frozenset[tuple[str, int]]:
        return frozenset() if self.moving is not None else self.inner.assignment()

    def moving_share(self) -> frozenset[tuple[str, int]] | None:
        return self.moving


async def test_a_replica_keeps_placing_its_share_while_the_group_rebalances(store):
    # Issue 19: a killed replica stalled all placement while its share moved, since
    # every member of an eager rebalance gives up its share until the group rejoins.
    await append_events(store, node("n1", cpu="4"), pod("a"), pod("b"))
    commit = CommitService(store)
    bus = MemoryBus()
    config = ReplicaConfig(retry_backoff=0.001, bridge_rebalance=True)
    group = _Rebalancing(bus, config.group)
    replica = Replica(store, bus, "r1", submit=commit.decide, config=config, consumer=group)
    await replica.start()
    run = asyncio.create_task(replica.run())

    async def running(name: str) -> bool:
        return (await fold_log(store)).pod(f"t/{name}")["phase"] == "Running"

    try:
        group.moving = group.inner.assignment()  # another member died: a rebalance
        bus.append(bus.topics.work, *work_item("pod", "t/a", await store.head()))
        await eventually(lambda: running("a"), 10, message="a not placed during the rebalance")
        assert replica.bridging and replica.totals.early_items == 1
        group.moving = None  # the group has rejoined: the share is assigned again
        bus.append(bus.topics.work, *work_item("pod", "t/b", await store.head()))
        await eventually(lambda: running("b"), 10, message="b not placed after it")
        assert not replica.bridging
    finally:
        await replica.stop()
        await run
        await commit.stop()
    bound = await _bindings_per_pod(store)
    assert bound == {"t/a": 1, "t/b": 1}


class _RecordingBus(MemoryBus):
    """The in-process bus, recording the fetch wait each consumer is made with."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: dict[str, list[int | None]] = {}

    def consumer(
        self,
        topics: Sequence[str],
        group: str,
        *,
        exclusive: bool = False,
        instance: str | None = None,
        partitions: Sequence[tuple[str, int]] | None = None,
        wait_ms: int | None = None,
        idle_wait: tuple[int, float] | None = None,
    ) -> BusConsumer:
        for topic in topics:
            self.waits.setdefault(topic, []).append(wait_ms)
        return super().consumer(
            topics,
            group,
            exclusive=exclusive,
            instance=instance,
            partitions=partitions,
            wait_ms=wait_ms,
            idle_wait=idle_wait,
        )


async def test_a_replicas_work_consumer_fetches_with_the_work_fetch_wait(store) -> None:
    """The work consumer waits ``work_fetch_wait_ms`` at the broker (40 ms), not the
    bus's 20 ms idle wait: under load it has a fetch waiting all the time, and each
    one costs the replica and the broker CPU whatever it brings."""
    bus = _RecordingBus()
    replica = Replica(store, bus, "r1", config=ReplicaConfig())
    await replica.start()
    try:
        assert bus.waits[bus.topics.work] == [ReplicaConfig().work_fetch_wait_ms] == [40]
        # Restarted, it reads its previous share by assignment with the same wait.
        await replica._open_provisional([(bus.topics.work, 0)])
        assert bus.waits[bus.topics.work][-1] == 40
        await replica._stop_provisional()
    finally:
        await replica.stop()
