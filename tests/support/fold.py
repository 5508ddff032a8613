"""Fold-level builders: Kubernetes-shaped objects and stored event envelopes, for the
core tests (the state folds them as the store would hand them over)."""

from __future__ import annotations

import itertools
from typing import Any

from esched.schemas import events as ev

_ids = itertools.count(1)


def envelope(etype: str, data: Any, time: str | None = None) -> dict:
    """A stored event envelope as the store hands it to the fold (with ``time`` when
    given: the usage clock reads it)."""
    e = {"type": etype, "id": f"evt-{next(_ids)}", "source": "tests", "data": data}
    if time is not None:
        e["time"] = time
    return e


def node(
    name: str,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: str = "110",
    labels=None,
    taints=None,
    unschedulable: bool = False,
    **extra: str,
) -> dict:
    alloc = {"cpu": cpu, "memory": memory, "pods": pods, **extra}
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"allocatable": alloc},
    }


def pod(
    name: str,
    cpu: str | None = "500m",
    memory: str | None = "1Gi",
    namespace: str = "ns",
    gang: str | None = None,
    queue: str | None = None,
    node_name: str | None = None,
    priority: int | None = None,
    **spec_extra: Any,
) -> dict:
    requests = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    annotations = {}
    if gang:
        annotations["scheduling.k8s.io/group-name"] = gang
    if queue:
        annotations["volcano.sh/queue-name"] = queue
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": requests}}]}
    if node_name:
        spec["nodeName"] = node_name
    if priority is not None:
        spec["priority"] = priority
    spec.update(spec_extra)
    return {
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": spec,
    }


def ref(name: str, namespace: str = "ns") -> dict:
    return {"metadata": {"name": name, "namespace": namespace}}


def commit(*bindings: tuple[str, str, dict], gang: str | None = None) -> dict:
    return {
        "proposal": f"prop-{next(_ids)}",
        "replica": "r1",
        "position": 0,
        "gang": gang,
        "bindings": [{"pod": p, "node": n, "resources": r} for p, n, r in bindings],
    }


class Log:
    """Appends envelopes at increasing positions and folds them into a state."""

    def __init__(self, state) -> None:
        self.state = state
        self.position = state.position
        self.events: list[tuple[int, dict]] = []

    def __call__(self, etype: str, data: Any, time: str | None = None) -> None:
        self.position += 1
        e = envelope(etype, data, time)
        self.events.append((self.position, e))
        self.state.apply(e, self.position)


EV = ev
