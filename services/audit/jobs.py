"""The Volcano Job checks: ``job_dependency``, ``job_retry_exceeded``, ``job_transition``."""

from __future__ import annotations

from typing import Any

from esched.core.admission import event_key
from esched.core.jobs import ATTEMPT_ANNOTATION, R_TASK, job_key_of_pod
from esched.schemas.events import JOB_UPDATED, PLACEMENT_COMMITTED, POD_SUBMITTED, implies_pods
from esched.services.audit.base import _AuditBase


class _JobChecks(_AuditBase):
    """Each job event checked against the job fold (:mod:`esched.core.jobs`), then folded."""

    def _job_event(
        self, position: int, etype: str, event: dict[str, Any], data: dict[str, Any]
    ) -> None:
        """Check one event of a Volcano Job's lifecycle against the job fold, then fold it:
        ``job_dependency`` (a pod of a task bound before the tasks it depends on
        completed), ``job_retry_exceeded`` (a pod or transition at an attempt past the
        job's ``maxRetry``), ``job_transition`` (a recorded transition the fold does
        not reproduce, or one recorded past a transition to record that has no
        record)."""
        book = self.jobs
        if etype == PLACEMENT_COMMITTED:
            for b in data.get("bindings") or ():
                pod = b.get("pod") if isinstance(b, dict) else None
                if not isinstance(pod, str) or pod not in book.pod_job:
                    continue
                job = book.pod_job[pod]
                task = job.tasks[job.pods[pod][R_TASK]]
                waiting = [
                    d
                    for d in task.depends
                    if d not in job.task_index or not job.task_index[d].complete()
                ]
                if waiting:
                    self._flag(
                        position,
                        "job_dependency",
                        f"pod {pod} of task {task.name} of job {job.key} bound before "
                        f"{', '.join(waiting)} completed",
                    )
        elif etype == POD_SUBMITTED:
            meta = data.get("metadata")
            got = job_key_of_pod(meta) if isinstance(meta, dict) else None
            owner = book.jobs.get(got[0]) if got is not None else None
            if owner is not None and isinstance(meta, dict):
                attempt = str((meta.get("annotations") or {}).get(ATTEMPT_ANNOTATION) or "0")
                if attempt.isdigit() and int(attempt) >= owner.max_retry:
                    self._flag(
                        position,
                        "job_retry_exceeded",
                        f"pod {event_key(data)} of job {owner.key} submitted at attempt "
                        f"{attempt}, maxRetry {owner.max_retry}",
                    )
        if etype != JOB_UPDATED:
            book.apply(etype, data, event.get("time"), implies_pods(event))
            return
        updated = book.jobs.get(str(data.get("job")))
        seq = data.get("seq")
        # Transitions to record that come before this record and have none yet: the
        # job controller records them in order, so a gap is a lost record.
        skipped = (
            [t.seq for t in updated.unrecorded() if t.seq < seq]
            if updated is not None and type(seq) is int
            else []
        )
        book.apply(etype, data, event.get("time"))
        if updated is None or not isinstance(seq, int):
            return
        self.checked["job_transitions"] = self.checked.get("job_transitions", 0) + 1
        if seq >= len(updated.history) or updated.history[seq].phase != data.get("phase"):
            self._flag(
                position,
                "job_transition",
                f"job {updated.key}: recorded transition {seq} to {data.get('phase')} is not "
                "what the fold of the log decides",
            )
        elif skipped:
            self._flag(
                position,
                "job_transition",
                f"job {updated.key}: transition {', '.join(map(str, skipped))} "
                f"({', '.join(updated.history[s].phase for s in skipped)}) has no record "
                f"before the record of transition {seq}",
            )
        if isinstance(data.get("attempt"), int) and data["attempt"] > updated.max_retry:
            self._flag(
                position,
                "job_retry_exceeded",
                f"job {updated.key} at attempt {data['attempt']}, maxRetry {updated.max_retry}",
            )
