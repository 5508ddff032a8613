"""Throughput checks of an event store, for ``esched bench``.

Both functions write to / read from the store at ``url`` as it is: point them at a
scratch database (the appended events are real events of type ``esched.bench``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import orjson

from . import open_store
from .base import NewEvent

__all__ = ["bench_append", "bench_read_payloads", "sample_payload"]


def sample_payload(run: str, i: int) -> bytes:
    """A CloudEvents envelope shaped like a real pod submission (~700 bytes)."""
    return orjson.dumps(
        {
            "specversion": "1.0",
            "id": f"{run}-{i}",
            "source": "esched/bench",
            "type": "esched.pod.submitted",
            "time": "2026-01-01T00:00:00Z",
            "subject": f"bench/pod-{i}",
            "data": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"pod-{i}",
                    "namespace": "bench",
                    "labels": {"app": "bench", "tier": "batch"},
                    "annotations": {
                        "scheduling.k8s.io/group-name": f"gang-{i // 8}",
                        "volcano.sh/queue-name": "default",
                    },
                },
                "spec": {
                    "priorityClassName": "batch",
                    "priority": 100,
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.example/bench:1",
                            "resources": {
                                "requests": {"cpu": "500m", "memory": "1Gi"},
                                "limits": {"cpu": "1", "memory": "2Gi"},
                            },
                        }
                    ],
                },
            },
        }
    )


async def bench_append(url: str, events: int, batch: int, **options: Any) -> dict[str, float]:
    """Append ``events`` fresh events in batches of ``batch`` (after migrating).

    Returns ``{"events", "seconds", "events_per_s"}``; the clock covers the appends
    only (payloads are built beforehand, as ingest receives them ready-made).
    """
    if events < 1 or batch < 1:
        raise ValueError("events and batch must be >= 1")
    run = uuid.uuid4().hex[:12]
    now = datetime.now(UTC)
    batches = [
        [
            NewEvent(
                id=f"{run}-{i}",
                type="esched.bench",
                stream=f"pod/bench-{run}/pod-{i}",
                payload=sample_payload(run, i),
                time=now,
            )
            for i in range(start, min(start + batch, events))
        ]
        for start in range(0, events, batch)
    ]
    async with open_store(url, **options) as store:
        await store.migrate()
        t0 = time.perf_counter()
        for chunk in batches:
            await store.append(chunk)
        seconds = time.perf_counter() - t0
    return {"events": events, "seconds": seconds, "events_per_s": events / seconds}


async def bench_read_payloads(
    url: str, limit: int = 50_000, upto: int | None = None, **options: Any
) -> dict[str, float]:
    """Read ``(position, payload)`` pages of ``limit`` from position 0 to ``upto``
    (default: the head), as replay does.

    Returns ``{"events", "bytes", "seconds", "events_per_s"}``.
    """
    async with open_store(url, **options) as store:
        top = await store.head() if upto is None else upto
        n = size = 0
        t0 = time.perf_counter()
        # Prefetch the next page while this one is counted, as replay does: the
        # server produces page k+1 while the client decodes page k.
        starts = list(range(0, top, limit))
        pending = asyncio.ensure_future(store.read_payloads(0, limit, top)) if starts else None
        for k in range(len(starts)):
            assert pending is not None
            page = await pending
            nxt = starts[k + 1] if k + 1 < len(starts) else None
            pending = (
                asyncio.ensure_future(store.read_payloads(nxt, limit, top))
                if nxt is not None
                else None
            )
            n += len(page)
            size += sum(len(p) for _, p in page)
        seconds = time.perf_counter() - t0
    return {
        "events": n,
        "bytes": size,
        "seconds": seconds,
        "events_per_s": n / seconds if seconds else 0.0,
    }
