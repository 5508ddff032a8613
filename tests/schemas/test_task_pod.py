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
from pathlib import Path
from typing import Any

import orjson

from esched.schemas import events as ev
from esched.schemas.manifests import (
    check_task_pod,
    load_documents,
    volcano_task_pod,
    volcano_task_pod_shared,
)
from esched.schemas.objects import decoded_json_copy
from esched.schemas.validator import InvalidEvent, validate_data
from esched.schemas.volcano_jobs import default_job

UPSTREAM = Path(__file__).parent / "volcano_examples" / "upstream"


def _examples() -> list[dict[str, Any]]:
    jobs = []
    for path in sorted(UPSTREAM.glob("*.yaml")):
        for doc in load_documents(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "Job":
                jobs.append(orjson.loads(orjson.dumps(default_job(doc))))
    return jobs


_NAMES = ["j", "job-7", "a.b", "Bad_Name", "x" * 70, "w" * 250, ""]
_VALUES = ["v", "", "bad value", "y" * 64, 3, None]


def _generated(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Jobs as decoded from the log, templates of every shape the builder meets: its own
    annotations or labels already set, generateName, a spec with or without the
    priorityClassName and schedulerName the Job sets, bad names, label values and
    quantities, refused fields, metadata, annotations or labels that are not objects."""
    out = []
    for i in range(n):
        meta: dict[str, Any] = {}
        if rng.random() < 0.5:
            meta["labels"] = {
                rng.choice(["app", "volcano.sh/job-name", "bad key!"]): rng.choice(_VALUES)
            }
        if rng.random() < 0.5:
            meta["annotations"] = {
                rng.choice(["a", "volcano.sh/task-index", "scheduling.k8s.io/group-name", "-x"]): (
                    rng.choice(_VALUES)
                )
            }
        if rng.random() < 0.2:
            meta["generateName"] = "g-"
        if rng.random() < 0.1:
            meta[rng.choice(["annotations", "labels"])] = rng.choice([None, [], "s", {}])
        if rng.random() < 0.2:
            meta = {"name": "n", "namespace": "o", **meta}
        container: dict[str, Any] = {
            "name": rng.choice(["c", "main", "Bad"]),
            "resources": {
                "requests": {"cpu": rng.choice(["1", "500m", "x", "2"]), "memory": "1Gi"}
            },
        }
        spec: dict[str, Any] = {"containers": [container]}
        if rng.random() < 0.3:
            spec["schedulerName"] = rng.choice(["default-scheduler", ""])
        if rng.random() < 0.3:
            spec["priorityClassName"] = rng.choice(["high", ""])
        if rng.random() < 0.05:
            spec["resourceClaims"] = [{"name": "gpu"}]
        template: Any = {"spec": spec}
        if meta or rng.random() < 0.2:
            template["metadata"] = meta
        if rng.random() < 0.03:
            template = rng.choice([{}, {"metadata": {}, "spec": {}}])
        job_spec: dict[str, Any] = {
            "tasks": [
                {"name": rng.choice(["w", "ps", "Bad Task"]), "replicas": 2, "template": template}
            ],
            "queue": rng.choice(["default", "q1", "bad queue", 7]),
        }
        if rng.random() < 0.5:
            job_spec["priorityClassName"] = "pc"
        if rng.random() < 0.7:
            job_spec["schedulerName"] = "volcano"
        job = {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {
                "name": rng.choice(_NAMES) or f"j{i}",
                "namespace": rng.choice(["t", "Bad"]),
            },
            "spec": job_spec,
        }
        out.append(orjson.loads(orjson.dumps(job)))
    return out


def _verdict(check: Any, *args: Any) -> tuple[str, str, str | None] | None:
    try:
        check(*args)
    except InvalidEvent as exc:
        return exc.reason, str(exc), exc.field
    return None


def test_the_shared_pod_is_the_built_pod_and_its_check_the_whole_pods() -> None:
    jobs = _examples()
    assert len(jobs) >= 15
    jobs += _generated(random.Random(16), 600)
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
    job = _examples()[0]
    pod, bare = volcano_task_pod_shared(job, job["spec"]["tasks"][0], 0)
    assert bare is not None
    own = set(pod["metadata"]["annotations"]) - set(bare["metadata"].get("annotations") or {})
    assert len(own) == 6
    assert bare["metadata"]["labels"] == pod["metadata"]["labels"]
    assert bare["spec"] is pod["spec"]
