"""kube's PodTopologySpread filter (``whenUnsatisfiable: DoNotSchedule``) on the one
feasibility path.

Tables ported from kubernetes/kubernetes
``pkg/scheduler/framework/plugins/podtopologyspread/filtering_test.go``
(``TestSingleConstraint``, ``TestMultipleConstraints``; the case names are kube's).
kube's table runs the PodTopologySpread filter alone; esched's ``fits`` gives every
filter's reason, so the tables compare the spread verdict only: ``ok`` (no spread
reason), ``skew`` (``Unschedulable``) or ``label`` (``UnschedulableAndUnresolvable``,
the node lacks a constraint's key).
"""

from __future__ import annotations

import pytest

from esched.core import ClusterState, Placer
from esched.core.schedule import PassConfig, SchedulingPass, Target
from support.fold import EV, Log, node, pod

SKEW = "node(s) didn't match pod topology spread constraints"
LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"


def spod(name, labels, *constraints, namespace="default", node_name=None, cpu="100m", **spec):
    p = pod(name, cpu=cpu, memory="128Mi", namespace=namespace, node_name=node_name, **spec)
    p["metadata"]["labels"] = dict(labels)
    if constraints:
        p["spec"]["topologySpreadConstraints"] = list(constraints)
    return p


def exists(key: str) -> dict:
    return {"matchExpressions": [{"key": key, "operator": "Exists"}]}


def dns(skew: int, key: str, selector: dict, **extra) -> dict:
    return {
        "maxSkew": skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": selector,
        **extra,
    }


def zn(name: str, zone: str | None, zone_key: str = "zone") -> dict:
    labels = {"node": name}
    if zone is not None:
        labels[zone_key] = zone
    return node(name, labels=labels)


FOUR = [zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2"), zn("node-y", "zone2")]
FOO = {"foo": ""}


def on(*spec: tuple[str, str]) -> list[tuple[str, str, str]]:
    """Existing pods labelled foo: (name, node) -> (name, node, namespace default)."""
    return [(name, n, "default") for name, n in spec]


SPREAD_2103 = on(
    ("p-a1", "node-a"),
    ("p-a2", "node-a"),
    ("p-b1", "node-b"),
    ("p-y1", "node-y"),
    ("p-y2", "node-y"),
    ("p-y3", "node-y"),
)

# (kube's case name, incoming pod, nodes, existing pods (name, node, namespace), want)
SINGLE = [
    (
        "no existing pods",
        spod("p", FOO, dns(1, "zone", exists("foo"))),
        FOUR,
        [],
        {"node-a": "ok", "node-b": "ok", "node-x": "ok", "node-y": "ok"},
    ),
    (
        "no existing pods, incoming pod doesn't match itself",
        spod("p", FOO, dns(1, "zone", exists("bar"))),
        FOUR,
        [],
        {"node-a": "ok", "node-b": "ok", "node-x": "ok", "node-y": "ok"},
    ),
    (
        "existing pods in a different namespace do not count",
        spod("p", FOO, dns(1, "zone", exists("foo"))),
        FOUR,
        [
            ("p-a1", "node-a", "ns1"),
            ("p-b1", "node-a", "ns2"),
            ("p-x1", "node-x", "default"),
            ("p-y1", "node-y", "default"),
        ],
        {"node-a": "ok", "node-b": "ok", "node-x": "skew", "node-y": "skew"},
    ),
    (
        "pods spread across zones as 3/3, all nodes fit",
        spod("p", FOO, dns(1, "zone", exists("foo"))),
        FOUR,
        SPREAD_2103,
        {"node-a": "ok", "node-b": "ok", "node-x": "ok", "node-y": "ok"},
    ),
    (
        "pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
        spod("p", FOO, dns(1, "zone", exists("foo"))),
        [
            zn("node-a", "zone1"),
            zn("node-b", "zone1", "zon"),
            zn("node-x", "zone2"),
            zn("node-y", "zone2"),
        ],
        on(("p-a1", "node-a"), ("p-b1", "node-b"), ("p-x1", "node-x"), ("p-y1", "node-y")),
        {"node-a": "ok", "node-b": "label", "node-x": "skew", "node-y": "skew"},
    ),
    (
        "pod cannot be scheduled as all nodes don't have label 'rack'",
        spod("p", FOO, dns(1, "rack", exists("foo"))),
        [zn("node-a", "zone1"), zn("node-x", "zone2")],
        [],
        {"node-a": "label", "node-x": "label"},
    ),
    (
        "pods spread across nodes as 2/1/0/3, only node-x fits",
        spod("p", FOO, dns(1, "node", exists("foo"))),
        FOUR,
        SPREAD_2103,
        {"node-a": "skew", "node-b": "skew", "node-x": "ok", "node-y": "skew"},
    ),
    (
        "pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
        spod("p", FOO, dns(2, "node", exists("foo"))),
        FOUR,
        SPREAD_2103,
        {"node-a": "skew", "node-b": "ok", "node-x": "ok", "node-y": "skew"},
    ),
    (
        "pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
        spod("p", {"bar": ""}, dns(1, "node", exists("foo"))),
        FOUR,
        SPREAD_2103,
        {"node-a": "skew", "node-b": "ok", "node-x": "ok", "node-y": "skew"},
    ),
    # kube's table runs the spread filter alone; here node-b and node-x also fail
    # NodeAffinity (not compared): the spread verdict is kube's.
    (
        "incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
        spod(
            "p",
            FOO,
            dns(1, "node", exists("foo")),
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "node",
                                        "operator": "In",
                                        "values": ["node-a", "node-y"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
        ),
        FOUR,
        SPREAD_2103,
        {"node-a": "ok", "node-b": "ok", "node-x": "ok", "node-y": "skew"},
    ),
]

BAR = {"bar": ""}
FOOBAR = {"foo": "", "bar": ""}
BOTH = (dns(1, "zone", exists("foo")), dns(1, "node", exists("foo")))
SPLIT = (dns(1, "zone", exists("foo")), dns(1, "node", exists("bar")))
MULTIPLE = [
    (
        "two Constraints on zone and node, spreads = [3/3, 2/1/0/3]",
        spod("p", FOO, *BOTH),
        FOUR,
        SPREAD_2103,
        {"node-a": "skew", "node-b": "skew", "node-x": "ok", "node-y": "skew"},
    ),
    (
        "two Constraints on zone and node, spreads = [3/4, 2/1/0/4]",
        spod("p", FOO, *BOTH),
        FOUR,
        SPREAD_2103 + on(("p-y4", "node-y")),
        {"node-a": "skew", "node-b": "skew", "node-x": "skew", "node-y": "skew"},
    ),
    (
        "Constraints hold different labelSelectors, spreads = [1/0, 1/0/0/1]",
        spod("p", FOOBAR, *SPLIT),
        FOUR,
        [("p-a1", "node-a", "default", FOO), ("p-y1", "node-y", "default", BAR)],
        {"node-a": "skew", "node-b": "skew", "node-x": "ok", "node-y": "skew"},
    ),
    (
        "Constraints hold different labelSelectors, spreads = [1/0, 0/0/1/1]",
        spod("p", FOOBAR, *SPLIT),
        FOUR,
        [
            ("p-a1", "node-a", "default", FOO),
            ("p-x1", "node-x", "default", BAR),
            ("p-y1", "node-y", "default", BAR),
        ],
        {"node-a": "skew", "node-b": "skew", "node-x": "skew", "node-y": "skew"},
    ),
    (
        "Constraints hold different labelSelectors, spreads = [2/3, 1/0/0/1]",
        spod("p", FOOBAR, *SPLIT),
        FOUR,
        [
            ("p-a1", "node-a", "default", FOO),
            ("p-a2", "node-a", "default", FOOBAR),
            ("p-y1", "node-y", "default", FOO),
            ("p-y2", "node-y", "default", FOOBAR),
            ("p-y3", "node-y", "default", FOO),
        ],
        {"node-a": "skew", "node-b": "ok", "node-x": "skew", "node-y": "skew"},
    ),
    (
        "Constraints hold different labelSelectors but pod doesn't match itself on 'zone' "
        "constraint",
        spod("p", BAR, *SPLIT),
        FOUR,
        [
            ("p-a1", "node-a", "default", FOO),
            ("p-x1", "node-x", "default", BAR),
            ("p-y1", "node-y", "default", BAR),
        ],
        {"node-a": "ok", "node-b": "ok", "node-x": "skew", "node-y": "skew"},
    ),
    (
        "two Constraints on zone and node, absence of label 'node' on node-x, "
        "spreads = [1/1, 1/0/0/1]",
        spod("p", FOO, *BOTH),
        [
            zn("node-a", "zone1"),
            zn("node-b", "zone1"),
            node("node-x", labels={"zone": "zone2"}),
            zn("node-y", "zone2"),
        ],
        on(("p-a1", "node-a"), ("p-y3", "node-y")),
        {"node-a": "skew", "node-b": "ok", "node-x": "label", "node-y": "skew"},
    ),
]


def _verdict(reasons: list[str]) -> str:
    if LABEL in reasons:
        return "label"
    return "skew" if SKEW in reasons else "ok"


def _state(nodes, existing) -> ClusterState:
    st = ClusterState()
    log = Log(st)
    for n in nodes:
        log(EV.NODE_ADDED, n)
    for name, n, ns, *labels in existing:
        log(EV.POD_SUBMITTED, spod(name, labels[0] if labels else FOO, namespace=ns, node_name=n))
    return st


@pytest.mark.parametrize(("case", "incoming", "nodes", "existing", "want"), SINGLE + MULTIPLE)
def test_topology_spread_filter_kube_tables(case, incoming, nodes, existing, want):
    placer = Placer(_state(nodes, existing))
    got = {n: _verdict(placer.fits(incoming, n)) for n in want}
    assert got == want, case


def test_min_domains_below_the_count_makes_the_global_minimum_zero():
    # kube's minDomains: with fewer eligible domains than minDomains the global minimum
    # is 0, so a domain already holding maxSkew matching pods is full.
    nodes = [zn("node-a", "zone1"), zn("node-x", "zone2")]
    existing = on(("p-a1", "node-a"), ("p-x1", "node-x"))
    placer = Placer(_state(nodes, existing))
    plain = spod("p", FOO, dns(1, "zone", exists("foo")))
    assert placer.fits(plain, "node-a") == [] and placer.fits(plain, "node-x") == []
    three = spod("p", FOO, dns(1, "zone", exists("foo"), minDomains=3))
    assert placer.fits(three, "node-a") == [SKEW] and placer.fits(three, "node-x") == [SKEW]


def test_node_taints_policy_honor_leaves_tainted_nodes_out_of_the_count():
    taint = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    nodes = [
        zn("node-a", "zone1"),
        node("node-x", labels={"node": "node-x", "zone": "zone2"}, taints=taint),
    ]
    existing = on(("p-a1", "node-a"))
    placer = Placer(_state(nodes, existing))
    ignore = spod("p", FOO, dns(1, "zone", exists("foo")))
    honor = spod("q", FOO, dns(1, "zone", exists("foo"), nodeTaintsPolicy="Honor"))
    # Ignore (the default): zone2 counts with 0 pods, so zone1 (1 + 1 - 0) is too full.
    assert _verdict(placer.fits(ignore, "node-a")) == "skew"
    # Honor: zone2's only node is tainted, so zone1 is the one domain (min 1).
    assert _verdict(placer.fits(honor, "node-a")) == "ok"


def test_match_label_keys_count_only_pods_of_the_same_revision():
    nodes = [zn("node-a", "zone1"), zn("node-x", "zone2")]
    st = ClusterState()
    log = Log(st)
    for n in nodes:
        log(EV.NODE_ADDED, n)
    for i in range(2):
        log(EV.POD_SUBMITTED, spod(f"old{i}", {"app": "w", "rev": "1"}, node_name="node-a"))
    c = dns(1, "zone", {"matchLabels": {"app": "w"}}, matchLabelKeys=["rev"])
    placer = Placer(st)
    new = spod("new", {"app": "w", "rev": "2"}, c)
    assert placer.fits(new, "node-a") == [] and placer.fits(new, "node-x") == []
    same = spod("same", {"app": "w", "rev": "1"}, c)
    assert placer.fits(same, "node-a") == [SKEW] and placer.fits(same, "node-x") == []


def test_a_pass_spreads_replicas_evenly_over_zones_and_keeps_the_rest_pending():
    st = ClusterState()
    log = Log(st)
    for i, zone in enumerate(["z1", "z1", "z2", "z2"]):
        log(EV.NODE_ADDED, node(f"n{i}", cpu="1", labels={"zone": zone}))
    c = dns(1, "zone", {"matchLabels": {"app": "w"}})
    for i in range(6):
        log(EV.POD_SUBMITTED, spod(f"w{i}", {"app": "w"}, c, cpu="400m"))
    sp = SchedulingPass(st, Placer(st), PassConfig(preemption=False))
    out = sp.run([Target("pod", f"default/w{i}") for i in range(6)])
    zones = [int(p.bindings[0][1][1:]) // 2 for p in out.placements]
    assert len(zones) == 6 and zones.count(0) == zones.count(1) == 3
