"""Trace loaders: real cluster traces (and a synthetic generator) as nodes + jobs.

A trace is named ``KIND:PATH`` on the command line (``openb:/data/openb``,
``philly:/data/philly-2017``, ``itp:/data/itp/cluster04.csv``, ``dlrm:FILE.csv``,
``synthetic:nodes=64,jobs=2000,seed=1``). The data stays where the user keeps it.

Every loader turns its format into the same model (:class:`Trace`): node specs and
jobs (one pod, or a gang of identical pods), times in seconds from the trace start.
What a format lacks or gets odd is never guessed silently: each loader counts its
quirks (``Trace.quirks``: reason -> rows) and states its assumptions
(``Trace.notes``), and the simulator's report prints both.

Units in the model: CPU in milli-cores, memory in bytes, GPU in milli-GPU per pod
(``0 < g <= 1000`` a share of one GPU, a multiple of 1000 whole GPUs).
"""

from __future__ import annotations

import csv
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from esched.core.devices import frag_types

__all__ = [
    "KINDS",
    "PRIORITY_BY_QOS",
    "Job",
    "NodeSpec",
    "Trace",
    "TraceError",
    "load_trace",
    "parse_nodes",
]

MIB = 2**20
GIB = 2**30
#: openb's QoS classes as Borg priority bands: LS and Guaranteed are production
#: (>= Mixed's default productionPriority, 1000), Burstable batch, BE best effort.
PRIORITY_BY_QOS = {"LS": 1000, "Guaranteed": 1000, "Burstable": 100, "BE": 0}
#: Most GPUs one pod of a split gang holds (the largest machines have 8).
GANG_TASK_GPUS = 8


class TraceError(ValueError):
    """A trace (or node table) that cannot be read as asked; the message says why."""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One machine: capacities in base units, GPU count and model (None: no GPU)."""

    name: str
    cpu_milli: int
    memory_bytes: int
    gpus: int = 0
    model: str | None = None


@dataclass(slots=True)
class Job:
    """A unit of work: ``tasks`` identical pods placed all-or-nothing (1: a single pod).

    ``duration`` is the run time once started; ``deadline`` (absolute, seconds) is
    when the trace deleted the pod: a pod still pending then is withdrawn.
    """

    name: str
    arrival: float
    duration: float
    cpu_milli: int = 0
    memory_bytes: int = 0
    gpu_milli: int = 0  # per task
    tasks: int = 1
    gpu_models: tuple[str, ...] | None = None
    priority: int = 0
    group: str = ""
    deadline: float | None = None
    phase: str = ""  # the trace's recorded phase, where it has one (openb)
    #: "cpu": only on nodes without GPUs, "gpu": only on GPU nodes, None: anywhere
    #: (the DLRM trace's CN / HN roles).
    node_kind: str | None = None

    @property
    def shape(self) -> tuple:
        """What placement depends on: requests, gang size, constraints, priority."""
        return (
            self.cpu_milli,
            self.memory_bytes,
            self.gpu_milli,
            self.tasks,
            self.gpu_models,
            self.priority,
            self.node_kind,
        )


@dataclass
class Trace:
    """Nodes and jobs (sorted by arrival) of one trace, with its quirks and assumptions."""

    kind: str
    source: str
    nodes: list[NodeSpec]
    jobs: list[Job]
    quirks: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    @property
    def has_gpus(self) -> bool:
        return any(n.gpus for n in self.nodes)

    def capacity(self) -> dict[str, int]:
        return {
            "cpu_milli": sum(n.cpu_milli for n in self.nodes),
            "memory_bytes": sum(n.memory_bytes for n in self.nodes),
            "gpus": sum(n.gpus for n in self.nodes),
        }

    def frag_types(self, coverage: float = 0.95) -> list[tuple]:
        """FGD's target workload: pod types ``(cpu, gpu milli per GPU, num GPUs, models,
        p)`` by count, the most common covering ``coverage`` of the pods (FGD-ANCHOR.md;
        the rule is :func:`esched.core.devices.frag_types`, which live replicas use too)."""
        counts: dict[tuple, int] = {}
        for j in self.jobs:
            key = (j.cpu_milli, j.gpu_milli, j.gpu_models)
            counts[key] = counts.get(key, 0) + j.tasks
        return frag_types(counts, coverage)

    def count_oversized(self) -> int:
        """Jobs whose pod fits no node even when the node is empty (requests above its
        capacity, or no node of the model or kind asked for); recorded as the quirk
        ``larger_than_any_node``: they stay pending for the whole run."""
        node_shapes = {(n.cpu_milli, n.memory_bytes, n.gpus, n.model) for n in self.nodes}
        # Philly/ITP nodes carry no CPU or memory (0) and their jobs ask for none.
        seen: dict[tuple, bool] = {}
        bad = 0
        for j in self.jobs:
            key = (j.cpu_milli, j.memory_bytes, j.gpu_milli, j.gpu_models, j.node_kind)
            ok = seen.get(key)
            if ok is None:
                num, _ = _gpu_shape(j.gpu_milli)
                ok = seen[key] = any(
                    j.cpu_milli <= c
                    and j.memory_bytes <= m
                    and num <= g
                    and (j.gpu_models is None or md in j.gpu_models)
                    and (j.node_kind is None or (j.node_kind == "gpu") == (g > 0))
                    for c, m, g, md in node_shapes
                )
            bad += not ok
        if bad:
            self.quirks["larger_than_any_node"] = bad
        else:
            self.quirks.pop("larger_than_any_node", None)
        return bad

    def summary(self) -> dict:
        return {
            "kind": self.kind,
            "source": self.source,
            "nodes": len(self.nodes),
            "jobs": len(self.jobs),
            "pods": sum(j.tasks for j in self.jobs),
            "capacity": self.capacity(),
            "quirks": dict(self.quirks),
            "notes": list(self.notes),
        }


def _gpu_shape(g: int) -> tuple[int, int]:
    if g <= 0:
        return (0, 0)
    if g <= 1000:
        return (1, g)
    return (g // 1000, 1000)


# ---------------------------------------------------------------------------- nodes


def parse_nodes(spec: str) -> list[NodeSpec]:
    """A node table: a CSV file in openb's format (``sn,cpu_milli,memory_mib,gpu,model``)
    or a shape list ``COUNTxGPUS[:cpu=C][:mem=GiB][:model=M],...`` (e.g. ``100x8:cpu=64``).
    """
    p = Path(spec)
    if p.exists():
        return _openb_nodes(p, Counter())
    nodes: list[NodeSpec] = []
    for part in spec.split(","):
        head, *opts = part.strip().split(":")
        try:
            count, gpus = (int(x) for x in head.lower().split("x"))
        except ValueError:
            raise TraceError(
                f"--nodes {spec!r}: {part!r} is neither a file nor COUNTxGPUS"
            ) from None
        kv = dict(o.split("=", 1) for o in opts if "=" in o)
        cpu = int(float(kv.get("cpu", 96)) * 1000)
        mem = int(float(kv.get("mem", 512)) * GIB)
        model = kv.get("model")
        base = len(nodes)
        nodes += [NodeSpec(f"node-{base + i:05d}", cpu, mem, gpus, model) for i in range(count)]
    if not nodes:
        raise TraceError(f"--nodes {spec!r}: no nodes")
    return nodes


def _openb_nodes(path: Path, quirks: Counter) -> list[NodeSpec]:
    nodes = []
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            try:
                gpus = int(row.get("gpu") or 0)
                nodes.append(
                    NodeSpec(
                        row["sn"].strip().lower(),
                        int(row["cpu_milli"]),
                        int(row["memory_mib"]) * MIB,
                        gpus,
                        (row.get("model") or "").strip() or None,
                    )
                )
            except (KeyError, ValueError) as exc:
                quirks["node_row_unreadable"] += 1
                if not nodes and quirks["node_row_unreadable"] > 10:
                    raise TraceError(f"{path}: not an openb node table ({exc})") from None
    if not nodes:
        raise TraceError(f"{path}: no nodes")
    return nodes


# ---------------------------------------------------------------------------- openb


def _openb(path: Path, nodes_spec: str | None) -> Trace:
    if path.is_dir():
        pods_file = path / "openb_pod_list_default.csv"
        node_file = path / "openb_node_list_all_node.csv"
    else:
        pods_file, node_file = path, path.parent / "openb_node_list_all_node.csv"
    if not pods_file.exists():
        raise TraceError(f"openb: {pods_file} not found")
    quirks: Counter = Counter()
    notes = [
        "QoS mapped to priority: LS/Guaranteed 1000 (production band), Burstable 100, BE 0.",
        "Run time = deletion_time - scheduled_time (deletion_time - creation_time when the"
        " pod was never scheduled in the trace); a pod still pending at its deletion_time"
        " is withdrawn.",
        "Pod placement in the trace is not recorded: every pod is placed by the simulator.",
    ]
    if nodes_spec:
        nodes = parse_nodes(nodes_spec)
    else:
        if not node_file.exists():
            raise TraceError(f"openb: node table {node_file} not found (pass --nodes)")
        nodes = _openb_nodes(node_file, quirks)
        notes.append(f"Nodes from {node_file.name}.")
    jobs = []
    with open(pods_file, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            try:
                name = row["name"].strip().lower()
                cpu = int(row["cpu_milli"])
                mem = int(row["memory_mib"]) * MIB
                num = int(row["num_gpu"])
                milli = int(row["gpu_milli"])
                created = float(row["creation_time"])
                deleted = float(row["deletion_time"]) if row.get("deletion_time") else None
                sched = float(row["scheduled_time"]) if row.get("scheduled_time") else None
            except (KeyError, ValueError):
                quirks["pod_row_unreadable"] += 1
                continue
            if num == 0:
                if milli:
                    quirks["gpu_milli_without_gpu_ignored"] += 1
                g = 0
            elif num == 1:
                if not 0 < milli <= 1000:
                    quirks["gpu_milli_out_of_range_dropped"] += 1
                    continue
                g = milli
            else:
                if milli != 1000:
                    quirks["multi_gpu_share_dropped"] += 1
                    continue
                g = num * 1000
            if deleted is None:
                quirks["no_deletion_time_dropped"] += 1
                continue
            if sched is None:
                quirks["never_scheduled_in_trace"] += 1
                start = created
            else:
                start = sched
            duration = deleted - start
            if duration <= 0:
                quirks["nonpositive_run_time_dropped"] += 1
                continue
            spec = (row.get("gpu_spec") or "").strip()
            models = tuple(sorted(spec.split("|"))) if spec else None
            qos = (row.get("qos") or "").strip()
            if qos not in PRIORITY_BY_QOS:
                quirks["unknown_qos_as_best_effort"] += 1
            jobs.append(
                Job(
                    name,
                    created,
                    duration,
                    cpu,
                    mem,
                    g,
                    1,
                    models,
                    PRIORITY_BY_QOS.get(qos, 0),
                    qos,
                    deleted,
                    (row.get("pod_phase") or "").strip(),
                )
            )
    jobs.sort(key=lambda j: (j.arrival, j.name))
    return Trace("openb", str(pods_file), nodes, jobs, quirks, notes)


# ---------------------------------------------------------------------------- GPU jobs


def _gang(gpus: int, quirks: Counter) -> tuple[int, int]:
    """(tasks, GPUs per task): a job over GANG_TASK_GPUS GPUs becomes a gang of equal
    pods of the largest divisor of its size that is <= GANG_TASK_GPUS."""
    if gpus <= GANG_TASK_GPUS:
        return 1, gpus
    per = max(d for d in range(1, GANG_TASK_GPUS + 1) if gpus % d == 0)
    if per != GANG_TASK_GPUS:
        quirks["gang_uneven_split"] += 1
    quirks["gang_jobs"] += 1
    return gpus // per, per


def _philly_nodes(folder: Path, quirks: Counter, notes: list[str]) -> list[NodeSpec]:
    revised = folder / "revised_machine_list.csv"
    official = folder / "cluster_machine_list"
    nodes = []
    if revised.exists():
        with open(revised, newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                gpus = int(row["number of GPUs"])
                if gpus == 0:
                    quirks["machine_without_gpus_skipped"] += 1
                    continue
                nodes.append(NodeSpec(row["machineId"].strip().lower(), 0, 0, gpus, None))
        notes.append(
            "Machines from revised_machine_list.csv (GPU counts inferred from the"
            " utilization logs; the official list contradicts the job log)."
        )
    elif official.exists():
        with open(official, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            next(reader)
            for fields in reader:
                if len(fields) >= 2:
                    nodes.append(NodeSpec(fields[0].strip().lower(), 0, 0, int(fields[1]), None))
        notes.append("Machines from the official cluster_machine_list.")
    return nodes


def _philly(path: Path, nodes_spec: str | None) -> Trace:
    csv_file = path / "philly.csv" if path.is_dir() else path
    if not csv_file.exists():
        raise TraceError(f"philly: {csv_file} not found")
    quirks: Counter = Counter()
    notes = [
        "No CPU or memory in the trace: GPUs (and the pod count) are the only resources.",
        "Jobs over 8 GPUs are gangs of equal pods (the largest divisor <= 8 GPUs each),"
        " placed all-or-nothing.",
        "duration is the summed run time of the job's attempts in Philly; every job is"
        " simulated as one attempt of that length; no priorities (all batch).",
    ]
    nodes = parse_nodes(nodes_spec) if nodes_spec else _philly_nodes(csv_file.parent, quirks, notes)
    if not nodes:
        raise TraceError("philly: no machine list next to the trace; pass --nodes")
    rows = []
    with open(csv_file, newline="", encoding="utf-8") as fh:
        for i, row in enumerate(csv.DictReader(fh)):
            if not any((v or "").strip() for v in row.values()):
                quirks["blank_row"] += 1
                continue
            try:
                t = datetime.strptime(row["timestamp"].strip(), "%Y-%m-%d %H:%M:%S")
                duration = float(row["duration"])
                gpus = int(row["num_gpus"])
            except (KeyError, ValueError, AttributeError):
                quirks["row_unreadable"] += 1
                continue
            if gpus <= 0:
                quirks["no_gpus_dropped"] += 1
                continue
            if duration <= 0:
                quirks["zero_duration_dropped"] += 1
                continue
            rows.append((t, duration, gpus, (row.get("cluster") or "").strip(), i))
    if not rows:
        raise TraceError(f"philly: {csv_file} has no usable jobs")
    t0 = min(r[0] for r in rows)
    notes.append(f"Time zero = first submission, {t0:%Y-%m-%d %H:%M:%S} (no time zone given).")
    jobs = []
    for t, duration, gpus, vc, i in rows:
        tasks, per = _gang(gpus, quirks)
        jobs.append(
            Job(
                f"philly-{i:06d}",
                (t - t0).total_seconds(),
                duration,
                0,
                0,
                per * 1000,
                tasks,
                None,
                0,
                vc,
            )
        )
    jobs.sort(key=lambda j: (j.arrival, j.name))
    return Trace("philly", str(csv_file), nodes, jobs, quirks, notes)


def _itp(path: Path, nodes_spec: str | None) -> Trace:
    if not path.is_file():
        raise TraceError(f"itp: {path} is not a cluster CSV (one file per cluster)")
    if not nodes_spec:
        raise TraceError(
            "itp: the ITP traces have no node table or cluster size; "
            "pass --nodes (e.g. --nodes 64x8)"
        )
    quirks: Counter = Counter()
    notes = [
        "No CPU, memory or node table in the trace: GPUs only; nodes from --nodes.",
        "Jobs over 8 GPUs are gangs of equal pods, placed all-or-nothing.",
        "Jobs shorter than 10 minutes appear filtered out of the source (undocumented).",
    ]
    jobs = []
    with open(path, newline="", encoding="utf-8") as fh:
        for i, row in enumerate(csv.DictReader(fh)):
            try:
                t = float(row["submission_time"])
                duration = float(row["duration"])
                gpus = int(row["num_gpu"])
            except (KeyError, ValueError):
                quirks["row_unreadable"] += 1
                continue
            if gpus <= 0 or duration <= 0:
                quirks["no_gpus_or_duration_dropped"] += 1
                continue
            tasks, per = _gang(gpus, quirks)
            jobs.append(Job(f"itp-{i:06d}", t, duration, 0, 0, per * 1000, tasks, None, 0, ""))
    if not jobs:
        raise TraceError(f"itp: {path} has no usable jobs")
    t0 = min(j.arrival for j in jobs)
    for j in jobs:
        j.arrival -= t0
    jobs.sort(key=lambda j: (j.arrival, j.name))
    return Trace("itp", str(path), parse_nodes(nodes_spec), jobs, quirks, notes)


def _dlrm(path: Path, nodes_spec: str | None) -> Trace:
    csv_file = path / "disaggregated_DLRM_trace.csv" if path.is_dir() else path
    if not csv_file.exists():
        raise TraceError(f"dlrm: {csv_file} not found")
    if not nodes_spec:
        raise TraceError(
            "dlrm: the DLRM trace has no node table; pass --nodes "
            "(a CSV like openb's node list, or e.g. 200x0:cpu=96:mem=512,60x8)"
        )
    nodes = parse_nodes(nodes_spec)
    quirks: Counter = Counter()
    notes = [
        "Nodes from --nodes (the trace has none; the paper gives no node shapes).",
        "Units: cpu_request in vCPUs, memory_request in GiB, gpu_request whole GPUs;"
        " times in seconds, rounded to whole seconds (the floats carry binary noise).",
        "Role CN runs only on nodes without GPUs, HN only on GPU nodes (Prism's two"
        " disaggregated pools).",
        "Arrival = creation_time; run time = deletion_time - scheduled_time; a pod still"
        " pending at its deletion_time is withdrawn. Instances created before the"
        " trace (no times) arrive at 0; instances alive at the end run to the trace's"
        " last timestamp.",
        "RDMA and disk requests and max_instance_per_node are not simulated (counted).",
        "All instances are latency-sensitive services: priority 1000.",
    ]
    # name, role, cpu, memory, gpus, created, scheduled, deleted, app
    rows: list[tuple[str, str, int, int, int, float | None, float | None, float | None, str]]
    rows = []
    end = 0.0
    with open(csv_file, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            try:
                name = row["instance_sn"].strip().lower().replace("_", "-")
                role = row["role"].strip().upper()
                cpu = _exact(row["cpu_request"], 1000)
                mem = _exact(row["memory_request"], GIB)
                gpus = _exact(row["gpu_request"] or "0", 1)
                times = [
                    _maybe_time(row.get(k), quirks)
                    for k in ("creation_time", "scheduled_time", "deletion_time")
                ]
            except (KeyError, ValueError, AttributeError):
                quirks["row_unreadable"] += 1
                continue
            if role not in ("CN", "HN"):
                quirks["unknown_role_dropped"] += 1
                continue
            if (role == "CN") != (gpus == 0):
                quirks["role_contradicts_gpu_request_dropped"] += 1
                continue
            for t in times:
                if t is not None:
                    end = max(end, t)
            if float(row.get("rdma_request") or 0) > 0:
                quirks["rdma_request_not_simulated"] += 1
            if float(row.get("disk_request") or 0) > 0:
                quirks["disk_request_not_simulated"] += 1
            if (row.get("max_instance_per_node") or "-1").strip() not in ("-1", "-1.0"):
                quirks["max_instance_per_node_not_simulated"] += 1
            created, scheduled, deleted = times
            rows.append(
                (name, role, cpu, mem, gpus, created, scheduled, deleted, row.get("app_name", ""))
            )
    if not rows:
        raise TraceError(f"dlrm: {csv_file} has no usable instances")
    jobs = []
    for name, role, cpu, mem, gpus, created, sched, deleted, app in rows:
        if created is None:
            if sched is not None:
                quirks["scheduled_without_creation_time"] += 1
            quirks["created_before_trace"] += 1
            created = 0.0
        if sched is None:
            if created > 0:
                quirks["never_scheduled_in_trace"] += 1
            sched = created
        if deleted is None:
            quirks["alive_at_trace_end"] += 1
            deleted = end
        if deleted <= sched:
            quirks["nonpositive_run_time_dropped"] += 1
            continue
        if sched < created:
            quirks["scheduled_before_creation_dropped"] += 1
            continue
        jobs.append(
            Job(
                name,
                created,
                deleted - sched,
                cpu,
                mem,
                gpus * 1000,
                1,
                None,
                1000,
                app,
                deleted,
                "",
                "cpu" if role == "CN" else "gpu",
            )
        )
    kinds = Counter(j.node_kind for j in jobs)
    have: dict[str | None, int] = {
        "cpu": sum(n.gpus == 0 for n in nodes),
        "gpu": sum(n.gpus > 0 for n in nodes),
    }
    for kind, count in kinds.items():
        if count and not have[kind]:
            role = "CN" if kind == "cpu" else "HN"
            raise TraceError(
                f"dlrm: {count} {role} instances run on "
                f"{'nodes without GPUs' if kind == 'cpu' else 'GPU nodes'}, and"
                f" --nodes has none (e.g. --nodes 200x0:cpu=192:mem=1024,60x8)"
            )
    jobs.sort(key=lambda j: (j.arrival, j.name))
    return Trace("dlrm", str(csv_file), nodes, jobs, quirks, notes)


def _exact(text: str, unit: int) -> int:
    """``text`` (a decimal) times ``unit`` as an int; ValueError unless it is whole
    (a fraction of a base unit would be a guess)."""
    from fractions import Fraction

    v = Fraction(text.strip()) * unit
    if v.denominator != 1 or v < 0:
        raise ValueError(f"{text!r} x {unit} is not a whole number of base units")
    return int(v)


def _maybe_time(text: str | None, quirks: Counter | None = None) -> float | None:
    """Seconds, rounded to whole seconds (counted as ``time_rounded`` when that moved
    it); None for an empty or NaN field."""
    if text is None or not text.strip():
        return None
    v = float(text)
    if math.isnan(v):
        return None
    r = float(round(v))
    if quirks is not None and r != v:
        quirks["time_rounded"] += 1
    return r


# ---------------------------------------------------------------------------- synthetic


def synthetic(
    nodes: int = 64,
    jobs: int = 2000,
    seed: int = 0,
    load: float = 0.9,
    prod: float = 0.0,
    gpus: int = 1,
) -> Trace:
    """A documented synthetic GPU workload (the distributions are the docstring's).

    Nodes: 96 cores, 512 GiB, 8 GPUs of model ``S1`` (every 4th node: CPU only).
    Jobs: Poisson arrivals at a rate giving about ``load`` of the GPU capacity in
    use; run time log-normal with median 1 h (sigma 1); GPU request: 20% none, 40% a
    share U{100, 200, ..., 900} milli, 30% one GPU, 10% 2/4/8 GPUs (equally likely);
    CPU 1-16 cores uniformly (x 1000 milli); memory 4 GiB per core.

    ``gpus=0``: a CPU and memory workload instead (Borg's kind): no GPUs on any node,
    no GPU requests, the arrival rate giving about ``load`` of the CPU capacity.
    ``prod``: the share of jobs in the production band (priority 1000, Borg's prod),
    drawn from a generator of its own (so ``prod=0`` gives the same jobs as before);
    the others are best effort (priority 0).
    """
    rng = random.Random(seed)
    bands = random.Random(seed + 0x5EED)
    specs = [
        NodeSpec(
            f"node-{i:05d}", 96_000, 512 * GIB, 0 if i % 4 == 3 else 8, None if i % 4 == 3 else "S1"
        )
        if gpus
        else NodeSpec(f"node-{i:05d}", 96_000, 512 * GIB, 0, None)
        for i in range(nodes)
    ]
    out = []
    mean_run = 3600 * math.exp(0.5)
    if gpus:
        gpu_cap = sum(n.gpus for n in specs) * 1000
        mean_gpu = 0.4 * 500 + 0.3 * 1000 + 0.1 * (14000 / 3)
        rate = max(load * gpu_cap / (mean_gpu * mean_run), 1e-9)
    else:
        rate = max(load * nodes * 96_000 / (8500 * mean_run), 1e-9)
    t = 0.0
    for j in range(jobs):
        t += rng.expovariate(rate)
        g = 0
        if gpus:
            u = rng.random()
            if u < 0.2:
                g = 0
            elif u < 0.6:
                g = 100 * rng.randint(1, 9)
            elif u < 0.9:
                g = 1000
            else:
                g = 1000 * rng.choice((2, 4, 8))
        cores = rng.randint(1, 16)
        run = 3600 * math.exp(rng.gauss(0.0, 1.0))
        priority = 1000 if prod > 0 and bands.random() < prod else 0
        out.append(
            Job(
                f"synth-{j:06d}",
                round(t, 3),
                round(run, 3),
                cores * 1000,
                cores * 4 * GIB,
                g,
                1,
                None,
                priority,
                "",
            )
        )
    extra = (f",prod={prod:g}" if prod else "") + ("" if gpus else ",gpus=0")
    return Trace(
        "synthetic",
        f"nodes={nodes},jobs={jobs},seed={seed},load={load}{extra}",
        specs,
        out,
        Counter(),
        ["Synthetic: see esched.services.sim.traces.synthetic."],
    )


# ---------------------------------------------------------------------------- dispatch

KINDS = ("openb", "philly", "itp", "dlrm", "synthetic")


def load_trace(spec: str, nodes: str | None = None) -> Trace:
    """Load ``KIND:PATH`` (``synthetic:k=v,...``); ``nodes`` overrides/gives the node table."""
    kind, sep, rest = spec.partition(":")
    if not sep or kind not in KINDS:
        raise TraceError(f"trace {spec!r}: expected KIND:PATH with KIND one of {', '.join(KINDS)}")
    if kind == "synthetic":
        kv: dict[str, Any] = {}
        for part in filter(None, rest.split(",")):
            k, eq, v = part.partition("=")
            if not eq or k not in ("nodes", "jobs", "seed", "load", "prod", "gpus"):
                raise TraceError(
                    f"synthetic: unknown parameter {part!r} "
                    "(nodes=, jobs=, seed=, load=, prod=, gpus=)"
                )
            kv[k] = float(v) if k in ("load", "prod") else int(v)
        tr = synthetic(**kv)
        if nodes:
            tr.nodes = parse_nodes(nodes)
    else:
        path = Path(rest).expanduser()
        if not path.exists():
            raise TraceError(f"{kind}: {path} does not exist")
        loader = {"openb": _openb, "philly": _philly, "itp": _itp, "dlrm": _dlrm}[kind]
        tr = loader(path, nodes)
    tr.count_oversized()
    return tr
