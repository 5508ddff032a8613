"""Preferred inter-pod affinity scored as kube-scheduler's InterPodAffinity score plugin.

The score tables are kube's own, in esched's words: kubernetes/kubernetes
pkg/scheduler/framework/plugins/interpodaffinity/scoring_test.go (TestPreferredAffinity
and TestPreferredAffinityWithHardPodAffinitySymmetricWeight). kube normalizes over the
nodes it scores; ``explain`` scores every feasible node, so its scores are the table's.
The namespaceSelector cases are in test_interpod_namespaces.py; left out: the
invalid-selector cases (refused at ingest).
kube's PreScore ``Skip`` shows as no score (None).
"""

from __future__ import annotations

import pytest

from esched.core import ClusterState, Placer
from esched.core.profile import API_VERSION, DEFAULT_PROFILE, parse_profile
from esched.core.schedule import PassConfig, SchedulingPass, Target
from support.fold import EV, Log, node, pod

S1 = {"security": "S1"}
S2 = {"security": "S2"}
CHINA = {"region": "China"}
INDIA = {"region": "India"}
AZ1 = {"az": "az1"}
AZ2 = {"az": "az2"}
CHINA_AZ1 = {"region": "China", "az": "az1"}
MAX = 100


def sel(*exprs: tuple) -> dict:
    """A labelSelector of matchExpressions (key, operator, values...)."""
    return {
        "matchExpressions": [
            {"key": k, "operator": op, **({"values": list(vals)} if vals else {})}
            for k, op, *vals in exprs
        ]
    }


def pref(weight: int, selector: dict, key: str) -> dict:
    return {"weight": weight, "podAffinityTerm": {"labelSelector": selector, "topologyKey": key}}


def affinity(aff=None, anti=None, required=None) -> dict:
    out: dict = {}
    if aff or required:
        out["podAffinity"] = {}
        if aff:
            out["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = aff
        if required:
            out["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = required
    if anti:
        out["podAntiAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": anti}
    return out


STAY_S1_REGION = affinity(aff=[pref(5, sel(("security", "In", "S1")), "region")])
STAY_S2_REGION = affinity(aff=[pref(6, sel(("security", "In", "S2")), "region")])
AFFINITY3 = affinity(
    aff=[
        pref(8, sel(("security", "NotIn", "S1"), ("security", "In", "S2")), "region"),
        pref(2, sel(("security", "Exists"), ("wrongkey", "DoesNotExist")), "region"),
    ]
)
HARD = affinity(
    required=[
        {"labelSelector": sel(("security", "In", "S1", "value2")), "topologyKey": "region"},
        {
            "labelSelector": sel(("security", "Exists"), ("wrongkey", "DoesNotExist")),
            "topologyKey": "region",
        },
    ]
)
AWAY_S1_AZ = affinity(anti=[pref(5, sel(("security", "In", "S1")), "az")])
AWAY_S2_AZ = affinity(anti=[pref(5, sel(("security", "In", "S2")), "az")])
STAY_S1_AWAY_S2 = affinity(
    aff=[pref(8, sel(("security", "In", "S1")), "region")],
    anti=[pref(5, sel(("security", "In", "S2")), "az")],
)


def lpod(name: str, labels: dict | None = None, aff: dict | None = None, node_name=None) -> dict:
    spec = {"affinity": aff} if aff else {}
    p = pod(name, cpu="10m", memory="10Mi", node_name=node_name, **spec)
    p["metadata"]["labels"] = dict(labels or {})
    return p


def _scores(nodes, existing, incoming, profile=DEFAULT_PROFILE) -> list:
    st = ClusterState()
    log = Log(st)
    for i, labels in enumerate(nodes):
        log(EV.NODE_ADDED, node(f"node{i + 1}", labels=labels))
    for i, (labels, aff, on) in enumerate(existing):
        log(EV.POD_SUBMITTED, lpod(f"e{i}", labels, aff, node_name=on))
    rows = Placer(st, profile).explain(incoming)["nodes"]
    got = {r["name"]: r["scores"].get("InterPodAffinity") for r in rows}
    return [got[f"node{i + 1}"] for i in range(len(nodes))]


# (kube's case name, nodes' labels, existing (labels, affinity, node), incoming, want)
PREFERRED = [
    (
        "all nodes are same priority as Affinity is nil (kube: Skip)",
        [CHINA, INDIA, AZ1],
        [],
        lpod("p", S1),
        [None, None, None],
    ),
    (
        "Affinity: pod that matches topology key & pods in nodes will get high score",
        [CHINA, INDIA, AZ1],
        [(S1, None, "node1"), (S2, None, "node2"), (S1, None, "node3")],
        lpod("p", S1, STAY_S1_REGION),
        [MAX, 0, 0],
    ),
    (
        "All the nodes that have the same topology key & label value with one of them has an "
        "existing pod that match the affinity rules, have the same score",
        [CHINA, CHINA_AZ1, INDIA],
        [(S1, None, "node1")],
        lpod("p", None, STAY_S1_REGION),
        [MAX, MAX, 0],
    ),
    (
        "Affinity: nodes in one region has more matching pods comparing to other region",
        [CHINA, INDIA, CHINA, CHINA, INDIA],
        [(S2, None, f"node{i}") for i in (1, 1, 2, 3, 4, 5)],
        lpod("p", S1, STAY_S2_REGION),
        [MAX, 0, MAX, MAX, 0],
    ),
    (
        "Affinity: different Label operators and values for pod affinity scheduling "
        "preference, including some match failures",
        [CHINA, INDIA, AZ1],
        [(S1, None, "node1"), (S2, None, "node2"), (S1, None, "node3")],
        lpod("p", S1, AFFINITY3),
        [20, MAX, 0],
    ),
    (
        "Affinity symmetry: considered only the preferredDuringSchedulingIgnoredDuringExecution "
        "in pod affinity symmetry",
        [CHINA, INDIA, AZ1],
        [(S1, STAY_S1_REGION, "node1"), (S2, STAY_S2_REGION, "node2")],
        lpod("p", S2),
        [0, MAX, 0],
    ),
    (
        "Affinity symmetry: considered RequiredDuringSchedulingIgnoredDuringExecution in pod "
        "affinity symmetry",
        [CHINA, INDIA, AZ1],
        [(S1, HARD, "node1"), (S2, HARD, "node2")],
        lpod("p", S1),
        [MAX, MAX, 0],
    ),
    (
        "Anti Affinity: pod that does not match existing pods in node will get high score",
        [AZ1, CHINA],
        [(S1, None, "node1"), (S2, None, "node2")],
        lpod("p", S1, AWAY_S1_AZ),
        [0, MAX],
    ),
    (
        "Anti Affinity: pod that does not match topology key & match the pods in nodes will "
        "get higher score comparing to others",
        [AZ1, CHINA],
        [(S1, None, "node1"), (S1, None, "node2")],
        lpod("p", S1, AWAY_S1_AZ),
        [0, MAX],
    ),
    (
        "Anti Affinity: one node has more matching pods comparing to other node",
        [AZ1, INDIA],
        [(S1, None, "node1"), (S1, None, "node1"), (S2, None, "node2")],
        lpod("p", S1, AWAY_S1_AZ),
        [0, MAX],
    ),
    (
        "Anti Affinity symmetry: the existing pods in node which has anti affinity match will "
        "get high score",
        [AZ1, AZ2],
        [(S1, AWAY_S2_AZ, "node1"), (S2, AWAY_S1_AZ, "node2")],
        lpod("p", S2),
        [0, MAX],
    ),
    (
        "Affinity and Anti Affinity: considered only preferredDuringSchedulingIgnored"
        "DuringExecution in both pod affinity & anti affinity",
        [CHINA, AZ1],
        [(S1, None, "node1"), (S1, None, "node2")],
        lpod("p", S1, STAY_S1_AWAY_S2),
        [MAX, 0],
    ),
    (
        "Affinity and Anti Affinity: considering both affinity and anti-affinity, the pod to "
        "schedule and existing pods have the same labels",
        [CHINA_AZ1, INDIA, CHINA, CHINA, INDIA],
        [(S1, None, f"node{i}") for i in (1, 1, 2, 3, 3, 4, 5)],
        lpod("p", S1, STAY_S1_AWAY_S2),
        [MAX, 0, MAX, MAX, 0],
    ),
    (
        "Affinity and Anti Affinity and symmetry: considered only preferredDuringScheduling"
        "IgnoredDuringExecution in both pod affinity & anti affinity & symmetry",
        [CHINA, AZ1, INDIA, AZ2],
        [
            (S1, None, "node1"),
            (S2, None, "node2"),
            (None, STAY_S1_AWAY_S2, "node3"),
            (None, AWAY_S1_AZ, "node4"),
        ],
        lpod("p", S1, STAY_S1_AWAY_S2),
        [MAX, 0, MAX, 0],
    ),
    (
        "Avoid panic when partial nodes in a topology don't have pods with affinity",
        [CHINA, CHINA],
        [(S1, None, "node1"), (None, STAY_S1_AWAY_S2, "node2")],
        lpod("p", S1),
        [0, 0],
    ),
]


@pytest.mark.parametrize(("case", "nodes", "existing", "incoming", "want"), PREFERRED)
def test_preferred_affinity_kube_table(case, nodes, existing, incoming, want):
    assert _scores(nodes, existing, incoming) == want, case


def _ipa_profile(**args) -> object:
    return parse_profile(
        {
            "apiVersion": API_VERSION,
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"pluginConfig": [{"name": "InterPodAffinity", "args": args}]}],
        }
    )


@pytest.mark.parametrize(("weight", "want"), [(1, [MAX, MAX, 0]), (0, [None, None, None])])
def test_hard_pod_affinity_weight_scores_existing_pods_required_terms(weight, want):
    """kube's TestPreferredAffinityWithHardPodAffinitySymmetricWeight: bound pods' required
    affinity terms the incoming pod matches weigh hardPodAffinityWeight; 0 scores nothing
    (kube: Skip)."""
    got = _scores(
        [CHINA, INDIA, AZ1],
        [(S1, HARD, "node1"), (S2, HARD, "node2")],
        lpod("p", S1),
        _ipa_profile(hardPodAffinityWeight=weight),
    )
    assert got == want


def test_ignore_preferred_terms_of_existing_pods_skips_a_pod_without_terms():
    """kube's ignorePreferredTermsOfExistingPods: a pod with no preferred terms of its own
    is not scored for the bound pods' terms (Skip); one with terms still is."""
    existing = [(S1, STAY_S1_REGION, "node1"), (S2, STAY_S2_REGION, "node2")]
    profile = _ipa_profile(ignorePreferredTermsOfExistingPods=True)
    assert _scores([CHINA, INDIA, AZ1], existing, lpod("p", S2), profile) == [None] * 3
    got = _scores([CHINA, INDIA, AZ1], existing, lpod("p", S2, AWAY_S1_AZ), profile)
    assert got == [0, MAX, 0]  # node2: the bound pod's +6; node1, node3: 0


def test_normalization_truncates_as_kubes_float64():
    """kube computes int64(MaxNodeScore * float64(s - min) / float64(max - min)) in float64:
    a raw 29 of 100 scores 28 there (0.29 is just below in binary), not 29."""
    nodes = [{"rack": "a"}, {"rack": "b"}, {"rack": "c"}]
    # rack a: 100 pods' worth of weight (one pod, weight 100); rack b: 29; rack c: 0
    heavy = affinity(aff=[pref(100, sel(("app", "In", "x")), "rack")])
    light = affinity(aff=[pref(29, sel(("app", "In", "x")), "rack")])
    existing = [(None, heavy, "node1"), (None, light, "node2")]
    assert _scores(nodes, existing, lpod("p", {"app": "x"})) == [MAX, 28, 0]


def _pass_placements(profile=DEFAULT_PROFILE) -> dict:
    st = ClusterState()
    log = Log(st)
    for i in range(6):
        zone = "z1" if i < 3 else "z2"
        log(EV.NODE_ADDED, node(f"n{i}", labels={"zone": zone}))
    anchor = lpod("anchor", {"app": "db"}, node_name="n4")
    anchor["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
    log(EV.POD_SUBMITTED, anchor)
    near = affinity(aff=[pref(50, sel(("app", "In", "db")), "zone")])
    away = affinity(anti=[pref(50, sel(("app", "In", "db")), "zone")])
    for i in range(2):
        log(EV.POD_SUBMITTED, lpod(f"near{i}", {"app": "cache"}, near))
    for i in range(3):
        log(EV.POD_SUBMITTED, lpod(f"away{i}", {"app": "web"}, away))
    sp = SchedulingPass(st, Placer(st, profile, seed=2), PassConfig(preemption=False))
    targets = [Target("pod", f"ns/near{i}") for i in range(2)]
    targets += [Target("pod", f"ns/away{i}") for i in range(3)]
    out = sp.run(targets)
    return {b[0]: b[1] for p in out.placements for b in p.bindings}


def test_the_scheduling_pass_places_by_the_inter_pod_score():
    """Pods preferring the zone of a busy db pod go to that zone's other nodes (the
    resource scores alone would pick any empty node); pods preferring away from it go to
    the other zone."""
    where = _pass_placements()
    assert {where["ns/near0"], where["ns/near1"]} <= {"n3", "n5"}
    assert {where[f"ns/away{i}"] for i in range(3)} <= {"n0", "n1", "n2"}


def _cluster_with_a_preferring_pod():
    st = ClusterState()
    log = Log(st)
    for i, labels in enumerate([CHINA, INDIA, AZ1]):
        log(EV.NODE_ADDED, node(f"node{i + 1}", labels=labels))
    log(EV.POD_SUBMITTED, lpod("e", S2, STAY_S2_REGION, node_name="node2"))
    return st, log


def _ipa(st: ClusterState, p: dict) -> list:
    rows = Placer(st).explain(p)["nodes"]
    return [r["scores"].get("InterPodAffinity") for r in rows]


def test_the_fold_takes_a_finished_pods_terms_back_and_a_snapshot_keeps_them():
    st, log = _cluster_with_a_preferring_pod()
    # The bound pod's preferred term weighs its region for a matching pod.
    assert _ipa(st, lpod("p", S2)) == [0, MAX, 0]
    copy = ClusterState.from_bytes(st.to_bytes())
    assert _ipa(copy, lpod("p", S2)) == [0, MAX, 0]
    log(EV.POD_SUCCEEDED, {"metadata": {"name": "e", "namespace": "ns"}})
    assert _ipa(st, lpod("p", S2)) == [None, None, None]


def test_a_relabelled_node_moves_its_pods_weights():
    st, log = _cluster_with_a_preferring_pod()
    # node2 moves to China: its pod's term now weighs China (node1 and node2).
    log(EV.NODE_ADDED, node("node2", labels=CHINA))
    assert _ipa(st, lpod("p", S2)) == [MAX, MAX, 0]
