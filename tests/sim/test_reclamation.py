"""Simulated reclamation (issue 20 part 6; Borg, EuroSys '15, section 5.5): usage
reports folded into reservations by the state's own rule, non-production pods placed
in reclaimed resources, overload evictions in the core planner's order, and the study
(share in reclaimed resources, evictions, compaction gain)."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from esched.core import ClusterState, load_profile
from esched.core._reservations import _py_next_reservation as step
from esched.core.reservations import ReclamationConfig
from esched.schemas.events import POD_EVICTED, USAGE_REPORTED
from esched.services.sim.compaction import checkpoint
from esched.services.sim.engine import Simulator
from esched.services.sim.reclamation import reclamation_rows, reclamation_trial
from esched.services.sim.traces import Job, NodeSpec, Trace, load_trace
from esched.services.sim.usage import ConstantUsage, RecordedUsage, SyntheticUsage, parse_usage

GI = 2**30
PROFILES = Path(__file__).resolve().parents[2] / "deploy" / "profiles"
BORG = ReclamationConfig(enabled=True)
OFF = ReclamationConfig(enabled=False)


@pytest.fixture(scope="module")
def best_fit():
    return load_profile(str(PROFILES / "best-fit.yaml"))


def one_node(cpu: int = 1000, mem: int = 20 * GI, n: int = 8, prod: int = 3) -> Trace:
    """One node of 10 cores and 100 GiB; ``n`` jobs of one pod each, the first ``prod``
    of them production (priority 1000), the rest best effort; all arrive at 0 and run
    for ever."""
    jobs = [
        Job(f"j{i}", 0.0, 1e9, cpu, mem, 0, 1, None, 1000 if i < prod else 0, "") for i in range(n)
    ]
    return Trace("synthetic", "one node", [NodeSpec("n0", 10_000, 100 * GI)], jobs, Counter(), [])


def run(trace: Trace, profile, usage, cfg=BORG, horizon: float = 4000.0, **kw) -> Simulator:
    sim = Simulator(
        trace, profile, 0, usage=usage, reclamation=cfg, horizon=horizon, departures=False, **kw
    )
    sim.run()
    return sim


def test_reports_fold_into_reservations_by_the_states_rule_and_replay_alike(best_fit):
    # cpu is the node's binding resource: 8 pods of 2 cores on 10 cores.
    sim = run(one_node(cpu=2000, mem=10 * GI), best_fit, ConstantUsage(0.3), record=True)
    st = sim.state
    cpu = st.res_index["cpu"]
    running = [p for p in range(st.n_pods) if st.node_of(p) >= 0]
    # The report at 0 comes before the first placement (nothing runs yet), so j0 was
    # reported every 60 s from 60: its reservation is the core rule's step
    # (core/_reservations.pxd) chained over those reports, from its limit.
    resv, last, hold_end = 2000, 60.0, 60.0 + BORG.hold
    for t in range(60, 4000, 60):
        resv = step(
            resv, 2000, 600, t - max(last, hold_end), t < hold_end,
            BORG.time_constant, BORG.margin, True,
        )  # fmt: skip
        last = t
    first = st.pod_index["sim/j0"]
    assert st.pod_reservation(first)[cpu] == resv
    assert resv == pytest.approx(0.4 * 2000, rel=0.02)  # decayed to usage + margin
    assert sum(1 for e in sim.events if e["type"] == USAGE_REPORTED) == len(range(60, 4000, 60))
    # The log is the live one: a fresh fold of it gives the same reservations.
    again = ClusterState()
    again.reclamation = BORG
    again.apply_many(enumerate(sim.events, start=1))
    for p in running:
        for r in ("cpu", "memory"):
            assert (
                again.pod_reservation(p)[again.res_index[r]]
                == (st.pod_reservation(p)[st.res_index[r]])
            )


def test_non_production_pods_run_in_reclaimed_resources_when_usage_is_below_limits(best_fit):
    sim = run(one_node(cpu=2000, mem=10 * GI), best_fit, ConstantUsage(0.3))
    start = sim.start
    # Five pods fit by limits (10 cores); the other three wait for the reservations
    # to decay (300 s hold, then the curve) and then run beyond the node's limits.
    assert np.all(start[:5] == 0.0)
    assert np.all(start[5:] > 300.0)
    st = sim.state
    cpu = st.res_index["cpu"]
    assert st.node_limits()[0, cpu] == 16_000 > st.node_allocatable()[0, cpu]
    stats = sim.usage_stats
    assert stats is not None
    assert stats.as_dict()["reclaimed_share_last"]["cpu"] == pytest.approx(6 / 16)
    assert stats.as_dict()["reclaimed_share"]["cpu"] > 0


def test_nothing_is_reclaimed_when_usage_equals_limits(best_fit):
    sim = run(one_node(cpu=2000, mem=10 * GI), best_fit, ConstantUsage(1.0))
    assert np.isnan(sim.start[5:]).all()
    stats = sim.usage_stats
    assert stats is not None
    d = stats.as_dict()
    assert d["reclaimed_share"] == {"cpu": 0.0, "memory": 0.0}
    assert d["evictions"] == {"prod": 0, "non_prod": 0}


def test_placement_by_limits_never_overloads_a_node(best_fit):
    sim = run(one_node(cpu=2000, mem=10 * GI), best_fit, SyntheticUsage(noise=0.3), cfg=OFF)
    stats = sim.usage_stats
    assert stats is not None
    assert stats.overloads == {} and stats.as_dict()["reclaimed_share"]["cpu"] == 0.0


def recorded(tmp_path: Path, rows: list[tuple[str, float, float, float]]) -> RecordedUsage:
    csv = tmp_path / "usage.csv"
    csv.write_text("job,time,cpu,memory\n" + "".join(f"{j},{t},{c},{m}\n" for j, t, c, m in rows))
    return RecordedUsage(csv)


def test_memory_overload_evicts_non_production_pods_never_production(best_fit, tmp_path: Path):
    # Memory binds (8 x 20 GiB on 100 GiB); usage is low, so the best-effort pods are
    # placed in reclaimed memory; at 3000 s every pod's memory usage rises (prod to
    # its limit) and the node runs out.
    rows = [(f"j{i}", 0.0, 0.2, 0.2) for i in range(8)]
    rows += [(f"j{i}", 3000.0, 0.2, 1.0 if i < 3 else 0.5) for i in range(8)]
    sim = run(one_node(), best_fit, recorded(tmp_path, rows), record=True)
    stats = sim.usage_stats
    assert stats is not None
    assert stats.overloads.get("memory", 0) >= 1
    assert stats.evictions["prod"] == 0 and stats.evictions["non_prod"] > 0
    evicted = [e for e in sim.events if e["type"] == POD_EVICTED]
    assert evicted and all(e["data"]["reason"] == "Overloaded" for e in evicted)
    assert all(e["time"] >= "2026-01-01T00:50:00" for e in evicted)  # at the rise, not before
    prod = {f"sim/j{i}" for i in range(3)}
    assert not prod & {e["data"]["pod"] for e in evicted}
    assert all(not math.isnan(sim.start[i]) for i in range(3))  # prod still runs
    # Afterwards the node's usage fits again.
    st = sim.state
    mem = st.res_index["memory"]
    used = sum(st.pod_usage[k]["memory"] for k in st.pods_on_node(0))
    assert used <= st.node_allocatable()[0, mem]


def test_cpu_overload_is_throttled_then_evicted_after_evict_after(best_fit, tmp_path: Path):
    # CPU binds (8 x 2 cores on 10); at 3000 s the best-effort pods' cpu usage rises:
    # throttled (each held at its cap) from 3000 s, evicted once the overload has
    # lasted evict_after (120 s here) on the virtual clock, as the live dispatcher.
    rows = [(f"j{i}", 0.0, 0.2, 0.2) for i in range(8)]
    rows += [(f"j{i}", 3000.0, 0.2 if i < 3 else 1.0, 0.2) for i in range(8)]
    cfg = ReclamationConfig(enabled=True, evict_after=120.0)
    sim = run(one_node(cpu=2000, mem=10 * GI), best_fit, recorded(tmp_path, rows), cfg, record=True)
    stats = sim.usage_stats
    assert stats is not None
    assert stats.throttled > 0
    assert stats.evictions["prod"] == 0 and stats.evictions["non_prod"] > 0
    evicted = [e["time"] for e in sim.events if e["type"] == POD_EVICTED]
    # Reports every 60 s: overloaded at 3000 (the episode begins), 3060, then at 3120
    # it has lasted 120 s: evicted.
    assert min(evicted).startswith("2026-01-01T00:52:00")
    # While throttled the pods got their caps, not what they asked for: the node's
    # cpu (10 cores) was never exceeded by what ran, and the denial is counted.
    assert stats.throttled_seconds >= 2 * 60.0
    assert stats.throttled_cpu > 0
    d = stats.as_dict()
    assert d["throttled_pod_hours"] == stats.throttled_seconds / 3600.0
    assert 0 < d["throttled_cpu_share"] < 1


def test_throttled_pods_get_their_caps_and_the_episode_ends_when_demand_fits(
    best_fit, tmp_path: Path
):
    # A rise that lasts 60 s (< evict_after, 120 s): throttled, never evicted; after
    # it the caps are lifted (no throttled seconds once demand fits again).
    rows = [(f"j{i}", 0.0, 0.2, 0.2) for i in range(8)]
    rows += [(f"j{i}", 3000.0, 0.2 if i < 3 else 1.0, 0.2) for i in range(8)]
    rows += [(f"j{i}", 3060.0, 0.2, 0.2) for i in range(8)]
    cfg = ReclamationConfig(enabled=True, evict_after=120.0)
    sim = run(one_node(cpu=2000, mem=10 * GI), best_fit, recorded(tmp_path, rows), cfg)
    stats = sim.usage_stats
    assert stats is not None
    assert stats.evictions == {"prod": 0, "non_prod": 0}
    assert stats.throttled > 0
    # Held only at the one overloaded report (3000 s): the caps bind then, not after.
    assert stats.throttled_seconds == 60.0 * stats.throttled


@pytest.fixture(scope="module")
def small_cell():
    tr = load_trace("synthetic:nodes=6,jobs=120,seed=3,gpus=0,prod=0.5,load=1.2")
    _, jobs = checkpoint(tr, "peak")
    return tr, jobs


def test_study_on_a_small_workload_reclaims_and_compacts(best_fit, small_cell):
    tr, jobs = small_cell
    res = reclamation_trial(tr, best_fit, jobs, 0, {"usage": SyntheticUsage(), "run": True})
    comp = res["compaction"]
    assert comp["machines_limits"] and comp["machines_reclamation"]
    assert comp["gain"] >= 0 and comp["machines_reclamation"] <= comp["machines_limits"]
    packed = comp["reclamation"]["usage"]
    assert packed["reclaimed_share_last"]["cpu"] > 0  # usage below limits: some reclaimed
    assert res["run"]["usage_over_limits"]["cpu"] < 1
    assert res["run"]["evictions"]["prod"] == 0
    res["profile"] = "best-fit"
    cols, rows = reclamation_rows([res])
    assert len(rows) == 1 and len(rows[0]) == len(cols)
    assert rows[0][cols.index("compaction gain")].endswith("%")


def test_study_with_usage_equal_to_limits_reclaims_nothing_and_gains_nothing(best_fit, small_cell):
    tr, jobs = small_cell
    res = reclamation_trial(tr, best_fit, jobs, 0, {"usage": ConstantUsage(1.0), "run": False})
    comp = res["compaction"]
    assert comp["gain"] == 0.0
    assert comp["machines_reclamation"] == comp["machines_limits"]
    assert comp["reclamation"]["usage"]["reclaimed_share_last"] == {"cpu": 0.0, "memory": 0.0}


@pytest.mark.scale
def test_study_on_the_documented_cell_gains_a_fifth_of_the_machines(best_fit):
    # docs/simulation.md's synthetic cell (one trial): Borg's ~20% is the yardstick.
    tr = load_trace("synthetic:nodes=64,jobs=3000,seed=1,gpus=0,prod=0.5,load=1.2")
    _, jobs = checkpoint(tr, "peak")
    res = reclamation_trial(tr, best_fit, jobs, 0, {"usage": SyntheticUsage(), "run": False})
    comp = res["compaction"]
    assert comp["gain"] > 0.2
    assert comp["reclamation"]["usage"]["reclaimed_share_last"]["cpu"] > 0.2


def test_correlated_usage_costs_non_production_evictions_never_production(best_fit, small_cell):
    # The small cell's checkpoint packed on 4 of its 6 machines with reclamation (as
    # the study's compaction does): pods that rise together (the cell's common
    # factor) overload nodes the independent model never does.
    tr, jobs = small_cell
    jobs = sorted(jobs, key=lambda j: -j.priority)

    def pack(spec: str) -> dict:
        sim = Simulator(
            tr, best_fit, 0, jobs=jobs, node_subset=[0, 1, 2, 3], departures=False,
            usage=parse_usage(spec), reclamation=BORG, horizon=6300.0,
        )  # fmt: skip
        sim.run()
        assert sim.usage_stats is not None
        return sim.usage_stats.as_dict()

    calm, moving = pack("synthetic"), pack("correlated:cell=0.3")
    assert calm["evictions"] == {"prod": 0, "non_prod": 0} and calm["overloads"] == {}
    assert moving["evictions"]["prod"] == 0 and moving["evictions"]["non_prod"] > 0
    assert moving["non_prod_evictions_per_task_hour"] > 0
    assert moving["throttled"] > 0 and moving["throttled_cpu_share"] > 0
