"""Poison pills against the deployment as separate processes (issue 19).

``esched ingest``, ``commit``, ``dispatch`` and a replica run as their own
processes on the real broker and PostgreSQL. An outside producer then writes what
once stopped them for good: a pod whose requests overflow when summed, a time
outside the sane window, 800 KB of garbage on the pods and on the proposals topic,
and a work item naming a log position far past the head. Every service must stay
up and keep placing (a wave published after the pills is committed), and each
pill must come out on the dead-letter topic with its reason.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import orjson
import pytest

from esched.services.bus import open_bus
from esched.services.devbroker import DevBroker
from esched.services.dispatch import work_item
from esched.services.procs import service_env, wait_until
from esched.services.synth import node_event, pod_event
from support.processes import Log, Processes, write_events

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

NAMESPACE = "synth"
GARBAGE = b"\x00garbage" * 100_000  # 800 KB: under the event limit, not JSON


def _pods(first: int, count: int) -> list[dict]:
    return [pod_event(j, random.Random(j), NAMESPACE) for j in range(first, first + count)]


def _names(events: list[dict]) -> set[str]:
    return {f"{NAMESPACE}/{e['data']['metadata']['name']}" for e in events}


def _overflowing_pod() -> dict:
    e = pod_event(9_000, random.Random(0), NAMESPACE)
    e["data"]["spec"]["containers"] = [
        {"name": f"c{i}", "resources": {"requests": {"memory": "4Ei"}}} for i in range(2)
    ]
    return e


def _odd_time_pod() -> dict:
    e = pod_event(9_001, random.Random(1), NAMESPACE)
    e["time"] = "9999-12-31T23:59:59-23:59"
    return e


def _poison(bootstrap: str) -> None:
    """Write the pills as an outside client would (no esched tool in between)."""

    async def main() -> None:
        bus = open_bus(bootstrap, "esched.")
        producer = bus.producer()
        await producer.start()
        try:
            t = bus.topics
            await producer.send_many(
                t.pods,
                [
                    (b"p1", orjson.dumps(_overflowing_pod())),
                    (b"p2", orjson.dumps(_odd_time_pod())),
                    (b"p3", GARBAGE),
                ],
            )
            await producer.send_many(t.proposals, [(b"x", GARBAGE)])
            await producer.send_many(t.work, [work_item("pod", f"{NAMESPACE}/ghost", 10**12)])
        finally:
            await producer.stop()

    asyncio.run(main())


def _dead_letters(bootstrap: str, want: int) -> list[dict]:
    """The dead-letter topic's records (all partitions), once ``want`` are there."""

    async def main() -> list[dict]:
        bus = open_bus(bootstrap, "esched.")
        reader = bus.consumer([bus.topics.deadletter], "checker", exclusive=True)
        await reader.start()
        got: list[dict] = []
        try:
            async with asyncio.timeout(60):
                while len(got) < want:
                    got.extend(orjson.loads(m.value) for m in await reader.poll(500, 100))
        finally:
            await reader.stop()
        return got

    return asyncio.run(main())


def test_poison_pills_leave_every_service_running_and_placing(
    pg_url: str, dev_broker: DevBroker, tmp_path: Path
) -> None:
    env = service_env(pg_url, dev_broker.bootstrap)
    store_log = Log(pg_url)
    procs = Processes(env, tmp_path)
    services = procs.services
    try:
        procs.start_placing(seeded=False)
        before = _pods(0, 20)
        procs.publish(
            write_events(tmp_path / "before.jsonl", [*(node_event(i) for i in range(20)), *before])
        )
        wait_until("placing", lambda: _names(before) <= store_log.committed().keys(), 120, services)
        _poison(dev_broker.bootstrap)
        after = _pods(100, 20)
        procs.publish(write_events(tmp_path / "after.jsonl", after))
        wait_until(
            "placing after the pills",
            lambda: _names(after) <= store_log.committed().keys(),
            120,
            services,
        )
        dead = _dead_letters(dev_broker.bootstrap, 5)
        assert not [s.name for s in services if s.died()]
    finally:
        for s in services:
            s.stop()
    got = sorted((d["service"], d["reason"]) for d in dead)
    assert got == [
        ("commit", "not_json"),
        ("ingest", "envelope"),
        ("ingest", "not_json"),
        ("ingest", "quantity"),
        ("replica", "position_beyond_head"),
    ], got
    assert all(d["value_bytes"] == len(GARBAGE) for d in dead if d["reason"] == "not_json")
