"""Verma et al.'s packing measures (Borg, EuroSys '15, §5): cluster compaction and
workload inflation, and the FGD experiment's allocation-vs-arrivals curve.

**The workload** of a packing test is a *checkpoint*: the pods of the trace that are
running at one instant (by the trace's own times: openb scheduled..deletion, the
job traces submission..submission+duration), placed one at a time in arrival order
with no departures, each pod placed or left pending (never retried), exactly Borg's
"take a checkpoint, re-pack it" method. ``at="peak"`` (default) picks the instant
when the trace's requested GPUs (else CPU) peak.

**Compaction**: for one trial, a random permutation of the machines; binary search
for the smallest prefix of it on which the checkpoint runs with at most ``tau`` of
its pods pending; stop when ``hi - lo <= mu`` (machines) and return ``hi``. Several
trials (11 in Borg) give a distribution; reports show the median with min/max and
the 5th/95th percentile (Borg's error bars: "90% of the trials").

**Inflation**: on the whole cluster, clone random jobs of the checkpoint (uniform,
with replacement) and add them until more than ``tau`` of the pods are pending;
report the allocation rates reached.

**Hole filling**: pack the checkpoint on the whole cluster (machines in a seeded
random order, as a compaction trial's first step), then count how many *filler* tasks
still fit in the holes it leaves: the survey seed's third measure, where every
dimension is filled with fixed-size one-dimension virtual tasks to see the
utilization that dimension can still reach (Verma et al. note its limits: real tasks
are multi-dimensional and constrained). Besides one-dimension fillers (a core of
CPU, a GiB of memory, one GPU), a filler may be any task shape, answering "how many
more of these fit". Identical fillers are counted exactly, per node, with no choice
left to a policy: ``min`` over the filler's resources of ``floor(free / request)``
(and the free pod slots), where GPUs count per device (a share ``g`` fits
``sum floor(free_d / g)`` times, ``k`` whole GPUs ``floor(idle devices / k)``). So the
count measures the holes the policy left, nothing else. Fillers ignore node
constraints (they have none).

**FGD curve** (``inflation_curve``): the FGD paper's experiment: the trace's pods
shuffled, then resampled with replacement until their GPU request is ``until`` of
capacity, placed one at a time, failures dropped; allocation rate against arrived
request, in integer-percent bins (see shared/traces/.../FGD-ANCHOR.md). Run with
esched's scheduler (``method="kube"``) or with the paper's artifact's
(``method="paper"``: :func:`paper_method`, :func:`curve_bins`).

Trials run in worker processes (``concurrent.futures.ProcessPoolExecutor``); each
trial is a pure function of (trace, profile file, seed), so results do not depend on
the number of workers.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from esched.core import Profile, load_profile
from esched.services.sim.engine import GPU_RESOURCE, Simulator
from esched.services.sim.traces import Job, Trace

__all__ = [
    "CURVE_METHODS",
    "Filler",
    "capacity_bound",
    "checkpoint",
    "compaction_trial",
    "curve_bins",
    "curve_label",
    "default_at",
    "default_fillers",
    "fits",
    "hole_counts",
    "hole_filling",
    "inflate",
    "inflation_curve",
    "paper_method",
    "parse_filler",
    "run_trials",
]


def default_at(trace: Trace) -> str:
    """openb: "running", the 5,193 pods the trace records as Running (its own snapshot;
    by their times the pods are sparse: at the busiest instant only ~50 of 8,152 run);
    the others: "peak"."""
    return "running" if trace.kind == "openb" else "peak"


def checkpoint(trace: Trace, at: float | str = "peak") -> tuple[float, list[Job]]:
    """The jobs of ``trace`` running at ``at`` (seconds; "peak"; "all": every job;
    "running": the jobs whose recorded phase is Running), in arrival order, with
    arrival 0 and no deadline (a static packing problem)."""
    jobs = trace.jobs
    if not jobs:
        return 0.0, []
    if at == "all":
        return float("nan"), [replace(j, arrival=0.0, deadline=None) for j in jobs]
    if at == "running":
        return float("nan"), [
            replace(j, arrival=0.0, deadline=None) for j in jobs if j.phase == "Running"
        ]
    key = "gpu" if any(j.gpu_milli for j in jobs) else "cpu"

    def weight(j: Job) -> int:
        return j.tasks * (j.gpu_milli if key == "gpu" else j.cpu_milli)

    if at == "peak":
        deltas = []
        for j in jobs:
            s, e = _trace_span(j)
            deltas.append((s, weight(j)))
            deltas.append((e, -weight(j)))
        deltas.sort(key=lambda x: (x[0], x[1]))
        best, cur, when = -1, 0, 0.0
        for t, d in deltas:
            cur += d
            if cur > best:
                best, when = cur, t
        at = when
    t = float(at)
    alive = [j for j in jobs if _trace_span(j)[0] <= t < _trace_span(j)[1]]
    return t, [replace(j, arrival=0.0, deadline=None) for j in alive]


def _trace_span(j: Job) -> tuple[float, float]:
    if j.deadline is not None:
        return j.deadline - j.duration, j.deadline
    return j.arrival, j.arrival + j.duration


def fits(
    trace: Trace,
    profile: Profile,
    jobs: list[Job],
    nodes: list[int],
    seed: int,
    tau: float,
    **sim_kw: Any,
) -> tuple[bool, float, Simulator]:
    """Pack ``jobs`` on ``nodes`` (indices into trace.nodes); (pending share <= tau,
    pending share, the simulator). ``sim_kw``: more :class:`Simulator` keywords (the
    reclamation study's usage model; by default no departures, no retries)."""
    opts: dict[str, Any] = {"departures": False, "retry": False, **sim_kw}
    sim = Simulator(trace, profile, seed, jobs=jobs, node_subset=nodes, **opts)
    sim.run()
    total = sum(j.tasks for j in jobs)
    pending = sum(jobs[i].tasks for i in range(len(jobs)) if np.isnan(sim.start[i]))
    share = pending / total if total else 0.0
    return share <= tau, share, sim


def capacity_bound(trace: Trace, jobs: list[Job], perm: list[int]) -> int | None:
    """The shortest prefix of ``perm`` whose summed capacity covers all of ``jobs``'
    requests, per resource and, for jobs bound to a node kind, per pool: a lower
    bound on any policy's compaction result at tau = 0 (pods do not split across
    nodes, so the optimum can be higher). None if the whole permutation falls short."""
    worst = 0
    for kind in {j.node_kind for j in jobs}:
        pool = [j for j in jobs if j.node_kind == kind]
        member = [kind is None or (kind == "gpu") == (trace.nodes[i].gpus > 0) for i in perm]
        for attr, node_cap in (
            ("cpu_milli", lambda n: n.cpu_milli),
            ("memory_bytes", lambda n: n.memory_bytes),
            ("gpu_milli", lambda n: n.gpus * 1000),
        ):
            need = sum(getattr(j, attr) * j.tasks for j in pool)
            if not need:
                continue
            caps = np.cumsum(
                [node_cap(trace.nodes[i]) if m else 0 for i, m in zip(perm, member, strict=True)]
            )
            k = int(np.searchsorted(caps, need))
            if k >= len(perm):
                return None
            worst = max(worst, k + 1)
    return worst


def compaction_trial(
    trace: Trace,
    profile: Profile,
    jobs: list[Job],
    seed: int,
    tau: float,
    mu: int = 1,
    **sim_kw: Any,
) -> dict:
    """One compaction trial: the smallest prefix of a seeded permutation that fits, and
    the capacity lower bound of the same permutation (:func:`capacity_bound`).
    ``sim_kw`` go to :func:`fits` (the reclamation study packs with a usage model)."""
    rng = random.Random(seed)
    perm = list(range(len(trace.nodes)))
    rng.shuffle(perm)
    lo, hi = 0, len(perm)
    ok, share, sim = fits(trace, profile, jobs, perm, seed, tau, **sim_kw)
    best = sim  # the run of the answer (its usage figures, with a usage model)
    steps = 1
    bound = capacity_bound(trace, jobs, perm) if tau == 0 else None
    if not ok:
        return {
            "seed": seed,
            "machines": None,
            "fits_whole_cluster": False,
            "pending_share_whole": share,
            "steps": steps,
            "capacity_bound": bound,
        }
    # Invariant: the prefix of length hi fits; of length lo it does not (0 never does
    # unless the workload is empty).
    while hi - lo > mu:
        mid = (lo + hi) // 2
        ok, _, sim = fits(trace, profile, jobs, perm[:mid], seed, tau, **sim_kw)
        steps += 1
        if ok:
            hi, best = mid, sim
        else:
            lo = mid
    out: dict[str, Any] = {
        "seed": seed,
        "machines": hi,
        "fraction": hi / len(perm),
        "fits_whole_cluster": True,
        "steps": steps,
        "capacity_bound": bound,
    }
    if best.usage_stats is not None:
        out["usage"] = best.usage_stats.as_dict()
    return out


def inflate(
    trace: Trace, profile: Profile, jobs: list[Job], seed: int, tau: float, batch: int = 0
) -> dict:
    """Clone random jobs of ``jobs`` until more than ``tau`` of the pods are pending.

    Clones are added in rounds of ``batch`` (default: 2% of the workload) and the
    whole set is re-packed each round; the last round that still fitted is reported.
    """
    rng = random.Random(seed)
    step = batch or max(1, len(jobs) // 50)
    extra: list[Job] = []
    last = None
    for _ in range(1000):
        work = jobs + extra
        ok, share, sim = fits(trace, profile, work, list(range(len(trace.nodes))), seed, tau)
        rates = _rates(sim)
        if not ok:
            return {
                "seed": seed,
                "clones": len(extra) - step if extra else 0,
                "pending_share": share,
                "at_limit": last or rates,
            }
        last = rates
        for _ in range(step):
            src = jobs[rng.randrange(len(jobs))]
            extra.append(replace(src, name=f"{src.name}-c{len(extra)}"))
    raise RuntimeError("inflation did not reach tau in 1000 rounds")


@dataclass(frozen=True, slots=True)
class Filler:
    """A hole-filling task shape: requests in base units (GPU: milli, a share of one
    device up to 1000, else whole GPUs)."""

    name: str
    cpu_milli: int = 0
    memory_bytes: int = 0
    gpu_milli: int = 0

    def requests(self) -> dict[str, int]:
        out = {"cpu": self.cpu_milli, "memory": self.memory_bytes, GPU_RESOURCE: self.gpu_milli}
        return {k: v for k, v in out.items() if v}


def parse_filler(spec: str) -> Filler:
    """``cpu=Q,memory=Q,gpu=G`` (Kubernetes quantities for cpu and memory; ``gpu`` in
    GPUs: a fraction up to 1, or whole GPUs), e.g. ``cpu=1``, ``gpu=0.5``,
    ``cpu=8,memory=32Gi,gpu=1``. ValueError if malformed or empty."""
    from fractions import Fraction

    from esched.schemas.quantity import to_base_units

    kv: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        k, eq, v = part.partition("=")
        if not eq or k not in ("cpu", "memory", "gpu"):
            raise ValueError(f"filler {spec!r}: {part!r} is not cpu=, memory= or gpu=")
        kv[k] = v.strip()
    cpu = to_base_units("cpu", kv["cpu"]) if "cpu" in kv else 0
    mem = to_base_units("memory", kv["memory"]) if "memory" in kv else 0
    gpu = 0
    if "gpu" in kv:
        milli = Fraction(kv["gpu"]) * 1000
        if milli.denominator != 1 or milli < 0:
            raise ValueError(f"filler {spec!r}: gpu={kv['gpu']} is not a whole milli-GPU")
        gpu = int(milli)
        if gpu > 1000 and gpu % 1000:
            raise ValueError(f"filler {spec!r}: above one GPU a filler takes whole GPUs")
    if not (cpu or mem or gpu):
        raise ValueError(f"filler {spec!r}: requests nothing")
    return Filler(spec, cpu, mem, gpu)


def default_fillers(trace: Trace, jobs: list[Job]) -> list[Filler]:
    """One-dimension fillers for each resource the cluster has (a core, a GiB, one
    GPU), and the checkpoint's most common pod shape ("how many more of these")."""
    cap = trace.capacity()
    out = []
    if cap["cpu_milli"]:
        out.append(Filler("cpu=1", cpu_milli=1000))
    if cap["memory_bytes"]:
        out.append(Filler("memory=1Gi", memory_bytes=2**30))
    if cap["gpus"]:
        out.append(Filler("gpu=1", gpu_milli=1000))
    if jobs:
        from collections import Counter

        shapes = Counter(
            (j.cpu_milli, j.memory_bytes, j.gpu_milli) for j in jobs for _ in range(j.tasks)
        )
        (c, m, g), _ = shapes.most_common(1)[0]
        f = Filler(_filler_name(c, m, g) + " (most common)", c, m, g)
        if (c, m, g) != (0, 0, 0) and all(
            (x.cpu_milli, x.memory_bytes, x.gpu_milli) != (c, m, g) for x in out
        ):
            out.append(f)
    return out


def _filler_name(cpu: int, mem: int, gpu: int) -> str:
    parts = []
    if cpu:
        parts.append(f"cpu={cpu}m")
    if mem:
        parts.append(f"memory={mem // 2**20}Mi" if mem % 2**20 == 0 else f"memory={mem}")
    if gpu:
        parts.append(f"gpu={gpu / 1000:g}")
    return ",".join(parts)


def hole_counts(sim: Simulator, fillers: list[Filler]) -> list[dict]:
    """For each filler, how many more fit the cluster as ``sim`` left it (exact: see the
    module docstring), and each requested resource's allocation rate before and after
    filling."""
    st = sim.state
    n = st.n_nodes
    allocatable, allocated = st.node_allocatable(), st.node_allocated()
    free = allocatable.astype(np.int64) - allocated.astype(np.int64)
    pods_col = st.res_index.get("pods")
    dev = sim.devices
    if dev is not None:
        dfree = dev.device_free(n)
        idle = dev.idle_devices(n)
    out = []
    for f in fillers:
        per_node = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        missing = []
        for res, req in f.requests().items():
            c = st.res_index.get(res)
            if c is None:
                missing.append(res)
                per_node[:] = 0
                continue
            per_node = np.minimum(per_node, np.maximum(free[:, c], 0) // req)
        if f.gpu_milli and dev is not None:
            if f.gpu_milli <= 1000:
                on_devices = (dfree // f.gpu_milli).sum(axis=1)
            else:
                on_devices = idle // (f.gpu_milli // 1000)
            per_node = np.minimum(per_node, on_devices)
        if pods_col is not None:
            per_node = np.minimum(per_node, np.maximum(free[:, pods_col], 0))
        count = int(per_node.sum())
        rates = {}
        for res, req in f.requests().items():
            c = st.res_index.get(res)
            if c is None:
                continue
            cap = int(allocatable[:, c].sum())
            if cap:
                used = int(allocated[:, c].sum())
                label = {"cpu": "cpu", "memory": "memory", GPU_RESOURCE: "gpu"}[res]
                rates[label] = {"before": used / cap, "after": (used + count * req) / cap}
        out.append(
            {
                "filler": f.name,
                "count": count,
                "nodes_with_room": int((per_node > 0).sum()),
                "rates": rates,
                "missing_resources": missing,
            }
        )
    return out


def hole_filling(
    trace: Trace, profile: Profile, jobs: list[Job], seed: int, fillers: list[Filler]
) -> dict:
    """One hole-filling trial: the checkpoint packed on every machine (in a seeded
    random order), then :func:`hole_counts`."""
    rng = random.Random(seed)
    perm = list(range(len(trace.nodes)))
    rng.shuffle(perm)
    _, share, sim = fits(trace, profile, jobs, perm, seed, 1.0)
    return {"seed": seed, "pending_share": share, "fillers": hole_counts(sim, fillers)}


def _rates(sim: Simulator) -> dict:
    st = sim.state
    out = {}
    for res, label in (("cpu", "cpu"), ("memory", "memory"), (GPU_RESOURCE, "gpu")):
        c = st.res_index.get(res)
        if c is None:
            continue
        cap = int(st.node_allocatable()[:, c].sum())
        if cap:
            out[label] = int(st.node_allocated()[:, c].sum()) / cap
    return out


#: The curve study's methods: "kube" (esched's scheduler: seeded random ties, the
#: fullest fitting GPU, x floored) and "paper" (the FGD artifact's: see
#: :func:`paper_method`).
CURVE_METHODS = ("kube", "paper")


def paper_method(profile: Profile) -> dict:
    """The FGD artifact's scheduler for ``profile``, as :class:`Simulator` options.

    A profile that scores (FGD, PaperBestFit, ...) breaks ties by a fixed node order
    drawn from the seed (the artifact's patched ``selectHost`` takes the smallest node
    name, and ``simulator.go`` prefixes names with a seeded random permutation). A
    profile that scores nothing is the artifact's Random: its ``RandomScore`` gives one
    uniformly drawn feasible node the top score, which is a uniform draw (random ties),
    and it runs with ``-gpusel random`` (a random fitting GPU).
    """
    scores = any(p.kind != "NodeGroupAffinity" for p in profile.plugins)
    if scores:
        return {"tie_break": "node-order", "gpu_choice": "fit"}
    return {"tie_break": "random", "gpu_choice": "random"}


def curve_label(trial: dict) -> str:
    """A curve trial's row label: its profile, with "[paper method]" for the artifact's
    scheduler (the two methods side by side)."""
    name = str(trial["profile"])
    return f"{name} [paper method]" if trial.get("method") == "paper" else name


def curve_bins(arrived: np.ndarray, method: str = "kube") -> np.ndarray:
    """Integer-percent bins of the arrived share (1.0 = capacity): floored ("kube"),
    or rounded half to even as the artifact's ``merge_alloc_discrete.py`` does with
    Python's ``round(x, 0)`` ("paper")."""
    pct = np.asarray(arrived, dtype=float) * 100
    if method == "paper":
        return np.rint(pct).astype(int)
    return np.floor(pct + 1e-9).astype(int)


def inflation_curve(
    trace: Trace, profile: Profile, seed: int, until: float = 1.3, method: str = "kube"
) -> dict:
    """The FGD experiment: allocated GPU share against arrived GPU request (percent).

    ``method`` "kube" runs esched's scheduler (seeded random ties, the fullest fitting
    GPU) and floors x; "paper" runs the artifact's (:func:`paper_method`) and rounds x
    (:func:`curve_bins`), each row's allocation rounded to 0.01% before the bin mean, as
    the artifact's analysis does.
    """
    if method not in CURVE_METHODS:
        raise ValueError(f"method must be one of {CURVE_METHODS}, not {method!r}")
    rng = random.Random(seed)
    base = [replace(j, arrival=0.0, deadline=None) for j in trace.jobs]
    rng.shuffle(base)
    cap = sum(n.gpus for n in trace.nodes) * 1000
    total = sum(j.gpu_milli * j.tasks for j in base)
    jobs = list(base)
    while total < until * cap:
        src = base[rng.randrange(len(base))]
        jobs.append(replace(src, name=f"{src.name}-r{len(jobs)}"))
        total += src.gpu_milli * src.tasks
    arrived = np.cumsum([j.gpu_milli * j.tasks for j in jobs]) / cap
    # Job i arrives at virtual time i: one placement attempt per instant, so the run's
    # time series has one row per arrived pod.
    timed = [replace(j, arrival=float(i)) for i, j in enumerate(jobs)]
    opts = paper_method(profile) if method == "paper" else {}
    r = Simulator(trace, profile, seed, jobs=timed, departures=False, retry=False, **opts).run()
    alloc = r.alloc[GPU_RESOURCE] / cap
    if method == "paper":
        alloc = np.round(alloc * 100, 2) / 100
    frag = (r.frag if r.frag is not None else np.zeros(len(jobs))) / cap
    bins = curve_bins(arrived, method)
    xs = sorted(set(bins.tolist()))
    curve = []
    for x in xs:
        sel = bins == x
        curve.append({"x": x, "alloc": float(alloc[sel].mean()), "frag": float(frag[sel].mean())})
    return {
        "seed": seed,
        "method": method,
        **({"tie_break": opts["tie_break"], "gpu_choice": opts["gpu_choice"]} if opts else {}),
        "curve": curve,
        "gpus": cap // 1000,
        "alloc_at_100": _at(curve, 100),
        "frag_at_100": _at(curve, 100, "frag"),
        "alloc_final": float(alloc[-1]),
    }


def _at(curve: list[dict], x: int, key: str = "alloc") -> float | None:
    for pt in curve:
        if pt["x"] >= x:
            return float(pt[key])
    return None


# ---------------------------------------------------------------------------- parallel


def _trial(args: tuple) -> dict:
    kind, trace, profile_path, seed, params = args
    profile = load_profile(profile_path)
    if kind == "compaction":
        _, jobs = checkpoint(trace, params.get("at") or default_at(trace))
        out = compaction_trial(trace, profile, jobs, seed, params["tau"], params.get("mu", 1))
    elif kind == "inflation":
        _, jobs = checkpoint(trace, params.get("at") or default_at(trace))
        out = inflate(trace, profile, jobs, seed, params["tau"])
    elif kind == "holes":
        _, jobs = checkpoint(trace, params.get("at") or default_at(trace))
        fillers = params.get("fillers") or default_fillers(trace, jobs)
        out = hole_filling(trace, profile, jobs, seed, fillers)
    elif kind == "reclamation":
        from esched.services.sim.reclamation import reclamation_trial

        _, jobs = checkpoint(trace, params.get("at") or default_at(trace))
        out = reclamation_trial(trace, profile, jobs, seed, params)
    elif kind == "curve":
        out = inflation_curve(
            trace, profile, seed, params.get("until", 1.3), params.get("method", "kube")
        )
    else:
        raise ValueError(kind)
    out["profile"] = profile.name
    out["profile_file"] = str(profile_path)
    return out


def run_trials(
    kind: str,
    trace: Trace,
    profiles: list[str],
    seeds: list[int],
    params: dict,
    workers: int | None = None,
    progress: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Every (profile, seed) trial of ``kind`` (compaction | inflation | holes | curve |
    reclamation), in worker processes; results in (profile, seed) order."""
    tasks = [(kind, trace, p, s, params) for p in profiles for s in seeds]
    workers = workers or min(len(tasks), os.cpu_count() or 1)
    if workers <= 1:
        out = []
        for t in tasks:
            out.append(_trial(t))
            if progress:
                progress(out[-1])
        return out
    results: list[dict | None] = [None] * len(tasks)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(_trial, t): i for i, t in enumerate(tasks)}
        from concurrent.futures import as_completed

        for fut in as_completed(futures):
            i = futures[fut]
            results[i] = result = fut.result()
            if progress:
                progress(result)
    return [r for r in results if r is not None]
