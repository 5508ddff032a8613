"""The live replica and the simulator decide through one scheduling pass
(core/schedule.py): on the same input they place the same, preempt the same; GPU
devices live: a replica with the FGD profile places device by device on the fold's
devices, its proposals name the devices, and the commit service rejects a device
without room."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from esched.core import load_profile, parse_profile
from esched.core.validation import DEVICE_UNAVAILABLE
from esched.schemas.events import PLACEMENT_COMMITTED
from esched.services.audit import audit_store
from esched.services.bus import Message
from esched.services.bus.memory import MemoryBus
from esched.services.commit import CommitService
from esched.services.dispatch import work_item
from esched.services.replica import Replica
from esched.services.sim.engine import simulate
from esched.services.sim.traces import GIB, Job, NodeSpec, Trace, synthetic
from support.events import append_events, ev
from support.replicas import recording_replica

FGD = parse_profile(
    {
        "profiles": [
            {
                "percentageOfNodesToScore": 100,
                "plugins": {"score": {"disabled": [{"name": "*"}], "enabled": [{"name": "FGD"}]}},
            }
        ]
    }
)


def _static_trace():
    """A synthetic GPU cluster and jobs arriving one per second that all fit at once
    (shares, whole GPUs and CPU-only pods), so the simulator places each on arrival."""
    tr = synthetic(nodes=12, jobs=30, seed=2, load=1.0)
    tr.jobs = [
        dataclasses.replace(j, arrival=float(i), duration=1e9, gpu_models=None, deadline=None)
        for i, j in enumerate(tr.jobs)
    ]
    return tr


FGD_PACK = load_profile(Path(__file__).resolve().parents[2] / "deploy/profiles/fgd-pack.yaml")


@pytest.mark.parametrize("profile", [FGD, FGD_PACK], ids=["fgd", "fgd-pack"])
async def test_a_replica_with_fgd_places_device_by_device_as_the_simulator_does(store, profile):
    tr = _static_trace()
    sim = simulate(tr, profile, record=True, departures=False)
    assert sim.start.tolist() == [float(i) for i in range(len(tr.jobs))]
    assert sim.events is not None
    expected = {
        b["pod"]: (b["node"], b.get("devices", []))
        for e in sim.events
        if e["type"] == "esched.placement.committed"
        for b in e["data"]["bindings"]
    }
    assert sum(1 for _node, devs in expected.values() if devs) > 10
    # The same cluster and pods in a live log, then one batch of work in arrival order.
    inputs = [
        ev(f"in-{i}", e["type"], e["data"])
        for i, e in enumerate(sim.events)
        if e["type"] in ("esched.node.added", "esched.pod.submitted")
    ]
    await append_events(store, *inputs)
    async with recording_replica(store, profile=profile) as (replica, proposed):
        # The replica's one scheduling pass scores by FGD over the fold's devices.
        assert replica.scheduler.fgd_weight == 1 and replica.scheduler.devices is not None
        assert replica.scheduler.fgd_pack == (profile is FGD_PACK)
        head = await store.head()
        topic = replica.bus.topics.work
        msgs = [
            Message(
                topic,
                0,
                i,
                *work_item(
                    "pod",
                    e["data"]["metadata"]["namespace"] + "/" + e["data"]["metadata"]["name"],
                    head,
                ),
            )
            for i, e in enumerate(inputs)
            if e["type"] == "esched.pod.submitted"
        ]
        await replica.handle(msgs)
    assert replica.totals.conflicts == 0 and replica.totals.unschedulable == 0
    assert all(
        "devices" in b
        for p in proposed
        for b in p["bindings"]
        if b["resources"].get("esched.dev/gpu-milli")
    )
    rows = await store.read(0, 1_000_000)
    got = {
        b["pod"]: (b["node"], b.get("devices", []))
        for r in rows
        if r.type == PLACEMENT_COMMITTED
        for b in orjson.loads(r.payload)["data"]["bindings"]
    }
    assert got == expected
    assert (await audit_store(store))["ok"]


async def test_the_commit_service_rejects_a_device_without_room(store):
    gpu = {"esched.dev/gpu-milli": "2000", "cpu": "8", "memory": "8Gi", "pods": "10"}
    node = ev(
        "n",
        "esched.node.added",
        {"metadata": {"name": "g"}, "status": {"allocatable": gpu}},
    )

    def pod(name: str, g: int) -> dict:
        req = {"cpu": "1", "esched.dev/gpu-milli": str(g)}
        return ev(
            f"p-{name}",
            "esched.pod.submitted",
            {
                "metadata": {"name": name, "namespace": "t"},
                "spec": {"containers": [{"name": "c", "resources": {"requests": req}}]},
            },
        )

    def proposal(pid: str, name: str, g: int, devices: list[int]) -> dict:
        return {
            "proposal": pid,
            "replica": "r",
            "position": 3,
            "gang": None,
            "bindings": [
                {
                    "pod": f"t/{name}",
                    "node": "g",
                    "resources": {"cpu": 1000, "esched.dev/gpu-milli": g},
                    "devices": devices,
                }
            ],
        }

    await append_events(store, node, pod("a", 600), pod("b", 600), pod("c", 400))
    commit = CommitService(store)
    try:
        first = await commit.decide([proposal("p1", "a", 600, [0])])
        # b's 600 on device 0 (400 free) is refused; c's 400 fits there.
        second = await commit.decide([proposal("p2", "b", 600, [0]), proposal("p3", "c", 400, [0])])
    finally:
        await commit.stop()
    assert first[0]["type"] == PLACEMENT_COMMITTED
    assert [d["type"] for d in second] == ["esched.placement.rejected", PLACEMENT_COMMITTED]
    assert second[0]["data"]["reason"] == DEVICE_UNAVAILABLE
    assert "device 0 of node g has 400 milli free" in second[0]["data"]["message"]


async def test_a_replica_preempts_as_the_simulator_does(store):
    # One node of 2 CPUs held by a best-effort job; a production job arrives.
    tr = Trace(
        "test",
        "hand",
        [NodeSpec("n0", 2000, 4 * GIB)],
        [
            Job("low", 0.0, 100.0, 2000, GIB, priority=0),
            Job("high", 1.0, 10.0, 2000, GIB, priority=1000),
        ],
    )
    sim = simulate(tr, FGD, record=True, preemption=True)
    assert sim.events is not None and sim.preemptions == 1
    commits = [e for e in sim.events if e["type"] == "esched.placement.committed"]
    by_sim = commits[1]["data"]
    # The live log up to the moment "high" is pending: the same state.
    upto = next(i for i, e in enumerate(sim.events) if e["type"] == "esched.pod.evicted")
    await append_events(
        store, *[ev(f"in-{i}", e["type"], e["data"]) for i, e in enumerate(sim.events[:upto])]
    )
    commit = CommitService(store)
    replica = Replica(store, MemoryBus(), "r1", profile=FGD, submit=commit.decide)
    await replica.start()
    try:
        head = await store.head()
        await replica.handle(
            [Message(replica.bus.topics.work, 0, 0, *work_item("pod", "sim/high", head))]
        )
    finally:
        await replica.stop()
        await commit.stop()
    rows = await store.read(0, 1_000_000)
    live = [orjson.loads(r.payload)["data"] for r in rows if r.type == PLACEMENT_COMMITTED][-1]
    assert [(b["pod"], b["node"]) for b in live["bindings"]] == [
        (b["pod"], b["node"]) for b in by_sim["bindings"]
    ]
    assert live["victims"] == by_sim["victims"] == [{"pod": "sim/low", "node": "n0"}]
    assert (await audit_store(store))["ok"]
