"""Required pod anti-affinity end to end on ``esched up`` (ingest validation, the
dispatcher, a replica, the commit service): three replicas with anti-affinity on
``kubernetes.io/hostname`` and two nodes, as kube-scheduler places them: two run,
the third stays Pending with kube's message."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from esched.schemas.events import POD_UNSCHEDULABLE
from esched.services.bus.base import TopicNames
from esched.services.event_files import record_for_event
from esched.services.store import open_store
from esched.services.store.snapshots import fold_log
from esched.services.up import Up, UpConfig
from support import events
from support.aio import eventually
from support.events import pod

HOST = "kubernetes.io/hostname"


def _replica(i: int) -> dict:
    e = pod(f"web-{i}", "1")
    e["data"]["metadata"]["labels"] = {"app": "web"}
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOST}
    e["data"]["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    }
    return e


async def test_three_anti_affine_replicas_on_two_nodes_leave_one_pending(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.sqlite'}"
    inputs = [events.node(n, "4", labels={HOST: n}) for n in ("n1", "n2")]
    inputs += [_replica(i) for i in range(3)]
    records = [record_for_event(e, TopicNames(), "test") for e in inputs]
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

        data = await eventually(report, within=30)
        assert data["reasons"] == {"InterPodAntiAffinity": 2}
        assert data["message"].startswith(
            "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."
        )

        async def running() -> bool:
            state = await fold_log(es)
            phases = [state.pod(f"t/web-{i}")["phase"] for i in range(3)]
            return sorted(phases) == ["Pending", "Running", "Running"]

        await eventually(running, within=30)
        state = await fold_log(es)
        nodes = {state.pod(f"t/web-{i}").get("node") for i in range(3)} - {None}
        assert nodes == {"n1", "n2"}
    finally:
        await es.close()
        await runner.stop()
        await asyncio.wait_for(task, 20)
