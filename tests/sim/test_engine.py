"""The simulator on hand-built traces: queueing, GPU sharing, gangs, withdrawal,
metrics by hand, the event log (schema-valid, replayable, audited), determinism."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from esched.core import ClusterState, parse_profile
from esched.schemas.events import EXTERNAL_TYPES, INTERNAL_TYPES
from esched.schemas.validator import validate_event
from esched.services.audit import Auditor
from esched.services.sim.engine import GPU_RESOURCE, HEATMAP_SAMPLES, simulate
from esched.services.sim.metrics import job_metrics, summarize, time_average
from esched.services.sim.traces import GIB, Job, NodeSpec, Trace, synthetic
from support.kube import fit_profile

BEST_FIT = parse_profile(
    fit_profile(
        "MostAllocated",
        [{"name": "cpu", "weight": 1}, {"name": GPU_RESOURCE, "weight": 1}],
        percentage=100,
    )
)
FGD = parse_profile(
    {
        "profiles": [
            {
                "percentageOfNodesToScore": 100,
                "plugins": {"score": {"disabled": [{"name": "*"}], "enabled": [{"name": "FGD"}]}},
            }
        ]
    }
)


def node(name: str, gpus: int, cpu: int = 32_000) -> NodeSpec:
    return NodeSpec(name, cpu, 64 * GIB, gpus, "T4" if gpus else None)


def job(
    name: str,
    t: float,
    d: float,
    g: int = 0,
    cpu: int = 1000,
    tasks: int = 1,
    deadline: float | None = None,
) -> Job:
    return Job(name, t, d, cpu, GIB, g, tasks, None, 0, "", deadline)


def trace(nodes, jobs) -> Trace:
    return Trace("test", "hand", list(nodes), list(jobs), Counter(), [])


def test_share_that_does_not_fit_a_device_waits_for_it():
    # One node, one GPU. a takes 600 milli; b (600) does not fit the 400 left, although
    # the node has GPU milli free in aggregate terms only if shares were pooled; it
    # starts when a leaves at t=10. c (400) fits beside a at once.
    tr = trace([node("n0", 1)], [job("a", 0, 10, 600), job("b", 1, 5, 600), job("c", 2, 4, 400)])
    r = simulate(tr, BEST_FIT)
    assert r.start.tolist() == [0, 10, 2]
    assert r.finish.tolist() == [10, 15, 6]
    assert r.pending.max() == 1
    # metrics by hand: ANP = d / (finish - arrival): 1, 5/14, 1
    m = job_metrics(r.arrival, r.start, r.finish, r.duration)
    anp = np.array([1.0, 5 / 14, 1.0])
    assert m["quincy"]["snp"] == pytest.approx(anp.mean())
    assert m["quincy"]["slowdown_l1"] == pytest.approx((1 + 14 / 5 + 1) / 3)
    assert m["quincy"]["slowdown_l2"] == pytest.approx(math.sqrt((1 + (14 / 5) ** 2 + 1) / 3))
    assert m["quincy"]["slowdown_linf"] == pytest.approx(14 / 5)
    assert m["quincy"]["unfairness"] == pytest.approx(anp.std() / anp.mean())
    assert m["latency_s"]["max"] == 9 and m["latency_s"]["waited_share"] == pytest.approx(1 / 3)


def test_gang_is_all_or_nothing():
    # Two 8-GPU nodes. A 1-GPU job holds n0 until t=5, so the 16-GPU gang (2 x 8)
    # cannot start at t=1 even though n1 is free; it starts whole at t=5.
    tr = trace(
        [node("n0", 8), node("n1", 8)],
        [job("small", 0, 5, 1000), job("gang", 1, 10, 8000, tasks=2)],
    )
    r = simulate(tr, BEST_FIT, record=True)
    assert r.start.tolist() == [0, 5]
    commits = [e for e in r.events if e["type"] == "esched.placement.committed"]
    gang = commits[-1]["data"]
    assert gang["gang"] == "sim/gang" and len(gang["bindings"]) == 2
    assert {b["node"] for b in gang["bindings"]} == {"n0", "n1"}
    assert all(len(b["devices"]) == 8 for b in gang["bindings"])


def test_gang_members_with_gpu_shares_are_exact_per_device():
    # Node a (two V100s) holds "pre", 600 milli on one device: 400 + 1000 free. Node b
    # has one T4. A gang of two 600-milli shares arrives at t=1: best fit puts the
    # first member on a's idle device; a then has 800 milli free in sum but no device
    # with 600, so the second member must go to b, and the gang starts at once (a plan
    # that saw only the sum put both on a and failed until "pre" left at t=100).
    a = NodeSpec("a", 32_000, 64 * GIB, 2, "V100")
    b = NodeSpec("b", 32_000, 64 * GIB, 1, "T4")
    pre = Job("pre", 0, 100, 1000, GIB, 600, 1, ("V100",), 0, "")
    tr = trace([a, b], [pre, job("gang", 1, 10, 600, tasks=2)])
    r = simulate(tr, BEST_FIT, record=True)
    assert r.start.tolist() == [0, 1]
    gang = [e["data"] for e in r.events if e["type"] == "esched.placement.committed"][-1]
    assert sorted((x["node"], x["devices"]) for x in gang["bindings"]) == [("a", [1]), ("b", [0])]
    assert r.device_stats["free_milli"] == 3000  # everything released at the end


def test_pending_pod_is_withdrawn_at_its_deletion_time():
    tr = trace([node("n0", 1)], [job("a", 0, 100, 1000), job("b", 1, 5, 1000, deadline=50)])
    r = simulate(tr, BEST_FIT)
    assert np.isnan(r.start[1]) and r.withdrawn == 1 and r.never_started == 0
    assert r.pending[-1] == 0


def test_allocation_series_and_time_average():
    tr = trace([node("n0", 2)], [job("a", 0, 10, 1000), job("b", 5, 10, 500)])
    r = simulate(tr, BEST_FIT)
    assert r.t.tolist() == [0, 5, 10, 15]
    assert r.alloc[GPU_RESOURCE].tolist() == [1000, 1500, 500, 0]
    assert r.capacity[GPU_RESOURCE] == 2000
    # over [0, 5] (first to last arrival): 1000 the whole time
    assert time_average(r.t, r.alloc[GPU_RESOURCE], 0, 5) == 1000
    assert time_average(r.t, r.alloc[GPU_RESOURCE], 0, 15) == pytest.approx(
        (1000 * 5 + 1500 * 5 + 500 * 5) / 15
    )
    s = summarize(r)
    assert s["allocation"]["gpu"]["mean_rate"] == pytest.approx(0.5)
    assert s["allocation"]["gpu"]["peak_rate"] == pytest.approx(0.75)


def test_heat_samples_stop_at_the_last_arrival():
    # A pod running for ~32 years after the last arrival: the drain is not sampled
    # (the heat map's grid covers 0 .. last arrival), so the run stays instant.
    tr = trace([node("n0", 1)], [job("a", 0, 1e9, 1000), job("b", 10, 5, 0)])
    r = simulate(tr, BEST_FIT)
    assert r.heat.shape[0] <= HEATMAP_SAMPLES + 1 and r.heat_t.max() <= 10
    assert r.finish.tolist() == [1e9, 15]


def test_stranded_resources():
    # n0: CPU exhausted by a (32 of 32 cores), 2 GPUs idle there -> 2000 milli stranded.
    tr = trace([node("n0", 2), node("n1", 2)], [job("a", 0, 10, 0, cpu=32_000)])
    r = simulate(tr, BEST_FIT)
    assert r.stranded[GPU_RESOURCE][0] == 2000
    assert r.stranded["cpu"][0] == 0


def test_log_is_valid_replayable_and_audits_clean():
    tr = synthetic(nodes=6, jobs=150, seed=3, load=1.5)
    r = simulate(tr, FGD, seed=7, record=True)
    assert r.placements > 0 and r.pending.max() > 0
    kinds = Counter(e["type"] for e in r.events)
    for ev in r.events:
        validate_event(ev, allowed_types=EXTERNAL_TYPES + INTERNAL_TYPES)
    st = ClusterState()
    st.apply_many(enumerate(r.events, start=1))
    assert st.anomalies == {}
    assert st.summary()["pods"]["Succeeded"] == kinds["esched.pod.succeeded"]
    auditor = Auditor()
    for pos, ev in enumerate(r.events, start=1):
        auditor.feed(pos, ev)
    report = auditor.report()
    assert report["ok"], report["violations"][:3]


def test_device_exactness_holds_through_a_busy_run():
    # Shares and whole GPUs mixed on few nodes: at every commit the devices each
    # binding names have room (the table raises otherwise), and the aggregate in the
    # state equals the sum over devices.
    tr = synthetic(nodes=4, jobs=300, seed=5, load=2.0)
    r = simulate(tr, BEST_FIT, record=True)
    per_dev: dict = {}
    alloc: dict = {}
    for ev in r.events:
        if ev["type"] == "esched.placement.committed":
            for b in ev["data"]["bindings"]:
                g = b["resources"].get(GPU_RESOURCE, 0)
                per = g if g < 1000 else 1000
                for d in b.get("devices", []):
                    per_dev[(b["node"], d)] = per_dev.get((b["node"], d), 0) + per
                    assert per_dev[(b["node"], d)] <= 1000
                alloc[b["pod"]] = (b["node"], b.get("devices", []), per)
        elif ev["type"] == "esched.pod.succeeded":
            key = "sim/" + ev["data"]["metadata"]["name"]
            n, devs, per = alloc.pop(key)
            for d in devs:
                per_dev[(n, d)] -= per
    assert r.device_stats["free_milli"] == r.device_stats["gpus"] * 1000


def test_same_seed_same_run_and_seed_matters():
    tr = synthetic(nodes=8, jobs=200, seed=1, load=1.2)
    a = simulate(tr, BEST_FIT, seed=11, record=True)
    b = simulate(tr, BEST_FIT, seed=11, record=True)
    assert [e["data"] for e in a.events] == [e["data"] for e in b.events]
    random_profile = parse_profile(
        {
            "profiles": [
                {
                    "percentageOfNodesToScore": 100,
                    "plugins": {"score": {"disabled": [{"name": "*"}]}},
                }
            ]
        }
    )
    c = simulate(tr, random_profile, seed=1, record=True)
    d = simulate(tr, random_profile, seed=2, record=True)
    assert [e["data"] for e in c.events] != [e["data"] for e in d.events]


def test_fgd_packs_shares_onto_used_gpus():
    # After a, one GPU has 500 free; the target workload (the trace's types) is 3/4
    # 500-shares and 1/4 whole GPUs, so that half GPU is a fragment for whole-GPU pods
    # (F = 125); b on it removes the fragment (delta -125), b on an idle GPU elsewhere
    # makes one (+125): FGD fills the hole.
    tr = trace(
        [node("n0", 2), node("n1", 2)],
        [
            job("a", 0, 100, 500),
            job("b", 1, 100, 500),
            job("c", 2, 100, 500),
            job("d", 3, 100, 1000),
        ],
    )
    r = simulate(tr, FGD, record=True)
    commits = [
        e["data"]["bindings"][0] for e in r.events if e["type"] == "esched.placement.committed"
    ]
    assert (commits[1]["node"], commits[1]["devices"]) == (
        commits[0]["node"],
        commits[0]["devices"],
    )
    assert r.frag is not None


def _prio_job(name: str, t: float, d: float, cpu: int, priority: int, tasks: int = 1) -> Job:
    return Job(name, t, d, cpu, GIB, 0, tasks, None, priority, "")


def test_preemption_in_simulation_evicts_a_lower_band_and_requeues_it():
    # One node of 2 CPUs. "low" (best-effort) holds it from t=0 for 100 s; "high"
    # (production) arrives at t=1. With preemption it evicts "low" at once, and "low"
    # runs again, whole, when "high" leaves at t=11; without, "high" waits until t=100.
    tr = trace(
        [node("n0", 0, cpu=2000)],
        [_prio_job("low", 0, 100, 2000, 0), _prio_job("high", 1, 10, 2000, 1000)],
    )
    plain = simulate(tr, BEST_FIT)
    assert plain.start.tolist() == [0, 100] and plain.preemptions == 0
    r = simulate(tr, BEST_FIT, record=True, preemption=True)
    assert r.start.tolist() == [11, 1]
    assert r.finish.tolist() == [111, 11]
    assert r.preemptions == 1 and r.evicted_jobs == 1
    evicted = [e["data"] for e in r.events if e["type"] == "esched.pod.evicted"]
    assert [(d["pod"], d["node"], d["by"]) for d in evicted] == [("sim/low", "n0", "sim/high")]
    for ev in r.events:
        validate_event(ev, allowed_types=EXTERNAL_TYPES + INTERNAL_TYPES)
    st = ClusterState()
    st.apply_many(enumerate(r.events, start=1))
    assert st.anomalies == {}
    assert st.summary()["pods"]["Succeeded"] == 2
    # The preemption is logged as the commit service logs one: the audit checks it.
    auditor = Auditor()
    for pos, ev in enumerate(r.events, start=1):
        auditor.feed(pos, ev)
    report = auditor.report()
    assert report["ok"], report["violations"][:3]
    assert report["checked"]["preemptions"] == 1


def test_preemption_in_simulation_keeps_equal_bands_apart():
    # Same band (both best-effort): no eviction, "second" waits for "first".
    tr = trace(
        [node("n0", 0, cpu=2000)],
        [_prio_job("first", 0, 100, 2000, 0), _prio_job("second", 1, 10, 2000, 50)],
    )
    r = simulate(tr, BEST_FIT, preemption=True)
    assert r.start.tolist() == [0, 100] and r.preemptions == 0


def test_starving_gang_gets_nodes_reserved_in_simulation():
    # Two nodes of 2 CPUs; a stream of 1-CPU pods keeps some room taken on both, so
    # the 2 x 2-CPU gang never sees both nodes empty at once. With the starvation
    # guard (reserve after 5 s of virtual time) its nodes are reserved, drain, and
    # it runs; without, it waits until the stream ends.
    smalls = [_prio_job(f"s{i}", float(i), 3, 1000, 0) for i in range(0, 40)]
    smalls += [_prio_job(f"t{i}", i + 0.5, 3, 1000, 0) for i in range(0, 40)]
    gang = _prio_job("gang", 0.25, 10, 2000, 0, tasks=2)
    tr = trace(
        [node("n0", 0, cpu=2000), node("n1", 0, cpu=2000)],
        sorted([*smalls, gang], key=lambda j: j.arrival),
    )
    g = sorted([*smalls, gang], key=lambda j: j.arrival).index(gang)
    plain = simulate(tr, BEST_FIT)
    r = simulate(tr, BEST_FIT, record=True, reserve_after=5.0)
    assert r.reservations == 1
    assert r.start[g] < plain.start[g]
    reserved = [e["data"] for e in r.events if e["type"] == "esched.gang.reserved"]
    assert reserved[0]["gang"] == "sim/gang" and sorted(reserved[0]["nodes"]) == ["n0", "n1"]
    st = ClusterState()
    st.apply_many(enumerate(r.events, start=1))
    assert st.anomalies == {} and not st.reservations
