"""Scheduling gates end to end on ``esched up``: a gated pod stays Pending (never
reported unschedulable), an ``esched.pod.updated`` removing its last gate releases
it, and the dispatcher's wake-up gets it placed."""

from __future__ import annotations

from pathlib import Path

import orjson

from esched.schemas.events import stream_of
from esched.services.store import NewEvent
from esched.services.store.snapshots import fold_log
from support import events
from support.aio import eventually
from support.events import pod, pod_update
from support.up import equals, pod_phase, unschedulable_report, up_running


async def test_a_gated_pod_waits_until_an_update_removes_its_gates(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'g.sqlite'}"
    inputs = [
        events.node("n1", "4"),
        pod("gated", "1", gates=["example.com/quota", "b"]),
        pod("free", "1"),
    ]
    async with up_running(url, inputs) as run:
        es = run.store
        await eventually(lambda: equals(pod_phase(es, "t/free"), "Running"), within=20)
        state = await fold_log(es)
        assert state.pod("t/gated")["phase"] == "Pending"
        assert state.gated == {"t/gated": ("example.com/quota", "b")}

        async def append(e: dict) -> None:
            await es.append([NewEvent(e["id"], e["type"], stream_of(e), orjson.dumps(e))])

        # One gate removed: still gated, still Pending.
        await append(pod_update("gated", ["b"]))
        await eventually(lambda: _gated_is(es, ("b",)), within=10)
        assert await pod_phase(es, "t/gated") == "Pending"
        # The last gate removed: the dispatcher wakes and the pod is placed.
        await append(pod_update("gated", []))
        await eventually(lambda: equals(pod_phase(es, "t/gated"), "Running"), within=20)
        assert not run.task.done()
    summary = run.summary
    assert summary is not None and summary["placed"] == 2
    # Published once each: the gated pod only after its release (the update's wake-up).
    assert summary["dispatch"]["published"] == 2
    # Gated is not unschedulable: nothing was reported for it.
    assert summary["unschedulable_reports"] == 0


async def _gated_is(es, want) -> bool:
    return (await fold_log(es)).gated.get("t/gated") == want


async def test_a_pod_naming_another_scheduler_stays_pending_with_that_reason(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'o.sqlite'}"
    theirs = pod("theirs", "1")
    theirs["data"]["spec"]["schedulerName"] = "someone-else"
    inputs = [events.node("n1", "4"), theirs, pod("mine", "1")]
    async with up_running(url, inputs) as run:
        es = run.store
        data = await eventually(lambda: unschedulable_report(es), within=20)
        assert data["pod"] == "t/theirs" and data["reasons"] == {"OtherScheduler": 1}
        assert "'someone-else'" in data["message"]
        state = await fold_log(es)
        assert state.pod("t/theirs")["phase"] == "Pending"
        await eventually(lambda: equals(pod_phase(es, "t/mine"), "Running"), within=20)
