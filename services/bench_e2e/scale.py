"""``esched bench scale``: placement throughput against the number of replicas, each
replica process capped at a fraction of one CPU.

Every replica runs in a cgroup of its own with a CPU quota (:mod:`.cgroups`), as if
each ran on a small machine of its own; ingest, dispatch, commit, the broker and
PostgreSQL run uncapped. Per replica count, the run of ``bench e2e``
(:func:`~esched.services.bench_e2e.throughput.one_run`: fresh database from the
preloaded template, fresh topics, warm-up, then ``pods`` pods at once) measures
throughput by the store's clock (first pod recorded to last placement committed), and
the efficiency ``rate(R) / (R x rate(1))``: 1.0 when each replica adds a whole
replica's throughput. With ``repeat`` above 1 the counts are run that many rounds,
every other round in reverse order (so a drift of the machine's load weighs on every
count alike), and each count's rate is the median of its runs: on shared cores one
run of a count can be half or twice another. A plot of throughput against replicas
beside the ideal line is written with matplotlib.
"""

from __future__ import annotations

import contextlib
import logging
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from esched.services.bench_e2e.cgroups import (
    CpuCap,
    find_cpu_controller,
    remove_controller_group,
)
from esched.services.bench_e2e.preload import WARMUP_PODS_PER_REPLICA, room_shortfall
from esched.services.bench_e2e.throughput import bench_cluster, one_run
from esched.services.procs import ServiceProcess

__all__ = ["efficiencies", "plot_scaling", "run_order", "run_scale_bench"]

log = logging.getLogger(__name__)


def efficiencies(rates: dict[int, float]) -> dict[int, float]:
    """``rate(R) / (R x rate(1))`` per replica count; without a 1-replica run, against
    the smallest count's rate per replica."""
    if not rates:
        return {}
    base_count = 1 if 1 in rates else min(rates)
    per_replica = rates[base_count] / base_count
    if per_replica <= 0:
        return {r: 0.0 for r in rates}
    return {r: round(rate / (r * per_replica), 3) for r, rate in sorted(rates.items())}


def plot_scaling(rates: dict[int, float], cpus: float, path: Path) -> Path | None:
    """Throughput against replicas beside the ideal line, as PNG or SVG (by the
    suffix of ``path``); None, with a warning, without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not importable: no plot")
        return None
    counts = sorted(rates)
    base = 1 if 1 in rates else counts[0]
    per_replica = rates[base] / base
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(counts, [r * per_replica for r in counts], "--", color="grey", label="ideal")
    ax.plot(counts, [rates[r] for r in counts], "o-", label="measured")
    ax.set_xlabel(f"replicas ({cpus:g} CPU each)")
    ax.set_ylabel("pods/s (store clock)")
    ax.set_xticks(counts)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    # No creation date in an SVG: the same figures make the same file.
    fig.savefig(path, metadata={"Date": None} if path.suffix.lower() == ".svg" else None)
    plt.close(fig)
    return path


def run_order(counts: Iterable[int], repeat: int) -> list[int]:
    """The replica counts in the order they are run: ``repeat`` rounds, every other one
    reversed (1,2,3 twice: 1,2,3,3,2,1)."""
    once = list(counts)
    order: list[int] = []
    for k in range(repeat):
        order += once if k % 2 == 0 else once[::-1]
    return order


def runs_shortfall(nodes: int, fill: float, pods: int, counts: Iterable[int]) -> str | None:
    """Why a run's pods (``pods`` and the first warm-up wave of the largest count) would
    not fit the preloaded cluster, or None: each run starts from the same preload."""
    most = max(counts, default=1)
    return room_shortfall(nodes, fill, pods + WARMUP_PODS_PER_REPLICA * most)


async def run_scale_bench(
    *,
    kafka: str | None,
    pg_server: str,
    nodes: int = 1000,
    fill: float = 0.2,
    replicas: Iterable[int] = (1, 2, 3, 6),
    cpu_per_replica: float = 0.02,
    pods: int = 5000,
    logdir: str | None = None,
    plot: str | None = None,
    follow: str = "log",
    repeat: int = 1,
) -> dict[str, Any]:
    """Run the benchmark (see the module docstring), the replicas following the log as
    ``follow`` says (:func:`~esched.services.bench_e2e.throughput.one_run`); raises
    :class:`~esched.services.bench_e2e.cgroups.CgroupError` before starting anything
    when no cgroup CPU controller is writable, ValueError when the pods of a run (its
    first warm-up wave included) would not fit the preloaded cluster, or ``repeat`` is
    below 1."""
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    counts = list(dict.fromkeys(replicas))
    short = runs_shortfall(nodes, fill, pods, counts)
    if short is not None:
        raise ValueError(short)
    controller = find_cpu_controller()
    try:
        async with bench_cluster(kafka, pg_server, nodes, fill, logdir) as common:
            result = common.pop("result")
            result.update(
                {
                    "cpu_per_replica": cpu_per_replica,
                    "cgroup": controller.version,
                    "pods": pods,
                    "follow": follow,
                    "repeat": repeat,
                    "runs": [],
                }
            )
            order = run_order(counts, repeat)
            for i, r in enumerate(order):
                # A run's database, topics and log folder are named by its id and count:
                # after the first round a run needs an id and folder of its own (it
                # would read the earlier run's decisions, and overwrite its logs).
                k = i // len(counts)
                own = (
                    {"run": f"{common['run']}x{k}", "logdir": common["logdir"] / f"round{k + 1}"}
                    if k
                    else {}
                )
                caps: list[CpuCap] = []
                throttled: dict[str, dict[str, float]] = {}

                def confine(proc: ServiceProcess, r: int = r, caps: list[CpuCap] = caps) -> None:
                    cap = controller.create(f"r{r}-{proc.name}", cpu_per_replica)
                    caps.append(cap)
                    cap.add(proc.pid)

                def uncap(
                    caps: list[CpuCap] = caps, throttled: dict[str, dict[str, float]] = throttled
                ) -> None:
                    # Read before lifting: stopping runs at full speed (a capped replica
                    # took many seconds to leave its group).
                    for cap in caps:
                        throttled[cap.path.name] = cap.throttled()
                        cap.lift()

                try:
                    run = await one_run(
                        **{**common, **own},
                        replicas=r,
                        pods=pods,
                        rate=1.0,
                        latency_seconds=1.0,
                        measure_latency=False,
                        profile=frozenset(),
                        confine=confine,
                        before_stop=uncap,
                        follow=follow,
                        timeline=True,
                    )
                finally:
                    for cap in caps:
                        cap.remove()
                run["throttled"] = throttled
                result["runs"].append(run)
    finally:
        remove_controller_group(controller)
    result["scaling"] = scaling(counts, result["runs"])
    rates = {row["replicas"]: row["pods_per_s"] for row in result["scaling"]}
    if plot:
        with contextlib.suppress(OSError):
            made = plot_scaling(rates, cpu_per_replica, Path(plot))
            result["plot"] = str(made) if made else None
    return result


def scaling(counts: list[int], runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per replica count: the median of its runs' rates (``pods_per_s``; each run's in
    ``runs_pods_per_s``), the efficiency of the medians, and the median of the
    replicas' summed CPU µs per pod of the flow."""
    by_count: dict[int, list[dict[str, Any]]] = {r: [] for r in counts}
    for run in runs:
        by_count[run["replicas"]].append(run)
    rates = {
        r: statistics.median(float(run.get("store_pods_per_s") or 0.0) for run in done)
        for r, done in by_count.items()
        if done
    }
    eff = efficiencies(rates)
    return [
        {
            "replicas": r,
            "pods_per_s": round(rates[r], 1),
            "efficiency": eff[r],
            "replica_cpu_us_per_pod": statistics.median(_replica_cpu(run) for run in done),
            "runs_pods_per_s": [float(run.get("store_pods_per_s") or 0.0) for run in done],
        }
        for r, done in by_count.items()
        if done
    ]


def _replica_cpu(run: dict[str, Any]) -> float:
    """The replicas' CPU µs per pod of the whole flow, summed over replicas."""
    cpu = run.get("cpu_us_per_pod") or {}
    return round(sum(v for k, v in cpu.items() if k.startswith("replica")), 1)
