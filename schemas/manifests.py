"""Kubernetes / Volcano manifests → esched CloudEvents (what ``esched publish`` sends).

:func:`load_documents` reads JSON, JSON Lines or multi-document YAML;
:func:`events_from_documents` converts each object:

========================================  =====================================
document                                  events
========================================  =====================================
``kind: Node``                            ``esched.node.added``
``kind: Pod``                             ``esched.pod.submitted``
``kind: PodGroup`` (Volcano, x-k8s.io)    ``esched.podgroup.submitted``
``kind: Queue`` (Volcano)                 ``esched.queue.upserted``
``kind: PriorityClass``                   ``esched.priorityclass.upserted``
``kind: Namespace``                       ``esched.namespace.upserted``
``kind: Job`` (``batch.volcano.sh``)      ``job.submitted``; it implies its
                                          PodGroup and, stored by ingest, its
                                          first pods; the others come from the
                                          job controller (``job_pods=True``: also
                                          ``podgroup.submitted`` and one
                                          ``pod.submitted`` per replica of the
                                          tasks without ``dependsOn``)
Deployment, ReplicaSet, StatefulSet,      one ``pod.submitted`` per pod its
DaemonSet, Job, CronJob, ...              controller would create
                                          (:mod:`esched.schemas.workloads`)
``kind: List`` / ``…List``                its ``items``, in order
a CloudEvent (has ``specversion``)        itself, unchanged
any other kind (ConfigMap, Service, ...)  nothing: skipped with a warning
========================================  =====================================

A pod with ``generateName`` and no ``name`` gets a deterministic suffix
(:func:`esched.schemas.workloads.generated_name`).

Event ids are deterministic: ``<prefix>.<kind>/<namespace>/<name>`` where the
prefix is ``id_prefix`` or the first 16 hex digits of the SHA-256 of the object's
canonical JSON. Publishing the same file twice therefore yields the same ids, and
the store's idempotence on id makes the second publish a no-op; a changed object
gets a new id. A Volcano Job's pods are not the publisher's to send (Volcano's job
controller creates them, and so does esched's, :mod:`esched.services.jobs`): a Job
published again, unchanged or changed, never sends pods that already ran again; a
change is the controller's ``JobUpdated``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import orjson
import yaml

from esched.schemas import events as ev
from esched.schemas.events import stream_of
from esched.schemas.objects import (
    DEFAULT_QUEUE,
    GANG_ANNOTATIONS,
    QUEUE_ANNOTATION,
    decoded_json_copy,
    json_copy,
    pod_resource_requests,
)
from esched.schemas.quantity import to_base_units
from esched.schemas.validator import SCHEMA_BASE_URI, InvalidEvent, validate_data, validate_event
from esched.schemas.volcano_jobs import JobRejected, default_job, task_dependencies, validate_job
from esched.schemas.workloads import (
    WORKLOAD_KINDS,
    cron_run_name,
    generated_name,
    workload_pods,
)

__all__ = [
    "check_task_pod",
    "events_from_documents",
    "input_nodes",
    "load_documents",
    "task_pod_bare_valid",
    "volcano_first_pods",
    "volcano_job_objects",
    "volcano_pod_labels",
    "volcano_pod_metadata",
    "volcano_podgroup",
    "volcano_task_pod",
    "volcano_task_pod_bare",
    "volcano_task_pod_shared",
]

log = logging.getLogger(__name__)

DEFAULT_SOURCE = "esched-publish"
MAX_ID_LENGTH = 256

_PODGROUP_GROUPS = ("scheduling.volcano.sh", "scheduling.x-k8s.io", "scheduling.sigs.k8s.io")
_VOLCANO_BATCH = "batch.volcano.sh"
# Annotations and labels Volcano's job controller puts on the pods it creates.
_JOB_NAME = "volcano.sh/job-name"
_TASK_SPEC = "volcano.sh/task-spec"
_TASK_INDEX = "volcano.sh/task-index"
#: The attempt (the job's retry count) a pod belongs to: Volcano's job version.
_JOB_VERSION = "volcano.sh/job-version"
#: The annotations :func:`volcano_task_pod` sets on every pod, in its order: qualified
#: names (tests/schemas/test_task_pod.py checks them against the pod schema).
_TASK_POD_ANNOTATIONS = (
    GANG_ANNOTATIONS[0],
    QUEUE_ANNOTATION,
    _JOB_NAME,
    _TASK_SPEC,
    _TASK_INDEX,
    _JOB_VERSION,
)


# ----------------------------------------------------------------------- loading


class _NoTimestampLoader(yaml.SafeLoader):
    """SafeLoader that keeps timestamps as strings, as Kubernetes' YAML → JSON does."""


_NoTimestampLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _json_safe(obj: Any) -> Any:
    """Round-trip through JSON: non-string keys become strings, like kubectl's conversion."""
    return orjson.loads(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS))


def load_documents(text: str | bytes) -> list[dict[str, Any]]:
    """Parse a file's content into objects: JSON, JSON Lines, or (multi-document) YAML.

    A JSON array yields its elements; ``kind: List`` objects are kept whole (their
    items are expanded by :func:`events_from_documents`). Empty YAML documents are
    skipped. Raises ``ValueError`` naming the line/document at fault.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    stripped = text.strip()
    if not stripped:
        return []
    docs: list[Any] | None = None
    if stripped[0] in "[{":
        try:
            whole = orjson.loads(stripped)
            docs = whole if isinstance(whole, list) else [whole]
        except orjson.JSONDecodeError:
            lines = [ln for ln in stripped.splitlines() if ln.strip()]
            if all(ln.lstrip().startswith("{") for ln in lines):
                docs = []
                for lineno, line in enumerate(stripped.splitlines(), 1):
                    if not line.strip():
                        continue
                    try:
                        docs.append(orjson.loads(line))
                    except orjson.JSONDecodeError as exc:
                        raise ValueError(f"line {lineno}: not valid JSON: {exc}") from None
    if docs is None:
        try:
            docs = []
            for d in yaml.load_all(stripped, Loader=_NoTimestampLoader):
                if isinstance(d, list):  # a YAML sequence of objects, like a JSON array
                    docs.extend(d)
                elif d is not None:
                    docs.append(d)
        except yaml.YAMLError as exc:
            raise ValueError(f"not valid JSON or YAML: {exc}") from None
        docs = _json_safe(docs)
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise ValueError(
                f"document {i}: expected an object (mapping), got {type(doc).__name__}"
            )
    return docs


# -------------------------------------------------------------------- conversion


def _content_hash(obj: Any) -> str:
    canonical = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.sha256(canonical).hexdigest()[:16]


def _event_id(prefix: str, kind: str, obj: dict[str, Any], namespaced: bool) -> str:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    ident = ev.stream_name(
        kind, ev.namespaced_key(meta.get("namespace"), name) if namespaced else name
    )
    event_id = f"{prefix}.{ident}"
    if len(event_id) > MAX_ID_LENGTH:  # very long names: keep ids within CloudEvents' limit
        event_id = f"{prefix}.{kind}/{hashlib.sha256(ident.encode()).hexdigest()}"
    return event_id


def _envelope(
    etype: str,
    obj: dict[str, Any],
    source: str,
    id_prefix: str | None,
    kind: str,
    namespaced: bool,
    time: str,
) -> dict[str, Any]:
    prefix = id_prefix or _content_hash(obj)
    event = ev.envelope(
        etype,
        source,
        obj,
        id=_event_id(prefix, kind, obj, namespaced),
        time=time,
        dataschema=f"{SCHEMA_BASE_URI}{etype}.json",
    )
    event["subject"] = stream_of(event)
    return event


def _api_group(doc: dict[str, Any]) -> str:
    api = str(doc.get("apiVersion") or "")
    return api.split("/", 1)[0] if "/" in api else ""


def volcano_job_objects(job: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A Volcano Job as the objects its controller would create: PodGroup, then pods.

    The Job is first defaulted and validated as Volcano's admission webhooks do
    (:mod:`esched.schemas.volcano_jobs`): one Volcano refuses raises
    :class:`~esched.schemas.volcano_jobs.JobRejected` (a ``ValueError``) with
    Volcano's message. The PodGroup is named after the job; ``minMember`` is
    ``spec.minAvailable``, else (the webhook's default) the sum of the tasks'
    ``minAvailable``, each defaulting to the task's replicas; ``minResources`` sums
    the requests of the first ``minMember`` pods in task order (as Volcano does);
    ``minTaskMember`` is each task's ``minAvailable``. Pods are ``<job>-<task>-<i>``
    with the gang and queue annotations, the job's ``priorityClassName`` and
    ``schedulerName`` unless the template sets one, and Volcano's
    ``volcano.sh/job-name`` / ``task-spec`` / ``task-index`` annotations
    (:func:`volcano_task_pod`). The Job itself comes first, as
    ``esched.job.submitted`` (defaulted; its lifecycle fields: maxRetry, minSuccess,
    policies, dependsOn, ttlSecondsAfterFinished, for the job controller). The pods
    listed are those the job controller creates first (:func:`volcano_podgroup`,
    :func:`volcano_task_pod`); those of a task with ``dependsOn`` come once the tasks
    it depends on completed.
    """
    meta = job.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise ValueError("Volcano Job without metadata.name")
    namespace = meta.get("namespace") or ev.DEFAULT_NAMESPACE
    job = default_job(job)
    problems = validate_job(job)
    if problems:
        raise JobRejected(ev.namespaced_key(namespace, name), problems)
    spec = job.get("spec") or {}
    # The pods the Job implies (its controller's first ones), each a copy of its own.
    now = [volcano_task_pod(job, task, i) for task, i, _pod, _bare in volcano_first_pods(job)]
    if not any(task.get("replicas") for task in spec["tasks"]):
        raise ValueError(f"Volcano Job {namespace}/{name} has no replicas")
    group = volcano_podgroup(job)
    return [(ev.JOB_SUBMITTED, job), (ev.PODGROUP_SUBMITTED, group)] + [
        (ev.POD_SUBMITTED, p) for p in now
    ]


#: Task templates' requests by the template spec's JSON bytes (see _template_requests).
_REQUESTS_MEMO: dict[bytes, dict[str, int]] = {}
_REQUESTS_MEMO_LIMIT = 4096


#: Base units of a quantity by (resource, its text or integer) (see _units).
_UNITS_MEMO: dict[tuple[str, str | int], int] = {}


def _units(resource: str, value: object, field: str | None = None) -> int:
    """:func:`~esched.schemas.quantity.to_base_units`, memoized on the quantity: every
    fold of the cluster state builds a Job's PodGroup (its ``minResources``), templates
    of new shapes keep coming, and their quantities repeat a few spellings (exact
    parsing is most of the cost of a template's requests)."""
    if type(value) is not str and type(value) is not int:
        return to_base_units(resource, value, field)  # (its error names the field)
    key = (resource, value)
    got = _UNITS_MEMO.get(key)
    if got is None:
        got = to_base_units(resource, value, field)
        if len(_UNITS_MEMO) >= _REQUESTS_MEMO_LIMIT:
            _UNITS_MEMO.clear()
        _UNITS_MEMO[key] = got
    return got


def _template_requests(spec: Any) -> dict[str, int]:
    """The fit requests (:func:`~esched.schemas.objects.pod_resource_requests`) of a
    task template's pod spec, memoized on the spec's JSON bytes: a PodGroup is built
    per Job, and Jobs repeat a few templates (a one-pod Job's PodGroup is a third of
    the controller's work per pod without it). The dict returned is shared: read it
    only."""
    try:
        raw = orjson.dumps(spec)
    except TypeError:  # not JSON (a YAML-only type): computed every time
        return pod_resource_requests({"spec": spec}, _units).fit
    got = _REQUESTS_MEMO.get(raw)
    if got is None:
        if len(_REQUESTS_MEMO) >= _REQUESTS_MEMO_LIMIT:
            _REQUESTS_MEMO.clear()
        got = _REQUESTS_MEMO[raw] = pod_resource_requests({"spec": spec}, _units).fit
    return got


def volcano_podgroup(job: Mapping[str, Any]) -> dict[str, Any]:
    """The PodGroup of a (defaulted) Volcano Job, as its controller creates it (see
    :func:`volcano_job_objects`). The Job's submission implies it: every fold of the
    cluster state builds it with this from the Job's ``esched.job.submitted`` (the
    dict and bytes paths of ``ClusterState``), and esched's job controller submits it
    again only after an accepted update. Its ``spec`` is a function of the Job's
    ``spec`` alone (the bytes path memoizes it on those bytes)."""
    meta = job.get("metadata") or {}
    name = meta["name"]
    namespace = meta.get("namespace") or ev.DEFAULT_NAMESPACE
    spec = job.get("spec") or {}
    min_member = spec["minAvailable"]
    tasks = spec["tasks"]
    # (Loops rather than comprehensions, and no min(): every fold of the cluster
    # state runs this once per Job of a new shape.)
    task_minimum: dict[str, Any] = {}
    for t in tasks:
        task_minimum[t["name"]] = t["minAvailable"]
    group_spec: dict[str, Any] = {
        "minMember": min_member,
        "queue": spec["queue"],
        "minTaskMember": task_minimum,
    }
    if spec.get("priorityClassName"):
        group_spec["priorityClassName"] = spec["priorityClassName"]
    if isinstance(min_member, int):
        # The first minMember pods in task order; a task's pods ask what its template asks.
        total: dict[str, int] = {}
        left = min_member
        for task in tasks:
            take = task.get("replicas") or 0
            if take > left:
                take = left
            if take <= 0:
                continue
            left -= take
            asks = _template_requests((task.get("template") or {}).get("spec") or {})
            for res, units in asks.items():
                if res != "pods":
                    total[res] = total.get(res, 0) + units * take
        if total:
            texts: dict[str, str] = {}
            for r, u in total.items():
                texts[r] = f"{u}m" if r == "cpu" else str(u)  # base units as a quantity
            group_spec["minResources"] = texts
    group_meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "annotations": {_JOB_NAME: name},
    }
    if meta.get("labels"):
        group_meta["labels"] = dict(meta["labels"])
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": group_meta,
        "spec": group_spec,
    }


def volcano_task_pod(
    job: Mapping[str, Any],
    task: Mapping[str, Any],
    index: int,
    attempt: int = 0,
    copy: Callable[[Any], Any] = json_copy,
) -> dict[str, Any]:
    """Pod ``index`` of a (defaulted) Volcano Job's ``task``, as its controller creates
    it: ``<job>-<task>-<index>`` from the task's template, with the gang and queue
    annotations, Volcano's ``volcano.sh/job-name`` / ``task-spec`` / ``task-index``
    and the attempt (``volcano.sh/job-version``), and the job's ``priorityClassName``
    and ``schedulerName`` unless the template sets one. The job controller
    (:mod:`esched.services.jobs`) builds its resubmissions with this too. ``copy``
    deep-copies the template (:func:`~esched.schemas.objects.decoded_json_copy` for a
    Job as decoded from the log)."""
    return _task_pod(job, task["name"], index, attempt, copy(task.get("template") or {}), False)


def volcano_pod_metadata(
    name: Any, namespace: str, queue: Any, task_name: Any, index: int, attempt: int
) -> dict[str, Any]:
    """The metadata of pod ``index`` of task ``task_name`` of the Volcano Job ``name``
    in ``namespace`` and ``queue`` at ``attempt``, for a template without metadata
    (the common one), written at once in the builder's key order: what
    :func:`volcano_task_pod` gives it (the cluster fold's bytes path builds a Job's
    first pods of such templates with it, not decoding the Job)."""
    return {
        "name": f"{name}-{task_name}-{index}",
        "namespace": namespace,
        "annotations": {
            GANG_ANNOTATIONS[0]: name,
            QUEUE_ANNOTATION: queue,
            _JOB_NAME: name,
            _TASK_SPEC: task_name,
            _TASK_INDEX: str(index),
            _JOB_VERSION: str(attempt),
        },
        "labels": volcano_pod_labels(name, queue),
    }


def volcano_pod_labels(name: Any, queue: Any) -> dict[str, Any]:
    """The labels of a pod of the Volcano Job ``name`` in ``queue`` whose template
    has no metadata: what :func:`volcano_pod_metadata` gives it, and all the cluster
    fold's bytes path hands over of a Job's first pods' metadata besides their queue
    and gang."""
    return {_JOB_NAME: name, QUEUE_ANNOTATION: queue}


def _task_pod(
    job: Mapping[str, Any],
    task_name: Any,
    index: int,
    attempt: int,
    template: dict[str, Any],
    shared: bool,
) -> dict[str, Any]:
    """The pod of :func:`volcano_task_pod`, built in ``template`` (a copy), or, when
    ``shared``, on copies of the objects it changes (metadata, annotations and labels
    plain objects or absent, see :func:`volcano_task_pod_shared`): a key assigned
    keeps its place, a new one comes last, as in the template's copy."""
    meta = job.get("metadata") or {}
    name = meta["name"]
    namespace = meta.get("namespace") or ev.DEFAULT_NAMESPACE
    spec = job.get("spec") or {}
    queue = spec.get("queue") or DEFAULT_QUEUE
    pod_meta = template.get("metadata")
    if not pod_meta:
        pod_meta = volcano_pod_metadata(name, namespace, queue, task_name, index, attempt)
    else:
        if shared:
            pod_meta = dict(pod_meta)
            for key in ("annotations", "labels"):
                if key in pod_meta:
                    pod_meta[key] = dict(pod_meta[key])
        pod_meta.pop("generateName", None)
        pod_meta["name"] = f"{name}-{task_name}-{index}"
        pod_meta["namespace"] = namespace
        annotations = pod_meta.setdefault("annotations", {})
        annotations[GANG_ANNOTATIONS[0]] = name
        annotations[QUEUE_ANNOTATION] = queue
        annotations[_JOB_NAME] = name
        annotations[_TASK_SPEC] = task_name
        annotations[_TASK_INDEX] = str(index)
        annotations[_JOB_VERSION] = str(attempt)
        labels = pod_meta.setdefault("labels", {})
        labels[_JOB_NAME] = name
        labels[QUEUE_ANNOTATION] = queue
    pod_spec = _task_pod_spec(spec, template.get("spec") or {}, shared)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": pod_spec}


def _task_pod_spec(spec: Mapping[str, Any], pod_spec: dict[str, Any], shared: bool) -> dict:
    """A task pod's spec: the template's ``pod_spec`` with the Job ``spec``'s
    ``priorityClassName`` and ``schedulerName`` unless it sets them; ``shared``: on a
    copy when it changes (:func:`_task_pod`)."""
    pc, sched = spec.get("priorityClassName"), spec.get("schedulerName")
    if pc and not pod_spec.get("priorityClassName"):
        if shared:
            pod_spec = dict(pod_spec)
            shared = False  # copied once
        pod_spec["priorityClassName"] = pc
    if sched and not pod_spec.get("schedulerName"):
        if shared:
            pod_spec = dict(pod_spec)
        pod_spec["schedulerName"] = sched
    return pod_spec


def volcano_task_pod_shared(
    job: Mapping[str, Any], task: Mapping[str, Any], index: int, attempt: int = 0
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """:func:`volcano_task_pod`'s pod (the same JSON, keys in the same order) without
    copying the template: only the objects the builder changes (the metadata, its
    annotations and labels, the spec when the Job sets its ``priorityClassName`` or
    ``schedulerName``) are new, the rest is the template's, so neither the pod nor the
    Job may be changed while the other is in use (the job controller's pods, encoded
    and folded, never changed). With it, for :func:`check_task_pod`, the pod without
    the annotations the builder sets (None when the template sets one of them, or the
    Job's name, queue or task name is not a string). A template whose metadata,
    annotations, labels or spec is not an object is built by :func:`volcano_task_pod`
    (and checked whole)."""
    template = task.get("template") or {}
    tmeta = template.get("metadata") if type(template) is dict else None
    tspec = template.get("spec") if type(template) is dict else None
    if (
        type(template) is not dict
        or (tmeta and type(tmeta) is not dict)
        or (tspec and type(tspec) is not dict)
        or (tmeta and not _objects_or_absent(tmeta, "annotations", "labels"))
    ):
        return volcano_task_pod(job, task, index, attempt, copy=decoded_json_copy), None
    task_name = task["name"]
    pod = _task_pod(job, task_name, index, attempt, template, True)
    pod_meta = pod["metadata"]
    own = tmeta.get("annotations") if tmeta else None
    bare: dict[str, Any] | None = None
    if (
        type(pod_meta["annotations"][_JOB_NAME]) is str
        and type(pod_meta["annotations"][QUEUE_ANNOTATION]) is str
        and type(task_name) is str
        and (own is None or own.keys().isdisjoint(_TASK_POD_ANNOTATIONS))
    ):
        bare_meta = dict(pod_meta)
        if own is None:
            del bare_meta["annotations"]
        else:
            bare_meta["annotations"] = own
        bare = {"apiVersion": "v1", "kind": "Pod", "metadata": bare_meta, "spec": pod["spec"]}
    return pod, bare


def volcano_task_pod_bare(
    job: Mapping[str, Any], task: Mapping[str, Any], index: int
) -> dict[str, Any] | None:
    """:func:`volcano_task_pod_shared`'s ``bare`` of pod ``index`` of a (defaulted)
    Job's ``task`` (any attempt: the attempt is only in an annotation) for a template
    without metadata, the common one, made without the pod (the same JSON, keys in the
    same order, the spec likewise the template's or its copy): what ingest's check of
    a Job's pods reads (:func:`check_task_pod`; the pod itself only for the error of a
    ``bare`` refused). None for any other template, or when the shared builder gives
    no ``bare``: build the pod then."""
    template = task.get("template") or {}
    if type(template) is not dict or template.get("metadata"):
        return None
    tspec = template.get("spec")
    if tspec and type(tspec) is not dict:
        return None
    task_name = task["name"]
    meta = job.get("metadata") or {}
    name = meta["name"]
    spec = job.get("spec") or {}
    queue = spec.get("queue") or DEFAULT_QUEUE
    if type(name) is not str or type(queue) is not str or type(task_name) is not str:
        return None
    # (volcano_pod_metadata's, without the annotations)
    bare_meta = {
        "name": f"{name}-{task_name}-{index}",
        "namespace": meta.get("namespace") or ev.DEFAULT_NAMESPACE,
        "labels": volcano_pod_labels(name, queue),
    }
    pod_spec = _task_pod_spec(spec, tspec or {}, True)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": bare_meta, "spec": pod_spec}


def volcano_first_pods(
    job: Mapping[str, Any],
) -> list[tuple[Mapping[str, Any], int, dict[str, Any], dict[str, Any] | None]]:
    """The pods a (defaulted) Volcano Job's first submission implies, as ``(task,
    index, pod, bare)`` (:func:`volcano_task_pod_shared`'s pod and ``bare``): attempt 0
    of every replica of each task released at submission (it names no dependency:
    :func:`~esched.schemas.volcano_jobs.task_dependencies`, the job fold's rule too),
    in task order, the pods Volcano's controller creates first. Every fold of the log
    derives them from the Job's ``esched.job.submitted`` when ingest marked it
    (:func:`esched.schemas.events.implies_pods`; the cluster state's dict and bytes
    paths, the job fold :class:`~esched.core.jobs.JobBook`), unless a PodGroup
    of the Job's name was declared before it (the Job then implies neither: its
    controller creates the pods); the job controller creates only the others
    (dependants released later, new attempts, pods re-created). The pods share the
    Job's template objects: read them only."""
    out: list[tuple[Mapping[str, Any], int, dict[str, Any], dict[str, Any] | None]] = []
    for task in (job.get("spec") or {}).get("tasks") or ():
        if task_dependencies(task):
            continue  # released when its dependencies complete (JobBook's TaskState)
        for i in range(int(task.get("replicas") or 0)):
            pod, bare = volcano_task_pod_shared(job, task, i, 0)
            out.append((task, i, pod, bare))
    return out


def _objects_or_absent(obj: Mapping[str, Any], *keys: str) -> bool:
    return all(key not in obj or type(obj[key]) is dict for key in keys)


def check_task_pod(pod: dict[str, Any], bare: dict[str, Any] | None) -> None:
    """``validate_data(esched.pod.submitted, pod)`` for a pod of
    :func:`volcano_task_pod_shared`, by checking ``bare`` (the pod without the
    annotations its builder sets) when there is one: those are qualified names with
    string values, and the pod schema checks annotations one by one (any qualified
    name, any string), so with them the pod is valid exactly when ``bare`` is. A
    ``bare`` refused, the pod is checked whole for the error to give."""
    if bare is not None and task_pod_bare_valid(bare):
        return
    validate_data(ev.POD_SUBMITTED, pod)


def task_pod_bare_valid(bare: dict[str, Any]) -> bool:
    """Whether :func:`check_task_pod` accepts a pod by its ``bare`` alone (refused, the
    pod is checked whole for the error to give)."""
    try:
        validate_data(ev.POD_SUBMITTED, bare)
    except Exception:
        return False
    return True


# kind → (event type, namespaced)
_SIMPLE = {
    "Node": (ev.NODE_ADDED, False),
    "Pod": (ev.POD_SUBMITTED, True),
    "PodGroup": (ev.PODGROUP_SUBMITTED, True),
    "Queue": (ev.QUEUE_UPSERTED, False),
    "PriorityClass": (ev.PRIORITYCLASS_UPSERTED, False),
    "Namespace": (ev.NAMESPACE_UPSERTED, False),
}
_NAMESPACED_TYPES = {ev.POD_SUBMITTED: True, ev.PODGROUP_SUBMITTED: True, ev.JOB_SUBMITTED: True}

#: One warning line: a skipped object, a DaemonSet without nodes.
Warn = Callable[[str], None]


def input_nodes(docs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Node objects among ``docs`` (Lists and node CloudEvents included): the nodes
    a DaemonSet of the same input runs on."""
    out: list[dict[str, Any]] = []
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        if "specversion" in doc:
            if str(doc.get("type")) in (ev.NODE_ADDED, ev.NODE_UPDATED) and isinstance(
                doc.get("data"), dict
            ):
                out.append(doc["data"])
        elif doc.get("kind") == "Node":
            out.append(doc)
        elif isinstance(doc.get("items"), list) and str(doc.get("kind", "")).endswith("List"):
            items = doc["items"]
            if doc.get("kind") == "NodeList":
                items = [{"kind": "Node", **i} for i in items if isinstance(i, dict)]
            out.extend(input_nodes(items))
    return out


def _generated(doc: dict[str, Any]) -> dict[str, Any]:
    """A pod named by ``generateName`` only, named (deterministically)."""
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or meta.get("name") or not meta.get("generateName"):
        return doc
    base = str(meta["generateName"])
    named = {k: v for k, v in meta.items() if k != "generateName"}
    named["name"] = generated_name(base, doc)
    return {**doc, "metadata": named}


#: The ``_objects`` event type of what a Volcano Job's controller creates (its PodGroup
#: and pods): converted and checked as their own types, sent only with ``job_pods``.
_CONTROLLED = "controlled"


def _objects(
    doc: dict[str, Any], where: str, nodes: Sequence[dict[str, Any]], warn: Warn
) -> Iterator[tuple[str, str, dict[str, Any], str]]:
    """(``"event"`` | event type | ``_CONTROLLED``, kind, object, where) for one
    document, Lists expanded."""
    if "specversion" in doc:
        yield "event", "CloudEvent", doc, where
        return
    kind = doc.get("kind")
    if not isinstance(kind, str) or not kind:
        raise ValueError(
            f"{where}: no 'kind' (expected Node, Pod, PodGroup, Queue, Job, "
            "List or a CloudEvent with 'specversion')"
        )
    group = _api_group(doc)
    if kind == "List" or (kind.endswith("List") and isinstance(doc.get("items"), list)):
        items = doc.get("items")
        if not isinstance(items, list):
            raise ValueError(f"{where}: kind {kind} without an 'items' list")
        for j, item in enumerate(items):
            if not isinstance(item, dict):
                raise ValueError(f"{where}.items[{j}]: expected an object")
            if "kind" not in item and kind != "List":
                item = {**item, "kind": kind[: -len("List")]}
            yield from _objects(item, f"{where}.items[{j}]", nodes, warn)
        return
    if kind == "PodGroup" and group and group not in _PODGROUP_GROUPS:
        raise ValueError(
            f"{where}: PodGroup of API group {group!r} is not supported "
            f"(supported: {', '.join(_PODGROUP_GROUPS)})"
        )
    if kind == "CronJob" and group == _VOLCANO_BATCH:
        # Volcano's CronJob: one run, its jobTemplate as a Volcano Job.
        meta = doc.get("metadata") or {}
        if not meta.get("name"):
            raise ValueError(f"{where}: Volcano CronJob without metadata.name")
        template = (doc.get("spec") or {}).get("jobTemplate") or {}
        run_meta = {**(template.get("metadata") or {}), "name": cron_run_name(meta)}
        if meta.get("namespace"):
            run_meta["namespace"] = meta["namespace"]
        doc = {"apiVersion": doc.get("apiVersion"), "kind": "Job", "metadata": run_meta}
        doc["spec"] = template.get("spec") or {}
        kind = "Job"
    if kind == "Job" and group == _VOLCANO_BATCH:
        try:
            converted = volcano_job_objects(doc)
        except JobRejected as exc:
            raise JobRejected(exc.job, exc.problems, where) from None
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        for etype, obj in converted:
            yield etype if etype == ev.JOB_SUBMITTED else _CONTROLLED, obj["kind"], obj, where
        return
    if kind in WORKLOAD_KINDS and group in WORKLOAD_KINDS[kind]:
        pods, warnings = workload_pods(doc, nodes, where)
        for line in warnings:
            warn(line)
        for pod in pods:
            yield ev.POD_SUBMITTED, "Pod", pod, where
        return
    if kind == "Pod":
        doc = _generated(doc)
    if kind not in _SIMPLE:
        meta = doc.get("metadata")
        if not isinstance(meta, dict):
            meta = {}
        name = meta.get("name") or meta.get("generateName") or "?"
        warn(
            f"{where}: skipped {kind} {name} ({doc.get('apiVersion') or 'no apiVersion'}): "
            "not an object esched schedules or reads"
        )
        return
    yield _SIMPLE[kind][0], kind, doc, where


def events_from_documents(
    docs: Iterable[dict[str, Any]],
    *,
    source: str = DEFAULT_SOURCE,
    id_prefix: str | None = None,
    validate: bool = True,
    nodes: Sequence[dict[str, Any]] | None = None,
    warn: Warn | None = None,
    job_pods: bool = False,
) -> Iterator[dict[str, Any]]:
    """CloudEvents for Kubernetes / Volcano objects (see the module docstring).

    ``time`` is now (RFC 3339, UTC, one value for the whole call); ``subject`` is
    the event's stream (``pod/ns/name``). With ``validate`` (the default) every event
    is checked by :func:`~esched.schemas.validator.validate_event` (internal types
    allowed for pass-through CloudEvents), and an invalid one raises
    :class:`~esched.schemas.validator.InvalidEvent` whose message starts with the
    document index. A document without ``kind`` raises ``ValueError`` naming its index.

    Workload objects become their pods (:mod:`esched.schemas.workloads`); a DaemonSet
    runs on the ``nodes`` given, else on the Node objects of ``docs``. Kinds that do
    not affect scheduling are skipped, and ``warn`` (default: a log warning) gets one
    line for each.

    A Volcano Job is its ``esched.job.submitted`` alone: it implies its PodGroup and,
    stored by ingest, its first pods; the job controller creates the others (the
    pods are still built and validated here, so
    a template esched cannot run is refused at publish). ``job_pods`` also yields
    them, as Volcano's controller first creates them (the PodGroup equal to the one
    the Job implies): for readers of objects with no controller (``esched
    explain``, folds of a file).
    """
    time = ev.timestamp(timespec="milliseconds")
    docs = list(docs)
    if nodes is None:
        nodes = input_nodes(docs)
    say: Warn = warn or log.warning
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise ValueError(f"document {i}: expected an object, got {type(doc).__name__}")
        for etype, kind, obj, where in _objects(doc, f"document {i}", nodes, say):
            controlled = etype == _CONTROLLED
            if controlled:
                etype = ev.POD_SUBMITTED if kind == "Pod" else ev.PODGROUP_SUBMITTED
            if etype == "event":
                event = obj
            else:
                event = _envelope(
                    etype,
                    obj,
                    source,
                    id_prefix,
                    kind.lower(),
                    _NAMESPACED_TYPES.get(etype, False),
                    time,
                )
            if validate:
                try:
                    validate_event(event, allowed_types=ev.TYPES)
                except InvalidEvent as exc:
                    meta = obj.get("metadata") if etype != "event" else None
                    label = kind
                    if isinstance(meta, dict) and meta.get("name"):
                        label += f" {meta.get('name')}"
                    raise InvalidEvent(
                        exc.reason, f"{where} ({label}): {exc.message}", exc.field
                    ) from None
            if controlled and not job_pods:
                continue
            yield event
