"""Volcano Job admission: Volcano's mutating webhook defaults and validating webhook
checks, with the cases of its own tests.

Ported from volcano-sh/volcano:

- ``pkg/webhooks/admission/jobs/validate/admit_job_test.go`` (``TestValidateJobCreate``):
  every case of its table, with the message fragment it expects. The two queue cases
  (``job-with-noQueue``, a Closed queue) are state-dependent and not judged here:
  esched judges a queue's state at the submission's log position in the dispatcher
  (``QueueClosing`` / ``QueueClosed`` rejections, tests/services/test_admission.py),
  and a queue not declared yet has Volcano's defaults (the log may carry the Queue
  after its pods).
- ``pkg/webhooks/admission/jobs/mutate/mutate_job_test.go`` (``TestCreatePatchExecution``:
  default task names ``default<i>`` and task ``maxRetry``) and the defaults of
  ``mutate_job.go`` (queue, schedulerName, maxRetry, minAvailable, plugins).
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from esched.core.manifests import state_from_events
from esched.schemas.manifests import events_from_documents, load_documents
from esched.schemas.objects import pod_queue
from esched.schemas.validator import InvalidEvent, validate_event
from esched.schemas.volcano_jobs import JobRejected, default_job, validate_job

from .examples import event


def _task(name: str | None = "task-1", replicas: int = 1, **extra: Any) -> dict[str, Any]:
    task: dict[str, Any] = {
        "replicas": replicas,
        "template": {
            "metadata": {"labels": {"name": "test"}},
            "spec": {"containers": [{"name": "fake-name", "image": "busybox:1.24"}]},
        },
        **extra,
    }
    if name is not None:
        task["name"] = name
    return task


def _job(name: str, tasks: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"minAvailable": 1, "queue": "default", **spec}
    body["tasks"] = [_task()] if tasks is None else tasks
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "test"},
        "spec": body,
    }


def _policy(event: str | None = None, action: str | None = None, **extra: Any) -> dict:
    out: dict[str, Any] = dict(extra)
    if event is not None:
        out["event"] = event
    if action is not None:
        out["action"] = action
    return out


# (case name of admit_job_test.go, job, expected message fragment; "" = admitted)
CREATE_CASES: list[tuple[str, dict[str, Any], str]] = [
    (
        "validate valid-job",
        _job("valid-job", policies=[_policy("PodEvicted", "RestartTask")]),
        "",
    ),
    (
        "duplicate-task-job",
        _job("duplicate-task-job", [_task("duplicated-task-1"), _task("duplicated-task-1")]),
        "duplicated task name duplicated-task-1",
    ),
    (
        "job-policy-duplicated",
        _job(
            "job-policy-duplicated",
            policies=[_policy("PodFailed", "AbortJob"), _policy("PodFailed", "RestartJob")],
        ),
        "duplicate",
    ),
    (
        "Min Available illegal",
        _job("job-min-illegal", minAvailable=2),
        "job 'minAvailable' should not be greater than total replicas in tasks",
    ),
    (
        "Job Plugin illegal",
        _job("job-plugin-illegal", plugins={"big_plugin": []}),
        "unable to find job plugin: big_plugin",
    ),
    (
        "job-ttl-illegal",
        _job("job-ttl-illegal", ttlSecondsAfterFinished=-1),
        "'ttlSecondsAfterFinished' cannot be less than zero",
    ),
    (
        "minAvailable-lessThanZero",
        _job("minAvailable-lessThanZero", minAvailable=-1),
        "job 'minAvailable' must be >= 0",
    ),
    (
        "maxretry-lessThanZero",
        _job("maxretry-lessThanZero", maxRetry=-1),
        "'maxRetry' cannot be less than zero.",
    ),
    ("no-task", _job("no-task", []), "No task specified in job spec"),
    (
        "replica-lessThanZero",
        _job("replica-lessThanZero", [_task(replicas=-1)]),
        "'replicas' < 0 in task: task-1;",
    ),
    (
        "nonDNS-task",
        _job("replica-lessThanZero", [_task("Task-1")]),
        "[a lowercase RFC 1123 label must consist of lower case alphanumeric characters or"
        " '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or"
        " '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')];",
    ),
    (
        "job-policy-withExitCode",
        _job("job-policy-withExitCode", policies=[_policy("PodFailed", "AbortJob", exitCode=-1)]),
        "must not specify event and exitCode simultaneously",
    ),
    (
        "policy-noEvent-noExCode",
        _job("policy-noEvent-noExCode", policies=[_policy(action="AbortJob")]),
        "either event and exitCode should be specified",
    ),
    (
        "invalid-policy-event",
        _job("invalid-policy-event", policies=[_policy("someFakeEvent", "AbortJob")]),
        "invalid policy event",
    ),
    (
        "invalid-policy-action",
        _job("invalid-policy-action", policies=[_policy("PodEvicted", "someFakeAction")]),
        "invalid policy action",
    ),
    (
        "policy-extcode-zero",
        _job("policy-extcode-zero", policies=[_policy(action="AbortJob", exitCode=0)]),
        "0 is not a valid error code",
    ),
    (
        "duplicate-exitcode",
        _job("duplicate-exitcode", policies=[_policy(exitCode=1), _policy(exitCode=1)]),
        "duplicate exitCode 1",
    ),
    (
        "job-policy-withAnyAndOtherEvent",
        _job(
            "job-policy-withExitCode",
            policies=[_policy("*", "AbortJob"), _policy("PodFailed", "RestartJob")],
        ),
        "if there's * here, no other policy should be here",
    ),
    (
        "invalid-mount-volume",
        _job(
            "invalid-mount-volume",
            policies=[_policy("*", "AbortJob")],
            volumes=[{"mountPath": ""}],
        ),
        " mountPath is required;",
    ),
    (
        "duplicate-mount-volume",
        _job(
            "duplicate-mount-volume",
            policies=[_policy("*", "AbortJob")],
            volumes=[
                {"mountPath": "/var", "volumeClaimName": "pvc1"},
                {"mountPath": "/var", "volumeClaimName": "pvc2"},
            ],
        ),
        " duplicated mountPath: /var;",
    ),
    (
        "volume without VolumeClaimName and VolumeClaim",
        _job(
            "invalid-volume",
            policies=[_policy("*", "AbortJob")],
            volumes=[{"mountPath": "/var"}, {"mountPath": "/var"}],
        ),
        " either VolumeClaim or VolumeClaimName must be specified;",
    ),
    (
        "taskpolicy-withAnyandOthrEvent",
        _job(
            "taskpolicy-withAnyandOthrEvent",
            [
                _task(
                    policies=[_policy("*", "AbortJob"), _policy("PodFailed", "RestartJob")],
                )
            ],
        ),
        "if there's * here, no other policy should be here",
    ),
    (
        "job with priviledged init container",
        _job(
            "valid-job",
            [
                _task(
                    template={
                        "spec": {
                            "initContainers": [
                                {
                                    "name": "init-fake-name",
                                    "image": "busybox:1.24",
                                    "securityContext": {"privileged": True},
                                }
                            ],
                            "containers": [{"name": "fake-name", "image": "busybox:1.24"}],
                        }
                    }
                )
            ],
        ),
        "",
    ),
    (
        "job with valid task depends on",
        _job(
            "job-with-valid-task-depends-on",
            [_task("t1", dependsOn={"name": ["t2"]}), _task("t2")],
        ),
        "",
    ),
    (
        "job with invalid task depends on",
        _job(
            "job-with-invalid-task-depends-on",
            [_task("t1", dependsOn={"name": ["t3"]}), _task("t2")],
        ),
        "job has dependencies between tasks, but doesn't form a directed acyclic graph(DAG)",
    ),
]


@pytest.mark.parametrize(
    ("job", "expected"),
    [pytest.param(job, expected, id=name) for name, job, expected in CREATE_CASES],
)
def test_job_admitted_or_refused_as_volcanos_webhook_does(job: dict, expected: str) -> None:
    problems = validate_job(default_job(job))
    text = " ".join(p.message for p in problems)
    if expected:
        assert problems, "Volcano refuses this job"
        assert expected in text
        assert all(p.field for p in problems)
    else:
        assert problems == []


def test_pod_name_too_long_refused() -> None:
    # admit_job.go validateK8sPodNameLength: <job>-<task>-<index> must be a qualified
    # name (at most 63 characters).
    problems = validate_job(default_job(_job("j" * 40, [_task("t" * 30)])))
    assert [p.field for p in problems] == ["spec.tasks[0].name"]
    assert "name part must be no more than 63 characters" in problems[0].message


def test_dependency_cycle_refused() -> None:
    job = _job(
        "cycle",
        [
            _task("a", dependsOn={"name": ["c"]}),
            _task("b", dependsOn={"name": ["a"]}),
            _task("c", dependsOn={"name": ["b"]}),
        ],
    )
    problems = validate_job(default_job(job))
    assert [p.field for p in problems] == ["spec.tasks"]
    assert "directed acyclic graph(DAG)" in problems[0].message


def test_task_min_available_above_replicas_refused() -> None:
    problems = validate_job(default_job(_job("j", [_task("w", replicas=2, minAvailable=3)])))
    assert [(p.field, p.message.strip()) for p in problems] == [
        (
            "spec.tasks[0].minAvailable",
            "'minAvailable' is greater than 'replicas' in task: w, job: j",
        )
    ]


def test_events_list_duplicates_across_policies_refused() -> None:
    # util.go getEventList: `events` and `event` of one policy are one list.
    job = _job(
        "j",
        policies=[
            {"events": ["PodEvicted", "PodFailed"], "action": "RestartJob"},
            {"event": "PodFailed", "action": "AbortJob"},
        ],
    )
    problems = validate_job(default_job(job))
    assert [p.field for p in problems] == ["spec.policies[1].event"]
    assert "duplicate event PodFailed" in problems[0].message


def test_internal_policy_events_and_actions_refused() -> None:
    # util.go: OutOfSync / CommandIssued events and SyncJob / Enqueue actions are
    # Volcano's own, not allowed in a user's policy.
    for policy in (_policy("OutOfSync", "RestartJob"), _policy("PodFailed", "SyncJob")):
        assert validate_job(default_job(_job("j", policies=[policy])))


def test_known_plugins_accepted() -> None:
    job = _job("j", plugins={"ssh": [], "svc": ["--disable-network-policy=true"], "env": []})
    assert validate_job(default_job(job)) == []


# --------------------------------------------------------------------- mutating webhook


def test_defaults_of_the_mutating_webhook() -> None:
    # mutate_job_test.go TestCreatePatchExecution: tasks without a name are
    # default0, default1 and get maxRetry 3; mutate_job.go: queue, schedulerName,
    # maxRetry, each task's minAvailable (its replicas), the job's (their sum).
    job = _job("path-task-name", [_task(None), _task(None, replicas=3)])
    del job["spec"]["queue"], job["spec"]["minAvailable"]
    out = default_job(job)
    spec = out["spec"]
    assert [t["name"] for t in spec["tasks"]] == ["default0", "default1"]
    assert [t["maxRetry"] for t in spec["tasks"]] == [3, 3]
    assert [t["minAvailable"] for t in spec["tasks"]] == [1, 3]
    assert spec["queue"] == "default"
    assert spec["schedulerName"] == "volcano"
    assert spec["maxRetry"] == 3
    assert spec["minAvailable"] == 4
    assert "minAvailable" not in job["spec"]  # the input is not changed


def test_defaults_share_no_object_with_the_input() -> None:
    # The copy is deep: a task's template changed in the defaulted Job (as the job
    # controller builds pods from it) leaves the submitted Job as it was; a value of
    # no JSON type (a YAML timestamp) is copied too.
    stamp = datetime(2026, 1, 5, tzinfo=UTC)
    job = _job("j", [_task("w")])
    job["metadata"]["annotations"] = {"when": stamp}
    before = copy.deepcopy(job)
    out = default_job(job)
    out["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["image"] = "changed"
    out["metadata"]["annotations"]["when"] = None
    assert job == before
    assert default_job(job)["metadata"]["annotations"]["when"] == stamp


def test_defaults_keep_what_the_job_sets() -> None:
    job = _job("j", [_task("w", replicas=4, minAvailable=2)], minAvailable=3, maxRetry=5)
    job["spec"]["schedulerName"] = "other"
    spec = default_job(job)["spec"]
    assert (spec["minAvailable"], spec["maxRetry"], spec["schedulerName"]) == (3, 5, "other")
    assert spec["tasks"][0]["minAvailable"] == 2


def test_default_min_available_is_the_sum_of_task_min_available() -> None:
    # The case: a job without minAvailable is not "all replicas".
    job = _job("j", [_task("m", 1), _task("w", 4, minAvailable=2)])
    del job["spec"]["minAvailable"]
    assert default_job(job)["spec"]["minAvailable"] == 3


def test_framework_plugins_bring_svc_and_ssh() -> None:
    # mutate_job.go patchDefaultPlugins: tensorflow and mpi need svc; mpi needs ssh.
    assert default_job(_job("j", plugins={"tensorflow": []}))["spec"]["plugins"] == {
        "tensorflow": [],
        "svc": [],
    }
    assert set(default_job(_job("j", plugins={"mpi": []}))["spec"]["plugins"]) == {
        "mpi",
        "svc",
        "ssh",
    }


# ------------------------------------------------------------ esched publish (conversion)


def _convert(*docs: dict) -> list[dict]:
    return list(events_from_documents(list(docs), id_prefix="t", job_pods=True))


def test_refused_job_is_not_converted_and_names_field_and_reason() -> None:
    job = _job("j", [_task("a"), _task("a")])
    with pytest.raises(JobRejected) as info:
        _convert(job)
    assert info.value.field == "spec.tasks[1].name"
    assert "document 0" in str(info.value)
    assert "duplicated task name a" in str(info.value)
    assert isinstance(info.value, ValueError)  # esched publish: exit 3, nothing sent


def test_accepted_job_becomes_podgroup_with_volcanos_defaults() -> None:
    job = _job("j", [_task("m", 1), _task("w", 4, minAvailable=2)])
    del job["spec"]["minAvailable"], job["spec"]["queue"]
    evs = _convert(job)
    assert evs[0]["type"] == "esched.job.submitted"
    assert evs[0]["data"]["spec"]["minAvailable"] == 3  # carried defaulted
    group = evs[1]["data"]["spec"]
    assert group["minMember"] == 3
    assert group["minTaskMember"] == {"m": 1, "w": 2}
    assert group["queue"] == "default"
    pods = [e["data"] for e in evs[2:]]
    assert len(pods) == 5
    assert all(pod_queue(p) == "default" for p in pods)
    assert all(p["spec"]["schedulerName"] == "volcano" for p in pods)


def test_job_whose_tasks_need_no_member_gives_podgroup_min_member_zero() -> None:
    # Volcano's PodGroup CRD allows minMember 0 (minimum 0); a job whose tasks all
    # have minAvailable 0 gets it from the mutating webhook.
    job = _job("j", [_task("w", 2, minAvailable=0)])
    del job["spec"]["minAvailable"]
    assert _convert(job)[1]["data"]["spec"]["minMember"] == 0


def test_job_objects_not_changed_by_conversion() -> None:
    job = _job("j")
    before = copy.deepcopy(job)
    _convert(job)
    assert job == before


# ------------------------------------------------------------------- pod queue keys


@pytest.mark.parametrize(
    ("where", "key"),
    [
        ("annotations", "volcano.sh/queue-name"),
        ("annotations", "scheduling.volcano.sh/queue-name"),
        ("labels", "volcano.sh/queue-name"),
        ("labels", "scheduling.volcano.sh/queue-name"),
    ],
)
def test_both_volcano_queue_keys_name_a_pods_queue(where: str, key: str) -> None:
    # volcano.sh/queue-name: what Volcano's job controller sets on a Job's pods;
    # scheduling.volcano.sh/queue-name: Volcano's QueueNameAnnotationKey, read by its
    # PodGroup controller (pkg/controllers/podgroup) and used in example/ manifests.
    pod = {"metadata": {"name": "p", where: {key: "research"}}, "spec": {}}
    assert pod_queue(pod) == "research"


def test_an_annotation_wins_over_a_label_and_default_without_either() -> None:
    pod = {
        "metadata": {
            "name": "p",
            "annotations": {"scheduling.volcano.sh/queue-name": "a"},
            "labels": {"volcano.sh/queue-name": "b"},
        }
    }
    assert pod_queue(pod) == "a"
    assert pod_queue({"metadata": {"name": "p", "labels": {"app": "x"}}}) == "default"


def test_volcano_example_deployment_pods_land_in_their_queue() -> None:
    # tests/schemas/manifests/volcano-deployment.yaml (volcano-sh/volcano
    # example/deployment/deployment.yaml) names queue `test` with the
    # scheduling.volcano.sh key: the fold puts its pod there, not in `default`.
    path = Path(__file__).parent / "manifests" / "volcano-deployment.yaml"
    evs = list(
        events_from_documents(load_documents(path.read_text()), id_prefix="t", job_pods=True)
    )
    st = state_from_events(evs)
    (pod_event,) = [e for e in evs if e["type"] == "esched.pod.submitted"]
    meta = pod_event["data"]["metadata"]
    record = st.pod(f"{meta.get('namespace', 'default')}/{meta['name']}")
    assert record is not None and record["queue"] == "test"


# ------------------------------------------------ Volcano's examples and the seed's


EXAMPLES = Path(__file__).parent / "volcano_examples"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("duplicatedPolicyEvent-webhook-deny.yaml", "duplicate event PodFailed"),
        ("duplicatedTaskName-webhook-deny.yaml", "duplicated task name task-1"),
        (
            "minAvailable-webhook-deny.yaml",
            "job 'minAvailable' should not be greater than total replicas in tasks",
        ),
    ],
)
def test_volcanos_webhook_deny_examples_refused(name: str, expected: str) -> None:
    # volcano-sh/volcano example/invalid_jobs/*: "this job will be rejected".
    with pytest.raises(JobRejected) as info:
        _convert(*load_documents((EXAMPLES / name).read_text()))
    assert expected in str(info.value)


def test_volcanos_task_dependency_example_accepted() -> None:
    # volcano-sh/volcano example/task-start-dependency/job.yaml: a chain is a DAG.
    evs = _convert(*load_documents((EXAMPLES / "task-start-dependency-job.yaml").read_text()))
    assert evs[1]["data"]["spec"]["minMember"] == 1
    # The Job, its PodGroup and the pods of the tasks without dependsOn: the job
    # controller submits the others once the tasks they depend on completed.
    job = evs[0]["data"]
    first = [t for t in job["spec"]["tasks"] if not t.get("dependsOn")]
    assert len(evs) == 2 + sum(t["replicas"] for t in first)
    assert len(evs) < 2 + 11


def test_seed_examples_accepted() -> None:
    # The spec seed's Job examples: job- and task-level policies, PodPending with a
    # timeout, RestartTask, the ssh/env/svc plugins.
    seed = _job(
        "distributed-training",
        [
            _task("ps", 1, policies=[_policy("TaskCompleted", "CompleteJob")]),
            _task("worker", 4),
        ],
        minAvailable=3,
        minSuccess=2,
        maxRetry=5,
        ttlSecondsAfterFinished=3600,
        plugins={"ssh": [], "env": [], "svc": []},
        policies=[_policy("PodEvicted", "RestartJob")],
    )
    retry = _job(
        "task-retry-example",
        [
            _task("master", 1, policies=[_policy("PodFailed", "RestartJob")]),
            _task("worker", 3, policies=[_policy("PodFailed", "RestartTask")]),
        ],
        minAvailable=3,
        maxRetry=3,
    )
    timeout = _job(
        "timeout-retry-example",
        [_task("t", 3)],
        minAvailable=3,
        policies=[_policy("PodPending", "AbortJob", timeout="1h")],
    )
    for job in (seed, retry, timeout):
        assert validate_job(default_job(job)) == []


def test_a_job_submitted_event_with_a_dependency_cycle_is_refused_at_ingest() -> None:
    # admit_job.go (topoSort): "job has dependencies between tasks, but doesn't form a
    # directed acyclic graph(DAG)". A Job sent as a CloudEvent, not through esched
    # publish, meets the same webhook check in the validator (dead-lettered as schema).
    from esched.schemas.events import JOB_SUBMITTED, envelope
    from esched.schemas.validator import InvalidEvent, validate_event

    cycle = _job(
        "dag",
        [
            _task("a", dependsOn={"name": ["b"]}),
            _task("b", dependsOn={"name": ["a"]}),
        ],
    )
    with pytest.raises(InvalidEvent) as info:
        validate_event(envelope(JOB_SUBMITTED, "test", cycle, id="j1"))
    assert info.value.reason == "schema"
    assert "doesn't form a directed acyclic graph(DAG)" in info.value.message
    assert info.value.field == "data.spec.tasks"
    fine = _job("dag", [_task("a"), _task("b", dependsOn={"name": ["a"]})])
    assert validate_event(envelope(JOB_SUBMITTED, "test", fine, id="j2"))["data"] == fine


@pytest.mark.parametrize(
    ("change", "reason", "field"),
    [
        # DRA claims: Volcano's webhook lets them through, esched's pod schema refuses.
        (
            lambda t: t["template"]["spec"].update(resourceClaims=[{"name": "gpu"}]),
            "unsupported",
            "data.spec.tasks[1].template.spec.resourceClaims",
        ),
        # A quantity Kubernetes does not parse.
        (
            lambda t: t["template"]["spec"]["containers"][0].update(
                resources={"requests": {"cpu": "1x"}}
            ),
            "quantity",
            "data.spec.tasks[1].template.spec.containers[0].resources.requests.cpu",
        ),
        # No containers: the pod schema wants one.
        (
            lambda t: t["template"]["spec"].update(containers=[]),
            "schema",
            "data.spec.tasks[1].template.spec.containers",
        ),
    ],
)
def test_a_job_whose_template_makes_a_pod_esched_refuses_is_refused_at_admission(
    change: Any, reason: str, field: str
) -> None:
    # An accepted Job makes only pods the log accepts: the task's pod (its last, the
    # longest name) is built and checked as the job controller's are, at the Job's
    # admission, a task released later (dependsOn) too; the reason is the pod's and
    # the field is under the task's template.
    from esched.schemas.events import JOB_SUBMITTED, envelope
    from esched.schemas.validator import InvalidEvent, validate_event

    job = _job("bad", [_task("a"), _task("b", replicas=3, dependsOn={"name": ["a"]})])
    assert validate_event(envelope(JOB_SUBMITTED, "test", job, id="ok"))["data"] == job
    change(job["spec"]["tasks"][1])
    with pytest.raises(InvalidEvent) as info:
        validate_event(envelope(JOB_SUBMITTED, "test", job, id="j"))
    assert (info.value.reason, info.value.field) == (reason, field)
    assert info.value.message.startswith("task 'b': its pod bad-b-2 is refused: ")
    # A task of no replicas makes no pod: nothing to refuse.
    job["spec"]["tasks"][1]["replicas"] = 0
    job["spec"]["tasks"][1].pop("dependsOn")
    job["spec"]["tasks"][1]["minAvailable"] = 0
    assert validate_event(envelope(JOB_SUBMITTED, "test", job, id="none"))


@pytest.mark.parametrize("copier", ["json_copy", "decoded_json_copy"])
def test_task_pods_are_built_from_a_copy_of_the_template_and_podgroups_from_its_requests(
    copier: str,
) -> None:
    """The job controller builds every pod from its task's template: the template (and
    the Job holding it) is never changed, two pods share no object, and the PodGroup's
    minResources are the template's requests times the members (memoized per
    template), as for a template never seen before; the same pods whichever copy
    (the controller's: an orjson round trip of the Job it decoded)."""
    from esched.schemas import objects
    from esched.schemas.manifests import volcano_podgroup, volcano_task_pod

    copy_ = getattr(objects, copier)

    template = {
        "metadata": {"labels": {"app": "w"}, "annotations": {"a": "b"}},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}],
            "tolerations": [{"key": "k", "operator": "Exists"}],
        },
    }
    job = default_job(
        {
            "metadata": {"name": "j", "namespace": "t"},
            "spec": {"tasks": [{"name": "w", "replicas": 2, "template": template}]},
        }
    )
    before = copy.deepcopy(job)
    task = job["spec"]["tasks"][0]
    first = volcano_task_pod(job, task, 0, copy=copy_)
    second = volcano_task_pod(job, task, 1, attempt=1, copy=copy_)
    assert (first, second) == (volcano_task_pod(job, task, 0), volcano_task_pod(job, task, 1, 1))
    assert job == before
    assert first["metadata"]["labels"] is not second["metadata"]["labels"]
    assert first["spec"]["containers"][0] is not second["spec"]["containers"][0]
    assert first["spec"] == second["spec"] == template["spec"] | {"schedulerName": "volcano"}
    assert volcano_podgroup(job)["spec"]["minResources"] == {"cpu": "1000m"}
    assert volcano_podgroup(copy.deepcopy(job)) == volcano_podgroup(job)
    assert job == before


def test_decoded_json_copy_copies_what_orjson_decoded_and_falls_back_for_the_rest() -> None:
    """An orjson round trip: equal, nothing shared; what orjson cannot encode (a
    non-string key, an integer past 64 bits) is copied by json_copy instead."""
    import orjson

    from esched.schemas.objects import decoded_json_copy

    value = orjson.loads(b'{"a":[{"b":1.5,"c":null,"d":true}],"e":"f","g":18446744073709551615}')
    got = decoded_json_copy(value)
    assert got == value and got["a"] is not value["a"] and got["a"][0] is not value["a"][0]
    odd = {1: [2**70], "k": {"x": 1}}
    copied = decoded_json_copy(odd)
    assert copied == odd and copied["k"] is not odd["k"]


_EXAMPLES = Path(__file__).parent / "volcano_examples" / "upstream"


def _shapes(seed: int, n: int) -> list[Any]:
    """Jobs with defaults to apply and fields of every type the defaults meet."""
    import random

    rng = random.Random(seed)
    out: list[Any] = []
    for i in range(n):
        tasks: list[Any] = []
        for k in range(rng.randint(0, 3)):
            task: dict[str, Any] = {"replicas": rng.choice([0, 1, 3, None, "2"])}
            if rng.random() < 0.5:
                task["name"] = rng.choice(["", "w", "Bad Name", f"t{k}"])
            for field in ("minAvailable", "maxRetry"):
                if rng.random() < 0.4:
                    task[field] = rng.choice([0, 1, None, True, "1"])
            if rng.random() < 0.3:
                task["dependsOn"] = {"name": [f"t{rng.randrange(3)}"]}
            task["template"] = {"spec": {"containers": [{"name": "c"}]}}
            tasks.append(task if rng.random() < 0.95 else rng.choice([None, "t", 3]))
        spec: dict[str, Any] = {"tasks": tasks if rng.random() < 0.95 else "tasks"}
        for field, values in (
            ("queue", ["", "q", None]),
            ("schedulerName", ["", "volcano", None]),
            ("maxRetry", [0, 2, None]),
            ("minAvailable", [0, 1, 5, None, "x"]),
            ("plugins", [{"tensorflow": []}, {"mpi": ["--port=1"]}, {"svc": []}, "p", None]),
        ):
            if rng.random() < 0.5:
                spec[field] = rng.choice(values)
        job: Any = {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": f"j{i}", "namespace": "ns"},
            "spec": spec if rng.random() < 0.95 else rng.choice([None, [], "s"]),
        }
        out.append(job)
    return out


def test_a_job_defaulted_on_shared_objects_is_the_copy_defaulted_and_leaves_the_job() -> None:
    jobs = [
        doc
        for path in sorted(_EXAMPLES.glob("*.yaml"))
        for doc in load_documents(path.read_text())
        if isinstance(doc, dict) and doc.get("kind") == "Job"
    ]
    assert jobs
    for job in jobs + _shapes(3, 600):
        before = copy.deepcopy(job)
        shared = default_job(job, shared=True)
        assert shared == default_job(job)
        assert _problems(shared) == _problems(default_job(job))
        assert job == before


def test_a_job_defaulted_on_shared_objects_copies_only_what_a_default_changes() -> None:
    """With ``shared``, a Job no default changes is itself the defaulted Job (ingest's
    check reads it, copies nothing), and of one whose task misses a default only that
    task (and the Job, its spec and tasks list holding it) is new."""
    job = default_job(
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {
                "tasks": [
                    {"name": "a", "replicas": 1, "template": {"spec": {"containers": []}}},
                    {"name": "b", "replicas": 2, "template": {"spec": {"containers": []}}},
                ]
            },
        }
    )
    assert default_job(job, shared=True) is job
    partly = copy.deepcopy(job)
    del partly["spec"]["tasks"][1]["maxRetry"]
    before = copy.deepcopy(partly)
    out = default_job(partly, shared=True)
    assert out == default_job(partly) == job and partly == before
    assert out is not partly and out["spec"] is not partly["spec"]
    assert out["spec"]["tasks"][0] is partly["spec"]["tasks"][0]
    assert out["spec"]["tasks"][1] is not partly["spec"]["tasks"][1]


def _problems(job: Any) -> Any:
    try:
        return [(p.field, p.message) for p in validate_job(job)]
    except Exception as exc:  # a shape the schema refuses before: the same error
        return repr(exc)


@pytest.mark.parametrize(
    ("part", "value", "field"),
    [
        ("spec", 1.0, "template.spec"),
        ("metadata", 3, "template.metadata"),
        ("metadata", {"annotations": 5}, "template.metadata.annotations"),
        ("metadata", {"labels": []}, "template.metadata.labels"),
        ("metadata", {"labels": {"app": 1}}, "template.metadata.labels.app"),
    ],
)
def test_a_template_that_is_no_pod_template_is_refused_with_its_field(
    part: str, value: Any, field: str
) -> None:
    # A PodTemplateSpec's metadata and spec are objects, labels and annotations maps of
    # strings (Kubernetes' ObjectMeta; Volcano's CRD validates the Job against it).
    # Found by test_accepted_folds' fuzzing: the pod builder crashed on such a template
    # (AttributeError, TypeError) where validation must answer with a reason.
    job = _job("bad-template")
    job["spec"]["tasks"][0]["template"][part] = value
    env = event("esched.job.submitted", data=job)
    with pytest.raises(InvalidEvent) as refused:
        validate_event(env)
    assert refused.value.field == f"data.spec.tasks[0].{field}"
