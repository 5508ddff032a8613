"""Soft constraints scored as kube-scheduler scores them, and profiles chosen per pod.

The NodeAffinity and TaintToleration score tables are kube's own, in esched's words:
kubernetes/kubernetes pkg/scheduler/framework/plugins/nodeaffinity/node_affinity_test.go
(TestNodeAffinityPriority, addedAffinity cases included) and
pkg/scheduler/framework/plugins/tainttoleration/taint_toleration_test.go
(TestTaintTolerationScore). kube normalizes over the nodes it scores; ``explain`` scores
every feasible node, so its scores are the table's. Cases of kube's tables that need
alpha features (numeric toleration operators) are left out.
"""

from __future__ import annotations

import pytest

from esched.core import ClusterState, Placer
from esched.core.profile import API_VERSION, ProfileError, parse_profile
from esched.core.reasons import OTHER_SCHEDULER
from esched.core.schedule import PassConfig, SchedulingPass, Target
from support.fold import EV, Log, node, pod

LABEL1 = {"foo": "bar"}
LABEL2 = {"key": "value"}
LABEL3 = {"az": "az1"}
LABEL4 = {"abc": "az11", "def": "az22"}
LABEL5 = {"foo": "bar", "key": "value", "az": "az1"}


def _in(key: str, value: str) -> dict:
    return {"key": key, "operator": "In", "values": [value]}


def _term(weight: int, *exprs: dict) -> dict:
    return {"weight": weight, "preference": {"matchExpressions": list(exprs)}}


AFFINITY1 = [_term(2, _in("foo", "bar"))]
AFFINITY2 = [
    _term(2, _in("foo", "bar")),
    _term(4, _in("key", "value")),
    _term(5, _in("foo", "bar"), _in("key", "value"), _in("az", "az1")),
]


def _config(*profiles: dict) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "KubeSchedulerConfiguration",
        "profiles": list(profiles),
    }


def _added(affinity: dict, name: str = "default-scheduler") -> dict:
    return {
        "schedulerName": name,
        "pluginConfig": [{"name": "NodeAffinity", "args": {"addedAffinity": affinity}}],
    }


def _state(nodes: list[dict]) -> ClusterState:
    st = ClusterState()
    log = Log(st)
    for n in nodes:
        log(EV.NODE_ADDED, n)
    return st


def _scores(placer: Placer, p: dict, plugin: str) -> dict:
    rows = placer.explain(p)["nodes"]
    return {r["name"]: r["scores"].get(plugin) for r in rows}


@pytest.mark.parametrize(
    ("preferred", "labels", "want", "added"),
    [
        # "all nodes are same priority as NodeAffinity is nil": kube scores 0 everywhere;
        # esched skips the plugin (kube's PreScore Skip for a pod without preferred terms).
        (None, [LABEL1, LABEL2, LABEL3], [None, None, None], None),
        # "no node matches preferred scheduling requirements ... so all nodes' priority is zero"
        (AFFINITY1, [LABEL4, LABEL2, LABEL3], [0, 0, 0], None),
        # "only node1 matches the preferred scheduling requirements of pod"
        (AFFINITY1, [LABEL1, LABEL2, LABEL3], [100, 0, 0], None),
        # "all nodes matches the preferred scheduling requirements of pod but with different
        # priorities": raw 2, 11, 4 -> 100*2//11 = 18, 100, 100*4//11 = 36
        (AFFINITY2, [LABEL1, LABEL5, LABEL2], [18, 100, 36], None),
        # "added affinity": the profile's preferred term alone
        (
            None,
            [LABEL1, LABEL2],
            [100, 0],
            {"preferredDuringSchedulingIgnoredDuringExecution": AFFINITY1},
        ),
        # "added affinity and pod has default affinity": raw 2, 3, 5 -> 40, 60, 100
        (
            AFFINITY1,
            [LABEL1, LABEL2, LABEL5],
            [40, 60, 100],
            {"preferredDuringSchedulingIgnoredDuringExecution": [_term(3, _in("key", "value"))]},
        ),
    ],
)
def test_node_affinity_scores_match_kube_table(preferred, labels, want, added):
    st = _state([node(f"node{i}", labels=lab) for i, lab in enumerate(labels)])
    profile = parse_profile(_config(_added(added))) if added else None
    spec = {}
    if preferred:
        spec["affinity"] = {
            "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}
        }
    got = _scores(Placer(st, profile), pod("p", **spec), "NodeAffinity")
    assert [got[f"node{i}"] for i in range(len(labels))] == want


def _taint(key: str, value: str, effect: str = "PreferNoSchedule") -> dict:
    return {"key": key, "value": value, "effect": effect}


def _tol(key: str, value: str, effect: str = "PreferNoSchedule") -> dict:
    return {"key": key, "operator": "Equal", "value": value, "effect": effect}


@pytest.mark.parametrize(
    ("tolerations", "taints", "want"),
    [
        # "node with taints tolerated by the pod, gets a higher score than those node with
        # intolerable taints"
        ([_tol("foo", "bar")], [[_taint("foo", "bar")], [_taint("foo", "blah")]], [100, 0]),
        # "the nodes that all of their taints are tolerated by the pod, get the same score,
        # no matter how many tolerable taints a node has": every node scores 100 in kube;
        # esched leaves the plugin out (no PreferNoSchedule taint the pod does not
        # tolerate: the same score on every node changes no choice).
        (
            [_tol("cpu-type", "arm64"), _tol("disk-type", "ssd")],
            [
                [],
                [_taint("cpu-type", "arm64")],
                [_taint("cpu-type", "arm64"), _taint("disk-type", "ssd")],
            ],
            [None, None, None],
        ),
        # "the more intolerable taints a node has, the lower score it gets."
        (
            [_tol("foo", "bar")],
            [
                [],
                [_taint("cpu-type", "arm64")],
                [_taint("cpu-type", "arm64"), _taint("disk-type", "ssd")],
            ],
            [100, 50, 0],
        ),
        # "only taints and tolerations that have effect PreferNoSchedule are checked"
        (
            [_tol("cpu-type", "arm64", "NoSchedule"), _tol("disk-type", "ssd", "NoSchedule")],
            [
                [],
                [_taint("cpu-type", "arm64", "NoSchedule")],
                [_taint("cpu-type", "arm64"), _taint("disk-type", "ssd")],
            ],
            [100, 100, 0],
        ),
        # "Default behaviour No taints and tolerations, lands on node with no taints"
        ([], [[], [_taint("cpu-type", "arm64")]], [100, 0]),
    ],
)
def test_taint_toleration_scores_match_kube_table(tolerations, taints, want):
    st = _state([node(f"node{i}", taints=t) for i, t in enumerate(taints)])
    got = _scores(Placer(st), pod("p", tolerations=tolerations), "TaintToleration")
    assert [got[f"node{i}"] for i in range(len(taints))] == want


def test_place_prefers_the_preferred_node_and_avoids_prefer_no_schedule():
    # Identical nodes but for a label and a soft taint: the scores decide, through the
    # placer's sampled scan (normalized over the nodes it scored).
    nodes = [node(f"n{i}", labels={"disk": "ssd" if i == 7 else "hdd"}) for i in range(12)]
    nodes[3]["spec"]["taints"] = [_taint("spot", "")]
    st = _state(nodes)
    placer = Placer(st, seed=3)
    pref = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [_term(10, _in("disk", "ssd"))]
        }
    }
    assert placer.place(pod("a", affinity=pref), assume=False)[0] == "n7"
    for i in range(20):
        chosen, _total = placer.place(pod(f"b{i}", cpu="10m", memory="10Mi"))
        assert chosen != "n3"  # the PreferNoSchedule node scores 0 of 100 x 3


def test_normalization_is_over_the_scored_sample():
    # 200 nodes, percentageOfNodesToScore 50: 100 feasible nodes scored; the preferred
    # node is found whenever it is in the sample, and then scores 100 (normalized over
    # the sample as kube normalizes over the nodes it scored).
    nodes = [node(f"n{i:03d}", labels={"rack": str(i)}) for i in range(200)]
    st = _state(nodes)
    doc = _config({"schedulerName": "default-scheduler", "percentageOfNodesToScore": 50})
    placer = Placer(st, parse_profile(doc), seed=1)
    pref = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [_term(1, _in("rack", "5"))]
        }
    }
    hits = 0
    for i in range(4):
        chosen, total = placer.place(pod(f"p{i}", affinity=pref), assume=False)
        hits += chosen == "n005"
        if chosen == "n005":
            assert total >= 2 * 100
    assert 1 <= hits <= 3  # half the rotations' samples hold n005


def test_added_required_affinity_is_anded_with_the_pods_own():
    # kube's NodeAffinity Filter with addedAffinity: both must match.
    st = _state(
        [
            node("a1", labels={"zone": "a", "disk": "ssd"}),
            node("a2", labels={"zone": "a", "disk": "hdd"}),
            node("b1", labels={"zone": "b", "disk": "ssd"}),
        ]
    )
    zone_a = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [_in("zone", "a")]}]
        }
    }
    profile = parse_profile(_config(_added(zone_a)))
    placer = Placer(st, profile)
    ssd = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [_in("disk", "ssd")]}]
            }
        }
    }
    rows = {r["name"]: r["feasible"] for r in placer.explain(pod("p", affinity=ssd))["nodes"]}
    assert rows == {"a1": True, "a2": False, "b1": False}
    rows = {r["name"]: r["feasible"] for r in placer.explain(pod("q"))["nodes"]}
    assert rows == {"a1": True, "a2": True, "b1": False}


def test_bad_added_affinity_is_refused_with_the_field():
    bad = {"preferredDuringSchedulingIgnoredDuringExecution": [_term(0, _in("a", "b"))]}
    with pytest.raises(ProfileError) as info:
        parse_profile(_config(_added(bad)))
    assert info.value.field.endswith(
        "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight"
    )


def _named(name: str, scheduler: str | None, **kw) -> dict:
    p = pod(name, **kw)
    if scheduler:
        p["spec"]["schedulerName"] = scheduler
    return p


def test_each_pod_is_placed_by_the_profile_its_scheduler_name_selects():
    # Two profiles in one configuration: spread (kube's default LeastAllocated) and pack
    # (MostAllocated). One node half full: the packer's pods go there, the spreader's
    # to the empty one; a pod naming neither is Pending (OtherScheduler).
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("busy", cpu="8"))
    log(EV.NODE_ADDED, node("idle", cpu="8"))
    log(EV.POD_SUBMITTED, pod("filler", cpu="4", node_name="busy"))
    pack = {
        "schedulerName": "packer",
        "pluginConfig": [
            {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}
        ],
        "plugins": {"score": {"disabled": [{"name": "NodeResourcesBalancedAllocation"}]}},
    }
    profile = parse_profile(_config({"schedulerName": "default-scheduler"}, pack))
    for name, sched in (("s", None), ("d", "default-scheduler"), ("k", "packer"), ("o", "other")):
        log(EV.POD_SUBMITTED, _named(name, sched))
    sp = SchedulingPass(st, Placer(st, profile), PassConfig(preemption=False))
    out = sp.run([Target("pod", f"ns/{k}") for k in ("s", "d", "k", "o")])
    placed = {b[0]: b[1] for p in out.placements for b in p.bindings}
    assert placed == {"ns/s": "idle", "ns/d": "idle", "ns/k": "busy"}
    assert out.unschedulable["ns/o"][1] == {OTHER_SCHEDULER: 2}  # both nodes not tried
    # the profile is part of the equivalence class: same shape, different classes
    assert st.class_of(st.pod_index["ns/k"]) != st.class_of(st.pod_index["ns/s"])


def test_added_affinity_applies_to_its_profiles_pods_only():
    st = ClusterState()
    log = Log(st)
    for name, zone in (("a1", "a"), ("b1", "b")):
        log(EV.NODE_ADDED, node(name, labels={"zone": zone}))
    zone_b = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [_in("zone", "b")]}]
        }
    }
    profile = parse_profile(
        _config({"schedulerName": "default-scheduler"}, _added(zone_b, "zone-b"))
    )
    for i in range(3):
        log(EV.POD_SUBMITTED, _named(f"z{i}", "zone-b", cpu="100m"))
    sp = SchedulingPass(st, Placer(st, profile, seed=4), PassConfig(preemption=False))
    out = sp.run([Target("pod", f"ns/z{i}") for i in range(3)])
    assert {b[1] for p in out.placements for b in p.bindings} == {"b1"}


def test_the_commit_validation_applies_the_profiles_added_affinity():
    # Given the replicas' configuration, the commit service refuses a binding outside
    # the profile's addedAffinity (a replica configured without it); without, it has
    # only the pod's own constraints.
    from esched.core.validation import Validator

    st = ClusterState()
    log = Log(st)
    for name, zone in (("a1", "a"), ("b1", "b")):
        log(EV.NODE_ADDED, node(name, labels={"zone": zone}))
    zone_b = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [_in("zone", "b")]}]
        }
    }
    profile = parse_profile(
        _config({"schedulerName": "default-scheduler"}, _added(zone_b, "zone-b"))
    )
    log(EV.POD_SUBMITTED, _named("z", "zone-b", cpu="100m"))

    def proposal(where: str) -> dict:
        binding = {"pod": "ns/z", "node": where, "resources": {"cpu": 100, "memory": 1 << 30}}
        return {
            "proposal": f"p-{where}",
            "replica": "r",
            "position": st.position,
            "gang": None,
            "bindings": [binding],
        }

    assert not Validator(st, profile=profile).check(proposal("a1"), record=False).ok
    assert Validator(st, profile=profile).check(proposal("b1"), record=False).ok
    assert Validator(st).check(proposal("a1"), record=False).ok
