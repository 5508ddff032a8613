"""ScheduleAnyway topology spread scored as kube-scheduler's PodTopologySpread score.

The table is a subset of kube's own, in esched's words: kubernetes/kubernetes
pkg/scheduler/framework/plugins/podtopologyspread/scoring_test.go
(TestPodTopologySpreadScore). kube's "failed nodes" (candidates the filters removed)
are nodes too small for the pod here: their pods still count in their domains, and
they are not scored. ``explain`` normalizes over every feasible node, as kube over
the nodes it scores. Left out: the system-defaulting cases (esched folds no Services
or controllers, so kube's default constraints have no selector to spread by) and the
matchLabelKeys / node inclusion policy cases (the filter's tests cover those paths).
"""

from __future__ import annotations

import pytest

from esched.core import ClusterState, Placer
from esched.core.profile import API_VERSION, parse_profile
from esched.core.schedule import PassConfig, SchedulingPass, Target
from support.fold import EV, Log, node, pod

HOST = "kubernetes.io/hostname"
FOO = {"matchLabels": {"foo": ""}}
BAR = {"matchLabels": {"bar": ""}}


def spread(key: str, selector: dict | None, max_skew: int = 1) -> dict:
    c = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway"}
    if selector is not None:
        c["labelSelector"] = selector
    return c


def lpod(name, labels, constraints=(), node_name=None, namespace="ns", cpu="10m") -> dict:
    extra = {"topologySpreadConstraints": list(constraints)} if constraints else {}
    p = pod(name, cpu=cpu, memory="10Mi", node_name=node_name, namespace=namespace, **extra)
    p["metadata"]["labels"] = dict(labels)
    return p


def hosts(*names: str, zone=None, failed=()) -> list:
    """(name, labels, failed) with hostname labels (and zones: name -> zone)."""
    out = []
    for n in names:
        labels = {HOST: n}
        if zone:
            labels["zone"] = zone[n]
        out.append((n, labels, n in failed))
    return out


def placed(spec: dict) -> list:
    """Existing pods: {node: [labels, ...]} in the incoming pod's namespace."""
    return [(n, labels, "ns") for n, many in spec.items() for labels in many]


F = {"foo": ""}
FB = {"foo": "", "bar": ""}
B = {"bar": ""}
Z4 = {"node-a": "zone1", "node-b": "zone1", "node-x": "zone2", "node-y": "zone2"}

# (kube's case name, constraints, incoming labels, existing (node, labels, ns), nodes, want)
CASES = [
    (
        "one constraint on node, no existing pods",
        [spread(HOST, FOO)],
        F,
        [],
        hosts("node-a", "node-b"),
        {"node-a": 100, "node-b": 100},
    ),
    (
        "one constraint on node, only one node is candidate",
        [spread(HOST, FOO)],
        F,
        placed({"node-a": [F, F], "node-b": [F]}),
        hosts("node-a", "node-b", failed=("node-b",)),
        {"node-a": 100},
    ),
    (
        "one constraint on node, all nodes have the same number of matching pods",
        [spread(HOST, FOO)],
        F,
        placed({"node-a": [F], "node-b": [F]}),
        hosts("node-a", "node-b"),
        {"node-a": 100, "node-b": 100},
    ),
    (
        "one constraint on node, all 4 nodes are candidates",
        [spread(HOST, FOO)],
        F,
        placed({"node-a": [F, F], "node-b": [F], "node-d": [F, F, F]}),
        hosts("node-a", "node-b", "node-c", "node-d"),
        {"node-a": 20, "node-b": 60, "node-c": 100, "node-d": 0},
    ),
    (
        "one constraint on node, null selector",
        [spread(HOST, None)],
        F,
        placed({"node-a": [F, F], "node-b": [F], "node-d": [F, F, F]}),
        hosts("node-a", "node-b", "node-c", "node-d"),
        {"node-a": 100, "node-b": 100, "node-c": 100, "node-d": 100},
    ),
    (
        "one constraint on node, all 4 nodes are candidates, maxSkew=2",
        [spread(HOST, FOO, 2)],
        F,
        placed({"node-a": [F, F], "node-b": [F], "node-d": [F, F, F]}),
        hosts("node-a", "node-b", "node-c", "node-d"),
        {"node-a": 33, "node-b": 66, "node-c": 100, "node-d": 16},
    ),
    (
        "one constraint on node, all 4 nodes are candidates, maxSkew=3",
        [spread(HOST, FOO, 3)],
        F,
        placed({"node-a": [F] * 4, "node-b": [F] * 3, "node-c": [F] * 2, "node-d": [F]}),
        hosts("node-a", "node-b", "node-c", "node-d"),
        {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100},
    ),
    (
        "one constraint on node, 3 out of 4 nodes are candidates",
        [spread(HOST, FOO)],
        F,
        placed({"node-a": [F] * 4, "node-b": [F] * 2, "node-x": [F], "node-y": [F] * 3}),
        hosts("node-a", "node-b", "node-x", "node-y", failed=("node-y",)),
        {"node-a": 33, "node-b": 83, "node-x": 100},
    ),
    (
        "one constraint on node, 3 out of 4 nodes are candidates, one node doesn't match "
        "topology key",
        [spread(HOST, FOO)],
        F,
        placed({"node-a": [F] * 4, "node-b": [F] * 2, "node-x": [F], "node-y": [F] * 3}),
        [
            ("node-a", {HOST: "node-a"}, False),
            ("node-b", {"n": "node-b"}, False),
            ("node-x", {HOST: "node-x"}, False),
            ("node-y", {HOST: "node-y"}, True),
        ],
        {"node-a": 16, "node-b": 0, "node-x": 100},
    ),
    (
        "one constraint on zone, 3 out of 4 nodes are candidates",
        [spread("zone", FOO)],
        F,
        placed({"node-a": [F] * 4, "node-b": [F] * 2, "node-x": [F], "node-y": [F] * 3}),
        hosts("node-a", "node-b", "node-x", "node-y", zone=Z4, failed=("node-y",)),
        {"node-a": 75, "node-b": 75, "node-x": 100},
    ),
    (
        "two Constraints on zone and node, 2 out of 4 nodes are candidates",
        [spread("zone", FOO), spread(HOST, FOO)],
        F,
        placed({"node-a": [F] * 2, "node-b": [F], "node-x": [F] * 2, "node-y": [F] * 4}),
        hosts("node-a", "node-b", "node-x", "node-y", zone=Z4, failed=("node-b", "node-y")),
        {"node-a": 100, "node-x": 63},
    ),
    (
        "two Constraints on zone and node, with different labelSelectors",
        [spread("zone", FOO), spread(HOST, BAR)],
        FB,
        placed({"node-a": [F], "node-b": [FB], "node-y": [F, B]}),
        hosts("node-a", "node-b", "node-x", "node-y", zone=Z4),
        {"node-a": 60, "node-b": 20, "node-x": 100, "node-y": 60},
    ),
    (
        "two Constraints on zone and node, with different labelSelectors, some nodes have 0 pods",
        [spread("zone", FOO), spread(HOST, BAR)],
        FB,
        placed({"node-b": [B], "node-x": [F], "node-y": [FB]}),
        hosts("node-a", "node-b", "node-x", "node-y", zone=Z4),
        {"node-a": 100, "node-b": 60, "node-x": 40, "node-y": 0},
    ),
    (
        "two Constraints on zone and node, with different labelSelectors, 3 out of 4 nodes "
        "are candidates",
        [spread("zone", FOO), spread(HOST, BAR)],
        FB,
        placed({"node-a": [F], "node-b": [FB], "node-y": [F, B]}),
        hosts("node-a", "node-b", "node-x", "node-y", zone=Z4, failed=("node-y",)),
        {"node-a": 50, "node-b": 25, "node-x": 100},
    ),
    (
        "existing pods in a different namespace do not count",
        [spread(HOST, FOO)],
        F,
        [("node-a", F, "ns1"), ("node-a", F, "ns"), ("node-b", F, "ns"), ("node-b", F, "ns")],
        hosts("node-a", "node-b"),
        {"node-a": 100, "node-b": 33},
    ),
]


@pytest.mark.parametrize(("case", "constraints", "labels", "existing", "nodes", "want"), CASES)
def test_pod_topology_spread_score_kube_table(case, constraints, labels, existing, nodes, want):
    st = ClusterState()
    log = Log(st)
    for name, node_labels, failed in nodes:
        log(EV.NODE_ADDED, node(name, cpu="100m" if failed else "4", labels=node_labels))
    for i, (on, pod_labels, ns) in enumerate(existing):
        log(EV.POD_SUBMITTED, lpod(f"e{i}", pod_labels, node_name=on, namespace=ns))
    incoming = lpod("p", labels, constraints, cpu="500m")
    rows = Placer(st).explain(incoming)["nodes"]
    got = {r["name"]: r["scores"].get("PodTopologySpread") for r in rows if not r["reasons"]}
    assert got == want, case


def test_a_pod_without_schedule_anyway_constraints_is_not_scored():
    """kube's PreScore Skip: no ScheduleAnyway constraint, no PodTopologySpread score."""
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("a", labels={HOST: "a"}))
    rows = Placer(st).explain(lpod("p", F))["nodes"]
    assert "PodTopologySpread" not in rows[0]["scores"]


def _zone_b_count(profile=None) -> int:
    st = ClusterState()
    log = Log(st)
    for i in range(6):
        zone = "z1" if i < 5 else "z2"
        log(EV.NODE_ADDED, node(f"n{i}", labels={HOST: f"n{i}", "zone": zone}))
    for i in range(6):
        log(EV.POD_SUBMITTED, lpod(f"r{i}", F, [spread("zone", FOO)], cpu="1"))
    sp = SchedulingPass(st, Placer(st, profile, seed=1), PassConfig(preemption=False))
    out = sp.run([Target("pod", f"ns/r{i}") for i in range(6)])
    where = [b[1] for p in out.placements for b in p.bindings]
    assert len(where) == 6
    return sum(w == "n5" for w in where)


def test_the_scheduling_pass_spreads_schedule_anyway_replicas_over_zones():
    """Six replicas with a ScheduleAnyway zone constraint, five nodes in zone z1 and one
    in z2: the spread score sends more of them to the lone z2 node than the resource
    scores alone do (which favour z1's empty nodes)."""
    without = parse_profile(
        {
            "apiVersion": API_VERSION,
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"plugins": {"score": {"disabled": [{"name": "PodTopologySpread"}]}}}],
        }
    )
    assert _zone_b_count() >= 2 > _zone_b_count(without)
