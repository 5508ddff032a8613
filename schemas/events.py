"""The event vocabulary of esched: type names, which are external input, and streams.

Every event is a CloudEvents 1.0 envelope in JSON structured mode. ``id`` is the
idempotency key; ``type`` is one of the names below; ``data`` is a
Kubernetes-shaped object (external events) or an esched record (internal events).
The JSON Schema of each type is ``schemas/v1/<type>.json``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

__all__ = [
    "EXTERNAL_TYPES",
    "INTERNAL_TYPES",
    "JSON",
    "TYPES",
    "envelope",
    "stream_of",
    "timestamp",
]

#: The CloudEvents version of every envelope.
SPECVERSION = "1.0"
#: ``datacontenttype`` of an envelope whose ``data`` is JSON.
JSON = "application/json"

NODE_ADDED = "esched.node.added"
NODE_UPDATED = "esched.node.updated"
NODE_REMOVED = "esched.node.removed"
POD_SUBMITTED = "esched.pod.submitted"
POD_DELETED = "esched.pod.deleted"
POD_SUCCEEDED = "esched.pod.succeeded"
POD_FAILED = "esched.pod.failed"
PODGROUP_SUBMITTED = "esched.podgroup.submitted"
QUEUE_UPSERTED = "esched.queue.upserted"
USAGE_REPORTED = "esched.usage.reported"

PLACEMENT_PROPOSED = "esched.placement.proposed"
PLACEMENT_COMMITTED = "esched.placement.committed"
PLACEMENT_REJECTED = "esched.placement.rejected"
POD_EVICTED = "esched.pod.evicted"
POD_UNSCHEDULABLE = "esched.pod.unschedulable"
POD_REJECTED = "esched.pod.rejected"
GANG_RESERVED = "esched.gang.reserved"

#: Types operators publish (accepted by ingest from Kafka).
EXTERNAL_TYPES = (
    NODE_ADDED,
    NODE_UPDATED,
    NODE_REMOVED,
    POD_SUBMITTED,
    POD_DELETED,
    POD_SUCCEEDED,
    POD_FAILED,
    PODGROUP_SUBMITTED,
    QUEUE_UPSERTED,
    USAGE_REPORTED,
)
#: Types only esched's own services write (decisions and their consequences).
INTERNAL_TYPES = (
    PLACEMENT_PROPOSED,
    PLACEMENT_COMMITTED,
    PLACEMENT_REJECTED,
    POD_EVICTED,
    POD_UNSCHEDULABLE,
    POD_REJECTED,
    GANG_RESERVED,
)
TYPES = EXTERNAL_TYPES + INTERNAL_TYPES

#: The stream of every placement decision (committed or rejected).
DECISIONS_STREAM = "decisions"

_NAMESPACED_KIND = {"pod": True, "podgroup": True, "node": False, "queue": False}


def stream_of(event: dict[str, Any]) -> str:
    """The stream an event belongs to: ``kind/name`` or ``kind/namespace/name``.

    Per-stream versions give optimistic concurrency on one object's history.
    """
    kind = event["type"].split(".")[1]
    data = event.get("data") or {}
    if kind in _NAMESPACED_KIND:
        meta = data.get("metadata")
        if meta is None and "pod" in data:  # internal pod records carry "pod": "ns/name"
            return f"pod/{data['pod']}"
        meta = meta or {}
        name = meta.get("name", "")
        if _NAMESPACED_KIND[kind]:
            return f"{kind}/{meta.get('namespace') or 'default'}/{name}"
        return f"{kind}/{name}"
    if kind == "gang":  # internal gang records carry "gang": "ns/name"
        return f"gang/{data.get('gang', '')}"
    if kind == "placement":
        if event["type"] == PLACEMENT_PROPOSED:
            return f"proposals/{data.get('replica', '')}"
        # All decisions form one stream, the commit service's own log: appending with
        # its expected version fences a deposed leader that still tries to write.
        return DECISIONS_STREAM
    return f"{kind}/{event.get('source', '')}"


def timestamp(when: datetime | None = None, timespec: str = "auto") -> str:
    """``when`` (default: now) as an RFC 3339 UTC time ending in ``Z``, as envelopes carry it."""
    return (when or datetime.now(UTC)).isoformat(timespec=timespec).replace("+00:00", "Z")


def envelope(
    type_: str,
    source: str,
    data: Any,
    *,
    id: str,
    time: str | None = None,
    subject: str | None = None,
    dataschema: str | None = None,
    content_type: str | None = JSON,
) -> dict[str, Any]:
    """The CloudEvents 1.0 envelope (JSON structured mode) of one event.

    ``id`` is the idempotency key: callers whose retries or second leaders must
    dedupe pass a deterministic one. ``time`` defaults to now (:func:`timestamp`).
    ``subject``, ``dataschema`` and ``content_type`` are left out when None.
    """
    env: dict[str, Any] = {
        "specversion": SPECVERSION,
        "id": id,
        "source": source,
        "type": type_,
        "time": timestamp() if time is None else time,
    }
    if content_type is not None:
        env["datacontenttype"] = content_type
    if dataschema is not None:
        env["dataschema"] = dataschema
    if subject is not None:
        env["subject"] = subject
    env["data"] = data
    return env


def proposal_envelope(data: dict[str, Any], source: str, *, time: str | None = None) -> dict:
    """The ``esched.placement.proposed`` envelope of proposal ``data``; its id
    (``proposal-<id>``) is the proposal's, so a resent proposal dedupes."""
    return envelope(
        PLACEMENT_PROPOSED, source, data, id=f"proposal-{data.get('proposal')}", time=time
    )
