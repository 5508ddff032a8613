"""What following the log costs a replica per pod: the fold of a scheduling flow.

Every replica folds every event of the log; per pod of the flow that is its submission
and its committed placement, whichever replica placed it. This builds the log of an
``esched bench scale`` run (the preloaded cluster of :mod:`.bench_e2e.preload`, then the
pods the benchmark publishes, each followed by its decision as the commit service
writes it, proposals spread over ``replicas`` replicas) and folds the flow's part from
a snapshot of the preload with :meth:`ClusterState.apply_payloads`, in batches, as a
replica that has just started follows it (its memos empty, the heap frozen).

``python -m esched.services.bench_follow [pods] [replicas] [jobs]`` prints the fold's
CPU time per pod; under callgrind with ``--toggle-collect='__pyx_pw_*apply_payloads'``
only the flow's fold is counted (the preload comes from the snapshot, not from a fold).
``jobs``: each pod is a one-pod Volcano Job, with the events such a pod brings to the
log (the Job, its PodGroup and pod as the job controller creates them, its Pending and
Running transitions).
"""

from __future__ import annotations

import random
import time
from typing import Any

import orjson

from esched.core import ClusterState
from esched.core.validation import Verdict
from esched.services.bench_e2e.preload import pod_payloads
from esched.services.commit.decisions import decision_event
from esched.services.replica.placing import binding
from esched.services.store.snapshots import freeze_heap, thaw_heap
from esched.services.synth import cluster_log

__all__ = ["flow_log", "fold_flow", "run_follow_bench"]

#: Events per fold call: a follower's read gathers about this many in a burst.
BATCH = 64


def _job_flow(key: str, payload: bytes) -> tuple[str, list[bytes], list[bytes]]:
    """A pod as a one-pod Volcano Job: its key, the events before its placement (the
    Job, the Pending transition, the PodGroup, the pod) and after (Running)."""
    from esched.schemas import events as ev
    from esched.schemas.manifests import volcano_job_objects

    ns, name = ev.split_key(key)
    spec = orjson.loads(payload)["data"]["spec"]
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"tasks": [{"name": "w", "replicas": 1, "template": {"spec": spec}}]},
    }
    (_, job), (_, group), (_, pod) = volcano_job_objects(job)

    def update(seq: int, phase: str, previous: str, reason: str) -> bytes:
        data = {"job": key, "seq": seq, "phase": phase, "previous": previous, "attempt": 0}
        data |= {"reason": reason, "action": ""}
        return orjson.dumps(ev.envelope(ev.JOB_UPDATED, "jobs", data, id=f"{key}.t{seq}"))

    before = [
        orjson.dumps(ev.envelope(ev.JOB_SUBMITTED, "bench", job, id=f"{key}.job")),
        update(0, "Pending", "", "Submitted"),
        orjson.dumps(ev.envelope(ev.PODGROUP_SUBMITTED, "jobs", group, id=f"{key}.pg")),
        orjson.dumps(ev.envelope(ev.POD_SUBMITTED, "jobs", pod, id=f"{key}.pod")),
    ]
    return ev.metadata_key(pod["metadata"]), before, [update(1, "Running", "Pending", "Ran")]


def flow_log(
    nodes: int = 1000,
    fill: float = 0.2,
    pods: int = 5000,
    replicas: int = 6,
    seed: int = 0,
    jobs: bool = False,
) -> tuple[bytes, list[tuple[int, bytes]]]:
    """The preload's state snapshot and the flow's ``(position, payload)`` pairs
    (``jobs``: each pod a one-pod Volcano Job)."""
    state = ClusterState()
    preloaded = int(nodes * 30 * fill / 2.05)  # as bench_e2e.preload sizes it
    # The dict path: under callgrind only the flow's apply_payloads calls count.
    state.apply_many(enumerate(cluster_log(nodes, preloaded, seed=seed, finish_every=0), 1))
    position = int(state.position)
    rng = random.Random(seed)
    flow: list[tuple[int, bytes]] = []
    for j, (key, payload) in enumerate(pod_payloads(pods, "bench", seed)):
        after: list[bytes] = []
        if jobs:
            key, before, after = _job_flow(key, payload)
        else:
            before = [payload]
        for event in before:
            position += 1
            flow.append((position, event))
        req = orjson.loads(payload)["data"]["spec"]["containers"][0]["resources"]["requests"]
        resources = {
            "cpu": int(req["cpu"][:-1]),
            "memory": int(req["memory"][:-2]) * 2**20,
            "pods": 1,
        }
        r = j % replicas
        proposal: dict[str, Any] = {
            "proposal": f"r{r}-{rng.getrandbits(48):012x}-{j:x}",
            "replica": f"r{r}",
            "position": position,
            "gang": None,
            "bindings": [binding(key, f"node-{rng.randrange(nodes)}", resources, ())],
        }
        position += 1
        flow.append((position, orjson.dumps(decision_event(proposal, Verdict(True)))))
        for event in after:
            position += 1
            flow.append((position, event))
    return state.to_bytes(), flow


def fold_flow(state: ClusterState, flow: list[tuple[int, bytes]]) -> ClusterState:
    """Fold the flow into ``state`` (the preload), ``BATCH`` events at a time."""
    for i in range(0, len(flow), BATCH):
        state.apply_payloads(flow[i : i + BATCH])
    return state


def run_follow_bench(
    pods: int = 5000, replicas: int = 6, repeat: int = 3, jobs: bool = False
) -> dict[str, Any]:
    """CPU time of the flow's fold per pod (best of ``repeat``) and the anomalies."""
    snapshot, flow = flow_log(pods=pods, replicas=replicas, jobs=jobs)
    best = float("inf")
    state = None
    for _ in range(repeat):
        state = ClusterState.from_bytes(snapshot)
        freeze_heap()  # as a follower does once it has caught up
        try:
            t0 = time.process_time()
            fold_flow(state, flow)
            best = min(best, time.process_time() - t0)
        finally:
            thaw_heap()
    assert state is not None
    return {
        "pods": pods,
        "events": len(flow),
        "fold_cpu_us_per_pod": round(best / pods * 1e6, 2),
        "anomalies": dict(state.anomalies),
    }


if __name__ == "__main__":
    import sys

    pods, replicas = ([int(a) for a in sys.argv[1:3]] + [5000, 6])[:2]
    repeat = 1 if len(sys.argv) > 1 else 3  # one fold under callgrind
    jobs = sys.argv[3:4] == ["jobs"]
    print(orjson.dumps(run_follow_bench(pods, replicas, repeat, jobs)).decode())
