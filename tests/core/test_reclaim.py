"""Reclaim planning and legality (core/reclaim.py)."""

import pytest

from esched.core import ClusterState, Placer
from esched.core.queues import queue_view
from esched.core.reclaim import plan_gang_reclaim, plan_reclaim, victim_ok, victims_legal
from support.fold import EV, Log, commit, node, pod

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
        log(
            EV.PLACEMENT_COMMITTED,
            commit((f"ns/a{i}", f"n{1 + i // 2}", {"cpu": 1000, "memory": GI, "pods": 1})),
        )
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
        log(EV.PLACEMENT_COMMITTED, commit((f"ns/b{i}", n, {"cpu": 1000, "memory": GI, "pods": 1})))
    log(EV.POD_DELETED, {"metadata": {"name": "a0", "namespace": "ns"}})
    log(EV.POD_DELETED, {"metadata": {"name": "a2", "namespace": "ns"}})
    view = queue_view(s)
    assert view["b"]["share"] == 1.0
    assert plan_reclaim(s, Placer(s), "ns/b2") is None
    # b at its share: one more pod would take it over (proportion's Preemptive).
    assert "exceed its deserved share" in victims_legal(s, "ns/b2", ["ns/a1"])


def test_no_reclaim_from_a_queue_that_is_not_reclaimable_or_would_lose_its_guarantee():
    s, _ = busy_cluster(a_spec={"reclaimable": False})
    assert plan_reclaim(s, Placer(s), "ns/b0") is None
    assert "not reclaimable" in victims_legal(s, "ns/b0", ["ns/a0"])
    # A guarantee raises the fair share (so nothing is above it here) ...
    s, _ = busy_cluster(a_spec={"guarantee": {"resource": {"cpu": "4"}}})
    assert plan_reclaim(s, Placer(s), "ns/b0") is None
    assert victims_legal(s, "ns/b0", ["ns/a0"]) is not None
    # ... and is checked on its own: above the fair share in memory, at the cpu guarantee.
    why = victim_ok(
        "a",
        {"guarantee": {"cpu": 4000}},
        {"cpu": 4000, "memory": 8 * GI},
        {"cpu": 4000, "memory": 2 * GI},
        {"cpu": 1000, "memory": GI},
    )
    assert why == "queue a would fall below its guarantee of cpu"


def test_a_victim_may_not_take_its_queue_below_the_fair_share():
    s, _ = busy_cluster()
    # Four victims would leave a with nothing: it gives only while above its share.
    assert victims_legal(s, "ns/b0", ["ns/a0", "ns/a1"]) is None
    assert "not above its deserved share" in victims_legal(s, "ns/b0", ["ns/a0", "ns/a1", "ns/a2"])
    assert "reclaiming queue" in victims_legal(s, "ns/b0", ["ns/b1"])


# ---------------------------------------------------------------------- gangs


def gang_cluster(min_member: int, members: int, b_spec=None):
    """Two 2-CPU nodes full of queue a's four 1-CPU pods (fair share 2 CPUs each);
    queue b waits with a gang of ``members`` 1-CPU pods, ``min_member`` needed."""
    s = ClusterState()
    log = Log(s)
    log(EV.NODE_ADDED, node("n1", cpu="2", memory="8Gi"))
    log(EV.NODE_ADDED, node("n2", cpu="2", memory="8Gi"))
    log(EV.QUEUE_UPSERTED, queue("a"))
    log(EV.QUEUE_UPSERTED, queue("b", **(b_spec or {})))
    for i, p in enumerate((40, 10, 30, 20)):
        log(EV.POD_SUBMITTED, pod(f"a{i}", cpu="1", memory="1Gi", queue="a", priority=p))
        log(
            EV.PLACEMENT_COMMITTED,
            commit((f"ns/a{i}", f"n{1 + i // 2}", {"cpu": 1000, "memory": GI, "pods": 1})),
        )
    log(
        EV.PODGROUP_SUBMITTED,
        {
            "metadata": {"name": "g", "namespace": "ns"},
            "spec": {"minMember": min_member, "queue": "b"},
        },
    )
    for i in range(members):
        log(EV.POD_SUBMITTED, pod(f"g{i}", cpu="1", memory="1Gi", gang="g"))
    return s, log


def test_a_starved_queue_reclaims_for_a_whole_gang_at_min_member():
    s, _ = gang_cluster(min_member=2, members=3)
    view = queue_view(s)
    assert view["b"]["share"] == 0.0 and view["a"]["share"] == 2.0
    plan = plan_gang_reclaim(s, Placer(s), "ns/g")
    assert plan is not None and plan.queue == "b"
    # Two members (minMember), each in the room of a's lowest-priority pod on its node.
    assert plan.bindings == (("ns/g0", "n1"), ("ns/g1", "n2"))
    assert plan.victims == (("ns/a1", "n1"), ("ns/a3", "n2"))
    assert victims_legal(s, "ns/g", [v for v, _n in plan.victims]) is None
    assert victims_legal(s, ["ns/g0", "ns/g1"], [v for v, _n in plan.victims]) is None
    req = {"cpu": 1000, "memory": GI, "pods": 1}
    data = plan.proposal("r-g", s.position, {"ns/g0": req, "ns/g1": req})
    assert data["gang"] == "ns/g" and data["reclaim"] is True
    assert [b["pod"] for b in data["bindings"]] == ["ns/g0", "ns/g1"]


def test_a_gang_reclaims_all_or_nothing():
    # Three members needed, but a may only lose the two CPUs above its fair share:
    # no plan at all (nothing evicted for a gang that would still not run).
    s, _ = gang_cluster(min_member=3, members=3)
    assert queue_view(s)["a"]["fairShare"]["cpu"] == 2000
    assert plan_gang_reclaim(s, Placer(s), "ns/g") is None
    # And the rule itself refuses it: three members would take b over its share.
    assert "exceed its deserved share" in victims_legal(s, "ns/g", ["ns/a1", "ns/a3", "ns/a2"])


@pytest.mark.parametrize("min_member,victims", [(4, None), (3, 1)])
def test_reclaim_never_splits_a_victim_gang(min_member, victims):
    # a's running pods are one gang: with minMember 4 evicting any member would split
    # it; with minMember 3 one member is spare.
    s = ClusterState()
    log = Log(s)
    log(EV.NODE_ADDED, node("n1", cpu="2", memory="8Gi"))
    log(EV.NODE_ADDED, node("n2", cpu="2", memory="8Gi"))
    log(EV.QUEUE_UPSERTED, queue("a"))
    log(EV.QUEUE_UPSERTED, queue("b"))
    log(
        EV.PODGROUP_SUBMITTED,
        {
            "metadata": {"name": "ag", "namespace": "ns"},
            "spec": {"minMember": min_member, "queue": "a"},
        },
    )
    for i in range(4):
        log(EV.POD_SUBMITTED, pod(f"a{i}", cpu="1", memory="1Gi", gang="ag"))
    log(
        EV.PLACEMENT_COMMITTED,
        commit(
            *(
                (f"ns/a{i}", f"n{1 + i // 2}", {"cpu": 1000, "memory": GI, "pods": 1})
                for i in range(4)
            ),
            gang="ns/ag",
        ),
    )
    log(EV.POD_SUBMITTED, pod("b0", cpu="1", memory="1Gi", queue="b"))
    assert queue_view(s)["a"]["share"] > 1.0  # fair share 3 CPUs, b asks for 1
    plan = plan_reclaim(s, Placer(s), "ns/b0")
    assert (None if plan is None else len(plan.victims)) == victims


# ---------------------------------------------------------------------- queue priority


def test_queue_priority_does_not_override_the_deserved_share():
    """Volcano's reclaim action and proportion plugin: queue priority orders queues, it
    does not let a queue reclaim past its deserved share (the seed says a queue of
    higher priority reclaims from a lower one whatever the shares; esched follows
    Volcano, see core/reclaim.py). b (priority 100, weight 1) deserves under one pod's
    worth of a's (priority 50, weight 10) cluster: no reclaim."""
    s, _ = busy_cluster(
        a_spec={"priority": 50, "weight": 10},
        b_spec={"priority": 100, "weight": 1},
        prio={0: 5, 1: 1, 2: 3, 3: 4},
    )
    view = queue_view(s)
    assert view["b"]["fairShare"]["cpu"] < 1000  # below one pod's worth
    assert plan_reclaim(s, Placer(s), "ns/b0") is None
    assert "exceed its deserved share" in victims_legal(s, "ns/b0", ["ns/a1"])


def test_a_guarantee_is_never_reclaimed_whatever_the_priorities():
    s, _ = busy_cluster(
        a_spec={"priority": 50, "guarantee": {"resource": {"cpu": "3"}}}, b_spec={"priority": 100}
    )
    # a's guarantee raises its share to 3 CPUs: one pod is above it, a second is not.
    assert victims_legal(s, "ns/b0", ["ns/a0"]) is None
    assert victims_legal(s, "ns/b0", ["ns/a0", "ns/a1"]) is not None
    why = victim_ok("a", {"guarantee": {"cpu": 3500}}, {"cpu": 4000}, {"cpu": 3500}, {"cpu": 1000})
    assert why == "queue a would fall below its guarantee of cpu"


def test_a_pod_with_preemption_policy_never_reclaims_nothing():
    # Volcano's reclaim action skips such tasks ("cannot preempt (policy Never)"), as
    # kube's DefaultPreemption does.
    s, log = busy_cluster(prio={0: 50, 1: 10, 2: 30, 3: 40})
    never = pod("b9", cpu="1", memory="1Gi", queue="b", preemptionPolicy="Never")
    log(EV.POD_SUBMITTED, never)
    assert plan_reclaim(s, Placer(s), "ns/b9") is None
    assert plan_reclaim(s, Placer(s), "ns/b0") is not None


# ---------------------------------------------------------------------- a task's minimum


def _job_cluster():
    """Queue a runs a Volcano Job's gang (minMember 3; tasks master 1 and worker 3, each
    task's minAvailable master 1, worker 2) on all 4 CPUs; queue b waits with 2 pods."""
    s = ClusterState()
    log = Log(s)
    log(EV.NODE_ADDED, node("n1", cpu="4", memory="8Gi"))
    log(EV.QUEUE_UPSERTED, queue("a"))
    log(EV.QUEUE_UPSERTED, queue("b"))
    log(
        EV.PODGROUP_SUBMITTED,
        {
            "metadata": {"name": "job", "namespace": "ns"},
            "spec": {"minMember": 3, "queue": "a", "minTaskMember": {"master": 1, "worker": 2}},
        },
    )
    members = ["job-master-0", "job-worker-0", "job-worker-1", "job-worker-2"]
    for m in members:
        log(EV.POD_SUBMITTED, pod(m, cpu="1", memory="1Gi", gang="job", priority=0))
    log(
        EV.PLACEMENT_COMMITTED,
        commit(
            *((f"ns/{m}", "n1", {"cpu": 1000, "memory": GI, "pods": 1}) for m in members),
            gang="ns/job",
        ),
    )
    for i in range(2):
        log(EV.POD_SUBMITTED, pod(f"b{i}", cpu="1", memory="1Gi", queue="b"))
    return s


def test_reclaim_keeps_each_task_of_a_victim_job_at_its_min_available():
    """volcano pkg/scheduler/plugins/gang: a victim is taken only while its task keeps
    minAvailable; the master (task minimum 1 of 1) is never one, a worker is."""
    from esched.core.validation import VICTIM_GANG_SPLIT, Validator

    s = _job_cluster()
    plan = plan_reclaim(s, Placer(s), "ns/b0")
    assert plan is not None and plan.victims == ("ns/job-worker-0",)
    proposal = plan.proposal("r1", s.position, {"cpu": 1000, "memory": GI, "pods": 1})
    assert Validator(s).check(proposal, record=False).ok
    proposal["victims"] = [{"pod": "ns/job-master-0", "node": "n1"}]
    verdict = Validator(s).check(proposal, record=False)
    assert not verdict.ok and verdict.reason == VICTIM_GANG_SPLIT
    assert "task master" in verdict.message


def hdrf_cluster(b_running, waiting=1):
    """busy_cluster's two 2-CPU nodes under hdrf's annotations (root/a, root/b, equal
    weights): queue a runs 4 - ``b_running`` 1-CPU pods, b runs ``b_running`` and
    waits with ``waiting`` more."""
    s = ClusterState()
    log = Log(s)
    log(EV.NODE_ADDED, node("n1", cpu="2", memory="8Gi"))
    log(EV.NODE_ADDED, node("n2", cpu="2", memory="8Gi"))
    for name in ("a", "b"):
        annotations = {
            "volcano.sh/hierarchy": f"root/{name}",
            "volcano.sh/hierarchy-weights": "1/1",
        }
        log(EV.QUEUE_UPSERTED, {"metadata": {"name": name, "annotations": annotations}, "spec": {}})
    running = [("a", i) for i in range(4 - b_running)] + [("b", i) for i in range(b_running)]
    for slot, (q, i) in enumerate(running):
        log(EV.POD_SUBMITTED, pod(f"{q}{i}", cpu="1", memory="1Gi", queue=q))
        log(
            EV.PLACEMENT_COMMITTED,
            commit((f"ns/{q}{i}", f"n{1 + slot // 2}", {"cpu": 1000, "memory": GI, "pods": 1})),
        )
    for i in range(b_running, b_running + waiting):
        log(EV.POD_SUBMITTED, pod(f"b{i}", cpu="1", memory="1Gi", queue="b"))
    return s


def test_under_hdrf_a_victim_must_leave_the_reclaiming_queue_first_in_hdrfs_order():
    """drf.go's reclaimFn (with the hierarchy) next to proportion's rule. b holding 1
    of 4 CPUs may take a second from a holding 3 by proportion (2 each deserved), but
    after the move both hold 2: hdrf's compareQueues is 0, not below, so no victim.
    Holding none and waiting with two pods, b takes one (0.25 against 0.75)."""
    s = hdrf_cluster(b_running=1)
    view = queue_view(s, "annotations")
    assert plan_reclaim(s, Placer(s), "ns/b1", view) is not None  # proportion alone
    assert plan_reclaim(s, Placer(s), "ns/b1", view, "annotations") is None
    assert victims_legal(s, "ns/b1", ["ns/a0"], view) is None
    why = victims_legal(s, "ns/b1", ["ns/a0"], view, hierarchy="annotations")
    assert "does not come before queue a in hdrf's order" in why

    s = hdrf_cluster(b_running=0, waiting=2)
    view = queue_view(s, "annotations")
    plan = plan_reclaim(s, Placer(s), "ns/b0", view, "annotations")
    assert plan is not None and len(plan.victims) == 1
    assert victims_legal(s, "ns/b0", plan.victims, view, hierarchy="annotations") is None


def test_under_hdrf_saturation_goes_before_shares_in_reclaim_too():
    """drf.go's updateHierarchicalShare: a node is saturated only when all its
    children are, an emptied job included (holding nothing, it is not saturated).
    A pod of no gang is a job of its own: the victim's job is emptied, so a is
    unsaturated after the move, while b's only pod, then holding all it asks for,
    leaves b saturated: a comes first whatever the shares, and no victim is given."""
    s = hdrf_cluster(b_running=0, waiting=1)
    view = queue_view(s, "annotations")
    assert plan_reclaim(s, Placer(s), "ns/b0", view) is not None  # proportion alone
    assert plan_reclaim(s, Placer(s), "ns/b0", view, "annotations") is None
