"""Load-aware placement: the Usage plugin (Volcano's ``usage``) over the nodes' measured
usage, folded from ``esched.usage.reported`` on the log's clock.

The kernel and filter vectors are Volcano's, ported from
volcano-sh/volcano pkg/scheduler/plugins/usage/usage_test.go (TestUsage_nodeOrderFn,
TestUsage_predicateFn, TestUsageThresholdsKeepDefaultWhenOutOfRange,
TestUsageWeightsKeepDefaultWhenNegative,
TestUsage_prioritizeNodesDoesNotDoubleCountNodeOrder): nodes of 4 cpu and 8Gi, usage
given there as percentages, here as the base units those percentages are of the
node's allocatable. Where esched differs, the test says why.
"""

from __future__ import annotations

import orjson
import pytest

from esched.core import ClusterState
from esched.core._placer import Placer
from esched.core.profile import ProfileError, parse_profile
from esched.core.schedule import PassConfig, SchedulingPass, Target
from esched.core.scoring._py_kernels import _py_usage, _py_usage_over
from support.fold import EV, Log, node, pod

GI = 2**30
CPU, MEM = 4000, 8 * GI  # Volcano's test nodes: 4 cpu, 8Gi
T0 = "2026-01-01T00:00:00Z"


def at(seconds: int) -> str:
    """T0 plus ``seconds`` (< 1 day), as an event time."""
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"2026-01-01T{h:02d}:{m:02d}:{s:02d}Z"


def pct(percent: float, of: int) -> int:
    """``percent`` of ``of`` in base units (exact for the vectors' whole percents)."""
    return int(of * percent) // 100


def usage_profile(weight: int = 5, **args):
    """A profile scoring Usage alone (Volcano's tests enable only the usage plugin)."""
    return parse_profile(
        {
            "profiles": [
                {
                    "plugins": {
                        "score": {
                            "disabled": [{"name": "*"}],
                            "enabled": [{"name": "Usage", "weight": weight}],
                        }
                    },
                    "pluginConfig": [{"name": "Usage", "args": args}],
                }
            ]
        }
    )


def report(log: Log, when: str, **nodes: tuple[float, float]) -> None:
    """One usage report at ``when``: per node (cpu %, memory %) of 4 cpu / 8Gi."""
    log(
        EV.USAGE_REPORTED,
        {
            "nodes": [
                {"name": n, "usage": {"cpu": f"{pct(c, CPU)}m", "memory": str(pct(m, MEM))}}
                for n, (c, m) in nodes.items()
            ]
        },
        time=when,
    )


def volcano_cluster() -> tuple[ClusterState, Log]:
    """Volcano's n1..n5 with TestUsage_nodeOrderFn's usage: n1 30/50, n2 60/50, n3 60/80
    fresh; n4 10/20 reported six minutes before the others (stale: MetricsActiveTime is
    5 min); n5 with metrics time zero, i.e. never reported (esched: no report at all)."""
    st = ClusterState()
    log = Log(st)
    for n in ("n1", "n2", "n3", "n4", "n5"):
        log(EV.NODE_ADDED, node(n, cpu="4", memory="8Gi", pods="10"))
    report(log, at(0), n4=(10, 20))
    report(log, at(360), n1=(30, 50), n2=(60, 50), n3=(60, 80))
    return st, log


# ---------------------------------------------------------------- kernel vectors


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        # "Node scoring in the default weight configuration scenario": usage.weight 5,
        # cpu.weight 1, memory.weight 1. n1: ((100-30) + (100-50)) / 2 = 60, x5 = 300.
        ((1, 1), {"n1": 300, "n2": 225, "n3": 150, "n4": 0, "n5": 0}),
        # "Node scoring gives priority to memory resources": cpu.weight 2, memory.weight 8.
        # n1: (70*2 + 50*8) / 10 = 54, x5 = 270; n2: (40*2 + 50*8) / 10 = 48 -> 240.
        ((2, 8), {"n1": 270, "n2": 240, "n3": 120, "n4": 0, "n5": 0}),
    ],
)
def test_usage_scores_match_volcanos_node_order(weights, expected):
    st, _log = volcano_cluster()
    prof = usage_profile(
        resources=[{"name": "cpu", "weight": weights[0]}, {"name": "memory", "weight": weights[1]}],
        thresholds={"cpu": 80, "mem": 80},
    )
    placer = Placer(st, prof)
    p1 = pod("p1", cpu="1", memory="1Gi")
    # esched's kernel scores 0..100 and the profile weight multiplies (Volcano folds
    # usage.weight into nodeOrderFn's score: the same product).
    got = {n: 5 * placer.scores(p1, n)["Usage"] for n in expected}
    assert got == expected


def test_usage_kernel_is_least_allocated_on_measured_usage():
    # n2 of the vectors: 60% cpu, 50% memory -> (40 + 50) / 2 = 45.
    assert _py_usage([pct(60, CPU), pct(50, MEM)], [CPU, MEM], [1, 1]) == 45
    # No fresh report: 0 (Volcano's isMetricsAvailable false).
    assert _py_usage(None, [CPU, MEM], [1, 1]) == 0
    # Over capacity scores 0 for that resource, as LeastAllocated does for requests.
    assert _py_usage([2 * CPU, 0], [CPU, MEM], [1, 1]) == 50
    # A resource with allocatable 0 is skipped.
    assert _py_usage([0, 0], [0, MEM], [1, 1]) == 100


def test_usage_score_counts_once_in_the_total():
    # TestUsage_prioritizeNodesDoesNotDoubleCountNodeOrder: n1 300, n2 225 as totals.
    st, _log = volcano_cluster()
    placer = Placer(st, usage_profile())
    out = placer.explain(pod("p1", cpu="1", memory="1Gi"))
    totals = {row["name"]: row["total"] for row in out["nodes"]}
    assert totals["n1"] == 300 and totals["n2"] == 225 and out["chosen"] == "n1"


# ---------------------------------------------------------------- filter vectors


def test_threshold_comparison_is_strictly_above_as_volcano():
    assert _py_usage_over(pct(81, CPU), CPU, 80)
    assert not _py_usage_over(pct(80, CPU), CPU, 80)
    assert not _py_usage_over(10 * CPU, CPU, -1)  # no threshold on the resource


def test_usage_filter_matches_volcanos_predicate():
    # TestUsage_predicateFn's five nodes, thresholds cpu 80, mem 80.
    st = ClusterState()
    log = Log(st)
    for n in ("n1", "n2", "n3", "n4", "n5"):
        log(EV.NODE_ADDED, node(n, cpu="4", memory="8Gi", pods="10"))
    report(log, at(0), n4=(90, 81))  # exceeds both, but 6 minutes old by the next report
    report(log, at(360), n1=(81, 60), n2=(60, 81), n3=(80, 79))
    placer = Placer(st, usage_profile(thresholds={"cpu": 80, "mem": 80}))
    p1 = pod("p1", cpu="1", memory="1Gi")
    hot = "node(s) had measured load above the usage threshold"
    assert placer.fits(p1, "n1") == [hot]  # cpu 81 > 80
    assert placer.fits(p1, "n2") == [hot]  # memory 81 > 80
    assert placer.fits(p1, "n3") == []  # 80 and 79 do not exceed 80
    assert placer.fits(p1, "n4") == []  # stale metrics: the filter passes
    assert placer.fits(p1, "n5") == []  # never reported: the filter passes


def test_enable_predicate_false_scores_without_filtering():
    st, log = volcano_cluster()
    report(log, at(370), n1=(95, 95))
    placer = Placer(st, usage_profile(enablePredicate=False))
    p1 = pod("p1", cpu="1", memory="1Gi")
    assert placer.fits(p1, "n1") == []
    assert placer.scores(p1, "n1")["Usage"] == 5


# ---------------------------------------------------------------- arguments


def test_usage_defaults_are_volcanos():
    # (NodeGroupAffinity rides along in every profile unless disabled by name)
    (plugin,) = [p for p in usage_profile().plugins if p.kind == "Usage"]
    assert plugin.kind == "Usage" and plugin.weight == 5
    assert plugin.resources == (("cpu", 1), ("memory", 1))
    assert plugin.thresholds == (80, 80) and plugin.usage_filter


@pytest.mark.parametrize(
    "args",
    [
        # TestUsageThresholdsKeepDefaultWhenOutOfRange: Volcano keeps 80 for cpu -1 and
        # mem 101; esched refuses them, so a typo fails at start instead of silently
        # scheduling against a threshold the operator did not write.
        {"thresholds": {"cpu": -1}},
        {"thresholds": {"mem": 101}},
        # TestUsageWeightsKeepDefaultWhenNegative: likewise a negative cpu.weight (kube's
        # resource weights are 1..100).
        {"resources": [{"name": "cpu", "weight": -1}]},
        {"thresholds": {"gpu": 50}},  # not one of the plugin's resources
        {"enablePredicate": "yes"},
        {"cpu.weight": 2},  # Volcano's flat keys: esched takes resources[]
    ],
)
def test_usage_arguments_out_of_range_are_refused(args):
    with pytest.raises(ProfileError):
        usage_profile(**args)


# ---------------------------------------------------------------- the fold


def test_usage_is_stale_after_max_age_on_the_logs_clock():
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("n1"))
    log(EV.NODE_ADDED, node("n2"))
    log(EV.USAGE_REPORTED, {"nodes": [{"name": "n1", "usage": {"cpu": "1"}}]}, time=at(0))
    assert st.node_usage("n1") == {"cpu": 1000}
    assert st.node_usage("n2") is None
    # 300 s later by another node's report: still fresh (Volcano: stale when older than
    # MetricsActiveTime, not at it).
    log(EV.USAGE_REPORTED, {"nodes": [{"name": "n2", "usage": {"cpu": "2"}}]}, time=at(300))
    assert st.node_usage("n1") == {"cpu": 1000}
    log(EV.USAGE_REPORTED, {"nodes": [{"name": "n2", "usage": {"cpu": "2"}}]}, time=at(301))
    assert st.node_usage("n1") is None and st.node_usage("n2") == {"cpu": 2000}
    # A late report with an older time does not turn the clock back, and is judged by
    # its own time: 201 s behind the clock, so fresh.
    clock = st.clock
    log(EV.USAGE_REPORTED, {"nodes": [{"name": "n1", "usage": {"cpu": "3"}}]}, time=at(100))
    assert st.clock == clock and st.node_usage("n1") == {"cpu": 3000}


def test_usage_max_age_is_configurable():
    st = ClusterState(usage_max_age=60)
    log = Log(st)
    log(EV.NODE_ADDED, node("n1"))
    log(EV.USAGE_REPORTED, {"nodes": [{"name": "n1", "usage": {"cpu": "1"}}]}, time=at(0))
    log(EV.USAGE_REPORTED, {"nodes": [{"name": "n2", "usage": {"cpu": "1"}}]}, time=at(61))
    assert st.node_usage("n1") is None
    with pytest.raises(ValueError):
        ClusterState(usage_max_age=0)


def test_usage_replay_and_snapshot_give_the_same_state():
    st = ClusterState()
    log = Log(st)
    for n in ("n1", "n2", "n3"):
        log(EV.NODE_ADDED, node(n))
    report(log, at(0), n1=(10, 10), n2=(20, 20))
    report(log, at(200), n2=(30, 30))
    report(log, at(400), n3=(40, 40))
    replayed = ClusterState()
    replayed.apply_many(log.events)
    from_bytes = ClusterState()  # the store's path: stored envelope bytes
    from_bytes.apply_payloads((pos, orjson.dumps(e)) for pos, e in log.events)
    restored = ClusterState.from_bytes(st.to_bytes())
    for s in (replayed, from_bytes, restored):
        assert s.clock == st.clock
        for n in ("n1", "n2", "n3"):
            assert s.node_usage(n) == st.node_usage(n)
    assert st.node_usage("n1") is None  # 400 s old
    assert st.node_usage("n2") == {"cpu": pct(30, CPU), "memory": pct(30, MEM)}


def test_removed_node_loses_its_usage():
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("n1"))
    report(log, at(0), n1=(50, 50))
    log(EV.NODE_REMOVED, {"metadata": {"name": "n1"}})
    log(EV.NODE_ADDED, node("n1"))
    assert st.node_usage("n1") is None


# ---------------------------------------------------------------- end to end


def test_scheduling_pass_avoids_the_hot_node_while_requests_are_balanced():
    # Three equal nodes, each with the same requests bound (requests balanced): kube's
    # default scoring sees them alike. n1 measures 70% cpu and memory (hot, below the
    # 80% threshold), n2 and n3 10%. With Usage in the profile every new pod goes to
    # n2 or n3; the default profile scores the three the same.
    st = ClusterState()
    log = Log(st)
    for n in ("n1", "n2", "n3"):
        log(EV.NODE_ADDED, node(n, cpu="8", memory="16Gi"))
        log(EV.POD_SUBMITTED, pod(f"base-{n}", cpu="2", memory="4Gi", node_name=n))
    log(
        EV.USAGE_REPORTED,
        {
            "nodes": [
                {"name": "n1", "usage": {"cpu": "5600m", "memory": str(int(16 * GI * 0.7))}},
                {"name": "n2", "usage": {"cpu": "800m", "memory": str(int(16 * GI * 0.1))}},
                {"name": "n3", "usage": {"cpu": "800m", "memory": str(int(16 * GI * 0.1))}},
            ]
        },
        time=at(0),
    )
    for i in range(6):
        log(EV.POD_SUBMITTED, pod(f"w{i}", cpu="500m", memory="1Gi"))
    targets = [Target("pod", f"ns/w{i}") for i in range(6)]

    default = Placer(st)
    probe = pod("probe", cpu="500m", memory="1Gi")
    assert len({sum(default.scores(probe, n).values()) for n in ("n1", "n2", "n3")}) == 1

    load_aware = parse_profile(
        {
            "profiles": [
                {
                    "plugins": {"score": {"enabled": [{"name": "Usage", "weight": 5}]}},
                }
            ]
        }
    )
    out = SchedulingPass(st, Placer(st, load_aware, seed=7), PassConfig(preemption=False)).run(
        targets
    )
    chosen = [n for p in out.placements for _pod, n, _d in p.bindings]
    assert len(chosen) == 6 and "n1" not in chosen


def test_scheduling_pass_reports_hot_nodes_as_the_reason():
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("n1", cpu="4", memory="8Gi"))
    report(log, at(0), n1=(90, 10))
    log(EV.POD_SUBMITTED, pod("p", cpu="1", memory="1Gi"))
    out = SchedulingPass(st, Placer(st, usage_profile()), PassConfig(preemption=False)).run(
        [Target("pod", "ns/p")]
    )
    _t, reasons, _m = out.unschedulable["ns/p"]
    assert reasons == {"UsageThreshold": 1}


def test_new_report_moves_placement_through_the_cache():
    # The placer's cache keeps scores per node version: a new report must renew them.
    st = ClusterState()
    log = Log(st)
    for n in ("n1", "n2"):
        log(EV.NODE_ADDED, node(n, cpu="4", memory="8Gi"))
    report(log, at(0), n1=(10, 10), n2=(50, 50))
    placer = Placer(st, usage_profile(enablePredicate=False), seed=1)
    p = pod("x", cpu="100m", memory="64Mi")
    log(EV.POD_SUBMITTED, p)
    assert placer.place(p)[0] == "n1"
    report(log, at(10), n1=(60, 60), n2=(5, 5))
    assert placer.place(p)[0] == "n2"


def test_a_malformed_report_changes_nothing():
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("n1"))
    log(
        EV.USAGE_REPORTED,
        {"nodes": [{"name": "n1", "usage": {"cpu": "1"}}, {"name": 7, "usage": {}}]},
        time=at(50),
    )
    assert st.node_usage("n1") is None and st.clock == 0.0
    assert st.anomalies.get("malformed") == 1
