"""The work consumer replicas of one process share (the embedded mode)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from esched.services.bus import BusConsumer, Message


class SharedConsumer(BusConsumer):
    """One in-process consumer shared by several replicas of one process.

    The in-process bus has one partition per topic and no group rebalancing, so
    replicas of the embedded mode take turns polling one consumer instead of each
    reading everything. Offsets only matter within the process there (the bus dies
    with it; on restart the dispatcher re-publishes every pending pod).
    """

    def __init__(self, inner: BusConsumer) -> None:
        self.inner = inner
        self._lock = asyncio.Lock()
        self._started = 0
        self._committed: dict[tuple[str, int], int] = {}

    async def start(self) -> None:
        async with self._lock:
            if self._started == 0:
                await self.inner.start()
            self._started += 1

    async def stop(self) -> None:
        async with self._lock:
            self._started -= 1
            if self._started == 0:
                await self.inner.stop()

    async def poll(self, timeout_ms: int, max_records: int) -> list[Message]:
        async with self._lock:
            return await self.inner.poll(timeout_ms, max_records)

    async def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        merged = {k: max(v, self._committed.get(k, 0)) for k, v in offsets.items()}
        self._committed.update(merged)
        await self.inner.commit(merged)

    async def lag(self) -> int:
        return await self.inner.lag()

    def assignment(self) -> frozenset[tuple[str, int]]:
        return self.inner.assignment()
