"""One scheduling pass (core/schedule.py) on a folded state: single pods, gangs all or
nothing, preemption by band, unschedulable reasons, the starvation guard on the
caller's clock, and claims in flight."""

from __future__ import annotations

from esched.core import ClusterState, Placer
from esched.core.schedule import PassConfig, SchedulingPass, Target
from support.fold import EV, Log, node, pod

PROD, BE = 1000, 0


def cluster(*nodes) -> tuple[ClusterState, Log]:
    s = ClusterState()
    log = Log(s)
    for n in nodes:
        log(EV.NODE_ADDED, n)
    return s, log


def gang(log: Log, name: str, members: int, cpu: str) -> list[str]:
    log(
        EV.PODGROUP_SUBMITTED,
        {"metadata": {"name": name, "namespace": "ns"}, "spec": {"minMember": members}},
    )
    keys = []
    for i in range(members):
        log(EV.POD_SUBMITTED, pod(f"{name}-{i}", cpu=cpu, gang=name))
        keys.append(f"ns/{name}-{i}")
    return keys


def test_pods_are_placed_in_order_and_a_batch_never_double_books():
    st, log = cluster(node("n1", cpu="2"))
    for name in ("a", "b", "c"):
        log(EV.POD_SUBMITTED, pod(name, cpu="1"))
    sp = SchedulingPass(st, Placer(st), PassConfig(preemption=False))
    out = sp.run([Target("pod", f"ns/{k}") for k in "abc"])
    assert [(p.bindings, p.gang, p.victims) for p in out.placements] == [
        ([("ns/a", "n1", ())], None, []),
        ([("ns/b", "n1", ())], None, []),
    ]
    target, reasons, message = out.unschedulable["ns/c"]
    assert target.key == "ns/c" and reasons == {"Insufficient.cpu": 1} and message == ""


def test_a_gang_is_planned_all_or_nothing_once_per_pass():
    st, log = cluster(node("n1", cpu="2"), node("n2", cpu="2"))
    keys = gang(log, "train", 3, "2")
    small = gang(log, "pair", 2, "1")
    sp = SchedulingPass(st, Placer(st), PassConfig(preemption=False))
    # Two work items of one gang (as a redelivery brings): planned once.
    out = sp.run([Target("pod", keys[0]), Target("gang", "ns/train"), Target("gang", "ns/pair")])
    assert out.skipped == 1
    assert [p.gang for p in out.placements] == ["ns/pair"]
    assert sorted(pod for pod, _n, _d in out.placements[0].bindings) == small
    for k in keys:
        _t, reasons, message = out.unschedulable[k]
        assert reasons["GangUnschedulable"] == 1 and message.startswith("gang ns/train: ")


def test_a_pod_preempts_a_lower_band_and_names_its_victims():
    st, log = cluster(node("n1", cpu="2"))
    log(EV.POD_SUBMITTED, pod("low", cpu="2", node_name="n1", priority=BE))
    log(EV.POD_SUBMITTED, pod("high", cpu="2", priority=PROD))
    off = SchedulingPass(st, Placer(st), PassConfig(preemption=False)).run(
        [Target("pod", "ns/high")]
    )
    assert not off.placements and "ns/high" in off.unschedulable
    out = SchedulingPass(st, Placer(st)).run([Target("pod", "ns/high")])
    assert [(p.bindings, p.victims) for p in out.placements] == [
        ([("ns/high", "n1", ())], [{"pod": "ns/low", "node": "n1"}])
    ]


def test_a_starving_gang_gets_nodes_reserved_after_reserve_after_on_the_callers_clock():
    st, log = cluster(node("n1", cpu="2"), node("n2", cpu="2"))
    log(EV.POD_SUBMITTED, pod("hog", cpu="1", node_name="n1"))
    gang(log, "train", 2, "2")
    sp = SchedulingPass(st, Placer(st), PassConfig(preemption=False, reserve_after=30.0))
    assert sp.run([Target("gang", "ns/train")], now=100.0).reservations == []
    assert sp.run([Target("gang", "ns/train")], now=129.0).reservations == []
    # Already decided by an earlier pass (not yet in the state): not reserved twice.
    again = sp.run([Target("gang", "ns/train")], now=131.0, reserving={"ns/train"})
    assert again.reservations == []
    [r] = sp.run([Target("gang", "ns/train")], now=131.0).reservations
    assert r["gang"] == "ns/train" and sorted(r["nodes"]) == ["n1", "n2"]
    assert r["waited_seconds"] == 31.0 and r["position"] == st.position


def test_claims_in_flight_skip_their_pods_and_block_their_gangs():
    st, log = cluster(node("n1", cpu="4"))
    log(EV.POD_SUBMITTED, pod("a", cpu="1"))
    keys = gang(log, "pair", 2, "1")
    sp = SchedulingPass(st, Placer(st))
    out = sp.run(
        [Target("pod", "ns/a"), Target("gang", "ns/pair")],
        in_flight={"ns/a": "p1", keys[1]: "p2"},
    )
    assert out.placements == [] and out.skipped == 1
    assert [(t.key, busy) for t, busy in out.blocked] == [("ns/pair", {"p2"})]


def _groups_state() -> tuple[ClusterState, list[list[tuple[str, str, int]]]]:
    # 7 cpus: three of the a pods, then one cpu that the gang (2 x 1) cannot use
    st, log = cluster(node("n1", cpu="4"), node("n2", cpu="3"))
    for name in ("a1", "a2", "a3", "a4"):
        log(EV.POD_SUBMITTED, pod(name, cpu="2"))
    log(EV.POD_SUBMITTED, pod("b1", cpu="1"))
    gang(log, "pair", 2, "1")
    groups = [
        [("pod", f"ns/a{i}", 0) for i in range(1, 5)],
        [("gang", "ns/pair", 0)],
        [("pod", "ns/b1", 0)],
    ]
    return st, groups


def test_run_groups_decides_as_run_and_stops_a_group_at_its_first_miss():
    # The simulator's entry: the same pass as run() over groups of plain tuples, each
    # group ending at the first item not placed (the rest of it is not tried).
    st, groups = _groups_state()
    placed, stopped, reservations = SchedulingPass(
        st, Placer(st, seed=1), PassConfig(preemption=False)
    ).run_groups(groups)
    assert stopped == [0, 1] and reservations == []
    assert [(t[1], g) for t, g, _b, _v in placed] == [
        ("ns/a1", None),
        ("ns/a2", None),
        ("ns/a3", None),
        ("ns/b1", None),
    ]
    # run() over the items run_groups tried, in the same order: the same decisions
    st2, _ = _groups_state()
    out = SchedulingPass(st2, Placer(st2, seed=1), PassConfig(preemption=False)).run(
        [Target(*t) for group in groups for t in group]
    )
    assert [(p.target.key, p.gang, p.bindings, p.victims) for p in out.placements] == [
        (t[1], g, b, v or []) for t, g, b, v in placed
    ]
