"""CPU caps for benchmark processes: each in a cgroup of its own with a CPU quota.

``esched bench scale`` gives every replica process a fraction of one CPU, as if each
ran on a small machine of its own, while the other services run uncapped. The
kernel's CFS bandwidth control does the capping: a quota of CPU time per period.
Both cgroup layouts are handled: v2 (``cpu.max``, a ``cgroup2`` mount with the cpu
controller) and v1 (``cpu.cfs_quota_us`` under the cpu controller's mount),
whichever is writable; :func:`find_cpu_controller` says clearly when neither is.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CgroupError",
    "CpuCap",
    "CpuController",
    "find_cpu_controller",
    "quota_us",
]

#: The CFS period caps are expressed in (the kernel's default, 100 ms).
PERIOD_US = 100_000
#: The kernel refuses quotas under 1 ms per period.
MIN_QUOTA_US = 1_000
#: Where to look, in order: a cgroup v2 mount (unified, or the whole hierarchy),
#: then the v1 cpu controller's mount.
CANDIDATES = (
    ("v2", Path("/sys/fs/cgroup/unified")),
    ("v2", Path("/sys/fs/cgroup")),
    ("v1", Path("/sys/fs/cgroup/cpu")),
    ("v1", Path("/sys/fs/cgroup/cpu,cpuacct")),
)


class CgroupError(RuntimeError):
    """No writable cgroup CPU controller, or a cap that cannot be applied."""


def quota_us(cpus: float, period_us: int = PERIOD_US) -> int:
    """The CFS quota (µs per ``period_us``) of a cap of ``cpus`` CPUs; at least the
    kernel's minimum, so very small caps widen the period instead of rounding to 0."""
    if cpus <= 0:
        raise ValueError(f"a CPU cap must be > 0, got {cpus}")
    return max(MIN_QUOTA_US, round(cpus * period_us))


def cap_period_us(cpus: float) -> int:
    """The period a cap of ``cpus`` uses: the default, or longer when the quota would
    fall under the kernel's minimum (0.005 CPU: 1 ms per 200 ms)."""
    if cpus <= 0:
        raise ValueError(f"a CPU cap must be > 0, got {cpus}")
    return max(PERIOD_US, round(MIN_QUOTA_US / cpus))


@dataclass(frozen=True)
class CpuController:
    """A writable cgroup CPU controller: its version and the directory new groups go in."""

    version: str  # "v1" or "v2"
    root: Path

    def create(self, name: str, cpus: float) -> CpuCap:
        """A new group under :attr:`root` capped at ``cpus`` CPUs."""
        path = self.root / name
        try:
            path.mkdir(parents=True, exist_ok=False)
        except OSError as exc:
            raise CgroupError(f"cannot create cgroup {path}: {exc.strerror}") from exc
        cap = CpuCap(self.version, path, cpus)
        try:
            cap.apply()
        except CgroupError:
            cap.remove()
            raise
        return cap


@dataclass(frozen=True)
class CpuCap:
    """One capped cgroup: :meth:`add` processes, read their CPU time, :meth:`remove`."""

    version: str
    path: Path
    cpus: float

    def apply(self) -> None:
        """Write the quota: ``cpu.max`` (v2), or ``cpu.cfs_period_us`` and
        ``cpu.cfs_quota_us`` (v1)."""
        period = cap_period_us(self.cpus)
        quota = quota_us(self.cpus, period)
        try:
            if self.version == "v2":
                (self.path / "cpu.max").write_text(f"{quota} {period}\n")
            else:
                (self.path / "cpu.cfs_period_us").write_text(f"{period}\n")
                (self.path / "cpu.cfs_quota_us").write_text(f"{quota}\n")
        except OSError as exc:
            raise CgroupError(f"cannot set the CPU quota of {self.path}: {exc}") from exc

    def lift(self) -> None:
        """Remove the quota (the processes stop at full speed: a capped process takes
        long to say goodbye to its group); best effort."""
        with contextlib.suppress(OSError):
            if self.version == "v2":
                (self.path / "cpu.max").write_text(f"max {cap_period_us(self.cpus)}\n")
            else:
                (self.path / "cpu.cfs_quota_us").write_text("-1\n")

    def add(self, pid: int) -> None:
        """Move process ``pid`` (all its threads) into the group."""
        try:
            (self.path / "cgroup.procs").write_text(f"{pid}\n")
        except OSError as exc:
            raise CgroupError(f"cannot move process {pid} into {self.path}: {exc}") from exc

    def throttled(self) -> dict[str, float]:
        """How often the quota held the group back: periods, throttled periods, and
        throttled seconds (``cpu.stat``)."""
        stat: dict[str, int] = {}
        with contextlib.suppress(OSError):
            for line in (self.path / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if value.strip().isdigit():
                    stat[key] = int(value)
        # v2 counts in µs, v1 in ns.
        throttled_s = (
            stat.get("throttled_usec", 0) / 1e6
            if self.version == "v2"
            else stat.get("throttled_time", 0) / 1e9
        )
        return {
            "periods": stat.get("nr_periods", 0),
            "throttled_periods": stat.get("nr_throttled", 0),
            "throttled_s": round(throttled_s, 3),
        }

    def remove(self) -> None:
        """Delete the group once its processes have ended (best effort)."""
        with contextlib.suppress(OSError):
            self.path.rmdir()


def _writable_v2(root: Path) -> bool:
    try:
        controllers = (root / "cgroup.controllers").read_text().split()
    except OSError:
        return False
    if "cpu" not in controllers:
        return False
    control = root / "cgroup.subtree_control"
    try:
        if "cpu" not in control.read_text().split():
            control.write_text("+cpu\n")
    except OSError:
        return False
    return os.access(root, os.W_OK)


def _writable_v1(root: Path) -> bool:
    return (root / "cpu.cfs_quota_us").exists() and os.access(root, os.W_OK)


def find_cpu_controller(
    candidates: tuple[tuple[str, Path], ...] = CANDIDATES, group: str | None = None
) -> CpuController:
    """The first writable CPU controller of ``candidates``, with a parent group
    (``group``, default ``esched-bench-<random>``) made under it for the caps.

    Raises :class:`CgroupError` naming what was tried when none is usable (not root,
    a read-only /sys/fs/cgroup in a container, no cpu controller).
    """
    tried = []
    for version, root in candidates:
        usable = _writable_v2(root) if version == "v2" else _writable_v1(root)
        tried.append(f"{root} ({version}): {'writable' if usable else 'not usable'}")
        if not usable:
            continue
        parent = root / (group or f"esched-bench-{uuid.uuid4().hex[:8]}")
        try:
            parent.mkdir(exist_ok=True)
            if version == "v2":
                # Children's cpu.max needs the controller enabled in the parent too.
                (parent / "cgroup.subtree_control").write_text("+cpu\n")
        except OSError as exc:
            tried[-1] = f"{root} ({version}): {exc}"
            continue
        return CpuController(version, parent)
    raise CgroupError(
        "no writable cgroup CPU controller (run as root, with /sys/fs/cgroup writable: "
        "cgroup v2 with the cpu controller, or v1's cpu controller); tried " + "; ".join(tried)
    )


def remove_controller_group(controller: CpuController) -> None:
    """Delete the parent group :func:`find_cpu_controller` made (best effort)."""
    with contextlib.suppress(OSError):
        controller.root.rmdir()
