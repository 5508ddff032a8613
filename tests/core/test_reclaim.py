"""Reclaim planning and legality (core/reclaim.py)."""

from esched.core import ClusterState, Placer
from esched.core.queues import queue_view
from esched.core.reclaim import _victim_ok, plan_reclaim, victims_legal

from .conftest import EV, Log, commit, node, pod

GI = 2**30


def queue(name, **spec):
    return {"metadata": {"name": name}, "spec": spec}


def busy_cluster(a_spec=None, b_spec=None, running=4, prio=None):
    """Two 2-CPU nodes; queue a runs ``running`` 1-CPU pods, queue b waits with 4."""
    s = ClusterState()
    log = Log(s)
    log(EV.NODE_ADDED, node("n1", cpu="2", memory="8Gi"))
    log(EV.NODE_ADDED, node("n2", cpu="2", memory="8Gi"))
    log(EV.QUEUE_UPSERTED, queue("a", **(a_spec or {})))
    log(EV.QUEUE_UPSERTED, queue("b", **(b_spec or {})))
    for i in range(running):
        p = (prio or {}).get(i)
        log(EV.POD_SUBMITTED, pod(f"a{i}", cpu="1", memory="1Gi", queue="a", priority=p))
        log(EV.PLACEMENT_COMMITTED, commit((f"ns/a{i}", f"n{1 + i // 2}",
                                            {"cpu": 1000, "memory": GI, "pods": 1})))
    for i in range(4):
        log(EV.POD_SUBMITTED, pod(f"b{i}", cpu="1", memory="1Gi", queue="b"))
    return s, log


def test_a_starved_queue_reclaims_the_lowest_priority_pod_above_the_fair_share():
    s, _ = busy_cluster(prio={0: 50, 1: 10, 2: 30, 3: 40})
    view = queue_view(s)
    assert view["a"]["share"] == 2.0 and view["b"]["share"] == 0.0  # fair: 2 CPUs each
    plan = plan_reclaim(s, Placer(s), "ns/b0")
    assert plan is not None and plan.queue == "b"
    assert plan.victims == ("ns/a1",) and plan.node == "n1"  # priority 10 goes first
    assert victims_legal(s, "ns/b0", plan.victims) is None
    data = plan.proposal("reclaim-1", s.position, {"cpu": 1000, "memory": GI, "pods": 1})
    assert data["reclaim"] and data["victims"] == [{"pod": "ns/a1", "node": "n1"}]


def test_reclaim_stops_at_the_victims_fair_share():
    s, log = busy_cluster()
    # b already holds its fair share: two a pods gave way.
    for i, (victim, n) in enumerate((("ns/a0", "n1"), ("ns/a2", "n2"))):
        log(EV.POD_EVICTED, {"pod": victim, "node": n, "reason": "Reclaimed"})
        log(EV.PLACEMENT_COMMITTED, commit((f"ns/b{i}", n,
                                            {"cpu": 1000, "memory": GI, "pods": 1})))
    log(EV.POD_DELETED, {"metadata": {"name": "a0", "namespace": "ns"}})
    log(EV.POD_DELETED, {"metadata": {"name": "a2", "namespace": "ns"}})
    view = queue_view(s)
    assert view["b"]["share"] == 1.0
    assert plan_reclaim(s, Placer(s), "ns/b2") is None
    assert "not below its fair share" in victims_legal(s, "ns/b2", ["ns/a1"])


def test_no_reclaim_from_a_queue_that_is_not_reclaimable_or_would_lose_its_guarantee():
    s, _ = busy_cluster(a_spec={"reclaimable": False})
    assert plan_reclaim(s, Placer(s), "ns/b0") is None
    assert "not reclaimable" in victims_legal(s, "ns/b0", ["ns/a0"])
    # A guarantee raises the fair share (so nothing is above it here) ...
    s, _ = busy_cluster(a_spec={"guarantee": {"resource": {"cpu": "4"}}})
    assert plan_reclaim(s, Placer(s), "ns/b0") is None
    assert victims_legal(s, "ns/b0", ["ns/a0"]) is not None
    # ... and is checked on its own: above the fair share in memory, at the cpu guarantee.
    why = _victim_ok("a", {"guarantee": {"cpu": 4000}}, {"cpu": 4000, "memory": 8 * GI},
                     {"cpu": 4000, "memory": 2 * GI}, {"cpu": 1000, "memory": GI})
    assert why == "queue a would fall below its guarantee of cpu"


def test_a_victim_may_not_take_its_queue_below_the_fair_share():
    s, _ = busy_cluster()
    # Four victims would leave a with nothing: only two are above its fair share.
    assert victims_legal(s, "ns/b0", ["ns/a0", "ns/a1"]) is None
    assert "below its fair share" in victims_legal(s, "ns/b0", ["ns/a0", "ns/a1", "ns/a2"])
    assert "reclaiming queue" in victims_legal(s, "ns/b0", ["ns/b1"])
