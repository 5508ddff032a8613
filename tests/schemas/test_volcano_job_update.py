"""Job updates as Volcano's webhook judges them: the cases of ``TestValidateJobUpdate``
(``pkg/webhooks/admission/jobs/validate/admit_job_test.go`` of volcano-sh/volcano),
on its ``newJob()``: one task of 5 replicas, minAvailable 5, a PodEvicted policy."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from esched.schemas.volcano_jobs import default_job, validate_job_update


def _new_job() -> dict[str, Any]:
    return default_job(
        {
            "metadata": {"name": "valid-job", "namespace": "default"},
            "spec": {
                "minAvailable": 5,
                "queue": "default",
                "tasks": [
                    {
                        "name": "task-1",
                        "replicas": 5,
                        "template": {
                            "metadata": {"labels": {"name": "test"}},
                            "spec": {
                                "containers": [{"name": "fake-name", "image": "busybox:1.24"}]
                            },
                        },
                    }
                ],
                "policies": [{"event": "PodEvicted", "action": "RestartTask"}],
            },
        }
    )


@pytest.mark.parametrize(
    ("name", "replicas", "min_available", "add_task", "mutate_task_name", "mutate_spec", "err"),
    [
        ("scale up", 6, 5, False, False, False, None),
        (
            "invalid scale down with replicas less than minAvailable",
            4,
            5,
            False,
            False,
            False,
            "must not be greater than total replicas",
        ),
        ("scale down", 4, 3, False, False, False, None),
        ("invalid add task", 4, 5, True, False, False, "may not add or remove tasks"),
        (
            "invalid mutate task's fields other than replicas",
            5,
            5,
            False,
            True,
            False,
            "may not change fields other than",
        ),
        (
            "invalid mutate job's spec other than minAvailable",
            5,
            5,
            False,
            False,
            True,
            "may not change fields other than",
        ),
    ],
)
def test_validate_job_update_cases(
    name, replicas, min_available, add_task, mutate_task_name, mutate_spec, err
):
    old = _new_job()
    new = copy.deepcopy(old)
    new["spec"]["minAvailable"] = min_available
    task = new["spec"]["tasks"][0]
    task["replicas"] = replicas
    task["minAvailable"] = min(task["minAvailable"], replicas)
    if add_task:
        extra = copy.deepcopy(task)
        extra.update(name="task-2", replicas=5)
        new["spec"]["tasks"].append(extra)
    if mutate_task_name:
        task["name"] = "mutated-name"
    if mutate_spec:
        new["spec"]["queue"] = "mutated-queue"
    problems = validate_job_update(old, new)
    if err is None:
        assert problems == [], name
    else:
        assert problems and err in problems[0].message, name


def test_adding_a_task_is_refused_when_replicas_allow_it():
    old = _new_job()
    new = copy.deepcopy(old)
    new["spec"]["tasks"].append(dict(copy.deepcopy(new["spec"]["tasks"][0]), name="task-2"))
    assert validate_job_update(old, new)[0].message == "job updates may not add or remove tasks"


def test_task_min_available_above_replicas_is_refused():
    old = _new_job()
    new = copy.deepcopy(old)
    new["spec"]["tasks"][0]["minAvailable"] = 6
    assert "'minAvailable' must be <= 'replicas' in task: task-1" in (
        validate_job_update(old, new)[0].message
    )
