"""The overload planner (core/overload.py): Borg's order, evictions until the
reservations fit, throttles favouring production (latency-sensitive) pods."""

from __future__ import annotations

from esched.core.overload import (
    PodLoad,
    Throttle,
    candidates,
    need,
    node_loads,
    overloads,
    plan_overload,
    usage_by_node,
)

GI = 1 << 30


def row(pod: str, prod: bool, prio: int, limit: int, resv: int, usage: int) -> PodLoad:
    return PodLoad(pod, prod, prio, limit, resv, usage)


def test_no_action_while_usage_fits_even_if_reservations_do_not() -> None:
    rows = [row("a", False, 10, 4 * GI, 4 * GI, 2 * GI), row("b", True, 2000, 4 * GI, 4 * GI, GI)]
    plan = plan_overload(6 * GI, rows, compressible=False)
    assert not plan.overloaded
    assert plan.evictions == () and plan.throttles == ()
    assert plan.need == 8 * GI


def test_memory_evicts_non_production_lowest_priority_first_until_reservations_fit() -> None:
    rows = [
        row("prod", True, 2000, 4 * GI, 4 * GI, 4 * GI),
        row("batch-hi", False, 500, 2 * GI, 2 * GI, 2 * GI),
        row("batch-lo", False, 100, 2 * GI, 2 * GI, 2 * GI),
        row("be", False, 0, 2 * GI, 2 * GI, 2 * GI),
    ]
    plan = plan_overload(7 * GI, rows, compressible=False)
    assert plan.overloaded and plan.usage == 10 * GI
    # 10 -> 8 (be) -> 6 (batch-lo) <= 7: batch-hi stays.
    assert plan.evictions == ("be", "batch-lo")
    assert plan.throttles == ()


def test_memory_evicts_production_only_above_its_soft_bound_and_after_non_production() -> None:
    rows = [
        row("prod-within", True, 1000, 4 * GI, 4 * GI, 3 * GI),
        row("prod-over", True, 3000, 2 * GI, 2 * GI, 3 * GI),
        row("batch", False, 900, GI, GI, GI),
    ]
    plan = plan_overload(5 * GI, rows, compressible=False)
    # need 4+3+1 = 8: batch first (7), then the production pod above its limit (4).
    assert plan.evictions == ("batch", "prod-over")


def test_production_within_limits_is_never_evicted_even_if_overload_remains() -> None:
    rows = [
        row("p1", True, 1000, 4 * GI, 4 * GI, 4 * GI),
        row("p2", True, 1000, 4 * GI, 4 * GI, 4 * GI),
    ]
    plan = plan_overload(6 * GI, rows, compressible=False)
    assert plan.overloaded and plan.evictions == ()


def test_candidate_order_is_total_ties_by_usage_then_key() -> None:
    rows = [
        row("b", False, 5, 1, 1, 1),
        row("a", False, 5, 1, 1, 1),
        row("c", False, 5, 3, 3, 3),
        row("p", True, 0, 1, 1, 2),
        row("q", True, 0, 1, 1, 1),
    ]
    assert [r.pod for r in candidates(rows)] == ["c", "a", "b", "p"]


def test_cpu_throttles_non_production_first_and_production_only_to_its_limit() -> None:
    rows = [
        row("prod", True, 2000, 2000, 2000, 3000),  # 1000m above its soft bound
        row("batch", False, 100, 1000, 1000, 1500),
        row("be", False, 0, 1000, 1000, 500),
    ]
    plan = plan_overload(2500, rows, compressible=True)
    # usage 5000 over 2500: be to 0 (-500), batch to 0 (-1500), then prod -500.
    assert plan.evictions == ()
    assert plan.throttles == (
        Throttle("be", 500, 0),
        Throttle("batch", 1500, 0),
        Throttle("prod", 3000, 2500),
    )
    # Never below its limit, even when the node stays overloaded.
    deep = plan_overload(1000, rows, compressible=True)
    assert deep.throttles[-1] == Throttle("prod", 3000, 2000)


def test_cpu_throttle_cuts_just_enough() -> None:
    rows = [row("prod", True, 2000, 2000, 2000, 2000), row("batch", False, 0, 2000, 2000, 2000)]
    plan = plan_overload(3500, rows, compressible=True)
    assert plan.throttles == (Throttle("batch", 2000, 1500),)


def test_cpu_evicts_only_when_the_overload_lasted() -> None:
    rows = [row("prod", True, 2000, 2000, 2000, 2000), row("batch", False, 0, 2000, 2000, 2000)]
    assert plan_overload(3500, rows, compressible=True).evictions == ()
    lasted = plan_overload(3500, rows, compressible=True, evict=True)
    assert lasted.evictions == ("batch",)
    assert lasted.throttles == ()


def test_need_is_the_sum_of_usage_or_reservation_whichever_is_larger() -> None:
    assert need([row("a", False, 0, 4, 3, 1), row("b", False, 0, 4, 1, 2)]) == 5


def test_node_loads_reads_band_limit_reservation_and_usage_from_the_fold() -> None:
    from esched.core import ClusterState
    from esched.core.reservations import ReclamationConfig
    from esched.schemas import events as EV
    from support.fold import envelope, node, pod

    st = ClusterState()
    st.reclamation = ReclamationConfig(enabled=True)
    web = pod("web", cpu="1", node_name="n1", priority=2000)
    web["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "2", "memory": "1Gi"}
    report = envelope(
        EV.USAGE_REPORTED,
        {"pods": [{"pod": "ns/web", "usage": {"cpu": "2500m"}}]},
        time="2026-01-01T00:00:00Z",
    )
    events = [
        envelope(EV.NODE_ADDED, node("n1")),
        envelope(EV.POD_SUBMITTED, web),
        envelope(EV.POD_SUBMITTED, pod("etl", cpu="1", node_name="n1", priority=10)),
        report,
    ]
    st.apply_many(list(enumerate(events, 1)))
    rows = {r.pod: r for r in node_loads(st, st.node_index["n1"], "cpu")}
    assert rows["ns/web"] == PodLoad("ns/web", True, 2000, 2000, 2700, 2500)
    assert rows["ns/etl"] == PodLoad("ns/etl", False, 10, 1000, 1000, 0)
    assert node_loads(st, st.node_index["n1"], "nvidia.com/gpu") == []
    n1 = st.node_index["n1"]
    assert usage_by_node(st, [n1]) == {n1: {"cpu": 2500}}


def test_overloads_compares_each_nodes_reported_pod_usage_with_its_allocatable() -> None:
    from esched.core import ClusterState
    from esched.schemas import events as EV
    from support.fold import envelope, node, pod

    st = ClusterState()
    report = envelope(
        EV.USAGE_REPORTED,
        {
            "pods": [
                {"pod": "ns/a", "usage": {"cpu": "4500m", "memory": "1Gi"}},
                {"pod": "ns/b", "usage": {"cpu": "4", "memory": "1Gi"}},
            ]
        },
        time="2026-01-01T00:00:00Z",
    )
    events = [
        envelope(EV.NODE_ADDED, node("n1", cpu="4", memory="8Gi")),
        envelope(EV.NODE_ADDED, node("n2", cpu="4", memory="8Gi")),
        envelope(EV.POD_SUBMITTED, pod("a", cpu="1", node_name="n1")),
        envelope(EV.POD_SUBMITTED, pod("b", cpu="1", node_name="n2")),
        report,
    ]
    st.apply_many(list(enumerate(events, 1)))
    n1, n2 = st.node_index["n1"], st.node_index["n2"]
    found = set(overloads(st, [n1, n2], ["cpu", "memory", "nvidia.com/gpu"]))
    # 4.5 cpu on 4 is over, exactly 4 is not; a resource the state lacks is skipped.
    assert found == {
        (n1, "cpu", True),
        (n1, "memory", False),
        (n2, "cpu", False),
        (n2, "memory", False),
    }
