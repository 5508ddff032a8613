"""Volcano queues: water-filling, hierarchy, dominant share, order, node-group affinity."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esched.core import ClusterState, Placer
from esched.core.profile import parse_profile
from esched.core.queues import (
    QueueSpec,
    QueueTree,
    allocation_order_key,
    deserved,
    dominant_share,
    parent_name,
    queue_view,
    water_fill,
)
from support.fold import EV, Log, commit, node, pod

GI = 2**30


# ---------------------------------------------------------------------- water_fill


def test_weights_two_to_one_give_two_thirds_and_one_third():
    # The seed's example: C and D of equal priority, weights 2 and 1.
    out = water_fill(90_000, {"C": 2, "D": 1}, {"C": None, "D": None})
    assert out == {"C": 60_000, "D": 30_000}


def test_rounding_is_exact_and_deterministic():
    out = water_fill(100, {"a": 1, "b": 1, "c": 1}, {"a": None, "b": None, "c": None})
    assert sum(out.values()) == 100
    assert out == {"a": 34, "b": 33, "c": 33}  # the leftover unit: ties by name


def test_capability_caps_and_the_rest_is_refilled_by_weight():
    # a would get 50 but is capped at 20; b and c share the other 80 by 3:1.
    out = water_fill(100, {"a": 2, "b": 1, "c": 1}, {"a": 20, "b": None, "c": 10})
    assert out == {"a": 20, "b": 70, "c": 10}


def test_guarantee_raises_above_the_weighted_share():
    out = water_fill(100, {"a": 1, "b": 9}, {"a": None, "b": None}, {"a": 40})
    assert out == {"a": 40, "b": 60}


def test_guarantee_is_kept_even_when_guarantees_exceed_the_amount():
    assert water_fill(10, {"a": 1, "b": 1}, {}, {"a": 8, "b": 8}) == {"a": 8, "b": 8}


def test_all_capped_below_the_amount_get_their_caps():
    assert water_fill(100, {"a": 1, "b": 1}, {"a": 10, "b": 30}) == {"a": 10, "b": 30}


def test_floor_above_cap_raises_the_cap():
    assert water_fill(100, {"a": 1, "b": 1}, {"a": 5, "b": None}, {"a": 20}) == {"a": 20, "b": 80}


@settings(max_examples=300, deadline=None)
@given(
    amount=st.integers(0, 10**6),
    queues=st.lists(
        st.tuples(
            st.integers(1, 10), st.one_of(st.none(), st.integers(0, 10**6)), st.integers(0, 10**5)
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_water_fill_properties(amount, queues):
    names = [f"q{i}" for i in range(len(queues))]
    weights = {n: w for n, (w, _, _) in zip(names, queues, strict=True)}
    caps = {n: c for n, (_, c, _) in zip(names, queues, strict=True)}
    floors = {n: f for n, (_, _, f) in zip(names, queues, strict=True)}
    out = water_fill(amount, weights, caps, floors)
    hi = {n: None if caps[n] is None else max(caps[n], floors[n]) for n in names}
    for n in names:
        assert out[n] >= floors[n]  # a guarantee is never cut
        if hi[n] is not None:
            assert out[n] <= hi[n]  # never above capability (unless guaranteed)
    total_floor = sum(floors.values())
    if total_floor >= amount:
        assert out == floors
        return
    cap_total = None if any(v is None for v in hi.values()) else sum(hi.values())
    assert sum(out.values()) == (amount if cap_total is None else min(amount, cap_total))
    # Weighted fairness: a queue strictly between its floor and cap holds at most one
    # unit more per weight than any other queue that could still grow.
    free = [n for n in names if out[n] > floors[n] and (hi[n] is None or out[n] < hi[n])]
    for a in free:
        for b in names:
            if hi[b] is None or out[b] < hi[b]:
                assert Fraction(out[a] - 1, weights[a]) <= Fraction(out[b] + 1, weights[b])


# ---------------------------------------------------------------------- hierarchy


def test_parent_names_and_paths():
    assert parent_name(None) is None and parent_name("root") is None
    assert parent_name("root.eng") == "eng" and parent_name("eng") == "eng"
    tree = QueueTree([QueueSpec("dev", parent="root.eng"), QueueSpec("eng")])
    assert tree.path("dev") == "root.eng.dev"
    assert tree.children[None] == ["eng"] and tree.children["eng"] == ["dev"]


def test_children_share_their_parents_deserved():
    specs = [
        QueueSpec("eng", weight=3),
        QueueSpec("ops", weight=1),
        QueueSpec("dev", weight=1, parent="root.eng"),
        QueueSpec("prod", weight=2, parent="root.eng"),
    ]
    out = deserved(specs, {"cpu": 120_000})
    assert out["eng"] == {"cpu": 90_000} and out["ops"] == {"cpu": 30_000}
    assert out["dev"] == {"cpu": 30_000} and out["prod"] == {"cpu": 60_000}


def test_undeclared_parent_is_implicit_and_cycles_are_broken():
    specs = [
        QueueSpec("a", parent="root.x"),
        QueueSpec("b", parent="c"),
        QueueSpec("c", parent="b"),
    ]
    tree = QueueTree(specs)
    assert "x" in tree.specs and tree.path("a") == "root.x.a"
    assert tree.problems  # the cycle is reported
    out = deserved(specs, {"cpu": 900})
    assert sum(out[k]["cpu"] for k in tree.children[None]) == 900


def test_demand_caps_deserved_so_idle_queues_lend_their_share():
    specs = [QueueSpec("a", weight=1), QueueSpec("b", weight=1)]
    out = deserved(specs, {"cpu": 100}, demand={"a": {"cpu": 10}, "b": {"cpu": 500}})
    assert out == {"a": {"cpu": 10}, "b": {"cpu": 90}}


def test_spec_deserved_is_met_when_the_cluster_has_enough_else_split_by_weight():
    specs = [QueueSpec("a", deserved={"cpu": 30}), QueueSpec("b", weight=2, deserved={"cpu": 40})]
    assert deserved(specs, {"cpu": 100}) == {"a": {"cpu": 30}, "b": {"cpu": 40}}
    assert deserved(specs, {"cpu": 45}) == {"a": {"cpu": 15}, "b": {"cpu": 30}}


# ---------------------------------------------------------------------- share and order


def test_dominant_share_ignores_pods_and_counts_undeserved_use_as_full():
    assert dominant_share({"cpu": 50, "memory": 10, "pods": 99}, {"cpu": 100, "memory": 100}) == 0.5
    assert dominant_share({"nvidia.com/gpu": 1}, {"cpu": 100}) == 1.0
    assert dominant_share({}, {"cpu": 100}) == 0.0


def test_queue_priority_beats_weight_and_share():
    # The seed's example: A (priority 100) goes first though B (priority 50) has a far
    # higher weight and a lower share.
    a = allocation_order_key(100, 0.9, 0, 2)
    b = allocation_order_key(50, 0.0, 1000, 1)
    assert sorted([b, a]) == [a, b]
    # Equal priority: lower share first, then job priority, then submission.
    assert allocation_order_key(0, 0.2, 0, 5) < allocation_order_key(0, 0.3, 9, 1)
    assert allocation_order_key(0, 0.2, 9, 5) < allocation_order_key(0, 0.2, 0, 1)
    assert allocation_order_key(0, 0.2, 0, 1) < allocation_order_key(0, 0.2, 0, 5)


# ---------------------------------------------------------------------- the fold


def queue(name, **spec):
    state = spec.pop("state", None)
    out = {"metadata": {"name": name}, "spec": spec}
    if state:
        out["status"] = {"state": state}
    return out


def test_state_view_weights_two_to_one_under_contention():
    s = ClusterState()
    log = Log(s)
    log(EV.NODE_ADDED, node("n1", cpu="30", memory="300Gi"))
    log(EV.QUEUE_UPSERTED, queue("c", weight=2, priority=100))
    log(EV.QUEUE_UPSERTED, queue("d", weight=1, priority=100))
    for i in range(40):  # both want far more than the cluster has
        log(EV.POD_SUBMITTED, pod(f"c{i}", cpu="1", memory="1Gi", queue="c"))
        log(EV.POD_SUBMITTED, pod(f"d{i}", cpu="1", memory="1Gi", queue="d"))
    view = queue_view(s)
    assert view["c"]["fairShare"]["cpu"] == 20_000 and view["d"]["fairShare"]["cpu"] == 10_000
    q = s.summary()["queues"]
    assert q["c"]["fairShare"]["cpu"] == 20_000 and q["c"]["share"] == 0.0
    log(EV.PLACEMENT_COMMITTED, commit(("ns/c0", "n1", {"cpu": 1000, "memory": GI, "pods": 1})))
    assert s.summary()["queues"]["c"]["share"] == pytest.approx(1 / 20)


def test_fold_keeps_node_group_affinity_and_gang_queue():
    s = ClusterState()
    log = Log(s)
    log(
        EV.QUEUE_UPSERTED,
        queue(
            "gpu",
            affinity={
                "nodeGroupAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": ["g1", "g2"],
                    "preferredDuringSchedulingIgnoredDuringExecution": ["g2"],
                },
                "nodeGroupAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": ["test"]
                },
            },
        ),
    )
    meta = s.queue_meta[s.queue_index["gpu"]]
    assert meta["affinity"] == {"required": ["g1", "g2"], "preferred": ["g2"], "anti": ["test"]}
    # A gang member without its own queue annotation is in the PodGroup's queue.
    log(
        EV.PODGROUP_SUBMITTED,
        {"metadata": {"name": "job", "namespace": "ns"}, "spec": {"minMember": 1, "queue": "gpu"}},
    )
    log(EV.POD_SUBMITTED, pod("w0", gang="job"))
    assert s.pod("ns/w0")["queue"] == "gpu"


def _group_cluster():
    s = ClusterState()
    log = Log(s)
    for name, group in (("a1", "g1"), ("a2", "g2"), ("t1", "test"), ("x1", None)):
        labels = {"volcano.sh/nodegroup-name": group} if group else {}
        log(EV.NODE_ADDED, node(name, labels=labels))
    return s, log


def test_required_node_group_affinity_and_anti_affinity_filter_nodes():
    s, log = _group_cluster()
    log(
        EV.QUEUE_UPSERTED,
        queue(
            "only-g1",
            affinity={
                "nodeGroupAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ["g1"]}
            },
        ),
    )
    log(
        EV.QUEUE_UPSERTED,
        queue(
            "no-test",
            affinity={
                "nodeGroupAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": ["test"]
                }
            },
        ),
    )
    log(EV.POD_SUBMITTED, pod("p", queue="only-g1"))
    log(EV.POD_SUBMITTED, pod("q", queue="no-test"))
    log(EV.POD_SUBMITTED, pod("r"))
    placer = Placer(s)

    def feasible(key):
        return {r["name"] for r in placer.explain(key)["nodes"] if r["feasible"]}

    assert feasible("ns/p") == {"a1"}
    assert feasible("ns/q") == {"a1", "a2", "x1"}
    assert feasible("ns/r") == {"a1", "a2", "t1", "x1"}
    assert placer.place("ns/p")[0] == "a1"
    # A queue whose required groups no node has: nothing fits, with the affinity reason.
    log(
        EV.QUEUE_UPSERTED,
        queue(
            "nowhere",
            affinity={
                "nodeGroupAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ["none"]}
            },
        ),
    )
    log(EV.POD_SUBMITTED, pod("z", queue="nowhere"))
    assert feasible("ns/z") == set()
    # The same pod spec in another queue is another equivalence class.
    assert s.pod_class_id("ns/p") != s.pod_class_id("ns/r")


def test_preferred_node_groups_are_scored_not_required():
    s, log = _group_cluster()
    log(
        EV.QUEUE_UPSERTED,
        queue(
            "pref-g2",
            affinity={
                "nodeGroupAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": ["g2"]}
            },
        ),
    )
    log(EV.POD_SUBMITTED, pod("p", queue="pref-g2"))
    placer = Placer(s)
    rows = {r["name"]: r for r in placer.explain("ns/p")["nodes"]}
    assert all(r["feasible"] for r in rows.values())  # a preference filters nothing
    # a plugin of the profile: score 100 in a preferred group, weight 2 by default
    assert rows["a2"]["scores"]["NodeGroupAffinity"] == 100
    assert rows["a1"]["scores"]["NodeGroupAffinity"] == 0
    assert rows["a2"]["total"] == rows["a1"]["total"] + 200  # identical empty nodes
    for seed in range(5):  # every seed, cache on or off, picks the preferred group
        assert Placer(s, seed=seed).place("ns/p", assume=False)[0] == "a2"
        assert Placer(s, seed=seed, cache=False).place("ns/p", assume=False)[0] == "a2"


def test_node_group_affinity_is_a_profile_plugin_with_a_weight():
    s, log = _group_cluster()
    log(
        EV.QUEUE_UPSERTED,
        queue(
            "pref-g2",
            affinity={
                "nodeGroupAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": ["g2"]}
            },
        ),
    )
    log(EV.POD_SUBMITTED, pod("p", queue="pref-g2"))
    log(EV.POD_SUBMITTED, pod("plain"))

    def totals(score: dict, key: str = "ns/p") -> dict:
        placer = Placer(s, parse_profile({"profiles": [{"plugins": {"score": score}}]}))
        return {r["name"]: r for r in placer.explain(key)["nodes"]}

    heavy = totals({"enabled": [{"name": "NodeGroupAffinity", "weight": 5}]})
    assert heavy["a2"]["total"] == heavy["a1"]["total"] + 500
    off = totals({"disabled": [{"name": "NodeGroupAffinity"}]})
    assert "NodeGroupAffinity" not in off["a2"]["scores"]
    assert off["a2"]["total"] == off["a1"]["total"]
    # a class without preferred groups skips the plugin (kube's PreScore Skip)
    plain = totals({}, "ns/plain")
    assert all("NodeGroupAffinity" not in r["scores"] for r in plain.values())


@settings(max_examples=200, deadline=None)
@given(
    amount=st.integers(0, 10**6),
    kids=st.lists(
        st.tuples(st.integers(1, 5), st.one_of(st.none(), st.integers(0, 10**5))),
        min_size=1,
        max_size=4,
    ),
    parent_weight=st.integers(1, 5),
)
def test_children_split_exactly_what_their_parent_gets(amount, kids, parent_weight):
    specs = [QueueSpec("p", weight=parent_weight), QueueSpec("other", weight=1)]
    specs += [
        QueueSpec(
            f"k{i}", weight=w, parent="root.p", capability={} if cap is None else {"cpu": cap}
        )
        for i, (w, cap) in enumerate(kids)
    ]
    out = deserved(specs, {"cpu": amount})
    assert out["p"]["cpu"] + out["other"]["cpu"] == amount
    kid_total = sum(out[f"k{i}"]["cpu"] for i in range(len(kids)))
    caps = [cap for _, cap in kids]
    if all(c is not None for c in caps):
        assert kid_total == min(out["p"]["cpu"], sum(caps))
    else:
        assert kid_total == out["p"]["cpu"]
