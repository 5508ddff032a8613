"""What a replica's state holds after a long run of pods that come and go.

``python -m esched.services.bench_churn [pods] [live] [nodes] [own|shared]`` (defaults
200,000, 200, 16, own): a replica-like follow of a log where ``pods`` pods are
submitted, placed by key, committed and deleted, ``live`` alive at once, each with a
label value of its own (``run``), beside long-lived pods with required inter-pod
anti-affinity; one in four churned pods a ReplicaSet's (default spread constraints),
one in four anti-affine to its own run (``matchLabelKeys``), one in four zone-spread
over its own run (``shared``: over all churned pods, so the churn brings no new
equivalence class). Prints, at each tenth of the run, the process's resident memory
(MiB), its growth since the churn began, the equivalence classes, and the inter-pod
index's label sets, matchers and count arrays held.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from esched.core import ClusterState, Placer
from esched.schemas import events as ev

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
RES = {"cpu": 10, "memory": 1 << 20, "pods": 1}


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / (1 << 20)


def _pod(name: str, run: str, kind: int, shared: bool = False) -> dict[str, Any]:
    labels = {"run": run, "app": "batch"}
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "10m", "memory": "1Mi"}}}]
    }
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": labels}
    if kind == 1:
        labels["pod-template-hash"] = run
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": run, "controller": True}
        ]
    elif kind == 2:
        term = {"labelSelector": {}, "topologyKey": HOST, "matchLabelKeys": ["run"]}
        spec["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
    elif kind == 3:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": ZONE,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "batch"} if shared else {"run": run}},
            }
        ]
    return {"metadata": meta, "spec": spec}


def run(pods: int, live: int, nodes: int, shared: bool = False) -> None:
    """The churn (see the module docstring), printing a row per tenth."""
    st = ClusterState()
    pos = 0

    def fold(etype: str, data: dict[str, Any]) -> None:
        nonlocal pos
        pos += 1
        st.apply({"type": etype, "id": f"e{pos}", "source": "bench", "data": data}, pos)

    for n in range(nodes):
        labels = {HOST: f"n{n}", ZONE: f"z{n % 3}"}
        alloc = {"cpu": "1000", "memory": "1000Gi", "pods": "100000"}
        fold(
            ev.NODE_ADDED,
            {"metadata": {"name": f"n{n}", "labels": labels}, "status": {"allocatable": alloc}},
        )
    anti = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOST}
    for i in range(nodes // 2):
        fold(
            ev.POD_SUBMITTED,
            {
                "metadata": {"name": f"web{i}", "namespace": "default", "labels": {"app": "web"}},
                "spec": {
                    "nodeName": f"n{i}",
                    "affinity": {
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [anti]
                        }
                    },
                },
            },
        )
    placer = Placer(st)
    start = time.process_time()
    base = _rss_mib()
    print(
        f"{'pods':>8} {'rss MiB':>8} {'+MiB':>6} {'classes':>7} {'lsets':>6} "
        f"{'match':>6} {'arrays':>6}"
    )
    for i in range(pods):
        name = f"c{i}"
        fold(ev.POD_SUBMITTED, _pod(name, f"run-{i}", i % 4, shared))
        got = placer.place(f"default/{name}", assume=False)
        if got is not None:
            fold(
                ev.PLACEMENT_COMMITTED,
                {
                    "proposal": f"p{i}",
                    "replica": "r",
                    "position": 0,
                    "gang": None,
                    "bindings": [{"pod": f"default/{name}", "node": got[0], "resources": RES}],
                },
            )
        if i >= live:
            fold(ev.POD_DELETED, {"metadata": {"name": f"c{i - live}", "namespace": "default"}})
        if (i + 1) % max(pods // 10, 1) == 0:
            rss = _rss_mib()
            ip = st.interpod
            held = sum(1 for x in ip.lsets if x is not None)
            held_m = sum(1 for x in ip.matchers if x is not None)
            arrays = len(ip.counts) + len(ip.owners) + len(ip.scored)
            print(
                f"{i + 1:>8} {rss:>8.1f} {rss - base:>6.1f} {len(st.class_index):>7} "
                f"{held:>6} {held_m:>6} {arrays:>6}",
                flush=True,
            )
    print(f"cpu {time.process_time() - start:.1f} s")


def main(argv: list[str]) -> None:
    """The command line (see the module docstring)."""
    run(
        int(argv[0]) if argv else 200_000,
        int(argv[1]) if len(argv) > 1 else 200,
        int(argv[2]) if len(argv) > 2 else 16,
        len(argv) > 3 and argv[3] == "shared",
    )


if __name__ == "__main__":
    main(sys.argv[1:])
