"""``esched bench verify``: how fast ``esched store verify`` walks a PostgreSQL log.

A fresh database is filled with the synthetic cluster log of ``bench replay``
(appended through the store, so every row is chained as in production), then the
chain is verified ``repeat`` times. Each run reports events per second and the CPU
seconds it took in this process (the client, which hashes) and in the server's
backends of the database (which read and send the rows). The baseline of the same
minutes streams the same ranges with the same COPY and drops the bytes: what the
transport alone costs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from esched.services.bench import fill_log
from esched.services.bench_e2e.cpu import cpu_seconds
from esched.services.bench_e2e.preload import admin
from esched.services.store import open_store
from esched.services.store.chain import VERIFY_BATCH, VERIFY_PARALLEL
from esched.services.store.postgres import CHAIN_COPY, PostgresEventStore

__all__ = ["run_verify_bench"]


def _cpu_of(pids: list[int]) -> dict[int, float] | None:
    """CPU seconds (user + system) of each process; None when the server's
    processes are not readable here (another host)."""
    if not all(os.path.exists(f"/proc/{pid}") for pid in pids):
        return None
    return {pid: cpu_seconds(pid) for pid in pids}


async def _backends(server: str, db: str) -> list[int]:
    conn = await asyncpg.connect(f"{server}/postgres", timeout=10)
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", db
        )
    finally:
        await conn.close()
    return [r[0] for r in rows]


async def _copy_only(conns: list[asyncpg.Connection], head: int) -> None:
    """The verify's reads without the hashing (the baseline): the same COPY ranges,
    as many at once as verify runs, on connections opened beforehand (as verify's
    pool has its connections open)."""
    step = VERIFY_BATCH * 2
    idle = list(conns)
    sem = asyncio.Semaphore(len(idle))

    async def drop(_chunk: bytes) -> None:
        return None

    async def one(lo: int) -> None:
        async with sem:
            conn = idle.pop()
            try:
                await conn.copy_from_query(
                    CHAIN_COPY.format(lo=lo, hi=min(head, lo + step)), output=drop, format="binary"
                )
            finally:
                idle.append(conn)

    await asyncio.gather(*(one(lo) for lo in range(0, head, step)))


_LOCAL = {None, "", "localhost", "127.0.0.1", "::1"}


async def _timed(server: str, db: str, run: Any) -> dict[str, Any]:
    """Wall time of ``run()``, the CPU it took here and in the database's backends
    (None for a server on another host: its pids mean nothing here)."""
    local = urlsplit(server).hostname in _LOCAL
    before = _cpu_of(await _backends(server, db)) if local else None
    client0, wall0 = time.process_time(), time.perf_counter()
    result = await run()
    wall = time.perf_counter() - wall0
    client = time.process_time() - client0
    after = _cpu_of(await _backends(server, db)) if local else None
    server_cpu = None
    if before is not None and after is not None:
        # A backend started meanwhile counts from zero; one that ended is missed
        # (the store's pool keeps its connections).
        server_cpu = sum(t - before.get(pid, 0.0) for pid, t in after.items())
    return {"seconds": wall, "client_cpu_s": client, "server_cpu_s": server_cpu, "result": result}


def _figures(n: int, t: dict[str, Any]) -> dict[str, Any]:
    per_m = 1_000_000 / n
    return {
        "events_per_s": round(n / t["seconds"]),
        "seconds": round(t["seconds"], 3),
        "client_cpu_s_per_1m": round(t["client_cpu_s"] * per_m, 2),
        "server_cpu_s_per_1m": None
        if t["server_cpu_s"] is None
        else round(t["server_cpu_s"] * per_m, 2),
    }


async def run_verify_bench(
    server: str, events: int, nodes: int, repeat: int, keep: bool
) -> dict[str, Any]:
    """Fill a fresh database on ``server`` (a PostgreSQL URL without database), then
    verify its chain ``repeat`` times against the copy-only baseline."""
    db = f"esched_bench_verify_{uuid.uuid4().hex[:8]}"
    url = f"{server}/{db}"
    await admin(server, f'CREATE DATABASE "{db}"')
    try:
        store = open_store(url)
        assert isinstance(store, PostgresEventStore), "bench verify needs PostgreSQL"
        await store.connect()
        try:
            await store.migrate()
            await fill_log(store, events, nodes)
            head = await store.head()
            conn = await asyncpg.connect(url)
            try:
                # A log at rest: visibility and statistics as autovacuum leaves them.
                await conn.execute("VACUUM ANALYZE events")
            finally:
                await conn.close()
            warm = await store.verify()  # also opens the pool's connections
            assert warm.ok, warm
            runs, baselines = [], []
            conns = [await asyncpg.connect(url) for _ in range(VERIFY_PARALLEL)]
            try:
                for _ in range(repeat):
                    t = await _timed(server, db, store.verify)
                    assert t["result"].ok and t["result"].checked == head, t["result"]
                    runs.append(_figures(head, t))
                    baselines.append(
                        _figures(head, await _timed(server, db, lambda: _copy_only(conns, head)))
                    )
            finally:
                await asyncio.gather(*(c.close() for c in conns))
        finally:
            await store.close()
    finally:
        if not keep:
            with contextlib.suppress(Exception):
                await admin(server, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    best = max(runs, key=lambda r: r["events_per_s"])
    return {
        "events": head,
        "verify_events_per_s": best["events_per_s"],
        "runs": runs,
        "baseline_copy_only": baselines,
        "store": url if keep else "postgresql (dropped)",
    }
