"""CPU seconds of the benchmark's processes (Linux /proc)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from esched.services.procs import ServiceProcess

_TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state is [0]); None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def cpu_seconds(pid: int, *, reaped: bool = False) -> float:
    """User + system CPU seconds of a process so far (Linux /proc); 0 if gone.

    With ``reaped``, the CPU of its children that exited and were waited for is
    added (``cutime`` + ``cstime``).
    """
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / _TICK


def peak_rss_mib(pid: int) -> float:
    """Peak resident memory (MiB, ``VmHWM``) of a live process (Linux /proc); 0 if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def _postgres_pids() -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if (d / "comm").read_text().strip() == "postgres":
                    pids.append(int(d.name))
    return pids


def postgres_cpu_seconds() -> float:
    """CPU seconds of the PostgreSQL server so far: every live server process, and the
    postmaster's exited children (a backend whose connection closed takes its CPU
    with it otherwise, and a difference of two sums could go negative)."""
    pids = _postgres_pids()
    live = set(pids)
    total = 0.0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is None:
            continue
        # The postmaster is the server process whose parent is not a server process.
        total += cpu_seconds(pid, reaped=int(fields[1]) not in live)
    return total


def cpu_snapshot(services: list[ServiceProcess], broker_pid: int | None) -> dict[str, float]:
    """CPU seconds so far per service process, the broker and the PostgreSQL server
    (:func:`postgres_cpu_seconds`; the server is shared: other clients' work is
    included)."""
    out = {s.name: cpu_seconds(s.proc.pid) for s in services}
    if broker_pid:
        out["broker"] = cpu_seconds(broker_pid)
    out["postgresql"] = postgres_cpu_seconds()
    out["bench"] = cpu_seconds(os.getpid())
    return out
