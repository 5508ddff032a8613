"""Replica schedulers against real PostgreSQL and the real broker.

Two replicas in the `esched-replicas` group share the work of one dispatcher and
one commit service on a contended cluster: both place pods, no pod is bound
twice, every placeable pod is placed, `esched audit` passes; the conflict count
is measured. Plus the pieces: reason codes, the shared in-process consumer.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter

import orjson

from esched.core._placer import Placer
from esched.schemas.events import PLACEMENT_COMMITTED, stream_of
from esched.services.audit import audit_store
from esched.services.bus import open_bus
from esched.services.bus.memory import MemoryBus
from esched.services.commit import CommitConfig, CommitService
from esched.services.dispatch import Dispatcher, work_item
from esched.services.lease import open_lease
from esched.services.replay import fold_log
from esched.services.replica import Replica, ReplicaConfig, SharedConsumer, reason_code
from esched.services.store import NewEvent, open_store
from esched.services.synth import node_event, pod_event
from esched.services.up import system_idle

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


async def _append(es, events: list[dict]) -> None:
    await es.append([NewEvent(e["id"], e["type"], stream_of(e), orjson.dumps(e))
                     for e in events])


async def test_two_replicas_share_work_on_postgres_and_kafka(
        pg_url: str, kafka_bootstrap: str, topic_prefix: str) -> None:
    es = open_store(pg_url)
    await es.connect()
    await es.migrate()
    bus = open_bus(kafka_bootstrap, topic_prefix)
    await bus.ensure_topics()
    # Groups of this test's own: stale members of another test would delay rebalances.
    commit = CommitService(es, bus, lease=open_lease(pg_url, "commit"),
                           config=CommitConfig(group=f"{topic_prefix}commit"))
    dispatcher = Dispatcher(es, bus, lease=open_lease(pg_url, "dispatch"))
    replicas = [Replica(es, bus, f"r{i}", seed=i,
                        config=ReplicaConfig(group=f"{topic_prefix}replicas"))
                for i in range(2)]
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
        deadline = time.monotonic() + 30
        while not all(r.consumer._consumer.assignment() for r in replicas):  # type: ignore
            assert time.monotonic() < deadline, "the group never gave both replicas work"
            await asyncio.sleep(0.1)

        # A contended cluster: 30 nodes, 1,500 pods (about half fit), in bursts.
        rng = random.Random(7)
        await _append(es, [node_event(i) for i in range(30)])
        pods = [pod_event(j, rng) for j in range(1500)]
        for i in range(0, len(pods), 250):
            await _append(es, pods[i : i + 250])
            await asyncio.sleep(0.05)

        log.warning("replicas ready and workload appended in %.1fs",
                    time.monotonic() - deadline + 30)
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
        placed = sum(s["placed_pods"] for s in stats)
        conflicts = sum(s["conflicts"] for s in stats)
        committed = sum(s["committed"] for s in stats)
        log.warning("2 replicas: placed %d, conflicts %d (%.3f per commit), reasons %s",
                    placed, conflicts, conflicts / max(committed, 1),
                    [s["conflict_reasons"] for s in stats])
        assert commit.totals.committed == committed
        assert commit.totals.rejected == conflicts

        # No pod bound twice; every placeable pod placed; the audit agrees.
        rows = await es.read(0, 1_000_000)
        bound = Counter(b["pod"] for r in rows if r.type == PLACEMENT_COMMITTED
                        for b in orjson.loads(r.payload)["data"]["bindings"])
        assert bound and max(bound.values()) == 1
        assert len(bound) == placed
        state = await fold_log(es)
        assert state.summary()["pods"]["Running"] == placed
        placer = Placer(state)
        assert [p for p in state.pending_pods() if placer.place(p, assume=False)] == []
        report = await audit_store(es)
        assert report["ok"], report["violations"][:5]
    finally:
        for r in replicas:
            await r.stop()
        await dispatcher.stop()
        await commit.stop()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await es.close()


async def test_up_against_postgres_and_kafka(pg_url: str, kafka_bootstrap: str,
                                             topic_prefix: str) -> None:
    """`esched up --kafka --store postgresql://...`: the same services through the broker."""
    from esched.services.bus.base import TopicNames
    from esched.services.up import Up, UpConfig, generated_records

    records = list(generated_records(10, 300, TopicNames(topic_prefix), seed=3))
    runner = Up(UpConfig(store=pg_url, kafka=kafka_bootstrap, topic_prefix=topic_prefix,
                         exit_when_idle=True, progress_every=0, group_prefix=topic_prefix),
                records)
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
