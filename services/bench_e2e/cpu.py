"""CPU seconds of the benchmark's processes (Linux /proc)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from esched.services.procs import ServiceProcess

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc); 0 if gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


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


def cpu_snapshot(services: list[ServiceProcess], broker_pid: int | None) -> dict[str, float]:
    """CPU seconds so far per service process, the broker and all PostgreSQL processes
    (the server is shared: other clients' work is included)."""
    out = {s.name: cpu_seconds(s.proc.pid) for s in services}
    if broker_pid:
        out["broker"] = cpu_seconds(broker_pid)
    out["postgresql"] = sum(cpu_seconds(p) for p in _postgres_pids())
    out["bench"] = cpu_seconds(os.getpid())
    return out
