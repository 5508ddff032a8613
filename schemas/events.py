"""The event vocabulary of esched: type names, which are external input, envelopes,
stream names and keys (the one home of each of these conventions).

Every event is a CloudEvents 1.0 envelope in JSON structured mode. ``id`` is the
idempotency key; ``type`` is one of the names below; ``data`` is a
Kubernetes-shaped object (external events) or an esched record (internal events).
The JSON Schema of each type is ``schemas/v1/<type>.json``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

__all__ = [
    "DEFAULT_NAMESPACE",
    "EXTERNAL_TYPES",
    "IMPLIES",
    "IMPLIES_PODS",
    "INTERNAL_TYPES",
    "JSON",
    "TYPES",
    "envelope",
    "envelope_of_attributes",
    "implies_pods",
    "message_key",
    "metadata_key",
    "namespaced_key",
    "parse_stream",
    "proposal_envelope",
    "proposal_key",
    "split_key",
    "stored_form",
    "stream_key",
    "stream_name",
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
POD_UPDATED = "esched.pod.updated"
POD_SUCCEEDED = "esched.pod.succeeded"
POD_FAILED = "esched.pod.failed"
PODGROUP_SUBMITTED = "esched.podgroup.submitted"
QUEUE_UPSERTED = "esched.queue.upserted"
PRIORITYCLASS_UPSERTED = "esched.priorityclass.upserted"
NAMESPACE_UPSERTED = "esched.namespace.upserted"
NAMESPACE_DELETED = "esched.namespace.deleted"
USAGE_REPORTED = "esched.usage.reported"
JOB_SUBMITTED = "esched.job.submitted"

PLACEMENT_PROPOSED = "esched.placement.proposed"
PLACEMENT_COMMITTED = "esched.placement.committed"
PLACEMENT_REJECTED = "esched.placement.rejected"
POD_EVICTED = "esched.pod.evicted"
POD_THROTTLED = "esched.pod.throttled"
POD_UNSCHEDULABLE = "esched.pod.unschedulable"
POD_REJECTED = "esched.pod.rejected"
GANG_RESERVED = "esched.gang.reserved"
JOB_UPDATED = "esched.job.updated"
JOB_TIMER = "esched.job.timer"

#: Types operators publish (accepted by ingest from Kafka).
EXTERNAL_TYPES = (
    NODE_ADDED,
    NODE_UPDATED,
    NODE_REMOVED,
    POD_SUBMITTED,
    POD_DELETED,
    POD_UPDATED,
    POD_SUCCEEDED,
    POD_FAILED,
    PODGROUP_SUBMITTED,
    QUEUE_UPSERTED,
    USAGE_REPORTED,
    PRIORITYCLASS_UPSERTED,
    JOB_SUBMITTED,
    NAMESPACE_UPSERTED,
    NAMESPACE_DELETED,
)
#: Types only esched's own services write (decisions and their consequences).
INTERNAL_TYPES = (
    PLACEMENT_PROPOSED,
    PLACEMENT_COMMITTED,
    PLACEMENT_REJECTED,
    POD_EVICTED,
    POD_THROTTLED,
    POD_UNSCHEDULABLE,
    POD_REJECTED,
    GANG_RESERVED,
    JOB_UPDATED,
    JOB_TIMER,
)
TYPES = EXTERNAL_TYPES + INTERNAL_TYPES

#: The stream of every placement decision (committed or rejected).
DECISIONS_STREAM = "decisions"

#: The namespace of an object whose metadata names none (Kubernetes' default).
DEFAULT_NAMESPACE = "default"

#: Stream kinds: the first segment of a stream name (``kind/key``).
POD = "pod"
PODGROUP = "podgroup"
NODE = "node"
QUEUE = "queue"
PRIORITYCLASS = "priorityclass"
NAMESPACE = "namespace"
GANG = "gang"
JOB = "job"
PROPOSALS = "proposals"

_NAMESPACED_KIND = {
    POD: True,
    PODGROUP: True,
    JOB: True,
    NODE: False,
    QUEUE: False,
    PRIORITYCLASS: False,
    NAMESPACE: False,
}


def namespaced_key(namespace: str | None, name: str) -> str:
    """``namespace/name``, the key of a pod, PodGroup or gang; an empty or missing
    namespace is :data:`DEFAULT_NAMESPACE`. The fold's bytes scanner
    (``core/_fold_bytes.pyx``) builds the same key from this constant."""
    return f"{namespace or DEFAULT_NAMESPACE}/{name}"


def metadata_key(meta: dict[str, Any] | None) -> str:
    """:func:`namespaced_key` of an object's ``metadata`` (name defaults to "")."""
    meta = meta or {}
    return namespaced_key(meta.get("namespace"), meta.get("name", ""))


def split_key(key: str) -> tuple[str, str]:
    """``(namespace, name)`` of a :func:`namespaced_key`."""
    namespace, _, name = key.partition("/")
    return namespace, name


def stream_name(kind: str, key: str) -> str:
    """The stream ``kind/key`` (e.g. ``pod/ns/name``, ``gang/ns/group``, ``node/n1``)."""
    return f"{kind}/{key}"


def parse_stream(stream: str) -> tuple[str, str]:
    """``(kind, key)`` of a stream name: the inverse of :func:`stream_name`
    (``"decisions"`` has the empty key)."""
    kind, _, key = stream.partition("/")
    return kind, key


def stream_key(stream: str, kind: str) -> str | None:
    """The key of ``stream`` if it is of ``kind`` (``pod/ns/a``, ``pod`` -> ``ns/a``),
    else None."""
    prefix = len(kind)
    if stream.startswith(kind) and stream[prefix : prefix + 1] == "/":
        return stream[prefix + 1 :]
    return None


def stream_of(event: dict[str, Any]) -> str:
    """The stream an event belongs to: ``kind/name`` or ``kind/namespace/name``.

    Per-stream versions give optimistic concurrency on one object's history.
    """
    kind = event["type"].split(".")[1]
    data = event.get("data") or {}
    if kind in _NAMESPACED_KIND:
        meta = data.get("metadata")
        if meta is None and "pod" in data:  # internal pod records carry "pod": "ns/name"
            return stream_name(POD, data["pod"])
        if meta is None and "job" in data:  # internal job records carry "job": "ns/name"
            return stream_name(JOB, data["job"])
        meta = meta or {}
        if _NAMESPACED_KIND[kind]:
            # stream_name(kind, metadata_key(meta)) inlined: ingest pays this per event.
            return f"{kind}/{meta.get('namespace') or DEFAULT_NAMESPACE}/{meta.get('name', '')}"
        return stream_name(kind, meta.get("name", ""))
    if kind == GANG:  # internal gang records carry "gang": "ns/name"
        return stream_name(GANG, data.get("gang", ""))
    if kind == "placement":
        if event["type"] == PLACEMENT_PROPOSED:
            return stream_name(PROPOSALS, data.get("replica", ""))
        # All decisions form one stream, the commit service's own log: appending with
        # its expected version fences a deposed leader that still tries to write.
        return DECISIONS_STREAM
    return stream_name(kind, event.get("source", ""))


def proposal_key(data: dict[str, Any]) -> str:
    """The bus key of a proposal or decision (its ``data``): its gang, else its first
    pod, so one object's proposals and decisions keep their order on a partition."""
    return data.get("gang") or data["bindings"][0]["pod"]


def message_key(event: dict[str, Any]) -> str | None:
    """The bus key of an external event: a pod's gang, else the pod's key; a
    PodGroup's key; other objects' names; None when ``data`` has no metadata.
    A gang's pods and its PodGroup share a key, so they keep their order."""
    from esched.schemas.objects import gang_key  # objects builds its keys from this module

    data = event.get("data") or {}
    meta = data.get("metadata") if isinstance(data, dict) else None
    if not isinstance(meta, dict):
        return None
    kind = str(event.get("type", "")).split(".")[1:2]
    if kind == [POD]:
        return gang_key(data) or metadata_key(meta)
    if kind == [PODGROUP] or kind == [JOB]:
        # A Volcano Job's PodGroup and pods are keyed by its key too: they follow it.
        return metadata_key(meta)
    return str(meta.get("name"))


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


#: The context attributes in the order :func:`envelope` writes them.
_ATTRIBUTE_ORDER = (
    "specversion",
    "id",
    "source",
    "type",
    "time",
    "datacontenttype",
    "dataschema",
    "subject",
)


#: The CloudEvents extension attribute ingest sets on each Volcano Job it stores
#: (:func:`stored_form`), and its one value: the Job's first submission implies its
#: first pods (:func:`esched.schemas.manifests.volcano_first_pods`), which every fold
#: derives rather than reads. Ingest checks every pod of a Job's tasks before storing
#: it; a Job without the attribute (stored before ingest wrote it) implies no pod: the
#: job controller records its pods, as it always did.
IMPLIES = "eschedimplies"
IMPLIES_PODS = "pods"


#: ``{`` and the marker's member, ingest's: the start of a Job's stored bytes.
_MARKER_MEMBER = b"{" + orjson.dumps(IMPLIES) + b":" + orjson.dumps(IMPLIES_PODS) + b","


def implies_pods(event: Any) -> bool:
    """Whether a decoded stored envelope is a Job ingest marked as implying its first
    pods (:data:`IMPLIES`): the dict side's one reading of the marker (the cluster
    fold's bytes path reads the same off the bytes)."""
    return event.get(IMPLIES) == IMPLIES_PODS


def stored_form(event: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
    """Ingest's: the envelope to store and its bytes, of an event it validated
    (``payload`` its bytes as received). A Volcano Job, whose every task's pod the
    validation checked, is marked as implying its first pods (:data:`IMPLIES`); the
    attribute on any other event, or a value other than ingest's on a Job, a
    producer's, is removed or overwritten: only ingest's check vouches for it. A Job
    without the attribute, received as one JSON object, is stored as those bytes with
    the marker put in as the envelope's first member: re-encoding the Job cost a
    one-pod Job's ingest about a tenth, and every reader finds the member wherever it
    stands."""
    want = IMPLIES_PODS if event.get("type") == JOB_SUBMITTED else None
    if event.get(IMPLIES) == want:
        return event, payload
    if want is not None and IMPLIES not in event and payload[:1] == b"{":
        # (no member decodes to the attribute's name, so the one put in is the only one)
        return {**event, IMPLIES: want}, _MARKER_MEMBER + payload[1:]
    attrs = {k: v for k, v in event.items() if k != IMPLIES}
    if want is not None:
        attrs[IMPLIES] = want
    stored = envelope_of_attributes(attrs, event["data"])
    return stored, orjson.dumps(stored)


def envelope_of_attributes(attributes: dict[str, Any], data: Any) -> dict[str, Any]:
    """The envelope of context ``attributes`` (as a Kafka binary-mode record carries
    them, or a structured envelope without its data) and ``data``: the attributes
    :func:`envelope` writes in its order, then extension attributes by name, then
    ``data``. An event read in either content mode is stored as this one form."""
    env: dict[str, Any] = {k: attributes[k] for k in _ATTRIBUTE_ORDER if k in attributes}
    for name in sorted(attributes):
        if name not in env and name not in ("data", "data_base64"):
            env[name] = attributes[name]
    env["data"] = data
    return env


def proposal_envelope(data: dict[str, Any], source: str, *, time: str | None = None) -> dict:
    """The ``esched.placement.proposed`` envelope of proposal ``data``; its id
    (``proposal-<id>``) is the proposal's, so a resent proposal dedupes."""
    return envelope(
        PLACEMENT_PROPOSED, source, data, id=f"proposal-{data.get('proposal')}", time=time
    )
