"""Real manifest sets, as users have them: every file of ``manifests/`` is accepted,
expanded into the pods its controllers would create, or skipped with one warning line
per object that does not affect scheduling.

The files are written from the shapes of the public examples each one names in its
first line: kubernetes/website ``content/en/examples/`` and volcano-sh/volcano
``example/``. Pod names follow the controllers: kube's StatefulSet ordinals
(``<set>-<ordinal>``), ReplicaSet and DaemonSet generated names (``<owner>-`` and
five characters of kube's ``utilrand`` alphabet), a Deployment's ReplicaSet
(``<deployment>-<pod-template-hash>``), Indexed Jobs (``<job>-<index>-``), a CronJob's
Job (``<cronjob>-<unix minutes>``), Volcano's ``<job>-<task>-<index>``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from esched.schemas.manifests import events_from_documents, load_documents
from esched.schemas.workloads import DAEMON_TOLERATIONS

CORPUS = Path(__file__).parent / "manifests"
SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]{5}"

#: file -> (pod names as regular expressions, other event types in order, warnings)
EXPECTED: dict[str, tuple[list[str], list[str], int]] = {
    "k8s-nginx-deployment.yaml": ([rf"nginx-deployment-[a-z0-9]{{6,10}}-{SUFFIX}"] * 3, [], 0),
    "k8s-frontend-replicaset.yaml": ([rf"frontend-{SUFFIX}"] * 3, [], 0),
    "k8s-web-statefulset.yaml": (["web-0", "web-1"], [], 1),
    "k8s-daemonset.yaml": (
        [rf"fluentd-elasticsearch-{SUFFIX}"] * 2,
        ["esched.node.added"] * 3,
        0,
    ),
    "k8s-job.yaml": ([rf"pi-{SUFFIX}"], [], 0),
    "k8s-indexed-job.yaml": ([rf"indexed-job-{i}-{SUFFIX}" for i in range(3)], [], 0),
    "k8s-cronjob.yaml": ([rf"hello-0-{SUFFIX}"], [], 0),
    "k8s-priorityclass.yaml": (["nginx"], ["esched.priorityclass.upserted"], 0),
    "k8s-config-objects.yaml": ([], [], 3),
    "k8s-pod-generatename.yaml": ([rf"batch-worker-{SUFFIX}"], [], 0),
    "volcano-deployment.yaml": ([rf"deploy-with-volcano-[a-z0-9]{{6,10}}-{SUFFIX}"], [], 0),
    "volcano-drf-replicaset.yaml": ([rf"nginx-{SUFFIX}"] * 8, [], 0),
    "volcano-cronjob.yaml": (
        ["volcano-cronjob-example-0-task-1-0"],
        ["esched.job.submitted", "esched.podgroup.submitted"],
        0,
    ),
    "volcano-ray-job.yaml": (
        ["ray-cluster-job-head-0", "ray-cluster-job-worker-0", "ray-cluster-job-worker-1"],
        ["esched.job.submitted", "esched.podgroup.submitted"],
        0,
    ),
    "volcano-role.yaml": ([], [], 1),
    "volcano-sharding-configmap.yaml": ([], [], 1),
    "volcano-jobflow.yaml": ([], [], 1),
    "volcano-hierarchical-queues.yaml": ([], ["esched.queue.upserted"] * 2, 0),
}


def convert(path: Path) -> tuple[list[dict], list[str]]:
    warnings: list[str] = []
    docs = load_documents(path.read_text())
    return list(
        events_from_documents(docs, id_prefix="corpus", warn=warnings.append, job_pods=True)
    ), warnings


def test_every_corpus_file_has_an_expectation() -> None:
    assert sorted(p.name for p in CORPUS.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_file_is_accepted_expanded_or_skipped_with_a_warning(name: str) -> None:
    pods, others, warned = EXPECTED[name]
    events, warnings = convert(CORPUS / name)
    got_pods = [
        e["data"]["metadata"]["name"] for e in events if e["type"] == "esched.pod.submitted"
    ]
    assert len(got_pods) == len(pods), got_pods
    for got, pattern in zip(got_pods, pods, strict=True):
        assert re.fullmatch(pattern, got), (got, pattern)
    assert len(set(got_pods)) == len(got_pods)  # distinct names
    assert [e["type"] for e in events if e["type"] != "esched.pod.submitted"] == others
    assert len(warnings) == warned, warnings
    for line in warnings:
        assert line.startswith("document ") and "skipped" in line


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_same_file_gives_the_same_events(name: str) -> None:
    first, _ = convert(CORPUS / name)
    again, _ = convert(CORPUS / name)
    strip = [{k: v for k, v in e.items() if k != "time"} for e in first]
    assert strip == [{k: v for k, v in e.items() if k != "time"} for e in again]


def test_daemon_pods_name_their_node_as_kubes_daemon_controller_does() -> None:
    # pkg/controller/daemon/util/daemonset_util.go: ReplaceDaemonSetPodNodeNameNodeAffinity
    # (required node affinity = one term, matchFields metadata.name In [node]) and
    # AddOrUpdateDaemonPodTolerations (the node-condition tolerations).
    events, _ = convert(CORPUS / "k8s-daemonset.yaml")
    pods = [e["data"] for e in events if e["type"] == "esched.pod.submitted"]
    nodes = []
    for pod in pods:
        required = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        [term] = required["nodeSelectorTerms"]
        [field] = term["matchFields"]
        assert (field["key"], field["operator"]) == ("metadata.name", "In")
        nodes += field["values"]
        keys = {(t.get("key"), t.get("effect")) for t in pod["spec"]["tolerations"]}
        assert {(t["key"], t["effect"]) for t in DAEMON_TOLERATIONS} <= keys
        assert pod["metadata"]["namespace"] == "kube-system"
    # gpu-1's taint is not tolerated: no daemon pod there.
    assert nodes == ["control-plane-1", "worker-1"]


def test_statefulset_pods_carry_their_ordinal_labels() -> None:
    events, warnings = convert(CORPUS / "k8s-web-statefulset.yaml")
    pods = [e["data"] for e in events]
    assert [p["metadata"]["labels"]["apps.kubernetes.io/pod-index"] for p in pods] == ["0", "1"]
    assert "Service nginx" in warnings[0]


def test_a_volcano_cronjob_runs_once_as_its_volcano_job() -> None:
    events, _ = convert(CORPUS / "volcano-cronjob.yaml")
    job, group, pod = (e["data"] for e in events)
    assert job["kind"] == "Job" and job["metadata"]["name"] == "volcano-cronjob-example-0"
    assert group["metadata"]["name"] == "volcano-cronjob-example-0"
    assert group["spec"]["minMember"] == 1
    assert (
        pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == group["metadata"]["name"]
    )
