"""Read scheduling facts out of Kubernetes-shaped objects (Node, Pod, PodGroup, Queue).

These are the only functions that know where in a manifest a fact lives; the
fold, the core's explain tool and the manifest converter all call them.
Quantities come back as integer base units (see :mod:`esched.schemas.quantity`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from esched.schemas.events import metadata_key, namespaced_key
from esched.schemas.quantity import resource_list, to_base_units

__all__ = [
    "AGGREGATED_SPEC_FIELDS",
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "GANG_ANNOTATIONS",
    "NODE_NAME_FIELD",
    "NODE_NAME_LABEL",
    "QUEUE_ANNOTATION",
    "gang_key",
    "global_default_class",
    "node_allocatable",
    "nonzero_requests",
    "object_key",
    "pod_limits",
    "pod_priority",
    "pod_queue",
    "pod_requests",
    "pod_resource_requests",
]

#: Pod annotations naming the gang (PodGroup) a pod belongs to, first match wins.
GANG_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
QUEUE_ANNOTATION = "volcano.sh/queue-name"
DEFAULT_QUEUE = "default"

#: The field a node affinity's ``matchFields`` may name (kube: ``metav1.ObjectNameField``,
#: the only field it supports); a DaemonSet's pods name their node by it.
NODE_NAME_FIELD = "metadata.name"
#: The label the fold interns a node's name under, for ``matchFields metadata.name``
#: (``:`` cannot occur in a label key, so no real label collides).
NODE_NAME_LABEL = "field:metadata.name"

#: Kubernetes' built-in priority classes; others resolve to ``spec.priority``.
BUILTIN_PRIORITY_CLASSES = {
    "system-node-critical": 2000001000,
    "system-cluster-critical": 2000000000,
}


def object_key(obj: dict[str, Any], namespaced: bool = True) -> str:
    """``namespace/name`` for namespaced objects (namespace defaults to ``default``)."""
    meta = obj.get("metadata") or {}
    if not namespaced:
        return meta.get("name", "")
    return metadata_key(meta)


def node_allocatable(node: dict[str, Any]) -> dict[str, int]:
    """``status.allocatable`` (falling back to ``status.capacity``) in base units."""
    status = node.get("status") or {}
    if status.get("allocatable"):
        return resource_list(status["allocatable"], "status.allocatable")
    return resource_list(status.get("capacity"), "status.capacity")


#: kube-scheduler's schedutil.DefaultMilliCPURequest: what a container without a cpu
#: request counts as requesting when *scoring* (never when fitting).
DEFAULT_MILLI_CPU_REQUEST = 100
#: kube-scheduler's schedutil.DefaultMemoryRequest (200 MiB), likewise for memory.
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

#: Pod spec fields besides ``containers`` that :func:`pod_resource_requests` takes
#: into account. A pod with none of them set is a plain sum over its containers: the
#: fold inlines that case (``core/_state.pyx``), so a new field (pod-level resources,
#: say) goes here as well as into the aggregation.
AGGREGATED_SPEC_FIELDS = ("initContainers", "overhead")

#: ``units(resource, value, field) -> base units``: :func:`to_base_units`, or a
#: memoized equivalent (the fold's).
Units = Callable[[str, Any, str], int]


class PodRequests(NamedTuple):
    """A pod's requests, both ways kube-scheduler counts them."""

    #: Effective requests for fitting, plus ``pods: 1``.
    fit: dict[str, int]
    #: ``(milli-CPU, memory bytes)`` for resource scoring: a container that sets no
    #: cpu (memory) request counts as :data:`DEFAULT_MILLI_CPU_REQUEST`
    #: (:data:`DEFAULT_MEMORY_REQUEST`); an explicit ``0`` stays 0.
    nonzero: tuple[int, int]


def _container(
    c: dict[str, Any], path: str, kind: str, units: Units
) -> tuple[dict[str, int], int, int]:
    # One container's quantities of ``kind`` and its non-zero cpu and memory. A
    # resource with a limit and no request is requested at its limit (API defaulting).
    res = c.get("resources") or {}
    values = res.get(kind) or {}
    field = f"{path}.resources.{kind}."
    out: dict[str, int] = {}
    if kind == "requests":
        limits = res.get("limits")
        if limits:
            for name, value in limits.items():
                if name not in values:
                    out[name] = units(name, value, field + name)
    for name, value in values.items():
        out[name] = units(name, value, field + name)
    return out, out.get("cpu", DEFAULT_MILLI_CPU_REQUEST), out.get("memory", DEFAULT_MEMORY_REQUEST)


def _walk(pod: dict[str, Any], kind: str, units: Units) -> tuple[dict[str, int], int, int]:
    # The one aggregation (kube's PodRequests / GetNonzeroRequests): sum over
    # containers, max with each init container (they run one at a time before the
    # app containers), plus spec.overhead.
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    cpu = mem = 0
    for i, c in enumerate(spec.get("containers") or ()):
        one, c_cpu, c_mem = _container(c, f"spec.containers[{i}]", kind, units)
        for name, u in one.items():
            total[name] = total.get(name, 0) + u
        cpu += c_cpu
        mem += c_mem
    for i, c in enumerate(spec.get("initContainers") or ()):
        one, c_cpu, c_mem = _container(c, f"spec.initContainers[{i}]", kind, units)
        for name, u in one.items():
            if u > total.get(name, 0):
                total[name] = u
        cpu = max(cpu, c_cpu)
        mem = max(mem, c_mem)
    for name, value in (spec.get("overhead") or {}).items():
        u = units(name, value, f"spec.overhead.{name}")
        total[name] = total.get(name, 0) + u
        if name == "cpu":
            cpu += u
        elif name == "memory":
            mem += u
    return total, cpu, mem


def pod_resource_requests(pod: dict[str, Any], units: Units = to_base_units) -> PodRequests:
    """The rule for a pod's requests, fit and scoring in one walk of its containers.

    Fit: sum over containers, max with each init container, plus ``spec.overhead``;
    a resource with only a limit is requested at the limit; plus ``pods: 1``, which
    makes the node's pod-count limit an ordinary resource dimension. Scoring
    (NodeResourcesFit strategies, ``pkg/scheduler/util.GetNonzeroRequests``) is the
    same aggregation of cpu and memory, with non-zero defaults per container.
    Resources keep the order of first sight (limit-only ones before requests within
    a container): the fold's equivalence classes key on it.

    Raises ``QuantityError`` naming the field at fault (with the default ``units``).
    """
    fit, cpu, mem = _walk(pod, "requests", units)
    fit["pods"] = 1
    return PodRequests(fit, (cpu, mem))


def pod_requests(pod: dict[str, Any]) -> dict[str, int]:
    """Effective requests for fitting (:func:`pod_resource_requests`), with ``pods: 1``."""
    return pod_resource_requests(pod).fit


def nonzero_requests(pod: dict[str, Any]) -> tuple[int, int]:
    """``(milli-CPU, memory bytes)`` as kube scores (:func:`pod_resource_requests`)."""
    return pod_resource_requests(pod).nonzero


def pod_limits(pod: dict[str, Any]) -> dict[str, int]:
    """Effective limits (same aggregation as requests), without ``pods``."""
    return _walk(pod, "limits", to_base_units)[0]


def gang_key(pod: dict[str, Any]) -> str | None:
    """``namespace/group`` of the pod's PodGroup, or None for a pod on its own."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    for key in GANG_ANNOTATIONS:
        if annotations.get(key):
            return namespaced_key(meta.get("namespace"), annotations[key])
    return None


def pod_queue(pod: dict[str, Any]) -> str:
    """The Volcano queue of a pod: annotation, else label, else ``default``."""
    meta = pod.get("metadata") or {}
    return (
        (meta.get("annotations") or {}).get(QUEUE_ANNOTATION)
        or (meta.get("labels") or {}).get(QUEUE_ANNOTATION)
        or DEFAULT_QUEUE
    )


def pod_priority(pod: dict[str, Any], classes: dict[str, dict[str, Any]] | None = None) -> int:
    """A pod's priority as kube's Priority admission resolves it: ``spec.priority``;
    else its ``priorityClassName``'s value (a PriorityClass of ``classes``, else a
    built-in class); else, naming no class, the ``globalDefault`` class's value; else 0.
    ``classes``: PriorityClass name -> ``{"value", "globalDefault", "preemptionPolicy"}``
    (what the fold keeps of ``esched.priorityclass.upserted``)."""
    spec = pod.get("spec") or {}
    if spec.get("priority") is not None:
        return int(spec["priority"])
    name = spec.get("priorityClassName") or ""
    if classes:
        if name:
            pc = classes.get(name)
            if pc is not None:
                return int(pc["value"])
        else:
            default = global_default_class(classes)
            if default is not None:
                return int(classes[default]["value"])
    return BUILTIN_PRIORITY_CLASSES.get(name, 0)


def global_default_class(classes: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The ``globalDefault`` PriorityClass of ``classes`` (the lowest value if several
    claim it, as kube's admission picks), else None."""
    best: str | None = None
    for name, pc in classes.items():
        if pc.get("globalDefault") and (best is None or pc["value"] < classes[best]["value"]):
            best = name
    return best
