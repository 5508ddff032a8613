"""``esched simulate`` / ``compare`` end to end: store, replay, audit, report files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from esched.services.cli import cli

PROFILES = Path(__file__).resolve().parents[2] / "deploy" / "profiles"


def run(*args: str) -> dict:
    res = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_simulate_store_replay_audit_report(tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'sim.db'}"
    out = run(
        "simulate",
        "--trace",
        "synthetic:nodes=6,jobs=120,seed=2,load=1.5",
        "--profile",
        str(PROFILES / "fgd.yaml"),
        "--seed",
        "4",
        "--store",
        db,
        "--report",
        str(tmp_path / "rep"),
        "--no-progress",
    )
    assert out["placements"] > 0 and out["store"]["appended"] == out["store"]["head"]
    assert out["jobs"]["quincy"]["snp"] <= 1.0
    assert "gpu_fragmentation" in out
    replay = run("replay", "--store", db)
    assert replay["position"] == out["store"]["head"]
    audit = run("audit", "--store", db)
    assert audit["ok"] and audit["checked"]["committed"] == out["placements"]
    html = (tmp_path / "rep" / "report.html").read_text()
    assert html.count("<svg") >= 3 and "<script" not in html
    figs = json.loads((tmp_path / "rep" / "figures.json").read_text())
    assert {"allocation_over_time", "pending_over_time", "node_heatmap"} <= set(figs)


def test_simulate_errors_are_usage_errors(tmp_path: Path):
    res = CliRunner().invoke(
        cli,
        ["simulate", "--trace", f"itp:{tmp_path}", "--profile", str(PROFILES / "best-fit.yaml")],
    )
    assert res.exit_code == 2 and "not a cluster CSV" in res.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "profiles: [{plugins: {score: {enabled: [{name: Nope}]}}}]"
    )
    res = CliRunner().invoke(cli, ["simulate", "--trace", "synthetic:", "--profile", str(bad)])
    assert res.exit_code == 2 and "unknown plugin 'Nope'" in res.output


def test_compare_profiles_side_by_side(tmp_path: Path):
    out = run(
        "compare",
        "--trace",
        "synthetic:nodes=8,jobs=80,seed=1,load=1.0",
        "--profiles",
        str(PROFILES / "best-fit.yaml"),
        str(PROFILES / "worst-fit.yaml"),
        "--study",
        "simulate,compaction,inflation,holes,curve",
        "--trials",
        "2",
        "--curve-seeds",
        "1",
        "--tau",
        "0.05",
        "--workers",
        "2",
        "--report",
        str(tmp_path / "cmp"),
        "--no-progress",
    )
    assert [s["profile"] for s in out["simulate"]["summaries"]] == ["best-fit", "worst-fit"]
    assert len(out["compaction"]["trials"]) == 4
    assert out["compaction"]["table"]["rows"][0][0] == "best-fit"
    # tau = 0.05 here: no capacity bound (it is a bound for tau = 0 only)
    assert all(t["capacity_bound"] is None for t in out["compaction"]["trials"])
    assert {r["profile"] for r in out["curve"]["trials"]} == {"best-fit", "worst-fit"}
    figs = json.loads((tmp_path / "cmp" / "figures.json").read_text())
    assert {"compaction", "inflation", "hole_filling", "gpu_allocation_curve"} <= set(figs)
    # hole filling: default fillers (a core, a GiB, a GPU, the most common shape), per
    # profile, in the JSON, the table, figures.json and the HTML
    fillers = [f["name"] for f in out["holes"]["params"]["fillers"]]
    assert fillers[:3] == ["cpu=1", "memory=1Gi", "gpu=1"] and len(fillers) == 4
    rows = out["holes"]["table"]["rows"]
    assert {(r[0], r[1]) for r in rows} == {
        (f, p) for f in fillers for p in ("best-fit", "worst-fit")
    }
    assert set(figs["hole_filling"]["fillers"]["gpu=1"]) == {"best-fit", "worst-fit"}
    assert len(figs["hole_filling"]["fillers"]["gpu=1"]["best-fit"]["counts"]) == 2
    html = (tmp_path / "cmp" / "report.html").read_text()
    assert "id='hole_filling'" in html and "<h2>holes</h2>" in html
    paper = figs["gpu_allocation_curve"]["paper"]
    assert dict(paper["FGD"]["alloc"])[100] == pytest.approx(95.23)
    assert dict(paper["BestFit"]["frag"])[100] == pytest.approx(7.02)


def test_compare_curve_with_both_methods_side_by_side(tmp_path: Path):
    out = run(
        "compare",
        "--trace",
        "synthetic:nodes=8,jobs=80,seed=1,load=1.0",
        "--profiles",
        str(PROFILES / "fgd.yaml"),
        str(PROFILES / "paper-best-fit.yaml"),
        "--study",
        "curve",
        "--curve-seeds",
        "1",
        "--method",
        "both",
        "--workers",
        "1",
        "--report",
        str(tmp_path / "cmp"),
        "--no-progress",
    )
    table = out["curve"]["table"]
    assert table["columns"][:3] == ["profile", "seeds", "GPU alloc % @100 (median)"]
    assert "frag % of capacity @100" in table["columns"]
    assert [r[0] for r in table["rows"]] == [
        "fgd",
        "paper-best-fit",
        "fgd [paper method]",
        "paper-best-fit [paper method]",
    ]
    assert out["curve"]["params"]["method"] == "both"
    paper = [t for t in out["curve"]["trials"] if t["method"] == "paper"]
    assert {t["tie_break"] for t in paper} == {"node-order"}
    figs = json.loads((tmp_path / "cmp" / "figures.json").read_text())
    assert figs["gpu_allocation_curve"]["fgd [paper method]"]["method"] == "paper"


def test_compare_hole_filling_with_given_fillers(tmp_path: Path):
    out = run(
        "compare",
        "--trace",
        "synthetic:nodes=6,jobs=60,seed=3,load=1.0",
        "--profiles",
        str(PROFILES / "best-fit.yaml"),
        "--study",
        "holes",
        "--trials",
        "1",
        "--filler",
        "gpu=0.5",
        "--filler",
        "cpu=4,memory=16Gi",
        "--workers",
        "1",
        "--no-progress",
    )
    (t,) = out["holes"]["trials"]
    assert [f["filler"] for f in t["fillers"]] == ["gpu=0.5", "cpu=4,memory=16Gi"]
    assert all(f["count"] >= 0 for f in t["fillers"])
    res = CliRunner().invoke(
        cli,
        [
            "compare",
            "--trace",
            "synthetic:",
            "--profiles",
            str(PROFILES / "random.yaml"),
            "--study",
            "holes",
            "--filler",
            "gpu=1.5",
        ],
    )
    assert res.exit_code == 2 and "whole GPUs" in res.output


def test_compare_rejects_unknown_study():
    res = CliRunner().invoke(
        cli,
        [
            "compare",
            "--trace",
            "synthetic:",
            "--profiles",
            str(PROFILES / "random.yaml"),
            "--study",
            "nope",
        ],
    )
    assert res.exit_code == 2 and "unknown study" in res.output


def test_simulate_takes_the_queue_hierarchy_option_as_the_replica_does(monkeypatch):
    """``--queue-hierarchy`` (env ``ESCHED_QUEUE_HIERARCHY``), the replica's option:
    it reaches the scheduling pass's config and the summary; other values are
    refused as usage errors."""
    from esched.services.sim import engine

    seen: list[str] = []
    init = engine.Simulator.__init__

    def spy(self, *a, **kw):
        init(self, *a, **kw)
        seen.append(self.pass_config.queue_hierarchy)

    monkeypatch.setattr(engine.Simulator, "__init__", spy)
    args = ["simulate", "--trace", "synthetic:nodes=2,jobs=5,seed=1", "--no-progress"]
    args += ["--profile", str(PROFILES / "best-fit.yaml")]
    out = run(*args, "--queue-hierarchy", "annotations")
    assert out["queue_hierarchy"] == "annotations" and seen == ["annotations"]
    monkeypatch.setenv("ESCHED_QUEUE_HIERARCHY", "annotations")
    assert run(*args)["queue_hierarchy"] == "annotations"
    monkeypatch.delenv("ESCHED_QUEUE_HIERARCHY")
    assert run(*args)["queue_hierarchy"] == "parent"
    assert seen == ["annotations", "annotations", "parent"]
    res = CliRunner().invoke(cli, [*args, "--queue-hierarchy", "tree"])
    assert res.exit_code == 2 and "tree" in res.output


def test_simulator_refuses_an_unknown_queue_hierarchy():
    from esched.core import load_profile
    from esched.services.sim.engine import Simulator
    from esched.services.sim.traces import load_trace

    tr = load_trace("synthetic:nodes=2,jobs=3,seed=1")
    with pytest.raises(ValueError, match="queue hierarchy"):
        Simulator(tr, load_profile(PROFILES / "best-fit.yaml"), queue_hierarchy="tree")


#: A CPU and memory cell with a production band (Borg's kind of workload), small.
RECLAIM_TRACE = "synthetic:nodes=6,jobs=120,seed=3,gpus=0,prod=0.5,load=1.2"


def test_compare_reclamation_study_reports_borgs_measures(tmp_path: Path):
    out = run(
        "compare",
        "--trace",
        RECLAIM_TRACE,
        "--profiles",
        str(PROFILES / "best-fit.yaml"),
        "--study",
        "reclamation",
        "--usage",
        "synthetic:seed=1",
        "--usage-every",
        "300",
        "--horizon",
        "3600",
        "--trials",
        "1",
        "--workers",
        "1",
        "--report",
        str(tmp_path / "rec"),
        "--no-progress",
    )
    study = out["reclamation"]
    cols = study["table"]["columns"]
    for col in (
        "reclaimed cpu (run)",
        "reclaimed mem (run)",
        "non-prod evictions / task-hour",
        "per 1,000 non-prod tasks",
        "machines by limits",
        "machines with reclamation",
        "compaction gain",
    ):
        assert col in cols
    (row,) = study["table"]["rows"]
    assert row[0] == "best-fit"
    (trial,) = study["trials"]
    comp = trial["compaction"]
    assert comp["gain"] >= 0 and comp["machines_reclamation"] <= comp["machines_limits"]
    assert trial["run"]["evictions"]["prod"] == 0
    params = study["params"]
    assert params["usage_model"]["seed"] == 1 and params["reclamation"]["enabled"] is True
    assert params["every_s"] == 300 and params["horizon_s"] == 3600
    assert any("Beta" in a for a in params["assumptions"])
    assert study["borg"]["reclaimed_share_median_cell"] == 0.2
    figs = json.loads((tmp_path / "rec" / "figures.json").read_text())
    assert "best-fit" in figs["reclamation"]
    html = (tmp_path / "rec" / "report.html").read_text()
    assert "id='reclamation'" in html and "usage model" in html


def test_simulate_with_a_usage_model_logs_usage_that_replays_and_audits(tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'use.db'}"
    cfg = tmp_path / "esched.yaml"
    cfg.write_text("reclamation:\n  enabled: true\n")
    out = run(
        "--config",
        str(cfg),
        "simulate",
        "--trace",
        RECLAIM_TRACE,
        "--profile",
        str(PROFILES / "best-fit.yaml"),
        "--usage",
        "constant:0.3",
        "--usage-every",
        "120",
        "--store",
        db,
        "--no-progress",
    )
    use = out["usage"]
    assert use["reports"] > 0 and use["usage_over_limits"]["cpu"] == pytest.approx(0.3, abs=0.01)
    assert use["reservations_over_limits"]["cpu"] < 1.0
    assert out["reclamation"]["enabled"] is True and out["usage_model"]["spec"] == "constant:0.3"
    assert use["reclaimed_share"]["cpu"] > 0  # the cell is contended: some pods run reclaimed
    replay = run("--config", str(cfg), "replay", "--store", db)
    assert replay["position"] == out["store"]["head"]
    # The audit judges the simulated decisions by the same accounting (reservations).
    audit = run("--config", str(cfg), "audit", "--store", db)
    assert audit["ok"] and audit["checked"]["reproduced"] == out["placements"]


def test_simulate_rejects_a_bad_usage_model():
    res = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--trace",
            "synthetic:nodes=2,jobs=4",
            "--profile",
            str(PROFILES / "best-fit.yaml"),
            "--usage",
            "synthetic:cpu=2",
        ],
    )
    assert res.exit_code == 2 and "--usage: synthetic: cpu=2.0" in res.output


def test_simulate_reclaim_flag_switches_the_config_section_for_the_run():
    args = ["simulate", "--trace", "synthetic:nodes=2,jobs=6,gpus=0", "--no-progress"]
    args += ["--profile", str(PROFILES / "best-fit.yaml"), "--usage", "limits"]
    on, off = run(*args, "--reclaim"), run(*args)
    assert on["reclamation"]["enabled"] is True and off["reclamation"]["enabled"] is False
    # usage == limits: nothing to reclaim even when it is on
    assert on["usage"]["reclaimed_share"] == {"cpu": 0.0, "memory": 0.0}
