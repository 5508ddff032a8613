"""Read scheduling facts out of Kubernetes-shaped objects (Node, Pod, PodGroup, Queue).

These are the only functions that know where in a manifest a fact lives; the
fold, the core's explain tool and the manifest converter all call them.
Quantities come back as integer base units (see :mod:`esched.schemas.quantity`).
"""

from __future__ import annotations

from typing import Any

from esched.schemas.quantity import resource_list

__all__ = [
    "GANG_ANNOTATIONS",
    "QUEUE_ANNOTATION",
    "gang_key",
    "node_allocatable",
    "object_key",
    "pod_limits",
    "pod_priority",
    "pod_queue",
    "pod_requests",
]

#: Pod annotations naming the gang (PodGroup) a pod belongs to, first match wins.
GANG_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
QUEUE_ANNOTATION = "volcano.sh/queue-name"
DEFAULT_QUEUE = "default"

#: Kubernetes' built-in priority classes; others resolve to ``spec.priority``.
BUILTIN_PRIORITY_CLASSES = {
    "system-node-critical": 2000001000,
    "system-cluster-critical": 2000000000,
}


def object_key(obj: dict[str, Any], namespaced: bool = True) -> str:
    """``namespace/name`` for namespaced objects (namespace defaults to ``default``)."""
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    if not namespaced:
        return name
    return f"{meta.get('namespace') or 'default'}/{name}"


def node_allocatable(node: dict[str, Any]) -> dict[str, int]:
    """``status.allocatable`` (falling back to ``status.capacity``) in base units."""
    status = node.get("status") or {}
    if status.get("allocatable"):
        return resource_list(status["allocatable"], "status.allocatable")
    return resource_list(status.get("capacity"), "status.capacity")


def _container_sum(containers: list[dict[str, Any]] | None, path: str, kind: str) -> dict[str, int]:
    total: dict[str, int] = {}
    for i, c in enumerate(containers or ()):
        res = c.get("resources") or {}
        # A resource with a limit and no request is requested at its limit (API defaulting).
        values = dict(res.get("limits") or {}) if kind == "requests" else {}
        values.update(res.get(kind) or {})
        for name, units in resource_list(values, f"{path}[{i}].resources.{kind}").items():
            total[name] = total.get(name, 0) + units
    return total


def _effective(pod: dict[str, Any], kind: str) -> dict[str, int]:
    spec = pod.get("spec") or {}
    total = _container_sum(spec.get("containers"), "spec.containers", kind)
    # Init containers run one at a time before the app containers: the pod needs the max.
    for i, c in enumerate(spec.get("initContainers") or ()):
        one = _container_sum([c], f"spec.initContainers[{i}]", kind)
        for name, units in one.items():
            if units > total.get(name, 0):
                total[name] = units
    for name, units in resource_list(spec.get("overhead"), "spec.overhead").items():
        total[name] = total.get(name, 0) + units
    return total


def pod_requests(pod: dict[str, Any]) -> dict[str, int]:
    """Effective requests as kube-scheduler computes them, plus ``pods: 1``.

    Sum over containers, max with each init container, plus ``spec.overhead``; a
    resource with only a limit is requested at the limit. The ``pods`` entry makes
    the node's pod-count limit an ordinary resource dimension.
    """
    requests = _effective(pod, "requests")
    requests["pods"] = 1
    return requests


def pod_limits(pod: dict[str, Any]) -> dict[str, int]:
    """Effective limits (same aggregation as requests), without ``pods``."""
    return _effective(pod, "limits")


def gang_key(pod: dict[str, Any]) -> str | None:
    """``namespace/group`` of the pod's PodGroup, or None for a pod on its own."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    for key in GANG_ANNOTATIONS:
        if annotations.get(key):
            return f"{meta.get('namespace') or 'default'}/{annotations[key]}"
    return None


def pod_queue(pod: dict[str, Any]) -> str:
    """The Volcano queue of a pod: annotation, else label, else ``default``."""
    meta = pod.get("metadata") or {}
    return (
        (meta.get("annotations") or {}).get(QUEUE_ANNOTATION)
        or (meta.get("labels") or {}).get(QUEUE_ANNOTATION)
        or DEFAULT_QUEUE
    )


def pod_priority(pod: dict[str, Any]) -> int:
    """``spec.priority``, else a built-in priority class's value, else 0."""
    spec = pod.get("spec") or {}
    if spec.get("priority") is not None:
        return int(spec["priority"])
    return BUILTIN_PRIORITY_CLASSES.get(spec.get("priorityClassName") or "", 0)
