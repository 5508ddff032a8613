"""What a run measured: allocation over time, pending, latency, stranding, FGD
fragmentation, and Quincy's job metrics.

Definitions (the survey seed's, with the sources named):

- **Allocation** of a resource: the sum of requests of running pods; its *rate* is
  that over capacity. Time averages weight each value by how long it held
  (a step function between events), from the first arrival to the last arrival, so
  the drain after the trace ends does not dilute them. None of the traces carries
  usage, so usage-based *utilization* is not measured; "utilization" in the reports
  is the allocation rate (requests used as usage), and says so.
- **Scheduling latency**: virtual time from a job's arrival to its start (queueing);
  and the wall time the placer spent per decision.
- **Stranded** (Borg §5): free units of a resource on nodes where another resource is
  exhausted (< 5% free), sampled at the heat-map instants.
- **GPU fragmentation** (FGD, Weng et al. ATC '23): ``F = sum_n F_n`` for the
  trace's pod-type distribution (see esched.core.scoring._fgd); reported in GPUs and
  as a share of idle GPU capacity (frag rate).
- **Quincy** (Isard et al., SOSP '09): for job j, ANP_j = ideal time / actual time
  = duration / (finish - arrival); SNP = mean ANP; slowdown sigma_j = 1 / ANP_j with
  norms l1 = mean sigma, l2 = sqrt(mean sigma^2), l_inf = max sigma; unfairness = the
  coefficient of variation of ANP (population std / mean). Jobs that never finished
  are left out and counted.
"""

from __future__ import annotations

import math

import numpy as np

from esched.services.sim.engine import GPU_RESOURCE, RunResult

__all__ = ["job_metrics", "summarize", "time_average"]

_LABEL = {"cpu": "cpu", "memory": "memory", GPU_RESOURCE: "gpu"}


def time_average(t: np.ndarray, v: np.ndarray, t0: float, t1: float) -> float:
    """Mean of the step function ``v[i]`` on ``[t[i], t[i+1])`` over ``[t0, t1]``."""
    if len(t) == 0 or t1 <= t0:
        return float(v[-1]) if len(v) else 0.0
    edges = np.clip(np.append(t, t1), t0, t1)
    widths = np.diff(edges)
    total = widths.sum()
    return float((v * widths).sum() / total) if total > 0 else float(v[-1])


def job_metrics(
    arrival: np.ndarray, start: np.ndarray, finish: np.ndarray, duration: np.ndarray
) -> dict:
    """Quincy's SNP, slowdown norms and unfairness, and queueing latency percentiles."""
    done = ~np.isnan(finish)
    started = ~np.isnan(start)
    out: dict = {"jobs": len(arrival), "finished": int(done.sum()), "started": int(started.sum())}
    wait = (start - arrival)[started]
    if wait.size:
        out["latency_s"] = {
            "mean": float(wait.mean()),
            "p50": float(np.percentile(wait, 50)),
            "p90": float(np.percentile(wait, 90)),
            "p99": float(np.percentile(wait, 99)),
            "max": float(wait.max()),
            "waited_share": float((wait > 0).mean()),
        }
    jct = (finish - arrival)[done]
    ideal = duration[done]
    if jct.size:
        anp = np.where(jct > 0, ideal / np.where(jct > 0, jct, 1), 1.0)
        sigma = 1.0 / anp
        snp = float(anp.mean())
        out["quincy"] = {
            "snp": snp,
            "slowdown_l1": float(sigma.mean()),
            "slowdown_l2": float(math.sqrt((sigma**2).mean())),
            "slowdown_linf": float(sigma.max()),
            "unfairness": float(anp.std() / snp) if snp > 0 else float("nan"),
        }
    return out


def summarize(r: RunResult) -> dict:
    """The run's figures as one JSON-able dict (the report and the terminal table read it)."""
    t0 = float(np.nanmin(r.arrival)) if r.arrival.size else 0.0
    t1 = float(np.nanmax(r.arrival)) if r.arrival.size else 0.0
    alloc = {}
    for res, series in r.alloc.items():
        cap = r.capacity.get(res, 0)
        if cap <= 0:
            continue
        rate = series / cap
        alloc[_LABEL.get(res, res)] = {
            "capacity": cap,
            "mean_rate": time_average(r.t, rate, t0, t1),
            "peak_rate": float(rate.max()) if rate.size else 0.0,
        }
    pending = {
        "mean": time_average(r.t, r.pending.astype(np.float64), t0, t1),
        "max": int(r.pending.max()) if r.pending.size else 0,
    }
    stranded = {}
    for res, series in r.stranded.items():
        cap = r.capacity.get(res, 0)
        if cap > 0 and series.size:
            stranded[_LABEL.get(res, res)] = {
                "mean_share": float(series.mean() / cap),
                "max_share": float(series.max() / cap),
            }
    out = {
        "trace": r.trace,
        "profile": r.profile,
        "seed": r.seed,
        "nodes": r.nodes,
        "wall_seconds": r.wall_seconds,
        "placements": r.placements,
        "placement_us_mean": (1e6 * r.placement_seconds / r.placements) if r.placements else None,
        "withdrawn": r.withdrawn,
        "never_started": r.never_started,
        "allocation": alloc,
        "pending_pods": pending,
        "stranded": stranded,
        "jobs": job_metrics(r.arrival, r.start, r.finish, r.duration),
        "placer": r.placer_stats,
        "anomalies": r.anomalies,
    }
    if r.preemptions or r.reservations:
        out["preemptions"] = r.preemptions
        out["evicted_jobs"] = r.evicted_jobs
        out["reservations"] = r.reservations
    if r.usage is not None:
        out["usage"] = r.usage.as_dict()
    if r.frag is not None and r.frag.size:
        gpu_cap = r.capacity.get(GPU_RESOURCE, 0)
        idle = gpu_cap - r.alloc[GPU_RESOURCE]
        with np.errstate(invalid="ignore", divide="ignore"):
            frag_rate = np.where(idle > 0, r.frag / np.where(idle > 0, idle, 1), 0.0)
        out["gpu_fragmentation"] = {
            "mean_gpus": time_average(r.t, r.frag / 1000.0, t0, t1),
            "mean_share_of_capacity": time_average(r.t, r.frag / gpu_cap, t0, t1),
            "mean_share_of_idle": time_average(r.t, frag_rate, t0, t1),
        }
    return out
