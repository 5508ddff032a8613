"""Admission's release reads a gang's pending members off the gang's own slots when
nothing else needs every pending pod (one queue, no capability, no guarantee), and
the cluster's allocatable as a product with the alive flags: the work let through,
its order, the holds and the rejections must be what summing every pending pod (and
the alive nodes' rows) gives, over a seeded mix of one-pod Volcano Jobs, multi-pod
Jobs with minResources, PodGroups without them, and plain pods."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from esched.core import ClusterState
from esched.core.admission import OBSERVED, Admission, WorkItem, event_key
from esched.core.phases import PHASE_PENDING
from esched.core.queues import cluster_allocatable
from esched.schemas import events as E
from esched.schemas.manifests import volcano_job_objects
from support.events import NAMESPACE, ev, node, placement, pod, podgroup

from .test_snapshot import random_log


def _every_pending(st: ClusterState, gangs: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The reference: every pending pod's gang compared with the asked ones."""
    pend = np.flatnonzero(st.pod_phases() == PHASE_PENDING)
    sel = pend[np.isin(st.pod_gangs()[pend], np.array(gangs, dtype=np.int64))]
    return sel.astype(np.int64), st.pod_gangs()[sel].astype(np.int64)


def _job(rnd: random.Random, name: str) -> list[dict[str, Any]]:
    """A Volcano Job of one task (one pod in two) and the pods its controller makes
    first: the Job implies its PodGroup (minResources the first minAvailable pods')."""
    replicas = 1 if rnd.random() < 0.5 else rnd.randint(2, 4)
    cpu = rnd.choice(["500m", "1", "3", "64"])  # 64: beyond the whole cluster
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]
    }
    if rnd.random() < 0.3:
        spec["priority"] = rnd.choice([10, 1000])
    task = {"name": "w", "replicas": replicas, "template": {"spec": spec}}
    if replicas > 1:
        task["minAvailable"] = rnd.randint(1, replicas)
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"tasks": [task]},
    }
    out = []
    for t, obj in volcano_job_objects(job):
        if t != E.PODGROUP_SUBMITTED:  # implied by the Job
            out.append(ev(f"{name}-{t}-{len(out)}", t, obj))
    return out


def mixed_log(seed: int, n: int = 200) -> list[dict[str, Any]]:
    """Nodes, then a seeded mix of one-pod and multi-pod Jobs, PodGroups with members
    (need-based minimum), plain pods, placements and pods ending."""
    rnd = random.Random(seed)
    log = [node(f"n{i}", cpu="8", memory="64Gi", pods="40") for i in range(4)]
    pods: list[str] = []
    for i in range(n):
        k = rnd.random()
        if k < 0.4:
            batch = _job(rnd, f"j{i}")
            pods += [e["data"]["metadata"]["name"] for e in batch if e["type"] == E.POD_SUBMITTED]
            log += batch
        elif k < 0.5:
            members = rnd.randint(1, 3)
            log.append(podgroup(f"g{i}", rnd.randint(1, members)))
            for m in range(members):
                # Members unlike each other: the minimum is the need's share of their
                # sum (beyond the 32 cpus of the cluster with two of 20), the gang's
                # priority their highest.
                cpu = rnd.choice(["1", "12", "20"])
                prio = rnd.choice([None, 5, 50])
                log.append(pod(f"g{i}-{m}", cpu=cpu, gang=f"g{i}", priority=prio))
                pods.append(f"g{i}-{m}")
        elif k < 0.7:
            log.append(pod(f"p{i}", cpu=rnd.choice(["1", "2"]), priority=rnd.choice([None, 5])))
            pods.append(f"p{i}")
        elif k < 0.9 and pods:
            name = rnd.choice(pods)
            data = placement(f"x{i}", [(name, f"n{rnd.randrange(4)}")])
            log.append(ev(f"bind-{i}", E.PLACEMENT_COMMITTED, data))
        elif pods:
            name = rnd.choice(pods)
            ref = {"metadata": {"name": name, "namespace": NAMESPACE}}
            log.append(ev(f"end-{i}", rnd.choice([E.POD_SUCCEEDED, E.POD_DELETED]), ref))
    return log


def admit(log: list[dict[str, Any]], batch: int = 5) -> list[Any]:
    """Fold ``log`` ``batch`` events at a time; after each batch, admission observes it
    and releases every pending pod and gang: (rejections, released, held) per batch."""
    st = ClusterState()
    adm = Admission()
    out: list[Any] = [adm.start(st)]
    for i in range(0, len(log), batch):
        events = list(enumerate(log[i : i + batch], int(st.position) + 1))
        st.apply_many(events)
        facts = [(p, e["type"], event_key(e["data"]), e["data"]) for p, e in events]
        rejected = adm.observe(st, [f for f in facts if f[1] in OBSERVED])
        items: list[WorkItem] = []
        gangs: dict[str, None] = {}
        for key in st.pending_pods():
            g = st.gang_of(st.pod_index[key])
            if g < 0:
                items.append(("pending", "pod", key, int(st.position)))
            else:
                gangs[st.gang_keys[g]] = None
        items += [("pending", "gang", key, int(st.position)) for key in gangs]
        released = adm.release(st, items)
        out.append((rejected, released, dict(adm.held)))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_release_by_gang_slots_is_release_by_every_pending_pod(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = mixed_log(seed)
    by_slots = admit(log)
    monkeypatch.setattr(Admission, "_pending_members", staticmethod(_every_pending))
    assert admit(log) == by_slots
    released = [it for _r, rel, _h in by_slots[1:] for it in rel]
    held = [reason for _r, _rel, h in by_slots[1:] for reason in h.values()]
    # The mix did let gangs (multi-pod ones too) through and hold some as too large.
    assert sum(it[1] == "gang" for it in released) > 10
    assert "ClusterCapacity" in held


@pytest.mark.parametrize("seed", range(4))
def test_cluster_allocatable_sums_the_alive_nodes_rows(seed: int) -> None:
    st = ClusterState()
    for i, (pos, event) in enumerate(random_log(seed, 300)):
        st.apply(event, pos)
        if i % 25 == 0:
            rows = st.node_allocatable()[st.node_alive()]
            want = {st.res_names[r]: int(rows[:, r].sum()) for r in range(st.n_res)}
            assert cluster_allocatable(st) == want
