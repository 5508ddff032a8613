"""Where a pod's time goes: readers of the decisions, work and proposals topics, and
the store's own record times."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from typing import Any

import asyncpg
import numpy as np
import orjson

from esched.core.reasons import canonical_code
from esched.schemas.events import (
    JOB,
    JOB_SUBMITTED,
    PLACEMENT_COMMITTED,
    PLACEMENT_REJECTED,
    POD,
    implies_pods,
    metadata_key,
    namespaced_key,
    parse_stream,
    stream_name,
)
from esched.schemas.manifests import volcano_first_pods
from esched.services.bus.base import Bus, BusConsumer, Message

#: Pause of the benchmark's own consumers between reads. They only read broker
#: timestamps, so reading late changes no figure, and a consumer reading as fast as
#: records come costs the broker a fetch per few records: three of them took a
#: third of its CPU from the pipeline being measured.
_READ_EVERY = 0.1


def pct(values: np.ndarray, q: float) -> float:
    """Percentile ``q`` of ``values`` (seconds) in milliseconds; NaN when empty."""
    return round(float(np.percentile(values, q)) * 1000, 2) if values.size else float("nan")


class _TopicReader:
    """Reads one topic in a task of its own, every :data:`_READ_EVERY` seconds while
    :attr:`reading` is set; :meth:`_record` takes each record."""

    def __init__(self, bus: Bus, topic: str, group: str) -> None:
        self.consumer: BusConsumer = bus.consumer([topic], group)
        self._task: asyncio.Task | None = None
        #: Cleared: do not read now (the throughput phase keeps the benchmark's own
        #: consumer off the two cores; the broker timestamps are read afterwards).
        self.reading = asyncio.Event()
        self.reading.set()

    async def start(self) -> None:
        """Join the topic and start reading."""
        await self.consumer.start()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stop reading and leave the topic."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.consumer.stop()

    async def _run(self) -> None:
        while True:
            await self.reading.wait()
            await asyncio.sleep(_READ_EVERY)
            for m in await self.consumer.poll(100, 5000):
                self._record(m)

    def _record(self, m: Message) -> None:
        raise NotImplementedError


class Decisions(_TopicReader):
    """Reads the decisions topic; per pod its committed decision's timestamp."""

    def __init__(self, bus: Bus, group: str) -> None:
        super().__init__(bus, bus.topics.decisions, group)
        self.committed: dict[str, float] = {}  # pod -> broker timestamp (s)
        self.rejected = 0
        self.commits = 0
        self.by_replica: dict[str, int] = {}
        self.reasons: dict[str, int] = {}

    def _record(self, m: Message) -> None:
        env = orjson.loads(m.value)
        data = env["data"]
        if env["type"] == PLACEMENT_COMMITTED:
            self.commits += 1
            replica = data["replica"]
            self.by_replica[replica] = self.by_replica.get(replica, 0) + 1
            for b in data["bindings"]:
                self.committed.setdefault(b["pod"], m.timestamp_ms / 1000)
        elif env["type"] == PLACEMENT_REJECTED:
            self.rejected += 1
            reason = canonical_code(str(data.get("reason")))
            self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def mark(self) -> tuple[int, int]:
        """(committed, rejected) decisions read so far."""
        return self.commits, self.rejected

    async def wait_for(self, pods: Iterable[str], within: float, alive: Callable[[], None]) -> int:
        """Wait until every pod has a committed decision; the number still missing."""
        pods = list(pods)
        deadline = time.monotonic() + within
        while True:
            missing = sum(1 for p in pods if p not in self.committed)
            if not missing or time.monotonic() > deadline:
                return missing
            alive()
            await asyncio.sleep(0.05)


class FirstSeen(_TopicReader):
    """Reads a topic; per pod the broker timestamp of the first record naming it
    (the work items and the proposals: where a pod's latency goes)."""

    def __init__(
        self, bus: Bus, topic: str, group: str, pods_of: Callable[[Any], Iterable[str]]
    ) -> None:
        super().__init__(bus, topic, group)
        self.seen: dict[str, float] = {}
        self._pods_of = pods_of

    def _record(self, m: Message) -> None:
        for pod in self._pods_of(orjson.loads(m.value)):
            self.seen.setdefault(pod, m.timestamp_ms / 1000)


def work_pods(item: Any) -> Iterable[str]:
    """The pod a work item names (none for a gang's)."""
    return [item["pod"]] if item.get("pod") else []


def proposal_pods(env: Any) -> Iterable[str]:
    """The pods a proposal binds."""
    return [b["pod"] for b in env["data"]["bindings"]]


async def stored_at(url: str, namespace: str) -> tuple[dict[str, float], dict[str, float]]:
    """Per pod of ``namespace``: when the store recorded its submission and its
    committed decision (PostgreSQL's clock, the same machine's). A pod a Volcano
    Job's submission implies (ingest marked the Job, :func:`implies_pods`) has no row
    of its own: it is submitted when its Job's row was recorded (the pods of
    :func:`volcano_first_pods`, the one builder)."""
    conn = await asyncpg.connect(url, timeout=10)
    try:
        submitted = {
            parse_stream(r["stream"])[1]: r["recorded_at"].timestamp()
            for r in await conn.fetch(
                "SELECT stream, recorded_at FROM events WHERE type = 'esched.pod.submitted' "
                "AND stream LIKE $1",
                stream_name(POD, namespaced_key(namespace, "%")),
            )
        }
        for r in await conn.fetch(
            "SELECT recorded_at, payload FROM events WHERE type = $1 AND stream LIKE $2 "
            "ORDER BY position",
            JOB_SUBMITTED,
            stream_name(JOB, namespaced_key(namespace, "%")),
        ):
            event = orjson.loads(r["payload"])
            if not implies_pods(event) or not isinstance(event.get("data"), dict):
                continue  # its pods are recorded (read above)
            at = r["recorded_at"].timestamp()
            for _task, _i, pod, _bare in volcano_first_pods(event["data"]):
                # (a Job published again implies nothing: its first row's time stays)
                submitted.setdefault(metadata_key(pod["metadata"]), at)
        decided: dict[str, float] = {}
        first = min(submitted.values(), default=0.0)
        for r in await conn.fetch(
            "SELECT recorded_at, payload FROM events WHERE type = $1 "
            "AND recorded_at >= to_timestamp($2)",
            PLACEMENT_COMMITTED,
            first,
        ):
            for b in orjson.loads(r["payload"])["data"]["bindings"]:
                decided.setdefault(b["pod"], r["recorded_at"].timestamp())
        return submitted, decided
    finally:
        await conn.close()


def store_pods_per_s(stored: dict[str, float], decided: dict[str, float]) -> float | None:
    """Pods decided per second on the store's clock (:func:`stored_at`'s marks): the
    first pod recorded (a Job's row, for the pods it implies) to the last placement
    committed, with no publish or decisions-topic hop at either end; None without
    both marks."""
    if not stored or not decided:
        return None
    span = max(decided.values()) - min(stored.values())
    return round(len(decided) / span, 1) if span > 0 else 0.0


def stages(sent: dict[str, float], *marks: tuple[str, dict[str, float]]) -> dict[str, Any]:
    """Median and p99 (ms) of each stage between consecutive marks of a pod."""
    out: dict[str, Any] = {}
    prev_name, prev = "sent", sent
    for name, mark in marks:
        d = np.array([mark[k] - prev[k] for k in sent if k in mark and k in prev])
        out[f"{prev_name}->{name}"] = {"p50_ms": pct(d, 50), "p99_ms": pct(d, 99)}
        prev_name, prev = name, mark
    return out


async def wait_committed(
    url: str, after: int, want: int, within: float, alive: Callable[[], None]
) -> None:
    """Wait until the log has ``want`` committed decisions after position ``after``
    (incremental counting: cheap for the database while the pipeline runs)."""
    conn = await asyncpg.connect(url, timeout=10)
    try:
        seen, deadline = 0, time.monotonic() + within
        while seen < want and time.monotonic() < deadline:
            alive()
            await asyncio.sleep(0.05)
            top, n = await conn.fetchrow(
                "SELECT max(position), count(*) FILTER (WHERE type = $2) FROM events "
                "WHERE position > $1",
                after,
                PLACEMENT_COMMITTED,
            )
            if top is not None:
                after, seen = top, seen + n
    finally:
        await conn.close()


async def head_position(url: str) -> int:
    """The log's head position."""
    conn = await asyncpg.connect(url, timeout=10)
    try:
        return int(await conn.fetchval("SELECT position FROM log_head"))
    finally:
        await conn.close()


async def first_commit_by(
    url: str, replica: str, after: int, within: float, alive: Callable[[], None]
) -> float | None:
    """Wall time (time.time()) when the first decision committing a proposal of
    ``replica`` made on a fold at or past position ``after`` was seen (polled every
    20 ms); None if not within ``within`` seconds. The position the proposal carries
    tells the new process's proposals from those a stopped or killed one had sent
    before ``after`` and the commit service decides only now."""
    conn = await asyncpg.connect(url, timeout=10)
    try:
        deadline = time.monotonic() + within
        seen = after
        while time.monotonic() < deadline:
            alive()
            rows = await conn.fetch(
                "SELECT position, payload FROM events WHERE position > $1 AND type = $2",
                seen,
                PLACEMENT_COMMITTED,
            )
            for r in rows:
                seen = max(seen, r["position"])
                data = orjson.loads(r["payload"])["data"]
                if data["replica"] == replica and data["position"] >= after:
                    return time.time()
            await asyncio.sleep(0.02)
        return None
    finally:
        await conn.close()
