"""`esched up`: the whole system in one process on the embedded default.

Generated workloads end to end through the CLI (all placeable pods placed, the
audit passes, a second run continues), gangs all-or-nothing, and the
unschedulable path (reported once with reasons, not retried until capacity frees).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import orjson

from esched.core import ClusterState, Placer
from esched.schemas.events import POD_UNSCHEDULABLE, stream_of
from esched.services.audit import audit_store
from esched.services.bus.base import TopicNames
from esched.services.event_files import record_for_event
from esched.services.procs import CLI
from esched.services.store import NewEvent, open_store
from esched.services.store.snapshots import fold_log
from esched.services.up import Up, UpConfig, parse_generate
from support import events
from support.aio import eventually
from support.events import ev, pod, podgroup


def node(name: str, cpu: str) -> dict:
    return events.node(name, cpu, memory="64Gi", pods="110")


def esched(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def placeable_pending(state: ClusterState) -> list[str]:
    """Pending pods (outside gangs) that some node would take now."""
    placer = Placer(state)
    return [
        p
        for p in state.pending_pods()
        if state.pod(p)["gang"] is None and placer.place(p, assume=False) is not None
    ]


async def unschedulable_events(url: str) -> list[dict]:
    es = open_store(url)
    await es.connect()
    try:
        await es.migrate()
        rows = await es.read(0, 1_000_000)
    finally:
        await es.close()
    return [orjson.loads(r.payload) for r in rows if r.type == POD_UNSCHEDULABLE]


def test_parse_generate() -> None:
    assert parse_generate("10:200") == (10, 200)
    for bad in ("10", "a:b", "10:-1"):
        try:
            parse_generate(bad)
        except ValueError:
            continue
        raise AssertionError(bad)


async def test_up_generate_places_all_placeable_audits_and_continues(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'up.sqlite'}"
    first = esched("up", "--store", url, "--generate", "20:600", "--exit-when-idle")
    assert first.returncode == 0, first.stderr
    s1 = json.loads(first.stdout)
    assert "esched up:" in first.stderr  # progress on stderr
    assert s1["ingest"]["stored"] == 620
    assert s1["placed"] > 0 and s1["unschedulable"] > 0  # a contended cluster
    assert s1["replay"]["pods"]["Running"] == s1["placed"]
    assert s1["placed"] + s1["replay"]["pods"]["Pending"] == 600
    assert s1["pods_per_second"] > 0
    es = open_store(url)
    await es.connect()
    try:
        assert placeable_pending(await fold_log(es)) == []
        assert (await audit_store(es))["ok"]
    finally:
        await es.close()
    audit = esched("audit", "--store", url)
    assert audit.returncode == 0, audit.stdout

    # Same store, a bigger cluster, two replicas sharing the in-process work: old input
    # dedupes, the new nodes take pending pods.
    second = esched(
        "up",
        "--store",
        url,
        "--generate",
        "30:700",
        "--replicas",
        "2",
        "--exit-when-idle",
        "--quiet",
    )
    assert second.returncode == 0, second.stderr
    s2 = json.loads(second.stdout)
    assert second.stderr.count("esched up:") == 0
    assert s2["log_head_before"] > 0
    assert s2["ingest"]["duplicates"] == 620 and s2["ingest"]["stored"] == 110
    assert s2["placed"] > 0 and len(s2["replica_stats"]) == 2
    assert s2["replay"]["pods"]["Running"] == s1["placed"] + s2["placed"]
    es = open_store(url)
    await es.connect()
    try:
        state = await fold_log(es)
        assert placeable_pending(state) == []
        report = await audit_store(es)
        assert report["ok"], report["violations"][:5]
        assert report["checked"]["committed"] == s1["placed"] + s2["placed"]  # one pod each
    finally:
        await es.close()


async def test_up_gangs_all_or_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gang.sqlite'}"
    events = [
        node("n1", "4"),
        node("n2", "4"),
        podgroup("ga", 3),
        *(pod(f"a{i}", "2", "ga") for i in range(3)),
        podgroup("gb", 3),
        *(pod(f"b{i}", "2", "gb") for i in range(3)),
        # gc has only 2 of its 3 members: never placed, never even tried.
        podgroup("gc", 3),
        *(pod(f"c{i}", "1", "gc") for i in range(2)),
    ]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    res = esched("up", "--store", url, "--input", str(path), "--exit-when-idle")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    gangs = summary["replay"]["gangs"]
    running = sorted(gangs[g]["Running"] for g in ("t/ga", "t/gb"))
    assert running == [0, 3]  # 8 cpu: one gang of 3 x 2 cpu fits, never parts of both
    assert gangs["t/gc"]["Running"] == 0 and gangs["t/gc"]["Pending"] == 2
    loser = "t/ga" if gangs["t/ga"]["Running"] == 0 else "t/gb"
    reports = await unschedulable_events(url)
    reported = {e["data"]["pod"] for e in reports}
    assert reported == {f"t/{loser[-1]}{i}" for i in range(3)}
    assert all("GangUnschedulable" in e["data"]["reasons"] for e in reports)
    audit = esched("audit", "--store", url)
    assert audit.returncode == 0, audit.stdout
    assert json.loads(audit.stdout)["checked"]["gang_decisions"] == 1


async def test_unschedulable_reported_once_then_placed_when_capacity_frees(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'u.sqlite'}"
    topics = TopicNames()
    records = [
        record_for_event(e, topics, "test")
        for e in (node("n1", "2"), pod("big", "8"), pod("small", "1"))
    ]
    runner = Up(UpConfig(store=url, progress_every=0), records)
    task = asyncio.create_task(runner.run())
    try:

        async def reported() -> list[dict]:
            assert not task.done()
            return await unschedulable_events(url)

        await eventually(reported, 15, interval=0.1, message="no unschedulable report")
        # No capacity change: the pod is parked, not retried (however long we wait).
        await asyncio.sleep(1.5)
        reports = await unschedulable_events(url)
        assert len(reports) == 1
        data = reports[0]["data"]
        assert data["pod"] == "t/big"
        assert data["reasons"] == {"Insufficient.cpu": 1}
        # The code counts, the message is kube-scheduler's words.
        assert data["message"] == "0/1 nodes are available: 1 Insufficient cpu."
        # Capacity arrives: the dispatcher re-publishes and the pod is placed.
        es = open_store(url)
        await es.connect()
        try:
            big = node("n2", "16")
            await es.append([NewEvent(big["id"], big["type"], stream_of(big), orjson.dumps(big))])

            async def big_running() -> ClusterState | None:
                assert not task.done()
                state = await fold_log(es)
                return state if state.pod("t/big")["phase"] == "Running" else None

            state = await eventually(big_running, 15, interval=0.1, message="t/big not placed")
            assert state.pod("t/big")["node"] == "n2"
            assert state.pod("t/small")["phase"] == "Running"
        finally:
            await es.close()
    finally:
        await runner.stop()
        summary = await asyncio.wait_for(task, 20)
    assert summary["placed"] == 2 and summary["unschedulable"] == 0
    assert summary["unschedulable_reports"] == 1
    assert summary["dispatch"]["by_cause"].get("retry") == 1


def test_service_commands_need_kafka_and_document_themselves() -> None:
    from click.testing import CliRunner

    from esched.services.cli import EXIT_USAGE, cli

    runner = CliRunner()
    for args in (["replica", "--id", "r1"], ["dispatch"]):
        res = runner.invoke(cli, args, env={"ESCHED_KAFKA": ""})
        assert res.exit_code == EXIT_USAGE, res.output
        assert "--kafka" in res.output
    for cmd in ("replica", "dispatch", "up"):
        res = runner.invoke(cli, [cmd, "--help"])
        assert res.exit_code == 0 and "Usage:" in res.output
    res = runner.invoke(cli, ["up", "--generate", "nope"])
    assert res.exit_code == EXIT_USAGE and "NODES:PODS" in res.output


async def test_dispatcher_publishes_pending_work_by_cause(tmp_path: Path) -> None:
    from esched.services.bus.memory import MemoryBus
    from esched.services.dispatch import DispatchConfig, Dispatcher

    es = open_store(f"sqlite:///{tmp_path / 'd.sqlite'}")
    await es.connect()
    await es.migrate()
    bus = MemoryBus()
    d = Dispatcher(es, bus, config=DispatchConfig(backoff_base=0.2, tick=0.02))
    await d.start()
    task = asyncio.create_task(d.run())

    async def add(*events: dict) -> None:
        await es.append(
            [NewEvent(e["id"], e["type"], stream_of(e), orjson.dumps(e)) for e in events]
        )

    async def items(n: int) -> list[dict]:
        await eventually(
            lambda: len(bus.log(bus.topics.work)) >= n,
            5,
            message=lambda: str([m.value for m in bus.log(bus.topics.work)]),
        )
        await asyncio.sleep(0.1)
        got = [orjson.loads(m.value) for m in bus.log(bus.topics.work)]
        assert len(got) == n, got
        return got

    try:
        await eventually(lambda: d.leading, 5, interval=0.01)
        await add(node("n1", "4"), pod("p1", "1"))
        first = (await items(1))[-1]
        assert first["pod"] == "t/p1" and first["position"] >= 2
        # A gang is work only once its members can reach minMember: one item, for the gang.
        await add(podgroup("g", 2), pod("g1", "1", "g"))
        await asyncio.sleep(0.2)
        assert len(bus.log(bus.topics.work)) == 1
        await add(pod("g2", "1", "g"))
        assert (await items(2))[-1] == {"gang": "t/g", "position": 5}
        # Bound, then its node goes away: the pod is pending again.
        commit = ev(
            "c1",
            "esched.placement.committed",
            {
                "proposal": "x",
                "replica": "r",
                "position": 5,
                "gang": None,
                "bindings": [{"pod": "t/p1", "node": "n1", "resources": {"cpu": 1000}}],
            },
        )
        await add(commit, ev("rm-n1", "esched.node.removed", {"metadata": {"name": "n1"}}))
        assert (await items(3))[-1]["pod"] == "t/p1"
        # Unschedulable: parked until capacity frees (never re-published before).
        report = ev(
            "u1",
            "esched.pod.unschedulable",
            {"pod": "t/p1", "reasons": {"NoNodes": 1}, "message": "no nodes", "position": 8},
        )
        await add(report)
        await asyncio.sleep(0.4)
        assert len(bus.log(bus.topics.work)) == 3 and d.parked == 1 and d.idle()
        await add(node("n2", "4"))
        assert (await items(4))[-1]["pod"] == "t/p1"
        assert d.totals.by_cause == {"pending": 3, "retry": 1}
    finally:
        await d.stop()
        await asyncio.wait_for(task, 5)
        await es.close()
