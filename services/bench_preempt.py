"""``esched bench preempt``: the cost of planning a preemption on a full cluster.

A synthetic cluster is filled to the brim with running pods of mixed bands
(best-effort, batch, production: one third each, one in ten batch pods in a
gang of 4 with minMember 4) and a stream of production pods that fit nowhere
asks for room. Reported per plan: the time of :meth:`Placer.plan_preemption`
(assumed, so consecutive plans never pick the same victims) and, as the
baseline measured in the same process, the time of a full-scan ``place`` that
finds no node (what a replica pays anyway before it considers preemption).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from esched.core._placer import Placer
from esched.core._state import ClusterState
from esched.schemas.events import NODE_ADDED, POD_SUBMITTED, PODGROUP_SUBMITTED

__all__ = ["run_preempt_bench"]

GI = 2**30
_BANDS = (0, 100, 1000)  # best-effort, batch, production priorities


def _cluster(nodes: int, per_node: int, seed: int) -> ClusterState:
    rng = np.random.default_rng(seed)
    st = ClusterState()
    pos = 0

    def fold(etype: str, data: dict) -> None:
        nonlocal pos
        pos += 1
        st.apply({"type": etype, "id": f"b{pos}", "data": data}, pos)

    cpu = 4 * per_node
    for n in range(nodes):
        fold(
            NODE_ADDED,
            {
                "metadata": {"name": f"n{n}"},
                "status": {"allocatable": {"cpu": str(cpu), "memory": "256Gi", "pods": "110"}},
            },
        )
    gangs = 0
    for n in range(nodes):
        for i in range(per_node):
            prio = int(rng.choice(_BANDS))
            meta: dict[str, Any] = {"name": f"r{n}-{i}", "namespace": "b"}
            if prio == 100 and rng.random() < 0.1:
                gangs += 1
                fold(
                    PODGROUP_SUBMITTED,
                    {"metadata": {"name": f"g{gangs}", "namespace": "b"}, "spec": {"minMember": 1}},
                )
                meta["annotations"] = {"scheduling.k8s.io/group-name": f"g{gangs}"}
            fold(
                POD_SUBMITTED,
                {
                    "metadata": meta,
                    "spec": {
                        "nodeName": f"n{n}",
                        "priority": prio,
                        "containers": [
                            {"name": "c", "resources": {"requests": {"cpu": "4", "memory": "8Gi"}}}
                        ],
                    },
                },
            )
    return st


def run_preempt_bench(
    nodes: int = 2000, per_node: int = 8, plans: int = 200, seed: int = 0
) -> dict[str, Any]:
    """Plan ``plans`` preemptions for 8-cpu production pods on a full cluster."""
    t0 = time.perf_counter()
    st = _cluster(nodes, per_node, seed)
    built = time.perf_counter() - t0
    pos = st.position
    for j in range(plans):
        pos += 1
        st.apply(
            {
                "type": POD_SUBMITTED,
                "id": f"p{j}",
                "data": {
                    "metadata": {"name": f"prod-{j}", "namespace": "b"},
                    "spec": {
                        "priority": 1000,
                        "containers": [
                            {"name": "c", "resources": {"requests": {"cpu": "8", "memory": "16Gi"}}}
                        ],
                    },
                },
            },
            pos,
        )
    keys = [f"b/prod-{j}" for j in range(plans)]
    scan = Placer(st, seed=seed, sample=False, cache=False)
    t1 = time.perf_counter()
    misses = sum(scan.place(k, assume=False) is None for k in keys)
    place_s = time.perf_counter() - t1
    placer = Placer(st, seed=seed)
    t2 = time.perf_counter()
    got = [placer.plan_preemption(k) for k in keys]
    plan_s = time.perf_counter() - t2
    done = [g for g in got if g is not None]
    victims = sum(len(g["victims"]) + len(g["collateral"]) for g in done)
    return {
        "nodes": nodes,
        "running_pods": nodes * per_node,
        "plans": plans,
        "planned": len(done),
        "victims_per_plan": round(victims / max(len(done), 1), 2),
        "highest_victim_band": max((g["cost"]["band"] for g in done), default=None),
        "preempt_us_per_plan": round(plan_s / plans * 1e6, 1),
        "baseline_full_scan_us_per_pod": round(place_s / plans * 1e6, 1),
        "baseline_misses": misses,
        "ratio_to_full_scan": round(plan_s / place_s, 2) if place_s else None,
        "build_seconds": round(built, 2),
    }
