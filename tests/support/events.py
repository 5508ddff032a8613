"""Hand-made events for service tests: clusters small enough that a test can state
their arithmetic (node ``n1`` has 2 CPUs, pod ``a`` asks for 1).

Names are short on purpose: a test reads as the log it builds,
``[node("n1"), pod("a"), podgroup("g", 2), pod("g0", gang="g")]``.
"""

from __future__ import annotations

import orjson

from esched.schemas import events as ev_types
from esched.schemas.events import stream_of
from esched.services.store import EventStore, NewEvent

GIB = 2**30
#: The namespace of every hand-made pod and PodGroup.
NAMESPACE = "t"


def ev(eid: str, type_: str, data: dict) -> dict:
    """A CloudEvents envelope with a fixed time (tests never depend on the clock)."""
    return {
        "specversion": "1.0",
        "id": eid,
        "source": "test",
        "type": type_,
        "time": "2026-11-22T00:00:00Z",
        "data": data,
    }


def node(
    name: str,
    cpu: str = "2",
    *,
    memory: str = "8Gi",
    pods: str = "10",
    labels: dict | None = None,
    taints: list | None = None,
    eid: str | None = None,
    type_: str = ev_types.NODE_ADDED,
) -> dict:
    """``esched.node.added`` (or ``type_``) for a node with this allocatable."""
    spec: dict = {"taints": taints} if taints else {}
    return ev(
        eid or f"node-{name}",
        type_,
        {
            "metadata": {"name": name, "labels": labels or {}},
            "spec": spec,
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods}},
        },
    )


def pod(
    name: str,
    cpu: str = "1",
    gang: str | None = None,
    *,
    memory: str = "1Gi",
    priority: int | None = None,
    node_name: str | None = None,
    gates: list[str] | None = None,
) -> dict:
    """``esched.pod.submitted`` for ``t/<name>``, a member of PodGroup ``gang`` if given,
    with ``spec.priority``, already running on ``node_name`` and waiting for
    scheduling ``gates`` if given."""
    meta: dict = {"name": name, "namespace": NAMESPACE}
    if gang:
        meta["annotations"] = {"scheduling.k8s.io/group-name": gang}
    spec: dict = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
    }
    if priority is not None:
        spec["priority"] = priority
    if node_name is not None:
        spec["nodeName"] = node_name
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return ev(f"pod-{name}", ev_types.POD_SUBMITTED, {"metadata": meta, "spec": spec})


def pod_update(name: str, gates: list[str], *, eid: str | None = None) -> dict:
    """``esched.pod.updated`` of ``t/<name>``: its scheduling gates are now ``gates``."""
    spec = {"schedulingGates": [{"name": g} for g in gates]}
    return ev(
        eid or f"update-{name}-{len(gates)}",
        ev_types.POD_UPDATED,
        {"metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec},
    )


def podgroup(name: str, min_member: int) -> dict:
    """``esched.podgroup.submitted`` for ``t/<name>``."""
    return ev(
        f"pg-{name}",
        ev_types.PODGROUP_SUBMITTED,
        {"metadata": {"name": name, "namespace": NAMESPACE}, "spec": {"minMember": min_member}},
    )


def placement(
    pid: str,
    binds: list[tuple[str, str]],
    *,
    replica: str = "r1",
    position: int = 1,
    gang: str | None = None,
    cpu: int = 1000,
    victims: list[tuple[str, str]] | None = None,
) -> dict:
    """The ``data`` of a proposal or decision binding pods (by name) to nodes, evicting
    ``victims`` (pod name, node) if given."""
    data = {
        "proposal": pid,
        "replica": replica,
        "position": position,
        "gang": gang,
        "bindings": [
            {"pod": f"{NAMESPACE}/{p}", "node": n, "resources": {"cpu": cpu, "memory": GIB}}
            for p, n in binds
        ],
    }
    if victims:
        data["victims"] = [{"pod": f"{NAMESPACE}/{p}", "node": n} for p, n in victims]
    return data


def one_pod_job(name: str = "one") -> dict:
    """A Volcano Job manifest of one task ``w`` with one pod asking for 1 CPU, in
    :data:`NAMESPACE` (its pod is ``<name>-w-0``)."""
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "tasks": [
                {
                    "name": "w",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}
                            ]
                        }
                    },
                }
            ]
        },
    }


async def append_events(store: EventStore, *events: dict) -> None:
    """Append ``events`` to ``store`` in one batch, as ingest would (in its stored
    form: a Job marked as implying its first pods, :func:`ev_types.stored_form`)."""
    stored = [ev_types.stored_form(e, orjson.dumps(e)) for e in events]
    await store.append([NewEvent(e["id"], e["type"], stream_of(e), p) for e, p in stored])
