"""The dispatcher's takeover: what the previous leader had parked stays parked.

A pod reported unschedulable waits for capacity. A new leader (after a failover or
a restart) rebuilds that from the log instead of re-publishing every such pod.
A gated pod is work only once an update removes its last gate; another scheduler's
pod (reported OtherScheduler) is never parked, reclaimed for or published again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from esched.schemas.events import stream_of
from esched.services.bus.memory import MemoryBus
from esched.services.dispatch import DispatchConfig, Dispatcher
from esched.services.store import NewEvent, open_store
from support.aio import eventually
from support.events import ev, node, pod


def _report(eid: str, name: str, judged_at: int) -> dict:
    return ev(
        eid,
        "esched.pod.unschedulable",
        {
            "pod": f"t/{name}",
            "reasons": {"Insufficient.cpu": 1},
            "message": "0/1 nodes are available: 1 Insufficient.cpu.",
            "position": judged_at,
        },
    )


async def _lead(tmp_path: Path, events: list[dict]):
    es = open_store(f"sqlite:///{tmp_path / 'd.sqlite'}")
    await es.connect()
    await es.migrate()
    await es.append([NewEvent(e["id"], e["type"], stream_of(e), orjson.dumps(e)) for e in events])
    bus = MemoryBus()
    d = Dispatcher(es, bus, config=DispatchConfig(backoff_base=0.1, tick=0.02))
    await d.start()
    task = asyncio.create_task(d.run())
    await eventually(lambda: d.leading, 5, interval=0.01)
    await asyncio.sleep(0.2)
    return es, bus, d, task


def _work(bus: MemoryBus) -> list[str]:
    return [orjson.loads(m.value)["pod"] for m in bus.log(bus.topics.work)]


async def test_a_new_leader_keeps_unschedulable_pods_parked(tmp_path: Path) -> None:
    # n1 has 1 CPU; big asks for 4 and was judged unschedulable at position 3.
    es, bus, d, task = await _lead(
        tmp_path, [node("n1", "1"), pod("big", "4"), pod("small", "1"), _report("u-big", "big", 3)]
    )
    try:
        assert _work(bus) == ["t/small"]
        assert d.parked == 1 and d.totals.by_cause == {"start": 1}
        # Capacity arrives: the parked pod is published again (after its backoff).
        e = node("n2", "8")
        await es.append([NewEvent(e["id"], e["type"], stream_of(e), orjson.dumps(e))])
        await eventually(
            lambda: _work(bus) == ["t/small", "t/big"], 5, message=lambda: str(_work(bus))
        )
        assert d.parked == 0
    finally:
        await d.stop()
        await task
        await es.close()


async def test_a_report_older_than_the_newest_capacity_event_is_published(tmp_path: Path) -> None:
    # big was judged at position 2; node n2 (capacity) came after: it may fit now.
    es, bus, d, task = await _lead(
        tmp_path, [node("n1", "1"), pod("big", "4"), _report("u-big", "big", 2), node("n2", "8")]
    )
    try:
        assert _work(bus) == ["t/big"] and d.parked == 0
    finally:
        await d.stop()
        await task
        await es.close()


async def test_live_pods_are_published_whether_or_not_their_stream_names_them(
    tmp_path: Path,
) -> None:
    # The live fold takes a pod's key from its stored stream (pod/<ns>/<name>) and
    # decodes the event only when the stream does not name it.
    es, bus, d, task = await _lead(tmp_path, [node("n1", "8")])
    try:
        named, unnamed = pod("a", "1"), pod("b", "1")
        await es.append(
            [
                NewEvent(named["id"], named["type"], stream_of(named), orjson.dumps(named)),
                NewEvent(unnamed["id"], unnamed["type"], "not-a-pod-stream", orjson.dumps(unnamed)),
            ]
        )
        await eventually(lambda: _work(bus) == ["t/a", "t/b"], 5, message=lambda: str(_work(bus)))
        assert d.totals.by_cause == {"pending": 2}
    finally:
        await d.stop()
        await task
        await es.close()


async def _append(es, *events: dict) -> None:
    await es.append([NewEvent(e["id"], e["type"], stream_of(e), orjson.dumps(e)) for e in events])


async def test_a_gated_pod_is_published_once_its_last_gate_is_removed(tmp_path: Path) -> None:
    from support.events import pod_update

    es, bus, d, task = await _lead(tmp_path, [node("n1", "8"), pod("g", "1", gates=["a", "b"])])
    try:
        assert _work(bus) == []  # gated: not work at start
        await _append(es, pod_update("g", ["b"]), pod("marker", "1"))
        # The marker is published after the update was folded: still not work.
        await eventually(lambda: _work(bus) == ["t/marker"], 5, message=lambda: str(_work(bus)))
        await _append(es, pod_update("g", []))
        await eventually(
            lambda: _work(bus) == ["t/marker", "t/g"], 5, message=lambda: str(_work(bus))
        )
    finally:
        await d.stop()
        await task
        await es.close()


async def test_another_scheduler_s_pod_is_neither_parked_nor_published_again(
    tmp_path: Path,
) -> None:
    report = _report("u-other", "other", 2)
    report["data"]["reasons"] = {"OtherScheduler": 1}
    es, bus, d, task = await _lead(tmp_path, [node("n1", "8"), pod("other", "1"), report])
    try:
        # Its newest report says another scheduler's: not parked, not published.
        assert _work(bus) == [] and d.parked == 0
        # Capacity arrives: still not esched's work.
        await _append(es, node("n2", "8"), pod("marker", "1"))
        await eventually(lambda: _work(bus) == ["t/marker"], 5, message=lambda: str(_work(bus)))
        assert d.parked == 0
        # A live report of the same kind: likewise never parked.
        await _append(es, pod("other2", "1"))
        await eventually(lambda: "t/other2" in _work(bus), 5)
        live = _report("u-other2", "other2", 5)
        live["data"]["reasons"] = {"OtherScheduler": 2}
        await _append(es, live, node("n3", "8"), pod("marker2", "1"))
        await eventually(lambda: "t/marker2" in _work(bus), 5)
        assert d.parked == 0 and _work(bus).count("t/other2") == 1
    finally:
        await d.stop()
        await task
        await es.close()
