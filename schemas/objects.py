"""Read scheduling facts out of Kubernetes-shaped objects (Node, Pod, PodGroup, Queue).

These are the only functions that know where in a manifest a fact lives; the
fold, the core's explain tool and the manifest converter all call them.
Quantities come back as integer base units (see :mod:`esched.schemas.quantity`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import orjson

from esched.schemas._requests import (
    AGGREGATED_SPEC_FIELDS,
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    pod_level_resource,
    pod_totals,
)
from esched.schemas.events import metadata_key, namespaced_key
from esched.schemas.quantity import resource_list, to_base_units

__all__ = [
    "AGGREGATED_SPEC_FIELDS",
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "GANG_ANNOTATIONS",
    "NODE_NAME_FIELD",
    "PER_POD_LABELS",
    "QUEUE_ANNOTATION",
    "QUEUE_ANNOTATIONS",
    "SPREAD_DEFAULT_OWNERS",
    "decoded_json_copy",
    "gang_key",
    "global_default_class",
    "json_copy",
    "node_allocatable",
    "nonzero_requests",
    "object_key",
    "pod_host_ports",
    "pod_level_resource",
    "pod_limits",
    "pod_preemptable",
    "pod_priority",
    "pod_queue",
    "pod_requests",
    "pod_resource_requests",
    "spread_default_labels",
]

#: Pod annotations naming the gang (PodGroup) a pod belongs to, first match wins.
GANG_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
QUEUE_ANNOTATION = "volcano.sh/queue-name"
#: Pod annotation (or label) keys naming its Volcano queue, first match wins:
#: ``volcano.sh/queue-name`` (what Volcano's job controller puts on a Job's pods) and
#: ``scheduling.volcano.sh/queue-name`` (Volcano's ``QueueNameAnnotationKey``, read by
#: its PodGroup controller for a plain pod and used by its ``example/`` manifests).
QUEUE_ANNOTATIONS = (QUEUE_ANNOTATION, "scheduling.volcano.sh/queue-name")
DEFAULT_QUEUE = "default"
#: Pod annotation (or label): ``"false"`` keeps the pod from ever being a reclaim or
#: preemption victim (Volcano's ``PodPreemptable``).
PREEMPTABLE_KEY = "volcano.sh/preemptable"
#: Go's ``strconv.ParseBool`` spellings, which Volcano parses the value with.
_GO_BOOLS = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}

#: The field a node affinity's ``matchFields`` may name (kube: ``metav1.ObjectNameField``,
#: the only field it supports); a DaemonSet's pods name their node by it.
NODE_NAME_FIELD = "metadata.name"

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


#: ``units(resource, value, field) -> base units``: :func:`to_base_units`, or a
#: memoized equivalent (the validator's).
Units = Callable[[str, Any, str], int]


class PodRequests(NamedTuple):
    """A pod's requests, both ways kube-scheduler counts them."""

    #: Effective requests for fitting, plus ``pods: 1``.
    fit: dict[str, int]
    #: ``(milli-CPU, memory bytes)`` for resource scoring: a container that sets no
    #: cpu (memory) request counts as :data:`DEFAULT_MILLI_CPU_REQUEST`
    #: (:data:`DEFAULT_MEMORY_REQUEST`); an explicit ``0`` stays 0.
    nonzero: tuple[int, int]


def pod_resource_requests(pod: dict[str, Any], units: Units = to_base_units) -> PodRequests:
    """The rule for a pod's requests, fit and scoring in one walk of its containers
    (its one home, shared with the fold: ``schemas/_requests.pyx``).

    Fit, as kube's ``resource.PodRequests``: sum over containers and sidecar
    containers (init containers with ``restartPolicy: Always``), max with each init
    container plus the sidecars started before it; pod-level ``spec.resources``
    requests (cpu, memory, hugepages) replace the sum for those resources; plus
    ``spec.overhead``; a resource with only a limit is requested at the limit; plus
    ``pods: 1``, which
    makes the node's pod-count limit an ordinary resource dimension. Scoring
    (NodeResourcesFit strategies, ``pkg/scheduler/util.GetNonzeroRequests``) is the
    same aggregation of cpu and memory, with non-zero defaults per container.
    Resources keep the order of first sight (limit-only ones before requests within
    a container): the fold's equivalence classes key on it.

    Raises ``QuantityError`` naming the field at fault (with the default ``units``).
    """
    fit, cpu, mem = pod_totals(pod.get("spec") or {}, "requests", units)
    return PodRequests(fit, (cpu, mem))


def pod_requests(pod: dict[str, Any]) -> dict[str, int]:
    """Effective requests for fitting (:func:`pod_resource_requests`), with ``pods: 1``."""
    return pod_resource_requests(pod).fit


def nonzero_requests(pod: dict[str, Any]) -> tuple[int, int]:
    """``(milli-CPU, memory bytes)`` as kube scores (:func:`pod_resource_requests`)."""
    return pod_resource_requests(pod).nonzero


def pod_limits(pod: dict[str, Any]) -> dict[str, int]:
    """Effective limits (same aggregation as requests), without ``pods``."""
    return pod_totals(pod.get("spec") or {}, "limits", to_base_units)[0]


#: kube's DefaultBindAllHostIP: a host port on every address of the node.
BIND_ALL_HOST_IP = "0.0.0.0"


def pod_host_ports(spec: dict[str, Any]) -> list[list[Any]]:
    """The host ports a pod spec binds on its node, ``[hostIP, protocol, hostPort]``
    sorted and unique (kube's ``GetHostPorts`` with ``HostPortInfo.sanitize``): the
    containers' and the sidecars' (init containers with ``restartPolicy: Always``)
    ``ports[]`` with a ``hostPort``; ``hostIP`` defaults to 0.0.0.0, ``protocol`` to
    TCP."""
    out: set[tuple[str, str, int]] = set()
    containers = list(spec.get("containers") or ())
    init = spec.get("initContainers") or ()
    containers += [c for c in init if c.get("restartPolicy") == "Always"]
    for c in containers:
        for port in c.get("ports") or ():
            host_port = port.get("hostPort") or 0
            if host_port > 0:
                ip = port.get("hostIP") or BIND_ALL_HOST_IP
                out.add((ip, port.get("protocol") or "TCP", int(host_port)))
    return [list(t) for t in sorted(out)]


def gang_key(pod: dict[str, Any]) -> str | None:
    """``namespace/group`` of the pod's PodGroup, or None for a pod on its own."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    for key in GANG_ANNOTATIONS:
        if annotations.get(key):
            return namespaced_key(meta.get("namespace"), annotations[key])
    return None


#: The controllers whose selector kube's PodTopologySpread takes for a pod's default
#: constraints (helper.DefaultSelector: ReplicationController, ReplicaSet, StatefulSet;
#: Services too, which esched does not fold), as the pod's controller ownerReference
#: names them (apiVersion, kind).
SPREAD_DEFAULT_OWNERS = frozenset(
    {("v1", "ReplicationController"), ("apps/v1", "ReplicaSet"), ("apps/v1", "StatefulSet")}
)
#: Labels a controller sets on one pod only (the StatefulSet controller's per-pod
#: labels): not part of the workload's selector.
PER_POD_LABELS = frozenset({"statefulset.kubernetes.io/pod-name", "apps.kubernetes.io/pod-index"})


def spread_default_labels(meta: dict[str, Any]) -> dict[str, str] | None:
    """The selector (``matchLabels``) of a pod's default topology spread constraints,
    or None when kube would give it none.

    kube takes the selector of the pod's controller (its ``controller: true``
    ownerReference: a ReplicaSet, ReplicationController or StatefulSet) merged with
    those of the Services selecting it. esched folds none of those objects, so the
    selector is the pod's own labels without :data:`PER_POD_LABELS`: the labels its
    controller's template gave it, of which the controller's selector is a subset
    (kube's validation requires the selector to match the template). None for a pod
    without such a controller, or without labels left (kube: an empty selector, no
    default constraints)."""
    for ref in meta.get("ownerReferences") or ():
        if not isinstance(ref, dict) or ref.get("controller") is not True:
            continue
        if (ref.get("apiVersion"), ref.get("kind")) not in SPREAD_DEFAULT_OWNERS:
            return None
        labels = meta.get("labels") or {}
        sel = {str(k): str(v) for k, v in labels.items() if k not in PER_POD_LABELS}
        return sel or None
    return None


def pod_preemptable(pod: dict[str, Any]) -> bool:
    """Volcano's ``GetPodPreemptable``: the :data:`PREEMPTABLE_KEY` annotation, else such
    a label, parsed as Go parses a bool (a value it cannot parse: False); True when
    neither names it."""
    meta = pod.get("metadata") or {}
    for where in (meta.get("annotations"), meta.get("labels")):
        if where and PREEMPTABLE_KEY in where:
            return _GO_BOOLS.get(str(where[PREEMPTABLE_KEY]), False)
    return True


def pod_queue(pod: dict[str, Any]) -> str:
    """The Volcano queue of a pod: an annotation of :data:`QUEUE_ANNOTATIONS`, else
    such a label, else ``default``."""
    meta = pod.get("metadata") or {}
    for where in (meta.get("annotations"), meta.get("labels")):
        if where:
            for key in QUEUE_ANNOTATIONS:
                if where.get(key):
                    return str(where[key])
    return DEFAULT_QUEUE


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


def json_copy(value: Any) -> Any:
    """A deep copy of decoded JSON (dicts, lists, immutable scalars), as
    :func:`copy.deepcopy` makes it at a fraction of its cost (a Job is copied to be
    defaulted per submission, a task's pod built from its template per pod);
    anything else is handed to :func:`copy.deepcopy`."""
    kind = type(value)
    if kind is dict:
        return {k: json_copy(v) for k, v in value.items()}
    if kind is list:
        return [json_copy(v) for v in value]
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    return copy.deepcopy(value)


def decoded_json_copy(value: Any) -> Any:
    """A deep copy of JSON as :func:`orjson.loads` decoded it (string keys, 64-bit
    integers, finite floats: what it encodes back to the same JSON), by encoding it
    and decoding that: about a quarter of :func:`json_copy`'s cost for a pod's
    template. Not for values from elsewhere (YAML's ``.nan`` would come back null, a
    tuple a list); one ``orjson.dumps`` refuses is copied by :func:`json_copy`."""
    try:
        return orjson.loads(orjson.dumps(value))
    except TypeError:  # orjson.JSONEncodeError: a key or integer it cannot encode
        return json_copy(value)
