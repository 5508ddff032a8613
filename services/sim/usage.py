"""Usage models for the simulator: what each running pod uses, as a fraction of its
limit, over virtual time (issue 20 part 6; Borg, EuroSys '15, section 5.5).

None of the traces esched reads records usage (openb, DLRM, Philly and ITP list
requests, limits and times only), so a run with reclamation needs a model:

**Synthetic** (:class:`SyntheticUsage`, ``synthetic:cpu=0.35,memory=0.55,...``). Per
pod and resource a *base* fraction of the limit, drawn once from a Beta distribution
with mean ``cpu`` (``memory``) and concentration ``spread`` (``a + b``; larger is
narrower), from a generator seeded by (``seed``, resource, pod); then at time ``t``::

    f(t) = clip(base * (1 + diurnal * sin(2 pi t / period)) + noise * N(0, 1), 0, 1)

The diurnal term has one phase for every pod (a cell's users peak together, which is
what makes predictions wrong at peak hours); the Gaussian noise is drawn per pod,
resource and report instant from a counter-based hash of (``seed``, pod, resource,
instant), so a pod's usage at an instant does not depend on which other pods run,
and two runs of the same workload (say with and without reclamation) see the same
usage.

**Correlated** (the same model with ``cell``, ``job``, ``burst``, ``burst_p`` and
``window`` set; ``correlated`` is a preset of them): pods move together. Per
resource and ``window`` of time a factor common to the whole cell, ``cell * N(0,
1)`` (load surges and lulls that every service sees at once, in random steps where
the diurnal term is smooth); per job, resource and window a factor common to the
job's tasks, ``job * N(0, 1)`` (the tasks of one service under one load); and per
job and window, with probability ``burst_p``, a burst: every task of the job uses
``burst`` more of its limit (cpu and memory alike: a busy job). Then::

    f(t) = clip(base * (1 + diurnal * sin(2 pi t / period)) + cell * C[resource, w]
                + job * Z[job, resource, w] + burst * B[job, w] + noise * N(0, 1), 0, 1)

with ``w = floor(t / window)``; C, Z and B are the same counter-based hashes, Z and
B keyed by the job's name (its CRC-32), so the tasks of a job agree wherever they
run. An
independent noise averages out over a node's pods; a common factor and a burst do
not, which is what makes a node run out between two reports.

Fractions stay within [0, 1]: a pod never uses more than its limit (memory: Borg
kills a task above its limit; CPU: throttled to it), so placing every pod by its
limits never overloads a node, and reclamation is what can.

**Constant** (``limits``, or ``constant:F``): every pod uses ``F`` of its limit (1:
exactly its limits, nothing to reclaim beyond the margin).

**Recorded** (:class:`RecordedUsage`, ``csv:FILE``): real usage where one has it, a
CSV ``job,time,cpu,memory`` (fractions of the limit, seconds of the trace's clock;
Alibaba's ``container_usage`` or Google's ``task_usage`` divided by the limits, for
instance): each job's last sample at or before ``t`` (before its first sample: the
first), jobs without samples at ``default`` of their limit.

A model answers :meth:`UsageModel.fractions` for many pods at once (numpy arrays),
so a report over thousands of pods is a few vector operations.
"""

from __future__ import annotations

import csv
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "ConstantUsage",
    "RecordedUsage",
    "SyntheticUsage",
    "UsageModel",
    "UsageModelError",
    "parse_usage",
]

#: The resources a model gives fractions for (the ones Borg reclaims).
RESOURCES = ("cpu", "memory")

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xBF58476D1CE4E5B9)
_M3 = np.uint64(0x94D049BB133111EB)


class UsageModelError(ValueError):
    """A usage model spec that cannot be used; the message names the part."""


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """splitmix64's finaliser, vectorized (uint64 arithmetic wraps, as in C)."""
    x = x + _M1
    x = (x ^ (x >> np.uint64(30))) * _M2
    x = (x ^ (x >> np.uint64(27))) * _M3
    return x ^ (x >> np.uint64(31))


def _uniform(*keys: npt.NDArray[np.uint64] | int) -> npt.NDArray[np.float64]:
    """A uniform in (0, 1) per element, a pure function of the keys (counter-based)."""
    h = np.zeros(np.broadcast(*[np.asarray(k) for k in keys]).shape, dtype=np.uint64)
    for k in keys:
        h = _mix(h ^ np.asarray(k, dtype=np.uint64))
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / 9007199254740992.0)


class UsageModel:
    """Per pod a usage fraction of its limit over time (see the module docstring)."""

    #: How the model is written on the command line (reports echo it).
    spec: str = ""

    def fractions(
        self, pods: npt.NDArray[np.int64], jobs: Sequence[str], t: float
    ) -> dict[str, npt.NDArray[np.float64]]:
        """Per resource (``cpu``, ``memory``) the fraction of the limit each pod uses at
        time ``t``; ``pods`` are stable pod ids (the same pod, the same id in every
        run), ``jobs`` the pods' job names (recorded usage is per job)."""
        raise NotImplementedError

    def assumptions(self) -> list[str]:
        """What the model assumes, for the report."""
        raise NotImplementedError

    def as_dict(self) -> dict[str, Any]:
        """The model's parameters (reports)."""
        return {"spec": self.spec}


@dataclass
class ConstantUsage(UsageModel):
    """Every pod uses ``fraction`` of its limit, always."""

    fraction: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.fraction <= 1.0:
            raise UsageModelError(f"constant:{self.fraction}: a fraction within [0, 1]")
        self.spec = "limits" if self.fraction == 1.0 else f"constant:{self.fraction:g}"

    def fractions(
        self, pods: npt.NDArray[np.int64], jobs: Sequence[str], t: float
    ) -> dict[str, npt.NDArray[np.float64]]:
        return {r: np.full(len(pods), self.fraction) for r in RESOURCES}

    def assumptions(self) -> list[str]:
        return [f"every pod uses {100 * self.fraction:g}% of its limit of cpu and memory, always"]

    def as_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "fraction": self.fraction}


@dataclass
class SyntheticUsage(UsageModel):
    """The documented synthetic model (module docstring); defaults are esched's
    choices, near the cluster-trace averages (CPU used well below its limit, memory
    closer to it)."""

    cpu: float = 0.35
    memory: float = 0.55
    spread: float = 4.0
    diurnal: float = 0.2
    period: float = 86400.0
    noise: float = 0.05
    seed: int = 0
    #: sd of the cell's common factor (fraction of the limit), redrawn each window
    cell: float = 0.0
    #: sd of the per-job common factor (fraction of the limit), redrawn each window
    job: float = 0.0
    #: what a bursting job's tasks use more (fraction of the limit)
    burst: float = 0.0
    #: probability that a job bursts in a window
    burst_p: float = 0.0
    #: seconds a job's factor and burst hold
    window: float = 600.0
    _base: dict[str, dict[int, float]] = field(default_factory=dict, repr=False, compare=False)
    _job_ids: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("cpu", "memory"):
            v = getattr(self, name)
            if not 0.0 < v < 1.0:
                raise UsageModelError(f"synthetic: {name}={v}: a mean within (0, 1)")
        if not self.spread > 0:
            raise UsageModelError(f"synthetic: spread={self.spread}: must be positive")
        if not 0.0 <= self.diurnal <= 1.0:
            raise UsageModelError(f"synthetic: diurnal={self.diurnal}: within [0, 1]")
        if not self.period > 0:
            raise UsageModelError(f"synthetic: period={self.period}: must be positive")
        if not self.noise >= 0:
            raise UsageModelError(f"synthetic: noise={self.noise}: must not be negative")
        if not self.cell >= 0:
            raise UsageModelError(f"synthetic: cell={self.cell}: must not be negative")
        if not self.job >= 0:
            raise UsageModelError(f"synthetic: job={self.job}: must not be negative")
        if not 0.0 <= self.burst <= 1.0:
            raise UsageModelError(f"synthetic: burst={self.burst}: within [0, 1]")
        if not 0.0 <= self.burst_p <= 1.0:
            raise UsageModelError(f"synthetic: burst_p={self.burst_p}: within [0, 1]")
        if not self.window > 0:
            raise UsageModelError(f"synthetic: window={self.window}: must be positive")
        self.spec = (
            f"synthetic:cpu={self.cpu:g},memory={self.memory:g},spread={self.spread:g},"
            f"diurnal={self.diurnal:g},period={self.period:g},noise={self.noise:g},"
            f"seed={self.seed}"
        )
        if self.correlated:
            self.spec += (
                f",cell={self.cell:g},job={self.job:g},burst={self.burst:g},burst_p={self.burst_p:g},"
                f"window={self.window:g}"
            )

    @property
    def correlated(self) -> bool:
        """Whether the tasks of a job move together (a common factor or bursts)."""
        return self.cell > 0 or self.job > 0 or (self.burst > 0 and self.burst_p > 0)

    def _jobs(self, jobs: Sequence[str]) -> npt.NDArray[np.uint64]:
        """A stable id per job name (CRC-32: the same in every run and process)."""
        memo = self._job_ids
        out = np.empty(len(jobs), dtype=np.uint64)
        for i, name in enumerate(jobs):
            v = memo.get(name)
            if v is None:
                v = memo[name] = zlib.crc32(name.encode())
            out[i] = v
        return out

    def base(self, resource: str, pods: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """Each pod's base fraction of ``resource`` (drawn once per pod, then kept)."""
        mean = self.cpu if resource == "cpu" else self.memory
        a, b = mean * self.spread, (1.0 - mean) * self.spread
        memo = self._base.setdefault(resource, {})
        r = RESOURCES.index(resource)
        out = np.empty(len(pods))
        for i, p in enumerate(pods.tolist()):
            v = memo.get(p)
            if v is None:
                v = memo[p] = float(np.random.default_rng((self.seed, r, p)).beta(a, b))
            out[i] = v
        return out

    def fractions(
        self, pods: npt.NDArray[np.int64], jobs: Sequence[str], t: float
    ) -> dict[str, npt.NDArray[np.float64]]:
        wave = 1.0 + self.diurnal * math.sin(2.0 * math.pi * t / self.period)
        instant = round(t * 1000.0)
        ids = pods.astype(np.uint64)
        common: npt.NDArray[np.float64] = np.zeros(len(pods))
        job_ids = None
        w = max(math.floor(t / self.window), 0)
        if self.correlated:
            job_ids = self._jobs(jobs)
            if self.burst and self.burst_p:
                bursting = _uniform(self.seed, 5, w, job_ids) < self.burst_p
                common = self.burst * bursting.astype(np.float64)
        out = {}
        for r, name in enumerate(RESOURCES):
            f = self.base(name, pods) * wave + common
            if self.cell:
                at = np.array([w], dtype=np.uint64)  # (a 0-d array's arithmetic would warn)
                u1, u2 = _uniform(self.seed, r, 6, at)[0], _uniform(self.seed, r, 7, at)[0]
                f = f + self.cell * float(np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2))
            if self.job and job_ids is not None:
                u1 = _uniform(self.seed, r, 3, w, job_ids)
                u2 = _uniform(self.seed, r, 4, w, job_ids)
                f = f + self.job * np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)
            if self.noise:
                u1 = _uniform(self.seed, r, 1, instant, ids)
                u2 = _uniform(self.seed, r, 2, instant, ids)
                f = f + self.noise * np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)
            out[name] = np.clip(f, 0.0, 1.0)
        return out

    def assumptions(self) -> list[str]:
        return [
            f"per pod a base fraction of its limit, Beta with mean {self.cpu:g} (cpu) and "
            f"{self.memory:g} (memory), concentration a+b = {self.spread:g}, drawn once per pod "
            f"(seed {self.seed})",
            f"a diurnal swing of +/-{100 * self.diurnal:g}% of the base, period "
            f"{self.period:g} s, the same phase for every pod",
            f"Gaussian noise, sd {self.noise:g} of the limit, per pod, resource and report",
            *self._correlation(),
            "fractions clipped to [0, 1]: no pod uses more than its limit",
            "no trace esched reads records usage: the model stands in for it",
        ]

    def _correlation(self) -> list[str]:
        if not self.correlated:
            return ["pods independent of each other: no common factor, no bursts"]
        return [
            f"every pod of the cell moves together: a common factor of sd {self.cell:g} of "
            f"the limit per resource, redrawn every {self.window:g} s (load surges and lulls)",
            f"the tasks of a job move together: a common factor of sd {self.job:g} of the "
            f"limit per job and resource, redrawn every {self.window:g} s",
            f"bursts: in each {self.window:g} s window a job bursts with probability "
            f"{self.burst_p:g}, its tasks then using {self.burst:g} more of their limits "
            "(cpu and memory)",
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "cpu": self.cpu,
            "memory": self.memory,
            "spread": self.spread,
            "diurnal": self.diurnal,
            "period": self.period,
            "noise": self.noise,
            "seed": self.seed,
            "cell": self.cell,
            "job": self.job,
            "burst": self.burst,
            "burst_p": self.burst_p,
            "window": self.window,
        }


class RecordedUsage(UsageModel):
    """Real usage per job from a CSV ``job,time,cpu,memory`` (fractions of the limit)."""

    def __init__(self, path: str | Path, default: float = 1.0) -> None:
        self.path = str(path)
        self.default = default
        self.spec = f"csv:{self.path}"
        rows: dict[str, list[tuple[float, float, float]]] = {}
        try:
            with open(path, newline="") as fh:
                for i, row in enumerate(csv.DictReader(fh), start=2):
                    try:
                        sample = (float(row["time"]), float(row["cpu"]), float(row["memory"]))
                        rows.setdefault(row["job"], []).append(sample)
                    except (KeyError, TypeError, ValueError):
                        raise UsageModelError(
                            f"{path}:{i}: expected columns job,time,cpu,memory (numbers)"
                        ) from None
        except OSError as exc:
            raise UsageModelError(f"{path}: {exc}") from None
        self.samples: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for job, s in rows.items():
            s.sort()
            arr = np.clip(np.array(s, dtype=np.float64), [-np.inf, 0, 0], [np.inf, 1, 1])
            self.samples[job] = (arr[:, 0], arr[:, 1], arr[:, 2])

    def fractions(
        self, pods: npt.NDArray[np.int64], jobs: Sequence[str], t: float
    ) -> dict[str, npt.NDArray[np.float64]]:
        cpu = np.full(len(pods), self.default)
        mem = np.full(len(pods), self.default)
        for i, job in enumerate(jobs):
            s = self.samples.get(job)
            if s is None:
                continue
            k = max(int(np.searchsorted(s[0], t, side="right")) - 1, 0)
            cpu[i], mem[i] = s[1][k], s[2][k]
        return {"cpu": cpu, "memory": mem}

    def assumptions(self) -> list[str]:
        return [
            f"recorded usage from {self.path} ({len(self.samples)} jobs): each job's last "
            "sample at or before the report (before its first: the first), every task of a "
            "job alike",
            f"jobs without samples use {100 * self.default:g}% of their limits",
        ]

    def as_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "jobs": len(self.samples), "default": self.default}


_SYNTH_KEYS = {
    "cpu": float,
    "memory": float,
    "spread": float,
    "diurnal": float,
    "period": float,
    "noise": float,
    "seed": int,
    "cell": float,
    "job": float,
    "burst": float,
    "burst_p": float,
    "window": float,
}

#: ``correlated``: the synthetic model with jobs moving together (module docstring);
#: its keys may be overridden as ``correlated:k=v,...``.
CORRELATED = {"cell": 0.2, "job": 0.1, "burst": 0.3, "burst_p": 0.05, "window": 600.0}


def parse_usage(spec: str) -> UsageModel:
    """A usage model from its command-line spec: ``synthetic[:k=v,...]`` (keys cpu,
    memory, spread, diurnal, period, noise, seed, job, burst, burst_p, window),
    ``correlated[:k=v,...]`` (the same with :data:`CORRELATED`'s defaults),
    ``limits``, ``constant:F`` or ``csv:FILE``. :class:`UsageModelError` names what is wrong."""
    kind, _, rest = spec.partition(":")
    if kind == "limits" and not rest:
        return ConstantUsage(1.0)
    if kind == "constant":
        try:
            fraction = float(rest)
        except ValueError:
            raise UsageModelError(f"{spec!r}: constant:F with F a number") from None
        return ConstantUsage(fraction)
    if kind == "csv":
        if not rest:
            raise UsageModelError(f"{spec!r}: csv:FILE")
        return RecordedUsage(rest)
    if kind == "synthetic" or kind == "correlated":
        kw: dict[str, Any] = dict(CORRELATED) if kind == "correlated" else {}
        for part in filter(None, (p.strip() for p in rest.split(","))):
            k, eq, v = part.partition("=")
            conv = _SYNTH_KEYS.get(k)
            if not eq or conv is None:
                known = ", ".join(f"{k}=" for k in _SYNTH_KEYS)
                raise UsageModelError(f"{kind}: unknown parameter {part!r} ({known})")
            try:
                kw[k] = conv(v)
            except ValueError:
                raise UsageModelError(f"{kind}: {k}={v!r} is not a number") from None
        return SyntheticUsage(**kw)
    raise UsageModelError(
        f"usage model {spec!r}: synthetic[:k=v,...], correlated[:k=v,...], limits, "
        "constant:F or csv:FILE"
    )
