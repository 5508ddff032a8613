"""The checks after the schema, per event type."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from esched.schemas.validator.errors import InvalidEvent
from esched.schemas.validator.pods import check_pod, check_pod_update
from esched.schemas.validator.quantities import (
    check_node,
    check_podgroup,
    check_queue,
    check_usage,
)
from esched.schemas.volcano_jobs import JobRejected, default_job, validate_job

__all__ = ["QUANTITY_CHECKS", "check_quantities"]


def _check_job(data: dict[str, Any]) -> None:
    """A Volcano Job its validating webhook refuses (after the mutating webhook's
    defaults) is refused with Volcano's message and the field at fault, a
    ``dependsOn`` cycle included. The defaults go on a shallow copy of what they
    change (``shared``): the check and the Job's pods only read the defaulted Job."""
    job = default_job(data, shared=True)
    problems = validate_job(job)
    if problems:
        meta = data.get("metadata") or {}
        exc = JobRejected(f"{meta.get('namespace') or 'default'}/{meta.get('name')}", problems)
        raise InvalidEvent("schema", str(exc), f"data.{problems[0].field}")
    _check_job_pods(job)


#: (check_task_pod, volcano_task_pod_shared, volcano_task_pod_bare, task_pod_bare_valid),
#: imported on first use: manifests imports the validator.
_TASK_POD: tuple[Any, Any, Any, Any] | None = None


def _task_pod_builders() -> tuple[Any, Any, Any, Any]:
    global _TASK_POD
    from esched.schemas.manifests import (
        check_task_pod,
        task_pod_bare_valid,
        volcano_task_pod_bare,
        volcano_task_pod_shared,
    )

    _TASK_POD = (
        check_task_pod,
        volcano_task_pod_shared,
        volcano_task_pod_bare,
        task_pod_bare_valid,
    )
    return _TASK_POD


def _check_job_pods(job: dict[str, Any]) -> None:
    """A Job whose task template makes a pod esched's pod schema refuses (one Volcano's
    webhook lets through: a DRA ``resourceClaims``, a quantity esched does not parse)
    is refused too, with the pod's reason and its field under the task's template, so
    an accepted Job makes only pods the log accepts. The pods of a task differ only in
    their index (the name's end, the ``task-index`` annotation) and attempt (an
    annotation's value): its last pod, the longest name, stands for them all."""
    check_task_pod, volcano_task_pod_shared, volcano_task_pod_bare, bare_valid = (
        _TASK_POD or _task_pod_builders()
    )
    for t, task in enumerate(job["spec"]["tasks"]):
        replicas = task.get("replicas") or 0
        if type(replicas) is not int or replicas <= 0:
            continue
        # The pod without the builder's annotations is what check_task_pod checks; the
        # pod is built only when that is refused (its check gives the error).
        bare = volcano_task_pod_bare(job, task, replicas - 1)
        if bare is not None and bare_valid(bare):
            continue
        pod, bare = volcano_task_pod_shared(job, task, replicas - 1)
        try:
            check_task_pod(pod, bare)
        except InvalidEvent as exc:
            where = f"data.spec.tasks[{t}].template"
            field = exc.field
            if field is not None and field.startswith("data."):
                field = where + field[4:]
            elif field is None or field == "data":
                field = where
            raise InvalidEvent(
                exc.reason,
                f"task {task['name']!r}: its pod {pod['metadata']['name']} is refused: "
                f"{exc.message}",
                field,
            ) from None


QUANTITY_CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "esched.node.added": check_node,
    "esched.node.updated": check_node,
    "esched.pod.submitted": check_pod,
    "esched.pod.updated": check_pod_update,
    "esched.podgroup.submitted": check_podgroup,
    "esched.queue.upserted": check_queue,
    "esched.usage.reported": check_usage,
    "esched.job.submitted": _check_job,
}


def check_quantities(event_type: str, data: dict[str, Any]) -> None:
    """Convert every quantity of a schema-valid ``data``; raise InvalidEvent("quantity").

    Also enforces a Volcano queue's ``guarantee <= deserved <= capability`` per resource.
    """
    check = QUANTITY_CHECKS.get(event_type)
    if check is not None:
        check(data)
