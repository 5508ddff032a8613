"""Preemption that lifts inter-pod anti-affinity and topology spread failures.

kube's DefaultPreemption (kubernetes/kubernetes pkg/scheduler/framework/plugins/
defaultpreemption, ``selectVictimsOnNode``) takes every lower-priority pod off a node,
runs every filter (InterPodAffinity and PodTopologySpread included, their pre-filter
state updated by ``RemovePod``), then reprieves the pods it can, highest priority
first. The cases are from default_preemption_test.go (``TestDryRunPreemption``: "pod
with anti-affinity is preempted", "preemption to resolve pod topology spread filter
failure"), kube's high / mid / low priorities as esched's prod / batch / best-effort
bands (a pod preempts only lower bands). kube returns every candidate node and then
picks one (``pickOneNodeForPreemption``); esched's plan is the candidate it picks
(tests/core/test_preempt_kube_order.py).
"""

from __future__ import annotations

from esched.core import ClusterState
from esched.core._placer import Placer
from esched.core.schedule import PassConfig, SchedulingPass, Target
from esched.core.validation import Validator
from support.fold import EV, Log, node, pod

HIGH, MID, LOW = 1000, 100, 0
HOST = "kubernetes.io/hostname"
FOO_EXISTS = {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}
ANTI_FOO = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": FOO_EXISTS, "topologyKey": HOST}
        ]
    }
}


def lpod(name, priority, node_name=None, labels=None, **spec) -> dict:
    p = pod(name, cpu="100m", memory="100Mi", node_name=node_name, priority=priority, **spec)
    if labels:
        p["metadata"]["labels"] = dict(labels)
    return p


def cluster(nodes, pods) -> ClusterState:
    st = ClusterState()
    log = Log(st)
    for name, labels in nodes:
        log(EV.NODE_ADDED, node(name, labels={HOST: name, **labels}))
    for p in pods:
        log(EV.POD_SUBMITTED, p)
    return st


def test_pod_with_anti_affinity_is_preempted():
    """kube: the low-priority pod whose anti-affinity term rejects the incoming pod is
    the one victim; the mid-priority pod beside it is reprieved."""
    st = cluster(
        [("node1", {}), ("node2", {})],
        [
            lpod("p1.1", LOW, "node1", {"foo": ""}, affinity=ANTI_FOO),
            lpod("p1.2", MID, "node1"),
            lpod("p1.3", HIGH, "node1"),
            lpod("p2", HIGH, "node2"),
            lpod("p", HIGH, labels={"foo": ""}),
        ],
    )
    placer = Placer(st)
    assert placer.fits("ns/p", "node1") != []
    plan = placer.plan_preemption("ns/p", assume=False)
    assert plan is not None
    assert plan["node"] == "node1" and plan["victims"] == ["ns/p1.1"]


def _spread_cluster() -> ClusterState:
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": k,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": FOO_EXISTS,
        }
        for k in ("zone", HOST)
    ]
    foo = {"foo": ""}
    return cluster(
        [
            ("node-a", {"zone": "zone1"}),
            ("node-b", {"zone": "zone1"}),
            ("node-x", {"zone": "zone2"}),
        ],
        [
            lpod("pod-a1", MID, "node-a", foo),
            lpod("pod-a2", LOW, "node-a", foo),
            lpod("pod-b1", LOW, "node-b", foo),
            lpod("pod-x1", HIGH, "node-x", foo),
            lpod("pod-x2", HIGH, "node-x", foo),
            lpod("p", HIGH, labels=foo, topologySpreadConstraints=spread),
        ],
    )


def test_preemption_to_resolve_pod_topology_spread_filter_failure():
    """kube's candidates: node-a evicting pod-a2 (pod-a1, mid, reprieved) and node-b
    evicting pod-b1; node-x's pods are not lower. Equal in everything else, the one
    whose victim started later: pod-b1, bound after pod-a2."""
    placer = Placer(_spread_cluster())
    assert all(placer.fits("ns/p", n) != [] for n in ("node-a", "node-b", "node-x"))
    plan = placer.plan_preemption("ns/p", assume=False)
    assert plan is not None
    assert plan["node"] == "node-b" and plan["victims"] == ["ns/pod-b1"]
    # the evictions tried on the way are taken back: the view is as it was
    assert all(placer.fits("ns/p", n) != [] for n in ("node-a", "node-b", "node-x"))


def test_a_node_that_only_pod_affinity_fails_is_no_candidate():
    """kube: a failed required pod affinity is UnschedulableAndUnresolvable, not a
    preemption candidate (evicting pods never adds the pod it needs)."""
    aff = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOST}
            ]
        }
    }
    st = cluster(
        [("node1", {}), ("node2", {})],
        [
            lpod("db", HIGH, "node2", {"app": "db"}),
            lpod("low", LOW, "node1"),
            lpod("p", HIGH, affinity=aff),
        ],
    )
    assert Placer(st).plan_preemption("ns/p", assume=False) is None


def test_the_pass_proposes_the_preemption_and_the_validator_accepts_it():
    st = _spread_cluster()
    sp = SchedulingPass(st, Placer(st, seed=1), PassConfig(preemption=True))
    out = sp.run([Target("pod", "ns/p")])
    assert [b[1] for p in out.placements for b in p.bindings] == ["node-b"]
    assert [v["pod"] for p in out.placements for v in p.victims] == ["ns/pod-b1"]
    v = Validator(st)
    v.begin()
    proposal = {
        "proposal": "x",
        "replica": "r",
        "position": 0,
        "gang": None,
        "bindings": [
            {
                "pod": "ns/p",
                "node": "node-b",
                "resources": {"cpu": 100, "memory": 100 << 20, "pods": 1},
            }
        ],
        "victims": [{"pod": "ns/pod-b1", "node": "node-b"}],
    }
    assert v.check(proposal, record=False).ok
    # without the victim the binding breaks the spread rule
    verdict = v.check({**proposal, "victims": []}, record=False)
    assert not verdict.ok
