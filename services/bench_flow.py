"""``esched bench flow``: the time of one Quincy round (min-cost flow) by cluster size.

A synthetic cluster of ``machines`` nodes (16 cores, 64 GiB, racks of 40 by the
``topology.kubernetes.io/zone`` label) and ``tasks`` pending pods in jobs of 10
independent tasks, four shapes (0.5 core / 1 GiB, 1 / 2, 2 / 8, 4 / 16), so the round
is oversubscribed about 1.2 times and strict fair shares bind; each job has its data on
three random machines (Quincy's three replicas), which gives every task preference
arcs. One round is :meth:`QuincyPolicy.plan`: the problem from the folded state, the
network and its solve (OR-Tools), and the feasibility check of every placement. The
first round of a state (``cold``) also computes the classes' constraint masks; the
next ones (``warm``, the placer's view reset in between) reuse them. Times are wall
seconds (medians of the warm rounds) and the round's CPU seconds (``round_cpu_s``: the
figure to read on a machine shared with other work).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from esched.core._placer import Placer
from esched.core._state import ClusterState
from esched.core.quincy import FlowJob, QuincyConfig, QuincyPolicy
from esched.schemas.events import NODE_ADDED, POD_SUBMITTED

__all__ = ["run_flow_bench"]

_SHAPES = (("500m", "1Gi"), ("1", "2Gi"), ("2", "8Gi"), ("4", "16Gi"))
#: tasks per job (Quincy's jobs are many tasks; fairness is per job)
TASKS_PER_JOB = 10
RACK = 40


def _state(machines: int, tasks: int, seed: int) -> tuple[ClusterState, list[FlowJob]]:
    rng = np.random.default_rng(seed)
    st = ClusterState()
    pos = 0

    def fold(etype: str, data: dict) -> None:
        nonlocal pos
        pos += 1
        st.apply({"type": etype, "id": f"f{pos}", "data": data}, pos)

    for n in range(machines):
        fold(
            NODE_ADDED,
            {
                "metadata": {
                    "name": f"n{n}",
                    "labels": {"topology.kubernetes.io/zone": f"rack{n // RACK}"},
                },
                "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}},
            },
        )
    jobs: list[FlowJob] = []
    n_jobs = -(-tasks // TASKS_PER_JOB)
    t = 0
    for j in range(n_jobs):
        cpu, mem = _SHAPES[int(rng.integers(len(_SHAPES)))]
        pods = []
        for _ in range(min(TASKS_PER_JOB, tasks - t)):
            fold(
                POD_SUBMITTED,
                {
                    "metadata": {"name": f"p{t}", "namespace": "b"},
                    "spec": {
                        "containers": [
                            {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}}
                        ]
                    },
                },
            )
            pods.append(st.pod_index[f"b/p{t}"])
            t += 1
        data = {int(m): 1.0 for m in rng.choice(machines, size=min(3, machines), replace=False)}
        jobs.append(FlowJob(f"j{j}", pods, waited=float(n_jobs - j), data=data))
    return st, jobs


def _round(machines: int, tasks: int, seed: int, repeat: int) -> dict[str, Any]:
    st, jobs = _state(machines, tasks, seed)
    placer = Placer(st)
    policy = QuincyPolicy(st, placer, QuincyConfig())
    runs = []
    for _ in range(repeat + 1):
        placer.sync()  # a fresh view: the previous round's assumptions dropped
        t0, c0 = time.perf_counter(), time.process_time()
        plan = policy.plan(jobs)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert plan.round is not None
        runs.append(
            {
                "round_s": wall,
                "round_cpu_s": cpu,
                "problem_s": plan.problem_seconds,
                "network_s": plan.round.build_seconds,
                "solve_s": plan.round.solve_seconds,
                "check_s": plan.check_seconds,
                "placed": sum(len(p.bindings) for p in plan.placements),
                "infeasible": plan.infeasible,
                "repaired": plan.repaired,
                "nodes": plan.round.nodes,
                "arcs": plan.round.arcs,
            }
        )
    warm = runs[1:]
    out: dict[str, Any] = {
        "machines": machines,
        "tasks": tasks,
        "jobs": len(jobs),
        "classes": 4,
        "cold_round_s": runs[0]["round_s"],
    }
    for k in ("round_s", "round_cpu_s", "problem_s", "network_s", "solve_s", "check_s"):
        out[k] = statistics.median(r[k] for r in warm)
    for k in ("placed", "infeasible", "repaired", "nodes", "arcs"):
        out[k] = warm[-1][k]
    return out


def run_flow_bench(
    machines: int = 1000,
    tasks: int = 10_000,
    seed: int = 0,
    repeat: int = 3,
    grid: bool = False,
) -> dict[str, Any]:
    """One round at (``machines``, ``tasks``); with ``grid``, also machines x 1/4..4 at
    ``tasks``/``machines`` tasks per machine, and tasks x 1/4..4 at ``machines``."""
    out: dict[str, Any] = {"round": _round(machines, tasks, seed, repeat)}
    if grid:
        per = tasks / machines
        out["by_machines"] = [
            _round(int(machines * f), int(machines * f * per), seed, repeat)
            for f in (0.25, 0.5, 1, 2, 4)
        ]
        out["by_tasks"] = [
            _round(machines, int(tasks * f), seed, repeat) for f in (0.25, 0.5, 1, 2, 4)
        ]
    return out
