"""Scheduling gates end to end on ``esched up``: a gated pod stays Pending (never
reported unschedulable), an ``esched.pod.updated`` removing its last gate releases
it, and the dispatcher's wake-up gets it placed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from esched.schemas.events import POD_UNSCHEDULABLE, stream_of
from esched.services.bus.base import TopicNames
from esched.services.event_files import record_for_event
from esched.services.store import NewEvent, open_store
from esched.services.store.snapshots import fold_log
from esched.services.up import Up, UpConfig
from support import events
from support.aio import eventually
from support.events import pod, pod_update


async def test_a_gated_pod_waits_until_an_update_removes_its_gates(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'g.sqlite'}"
    records = [
        record_for_event(e, TopicNames(), "test")
        for e in (
            events.node("n1", "4"),
            pod("gated", "1", gates=["example.com/quota", "b"]),
            pod("free", "1"),
        )
    ]
    runner = Up(UpConfig(store=url, progress_every=0), records)
    task = asyncio.create_task(runner.run())
    es = open_store(url)
    await es.connect()
    await es.migrate()
    try:

        async def phase(key: str) -> str | None:
            rec = (await fold_log(es)).pod(key)
            return rec["phase"] if rec else None

        await eventually(lambda: _is(phase("t/free"), "Running"), within=20)
        state = await fold_log(es)
        assert state.pod("t/gated")["phase"] == "Pending"
        assert state.gated == {"t/gated": ("example.com/quota", "b")}

        async def append(e: dict) -> None:
            await es.append([NewEvent(e["id"], e["type"], stream_of(e), orjson.dumps(e))])

        # One gate removed: still gated, still Pending.
        await append(pod_update("gated", ["b"]))
        await eventually(lambda: _gated_is(es, ("b",)), within=10)
        assert await phase("t/gated") == "Pending"
        # The last gate removed: the dispatcher wakes and the pod is placed.
        await append(pod_update("gated", []))
        await eventually(lambda: _is(phase("t/gated"), "Running"), within=20)
        assert not task.done()
    finally:
        await es.close()
        await runner.stop()
        summary = await asyncio.wait_for(task, 20)
    assert summary["placed"] == 2
    # Published once each: the gated pod only after its release (the update's wake-up).
    assert summary["dispatch"]["published"] == 2
    # Gated is not unschedulable: nothing was reported for it.
    assert summary["unschedulable_reports"] == 0


async def _is(value, want) -> bool:
    return (await value) == want


async def _gated_is(es, want) -> bool:
    return (await fold_log(es)).gated.get("t/gated") == want


async def test_a_pod_naming_another_scheduler_stays_pending_with_that_reason(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'o.sqlite'}"
    theirs = pod("theirs", "1")
    theirs["data"]["spec"]["schedulerName"] = "someone-else"
    records = [
        record_for_event(e, TopicNames(), "test")
        for e in (events.node("n1", "4"), theirs, pod("mine", "1"))
    ]
    runner = Up(UpConfig(store=url, progress_every=0), records)
    task = asyncio.create_task(runner.run())
    es = open_store(url)
    await es.connect()
    await es.migrate()
    try:

        async def report() -> dict | None:
            for r in await es.read(0, 10_000):
                if r.type == POD_UNSCHEDULABLE:
                    return orjson.loads(r.payload)["data"]
            return None

        data = await eventually(report, within=20)
        assert data["pod"] == "t/theirs" and data["reasons"] == {"OtherScheduler": 1}
        assert "'someone-else'" in data["message"]
        state = await fold_log(es)
        assert state.pod("t/theirs")["phase"] == "Pending"
        await eventually(lambda: _is(_phase(es, "t/mine"), "Running"), within=20)
    finally:
        await es.close()
        await runner.stop()
        await asyncio.wait_for(task, 20)


async def _phase(es, key: str) -> str | None:
    rec = (await fold_log(es)).pod(key)
    return rec["phase"] if rec else None
