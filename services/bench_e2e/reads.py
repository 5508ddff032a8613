"""What reading the log costs a follower: CPU per row of the store's live reads.

Every replica reads every event of the log from PostgreSQL before folding it (its
subscription's :meth:`~esched.services.store.base.EventStore.read_payloads` pages,
one every ``follow_interval`` or ``follow_busy_interval`` seconds), so each replica
added costs the client side of those reads in its own process and the server side
in a PostgreSQL backend of its own. This preloads a cluster as ``bench e2e`` does
(a fresh database, dropped after), then reads its newest ``rows`` events in pages
of each size through the store, as a follower does, and reports per row the CPU of
this process (the client) and of the pool's one backend (the server, from /proc:
PostgreSQL must run on this host); then reads them again as a follower does, through
a payload subscription whose reads go over its LISTEN connection (``follow``). A
page is what one read gathers: at ``r`` pods/s and a read every ``t`` s, about
``2·r·t`` events (a submission and a decision per pod).

``python -m esched.services.bench_e2e.reads [--nodes 10000] [--fill 0.7]
[--rows 100000] [--pages 100,400,1000,5000]`` prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg
import orjson

from esched.services.bench_e2e.cpu import cpu_seconds
from esched.services.bench_e2e.preload import admin, preload
from esched.services.store.postgres import LISTEN_APP_NAME, POOL_APP_NAME, PostgresEventStore

__all__ = ["run_reads_bench"]

DEFAULT_PAGES = (100, 400, 1000, 5000)


async def _backend_pid(url: str, app_name: str = POOL_APP_NAME) -> int:
    """The pid of the store's one backend named ``app_name`` (default: its pool's)
    on the benchmark's database."""
    conn = await asyncpg.connect(url, timeout=10)
    try:
        pids = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND application_name = $1",
            app_name,
        )
    finally:
        await conn.close()
    if len(pids) != 1:
        raise RuntimeError(f"expected the store's one {app_name} backend, found {len(pids)}")
    return int(pids[0][0])


async def _timed_reads(
    next_page: Callable[[], Awaitable[Sequence[Any]]],
    backend: int,
    pos: int,
    head: int,
    page: int,
) -> dict[str, Any]:
    """Pages from ``next_page`` until position ``head``: client and server (the
    backend ``backend``) CPU per row."""
    rows = reads = 0
    server0, client0 = cpu_seconds(backend), time.process_time()
    while pos < head:
        got = await next_page()
        pos = got[-1][0]
        rows += len(got)
        reads += 1
    client, server = time.process_time() - client0, cpu_seconds(backend) - server0
    return {
        "page": page,
        "reads": reads,
        "rows": rows,
        "client_us_per_row": round(client * 1e6 / max(rows, 1), 2),
        "server_us_per_row": round(server * 1e6 / max(rows, 1), 2),
    }


async def _read_pages(
    store: PostgresEventStore, backend: int, start: int, head: int, page: int
) -> dict[str, Any]:
    """Read ``(start, head]`` in pages of ``page``; client and server CPU per row."""
    pos = start

    async def next_page() -> Sequence[tuple[int, bytes]]:
        nonlocal pos
        got = await store.read_payloads(pos, page)
        pos = got[-1][0]
        return got

    return await _timed_reads(next_page, backend, start, head, page)


async def _follow_pages(
    store: PostgresEventStore, url: str, start: int, head: int, page: int
) -> dict[str, Any]:
    """Read ``(start, head]`` as a follower does: a payload subscription with batches
    of ``page``, its reads over its LISTEN connection (timed from its second read:
    the first opens that connection). Client and server CPU per row."""
    async with store.subscribe(start, page, payloads=True) as sub:
        pos = (await anext(sub))[-1][0]
        backend = await _backend_pid(url, LISTEN_APP_NAME)
        return await _timed_reads(lambda: anext(sub), backend, pos, head, page)


async def run_reads_bench(
    pg_server: str,
    *,
    nodes: int = 10_000,
    fill: float = 0.7,
    rows: int = 100_000,
    pages: Sequence[int] = DEFAULT_PAGES,
) -> dict[str, Any]:
    """Preload ``nodes`` nodes filled to ``fill`` into a fresh database on
        ``pg_server`` (``postgresql://user@host:port``), read its newest ``rows`` events
        once per page size in ``pages`` with :meth:`EventStore.read_payloads` (``reads``,
    through the pool) and as a follower's subscription reads them (``follow``, over its
    LISTEN connection); the database is dropped after."""
    db = f"esched_reads_{uuid.uuid4().hex[:8]}"
    url = f"{pg_server}/{db}"
    await admin(pg_server, f'CREATE DATABASE "{db}"')
    try:
        loaded = await preload(url, nodes, fill)
        # One connection: its backend is the server side of every read.
        store = PostgresEventStore(url, min_size=1, max_size=1)
        await store.connect()
        try:
            head = await store.head()
            backend = await _backend_pid(url)
            start = max(0, head - rows)
            runs = [await _read_pages(store, backend, start, head, page) for page in pages]
            follows = [await _follow_pages(store, url, start, head, page) for page in pages]
        finally:
            await store.close()
        return {
            "nodes": nodes,
            "fill": fill,
            "events": loaded["events"],
            "reads": runs,
            "follow": follows,
        }
    finally:
        await admin(pg_server, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def main(argv: Sequence[str] | None = None) -> None:
    """The command line: ``python -m esched.services.bench_e2e.reads``."""
    parser = argparse.ArgumentParser(prog="python -m esched.services.bench_e2e.reads")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--fill", type=float, default=0.7)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--pages", default=",".join(map(str, DEFAULT_PAGES)))
    args = parser.parse_args(argv)
    pages = [int(p) for p in args.pages.split(",")]
    result = asyncio.run(
        run_reads_bench(args.pg, nodes=args.nodes, fill=args.fill, rows=args.rows, pages=pages)
    )
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
