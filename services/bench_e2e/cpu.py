"""CPU seconds of the benchmark's processes (Linux /proc)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import Any

from esched.services.procs import ServiceProcess

_TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state is [0]); None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _process_clock(pid: int) -> int:
    """The clock id of a process's CPU time, all its threads (``clock_getcpuclockid``:
    the kernel's ``CPUCLOCK_SCHED`` clock of process ``pid``)."""
    return ((~pid) << 3) | 2


def cpu_seconds(pid: int, *, reaped: bool = False) -> float:
    """User + system CPU seconds of a process so far; 0 if gone.

    Read from the process's CPU clock, exact to the nanosecond and counting threads
    that exited (the ticks of ``/proc/PID/stat`` come in 10 ms steps, too coarse for
    a few µs per pod over a short run), else from those ticks. With ``reaped``, the
    CPU of its children that exited and were waited for is added (``cutime`` +
    ``cstime``, ticks).
    """
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    try:
        seconds = time.clock_gettime(_process_clock(pid))
    except OSError:
        seconds = (int(fields[11]) + int(fields[12])) / _TICK
    if reaped:
        seconds += (int(fields[13]) + int(fields[14])) / _TICK
    return seconds


def peak_rss_mib(pid: int) -> float:
    """Peak resident memory (MiB, ``VmHWM``) of a live process (Linux /proc); 0 if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def postgres_processes() -> dict[int, str]:
    """The PostgreSQL server's processes: pid -> process title (its ``cmdline``)."""
    found: dict[int, str] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if (d / "comm").read_text().strip() == "postgres":
                    found[int(d.name)] = (
                        (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    )
    return found


def backend_database(title: str) -> str | None:
    """The database of a client backend from its process title (``postgres: CLUSTER:
    USER DATABASE HOST(PORT) STATE``, or ``[local]`` for a socket); None for the
    postmaster and the server's background processes (checkpointer, walwriter, ...)."""
    words = title.rsplit(": ", 1)[-1].split()
    if len(words) >= 3 and (words[2].endswith(")") or words[2] == "[local]"):
        return words[1]
    return None


def postgres_cpu_seconds(database: str | None = None) -> float:
    """CPU seconds of the PostgreSQL server so far.

    Without ``database``: every live server process, and the postmaster's exited
    children (a backend whose connection closed takes its CPU with it otherwise,
    and a difference of two sums could go negative; they come in clock ticks, so a
    backend's exit may lose up to one, 10 ms). With it: the sum of
    :func:`postgres_cpu_split`."""
    if database is not None:
        return sum(postgres_cpu_split(database))
    procs = postgres_processes()
    total = 0.0
    for pid in procs:
        fields = _stat_fields(pid)
        if fields is not None:
            # The postmaster is the server process whose parent is not a server process.
            total += cpu_seconds(pid, reaped=int(fields[1]) not in procs)
    return total


def postgres_cpu_split(database: str) -> tuple[float, float]:
    """CPU seconds so far of the backends connected to ``database`` and of the
    server's own processes (the postmaster, the WAL writer, the checkpointer, ...):
    a run's share of a server that other clients use too, no other database's
    backends and no exited children (those of every database are one sum). A
    backend of ``database`` that exits between two readings takes its CPU out of
    the second, so the services' connections must outlive the measured window."""
    backends = server = 0.0
    for pid, title in postgres_processes().items():
        owner = backend_database(title)
        if owner is None:
            server += cpu_seconds(pid)
        elif owner == database:
            backends += cpu_seconds(pid)
    return backends, server


def cpu_snapshot(
    services: list[ServiceProcess], broker_pid: int | None, database: str | None = None
) -> dict[str, float]:
    """CPU seconds so far per service process, the broker and the PostgreSQL server:
    with ``database``, its backends (``postgresql``) and the server's own processes
    (``postgresql_server``: WAL writes, checkpoints) apart (:func:`postgres_cpu_split`);
    without, the whole server under ``postgresql``, other clients' work included."""
    out = {s.name: cpu_seconds(s.proc.pid) for s in services}
    if broker_pid:
        out["broker"] = cpu_seconds(broker_pid)
    if database is None:
        out["postgresql"] = postgres_cpu_seconds()
    else:
        out["postgresql"], out["postgresql_server"] = postgres_cpu_split(database)
    out["bench"] = cpu_seconds(os.getpid())
    return out


async def idle_cpu(
    services: list[ServiceProcess],
    broker_pid: int | None,
    seconds: float,
    database: str | None = None,
) -> dict[str, Any]:
    """Each process's CPU share (cores) over ``seconds`` in which the benchmark sends
    nothing (:func:`cpu_snapshot`'s processes): the cost of waiting for work."""
    cpu0 = cpu_snapshot(services, broker_pid, database)
    t0 = time.perf_counter()
    # A measurement window, not a wait for an event: nothing is expected to happen.
    await asyncio.sleep(seconds)
    cpu1 = cpu_snapshot(services, broker_pid, database)
    span = time.perf_counter() - t0
    return {
        "seconds": round(span, 2),
        "cpu_share": {k: round((cpu1[k] - cpu0.get(k, 0.0)) / span, 4) for k in cpu1},
    }
