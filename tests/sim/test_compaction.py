"""Cluster compaction's binary search, workload inflation and the FGD curve, on
workloads whose answers are known."""

from __future__ import annotations

from collections import Counter

import pytest

from esched.core import parse_profile
from esched.services.sim.compaction import (
    checkpoint,
    compaction_trial,
    fits,
    inflate,
    inflation_curve,
    run_trials,
)
from esched.services.sim.engine import GPU_RESOURCE
from esched.services.sim.traces import GIB, Job, NodeSpec, Trace

BEST_FIT = parse_profile({"profiles": [{"percentageOfNodesToScore": 100, "plugins": {"score": {
    "disabled": [{"name": "*"}], "enabled": [{"name": "NodeResourcesFit"}]}},
    "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {
        "type": "MostAllocated", "resources": [{"name": GPU_RESOURCE, "weight": 1}]}}}]}]})


def uniform(n_nodes: int, n_jobs: int) -> Trace:
    """Identical 2-GPU nodes, whole-GPU pods: any k machines hold exactly 2k pods."""
    nodes = [NodeSpec(f"n{i}", 8000, 16 * GIB, 2, "T4") for i in range(n_nodes)]
    jobs = [Job(f"j{i}", float(i), 100.0, 100, GIB, 1000) for i in range(n_jobs)]
    return Trace("test", "uniform", nodes, jobs, Counter(), [])


def test_checkpoint_peak_and_all():
    tr = uniform(4, 6)  # job i runs [i, i + 100): all six overlap at t = 5
    t, jobs = checkpoint(tr, "peak")
    assert t == 5 and len(jobs) == 6 and all(j.arrival == 0 for j in jobs)
    t, jobs = checkpoint(tr, 2.5)
    assert [j.name for j in jobs] == ["j0", "j1", "j2"]
    _, jobs = checkpoint(tr, "all")
    assert len(jobs) == 6


def test_fits_counts_pending():
    tr = uniform(10, 10)
    _, jobs = checkpoint(tr, "all")
    ok, share, _ = fits(tr, BEST_FIT, jobs, [0, 1, 2, 3], 0, 0.0)
    assert not ok and share == pytest.approx(0.2)
    assert fits(tr, BEST_FIT, jobs, [0, 1, 2, 3], 0, 0.2)[0]


@pytest.mark.parametrize(("tau", "mu", "expect"),
                         [(0.0, 1, 5), (0.2, 1, 4), (0.0, 4, {5, 6, 7, 8})])
def test_compaction_binary_search(tau, mu, expect):
    tr = uniform(20, 10)
    _, jobs = checkpoint(tr, "all")
    r = compaction_trial(tr, BEST_FIT, jobs, seed=3, tau=tau, mu=mu)
    if isinstance(expect, set):
        assert r["machines"] in expect       # stopped early: an upper bound within mu
    else:
        assert r["machines"] == expect
    assert r["steps"] <= 2 + 20 .bit_length()


def test_compaction_reports_a_workload_that_never_fits():
    tr = uniform(2, 10)
    _, jobs = checkpoint(tr, "all")
    r = compaction_trial(tr, BEST_FIT, jobs, seed=0, tau=0.0)
    assert r["machines"] is None and r["pending_share_whole"] == pytest.approx(0.6)


def test_inflation_stops_past_tau():
    tr = uniform(5, 4)  # room for 10 pods, 4 in the workload
    _, jobs = checkpoint(tr, "all")
    r = inflate(tr, BEST_FIT, jobs, seed=1, tau=0.0, batch=1)
    assert r["clones"] == 6 and r["at_limit"]["gpu"] == pytest.approx(1.0)
    assert r["pending_share"] > 0


def test_fgd_curve_is_binned_by_arrived_request():
    tr = uniform(4, 6)
    r = inflation_curve(tr, BEST_FIT, seed=42, until=1.3)
    xs = [p["x"] for p in r["curve"]]
    assert xs == sorted(xs) and xs[-1] >= 130
    # 8 GPUs; whole-GPU pods fill them exactly, then everything else is dropped
    assert r["alloc_at_100"] == pytest.approx(1.0) and r["alloc_final"] == pytest.approx(1.0)
    assert r["gpus"] == 8


def test_trials_same_results_in_processes(tmp_path):
    prof = tmp_path / "bf.yaml"
    prof.write_text("""
profiles:
- schedulerName: bf
  percentageOfNodesToScore: 100
  plugins: {score: {disabled: [{name: "*"}], enabled: [{name: NodeResourcesFit}]}}
  pluginConfig:
  - name: NodeResourcesFit
    args: {scoringStrategy: {type: MostAllocated, resources: [{name: esched.dev/gpu-milli}]}}
""")
    tr = uniform(12, 9)
    params = {"tau": 0.0, "mu": 1, "at": "all"}
    serial = run_trials("compaction", tr, [str(prof)], [0, 1, 2], params, workers=1)
    parallel = run_trials("compaction", tr, [str(prof)], [0, 1, 2], params, workers=2)
    assert serial == parallel
    assert [r["machines"] for r in serial] == [5, 5, 5] and serial[0]["profile"] == "bf"
