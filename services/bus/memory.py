"""In-process bus for the embedded single-process mode.

One partition per topic; consumer groups keep committed offsets, and a consumer
that stops without committing gets the same messages again on restart, as with
Kafka. Not shared across processes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence

from esched.services.bus.base import Bus, BusConsumer, BusProducer, Headers, Message, TopicNames

__all__ = ["MemoryBus"]


class MemoryBus(Bus):
    """Topics as in-memory lists, for one process."""

    def __init__(self, topics: TopicNames | None = None) -> None:
        self.topics = topics or TopicNames()
        self._logs: dict[str, list[Message]] = {}
        self._committed: dict[tuple[str, str], int] = {}
        self._changed = asyncio.Event()

    def log(self, topic: str) -> list[Message]:
        """All messages of ``topic`` (for inspection, e.g. the dead-letter topic)."""
        return self._logs.setdefault(topic, [])

    def committed(self, group: str, topic: str) -> int:
        """The offset ``group`` committed on ``topic`` (0: none), as Kafka's committed()."""
        return self._committed.get((group, topic), 0)

    def commit(self, group: str, topic: str, offset: int) -> None:
        """Record ``offset`` as ``group``'s committed offset on ``topic``."""
        self._committed[(group, topic)] = offset

    async def appended(self) -> None:
        """Return at the next append to any topic."""
        self._changed.clear()
        await self._changed.wait()

    def append(self, topic: str, key: bytes | None, value: bytes, headers: Headers = ()) -> None:
        """Append without awaiting (what the producer does, usable from sync code)."""
        log = self.log(topic)
        log.append(Message(topic, 0, len(log), key, value, int(time.time() * 1000), headers))
        self._changed.set()

    def append_many(
        self, topic: str, records: Sequence[tuple[bytes | None, bytes, Headers]]
    ) -> None:
        """:meth:`append` of each record, with one clock reading and one wake-up."""
        if not records:
            return
        log = self.log(topic)
        start = len(log)
        now = int(time.time() * 1000)
        log.extend(
            [
                Message(topic, 0, start + i, key, value, now, tuple(headers))
                for i, (key, value, headers) in enumerate(records)
            ]
        )
        self._changed.set()

    def producer(self) -> BusProducer:
        return _MemoryProducer(self)

    def consumer(
        self,
        topics: Sequence[str],
        group: str,
        *,
        exclusive: bool = False,
        instance: str | None = None,
        partitions: Sequence[tuple[str, int]] | None = None,
        wait_ms: int | None = None,
        idle_wait: tuple[int, float] | None = None,
    ) -> BusConsumer:
        # One partition per topic, no membership, no fetches: exclusive, instance,
        # partitions, wait_ms and idle_wait change nothing here.
        return _MemoryConsumer(self, tuple(topics), group)


class _MemoryProducer(BusProducer):
    def __init__(self, bus: MemoryBus) -> None:
        self._bus = bus

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send_many(self, topic: str, records: Sequence[tuple[bytes | None, bytes]]) -> None:
        self._bus.append_many(topic, [(key, value, ()) for key, value in records])

    async def send_with_headers(
        self, topic: str, records: Sequence[tuple[bytes | None, bytes, Headers]]
    ) -> None:
        self._bus.append_many(topic, records)


class _MemoryConsumer(BusConsumer):
    def __init__(self, bus: MemoryBus, topics: tuple[str, ...], group: str) -> None:
        self._bus = bus
        self._topics = topics
        self._group = group
        self._next: dict[str, int] = {}

    async def start(self) -> None:
        self._next = {t: self._bus.committed(self._group, t) for t in self._topics}

    async def stop(self) -> None:
        self._next = {}

    def _take(self, max_records: int) -> list[Message]:
        out: list[Message] = []
        for topic in self._topics:
            log = self._bus.log(topic)
            start = self._next[topic]
            chunk = log[start : start + max_records - len(out)]
            self._next[topic] = start + len(chunk)
            out.extend(chunk)
            if len(out) >= max_records:
                break
        return out

    async def poll(self, timeout_ms: int, max_records: int) -> list[Message]:
        out = self._take(max_records)
        if out or timeout_ms <= 0:
            return out
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await self._bus.appended()
        except TimeoutError:
            return []
        return self._take(max_records)

    async def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        for (topic, _partition), offset in offsets.items():
            self._bus.commit(self._group, topic, offset)

    async def lag(self) -> int:
        return sum(len(self._bus.log(t)) - self._next.get(t, 0) for t in self._topics)

    def assignment(self) -> frozenset[tuple[str, int]]:
        return frozenset((t, 0) for t in self._topics)

    async def bounds(self) -> dict[tuple[str, int], tuple[int, int]]:
        return {(t, 0): (0, len(self._bus.log(t))) for t in self._topics}

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._next[topic] = offset
