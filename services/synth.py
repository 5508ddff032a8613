"""Synthetic event logs: the workload of the benchmarks and of generated runs.

The cluster is the one the issues compare against: node ``i`` has 8, 16, 32 or
64 cores (by ``i mod 4``), 4 GiB of memory per core and room for 110 pods; a
pod requests ``100m × U[1..40]`` CPU and ``128Mi × U[1..64]`` memory.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime

from esched.schemas.events import (
    NODE_ADDED,
    PLACEMENT_COMMITTED,
    POD_SUBMITTED,
    POD_SUCCEEDED,
    envelope,
)

__all__ = ["cluster_log", "node_event", "pod_event"]

GIB = 2**30
CORES = (8, 16, 32, 64)
_T0 = datetime(2026, 1, 1, tzinfo=UTC).isoformat()


def _envelope(type_: str, id_: str, data: dict) -> dict:
    return envelope(type_, "esched-synth", data, id=id_, time=_T0, content_type=None)


def node_event(i: int, prefix: str = "node") -> dict:
    """``esched.node.added`` for synthetic node ``i``."""
    cores = CORES[i % 4]
    return _envelope(
        NODE_ADDED,
        f"{prefix}-{i}-added",
        {
            "metadata": {"name": f"{prefix}-{i}", "labels": {"zone": f"z{i % 3}"}},
            "status": {
                "allocatable": {"cpu": str(cores), "memory": f"{4 * cores}Gi", "pods": "110"}
            },
        },
    )


def pod_event(j: int, rng: random.Random, namespace: str = "synth") -> dict:
    """``esched.pod.submitted`` for synthetic pod ``j`` with the benchmark's requests."""
    return _envelope(
        POD_SUBMITTED,
        f"pod-{namespace}-{j}-submitted",
        {
            "metadata": {"name": f"pod-{j}", "namespace": namespace},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "resources": {
                            "requests": {
                                "cpu": f"{100 * rng.randint(1, 40)}m",
                                "memory": f"{128 * rng.randint(1, 64)}Mi",
                            }
                        },
                    }
                ]
            },
        },
    )


def cluster_log(nodes: int, pods: int, seed: int = 0, finish_every: int = 4) -> Iterator[dict]:
    """A log: nodes, then per pod: submitted, committed onto a node that fits, and
    every ``finish_every``-th pod succeeded later. Placement is a simple first fit
    from a rotating cursor over a window of nodes, so the log is realistic in shape
    and never over-commits.
    """
    rng = random.Random(seed)
    # First fit looks this many nodes past the cursor at most: once the cluster is
    # nearly full a pod stays pending instead of scanning every node (O(n) per pod).
    window = min(nodes, 64)
    free_cpu, free_mem, free_pods = [], [], []
    for i in range(nodes):
        yield node_event(i)
        free_cpu.append(CORES[i % 4] * 1000)
        free_mem.append(CORES[i % 4] * 4 * GIB)
        free_pods.append(110)
    cursor = 0
    running: list[tuple[str, int, int, int]] = []
    for j in range(pods):
        ev = pod_event(j, rng)
        yield ev
        req = ev["data"]["spec"]["containers"][0]["resources"]["requests"]
        cpu = int(req["cpu"][:-1])
        mem = int(req["memory"][:-2]) * 2**20
        for step in range(window):
            n = (cursor + step) % nodes
            if free_cpu[n] >= cpu and free_mem[n] >= mem and free_pods[n] > 0:
                break
        else:
            continue  # cluster full: the pod stays pending
        cursor = (n + 1) % nodes
        free_cpu[n] -= cpu
        free_mem[n] -= mem
        free_pods[n] -= 1
        key = f"synth/pod-{j}"
        yield _envelope(
            PLACEMENT_COMMITTED,
            f"commit-{j}",
            {
                "proposal": f"p-{j}",
                "replica": "synth",
                "position": 0,
                "gang": None,
                "bindings": [
                    {
                        "pod": key,
                        "node": f"node-{n}",
                        "resources": {"cpu": cpu, "memory": mem, "pods": 1},
                    }
                ],
            },
        )
        running.append((f"pod-{j}", n, cpu, mem))
        if finish_every and j % finish_every == 0 and running:
            name, n2, c2, m2 = running.pop(rng.randrange(len(running)))
            free_cpu[n2] += c2
            free_mem[n2] += m2
            free_pods[n2] += 1
            yield _envelope(
                POD_SUCCEEDED,
                f"{name}-succeeded",
                {"metadata": {"name": name, "namespace": "synth"}},
            )
