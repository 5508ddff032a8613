"""Preemption planning in the core: Borg's legality, lowest band first, fewest victims,
gangs evicted whole, constraints respected, assumed evictions not offered twice."""

import pytest

from esched.core import ClusterState, Placer
from esched.core.bands import Band, parse_bands
from support.fold import EV, Log, node, pod

MON, PROD, BATCH, BE = 1_000_000_000, 1000, 100, 0


def cluster(*nodes):
    s = ClusterState()
    log = Log(s)
    for n in nodes:
        log(EV.NODE_ADDED, n)
    return s, log


def running(log, name, where, priority, cpu="1", **kw):
    log(
        EV.POD_SUBMITTED, pod(name, cpu=cpu, memory="1Gi", node_name=where, priority=priority, **kw)
    )


def pending(log, name, priority, cpu="1", **kw):
    log(EV.POD_SUBMITTED, pod(name, cpu=cpu, memory="1Gi", priority=priority, **kw))
    return f"ns/{name}"


@pytest.mark.parametrize(
    ("preemptor", "victim", "allowed"),
    [
        (PROD, BATCH, True),
        (PROD, BE, True),
        (MON, BATCH, True),
        (BATCH, BE, True),
        (PROD, PROD, False),  # production does not preempt production
        (PROD + 5000, PROD, False),  # ... not even from a higher priority in the band
        (MON, PROD, False),  # prod never preempts prod
        (BATCH, BATCH + 50, False),  # equal band
        (BATCH, PROD, False),  # higher band
        (BE, BE, False),
    ],
)
def test_legality(preemptor, victim, allowed):
    s, log = cluster(node("n1", cpu="2"))
    running(log, "v", "n1", victim, cpu="2")
    p = Placer(s)
    key = pending(log, "new", preemptor)
    assert p.place(key) is None
    plan = p.plan_preemption(key)
    if allowed:
        assert plan["node"] == "n1" and plan["victims"] == ["ns/v"]
    else:
        assert plan is None


def test_lowest_band_first_then_fewest_victims():
    s, log = cluster(node("a", cpu="2"), node("b", cpu="2"), node("c", cpu="2"))
    running(log, "batch-a", "a", BATCH, cpu="2")  # one batch victim on a
    running(log, "be-b1", "b", BE, cpu="1")  # two best-effort victims on b
    running(log, "be-b2", "b", BE + 5, cpu="1")
    running(log, "prod-c", "c", PROD, cpu="1")  # c: one best-effort + a protected pod
    running(log, "be-c", "c", BE - 3, cpu="1")
    key = pending(log, "big", PROD, cpu="2")
    plan = Placer(s).plan_preemption(key)
    # a costs (batch, 1); b costs (best-effort, 2); c cannot free 2 cpu. Lowest band wins.
    assert plan["node"] == "b"
    assert sorted(plan["victims"]) == ["ns/be-b1", "ns/be-b2"]
    assert plan["cost"] == {"band": Band.BEST_EFFORT, "pods": 2, "priority": 5}

    key = pending(log, "small", PROD, cpu="1")
    plan = Placer(s).plan_preemption(key)
    # b reprieves be-b2 and evicts be-b1 (priority 0); c evicts be-c (priority -3)
    assert plan["node"] == "c" and plan["victims"] == ["ns/be-c"]


def test_reprieve_keeps_the_victims_it_does_not_need():
    s, log = cluster(node("n1", cpu="4"))
    for i, prio in enumerate([5, 1, 9, 3]):
        running(log, f"be{i}", "n1", prio, cpu="1")
    key = pending(log, "p", PROD, cpu="2")
    plan = Placer(s).plan_preemption(key)
    # the two lowest priorities go; the higher ones are reprieved
    assert sorted(plan["victims"]) == ["ns/be1", "ns/be3"]
    assert plan["cost"]["priority"] == 4


def test_constraints_are_not_preempted_away():
    taint = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    s, log = cluster(
        node("tainted", cpu="1", taints=taint), node("labelled", cpu="1", labels={"zone": "a"})
    )
    running(log, "v1", "tainted", BE, tolerations=[{"key": "dedicated", "operator": "Exists"}])
    running(log, "v2", "labelled", BE)
    key = pending(log, "p", PROD, nodeSelector={"zone": "b"})
    assert Placer(s).plan_preemption(key) is None
    key = pending(log, "q", PROD, nodeSelector={"zone": "a"})
    assert Placer(s).plan_preemption(key)["node"] == "labelled"


def test_a_gang_below_min_member_is_evicted_whole():
    s, log = cluster(node("n1", cpu="1"), node("n2", cpu="1"), node("n3", cpu="1"))
    log(
        EV.PODGROUP_SUBMITTED,
        {"metadata": {"name": "job", "namespace": "ns"}, "spec": {"minMember": 3}},
    )
    for i in range(3):
        running(log, f"m{i}", f"n{i + 1}", BATCH, gang="job")
    key = pending(log, "p", PROD)
    plan = Placer(s).plan_preemption(key)
    assert len(plan["victims"]) == 1
    assert len(plan["collateral"]) == 2
    assert sorted(plan["victims"] + plan["collateral"]) == ["ns/m0", "ns/m1", "ns/m2"]
    assert plan["cost"]["pods"] == 3


def test_a_gang_with_slack_loses_one_member_and_fewest_victims_prefers_a_loner():
    s, log = cluster(node("n1", cpu="1"), node("n2", cpu="1"), node("n3", cpu="1"))
    log(
        EV.PODGROUP_SUBMITTED,
        {"metadata": {"name": "job", "namespace": "ns"}, "spec": {"minMember": 1}},
    )
    running(log, "m0", "n1", BATCH, gang="job")
    running(log, "m1", "n2", BATCH, gang="job")
    running(log, "solo", "n3", BATCH)
    plan = Placer(s).plan_preemption(pending(log, "p", PROD))
    assert plan["collateral"] == [] and len(plan["victims"]) == 1


def test_a_gang_with_a_protected_member_is_not_a_victim():
    s, log = cluster(node("n1", cpu="1"), node("n2", cpu="1"))
    log(
        EV.PODGROUP_SUBMITTED,
        {"metadata": {"name": "job", "namespace": "ns"}, "spec": {"minMember": 2}},
    )
    running(log, "m0", "n1", BATCH, gang="job")
    running(log, "m1", "n2", PROD, gang="job")  # evicting m0 would take m1 down too
    assert Placer(s).plan_preemption(pending(log, "p", PROD)) is None


def test_assumed_evictions_are_not_offered_twice_and_sync_forgets_them():
    s, log = cluster(node("n1", cpu="2"))
    running(log, "v1", "n1", BE)
    running(log, "v2", "n1", BE)
    a = pending(log, "a", PROD)
    b = pending(log, "b", PROD)
    c = pending(log, "c", PROD)
    p = Placer(s)
    first = p.plan_preemption(a)
    second = p.plan_preemption(b)
    assert {first["victims"][0], second["victims"][0]} == {"ns/v1", "ns/v2"}
    assert p.plan_preemption(c) is None  # n1 holds a and b in this view
    assert p.place(c) is None
    p.sync()
    assert p.plan_preemption(c, assume=False)["node"] == "n1"


def test_class_mapping_decides_the_band():
    s, log = cluster(node("n1", cpu="1"))
    running(log, "v", "n1", PROD, priorityClassName="nightly")
    key = pending(log, "p", PROD)
    p = Placer(s)
    assert p.plan_preemption(key) is None  # prod vs prod
    bands = parse_bands({"classes": {"nightly": "batch"}})
    assert p.plan_preemption(key, bands)["victims"] == ["ns/v"]


def test_eviction_fold_returns_the_victim_to_pending():
    s, log = cluster(node("n1", cpu="1"))
    running(log, "v", "n1", BE)
    log(EV.POD_EVICTED, {"pod": "ns/v", "node": "n1", "reason": "Preempted", "by": "ns/p"})
    assert s.pod("ns/v")["phase"] == "Pending"
    assert s.node("n1")["allocated"]["cpu"] == 0


def test_many_nodes_picks_the_latest_started_of_the_cheapest_nodes():
    nodes = [node(f"n{i:03d}", cpu="2") for i in range(300)]
    s, log = cluster(*nodes)
    for i in range(300):
        running(log, f"v{i}", f"n{i:03d}", BE + (i % 7), cpu="2")
    key = pending(log, "p", PROD, cpu="2")
    plans = [Placer(s, seed=seed).plan_preemption(key, assume=False) for seed in (0, 1)]
    assert plans[0] == plans[1]
    assert plans[0]["cost"] == {"band": Band.BEST_EFFORT, "pods": 1, "priority": 0}
    # 43 nodes cost the same (one victim of priority 0): kube's last rule takes the
    # one whose victim started latest, the last of them bound.
    assert plans[0]["node"] == "n294"


def test_a_gang_preempts_all_or_nothing():
    s, log = cluster(node("n1", cpu="1"), node("n2", cpu="1"), node("n3", cpu="1"))
    running(log, "be1", "n1", BE)
    running(log, "be2", "n2", BE)
    running(log, "prod3", "n3", PROD)
    log(
        EV.PODGROUP_SUBMITTED,
        {"metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 3}},
    )
    keys = [pending(log, f"g{i}", PROD, gang="g") for i in range(3)]
    p = Placer(s)
    before = p.used_array().copy()
    # two members can preempt best-effort pods, the third would need prod3: nothing
    assert p.plan_gang_preempting(keys, 3) is None
    assert (p.used_array() == before).all()
    plan = p.plan_gang_preempting(keys[:2], 2)
    assert sorted(plan["nodes"]) == ["n1", "n2"]
    assert sorted(v["pod"] for v in plan["victims"]) == ["ns/be1", "ns/be2"]
    assert {v["node"] for v in plan["victims"]} == {"n1", "n2"}


def test_a_gang_member_never_preempts_its_own_gang():
    s, log = cluster(node("n1", cpu="1"))
    log(
        EV.PODGROUP_SUBMITTED,
        {"metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 1}},
    )
    running(log, "g0", "n1", BE, gang="g")
    key = pending(log, "g1", PROD, gang="g")
    assert Placer(s).plan_preemption(key) is None


# ---------------------------------------------------------------------- reservations


def _reserve(log, gang, *nodes):
    log(EV.GANG_RESERVED, {"gang": gang, "nodes": list(nodes), "message": "test"})


def test_reserved_nodes_are_only_for_their_gang_until_it_is_placed():
    s, log = cluster(node("n1", cpu="2"), node("n2", cpu="2"), node("free", cpu="1"))
    log(
        EV.PODGROUP_SUBMITTED,
        {"metadata": {"name": "big", "namespace": "ns"}, "spec": {"minMember": 2}},
    )
    members = [pending(log, f"b{i}", BATCH, cpu="2", gang="big") for i in range(2)]
    running(log, "small", "n1", BE)
    other, third = pending(log, "other", PROD), pending(log, "third", PROD)
    _reserve(log, "ns/big", "n1", "n2")
    assert s.reservations == {"ns/big": ["n1", "n2"]}
    p = Placer(s)
    assert p.place(other)[0] == "free"  # n2 is empty, but held for the gang
    assert p.place(third) is None
    assert p.plan_preemption(third) is None  # `small` is best-effort, but n1 is held
    assert p.plan_gang(members, 2) is None  # the gang sees its nodes; n1 is not free yet
    log(EV.POD_SUCCEEDED, {"metadata": {"name": "small", "namespace": "ns"}})
    assert sorted(p.plan_gang(members, 2)) == ["n1", "n2"]
    assert p.place(third)[0] == "free"  # n1, n2 hidden again for the others after the plan
    log(
        EV.PLACEMENT_COMMITTED,
        {
            "proposal": "x",
            "replica": "r",
            "position": 0,
            "gang": "ns/big",
            "bindings": [
                {"pod": members[0], "node": "n1", "resources": {}},
                {"pod": members[1], "node": "n2", "resources": {}},
            ],
        },
    )
    assert s.reservations == {} and s.reserved_nodes == {}


def test_a_reservation_ends_when_nothing_of_the_gang_waits():
    s, log = cluster(node("n1", cpu="2"))
    log(
        EV.PODGROUP_SUBMITTED,
        {"metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 1}},
    )
    pending(log, "g0", BATCH, cpu="4", gang="g")
    _reserve(log, "ns/g", "n1", "nope")
    assert s.reservations == {"ns/g": ["n1"]} and s.anomalies["reserve_node_unavailable"] == 1
    restored = ClusterState.from_bytes(s.to_bytes())
    assert restored.reserved_nodes == {"n1": "ns/g"}
    log(EV.POD_DELETED, {"metadata": {"name": "g0", "namespace": "ns"}})
    assert s.reservations == {}
    _reserve(log, "ns/g", "n1")  # nothing pending: refused
    assert s.reservations == {} and s.anomalies["reserve_nothing_pending"] == 1


def test_reservation_nodes_by_capacity_then_free_room():
    s, log = cluster(
        node("busy", cpu="4"),
        node("idle", cpu="4"),
        node("small", cpu="1"),
        node("tainted", cpu="8", taints=[{"key": "k", "effect": "NoSchedule"}]),
    )
    running(log, "x", "busy", BATCH, cpu="3")
    log(
        EV.PODGROUP_SUBMITTED,
        {"metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 3}},
    )
    members = [pending(log, f"g{i}", BATCH, cpu="2", gang="g") for i in range(3)]
    p = Placer(s)
    # idle and busy hold 2 members each when empty; idle has them free now: idle first
    assert p.reservation_nodes(members, 3) == ["idle", "busy"]
    assert p.reservation_nodes(members, 5) == []  # never fits: reserve nothing


def test_one_reservation_at_a_time():
    s, log = cluster(node("n1", cpu="2"), node("n2", cpu="2"))
    for g in ("a", "b"):
        log(
            EV.PODGROUP_SUBMITTED,
            {"metadata": {"name": g, "namespace": "ns"}, "spec": {"minMember": 1}},
        )
        pending(log, f"{g}0", BATCH, cpu="4", gang=g)
    _reserve(log, "ns/a", "n1")
    _reserve(log, "ns/b", "n2")  # a second replica's, later in the log: ignored
    assert s.reservations == {"ns/a": ["n1"]} and s.anomalies["reserve_busy"] == 1


# kube's preemptionPolicy: defaultpreemption/default_preemption.go PodEligibleToPreemptOthers
# ("not eligible due to preemptionPolicy=Never"), default_preemption_test.go
# TestPodEligibleToPreemptOthers "Pod with PreemptNever preemption policy"; the same
# legality as test_legality's first case otherwise. (policy, eligible)
@pytest.mark.parametrize(
    ("policy", "eligible"),
    [(None, True), ("PreemptLowerPriority", True), ("Never", False)],
)
def test_preemption_policy_never_never_preempts(policy, eligible):
    s, log = cluster(node("n1", cpu="2"))
    running(log, "v", "n1", BATCH, cpu="2")
    extra = {"preemptionPolicy": policy} if policy else {}
    key = pending(log, "new", PROD, **extra)
    p = Placer(s)
    assert p.place(key) is None
    plan = p.plan_preemption(key)
    assert (plan is not None) == eligible
    assert s.class_preempts(s.class_of(s.pod_index[key])) == eligible


def test_a_never_pod_waits_in_the_scheduling_pass_and_the_commit_refuses_its_victims():
    from esched.core.schedule import PassConfig, SchedulingPass, Target
    from esched.core.validation import PREEMPTION_ILLEGAL, Validator

    s, log = cluster(node("n1", cpu="2"))
    running(log, "v", "n1", BATCH, cpu="2")
    key = pending(log, "new", PROD, preemptionPolicy="Never")
    out = SchedulingPass(s, Placer(s), PassConfig()).run([Target("pod", key, s.position)])
    assert not out.placements and key in out.unschedulable
    # A proposal that evicts for it anyway (a replica that ignored the policy).
    proposal = {
        "proposal": "p1",
        "replica": "r",
        "position": s.position,
        "gang": None,
        "bindings": [{"pod": key, "node": "n1", "resources": {"cpu": 1000, "memory": 1 << 30}}],
        "victims": [{"pod": "ns/v", "node": "n1"}],
    }
    verdict = Validator(s).check(proposal)
    assert not verdict.ok and verdict.reason == PREEMPTION_ILLEGAL


def _port(port: int) -> list[dict]:
    return [
        {
            "name": "c",
            "ports": [{"containerPort": port, "hostPort": port, "protocol": "TCP"}],
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
        }
    ]


def test_a_node_whose_host_port_a_victim_holds_is_a_candidate():
    """kube's DefaultPreemption: SelectVictimsOnNode removes the lower-priority pods and
    runs every filter, NodePorts included, so evicting the pod holding the port makes
    the node fit; the holder is never reprieved (pkg/scheduler/framework/plugins/
    defaultpreemption/default_preemption.go, nodeports/node_ports.go)."""
    s, log = cluster(node("n1", cpu="8"))
    running(log, "holder", "n1", BE, containers=_port(8080))
    running(log, "other", "n1", BE + 1)  # no port, resources to spare: reprieved
    key = pending(log, "web", PROD, containers=_port(8080))
    p = Placer(s)
    assert p.place(key) is None
    plan = p.plan_preemption(key)
    assert plan["node"] == "n1" and plan["victims"] == ["ns/holder"]
    assert plan["cost"]["pods"] == 1
    # The commit service agrees: with the holder evicted the port is free; without, not.
    from esched.core.validation import Validator

    binding = {"pod": key, "node": "n1", "resources": {"cpu": 100, "memory": 64 << 20}}
    proposal = {
        "proposal": "p1",
        "replica": "r",
        "position": s.position,
        "gang": None,
        "bindings": [binding],
        "victims": [{"pod": "ns/holder", "node": "n1"}],
    }
    assert Validator(s).check(proposal, record=False).ok
    assert not Validator(s).check({**proposal, "victims": []}, record=False).ok


def test_a_host_port_held_by_a_protected_pod_is_not_preempted_away():
    s, log = cluster(node("n1", cpu="8"))
    running(log, "holder", "n1", PROD, containers=_port(8080))  # prod: never a victim
    running(log, "be", "n1", BE)
    key = pending(log, "web", PROD + 10, containers=_port(8080))
    assert Placer(s).plan_preemption(key) is None
