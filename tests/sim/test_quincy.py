"""The simulator with Quincy's flow rounds (services/sim/quincy.py): every placement
passes the audit (the commit service's validator), the variants behave as named, the
CLI runs it, and (scale) the Philly evaluation of docs/simulation.md."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from esched.core import ClusterState, load_profile
from esched.core.quincy import QuincyConfig
from esched.services.audit import Auditor
from esched.services.cli import cli
from esched.services.sim.engine import simulate
from esched.services.sim.metrics import summarize
from esched.services.sim.quincy import QuincySimulator
from esched.services.sim.traces import GIB, Job, NodeSpec, Trace, synthetic

pytest.importorskip("ortools")

PROFILES = Path(__file__).resolve().parents[2] / "deploy" / "profiles"
BEST_FIT = load_profile(PROFILES / "best-fit.yaml")


def audited(events: list[dict]) -> dict:
    st = ClusterState()
    st.apply_many(enumerate(events, start=1))
    assert st.anomalies == {}
    auditor = Auditor()
    for pos, ev in enumerate(events, start=1):
        auditor.feed(pos, ev)
    report = auditor.report()
    assert report["ok"], report["violations"][:3]
    return report


@pytest.mark.parametrize(
    "config",
    [QuincyConfig(), QuincyConfig(preemption=True), QuincyConfig(fairness="none")],
    ids=["QF", "QFP-bands", "Q"],
)
def test_every_flow_placement_passes_the_audit(config):
    # Mixed shapes (CPU only, GPU shares, whole GPUs, gangs) on few nodes: the flow's
    # shape approximation overcommits some machines; the check must drop those, so
    # the audit (validator of every commit, evictions included) finds nothing.
    tr = synthetic(nodes=6, jobs=150, seed=3, load=1.5)
    sim = QuincySimulator(tr, BEST_FIT, 7, record=True, preemption=config.preemption, quincy=config)
    r = sim.run()
    assert r.placements >= 150 and r.never_started == 0
    assert r.events is not None
    report = audited(r.events)
    flow = r.placer_stats["flow"]
    assert flow["rounds"] > 0 and flow["fairness"] == config.fairness
    if config.preemption:
        assert report["checked"]["preemptions"] == r.preemptions


def one_gpu_trace() -> Trace:
    # One 2-GPU node; a 2-GPU gang job (two 1-GPU pods) at t=0 for 100 s, then three
    # 1-GPU jobs.
    nodes = [NodeSpec("n0", 8000, 64 * GIB, 2, "T4")]
    jobs = [Job("g", 0, 100, 1000, GIB, 1000, 2)]
    jobs += [Job(f"j{i}", 1 + i, 10, 1000, GIB, 1000) for i in range(3)]
    return Trace("test", "hand", nodes, jobs, Counter(), [])


def test_round_policy_queues_like_the_greedy_pass_on_one_machine():
    # The gang holds both GPUs until 100; the three single jobs run then, two at a
    # time: start at 100, 100, 110 under either policy.
    tr = one_gpu_trace()
    greedy = simulate(tr, BEST_FIT)
    flow = QuincySimulator(tr, BEST_FIT, 0, quincy=QuincyConfig(fairness="none")).run()
    assert flow.start.tolist() == greedy.start.tolist() == [0, 100, 100, 110]
    assert flow.profile == "quincy-Q"


def test_quincy_fair_with_preemption_kills_a_running_job_of_the_same_band():
    # Quincy's QFP (section 4): every job of the trace is best effort. At t=1 job j0
    # arrives; four jobs share two GPUs, so the fair shares (water-filled, rounding to
    # the oldest) are g: 1 task, j0: 1 task, and j0's minimum E = 1 is only met by
    # killing the gang g, which the flow does (its kill cost, grown by 1 s of running,
    # is far below the cost of missing a minimum). g queues again and restarts.
    tr = one_gpu_trace()
    qfp = QuincySimulator(
        tr, BEST_FIT, 0, preemption=True, quincy=QuincyConfig(preemption=True, victims="any")
    )
    assert qfp.variant == "QFP"
    r = qfp.run()
    assert r.evicted_jobs >= 1 and r.start[1] == 1.0
    assert r.never_started == 0 and not np.isnan(r.finish).any()
    # esched's commit rule (victims of a strictly lower band) evicts no best-effort job:
    # j0 waits for the gang to end, as without preemption.
    bands = QuincySimulator(tr, BEST_FIT, 0, preemption=True, quincy=QuincyConfig(preemption=True))
    assert bands.variant == "QFP-bands"
    rb = bands.run()
    assert rb.evicted_jobs == 0 and rb.start.tolist()[:2] == [0, 100]
    assert rb.placer_stats["flow"]["kills_deferred"] >= 1


def test_round_seconds_batches_arrivals_but_never_strands_a_job():
    tr = one_gpu_trace()
    r = QuincySimulator(tr, BEST_FIT, 0, round_seconds=1000.0).run()
    assert r.never_started == 0 and not np.isnan(r.finish).any()
    assert r.placer_stats["flow"]["rounds"] <= 4


def test_cli_simulate_policy_quincy(tmp_path: Path):
    res = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--trace",
            "synthetic:nodes=6,jobs=80,seed=2",
            "--profile",
            str(PROFILES / "best-fit.yaml"),
            "--policy",
            "quincy",
            "--preemption",
            "--no-progress",
            "--store",
            f"sqlite:///{tmp_path / 'q.db'}",
        ],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["profile"] == "quincy-QFP-bands"
    assert out["placer"]["flow"]["preemption"] is True
    assert out["jobs"]["finished"] == 80
    assert out["store"]["appended"] == out["store"]["head"]


PHILLY = Path("/work/shared/traces/philly-2017")


@pytest.mark.scale
@pytest.mark.skipif(not PHILLY.exists(), reason="the Philly trace is not here")
def test_philly_window_flow_variants_finish_and_audit():
    """docs/simulation.md's evaluation, on the first 2,000 jobs: every variant
    finishes every job; QF's log audits clean."""
    from esched.services.sim.traces import load_trace

    tr = load_trace(f"philly:{PHILLY}", "70x8")
    tr.jobs = tr.jobs[:2000]
    greedy = summarize(simulate(tr, BEST_FIT))["jobs"]
    assert greedy["finished"] == 2000
    qf = QuincySimulator(tr, BEST_FIT, 0, record=True).run()
    assert summarize(qf)["jobs"]["finished"] == 2000
    assert qf.events is not None
    audited(qf.events)
    qfp = QuincySimulator(tr, BEST_FIT, 0, preemption=True, quincy=QuincyConfig(preemption=True))
    assert summarize(qfp.run())["jobs"]["finished"] == 2000


@pytest.mark.scale
@pytest.mark.skipif(not PHILLY.exists(), reason="the Philly trace is not here")
def test_whole_philly_trace_quincy_fair_with_preemption():
    """docs/simulation.md's whole-trace table (82,247 jobs on 80 machines of 8 GPUs,
    flow rounds at most every 60 s): the greedy queue and Quincy's QFP finish every
    job, and QFP kills running jobs for fair shares."""
    from esched.services.sim.traces import load_trace

    tr = load_trace(f"philly:{PHILLY}", "80x8")
    assert len(tr.jobs) == 82_247
    queue = summarize(simulate(tr, BEST_FIT))["jobs"]
    config = QuincyConfig(preemption=True, victims="any")
    sim = QuincySimulator(tr, BEST_FIT, 0, preemption=True, quincy=config, round_seconds=60)
    run = sim.run()
    qfp = summarize(run)["jobs"]
    assert queue["finished"] == qfp["finished"] == 82_247
    assert run.evicted_jobs > 0


def test_compare_study_quincy_reports_every_policy(tmp_path: Path):
    res = CliRunner().invoke(
        cli,
        [
            "compare",
            "--trace",
            "synthetic:nodes=6,jobs=40,seed=2",
            "--profiles",
            str(PROFILES / "best-fit.yaml"),
            "--study",
            "quincy",
            "--workers",
            "1",
            "--report",
            str(tmp_path / "rep"),
            "--no-progress",
        ],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)["quincy"]
    names = [row[0] for row in out["table"]["rows"]]
    assert names == [
        "queue (best-fit)",
        "quincy Q",
        "quincy QF",
        "quincy QFP",
        "quincy QFP-bands",
    ]
    for s in out["summaries"]:
        assert s["jobs"]["finished"] == 40
    figures = json.loads((tmp_path / "rep" / "figures.json").read_text())
    assert figures["quincy_metrics"]["policy"] == names


def test_cli_simulate_policy_quincy_refuses_a_usage_model():
    """``--usage`` with ``--policy quincy`` is a usage error that says why (Quincy's
    network counts free room by requests: it would not reclaim), before any work."""
    args = ["simulate", "--trace", "synthetic:nodes=6,jobs=20,seed=3,gpus=0"]
    args += ["--profile", str(PROFILES / "best-fit.yaml"), "--policy", "quincy"]
    res = CliRunner().invoke(cli, [*args, "--usage", "synthetic", "--no-progress"])
    assert res.exit_code == 2
    assert "--usage needs --policy queue" in res.output
    assert "counts free room by requests" in res.output
    # Without --usage the same run works.
    ok = CliRunner().invoke(cli, [*args, "--no-progress"])
    assert ok.exit_code == 0, ok.output
