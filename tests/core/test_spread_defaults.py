"""PodTopologySpread's default constraints (``defaultingType: System|List``).

kube gives a pod without ``topologySpreadConstraints`` of its own the profile's default
constraints, with the selector of its controller (a ReplicaSet, ReplicationController
or StatefulSet: the pod's ``controller: true`` ownerReference) and of the Services
selecting it (kubernetes/kubernetes pkg/scheduler/framework/plugins/podtopologyspread
common.go ``buildDefaultConstraints``, helper/spread.go ``DefaultSelector``). esched
folds no ReplicaSet, StatefulSet or Service objects: the selector is the pod's own
labels (without a StatefulSet's per-pod labels), a superset of its controller's
selector. The cases are kube's (scoring_test.go ``TestPreScoreStateEmptyNodes``,
``TestPreScoreSkip``; filtering_test.go ``TestPreFilterState`` default-constraint
cases), restated as the scores and verdicts the pre-states lead to; where a kube case
needs a Service or a missing ReplicaSet, the test says what esched does instead.
"""

from __future__ import annotations

import math

import orjson
import pytest

from esched.core import ClusterState
from esched.core._placer import Placer
from esched.core.profile import API_VERSION, SYSTEM_DEFAULT_CONSTRAINTS, ProfileError, parse_profile
from esched.schemas.objects import spread_default_labels
from esched.schemas.workloads import workload_pods
from support.fold import EV, Log, envelope, node, pod

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
SKEW = "node(s) didn't match pod topology spread constraints"
RS = ("apps/v1", "ReplicaSet")
TAR = {"foo": "tar", "baz": "sup"}


def owned(name, labels, owner=RS, node_name=None, cpu="10m", **spec) -> dict:
    """A pod of ``labels`` whose controller is ``owner`` (None: no owner)."""
    p = pod(name, cpu=cpu, memory="10Mi", node_name=node_name, namespace="default", **spec)
    p["metadata"]["labels"] = dict(labels)
    if owner is not None:
        p["metadata"]["ownerReferences"] = [
            {"apiVersion": owner[0], "kind": owner[1], "name": "rs1", "controller": True}
        ]
    return p


def profile(args: dict | None) -> object:
    cfg = [{"name": "PodTopologySpread", "args": args}] if args is not None else []
    return parse_profile(
        {
            "apiVersion": API_VERSION,
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"pluginConfig": cfg}],
        }
    )


def state(nodes, existing=()) -> ClusterState:
    st = ClusterState()
    log = Log(st)
    for name, labels in nodes:
        log(EV.NODE_ADDED, node(name, labels=labels))
    for i, (on, labels) in enumerate(existing):
        log(EV.POD_SUBMITTED, owned(f"e{i}", labels, node_name=on))
    return st


def spread_scores(placer: Placer, incoming: dict) -> dict:
    rows = placer.explain(incoming)["nodes"]
    return {r["name"]: r["scores"].get("PodTopologySpread") for r in rows if not r["reasons"]}


# kube's "system default constraints and a replicaset": nodes without a zone are not
# ignored, they are one more zone (""), and score without the zone term.
MARS = [
    ("node-a", {HOST: "node-a", ZONE: "mars"}),
    ("node-b", {HOST: "node-b", ZONE: "mars"}),
    ("node-c", {HOST: "node-c"}),
    ("node-d", {HOST: "node-d"}),
]


def _normalized(raw: dict) -> dict:
    lo, hi = min(raw.values()), max(raw.values())
    return {n: 100 * (hi + lo - r) // hi for n, r in raw.items()}


def test_system_defaults_score_a_replicaset_pod_with_nodes_lacking_a_zone_as_one_more_zone():
    st = state(MARS, [("node-a", TAR), ("node-c", TAR)])
    got = spread_scores(Placer(st), owned("p", TAR))
    # kube's pre-state: hostname weight log(4 + 2) (every node), zone weight
    # log(2 + 2) (mars and ""); counts: mars 1, node-a 1, node-c 1.
    host, zone = math.log(6), math.log(4)
    raw = {
        "node-a": round(1 * host + 2 + 1 * zone + 4),
        "node-b": round(0 * host + 2 + 1 * zone + 4),
        "node-c": round(1 * host + 2),
        "node-d": round(0 * host + 2),
    }
    assert got == _normalized(raw) == {"node-a": 22, "node-b": 44, "node-c": 77, "node-d": 100}


def test_system_defaults_with_no_matching_pods_favour_nodes_without_the_zone_term():
    got = spread_scores(Placer(state(MARS)), owned("p", TAR))
    # raw: zone nodes 2 + 4, the others 2 (kube's Score skips a key the node lacks)
    assert got == {"node-a": 33, "node-b": 33, "node-c": 100, "node-d": 100}


@pytest.mark.parametrize(
    ("case", "incoming", "prof"),
    [
        # kube: "the pod doesn't have soft topology spread Constraints" (List, none)
        ("list defaulting without constraints", owned("p", TAR), {"defaultingType": "List"}),
        # no controller: no selector (kube: an empty DefaultSelector)
        ("no controller", owned("p", TAR, owner=None), None),
        # a Deployment or Job is not a controller kube takes a selector from
        ("controlled by a Deployment", owned("p", TAR, owner=("apps/v1", "Deployment")), None),
        ("controlled by a Job", owned("p", TAR, owner=("batch/v1", "Job")), None),
        # no labels: an empty selector
        ("a replicaset pod without labels", owned("p", {}), None),
    ],
)
def test_pods_kube_gives_no_default_constraints_are_not_scored(case, incoming, prof):
    st = state(MARS, [("node-a", TAR)])
    rows = Placer(st, profile(prof)).explain(incoming)["nodes"]
    assert all("PodTopologySpread" not in r["scores"] for r in rows), case


def test_a_pods_own_constraints_replace_the_defaults():
    """kube: "default constraints and a replicaset, but pod has constraints": only the
    pod's own constraints apply; with only a DoNotSchedule one, PreScore skips."""
    prof = profile(
        {
            "defaultingType": "List",
            "defaultConstraints": [
                {"maxSkew": 2, "topologyKey": "galaxy", "whenUnsatisfiable": "ScheduleAnyway"}
            ],
        }
    )
    nodes = [("node-a", {"planet": "mars", "galaxy": "andromeda", "zone": "z"})]
    own = {
        "maxSkew": 1,
        "topologyKey": "zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"bar": ""}},
    }
    incoming = owned("p", TAR, topologySpreadConstraints=[own])
    rows = Placer(state(nodes), prof).explain(incoming)["nodes"]
    assert "PodTopologySpread" not in rows[0]["scores"]
    # ... whereas without its own, the galaxy default scores it
    rows = Placer(state(nodes), prof).explain(owned("p", TAR))["nodes"]
    assert rows[0]["scores"]["PodTopologySpread"] == 100


def test_listed_defaults_filter_with_do_not_schedule_and_score_with_schedule_anyway():
    """kube: "default constraints and a replicaset" (List: hostname ScheduleAnyway, rack
    DoNotSchedule, planet ScheduleAnyway), with pods to spread."""
    prof = profile(
        {
            "defaultingType": "List",
            "defaultConstraints": [
                {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway"},
                {"maxSkew": 1, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"},
                {"maxSkew": 2, "topologyKey": "planet", "whenUnsatisfiable": "ScheduleAnyway"},
            ],
        }
    )
    nodes = [
        ("node-a", {"rack": "rack1", HOST: "node-a", "planet": "mars"}),
        ("node-b", {"rack": "rack1", HOST: "node-b", "planet": "mars"}),
        ("node-x", {"rack": "rack2", HOST: "node-x", "planet": "mars"}),
    ]
    st = state(nodes, [("node-a", TAR)])
    placer = Placer(st, prof)
    # rack1 holds one matching pod, rack2 none: maxSkew 1 keeps rack1 out
    assert placer.fits(owned("p", TAR), "node-a") == [SKEW]
    assert placer.fits(owned("p", TAR), "node-b") == [SKEW]
    assert placer.fits(owned("p", TAR), "node-x") == []
    # a pod of another workload is not counted against
    assert placer.fits(owned("q", {"app": "other"}), "node-a") == []
    # the same profile and a pod without a controller: no defaults
    assert placer.fits(owned("p", TAR, owner=None), "node-a") == []


def test_statefulset_pods_spread_by_their_common_labels_not_their_per_pod_ones():
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "default"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "10m"}}}]},
            },
        },
    }
    pods, _ = workload_pods(manifest, [], "test")
    assert spread_default_labels(pods[0]["metadata"]) == {"app": "db"}
    nodes = [("n1", {HOST: "n1"}), ("n2", {HOST: "n2"})]
    st = ClusterState()
    log = Log(st)
    for name, labels in nodes:
        log(EV.NODE_ADDED, node(name, labels=labels))
    pods[0]["spec"]["nodeName"] = "n1"
    pods[1]["spec"]["nodeName"] = "n1"
    log(EV.POD_SUBMITTED, pods[0])
    log(EV.POD_SUBMITTED, pods[1])
    log(EV.POD_SUBMITTED, pods[2])
    got = spread_scores(Placer(st), "default/db-2")
    # hostname: n1 holds two of the set, n2 none (the zone term: neither has a zone)
    assert got["n2"] == 100 and got["n1"] < got["n2"]


def test_deployment_replicas_from_manifests_get_the_system_defaults():
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "10m"}}}]},
            },
        },
    }
    pods, _ = workload_pods(manifest, [], "test")
    st = ClusterState()
    log = Log(st)
    for n in ("n1", "n2"):
        log(EV.NODE_ADDED, node(n, labels={HOST: n}))
    pods[0]["spec"]["nodeName"] = "n1"
    log(EV.POD_SUBMITTED, pods[0])
    log(EV.POD_SUBMITTED, pods[1])
    key = f"default/{pods[1]['metadata']['name']}"
    got = spread_scores(Placer(st), key)
    assert got["n2"] == 100 and got["n1"] < 100
    # the flag survives a snapshot
    again = ClusterState.from_bytes(st.to_bytes())
    assert spread_scores(Placer(again), key) == got


def test_the_profile_keeps_kubes_system_defaults_unless_told_otherwise():
    assert profile(None).spread_defaults == SYSTEM_DEFAULT_CONSTRAINTS
    assert profile(None).spread_system is True
    assert profile({"defaultingType": "List"}).spread_defaults == ()
    listed = profile(
        {
            "defaultingType": "List",
            "defaultConstraints": [
                {"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"}
            ],
        }
    )
    assert listed.spread_defaults == (("rack", 2, "DoNotSchedule", 1, True, False),)
    assert listed.spread_system is False


BAD = "profiles[0].pluginConfig[0].args"


@pytest.mark.parametrize(
    ("args", "field", "text"),
    [
        # kube's validation_pluginargs_test.go TestValidatePodTopologySpreadArgs
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 0, "topologyKey": "k", "whenUnsatisfiable": "DoNotSchedule"}
                ],
            },
            f"{BAD}.defaultConstraints[0].maxSkew",
            "not in valid range",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "", "whenUnsatisfiable": "DoNotSchedule"}
                ],
            },
            f"{BAD}.defaultConstraints[0].topologyKey",
            "can not be empty",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "k", "whenUnsatisfiable": "Sometimes"}
                ],
            },
            f"{BAD}.defaultConstraints[0].whenUnsatisfiable",
            "supported values",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "k",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"a": "b"}},
                    }
                ],
            },
            f"{BAD}.defaultConstraints[0].labelSelector",
            "must not define a selector",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "k", "whenUnsatisfiable": "DoNotSchedule"},
                    {"maxSkew": 2, "topologyKey": "k", "whenUnsatisfiable": "DoNotSchedule"},
                ],
            },
            f"{BAD}.defaultConstraints[1]",
            "Duplicate value",
        ),
        ({"defaultingType": "Sometimes"}, f"{BAD}.defaultingType", "System or List"),
    ],
)
def test_invalid_default_constraints_are_refused_with_the_field(args, field, text):
    with pytest.raises(ProfileError) as info:
        profile(args)
    assert info.value.field == field and text in str(info.value)


def test_the_bytes_path_marks_controlled_pods_as_the_dict_path_does():
    """The fold's scanner reads ownerReferences as the dict path does: same label sets,
    same snapshot."""
    payloads = [orjson.dumps(envelope(EV.NODE_ADDED, node("n1", labels={HOST: "n1"})))]
    for i, owner in enumerate(
        (RS, None, ("apps/v1", "Deployment"), ("v1", "ReplicationController"))
    ):
        payloads.append(orjson.dumps(envelope(EV.POD_SUBMITTED, owned(f"p{i}", TAR, owner=owner))))
    rows = list(enumerate(payloads, 1))
    by_dict = ClusterState()
    by_dict.apply_many([(p, orjson.loads(b)) for p, b in rows])
    by_bytes = ClusterState()
    assert by_bytes.apply_payloads(rows) == len(rows)
    assert by_bytes.to_bytes() == by_dict.to_bytes()
    ip = by_bytes.interpod
    marks = [ip.owned(ip.pod_lset_of(by_bytes.pod_index[f"default/p{i}"])) for i in range(4)]
    assert marks == [True, False, False, True]
