"""Pod (anti-)affinity terms' ``namespaceSelector``, matched against the Namespace
objects of the log (``esched.namespace.upserted`` / ``deleted``), as kube's
InterPodAffinity plugin does.

The tables are kube's own: kubernetes/kubernetes
``pkg/scheduler/framework/plugins/interpodaffinity/filtering_test.go``
(``TestRequiredAffinitySingleNode``, the NamespaceSelector cases) and
``scoring_test.go`` (``TestPreferredAffinity`` and
``TestPreferredAffinityWithHardPodAffinitySymmetricWeight``, the NamespaceSelector
cases), whose plugin reads a namespace lister holding ``subteam1.team1`` and
``subteam2.team1`` (labels ``team: team1``), ``subteam1.team2`` and
``subteam2.team2`` (``team: team2``). Those names are not DNS labels, which esched's
ingest requires of a namespace: ``-`` stands for the ``.``. kube's namespace ``""``
is ``default`` here.
"""

from __future__ import annotations

import pytest

from esched.core import ClusterState, Placer
from esched.core.profile import API_VERSION, parse_profile
from esched.schemas.validator import InvalidEvent, validate_event
from support.fold import EV, Log, node, pod

AFF = "node(s) didn't match pod affinity rules"
ANTI = "node(s) didn't match pod anti-affinity rules"
EXISTING = "node(s) didn't satisfy existing pods anti-affinity rules"
MAX = 100

T1A, T1B, T2A, T2B = "subteam1-team1", "subteam2-team1", "subteam1-team2", "subteam2-team2"
NAMESPACES = {T1A: {"team": "team1"}, T1B: {"team": "team1"}, T2A: {"team": "team2"}}
NAMESPACES[T2B] = {"team": "team2"}
SEC = {"service": "securityscan"}
S1 = {"security": "S1"}
NODE1 = {"region": "r1", "zone": "z11"}
CHINA = {"region": "China"}
INDIA = {"region": "India"}
AZ1 = {"az": "az1"}

TEAM1 = {"matchExpressions": [{"key": "team", "operator": "In", "values": ["team1"]}]}


def sel(key: str, *values: str) -> dict:
    return {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}


def term(selector: dict, key: str, **extra) -> dict:
    return {"labelSelector": selector, "topologyKey": key, **extra}


def lpod(name, labels, namespace="default", node_name=None, affinity=None) -> dict:
    spec = {"affinity": affinity} if affinity else {}
    p = pod(name, cpu="10m", memory="10Mi", namespace=namespace, node_name=node_name, **spec)
    p["metadata"]["labels"] = dict(labels or {})
    return p


def required(aff=None, anti=None) -> dict:
    out: dict = {}
    if aff:
        out["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": aff}
    if anti:
        out["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": anti}
    return out


def namespace(name: str, labels: dict | None) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def _cluster(nodes: list[tuple[str, dict]]) -> tuple[ClusterState, Log]:
    st = ClusterState()
    log = Log(st)
    for name, labels in NAMESPACES.items():
        log(EV.NAMESPACE_UPSERTED, namespace(name, labels))
    for name, labels in nodes:
        log(EV.NODE_ADDED, node(name, labels=labels))
    return st, log


IN_SEC = sel("service", "securityscan", "value2")

# (kube's case name, incoming pod, existing pods on node1, reasons on node1)
FILTER = [
    (
        "affinity with NamespaceSelector",
        lpod("p", S1, affinity=required(aff=[term(IN_SEC, "region", namespaceSelector=TEAM1)])),
        [lpod("e", SEC, namespace=T1A, node_name="node1")],
        [],
    ),
    (
        "affinity with non-matching NamespaceSelector",
        lpod("p", S1, affinity=required(aff=[term(IN_SEC, "region", namespaceSelector=TEAM1)])),
        [lpod("e", SEC, namespace=T2A, node_name="node1")],
        [AFF],
    ),
    (
        "anti-affinity with matching NamespaceSelector",
        lpod("p", S1, T1A, affinity=required(anti=[term(IN_SEC, "zone", namespaceSelector=TEAM1)])),
        [lpod("e", SEC, namespace=T1B, node_name="node1")],
        [ANTI],
    ),
    (
        "anti-affinity with matching all NamespaceSelector",
        lpod("p", S1, T1A, affinity=required(anti=[term(IN_SEC, "zone", namespaceSelector={})])),
        [lpod("e", SEC, namespace=T1B, node_name="node1")],
        [ANTI],
    ),
    (
        "anti-affinity with non-matching NamespaceSelector",
        lpod("p", S1, T1A, affinity=required(anti=[term(IN_SEC, "zone", namespaceSelector=TEAM1)])),
        [lpod("e", SEC, namespace=T2A, node_name="node1")],
        [],
    ),
]


@pytest.mark.parametrize(("case", "incoming", "existing", "want"), FILTER)
def test_required_namespace_selector_kube_table(case, incoming, existing, want):
    st, log = _cluster([("node1", NODE1)])
    for e in existing:
        log(EV.POD_SUBMITTED, e)
    assert Placer(st).fits(incoming, "node1") == want, case


def _pref(weight: int, **extra) -> dict:
    return {
        "weight": weight,
        "podAffinityTerm": term(sel("security", "S1"), "region", **extra),
    }


NS_TERM = {"namespaces": [T2B], "namespaceSelector": TEAM1}
AFFINITY_NS = {
    "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [_pref(5, **NS_TERM)]}
}
ANTI_NS = {
    "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [_pref(5, **NS_TERM)]}
}


def _scores(nodes, existing, incoming, profile=None) -> list:
    st, log = _cluster([(f"node{i + 1}", labels) for i, labels in enumerate(nodes)])
    for e in existing:
        log(EV.POD_SUBMITTED, e)
    placer = Placer(st, profile) if profile is not None else Placer(st)
    rows = placer.explain(incoming)["nodes"]
    got = {r["name"]: r["scores"].get("InterPodAffinity") for r in rows}
    return [got[f"node{i + 1}"] for i in range(len(nodes))]


def _existing(*where: tuple[str, str]) -> list:
    return [lpod(f"e{i}", S1, ns, node_name=on) for i, (ns, on) in enumerate(where)]


# (kube's case name, incoming affinity, existing pods' (namespace, node), want)
PREFERRED = [
    (
        "Affinity with pods matching NamespaceSelector",
        AFFINITY_NS,
        [(T1A, "node1"), (T1A, "node1"), (T2A, "node1"), (T1B, "node2")],
        [MAX, 0],
    ),
    (
        "Affinity with pods matching both NamespaceSelector and Namespaces fields",
        AFFINITY_NS,
        [(T1A, "node1"), (T1A, "node1"), (T2B, "node1"), (T1B, "node2")],
        [MAX, 0],
    ),
    (
        "Affinity with pods matching NamespaceSelector (anti-affinity)",
        ANTI_NS,
        [(T1A, "node1"), (T1A, "node1"), (T2A, "node1"), (T1B, "node2")],
        [0, MAX],
    ),
    (
        "Affinity with pods matching both NamespaceSelector and Namespaces fields (anti-affinity)",
        ANTI_NS,
        [(T1A, "node1"), (T1A, "node1"), (T2B, "node1"), (T1B, "node2")],
        [0, MAX],
    ),
]


@pytest.mark.parametrize(("case", "aff", "existing", "want"), PREFERRED)
def test_preferred_namespace_selector_kube_table(case, aff, existing, want):
    incoming = lpod("p", S1, T1A, affinity=aff)
    assert _scores([CHINA, INDIA], _existing(*existing), incoming) == want, case


HARD = required(
    aff=[
        term(
            sel("service", "S1"),
            "region",
            namespaces=["default", T2B],
            namespaceSelector=TEAM1,
        )
    ]
)


def _ipa_profile(weight: int) -> object:
    return parse_profile(
        {
            "apiVersion": API_VERSION,
            "kind": "KubeSchedulerConfiguration",
            "profiles": [
                {
                    "schedulerName": "default-scheduler",
                    "pluginConfig": [
                        {"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": weight}}
                    ],
                }
            ],
        }
    )


# (kube's case name, the incoming pod's namespace, want): existing pods in "default"
# with HARD on node1 and node2 (TestPreferredAffinityWithHardPodAffinitySymmetricWeight).
HARD_CASES = [
    ("with default weight", "default", [MAX, MAX, 0]),
    ("with no matching namespace (kube: Skip)", T2A, [None, None, None]),
    ("with matching NamespaceSelector", T1A, [MAX, MAX, 0]),
    ("with matching Namespaces", T2B, [MAX, MAX, 0]),
]


@pytest.mark.parametrize(("case", "ns", "want"), HARD_CASES)
def test_hard_pod_affinity_weight_with_namespace_selector_kube_table(case, ns, want):
    existing = [
        lpod("e1", {}, node_name="node1", affinity=HARD),
        lpod("e2", {}, node_name="node2", affinity=HARD),
    ]
    incoming = lpod("p", {"service": "S1"}, ns)
    assert _scores([CHINA, INDIA, AZ1], existing, incoming, _ipa_profile(1)) == want, case


def test_a_relabelled_namespace_moves_bound_pods_in_and_out_of_a_selector():
    # kube resolves namespaceSelector in every scheduling cycle: a label change on a
    # Namespace re-evaluates the terms of pending pods and of bound ones alike.
    st, log = _cluster([("node1", NODE1)])
    log(EV.POD_SUBMITTED, lpod("e", SEC, namespace=T2A, node_name="node1"))
    incoming = lpod(
        "p", S1, affinity=required(aff=[term(IN_SEC, "region", namespaceSelector=TEAM1)])
    )
    assert Placer(st).fits(incoming, "node1") == [AFF]
    log(EV.NAMESPACE_UPSERTED, namespace(T2A, {"team": "team1"}))
    assert Placer(st).fits(incoming, "node1") == []
    log(EV.NAMESPACE_DELETED, {"metadata": {"name": T2A}})
    assert Placer(st).fits(incoming, "node1") == [AFF]
    # a bound pod's anti-affinity term with a selector: the incoming pod's namespace
    # gains the label, and the term keeps it away
    log(
        EV.POD_SUBMITTED,
        lpod(
            "guard",
            {},
            namespace=T1A,
            node_name="node1",
            affinity=required(anti=[term(sel("app", "web"), "zone", namespaceSelector=TEAM1)]),
        ),
    )
    web = lpod("w", {"app": "web"}, namespace="shop")
    assert Placer(st).fits(web, "node1") == []
    log(EV.NAMESPACE_UPSERTED, namespace("shop", {"team": "team1"}))
    assert Placer(st).fits(web, "node1") == [EXISTING]


def test_counts_follow_a_namespace_relabel_and_a_snapshot_keeps_the_labels():
    st, log = _cluster([("node1", NODE1), ("node2", {"region": "r2", "zone": "z21"})])
    log(EV.POD_SUBMITTED, lpod("e", SEC, namespace="shop", node_name="node1"))
    anti = lpod("p", S1, affinity=required(anti=[term(IN_SEC, "region", namespaceSelector=TEAM1)]))
    placer = Placer(st)
    assert placer.fits(anti, "node1") == []  # the counts array is made here
    log(EV.NAMESPACE_UPSERTED, namespace("shop", {"team": "team1"}))
    # the same placer: it syncs to the fold's position, the recounted arrays with it
    assert placer.fits(anti, "node1") == [ANTI]
    assert placer.fits(anti, "node2") == []
    restored = ClusterState.from_bytes(st.to_bytes())
    assert restored.namespace_labels["shop"] == {"team": "team1"}
    assert Placer(restored).fits(anti, "node1") == [ANTI]


def test_the_validator_accepts_namespace_selectors_and_namespace_events():
    data = lpod("p", S1, affinity=required(aff=[term(IN_SEC, "region", namespaceSelector=TEAM1)]))
    env = {
        "specversion": "1.0",
        "id": "1",
        "source": "tests",
        "type": EV.POD_SUBMITTED,
        "data": data,
    }
    assert validate_event(env) is env
    ns_env = {**env, "id": "2", "type": EV.NAMESPACE_UPSERTED, "data": namespace("shop", TEAM1)}
    with pytest.raises(InvalidEvent):  # labels are strings, not a selector
        validate_event(ns_env)
    ns_env["data"] = namespace("shop", {"team": "team1"})
    assert validate_event(ns_env) is ns_env
    bad = {**ns_env, "data": namespace("sub.team1", {})}
    with pytest.raises(InvalidEvent):  # a namespace name is a DNS label
        validate_event(bad)
    wrong = required(aff=[term(IN_SEC, "region", namespaceSelector={"matchExpressions": [{}]})])
    with pytest.raises(InvalidEvent):
        validate_event({**env, "data": lpod("p", S1, affinity=wrong)})
