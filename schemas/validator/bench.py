"""Validation throughput on a representative mix of events, for ``esched bench``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from esched.schemas.events import envelope
from esched.schemas.validator.compiled import validators
from esched.schemas.validator.event import parse_event, validate_event

__all__ = ["bench_validate", "sample_events"]


def sample_events() -> Iterator[dict[str, Any]]:
    """A representative mix for benchmarks: mostly pods, some nodes, gangs and usage."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "trainer-0",
            "namespace": "ml",
            "labels": {"app": "trainer", "tier": "batch"},
            "annotations": {
                "scheduling.k8s.io/group-name": "trainer",
                "volcano.sh/queue-name": "research",
            },
        },
        "spec": {
            "priorityClassName": "batch",
            "priority": 100,
            "containers": [
                {
                    "name": "main",
                    "image": "trainer:1.4",
                    "resources": {
                        "requests": {"cpu": "1500m", "memory": "4Gi"},
                        "limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1},
                    },
                },
                {
                    "name": "sidecar",
                    "image": "log:2",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                },
            ],
            "nodeSelector": {"pool": "gpu"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
    }
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-node-1", "labels": {"pool": "gpu", "zone": "a"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": "4"}
        },
    }
    group = {
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {
            "minMember": 4,
            "queue": "research",
            "minResources": {"cpu": "6", "memory": "16Gi"},
        },
    }
    usage = {
        "window": 10,
        "nodes": [{"name": "gpu-node-1", "usage": {"cpu": "12", "memory": "40Gi"}}],
    }

    def env(i: int, etype: str, data: dict[str, Any]) -> dict[str, Any]:
        return envelope(
            etype,
            "esched-bench",
            data,
            id=f"bench-{i}",
            time="2026-01-01T00:00:00Z",
            content_type=None,
        )

    mix: list[tuple[str, dict[str, Any]]] = [("esched.pod.submitted", pod)] * 7 + [
        ("esched.node.added", node),
        ("esched.podgroup.submitted", group),
        ("esched.usage.reported", usage),
    ]
    i = 0
    while True:
        for etype, data in mix:
            yield env(i, etype, data)
            i += 1


def _best_rate(fn: Callable[[int], None], n: int, rounds: int) -> tuple[float, float]:
    """(total seconds, best per-item seconds over ``rounds`` slices of ``n``)."""
    per = max(1, n // rounds)
    total, best = 0.0, float("inf")
    done = 0
    while done < n:
        k = min(per, n - done)
        t0 = time.perf_counter()
        fn(k)
        dt = time.perf_counter() - t0
        total += dt
        best = min(best, dt / k)
        done += k
    return total, best


def bench_validate(n: int = 100_000, rounds: int = 5) -> dict[str, Any]:
    """Measure validation throughput on ``n`` events (7 of 10 pods); for ``esched bench``.

    The work is cut into ``rounds`` slices; rates are those of the fastest slice
    (as ``timeit`` reports the minimum: other load on the machine only slows).
    Returns ``events``, ``seconds`` (all of ``validate_event``), ``events_per_s`` and
    ``us_per_event`` (``validate_event`` on decoded dicts), ``parse_events_per_s``
    (``parse_event`` on bytes: decode + validate), ``pod_us`` (one typical pod event)
    and ``compile_s`` (the one-off compile of all schemas).
    """
    compile_s = validators().compile_s
    gen = sample_events()
    events = [next(gen) for _ in range(min(max(n, 1), 1000))]
    raws = [orjson.dumps(e) for e in events]
    pods = [e for e in events if e["type"] == "esched.pod.submitted"]
    m = len(events)

    def validate(k: int) -> None:
        for i in range(k):
            validate_event(events[i % m])

    def parse(k: int) -> None:
        for i in range(k):
            parse_event(raws[i % m])

    def pod(k: int) -> None:
        for i in range(k):
            validate_event(pods[i % len(pods)])

    validate_s, validate_best = _best_rate(validate, n, rounds)
    _, parse_best = _best_rate(parse, n, rounds)
    _, pod_best = _best_rate(pod, max(1, n // 2), rounds)
    return {
        "events": n,
        "seconds": round(validate_s, 6),
        "events_per_s": round(1 / validate_best),
        "us_per_event": round(validate_best * 1e6, 3),
        "pod_us": round(pod_best * 1e6, 3),
        "parse_events_per_s": round(1 / parse_best),
        "compile_s": round(compile_s, 3),
    }
