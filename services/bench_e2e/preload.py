"""Databases, the preloaded cluster, and the pods the benchmark publishes."""

from __future__ import annotations

import random
from typing import Any

import asyncpg
import orjson

from esched.schemas.events import PLACEMENT_COMMITTED, POD_SUBMITTED, namespaced_key, stream_of
from esched.services.store import open_store
from esched.services.store.base import NewEvent
from esched.services.store.snapshots import fold_log, save_snapshot
from esched.services.synth import cluster_log, pod_event

#: Partitions of every topic: at least the largest replica count, so each replica
#: owns work partitions.
PARTITIONS = 8
#: Cores of a synthetic node on average (:func:`~esched.services.synth.cluster_log`:
#: 8, 16, 32 or 64) and of a synthetic pod's request (:func:`pod_payloads`: 0.1-4).
NODE_CORES = 30
POD_CORES = 2.05
#: Pods per replica of each warm-up wave (published until every replica has placed).
WARMUP_PODS_PER_REPLICA = 50


def room_shortfall(nodes: int, fill: float, pods: int) -> str | None:
    """Why ``pods`` synthetic pods would not fit a preloaded cluster of ``nodes``
    filled to ``fill`` (their CPU requests on average beyond its free cores), or None."""
    free = nodes * NODE_CORES * (1.0 - fill)
    asked = pods * POD_CORES
    if asked <= free:
        return None
    return (
        f"{pods} pods ask ~{asked:,.0f} cores on average, more than the ~{free:,.0f} "
        f"free on {nodes} nodes filled to {fill}: fewer --pods, more --nodes or less --fill"
    )


async def admin(server: str, sql: str) -> None:
    """Run ``sql`` on the server's ``postgres`` database (create, drop)."""
    conn = await asyncpg.connect(f"{server}/postgres", timeout=10)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def preload(store_url: str, nodes: int, fill: float, seed: int = 0) -> dict[str, Any]:
    """Write ``nodes`` nodes and running pods up to ``fill`` of the CPU into an empty
    store, then a state snapshot. Returns what was written."""
    pods = int(nodes * NODE_CORES * fill / POD_CORES)
    store = open_store(store_url)
    await store.connect()
    try:
        await store.migrate()
        batch: list[NewEvent] = []
        # Only pods that got a node: a pending pod in the preload would be work.
        events = (e for e in cluster_log(nodes, pods, seed=seed, finish_every=0))
        pending: dict[str, dict] = {}
        for ev in events:
            if ev["type"] == POD_SUBMITTED:
                pending[f"synth/{ev['data']['metadata']['name']}"] = ev
                continue
            if ev["type"] == PLACEMENT_COMMITTED:
                sub = pending.pop(ev["data"]["bindings"][0]["pod"])
                batch.append(NewEvent(sub["id"], sub["type"], stream_of(sub), orjson.dumps(sub)))
            batch.append(NewEvent(ev["id"], ev["type"], stream_of(ev), orjson.dumps(ev)))
            if len(batch) >= 5000:
                await store.append(batch)
                batch = []
        if batch:
            await store.append(batch)
        state = await fold_log(store, use_snapshot=False)
        await save_snapshot(store, state)
        nodes_ = state.summary()["nodes"]
        return {
            "events": int(state.position),
            "nodes": nodes_["count"],
            "running_pods": pods - len(pending),
            "cpu_utilization": round(nodes_["allocated"]["cpu"] / nodes_["allocatable"]["cpu"], 4),
        }
    finally:
        await store.close()


def pod_payloads(n: int, namespace: str, seed: int) -> list[tuple[str, bytes]]:
    """``n`` synthetic pod submissions in ``namespace``: (key, JSON) records."""
    rng = random.Random(seed)
    out = []
    for j in range(n):
        ev = pod_event(j, rng, namespace)
        out.append((namespaced_key(namespace, f"pod-{j}"), orjson.dumps(ev)))
    return out


def job_payloads(
    n: int, namespace: str, seed: int, size: int, source: str = "esched-bench"
) -> tuple[list[tuple[str, bytes]], list[str]]:
    """``n`` pods as Volcano Jobs of ``size`` pods each (one task, ``minAvailable`` its
    replicas: a gang; the pods of a job ask what the job's first synthetic pod asks):
    the (key, JSON) record of each Job (to the pods topic; the Job implies its
    PodGroup and its pods, which Volcano's controller creates on its submission), and
    the keys of the pods to come."""
    from esched.schemas.events import JOB_SUBMITTED, envelope, message_key
    from esched.schemas.manifests import volcano_job_objects

    rng = random.Random(seed)
    records: list[tuple[str, bytes]] = []
    pods: list[str] = []
    for j in range(0, n, size):
        spec = pod_event(j, rng, namespace)["data"]["spec"]
        spec["containers"][0]["image"] = "bench"
        job = {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": f"job-{j}", "namespace": namespace},
            "spec": {
                "tasks": [{"name": "w", "replicas": min(size, n - j), "template": {"spec": spec}}]
            },
        }
        for k, (etype, obj) in enumerate(volcano_job_objects(job)):
            if etype == JOB_SUBMITTED:
                ev = envelope(etype, source, obj, id=f"{namespace}-job-{j}-{k}", content_type=None)
                records.append((message_key(ev) or "", orjson.dumps(ev)))
            elif etype == POD_SUBMITTED:
                meta = obj["metadata"]
                pods.append(namespaced_key(meta["namespace"], meta["name"]))
    return records, pods


async def send_pods(producer, topic: str, records: list[tuple[str, bytes]]) -> None:
    """Send (key, JSON) records to ``topic``."""
    await producer.send_many(topic, [(key.encode(), value) for key, value in records])
