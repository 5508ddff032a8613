"""Workload objects as their controllers' pods (schemas/workloads.py): counts, names,
labels, and which nodes a DaemonSet runs on.

Node matching follows kube's daemon controller (pkg/controller/daemon,
``nodeShouldRunDaemonPod``: NodeAffinity, then TaintToleration on NoSchedule and
NoExecute taints); the operator table follows
k8s.io/component-helpers/scheduling/corev1/nodeaffinity (In, NotIn, Exists,
DoesNotExist, Gt, Lt; matchFields on metadata.name only; an empty term matches
nothing)."""

from __future__ import annotations

import pytest

from esched.schemas.workloads import (
    generated_name,
    node_matches,
    pod_template_hash,
    workload_pods,
)

TEMPLATE = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c"}]}}


def workload(kind: str, api: str = "apps/v1", **spec) -> dict:
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": "w", "namespace": "team"},
        "spec": {"template": TEMPLATE, **spec},
    }


def names(doc: dict, nodes=()) -> list[str]:
    pods, _warnings = workload_pods(doc, list(nodes), "document 0")
    return [p["metadata"]["name"] for p in pods]


def node(name: str, labels=None, taints=None) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": taints or []}}


def test_generated_names_are_deterministic_and_kube_shaped() -> None:
    a = generated_name("web-", "team", "web", 0)
    assert a == generated_name("web-", "team", "web", 0) != generated_name("web-", "team", "web", 1)
    assert len(a) == len("web-") + 5
    assert len(generated_name("x" * 70, 0)) == 63  # base cut to 58, as kube does


def test_a_deployment_names_its_pods_after_its_replicaset() -> None:
    pods, _ = workload_pods(workload("Deployment", replicas=2), [], "d")
    rs = f"w-{pod_template_hash(TEMPLATE)}"
    for p in pods:
        assert p["metadata"]["name"].startswith(rs + "-")
        assert p["metadata"]["labels"] == {"app": "x", "pod-template-hash": rs[2:]}
        assert p["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
        assert p["metadata"]["namespace"] == "team"


def test_replicas_default_to_one_and_zero_means_none() -> None:
    assert len(names(workload("ReplicaSet"))) == 1
    assert names(workload("ReplicaSet", replicas=0)) == []


def test_a_statefulset_counts_from_its_ordinals_start() -> None:
    assert names(workload("StatefulSet", replicas=3, ordinals={"start": 5})) == [
        "w-5",
        "w-6",
        "w-7",
    ]


@pytest.mark.parametrize(
    ("spec", "count"),
    [({}, 1), ({"parallelism": 4}, 4), ({"parallelism": 4, "completions": 2}, 2)],
)
def test_a_job_runs_min_of_parallelism_and_completions(spec: dict, count: int) -> None:
    assert len(names(workload("Job", "batch/v1", **spec))) == count


def test_a_suspended_job_has_no_pods_and_says_so() -> None:
    pods, warnings = workload_pods(workload("Job", "batch/v1", suspend=True), [], "d")
    assert pods == [] and "suspended" in warnings[0]


def test_bad_replicas_name_the_document() -> None:
    with pytest.raises(ValueError, match=r"document 0: spec\.replicas"):
        names(workload("ReplicaSet", replicas=-1))


@pytest.mark.parametrize(
    ("spec", "node_labels", "match"),
    [
        ({"nodeSelector": {"disk": "ssd"}}, {"disk": "ssd"}, True),
        ({"nodeSelector": {"disk": "ssd"}}, {"disk": "hdd"}, False),
        (
            {"terms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]},
            {"zone": "a"},
            True,
        ),
        (
            {
                "terms": [
                    {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}
                ]
            },
            {},
            True,
        ),
        ({"terms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}, {}, False),
        ({"terms": [{"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}]}, {}, True),
        (
            {
                "terms": [
                    {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}]}
                ]
            },
            {"cores": "16"},
            True,
        ),
        (
            {
                "terms": [
                    {"matchExpressions": [{"key": "cores", "operator": "Lt", "values": ["8"]}]}
                ]
            },
            {"cores": "16"},
            False,
        ),
        (
            {
                "terms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}
                ]
            },
            {},
            True,
        ),
        ({"terms": [{}]}, {}, False),  # an empty term matches nothing
        (
            {"terms": [{}, {"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}]},
            {},
            True,
        ),
    ],
)
def test_daemon_node_selection_follows_node_affinity(spec, node_labels, match) -> None:
    pod_spec = {k: v for k, v in spec.items() if k != "terms"}
    if "terms" in spec:
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": spec["terms"]
                }
            }
        }
    assert node_matches(pod_spec, node("n", node_labels)) is match


def test_daemon_pods_skip_nodes_whose_taints_they_do_not_tolerate() -> None:
    nodes = [
        node("plain"),
        node("tainted", taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]),
        node("soft", taints=[{"key": "dedicated", "value": "db", "effect": "PreferNoSchedule"}]),
        # The daemon tolerations cover a cordoned or not-ready node.
        node(
            "cordoned", taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
        ),
    ]
    pods, _ = workload_pods(workload("DaemonSet"), nodes, "d")
    pinned = [
        p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ][0]["matchFields"][0]["values"][0]
        for p in pods
    ]
    assert pinned == ["plain", "soft", "cordoned"]


def test_a_daemonset_without_a_matching_node_warns() -> None:
    pods, warnings = workload_pods(workload("DaemonSet", template={**TEMPLATE}), [], "document 3")
    assert pods == [] and warnings[0].startswith("document 3: DaemonSet team/w")
