"""Quincy live: a replica in round mode (``ReplicaConfig.quincy``, ``--policy
quincy``) places each batch of work as one min-cost-flow round (core/quincy.py
``QuincyRounds``), proposes the round's placements to the commit service like any
pass's, and leaves what the round did not place to the one scheduling pass (reasons,
gangs it does not model)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from esched.core.quincy import QuincyConfig
from esched.schemas.events import PLACEMENT_COMMITTED, POD_UNSCHEDULABLE
from esched.services.audit import audit_store
from esched.services.bus import Message
from esched.services.bus.base import TopicNames
from esched.services.cli import cli
from esched.services.dispatch import work_item
from esched.services.event_files import record_for_event
from esched.services.replica import Replica, ReplicaConfig
from esched.services.store.snapshots import fold_log
from esched.services.up import Up, UpConfig
from support.events import append_events, node, pod, podgroup
from support.replicas import recording_replica

pytest.importorskip("ortools")


def _inputs() -> list[dict]:
    # 8 CPUs in all; a (2 CPUs) comes before b (4 CPUs): placed one at a time by
    # LeastAllocated, a takes the emptiest node (n2) and b then fits nowhere; the
    # round places both (a on a 2-CPU node), and the gang on the node left.
    # "big" fits no node: the pass reports it with kube's reasons.
    return [
        node("n1", "2"),
        node("n2", "4"),
        node("n3", "2"),
        pod("a", "2"),
        pod("b", "4"),
        podgroup("g", 2),
        pod("g-0", "1", "g"),
        pod("g-1", "1", "g"),
        pod("big", "8"),
    ]


async def _one_batch(store, config: ReplicaConfig) -> tuple[Replica, list[dict]]:
    """The inputs in the log, then every pod as one batch of work for one replica."""
    inputs = _inputs()
    await append_events(store, *inputs)
    async with recording_replica(store, config=config) as (replica, proposed):
        head = await store.head()
        topic = replica.bus.topics.work
        pods = [e["data"]["metadata"]["name"] for e in inputs if e["type"].endswith("submitted")]
        pods = [p for p in pods if p != "g"]
        msgs = [Message(topic, 0, i, *work_item("pod", f"t/{p}", head)) for i, p in enumerate(pods)]
        await replica.handle(msgs)
    return replica, proposed


async def _placed(store) -> dict[str, str]:
    rows = await store.read(0, 1_000_000)
    return {
        b["pod"]: b["node"]
        for r in rows
        if r.type == PLACEMENT_COMMITTED
        for b in orjson.loads(r.payload)["data"]["bindings"]
    }


async def test_a_replica_in_round_mode_places_the_batch_by_min_cost_flow(store):
    replica, proposed = await _one_batch(store, ReplicaConfig(quincy=QuincyConfig()))
    placed = await _placed(store)
    # Every pod that fits somewhere runs: the round placed what one-at-a-time did not.
    assert set(placed) == {"t/a", "t/b", "t/g-0", "t/g-1"}
    assert placed["t/b"] == "n2" and placed["t/a"] in ("n1", "n3")
    assert placed["t/g-0"] == placed["t/g-1"] != placed["t/a"]
    # One proposal per job, the gang's as one (all or nothing), all committed.
    assert sorted(len(p["bindings"]) for p in proposed) == [1, 1, 2]
    assert [p["gang"] for p in proposed if len(p["bindings"]) == 2] == ["t/g"]
    assert replica.totals.conflicts == 0 and replica.totals.committed == 3
    stats = replica.stats()["quincy"]
    assert stats["rounds"] == 1 and stats["placed"] == 4 and stats["to_pass"] == 1
    # The pod no node fits went to the pass, which reported it with kube's reasons.
    rows = await store.read(0, 1_000_000)
    reports = [orjson.loads(r.payload)["data"] for r in rows if r.type == POD_UNSCHEDULABLE]
    assert [r["pod"] for r in reports] == ["t/big"]
    assert reports[0]["reasons"] == {"Insufficient.cpu": 3}
    assert (await audit_store(store))["ok"]


async def test_the_one_pass_alone_leaves_the_larger_pod_pending(store):
    # The contrast: the same batch through the scheduling pass (no rounds).
    replica, _ = await _one_batch(store, ReplicaConfig())
    placed = await _placed(store)
    assert placed["t/a"] == "n2" and "t/b" not in placed
    assert replica.rounds is None and "quincy" not in replica.stats()


async def test_esched_up_with_quincy_rounds_places_everything_that_fits(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'q.sqlite'}"
    inputs = [node(f"n{i}", "4") for i in range(4)]
    inputs += [pod(f"p{i}", "1") for i in range(10)]
    inputs += [podgroup("g", 3)] + [pod(f"g-{i}", "1", "g") for i in range(3)]
    records = [record_for_event(e, TopicNames(), "test") for e in inputs]
    runner = Up(
        UpConfig(store=url, progress_every=0, exit_when_idle=True, quincy=QuincyConfig()),
        records,
    )
    summary = await asyncio.wait_for(runner.run(), 60)
    assert summary["placed"] == 13 and summary["unschedulable"] == 0
    assert summary["replay"]["pods"]["Running"] == 13
    stats = summary["replica_stats"][0]["quincy"]
    assert stats["rounds"] >= 1 and stats["placed"] >= 1
    state = await _fold(url)
    assert {state.pod(f"t/g-{i}")["phase"] for i in range(3)} == {"Running"}


async def _fold(url: str):
    from esched.services.store import open_store

    es = open_store(url)
    await es.connect()
    try:
        return await fold_log(es)
    finally:
        await es.close()


def test_cli_replica_and_up_take_the_round_policy(tmp_path: Path):
    for command in ("replica", "up"):
        res = CliRunner().invoke(cli, [command, "--help"])
        assert res.exit_code == 0 and "--policy [pass|quincy]" in res.output
    res = CliRunner().invoke(
        cli,
        [
            "up",
            "--store",
            f"sqlite:///{tmp_path / 'u.sqlite'}",
            "--generate",
            "4:12",
            "--policy",
            "quincy",
            "--quincy-fairness",
            "none",
            "--exit-when-idle",
            "--quiet",
        ],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["placed"] >= 1 and out["placed"] + out["unschedulable"] == 12
    assert out["replica_stats"][0]["quincy"]["rounds"] >= 1


async def test_round_mode_places_gpu_devices_the_commit_service_accepts(store):
    # The FGD profile turns on the fold's GPU devices: the round fits GPU shares and
    # whole GPUs device by device, each binding names its devices, and the commit
    # service (which checks named devices) accepts every one.
    from esched.core import parse_profile
    from esched.services.sim.engine import simulate
    from esched.services.sim.traces import synthetic
    from support.events import ev

    fgd = parse_profile(
        {
            "profiles": [
                {
                    "percentageOfNodesToScore": 100,
                    "plugins": {
                        "score": {"disabled": [{"name": "*"}], "enabled": [{"name": "FGD"}]}
                    },
                }
            ]
        }
    )
    tr = synthetic(nodes=12, jobs=30, seed=2, load=1.0)
    sim = simulate(tr, fgd, record=True, departures=False)
    assert sim.events is not None
    inputs = [
        ev(f"in-{i}", e["type"], e["data"])
        for i, e in enumerate(sim.events)
        if e["type"] in ("esched.node.added", "esched.pod.submitted")
    ]
    await append_events(store, *inputs)
    async with recording_replica(
        store, profile=fgd, config=ReplicaConfig(quincy=QuincyConfig())
    ) as (replica, proposed):
        assert replica.rounds is not None and replica.rounds.policy.devices is not None
        head = await store.head()
        topic = replica.bus.topics.work
        keys = [
            e["data"]["metadata"]["namespace"] + "/" + e["data"]["metadata"]["name"]
            for e in inputs
            if e["type"] == "esched.pod.submitted"
        ]
        msgs = [Message(topic, 0, i, *work_item("pod", k, head)) for i, k in enumerate(keys)]
        await replica.handle(msgs)
    assert replica.totals.conflicts == 0 and replica.totals.committed > 0
    assert replica.stats()["quincy"]["placed"] > 0
    gpu = [b for p in proposed for b in p["bindings"] if b["resources"].get("esched.dev/gpu-milli")]
    assert gpu and all("devices" in b for b in gpu)
    assert (await audit_store(store))["ok"]
