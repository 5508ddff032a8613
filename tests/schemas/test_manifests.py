"""Manifests → CloudEvents: every kind, Lists, YAML/JSON/JSONL input, deterministic ids."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import orjson
import pytest

from esched.schemas.events import TYPES
from esched.schemas.manifests import events_from_documents, load_documents
from esched.schemas.objects import gang_key, pod_queue
from esched.schemas.validator import InvalidEvent, parse_event, validate_event

from .examples import NODE, POD, PODGROUP, QUEUE, event

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"

VOLCANO_JOB = {
    "apiVersion": "batch.volcano.sh/v1alpha1",
    "kind": "Job",
    "metadata": {"name": "tf-job", "namespace": "ml", "labels": {"team": "vision"}},
    "spec": {
        "minAvailable": 3,
        "queue": "research",
        "priorityClassName": "high",
        "maxRetry": 2,
        "tasks": [
            {
                "name": "ps",
                "replicas": 1,
                "template": {
                    "metadata": {"labels": {"role": "ps"}},
                    "spec": {
                        "containers": [
                            {"name": "ps", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}
                        ]
                    },
                },
            },
            {
                "name": "worker",
                "replicas": 3,
                "minAvailable": 2,
                "template": {
                    "spec": {
                        "priorityClassName": "own-class",
                        "containers": [
                            {
                                "name": "worker",
                                "resources": {
                                    "requests": {"cpu": "2", "memory": "4Gi"},
                                    "limits": {"nvidia.com/gpu": "1"},
                                },
                            }
                        ],
                    }
                },
            },
        ],
    },
}


def convert(*docs: dict, **kw: object) -> list[dict]:
    return list(events_from_documents(list(docs), **kw))  # type: ignore[arg-type]


def test_simple_kinds_map_to_types_and_validate() -> None:
    evs = convert(NODE, POD, PODGROUP, QUEUE)
    assert [e["type"] for e in evs] == [
        "esched.node.added",
        "esched.pod.submitted",
        "esched.podgroup.submitted",
        "esched.queue.upserted",
    ]
    for e, doc in zip(evs, (NODE, POD, PODGROUP, QUEUE), strict=True):
        assert e["data"] == doc
        assert e["specversion"] == "1.0" and e["source"] == "esched-publish"
        assert e["time"].endswith("Z") and len(e["id"]) <= 256
        assert e["dataschema"] == f"https://esched.dev/schemas/v1/{e['type']}.json"
        assert validate_event(e) is e
        assert parse_event(orjson.dumps(e)) == e
    assert evs[1]["subject"] == "pod/ml/trainer-0"
    assert evs[0]["subject"] == "node/gpu-node-1.example.com"


def test_ids_are_deterministic_and_content_addressed() -> None:
    a = convert(NODE, POD)
    b = convert(copy.deepcopy(NODE), copy.deepcopy(POD))
    assert [e["id"] for e in a] == [e["id"] for e in b]
    assert a[1]["id"].endswith(".pod/ml/trainer-0")
    changed = copy.deepcopy(POD)
    changed["spec"]["priority"] = 5
    assert convert(changed)[0]["id"] != a[1]["id"]
    # key order does not matter (canonical JSON)
    reordered = dict(reversed(list(NODE.items())))
    assert convert(reordered)[0]["id"] == a[0]["id"]
    assert convert(POD, id_prefix="run-7")[0]["id"] == "run-7.pod/ml/trainer-0"
    assert convert(NODE, source="//ci/x")[0]["source"] == "//ci/x"


def test_long_names_keep_ids_short() -> None:
    pod = copy.deepcopy(POD)
    pod["metadata"]["name"] = "a" * 253
    [ev] = convert(pod)
    assert len(ev["id"]) <= 256
    assert ev["id"] == convert(copy.deepcopy(pod))[0]["id"]


def test_a_volcano_job_is_published_alone_its_podgroup_and_pods_are_the_controllers() -> None:
    # Volcano's job controller creates the PodGroup and the pods (syncJob); a
    # publisher that sent them would rerun pods that already ran on a second publish.
    evs = convert(VOLCANO_JOB)
    assert [e["type"] for e in evs] == ["esched.job.submitted"]
    # The pods are still built and checked: a template esched refuses, refused here,
    # as the Job (its admission builds the task's pod too).
    job = copy.deepcopy(VOLCANO_JOB)
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["name"] = 7
    with pytest.raises(ValueError, match=r"Job tf-job.*its pod tf-job-ps-0 is refused") as info:
        convert(job)
    assert info.value.field == "data.spec.tasks[0].template.spec.containers[0].name"


def test_volcano_job_becomes_podgroup_and_pods_as_its_controller_creates_them() -> None:
    evs = convert(VOLCANO_JOB, job_pods=True)
    assert [e["type"] for e in evs] == ["esched.job.submitted", "esched.podgroup.submitted"] + [
        "esched.pod.submitted"
    ] * 4
    # The Job itself first (defaulted, for the job controller), then its PodGroup.
    job = evs[0]["data"]
    assert job["kind"] == "Job" and job["metadata"]["name"] == "tf-job"
    assert job["spec"]["schedulerName"] == "volcano"  # defaulted
    assert evs[0]["id"].endswith(".job/ml/tf-job") and evs[0]["subject"] == "job/ml/tf-job"
    evs = evs[1:]
    group = evs[0]["data"]
    assert group["metadata"]["name"] == "tf-job" and group["metadata"]["namespace"] == "ml"
    assert group["spec"]["minMember"] == 3
    assert group["spec"]["queue"] == "research"
    assert group["spec"]["priorityClassName"] == "high"
    assert group["spec"]["minTaskMember"] == {"ps": 1, "worker": 2}
    # the first 3 pods in task order: ps (1 CPU, 2Gi) + 2 workers (2 CPU, 4Gi, 1 GPU each)
    assert group["spec"]["minResources"] == {
        "cpu": "5000m",
        "memory": str(10 * 2**30),
        "nvidia.com/gpu": "2",
    }
    names = [e["data"]["metadata"]["name"] for e in evs[1:]]
    assert names == ["tf-job-ps-0", "tf-job-worker-0", "tf-job-worker-1", "tf-job-worker-2"]
    for e in evs[1:]:
        pod = e["data"]
        assert pod["metadata"]["namespace"] == "ml"
        assert gang_key(pod) == "ml/tf-job"
        assert pod_queue(pod) == "research"
    assert evs[1]["data"]["spec"]["priorityClassName"] == "high"
    assert evs[2]["data"]["spec"]["priorityClassName"] == "own-class"  # template wins
    assert evs[1]["data"]["metadata"]["labels"]["role"] == "ps"
    assert evs[3]["data"]["metadata"]["annotations"]["volcano.sh/task-index"] == "1"
    assert evs[3]["data"]["metadata"]["annotations"]["volcano.sh/job-version"] == "0"
    assert VOLCANO_JOB["spec"]["tasks"][0]["template"]["metadata"] == {"labels": {"role": "ps"}}


def test_volcano_job_min_member_defaults_to_the_tasks_min_available() -> None:
    # volcano-sh/volcano mutate_job.go patchDefaultMinAvailable: the sum of the tasks'
    # minAvailable (ps 1 + worker 2), each defaulting to the task's replicas.
    job = copy.deepcopy(VOLCANO_JOB)
    del job["spec"]["minAvailable"]
    assert convert(job, job_pods=True)[1]["data"]["spec"]["minMember"] == 3
    del job["spec"]["tasks"][1]["minAvailable"]
    assert convert(job, job_pods=True)[1]["data"]["spec"]["minMember"] == 4


def test_list_and_typed_lists_expand() -> None:
    evs = convert(
        {"apiVersion": "v1", "kind": "List", "items": [NODE, POD]},
        {"kind": "PodList", "items": [{k: v for k, v in POD.items() if k != "kind"}]},
    )
    assert [e["type"] for e in evs] == [
        "esched.node.added",
        "esched.pod.submitted",
        "esched.pod.submitted",
    ]


def test_cloudevents_pass_through_unchanged() -> None:
    ce = event("esched.pod.deleted")
    internal = event("esched.placement.committed")
    assert convert(ce, internal) == [ce, internal]


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        (
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"}},
            ["document 1", "StatefulSet", "no spec.template"],
        ),
        (
            {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {}}},
            ["document 1", "Deployment without metadata.name"],
        ),
        ({"metadata": {"name": "x"}}, ["document 1", "no 'kind'"]),
        (
            {
                "apiVersion": "example.com/v1",
                "kind": "PodGroup",
                "metadata": {"name": "g"},
                "spec": {"minMember": 1},
            },
            ["document 1", "example.com"],
        ),
        (
            {
                "apiVersion": "batch.volcano.sh/v1alpha1",
                "kind": "Job",
                "metadata": {"name": "j"},
                "spec": {"tasks": []},
            },
            ["document 1", "No task specified in job spec"],
        ),
    ],
)
def test_unconvertible_documents_name_index_and_kind(doc: dict, words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        convert(NODE, doc)
    for w in words:
        assert w in str(info.value)


def test_invalid_objects_raise_invalid_event_with_document_index() -> None:
    bad = copy.deepcopy(POD)
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    with pytest.raises(InvalidEvent) as info:
        convert(NODE, bad)
    assert info.value.reason == "quantity"
    assert info.value.field == "data.spec.containers[0].resources.requests.cpu"
    assert str(info.value).startswith("document 1 (Pod trainer-0): data.spec")
    assert convert(NODE, bad, validate=False)[1]["data"] == bad


def test_load_multi_document_yaml() -> None:
    text = """
apiVersion: v1
kind: Node
metadata:
  name: n1
  creationTimestamp: 2024-01-01T00:00:00Z
status:
  allocatable: {cpu: 4, memory: 8Gi, pods: 110}
---
---
apiVersion: v1
kind: Pod
metadata: {name: p1}
spec:
  containers: [{name: c, resources: {requests: {cpu: 0.5, memory: 1e3}}}]
"""
    docs = load_documents(text)
    assert len(docs) == 2
    assert docs[0]["metadata"]["creationTimestamp"] == "2024-01-01T00:00:00Z"  # stays a string
    assert docs[1]["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": 0.5,
        "memory": "1e3",
    }
    evs = convert(*docs)
    assert [e["type"] for e in evs] == ["esched.node.added", "esched.pod.submitted"]


def test_load_json_object_array_and_jsonl() -> None:
    assert load_documents(json.dumps(NODE)) == [NODE]
    assert load_documents(json.dumps([NODE, POD]).encode()) == [NODE, POD]
    jsonl = "\n".join(json.dumps(event(t)) for t in TYPES[:3]) + "\n\n"
    assert [d["type"] for d in load_documents(jsonl)] == list(TYPES[:3])
    assert load_documents("") == [] and load_documents("  \n") == []


@pytest.mark.parametrize(
    "text", ['{"a": 1}\n{oops}\n', "key: [unclosed", "- 1\n- 2\n", "just a string"]
)
def test_load_errors_are_value_errors(text: str) -> None:
    with pytest.raises(ValueError):
        load_documents(text)


def test_example_cluster_yaml() -> None:
    docs = load_documents((EXAMPLES / "cluster.yaml").read_text())
    evs = convert(*docs, job_pods=True)
    types = [e["type"] for e in evs]
    assert types.count("esched.node.added") == 4
    assert types.count("esched.queue.upserted") == 1
    assert types.count("esched.podgroup.submitted") == 2  # one PodGroup + the Volcano Job's
    assert types.count("esched.pod.submitted") >= 6
    gpu = next(e for e in evs if e["subject"] == "node/gpu-node-1")
    assert gpu["data"]["spec"]["taints"][0]["effect"] == "NoSchedule"
    assert len({e["id"] for e in evs}) == len(evs)
    again = convert(*load_documents((EXAMPLES / "cluster.yaml").read_text()), job_pods=True)
    assert [e["id"] for e in again] == [e["id"] for e in evs]


def test_example_events_jsonl() -> None:
    raw_lines = [ln for ln in (EXAMPLES / "events.jsonl").read_bytes().splitlines() if ln]
    evs = [parse_event(ln) for ln in raw_lines]
    types = {e["type"] for e in evs}
    assert {
        "esched.pod.succeeded",
        "esched.pod.deleted",
        "esched.node.added",
        "esched.pod.submitted",
        "esched.usage.reported",
    } <= types
    assert len({e["id"] for e in evs}) == len(evs)
    assert convert(*load_documents((EXAMPLES / "events.jsonl").read_text())) == evs


def test_yaml_sequence_of_objects_expands_like_a_json_array() -> None:
    text = (
        "- {kind: Node, metadata: {name: a}, status: {capacity: {cpu: 1}}}\n"
        "- {kind: Node, metadata: {name: b}, status: {capacity: {cpu: 2}}}\n"
    )
    assert [d["metadata"]["name"] for d in load_documents(text)] == ["a", "b"]
