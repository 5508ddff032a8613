"""``esched up`` in process for end-to-end tests: the runner over a list of events on
a SQLite store, the store opened beside it, and reads of what the log then shows."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from esched.schemas.events import POD_UNSCHEDULABLE
from esched.services.bus.base import TopicNames
from esched.services.event_files import record_for_event
from esched.services.store import open_store
from esched.services.store.base import EventStore
from esched.services.store.snapshots import fold_log
from esched.services.up import Up, UpConfig

__all__ = ["UpRun", "equals", "pod_phase", "unschedulable_report", "up_running"]


@dataclass
class UpRun:
    """A running ``esched up`` and the store it writes."""

    store: EventStore
    #: the runner's ``run()``
    task: asyncio.Task
    #: what ``run()`` returned, once :func:`up_running` has stopped it
    summary: dict[str, Any] | None = None


@contextlib.asynccontextmanager
async def up_running(
    url: str, inputs: Iterable[dict[str, Any]], *, stop_within: float = 30, **config: Any
) -> AsyncIterator[UpRun]:
    """``esched up`` (no progress lines, ``config`` its other settings) over ``inputs``
    (event envelopes, read as Kafka records) on the store at ``url``, that store
    opened beside it; on leaving, the store is closed and the runner stopped (its
    summary then in :attr:`UpRun.summary`)."""
    records = [record_for_event(e, TopicNames(), "test") for e in inputs]
    runner = Up(UpConfig(store=url, progress_every=0, **config), records)
    task = asyncio.create_task(runner.run())
    es = open_store(url)
    run = UpRun(es, task)
    try:
        await es.connect()
        await es.migrate()
        yield run
    finally:
        await es.close()
        await runner.stop()
        run.summary = await asyncio.wait_for(task, stop_within)


async def pod_phase(es: EventStore, key: str) -> str | None:
    """Pod ``key``'s phase in the fold of the log (None: no such pod)."""
    rec = (await fold_log(es)).pod(key)
    return rec["phase"] if rec else None


async def unschedulable_report(es: EventStore) -> dict[str, Any] | None:
    """The data of the log's first ``esched.pod.unschedulable`` (None: none yet)."""
    for r in await es.read(0, 10_000):
        if r.type == POD_UNSCHEDULABLE:
            return orjson.loads(r.payload)["data"]
    return None


async def equals(value: Awaitable[Any], want: Any) -> bool:
    """Whether ``value`` comes to ``want`` (for ``eventually``)."""
    return (await value) == want
