"""A seeded mix of one-pod and multi-pod Volcano Jobs, PodGroups with members and
plain pods, with placements and pods ending: what admission and the commit service
are checked on, fast paths against general ones."""

from __future__ import annotations

import random
from typing import Any

from esched.schemas import events as E
from esched.schemas.manifests import volcano_job_objects
from support.events import NAMESPACE, ev, node, placement, pod, podgroup


def _job(rnd: random.Random, name: str, multi: bool = True) -> list[dict[str, Any]]:
    """A Volcano Job of one task (one pod in two) and the pods its controller makes
    first: the Job implies its PodGroup (minResources the first minAvailable pods')."""
    replicas = 1 if not multi or rnd.random() < 0.5 else rnd.randint(2, 4)
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


def mixed_log(seed: int, n: int = 200, multi: bool = True) -> list[dict[str, Any]]:
    """Nodes, then a seeded mix of one-pod and multi-pod Jobs, PodGroups with members
    (need-based minimum), plain pods, placements and pods ending."""
    rnd = random.Random(seed)
    log = [node(f"n{i}", cpu="8", memory="64Gi", pods="40") for i in range(4)]
    pods: list[str] = []
    for i in range(n):
        k = rnd.random()
        if k < 0.4:
            batch = _job(rnd, f"j{i}", multi)
            pods += [e["data"]["metadata"]["name"] for e in batch if e["type"] == E.POD_SUBMITTED]
            log += batch
        elif k < 0.5 and multi:
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
