"""Required pod anti-affinity end to end on ``esched up`` (ingest validation, the
dispatcher, a replica, the commit service): three replicas with anti-affinity on
``kubernetes.io/hostname`` and two nodes, as kube-scheduler places them: two run,
the third stays Pending with kube's message."""

from __future__ import annotations

from pathlib import Path

from esched.services.store.snapshots import fold_log
from support import events
from support.aio import eventually
from support.events import pod
from support.up import pod_phase, unschedulable_report, up_running

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
    async with up_running(url, inputs) as run:
        es = run.store
        data = await eventually(lambda: unschedulable_report(es), within=30)
        assert data["reasons"] == {"InterPodAntiAffinity": 2}
        assert data["message"].startswith(
            "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."
        )

        async def running() -> bool:
            phases = [await pod_phase(es, f"t/web-{i}") for i in range(3)]
            return sorted(map(str, phases)) == ["Pending", "Running", "Running"]

        await eventually(running, within=30)
        state = await fold_log(es)
        nodes = {state.pod(f"t/web-{i}").get("node") for i in range(3)} - {None}
        assert nodes == {"n1", "n2"}
