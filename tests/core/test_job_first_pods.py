"""A Volcano Job's first submission implies its first pods (attempt 0 of each replica
of the tasks without ``dependsOn``: :func:`esched.schemas.manifests.volcano_first_pods`,
what Volcano's job controller creates on a Job's submission, ``syncJob`` ->
``createJobIOIfNotExist`` / ``createPod`` in ``pkg/controllers/job/job_controller_actions.go``
of volcano-sh/volcano): the cluster fold derives them on the dict path and the bytes
path alike, the job fold (:class:`esched.core.jobs.JobBook`) too; a log written when
the job controller recorded them folds to the same state."""

from __future__ import annotations

import random
from typing import Any

import orjson

from esched.core.jobs import fold_jobs
from esched.schemas import events as ev
from esched.schemas.manifests import events_from_documents, volcano_job_objects
from esched.schemas.volcano_jobs import default_job
from support.fold import EV, envelope, node
from support.job_templates import example_jobs, generated_jobs

from .test_job_podgroup import _by_bytes, _by_dict, _generated_jobs, _state_of


def _accepted_jobs() -> list[dict[str, Any]]:
    """Volcano's examples and generated Jobs that ingest accepts now (their pods
    checked), defaulted, one per key."""
    out: dict[str, dict[str, Any]] = {}
    sources = example_jobs() + generated_jobs(random.Random(7), 300) + _generated_jobs(300)
    for i, job in enumerate(sources):
        name = job["metadata"].get("name")
        if type(name) is not str or not name:
            continue
        job = dict(job, metadata=dict(job["metadata"], name=f"{name[:40]}-{i}"))
        try:
            (published,) = events_from_documents([job], source="t", id_prefix="j")
        except (ValueError, TypeError, AttributeError, KeyError):
            continue
        data = published["data"]
        out.setdefault(ev.metadata_key(data["metadata"]), data)
    return list(out.values())


def _logs(job: dict[str, Any]) -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes]]]:
    """The Job's log as the job controller wrote it with its PodGroup and first pods
    recorded (old), and as it is written now (the Job alone)."""
    old = [(1, orjson.dumps(envelope(EV.NODE_ADDED, node("n1"))))]
    for etype, obj in volcano_job_objects(job):
        old.append((len(old) + 1, orjson.dumps(envelope(etype, obj))))
    return old, old[:2]


def _without_position(st: Any) -> dict[str, Any]:
    seen = _state_of(st)
    seen["summary"].pop("position")
    return seen


def test_a_jobs_first_pods_are_pending_at_its_position_on_both_paths() -> None:
    job = default_job(
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {
                "tasks": [
                    {"name": "a", "replicas": 2, "template": {"spec": _spec("1")}},
                    {
                        "name": "b",
                        "replicas": 1,
                        "dependsOn": {"name": ["a"]},
                        "template": {"spec": _spec("2")},
                    },
                ]
            },
        }
    )
    _old, new = _logs(job)
    for st in (_by_bytes(new), _by_dict(new)):
        assert sorted(st.pending_pods()) == ["ns/j-a-0", "ns/j-a-1"]  # b waits for a
        assert st.gang_members("ns/j") == ["ns/j-a-0", "ns/j-a-1"]
    assert _state_of(_by_bytes(new)) == _state_of(_by_dict(new))


def _spec(cpu: str) -> dict[str, Any]:
    return {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}


def test_old_logs_with_the_recorded_pods_fold_to_the_same_state_on_both_paths() -> None:
    jobs = _accepted_jobs()
    assert len(jobs) > 250
    for job in jobs:
        old, new = _logs(job)
        states = [_without_position(f(rows)) for rows in (old, new) for f in (_by_bytes, _by_dict)]
        assert all(s == states[0] for s in states), job["metadata"]["name"]


def test_the_job_fold_of_an_old_log_is_the_job_fold_of_the_new_one() -> None:
    old: list[dict[str, Any]] = []
    new: list[dict[str, Any]] = []
    for j, job in enumerate(_accepted_jobs()):
        for i, (etype, obj) in enumerate(volcano_job_objects(job)):
            env = ev.envelope(etype, "t", obj, id=f"{j}.{i}", time="2030-01-01T00:00:00Z")
            old.append(env)
            if etype == ev.JOB_SUBMITTED:
                new.append(env)
    a, b = fold_jobs(old), fold_jobs(new)
    assert a.summaries() == b.summaries()
    for key, job in a.jobs.items():
        # (status, attempt, submits, deletes, epoch): the controller's next ids alike
        assert {p: r[1:6] for p, r in job.pods.items()} == {
            p: r[1:6] for p, r in b.jobs[key].pods.items()
        }
        assert job.history == b.jobs[key].history
    assert sum(len(j.pods) for j in b.jobs.values()) > 500


def test_a_podgroup_declared_before_the_job_means_no_implied_pods_in_either_fold() -> None:
    (job,) = [
        default_job(
            {
                "apiVersion": "batch.volcano.sh/v1alpha1",
                "kind": "Job",
                "metadata": {"name": "j", "namespace": "ns"},
                "spec": {"tasks": [{"name": "w", "replicas": 1, "template": {"spec": _spec("1")}}]},
            }
        )
    ]
    _job, (_, group), _pod = volcano_job_objects(job)
    rows = [
        (1, orjson.dumps(envelope(EV.NODE_ADDED, node("n1")))),
        (2, orjson.dumps(envelope(ev.PODGROUP_SUBMITTED, group))),
        (3, orjson.dumps(envelope(ev.JOB_SUBMITTED, job))),
    ]
    assert _by_bytes(rows).pending_pods() == _by_dict(rows).pending_pods() == []
    book = fold_jobs([orjson.loads(b) for _p, b in rows])
    assert book.missing(book.jobs["ns/j"])  # the controller submits it
