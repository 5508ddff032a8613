"""``esched audit`` flags a Volcano Job lifecycle the fold does not allow: a pod of a
task bound before the tasks it depends on completed (``job_dependency``), a pod
submitted at an attempt past ``maxRetry`` (``job_retry_exceeded``), a recorded
transition the fold does not reproduce or a lost record of one (``job_transition``)."""

from __future__ import annotations

from typing import Any

from esched.schemas import events as ev
from esched.schemas.manifests import volcano_job_objects, volcano_task_pod
from esched.services.audit import audit_events

_TEMPLATE = {"spec": {"containers": [{"name": "c", "image": "x"}]}}


def _log(*pairs: tuple[str, dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    return [
        (i + 1, ev.envelope(t, "test", d, id=f"e{i}", time="2026-01-01T00:00:00Z"))
        for i, (t, d) in enumerate(pairs)
    ]


def _node() -> tuple[str, dict[str, Any]]:
    return ev.NODE_ADDED, {
        "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}},
    }


def _kinds(report: dict[str, Any]) -> set[str]:
    return {v["kind"] for v in report["violations"]}


def test_a_dependant_bound_before_its_dependency_completed_is_flagged():
    job = {
        "metadata": {"name": "pipe", "namespace": "t"},
        "spec": {
            "minAvailable": 1,
            "tasks": [
                {"name": "prep", "replicas": 1, "template": _TEMPLATE},
                {
                    "name": "train",
                    "replicas": 1,
                    "dependsOn": {"name": ["prep"]},
                    "template": _TEMPLATE,
                },
            ],
        },
    }
    objs = volcano_job_objects(job)
    defaulted = objs[0][1]
    early = volcano_task_pod(defaulted, defaulted["spec"]["tasks"][1], 0)
    bind = {"proposal": "p1", "bindings": [{"pod": "t/pipe-train-0", "node": "n1"}]}
    report = audit_events(
        _log(_node(), *objs, (ev.POD_SUBMITTED, early), (ev.PLACEMENT_COMMITTED, bind))
    )
    assert "job_dependency" in _kinds(report)


def test_a_pod_submitted_past_max_retry_and_a_forged_transition_are_flagged():
    job = {
        "metadata": {"name": "r", "namespace": "t"},
        "spec": {"maxRetry": 2, "tasks": [{"name": "w", "replicas": 1, "template": _TEMPLATE}]},
    }
    objs = volcano_job_objects(job)
    defaulted = objs[0][1]
    late = volcano_task_pod(defaulted, defaulted["spec"]["tasks"][0], 0, attempt=2)
    forged = {
        "job": "t/r",
        "seq": 1,
        "phase": "Completed",
        "previous": "Pending",
        "attempt": 0,
        "reason": "Succeeded",
        "action": "",
    }
    report = audit_events(_log(_node(), *objs, (ev.POD_SUBMITTED, late), (ev.JOB_UPDATED, forged)))
    assert {"job_retry_exceeded", "job_transition"} <= _kinds(report)


def _update(seq: int, phase: str, previous: str, reason: str) -> tuple[str, dict[str, Any]]:
    data = {"job": "t/one", "seq": seq, "phase": phase, "previous": previous, "attempt": 0}
    return ev.JOB_UPDATED, data | {"reason": reason, "action": ""}


def _one_pod_job() -> list[tuple[str, dict[str, Any]]]:
    """A one-pod Job's events up to its placement: the Job, its PodGroup, its pod."""
    job = {
        "metadata": {"name": "one", "namespace": "t"},
        "spec": {"tasks": [{"name": "w", "replicas": 1, "template": _TEMPLATE}]},
    }
    return volcano_job_objects(job)


_BIND = ev.PLACEMENT_COMMITTED, {"proposal": "p1", "bindings": [{"pod": "t/one-w-0", "node": "n1"}]}


def test_a_log_that_recorded_a_jobs_pending_and_running_audits_clean():
    """The records an older controller wrote of a job's start (seq 0 Pending, seq
    1 Running) are still checked against the fold, and hold."""
    pending = _update(0, "Pending", "", "Submitted")
    running = _update(1, "Running", "Pending", "MinAvailable")
    report = audit_events(_log(_node(), *_one_pod_job(), pending, _BIND, running))
    assert report["ok"], report["violations"]
    assert report["checked"]["job_transitions"] == 2


def test_a_forged_record_of_a_jobs_start_is_flagged():
    """A record whose phase is not the fold's at its seq is flagged, an implied
    transition's seq included: the job ran (seq 1 Running), the record says Failed."""
    forged = _update(1, "Failed", "Pending", "Failed")
    report = audit_events(_log(_node(), *_one_pod_job(), _BIND, forged))
    assert [v["kind"] for v in report["violations"]] == ["job_transition"]


def _restarted_job_log() -> tuple[list[tuple[str, dict[str, Any]]], list[dict[str, Any]]]:
    """A one-pod Job with PodFailed -> RestartJob whose pod ran and failed, and its pod
    withdrawn: the events, and the records the controller writes of the two
    transitions to record (seq 2 Restarting, seq 3 Pending)."""
    job = {
        "metadata": {"name": "one", "namespace": "t"},
        "spec": {
            "maxRetry": 3,
            "policies": [{"event": "PodFailed", "action": "RestartJob"}],
            "tasks": [{"name": "w", "replicas": 1, "template": _TEMPLATE}],
        },
    }
    failed = ev.POD_FAILED, {"metadata": {"namespace": "t", "name": "one-w-0"}}
    deleted = ev.POD_DELETED, {"metadata": {"namespace": "t", "name": "one-w-0"}}
    restarting = _update(2, "Restarting", "Running", "PodFailed")[1] | {"attempt": 1}
    pending = _update(3, "Pending", "Restarting", "Restarted")[1] | {"attempt": 1}
    return [_node(), *volcano_job_objects(job), _BIND, failed, deleted], [restarting, pending]


def test_a_restarts_two_records_in_order_audit_clean():
    events, (restarting, pending) = _restarted_job_log()
    report = audit_events(
        _log(*events[:-1], (ev.JOB_UPDATED, restarting), events[-1], (ev.JOB_UPDATED, pending))
    )
    assert report["ok"], report["violations"]
    assert report["checked"]["job_transitions"] == 2


def test_a_lost_record_of_a_transition_is_flagged_at_the_record_after_it():
    """The controller records a job's transitions in order: a record of seq 3 with
    no record of seq 2 (Restarting) before it means seq 2's record was lost."""
    events, (_restarting, pending) = _restarted_job_log()
    report = audit_events(_log(*events, (ev.JOB_UPDATED, pending)))
    assert [v["kind"] for v in report["violations"]] == ["job_transition"]
    assert "transition 2 (Restarting) has no record" in report["violations"][0]["detail"]
