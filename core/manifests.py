"""Load Kubernetes-shaped manifests (YAML or JSON) into a :class:`ClusterState`.

Accepts one object, a ``kind: List`` (or any object with ``items``), or a
multi-document YAML stream. Nodes fold as ``esched.node.added``, pods as
``esched.pod.submitted`` (a pod with ``spec.nodeName`` is running there),
PodGroups and Queues as their events; the same fold as everywhere else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from esched.core._state import ClusterState
from esched.schemas import events as ev

__all__ = ["load_objects", "state_from_objects"]

_EVENT_OF_KIND = {
    "Node": ev.NODE_ADDED,
    "Pod": ev.POD_SUBMITTED,
    "PodGroup": ev.PODGROUP_SUBMITTED,
    "Queue": ev.QUEUE_UPSERTED,
}


def _flatten(doc: Any) -> list[dict]:
    if doc is None:
        return []
    if isinstance(doc, list):
        return [o for d in doc for o in _flatten(d)]
    if not isinstance(doc, dict):
        raise ValueError(f"expected a Kubernetes object, got {type(doc).__name__}")
    if "items" in doc and (doc.get("kind", "List").endswith("List")):
        return [o for d in doc["items"] for o in _flatten(d)]
    return [doc]


def load_objects(path: str | Path) -> list[dict]:
    """Every object in a YAML/JSON file (List, multi-document, or single object)."""
    with open(path, encoding="utf-8") as fh:
        return [o for d in yaml.safe_load_all(fh) for o in _flatten(d)]


def state_from_objects(objects: list[dict]) -> ClusterState:
    """Fold nodes first, then the rest in file order (so running pods find their node)."""
    state = ClusterState()
    ordered = [o for o in objects if o.get("kind") == "Node"]
    ordered += [o for o in objects if o.get("kind") != "Node"]
    events = []
    for obj in ordered:
        etype = _EVENT_OF_KIND.get(obj.get("kind", ""))
        if etype is None:
            continue
        events.append(
            (len(events) + 1, {"type": etype, "id": f"manifest-{len(events)}", "data": obj})
        )
    state.apply_many(events)
    return state
