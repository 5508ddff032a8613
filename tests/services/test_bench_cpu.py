"""The benchmarks' CPU accounting of the PostgreSQL server (services/bench_e2e/cpu.py)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import asyncpg
import pytest

from esched.services.bench_e2e.cpu import (
    backend_database,
    cpu_seconds,
    postgres_cpu_seconds,
    postgres_processes,
)
from support.aio import eventually

pytestmark = pytest.mark.postgres


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


async def test_postgres_cpu_keeps_a_closed_connections_cpu(pg_url: str) -> None:
    """A backend that exits takes its CPU out of the live processes' sum; the server's
    figure must still not fall by more than a clock tick (it fell by the backend's
    whole CPU, so the benches' PostgreSQL column could go negative)."""
    conn = await asyncpg.connect(pg_url)
    backend = await conn.fetchval("SELECT pg_backend_pid()")
    if not _alive(backend):
        await conn.close()
        pytest.skip("the PostgreSQL server is not a local process (a container)")
    await conn.fetchval("SELECT sum(i) FROM generate_series(1, 3000000) AS i")
    before = postgres_cpu_seconds()
    await conn.close()
    await eventually(lambda: not _alive(backend), within=10)
    # The postmaster reaps the backend right after it exits; its CPU moves into the
    # postmaster's children's time, which the kernel reports in clock ticks: up to
    # one tick of it is lost (the old sum lost the backend's whole ~0.3 s).
    tick = 1 / os.sysconf("SC_CLK_TCK")
    after = await eventually(
        lambda: (v := postgres_cpu_seconds()) >= before - tick and v,
        within=10,
        message=lambda: f"server CPU fell from {before} to {postgres_cpu_seconds()}",
    )
    assert after >= before - tick > 0


async def test_postgres_cpu_of_a_database_leaves_other_databases_out(pg_url: str) -> None:
    """A run's PostgreSQL figure counts its own database's backends, not another
    client's work on the same server (the whole server's sum took in whatever else
    ran there: 56 to 147 µs a pod in three runs of one version on a shared server)."""
    conn = await asyncpg.connect(pg_url)
    try:
        backend = await conn.fetchval("SELECT pg_backend_pid()")
        if not _alive(backend):
            pytest.skip("the PostgreSQL server is not a local process (a container)")
        database = pg_url.rsplit("/", 1)[1]
        assert backend_database(postgres_processes()[backend]) == database
        ours0, other0 = postgres_cpu_seconds(database), postgres_cpu_seconds("no_such_db")
        spent0 = cpu_seconds(backend)
        await conn.fetchval("SELECT sum(i) FROM generate_series(1, 3000000) AS i")
        spent = cpu_seconds(backend) - spent0
        ours = postgres_cpu_seconds(database) - ours0
        other = postgres_cpu_seconds("no_such_db") - other0
    finally:
        await conn.close()
    assert spent > 0.05
    assert ours >= spent
    # (the server's own processes are in both: the WAL writer, the checkpointer)
    assert other < spent / 2


def _busy(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


@pytest.mark.parametrize("in_thread", [False, True], ids=["main-thread", "exited-thread"])
def test_cpu_seconds_resolves_below_a_clock_tick(in_thread: bool) -> None:
    """A process's CPU comes to well under the 10 ms of a clock tick, including a
    thread that ran and exited in between (ticks alone are 0, 10 or 20 ms off)."""
    pid = os.getpid()
    for seconds in (0.004, 0.013):
        t0, c0 = time.process_time(), cpu_seconds(pid)
        if in_thread:
            worker = threading.Thread(target=_busy, args=(seconds,))
            worker.start()
            worker.join()
        else:
            _busy(seconds)
        c1, t1 = cpu_seconds(pid), time.process_time()
        assert abs((c1 - c0) - (t1 - t0)) < 0.003, (c1 - c0, t1 - t0)
