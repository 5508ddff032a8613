"""``esched bench usage``: what folding usage reports costs a replica (Borg's
reclamation, :mod:`esched.core.reservations`).

Builds a state of ``nodes`` nodes and ``pods`` running pods (each with a cpu and a
memory limit above its requests; not timed), then folds ``rounds`` rounds of usage
reports as a replica folds the log (stored envelope bytes through
``ClusterState.apply_payloads``). A round is what the nodes' agents send every
``interval`` seconds: one ``esched.usage.reported`` event per node, with the node's
usage (``nodes[]``) and each of its pods' (``pods[]``), values drawn per pod and
round as a seeded random share of its limit (in milli-CPU and Mi, as an agent
reports them). The first round starts every pod's hold and is not timed; the timed
rounds come after the hold, so every pod's reservation decays or rises.

Reclamation is opt-in (``reclamation.enabled: false`` folds no reservations): the
benchmark's state switches it on, with the process's other parameters.

``cpu_share`` is the CPU time of one round over ``interval``: the share of a core
folding the reports costs (target: under 0.05 for 10,000 nodes and 100,000 pods every
10 s).

``overload_cpu_share``: what the dispatcher adds per round for overload handling
(``services/dispatch/overload.py``: decoding each report for the nodes it names,
:func:`esched.core.overload.overloads` over them twice (the one capacity check, on
:func:`~esched.core.overload.usage_by_node`), once to move the nodes' episodes on
(:class:`esched.core.overload.Episodes`) and once in the plan); no node of the
benchmark is overloaded, so no node's rows are read.
"""

from __future__ import annotations

import dataclasses
import gc
import random
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from esched.core import ClusterState
from esched.core.overload import Episodes, overloads
from esched.schemas import events as ev

__all__ = ["bench_usage"]

_T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _stamp(seconds: float) -> str:
    return (_T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def _envelope(i: int, etype: str, data: dict, at: float) -> bytes:
    return orjson.dumps(
        {"type": etype, "id": f"u-{i}", "source": "bench", "time": _stamp(at), "data": data}
    )


def bench_usage(
    nodes: int = 10_000,
    pods: int = 100_000,
    rounds: int = 5,
    interval: float = 10.0,
    seed: int = 0,
) -> dict[str, Any]:
    """Fold ``rounds`` rounds of per-node usage reports; JSON figures (see the module)."""
    rng = random.Random(seed)
    st = ClusterState()
    st.reclamation = dataclasses.replace(st.reclamation, enabled=True)
    position = 0
    setup = []
    for n in range(nodes):
        setup.append(
            (
                ev.NODE_ADDED,
                {
                    "metadata": {"name": f"node-{n}"},
                    "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "250"}},
                },
            )
        )
    on_node: list[list[str]] = [[] for _ in range(nodes)]
    for p in range(pods):
        n = p % nodes
        name = f"p-{p}"
        on_node[n].append(f"bench/{name}")
        setup.append(
            (
                ev.POD_SUBMITTED,
                {
                    "metadata": {"name": name, "namespace": "bench"},
                    "spec": {
                        "nodeName": f"node-{n}",
                        "containers": [
                            {
                                "name": "c",
                                "resources": {
                                    "requests": {"cpu": "500m", "memory": "1Gi"},
                                    "limits": {"cpu": "2", "memory": "2Gi"},
                                },
                            }
                        ],
                    },
                },
            )
        )
    for etype, data in setup:
        position += 1
        st.apply({"type": etype, "id": f"s-{position}", "source": "bench", "data": data}, position)

    def round_payloads(at: float) -> list[tuple[int, bytes]]:
        nonlocal position
        out = []
        for n in range(nodes):
            pod_rows = []
            cpu_sum = mem_sum = 0
            for key in on_node[n]:
                cpu = rng.randrange(50, 2000)
                mem = rng.randrange(64, 2048)
                cpu_sum += cpu
                mem_sum += mem
                pod_rows.append({"pod": key, "usage": {"cpu": f"{cpu}m", "memory": f"{mem}Mi"}})
            data = {
                "window": interval,
                "nodes": [
                    {
                        "name": f"node-{n}",
                        "usage": {"cpu": f"{cpu_sum}m", "memory": f"{mem_sum}Mi"},
                    }
                ],
                "pods": pod_rows,
            }
            position += 1
            out.append((position, _envelope(position, ev.USAGE_REPORTED, data, at)))
        return out

    st.apply_payloads(round_payloads(0.0))  # every hold starts
    hold = st.reclamation.hold
    cpu_runs, wall_runs, overload_runs = [], [], []
    overloaded = 0
    episodes = Episodes()
    gc_was = gc.isenabled()
    gc.disable()  # as fold_log: no cyclic GC passes over the large state
    try:
        for r in range(rounds):
            payloads = round_payloads(hold + interval * (r + 1))
            c0, w0 = time.process_time(), time.perf_counter()
            st.apply_payloads(payloads)
            cpu_runs.append(time.process_time() - c0)
            wall_runs.append(time.perf_counter() - w0)
            c0 = time.process_time()
            named: set[int] = set()
            for _pos, payload in payloads:
                data = orjson.loads(payload)["data"]
                named.update(st.node_index[x["name"]] for x in data["nodes"])
            at = float(st.clock)
            resources = ("cpu", "memory")
            for n, name, hot in overloads(st, named, resources):  # the fold's episodes
                episodes.observe((str(n), name), hot, at)
            over = {n for n, _name, hot in overloads(st, named, resources) if hot}  # the plan
            overload_runs.append(time.process_time() - c0)
            overloaded = len(over)
    finally:
        if gc_was:
            gc.enable()
    cpu = statistics.median(cpu_runs)
    return {
        "nodes": nodes,
        "pods": pods,
        "rounds": rounds,
        "interval_s": interval,
        "events_per_round": nodes,
        "round_cpu_seconds": round(cpu, 4),
        "round_cpu_seconds_runs": [round(x, 4) for x in cpu_runs],
        "round_wall_seconds": round(statistics.median(wall_runs), 4),
        "us_per_pod_report": round(1e6 * cpu / pods, 3),
        "cpu_share": round(cpu / interval, 4),
        "overload_cpu_share": round(statistics.median(overload_runs) / interval, 4),
        "overloaded_nodes": overloaded,
        "target_cpu_share": 0.05,
        "within_target": cpu / interval < 0.05,
        "anomalies": dict(st.anomalies),
    }
