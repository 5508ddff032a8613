"""The job controller's pods (:func:`esched.schemas.manifests.volcano_task_pod_shared`,
checked by :func:`~esched.schemas.manifests.check_task_pod`) against the builder
and the check they replace: for Volcano's example Jobs and generated ones, the same
bytes as :func:`~esched.schemas.manifests.volcano_task_pod` (its envelope too), the
Job unchanged, and the same verdict (the same error) as ``validate_data`` of the
whole pod: the pod without the builder's own annotations is valid exactly when the
pod is."""

from __future__ import annotations

import copy
import random
from typing import Any

import orjson

from esched.schemas import events as ev
from esched.schemas.manifests import (
    check_task_pod,
    volcano_task_pod,
    volcano_task_pod_bare,
    volcano_task_pod_shared,
)
from esched.schemas.objects import decoded_json_copy
from esched.schemas.validator import InvalidEvent, validate_data
from support.job_templates import example_jobs, generated_jobs


def _verdict(check: Any, *args: Any) -> tuple[str, str, str | None] | None:
    try:
        check(*args)
    except InvalidEvent as exc:
        return exc.reason, str(exc), exc.field
    return None


def test_the_shared_pod_is_the_built_pod_and_its_check_the_whole_pods() -> None:
    jobs = example_jobs()
    assert len(jobs) >= 15
    jobs += generated_jobs(random.Random(16), 600)
    verdicts: set[bool] = set()
    checked_bare = 0
    for job in jobs:
        before = copy.deepcopy(job)
        for task in job["spec"]["tasks"]:
            for index, attempt in ((0, 0), (1, 3), (12, 0)):
                try:
                    built = volcano_task_pod(job, task, index, attempt, copy=decoded_json_copy)
                except (AttributeError, TypeError):
                    # A template the builder cannot build from: the same error either way.
                    try:
                        volcano_task_pod_shared(job, task, index, attempt)
                    except (AttributeError, TypeError):
                        continue
                    raise AssertionError(  # noqa: B904
                        "the shared builder built what the builder cannot"
                    )
                pod, bare = volcano_task_pod_shared(job, task, index, attempt)
                assert orjson.dumps(pod) == orjson.dumps(built)
                env = ev.envelope(ev.POD_SUBMITTED, "esched/jobs", pod, id="i", time="t")
                old = ev.envelope(ev.POD_SUBMITTED, "esched/jobs", built, id="i", time="t")
                assert orjson.dumps(env) == orjson.dumps(old)
                whole = _verdict(validate_data, ev.POD_SUBMITTED, built)
                assert _verdict(check_task_pod, pod, bare) == whole
                verdicts.add(whole is None)
                checked_bare += bare is not None
        assert job == before
    assert verdicts == {True, False}  # both valid and refused pods met
    assert checked_bare > 1000


def test_the_builders_own_annotations_are_left_out_of_what_is_checked() -> None:
    """The part checked by the schema is the pod without the six annotations the
    builder sets (its labels stay: their values are the Job's name and queue)."""
    job = example_jobs()[0]
    pod, bare = volcano_task_pod_shared(job, job["spec"]["tasks"][0], 0)
    assert bare is not None
    own = set(pod["metadata"]["annotations"]) - set(bare["metadata"].get("annotations") or {})
    assert len(own) == 6
    assert bare["metadata"]["labels"] == pod["metadata"]["labels"]
    assert bare["spec"] is pod["spec"]


def test_the_bare_pod_made_alone_is_the_shared_builders() -> None:
    """Ingest's check of a Job's pods reads ``bare`` made without the pod
    (:func:`volcano_task_pod_bare`): wherever it makes one, the shared builder's
    ``bare`` is the same JSON, at every attempt; it makes one for the templates
    without metadata."""
    jobs = example_jobs() + generated_jobs(random.Random(17), 600)
    made = 0
    for job in jobs:
        before = copy.deepcopy(job)
        for task in job["spec"]["tasks"]:
            for index, attempt in ((0, 0), (1, 3), (12, 0)):
                try:
                    _pod, bare = volcano_task_pod_shared(job, task, index, attempt)
                except (AttributeError, TypeError):
                    continue
                alone = volcano_task_pod_bare(job, task, index)
                if alone is None:
                    assert bare is None or (task.get("template") or {}).get("metadata")
                    continue
                made += 1
                assert bare is not None
                assert orjson.dumps(alone) == orjson.dumps(bare)
        assert job == before
    assert made > 300
