"""Borg's resource reclamation, simulated (Verma et al., EuroSys '15, section 5.5).

The study ``esched compare --study reclamation`` answers Borg's three questions on a
trace, with a usage model (:mod:`esched.services.sim.usage`; no trace records usage):

* **How much of the workload runs in reclaimed resources.** Per node, the running
  pods' limits above the node's allocatable: workload that placement by limits could
  not have put there (production pods are placed by limits, the others by the
  reservations of the pods on the node, so only reclamation puts it there). The share
  is that excess summed over nodes, over the running pods' limits, per resource:
  time-weighted over a run of the trace in time (``run``), and at the end of the
  packing of the checkpoint on the fewest machines (``compaction``).
* **What it costs**: non-production pods evicted because a node ran out (usage above
  allocatable: memory at once, CPU after ``evict_after`` seconds of throttling, the
  live dispatcher's episode rule; :meth:`Simulator._overload`), per non-production
  task-hour and per 1,000 non-production tasks started; and the CPU throttled pods
  asked for and did not get (a share of what all pods asked for).
* **The compaction gain**: Borg's compaction (a seeded random permutation of the
  machines, bisection for the shortest prefix that runs the checkpoint with at most
  ``tau`` of its pods pending), once placing every pod by its limits and once with
  reclamation: the checkpoint arrives at once, usage is reported every ``every``
  seconds up to ``horizon`` seconds (reservations need the 300 s hold and then decay),
  and after each report the pending pods get a pass; the prefix fits if at the
  horizon at most ``tau`` are pending (an evicted pod that found no room again is
  pending). The gain is ``1 - machines with reclamation / machines by limits``.

Reservations are the state's own (the simulator logs ``esched.usage.reported`` and the
fold applies ``core/_reservations.pxd``), with the ``reclamation:`` section given (or
the process's) switched on; the baseline is the same section switched off, where a
pod's limit is its requests (the traces set no separate limits).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from esched.core import Profile
from esched.core.reservations import ReclamationConfig, current_reclamation
from esched.services.sim.compaction import compaction_trial, fits
from esched.services.sim.engine import Simulator
from esched.services.sim.traces import Job, Trace
from esched.services.sim.usage import SyntheticUsage, UsageModel

__all__ = [
    "DEFAULT_EVERY",
    "default_horizon",
    "grown",
    "reclamation_rows",
    "reclamation_run",
    "reclamation_trial",
]

#: Seconds between usage reports (the reservation curve is memoryless: 10 s or 60 s
#: reports give the same reservations; a shorter interval samples the noise more often).
DEFAULT_EVERY = 60.0


def enabled(cfg: ReclamationConfig | None) -> ReclamationConfig:
    """``cfg`` (default: the process's ``reclamation:`` section) switched on."""
    return replace(cfg or current_reclamation(), enabled=True)


def default_horizon(cfg: ReclamationConfig) -> float:
    """How long a packing with reclamation runs: the hold plus ten decay time
    constants (a pod placed late still sees its reservation settle)."""
    return cfg.hold + 10.0 * cfg.time_constant


def reclamation_run(
    trace: Trace,
    profile: Profile,
    seed: int,
    usage: UsageModel,
    cfg: ReclamationConfig,
    every: float = DEFAULT_EVERY,
) -> dict[str, Any]:
    """The trace in time on its machines with reclamation on: the usage figures
    (:meth:`~esched.services.sim.engine.UsageStats.as_dict`) and the jobs' waits."""
    r = Simulator(trace, profile, seed, usage=usage, usage_every=every, reclamation=cfg).run()
    assert r.usage is not None, "a run with a usage model measures usage"
    started = ~np.isnan(r.start)
    wait = (r.start - r.arrival)[started]
    return {
        **r.usage.as_dict(),
        "never_started": r.never_started,
        "wait_mean_s": float(wait.mean()) if len(wait) else None,
    }


def grown(
    trace: Trace,
    profile: Profile,
    jobs: list[Job],
    seed: int,
    tau: float,
    off: ReclamationConfig,
    most: int = 6,
) -> tuple[Trace, int]:
    """The trace's machines, doubled until ``jobs`` fit by limits (the compaction
    algorithm's first step in Verma et al.: clone the cell until at most ``tau`` of
    the tasks are pending), and how many copies of each machine that took (at most
    ``2 ** most``; past that the trace is returned as doubled so far)."""
    cell, copies = trace, 1
    for _ in range(most):
        ok, _, _ = fits(
            cell, profile, jobs, list(range(len(cell.nodes))), seed, tau, reclamation=off
        )
        if ok:
            break
        copies *= 2
        extra = [
            replace(n, name=f"{n.name}-c{copies // 2 + i // len(trace.nodes)}")
            for i, n in enumerate(cell.nodes)
        ]
        cell = replace(cell, nodes=cell.nodes + extra)
    return cell, copies


def reclamation_trial(
    trace: Trace, profile: Profile, jobs: list[Job], seed: int, params: dict[str, Any]
) -> dict[str, Any]:
    """One trial of the study (``params``: ``usage``, ``reclamation``, ``every``,
    ``horizon``, ``tau``, ``mu``, ``run``): the run in time (seed ``seed``; unless
    ``run`` is false) and the compaction of ``jobs`` by limits and with reclamation
    on the same permutation."""
    usage: UsageModel = params.get("usage") or SyntheticUsage()
    cfg = enabled(params.get("reclamation"))
    every = float(params.get("every") or DEFAULT_EVERY)
    horizon = float(params.get("horizon") or default_horizon(cfg))
    tau, mu = float(params.get("tau", 0.0)), int(params.get("mu", 1))
    out: dict[str, Any] = {
        "seed": seed,
        "usage_model": usage.as_dict(),
        "reclamation": cfg.as_dict(),
        "every_s": every,
        "horizon_s": horizon,
    }
    if params.get("run", True):
        out["run"] = reclamation_run(trace, profile, seed, usage, cfg, every)
    # Borg's pending queue is scanned from high to low priority: prod first, so the
    # checkpoint's prod pods are not left behind non-prod pods placed before them
    # (which never leave a static packing). The same order for both packings.
    jobs = sorted(jobs, key=lambda j: -j.priority)
    off = replace(cfg, enabled=False)
    cell, copies = grown(trace, profile, jobs, seed, tau, off)
    out["cluster_copies"] = copies
    limits = compaction_trial(cell, profile, jobs, seed, tau, mu, reclamation=off)
    reclaim = compaction_trial(
        cell,
        profile,
        jobs,
        seed,
        tau,
        mu,
        reclamation=cfg,
        usage=usage,
        usage_every=every,
        horizon=horizon,
        retry=True,
    )
    m_lim, m_rec = limits.get("machines"), reclaim.get("machines")
    out["compaction"] = {
        "machines_limits": m_lim,
        "machines_reclamation": m_rec,
        "gain": (1.0 - m_rec / m_lim) if m_lim and m_rec is not None else None,
        "limits": limits,
        "reclamation": reclaim,
    }
    return out


def _median(values: list[float | None]) -> float | None:
    v = [x for x in values if x is not None and not math.isnan(x)]
    return float(np.median(v)) if v else None


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, fmt: str = ".0f") -> str:
    return "-" if x is None else format(x, fmt)


def reclamation_rows(res: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The study's table: per profile, medians over the trials."""
    cols = [
        "profile",
        "trials",
        "reclaimed cpu (run)",
        "reclaimed mem (run)",
        "usage/limit cpu",
        "usage/limit mem",
        "resv/limit cpu",
        "resv/limit mem",
        "non-prod evictions / task-hour",
        "per 1,000 non-prod tasks",
        "cpu denied by throttles",
        "machines by limits",
        "machines with reclamation",
        "compaction gain",
        "reclaimed cpu (compacted)",
        "reclaimed mem (compacted)",
        "evictions / task-hour (compacted)",
    ]
    by: dict[str, list[dict[str, Any]]] = {}
    for r in res:
        by.setdefault(str(r["profile"]), []).append(r)
    rows = []
    for name, ts in by.items():
        runs = [t["run"] for t in ts if "run" in t]
        comp = [t["compaction"] for t in ts]
        packed = [c["reclamation"].get("usage") or {} for c in comp]

        def run_med(key: str, res_name: str | None = None, runs=runs) -> float | None:
            return _median([(r[key][res_name] if res_name else r[key]) for r in runs])

        rows.append(
            [
                name,
                str(len(ts)),
                _pct(run_med("reclaimed_share", "cpu")) if runs else "-",
                _pct(run_med("reclaimed_share", "memory")) if runs else "-",
                _pct(run_med("usage_over_limits", "cpu")) if runs else "-",
                _pct(run_med("usage_over_limits", "memory")) if runs else "-",
                _pct(run_med("reservations_over_limits", "cpu")) if runs else "-",
                _pct(run_med("reservations_over_limits", "memory")) if runs else "-",
                _num(run_med("non_prod_evictions_per_task_hour"), ".4f") if runs else "-",
                _num(run_med("non_prod_evictions_per_1000_tasks"), ".2f") if runs else "-",
                _pct(run_med("throttled_cpu_share")) if runs else "-",
                _num(_median([c["machines_limits"] for c in comp])),
                _num(_median([c["machines_reclamation"] for c in comp])),
                _pct(_median([c["gain"] for c in comp])),
                _pct(_median([(p.get("reclaimed_share_last") or {}).get("cpu") for p in packed])),
                _pct(
                    _median([(p.get("reclaimed_share_last") or {}).get("memory") for p in packed])
                ),
                _num(_median([p.get("non_prod_evictions_per_task_hour") for p in packed]), ".4f"),
            ]
        )
    return cols, rows
