"""``esched bench simulate``: the simulator's time on whole traces against its targets,
each beside a baseline measured in the same process (folding the run's own log)."""

from __future__ import annotations

import time
from pathlib import Path

from esched.core import ClusterState, Profile
from esched.services.sim.compaction import default_at, run_trials
from esched.services.sim.engine import Simulator
from esched.services.sim.traces import load_trace

__all__ = ["bench_simulator"]


def bench_simulator(
    prof: Profile, path: str, openb: str, philly: str, trials: int, workers: int | None
) -> dict:
    """Simulate the openb and Philly traces in the folders given (a missing one is
    skipped) with ``prof`` (read from ``path``), then ``trials`` compaction trials of
    openb; times, the fold baseline and whether each is within its target."""
    out: dict = {"profile": path, "targets_s": {"openb": 5, "philly": 60, "compaction_11": 120}}
    for name, spec in (("openb", f"openb:{openb}"), ("philly", f"philly:{philly}")):
        folder = spec.split(":", 1)[1]
        if not Path(folder).exists():
            out[name] = {"skipped": f"{folder} not found"}
            continue
        t0 = time.perf_counter()
        tr = load_trace(spec)
        load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        sim = Simulator(tr, prof, 0, record=True)
        res = sim.run()
        sim_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        st = ClusterState()
        st.apply_many(enumerate(res.events or [], start=1))
        fold_s = time.perf_counter() - t0
        out[name] = {
            "jobs": len(tr.jobs),
            "pods": sum(j.tasks for j in tr.jobs),
            "nodes": len(tr.nodes),
            "events": len(res.events or []),
            "load_s": round(load_s, 3),
            "simulate_s": round(sim_s, 3),
            "fold_baseline_s": round(fold_s, 3),
            "ratio_to_fold": round(sim_s / fold_s, 2) if fold_s else None,
            "within_target": load_s + sim_s < out["targets_s"][name],
        }
        if name == "openb":
            t0 = time.perf_counter()
            res_t = run_trials(
                "compaction",
                tr,
                [path],
                list(range(trials)),
                {"tau": 0.0, "mu": 1, "at": default_at(tr)},
                workers,
            )
            comp_s = time.perf_counter() - t0
            machines = [r["machines"] for r in res_t]
            out["compaction_11"] = {
                "trace": "openb",
                "trials": trials,
                "seconds": round(comp_s, 2),
                "machines": machines,
                "within_target": comp_s < out["targets_s"]["compaction_11"],
            }
    return out
