"""The checks after the schema, per event type."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from esched.schemas.validator.errors import InvalidEvent
from esched.schemas.validator.pods import _check_pod, _check_pod_update
from esched.schemas.validator.quantities import (
    _check_node,
    _check_podgroup,
    _check_queue,
    _check_usage,
)
from esched.schemas.volcano_jobs import JobRejected, default_job, validate_job

__all__ = ["check_quantities"]


def _check_job(data: dict[str, Any]) -> None:
    """A Volcano Job its validating webhook refuses (after the mutating webhook's
    defaults) is refused with Volcano's message and the field at fault, a
    ``dependsOn`` cycle included. The defaults go on a shallow copy of what they
    change (``shared``): the check only reads the defaulted Job."""
    problems = validate_job(default_job(data, shared=True))
    if problems:
        meta = data.get("metadata") or {}
        exc = JobRejected(f"{meta.get('namespace') or 'default'}/{meta.get('name')}", problems)
        raise InvalidEvent("schema", str(exc), f"data.{problems[0].field}")


_QUANTITY_CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "esched.node.added": _check_node,
    "esched.node.updated": _check_node,
    "esched.pod.submitted": _check_pod,
    "esched.pod.updated": _check_pod_update,
    "esched.podgroup.submitted": _check_podgroup,
    "esched.queue.upserted": _check_queue,
    "esched.usage.reported": _check_usage,
    "esched.job.submitted": _check_job,
}


def check_quantities(event_type: str, data: dict[str, Any]) -> None:
    """Convert every quantity of a schema-valid ``data``; raise InvalidEvent("quantity").

    Also enforces a Volcano queue's ``guarantee <= deserved <= capability`` per resource.
    """
    check = _QUANTITY_CHECKS.get(event_type)
    if check is not None:
        check(data)
