"""Kubernetes workload objects as the pods their controllers would create (pure).

A user's manifest set names Deployments, StatefulSets, Jobs... rather than pods. Each
controller's pods are made here from the pod template, with the names the controller
gives them, so that the same file always yields the same pods (and, through
:mod:`esched.schemas.manifests`, the same event ids):

==============================  ======================================================
object                          pods
==============================  ======================================================
Deployment (apps)               ``replicas`` (default 1) of its ReplicaSet
                                ``<name>-<pod-template-hash>``: ``<rs>-<suffix>``,
                                label ``pod-template-hash``
ReplicaSet (apps),              ``replicas`` (default 1): ``<name>-<suffix>``
ReplicationController (v1)
StatefulSet (apps)              ``<name>-<ordinal>`` for ``spec.ordinals.start`` ..
                                start+replicas-1, labels
                                ``statefulset.kubernetes.io/pod-name`` and
                                ``apps.kubernetes.io/pod-index``
DaemonSet (apps)                one per matching node of the input: ``<name>-<suffix>``,
                                the node as ``matchFields metadata.name In [node]``
                                required node affinity and the daemon tolerations, as
                                kube's daemon controller sets them
Job (batch)                     ``min(parallelism, completions)`` pods (parallelism
                                defaults to 1): ``<name>-<suffix>``, Indexed mode
                                ``<name>-<index>-<suffix>`` with the completion-index
                                annotation; none while ``suspend``
CronJob (batch)                 one run: the Job ``<name>-<minutes>`` of its
                                ``jobTemplate`` (scheduled at ``creationTimestamp``,
                                else at minute 0), then as a Job
Pod with ``generateName``       ``<generateName><suffix>``
==============================  ======================================================

``<suffix>`` is five characters of kube's name-generator alphabet, taken from a hash
of the object and the pod's index (kube draws them at random; here they are
deterministic). The pod-template hash is the FNV-1a of the template's canonical JSON,
safe-encoded as kube's ``ComputeHash`` encodes its own (kube hashes Go's printed
struct, so the value differs from a live cluster's; the shape is the same).

Kinds that do not affect scheduling (ConfigMap, Service, Secret, ...) are skipped
by the caller with a warning: :func:`skip_reason` says why.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson

from esched.schemas.events import DEFAULT_NAMESPACE
from esched.schemas.objects import NODE_NAME_FIELD

__all__ = [
    "DAEMON_TOLERATIONS",
    "NAME_ALPHABET",
    "WORKLOAD_KINDS",
    "cron_run_name",
    "daemon_pod_affinity",
    "generated_name",
    "node_matches",
    "pod_template_hash",
    "workload_pods",
]

#: kube's ``utilrand`` alphabet (no vowels, no look-alike digits).
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
#: ``generateName`` keeps 63 - 5 characters of its base, as kube's name generator does.
_MAX_GENERATED_BASE = 58

#: kind -> accepted API groups ("" is the core group).
WORKLOAD_KINDS: dict[str, tuple[str, ...]] = {
    "Deployment": ("apps", "extensions"),
    "ReplicaSet": ("apps", "extensions"),
    "ReplicationController": ("",),
    "StatefulSet": ("apps",),
    "DaemonSet": ("apps", "extensions"),
    "Job": ("batch",),
    "CronJob": ("batch",),
}

#: The tolerations kube's daemon controller adds to every daemon pod
#: (pkg/controller/daemon/util/daemonset_util.go, AddOrUpdateDaemonPodTolerations).
DAEMON_TOLERATIONS: tuple[dict[str, str], ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
_NETWORK_UNAVAILABLE = {
    "key": "node.kubernetes.io/network-unavailable",
    "operator": "Exists",
    "effect": "NoSchedule",
}


def _digest(*parts: Any) -> bytes:
    canonical = orjson.dumps(parts, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.sha256(canonical).digest()


def generated_name(base: str, *seed: Any) -> str:
    """``base`` plus five characters of :data:`NAME_ALPHABET` drawn from ``seed``: a
    ``generateName`` made deterministic."""
    digest = _digest(base, *seed)
    suffix = "".join(NAME_ALPHABET[b % len(NAME_ALPHABET)] for b in digest[:5])
    return base[:_MAX_GENERATED_BASE] + suffix


def _fnv32a(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def pod_template_hash(template: dict[str, Any]) -> str:
    """The ``pod-template-hash`` of a template: FNV-1a 32, decimal, safe-encoded
    (kube's ``controller.ComputeHash`` and ``rand.SafeEncodeString``)."""
    digits = str(_fnv32a(orjson.dumps(template, option=orjson.OPT_SORT_KEYS)))
    return "".join(NAME_ALPHABET[ord(c) % len(NAME_ALPHABET)] for c in digits)


def _replicas(spec: dict[str, Any], field: str, default: int, where: str) -> int:
    value = spec.get(field, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: spec.{field} must be an integer >= 0, got {value!r}")
    return value


def _pod(
    template: dict[str, Any],
    name: str,
    namespace: str,
    owner: tuple[str, str, str],
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta = copy.deepcopy(template.get("metadata") or {})
    meta.pop("generateName", None)
    meta["name"] = name
    meta["namespace"] = namespace
    if labels:
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
    if annotations:
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    api_version, kind, owner_name = owner
    meta["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": owner_name, "controller": True}
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


# ----------------------------------------------------------------- node matching


def _requirement(req: dict[str, Any], value: str | None) -> bool:
    op = req.get("operator")
    values = [str(v) for v in req.get("values") or ()]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _term(term: dict[str, Any], name: str, labels: dict[str, Any]) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # kube: an empty term matches nothing
    return all(_requirement(e, _str(labels.get(e.get("key", "")))) for e in exprs) and all(
        _requirement(f, name if f.get("key") == NODE_NAME_FIELD else None) for f in fields
    )


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _tolerated(taint: dict[str, Any], tolerations: Sequence[dict[str, Any]]) -> bool:
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = t.get("key") or ""
        if t.get("operator") == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def node_matches(pod_spec: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether kube's daemon controller would run this pod on ``node``: its
    ``nodeSelector``, required node affinity and NoSchedule / NoExecute taints
    (``nodeShouldRunDaemonPod``: NodeAffinity and TaintToleration)."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name") or "")
    labels = meta.get("labels") or {}
    for k, v in (pod_spec.get("nodeSelector") or {}).items():
        if _str(labels.get(k)) != str(v):
            return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if terms is not None and not any(_term(t or {}, name, labels) for t in terms):
        return False
    tolerations = pod_spec.get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or ():
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(
            taint, tolerations
        ):
            return False
    return True


def daemon_pod_affinity(affinity: dict[str, Any] | None, node_name: str) -> dict[str, Any]:
    """``affinity`` with its required node affinity replaced by ``matchFields
    metadata.name In [node_name]``, as kube's ``ReplaceDaemonSetPodNodeNameNodeAffinity``
    does (the other parts of the affinity are kept)."""
    out = copy.deepcopy(affinity or {})
    node_affinity = out.setdefault("nodeAffinity", {})
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": NODE_NAME_FIELD, "operator": "In", "values": [node_name]}]}
        ]
    }
    return out


def _daemon_spec(spec: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    tolerations = list(out.get("tolerations") or [])
    wanted = list(DAEMON_TOLERATIONS)
    if out.get("hostNetwork"):
        wanted.append(_NETWORK_UNAVAILABLE)
    for tol in wanted:
        # AddOrUpdateTolerationInPodSpec: one toleration per key and effect.
        tolerations = [
            t for t in tolerations if (t.get("key"), t.get("effect")) != (tol["key"], tol["effect"])
        ]
        tolerations.append(dict(tol))
    out["tolerations"] = tolerations
    return out


# -------------------------------------------------------------------- expansion


def _job_pods(
    job: dict[str, Any], name: str, namespace: str, owner: tuple[str, str, str], where: str
) -> tuple[list[dict[str, Any]], str | None]:
    spec = job.get("spec") or {}
    template = spec.get("template") or {}
    if spec.get("suspend"):
        return [], f"{where}: Job {namespace}/{name} is suspended; no pods"
    parallelism = _replicas(spec, "parallelism", 1, where)
    if spec.get("completions") is None:
        count = parallelism
    else:
        count = min(parallelism, _replicas(spec, "completions", 1, where))
    indexed = spec.get("completionMode") == "Indexed"
    labels = {"batch.kubernetes.io/job-name": name, "job-name": name}
    pods = []
    for i in range(count):
        if indexed:
            pod_name = generated_name(f"{name}-{i}-", namespace, name, i)
            annotations = {"batch.kubernetes.io/job-completion-index": str(i)}
            pod_labels = {**labels, "batch.kubernetes.io/job-completion-index": str(i)}
            pods.append(_pod(template, pod_name, namespace, owner, pod_labels, annotations))
        else:
            pod_name = generated_name(f"{name}-", namespace, name, i)
            pods.append(_pod(template, pod_name, namespace, owner, labels))
    return pods, None


def cron_run_name(meta: dict[str, Any]) -> str:
    """The name of a CronJob's one run: ``<name>-<minutes>`` as kube's CronJob
    controller names the Job of a scheduled time (``getJobName``: Unix minutes), the
    time being ``creationTimestamp``, else minute 0 (deterministic)."""
    stamp = meta.get("creationTimestamp")
    minutes = 0
    if isinstance(stamp, str):
        try:
            minutes = int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()) // 60
        except ValueError:
            minutes = 0
    return f"{meta.get('name')}-{minutes}"


def workload_pods(
    doc: dict[str, Any], nodes: Sequence[dict[str, Any]], where: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """The pods a workload object's controller would create, and warnings (a DaemonSet
    that matches no node of the input, a suspended Job). ``nodes``: the Node objects
    of the input (a DaemonSet runs one pod on each that matches). Raises
    ``ValueError`` naming ``where`` for an object its controller would refuse."""
    kind = str(doc.get("kind"))
    meta = doc.get("metadata") or {}
    spec = doc.get("spec") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: {kind} without metadata.name")
    namespace = meta.get("namespace") or DEFAULT_NAMESPACE
    owner = (str(doc.get("apiVersion") or ""), kind, name)
    if kind == "CronJob":
        job_template = spec.get("jobTemplate") or {}
        job_name = cron_run_name(meta)
        job = {"apiVersion": "batch/v1", "kind": "Job", "spec": job_template.get("spec") or {}}
        pods, warning = _job_pods(job, job_name, namespace, ("batch/v1", "Job", job_name), where)
        return pods, [warning] if warning else []
    if kind == "Job":
        pods, warning = _job_pods(doc, name, namespace, owner, where)
        return pods, [warning] if warning else []
    template = spec.get("template")
    if not isinstance(template, dict):
        raise ValueError(f"{where}: {kind} {namespace}/{name} has no spec.template")
    if kind == "DaemonSet":
        pod_spec = _daemon_spec(template.get("spec") or {})
        pods = []
        for node in nodes:
            if not node_matches(pod_spec, node):
                continue
            node_name = str((node.get("metadata") or {}).get("name") or "")
            pod = _pod(
                {**template, "spec": pod_spec},
                generated_name(f"{name}-", namespace, name, node_name),
                namespace,
                owner,
            )
            pod["spec"]["affinity"] = daemon_pod_affinity(pod_spec.get("affinity"), node_name)
            pods.append(pod)
        warnings = []
        if not pods:
            warnings.append(
                f"{where}: DaemonSet {namespace}/{name} matches no Node of the input; no pods"
            )
        return pods, warnings
    if kind == "StatefulSet":
        replicas = _replicas(spec, "replicas", 1, where)
        start = _replicas(spec.get("ordinals") or {}, "start", 0, where)
        pods = []
        for ordinal in range(start, start + replicas):
            pod_name = f"{name}-{ordinal}"
            labels = {
                "statefulset.kubernetes.io/pod-name": pod_name,
                "apps.kubernetes.io/pod-index": str(ordinal),
            }
            pods.append(_pod(template, pod_name, namespace, owner, labels))
        return pods, []
    replicas = _replicas(spec, "replicas", 1, where)
    if kind == "Deployment":
        template_hash = pod_template_hash(template)
        rs_name = f"{name}-{template_hash}"
        rs_owner = ("apps/v1", "ReplicaSet", rs_name)
        return [
            _pod(
                template,
                generated_name(f"{rs_name}-", namespace, rs_name, i),
                namespace,
                rs_owner,
                {"pod-template-hash": template_hash},
            )
            for i in range(replicas)
        ], []
    # ReplicaSet, ReplicationController
    return [
        _pod(template, generated_name(f"{name}-", namespace, name, i), namespace, owner)
        for i in range(replicas)
    ], []
