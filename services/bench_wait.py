"""How late a record reaches a reader that waits at the broker, and what the reader
costs while idle, per fetch wait: ``python -m esched.services.bench_wait
[WAITS_MS [RECORDS [IDLE_S]]]`` (default ``200,1000,5000 25 15``), on a local tansu
broker (:class:`~esched.services.devbroker.DevBroker`) or ``$ESCHED_KAFKA``; one JSON
line per wait (``wait_ms``, ``idle_cpu_share``, ``delay_ms``: median, p90, max).

For each wait, one reader of a feed topic of its own (``wait_ms``, as a replica's
feed reader) and one producer in this process: the process's CPU share over
``IDLE_S`` seconds of nothing sent, then ``RECORDS`` records each sent 0.2-1.2 s
after the last (into a fetch's wait at a random point), the time from each send to
its receipt. A broker that answers a waiting fetch when data arrives (Kafka) gives
about the same delays at any wait; one that answers on its own schedule (tansu)
gives delays that grow with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
import time
from collections.abc import Iterator
from typing import Any

import orjson

from esched.services.bus.base import TopicNames
from esched.services.bus.kafka import KafkaBus


async def measure(bootstrap: str, wait_ms: int, records: int, idle_s: float) -> dict[str, Any]:
    """One wait's figures (see the module)."""
    bus = KafkaBus(bootstrap, TopicNames(f"wait{wait_ms}-{os.getpid()}."))
    await bus.ensure_topics(1)
    consumer = bus.consumer([bus.topics.feed], "bench-wait", exclusive=True, wait_ms=wait_ms)
    await consumer.start()
    producer = bus.producer()
    await producer.start()
    came: asyncio.Queue[float] = asyncio.Queue()

    async def read() -> None:
        while True:
            for _m in await consumer.poll(60_000, 100):
                came.put_nowait(time.monotonic())

    reader = asyncio.create_task(read())
    try:
        await asyncio.sleep(1.0)
        cpu, wall = time.process_time(), time.monotonic()
        await asyncio.sleep(idle_s)
        idle = (time.process_time() - cpu) / (time.monotonic() - wall)
        delays = []
        for _ in range(records):
            await asyncio.sleep(random.uniform(0.2, 1.2))
            sent = time.monotonic()
            await producer.send(bus.topics.feed, b"x")
            delays.append((await came.get() - sent) * 1000)
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        await producer.stop()
        await consumer.stop()
    delays.sort()
    return {
        "wait_ms": wait_ms,
        "records": records,
        "idle_cpu_share": round(idle, 5),
        "delay_ms": {
            "median": round(delays[len(delays) // 2], 1),
            "p90": round(delays[int(0.9 * len(delays))], 1),
            "max": round(delays[-1], 1),
        },
    }


@contextlib.contextmanager
def _broker() -> Iterator[str]:
    explicit = os.environ.get("ESCHED_KAFKA")
    if explicit:
        yield explicit
        return
    from esched.services.devbroker import DevBroker

    with DevBroker().running() as broker:
        yield broker.bootstrap


async def _main(waits: list[int], records: int, idle_s: float) -> None:
    with _broker() as bootstrap:
        for wait in waits:
            figures = await measure(bootstrap, wait, records, idle_s)
            print(orjson.dumps(figures).decode(), flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(
        _main(
            [int(w) for w in (args[0] if args else "200,1000,5000").split(",")],
            int(args[1]) if len(args) > 1 else 25,
            float(args[2]) if len(args) > 2 else 15.0,
        )
    )
