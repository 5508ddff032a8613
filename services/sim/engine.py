"""The trace-driven simulator: virtual time, the real core, the real event model.

A run turns a :class:`~esched.services.sim.traces.Trace` into the events a live
cluster would log (``esched.node.added``, ``esched.pod.submitted``,
``esched.podgroup.submitted``, ``esched.placement.committed``,
``esched.pod.succeeded``/``esched.pod.deleted``) and folds each one into a
:class:`~esched.core.ClusterState` as it happens; placements are chosen by a
:class:`~esched.core.Placer` with the profile under test. So the log it leaves
(``record=True``, or ``--store``) is one that ``esched replay`` and ``esched audit``
read like any other, and the decisions are the core's, not a model of them.

Time is virtual and event-driven: a job arrives at its trace time, waits in the
pending queue until it fits (gangs: all members at once, through the placer's gang
planning), runs for its duration, and leaves; a pod still pending at its trace
deletion time is withdrawn. After every arrival and departure the scheduler makes a
pass over the pending queue in arrival order (no head-of-line blocking: a job that
does not fit is skipped, as kube-scheduler does).

Placement decisions come from the same scheduling pass as the live replica's
(:class:`~esched.core.schedule.SchedulingPass`), offered the pending jobs shape by
shape, oldest first, FIFO inside a shape; a shape whose job did not fit is not offered
again until something is released. Preemption (``preemption=True``: a job that fits
nowhere may evict jobs of lower priority bands, which go back to the queue) and the
gang starvation guard (``reserve_after``: seconds of virtual time) are off by default.

GPU sharing: GPUs are the extended resource ``esched.dev/gpu-milli`` in the state
(1000 per device) and per device in a :class:`~esched.core._devices.DeviceTable`,
which is the exact fit filter (``Placer.place(mask=...)``) and, for profiles with
the ``FGD`` plugin, the fragmentation-gradient score (``extra=...``).
"""

from __future__ import annotations

import bisect
import heapq
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import numpy as np

from esched.core import ClusterState, Placer, Profile
from esched.core._devices import DeviceTable
from esched.core.bands import Band, BandConfig
from esched.core.overload import Episodes, node_loads, plan_overload
from esched.core.queues import check_hierarchy
from esched.core.reservations import ReclamationConfig
from esched.core.schedule import GPU_MILLI_RESOURCE, PassConfig, SchedulingPass
from esched.schemas.events import (
    GANG_RESERVED,
    NODE_ADDED,
    PLACEMENT_COMMITTED,
    POD_DELETED,
    POD_EVICTED,
    POD_SUBMITTED,
    POD_SUCCEEDED,
    PODGROUP_SUBMITTED,
    USAGE_REPORTED,
    envelope,
    namespaced_key,
    split_key,
)
from esched.schemas.objects import GANG_ANNOTATIONS
from esched.services.sim.traces import Job, NodeSpec, Trace
from esched.services.sim.usage import UsageModel

__all__ = ["GPU_RESOURCE", "NAMESPACE", "RunResult", "Simulator", "UsageStats", "simulate"]

#: The extended resource GPUs are counted in (1000 per device).
GPU_RESOURCE = GPU_MILLI_RESOURCE
#: The node label carrying the GPU model (pods' model constraints select on it).
MODEL_LABEL = "esched.dev/gpu-model"
#: The node label "gpu" / "cpu" (has GPUs or not), set when some job asks for a node
#: kind (the DLRM trace's roles).
KIND_LABEL = "esched.dev/node-kind"
NAMESPACE = "sim"
#: Pods per node (kube's default is 110; the traces' nodes are larger, and none of
#: them limits pod counts, so this is a bound that never binds in practice).
PODS_PER_NODE = 256
#: Snapshots of per-node allocation kept for the heat map.
HEATMAP_SAMPLES = 120
#: Virtual time zero of the logged events (the traces have no wall clock).
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)

_ARRIVE, _FINISH, _EXPIRE, _USAGE = 0, 1, 2, 3


@dataclass
class RunResult:
    """What a run leaves: per-job times, time series, counters, the log if recorded."""

    trace: dict
    profile: str
    seed: int
    nodes: int
    wall_seconds: float
    # per job (index = trace job index): NaN where it never started / finished
    arrival: np.ndarray
    start: np.ndarray
    finish: np.ndarray
    duration: np.ndarray
    tasks: np.ndarray
    withdrawn: int
    never_started: int
    # time series, one row per event time
    t: np.ndarray
    alloc: dict[str, np.ndarray]  # resource -> allocated units
    capacity: dict[str, int]  # resource -> capacity units
    pending: np.ndarray  # pending pods
    running: np.ndarray  # running pods
    frag: np.ndarray | None  # FGD fragmentation (milli-GPU), if GPUs
    # per-node snapshots for the heat map: [sample, node] allocated share of GPU (or CPU)
    heat_t: np.ndarray
    heat: np.ndarray
    heat_resource: str
    # snapshots for stranded resources: resource -> stranded units at heat_t
    stranded: dict[str, np.ndarray]
    placement_seconds: float  # wall time inside the placer
    placements: int
    placer_stats: dict
    device_stats: dict
    events: list[dict] | None = None
    anomalies: dict = field(default_factory=dict)
    #: placements that evicted pods (preemption), the jobs they evicted, and gang
    #: reservations made by the starvation guard
    preemptions: int = 0
    evicted_jobs: int = 0
    reservations: int = 0
    #: with a usage model: what reclamation did (:class:`UsageStats`), else None
    usage: UsageStats | None = None


@dataclass
class UsageStats:
    """What a run with a usage model measured at its usage reports (Borg 5.5).

    Sums over reports, each weighted by the seconds until the next report (the
    interval), per resource (``cpu``, ``memory``):

    * ``limits``: the running pods' limits, node by node;
    * ``reclaimed``: the part of each node's limits above its allocatable, summed over
      nodes: workload that placement by limits could not have put there, so it runs in
      reclaimed resources (``reclaimed / limits`` is Borg's "share of the workload in
      reclaimed resources");
    * ``usage`` and ``reservations``: the running pods' reported usage and their
      reservations after the report was folded.

    Counters: ``reports``; ``overloads`` (node-reports where usage exceeded
    allocatable, per resource); ``throttled`` (pod throttles the overload planner
    decided on a compressible resource: a pod held at its cap, once per overload
    episode); ``throttled_seconds`` (pod-seconds a throttled pod asked for more CPU
    than its cap); ``throttled_cpu`` (milli-cpu-seconds those pods were denied:
    ``usage`` of cpu is what they got); ``evictions`` (pods evicted for overload, by
    band: ``prod`` only for production pods above their limits, which the usage
    models never produce); ``task_seconds`` (pod-seconds running, by band).
    """

    interval: float
    reports: int = 0
    limits: dict[str, float] = field(default_factory=dict)
    reclaimed: dict[str, float] = field(default_factory=dict)
    usage: dict[str, float] = field(default_factory=dict)
    reservations: dict[str, float] = field(default_factory=dict)
    overloads: dict[str, int] = field(default_factory=dict)
    throttled: int = 0
    throttled_seconds: float = 0.0
    throttled_cpu: float = 0.0
    evictions: dict[str, int] = field(default_factory=lambda: {"prod": 0, "non_prod": 0})
    evicted_jobs: int = 0
    task_seconds: dict[str, float] = field(default_factory=lambda: {"prod": 0.0, "non_prod": 0.0})
    #: pods started (again after an eviction: counted again), by band
    tasks: dict[str, int] = field(default_factory=lambda: {"prod": 0, "non_prod": 0})
    #: ``reclaimed / limits`` at the latest report (a snapshot, as Borg's cell figure)
    last_share: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The counters and sums, with the shares derived from them."""
        share = {
            r: (self.reclaimed.get(r, 0.0) / lim if lim else 0.0) for r, lim in self.limits.items()
        }
        hours = self.task_seconds["non_prod"] / 3600.0
        return {
            "interval_s": self.interval,
            "reports": self.reports,
            "reclaimed_share": share,
            "reclaimed_share_last": dict(self.last_share),
            "usage_over_limits": {
                r: (self.usage.get(r, 0.0) / lim if lim else 0.0) for r, lim in self.limits.items()
            },
            "reservations_over_limits": {
                r: (self.reservations.get(r, 0.0) / lim if lim else 0.0)
                for r, lim in self.limits.items()
            },
            "overloads": dict(self.overloads),
            "throttled": self.throttled,
            "throttled_pod_hours": self.throttled_seconds / 3600.0,
            "throttled_cpu_share": (
                self.throttled_cpu / (self.usage.get("cpu", 0.0) + self.throttled_cpu)
                if self.throttled_cpu
                else 0.0
            ),
            "evictions": dict(self.evictions),
            "evicted_jobs": self.evicted_jobs,
            "task_hours": {k: v / 3600.0 for k, v in self.task_seconds.items()},
            "tasks": dict(self.tasks),
            "non_prod_evictions_per_task_hour": (
                self.evictions["non_prod"] / hours if hours else 0.0
            ),
            "non_prod_evictions_per_1000_tasks": (
                1000.0 * self.evictions["non_prod"] / self.tasks["non_prod"]
                if self.tasks["non_prod"]
                else 0.0
            ),
        }


class Simulator:
    """One run of one trace under one profile.

    :param trace: the workload and cluster.
    :param profile: the scheduling profile (``esched.core.load_profile``).
    :param seed: the placer's seed; the run is a pure function of (trace, profile, seed).
    :param record: keep every event (for ``--store``, replay and audit).
    :param node_subset: indices into ``trace.nodes`` to use (compaction); default all.
    :param jobs: the job list to run (inflation); default ``trace.jobs``.
    :param departures: False: nothing leaves (static packing, as the FGD experiments).
    :param retry: False: a job that does not fit when it arrives is dropped.
    :param progress: called with (jobs arrived, total) now and then.
    :param preemption: a job that fits nowhere may evict jobs of lower bands (they go
        back to the pending queue).
    :param bands: priority bands for preemption (None: the defaults).
    :param reserve_after: reserve nodes for a gang that has not fitted for this many
        seconds of virtual time (None: no reservations).
    :param tie_break: among equal scores, "random" or "node-order" (a fixed order drawn
        from ``seed``; :class:`~esched.core.schedule.PassConfig`).
    :param gpu_choice: the device a GPU share takes: "fit" or "random".
    :param queue_hierarchy: where the queue tree of the deserved shares comes from,
        as the replica's ``--queue-hierarchy`` (``parent`` or ``annotations``;
        :data:`esched.core.queues.QUEUE_HIERARCHIES`).
    :param usage: a usage model (:mod:`esched.services.sim.usage`): every
        ``usage_every`` seconds of virtual time the running pods' usage is logged as
        one ``esched.usage.reported`` (pods and nodes), which the state folds into
        reservations with the live fold's own rule; then overload is handled
        (:meth:`_overload`) and the pending queue gets a pass (lower reservations free
        room). Reports run while anything else is to come, and up to ``horizon``
        seconds (static packings, which have no departures). None: no usage.
    :param reclamation: the state's ``reclamation:`` section (None: the process's,
        :func:`esched.core.reservations.current_reclamation`).
    """

    def __init__(
        self,
        trace: Trace,
        profile: Profile,
        seed: int = 0,
        *,
        record: bool = False,
        node_subset: Iterable[int] | None = None,
        jobs: list[Job] | None = None,
        departures: bool = True,
        retry: bool = True,
        progress: Callable[[int, int], None] | None = None,
        on_place: Callable[[Simulator, Job, bool], None] | None = None,
        preemption: bool = False,
        bands: BandConfig | None = None,
        reserve_after: float | None = None,
        tie_break: str = "random",
        gpu_choice: str = "fit",
        queue_hierarchy: str = "parent",
        usage: UsageModel | None = None,
        usage_every: float = 60.0,
        reclamation: ReclamationConfig | None = None,
        horizon: float | None = None,
    ) -> None:
        if usage is not None and not usage_every > 0:
            raise ValueError("usage_every must be positive")
        self.trace = trace
        self.profile = profile
        self.seed = seed
        self.record = record
        self.departures = departures
        self.retry = retry
        self.progress = progress
        self.on_place = on_place
        self.jobs = trace.jobs if jobs is None else jobs
        idx = range(len(trace.nodes)) if node_subset is None else node_subset
        self.nodes: list[NodeSpec] = [trace.nodes[i] for i in idx]
        self.events: list[dict] = []
        self.state = ClusterState()
        if reclamation is not None:
            self.state.reclamation = reclamation
        self.usage_model = usage
        self.usage_every = usage_every
        self.horizon = horizon
        self.position = 0
        self.pass_config = PassConfig(
            preemption=preemption,
            bands=bands,
            reserve_after=reserve_after,
            explain=False,
            tie_break=tie_break,
            tie_seed=seed,
            gpu_choice=gpu_choice,
            queue_hierarchy=check_hierarchy(queue_hierarchy),
        )
        self.gpu = any(n.gpus for n in self.nodes)
        self.devices = DeviceTable() if self.gpu else None
        self._run_id = f"s{seed}"

    # ------------------------------------------------------------------ events

    def _emit(self, type_: str, name: str, data: dict, t: float) -> None:
        self.position += 1
        ev = envelope(
            type_,
            "esched-sim",
            data,
            id=f"sim-{self._run_id}-{self.position}",
            time=(EPOCH + timedelta(seconds=t)).isoformat(),
            content_type=None,
        )
        self.state.apply(ev, self.position)
        if self.record:
            self.events.append(ev)

    def _pod_manifest(self, job: Job, task: int) -> tuple[str, dict]:
        name = job.name if job.tasks == 1 else f"{job.name}-{task}"
        req: dict[str, str] = {}
        if job.cpu_milli:
            req["cpu"] = f"{job.cpu_milli}m"
        if job.memory_bytes:
            req["memory"] = str(job.memory_bytes)
        if job.gpu_milli:
            req[GPU_RESOURCE] = str(job.gpu_milli)
        meta: dict = {"name": name, "namespace": NAMESPACE}
        if job.tasks > 1:
            meta["annotations"] = {GANG_ANNOTATIONS[0]: job.name}
        spec: dict = {
            "priority": job.priority,
            "containers": [{"name": "main", "resources": {"requests": req}}],
        }
        exprs = []
        if job.gpu_models:
            exprs.append({"key": MODEL_LABEL, "operator": "In", "values": list(job.gpu_models)})
        if job.node_kind:
            exprs.append({"key": KIND_LABEL, "operator": "In", "values": [job.node_kind]})
        if exprs:
            spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": exprs}]
                    }
                }
            }
        return namespaced_key(NAMESPACE, name), {"metadata": meta, "spec": spec}

    # ------------------------------------------------------------------ run

    def run(self) -> RunResult:
        wall0 = time.perf_counter()
        st = self.state
        kinds = any(j.node_kind for j in self.jobs)
        for n in self.nodes:
            labels = {MODEL_LABEL: n.model} if n.model else {}
            if kinds:
                labels[KIND_LABEL] = "gpu" if n.gpus else "cpu"
            alloc = {
                "cpu": f"{n.cpu_milli}m",
                "memory": str(n.memory_bytes),
                "pods": str(PODS_PER_NODE),
            }
            if n.gpus:
                alloc[GPU_RESOURCE] = str(n.gpus * 1000)
            self._emit(
                NODE_ADDED,
                n.name,
                {"metadata": {"name": n.name, "labels": labels}, "status": {"allocatable": alloc}},
                0.0,
            )
            if self.devices is not None:
                self.devices.set_node(st.node_index[n.name], n.gpus, n.model, n.cpu_milli)
        if self.devices is not None:
            # Always: the fragmentation series is a metric for every profile.
            self.devices.set_target(self.trace.frag_types())
        self.placer = Placer(st, self.profile, seed=self.seed, bands=self.pass_config.bands)
        self.scheduler = SchedulingPass(
            st, self.placer, self.pass_config, devices=self.devices, gpu_resource=GPU_RESOURCE
        )

        jobs = self.jobs
        J = len(jobs)
        self.start = np.full(J, np.nan)
        self.finish = np.full(J, np.nan)
        self.keys: list[list[str] | None] = [None] * J
        self.bound: list[list | None] = [None] * J  # per task: (node slot, devices)
        self.job_of: dict[str, int] = {}  # pod key -> job
        # what the pass is offered per job: (kind, key, position)
        self.targets: list[tuple[str, str, int]] = [("", "", 0)] * J
        self._run_seq: dict[int, int] = {}  # job -> heap seq of its current finish
        self._runs: dict[int, int] = {}  # job -> times placed
        self.preemptions = self.evicted_jobs = self.reservations = 0
        heap: list[tuple[float, int, int, int]] = []
        seq = 0
        for j, job in enumerate(jobs):
            heap.append((job.arrival, _ARRIVE, seq, j))
            seq += 1
        self._bound_jobs: dict[int, None] = {}  # jobs running, in start order
        self.usage_stats = (
            None if self.usage_model is None else UsageStats(interval=self.usage_every)
        )
        # Overload episodes per (node slot, resource) on the virtual clock (the live
        # dispatcher's rule), and per node the caps of its throttled pods (pod -> cap).
        self._episodes = Episodes()
        self._caps: dict[int, dict[str, int]] = {}
        self._hot: set[tuple[int, str]] = set()  # (node slot, resource) in an episode
        if self.usage_model is not None:
            first = min((job.arrival for job in jobs), default=0.0)
            heap.append((first, _USAGE, seq, -1))
            seq += 1
        heapq.heapify(heap)
        # Pending jobs grouped by shape (FIFO inside a shape); a pass visits shapes in
        # the order of their oldest job. A shape that failed stays skipped until
        # something is released (placements only take capacity away).
        self.queues: dict[tuple, deque[int]] = {}
        self.blocked: set[tuple] = set()
        self.pending_pods = 0
        self.running_pods = 0
        self.withdrawn = 0
        self.dropped = 0
        self.place_seconds = 0.0
        self.placements = 0
        res_names = [r for r in ("cpu", "memory", GPU_RESOURCE) if r in st.res_index]
        cols = [st.res_index[r] for r in res_names]
        cap = st.node_allocatable()[:, cols].sum(axis=0)
        capacity = {r: int(c) for r, c in zip(res_names, cap, strict=True)}
        self._totals = dict.fromkeys(res_names, 0)
        series_t: list[float] = []
        series_alloc: list[list[int]] = []
        series_pending: list[int] = []
        series_running: list[int] = []
        series_frag: list[float] = []
        t_end = max((j.arrival for j in jobs), default=0.0)
        heat_every = max(t_end, 1.0) / HEATMAP_SAMPLES
        next_heat = 0.0
        heat_rows, heat_ts, strand_rows = [], [], []
        heat_res = GPU_RESOURCE if self.gpu else "cpu"
        heat_col = st.res_index.get(heat_res)
        arrived = 0
        report_every = max(J // 100, 1)

        while heap:
            now = heap[0][0]
            released = False
            while heap and heap[0][0] == now:
                _, kind, s, j = heapq.heappop(heap)
                if kind == _ARRIVE:
                    self._arrive(j, now)
                    arrived += 1
                    if self.progress is not None and arrived % report_every == 0:
                        self.progress(arrived, J)
                    job = jobs[j]
                    if self.departures and job.deadline is not None:
                        heapq.heappush(heap, (max(job.deadline, now), _EXPIRE, seq, j))
                        seq += 1
                elif kind == _FINISH:
                    if self._run_seq.get(j) == s:  # not a run that was evicted
                        self._finish(j, now)
                        released = True
                elif kind == _EXPIRE:
                    self._expire(j, now)
                elif kind == _USAGE:
                    if self._usage_report(now):
                        released = True
                    nxt = now + self.usage_every
                    if heap or (self.horizon is not None and nxt <= self.horizon):
                        heapq.heappush(heap, (nxt, _USAGE, seq, -1))
                        seq += 1
            if released:
                self.blocked.clear()
            started, evicted = self._schedule(now)
            if evicted:
                self.blocked.clear()  # evictions freed room
            for j in started:
                if self.departures:
                    self._run_seq[j] = seq
                    heapq.heappush(heap, (now + jobs[j].duration, _FINISH, seq, j))
                    seq += 1
            if not self.retry:
                for q in self.queues.values():
                    for j in q:
                        self._withdraw(j, now, dropped=True)
                self.queues.clear()
            series_t.append(now)
            series_alloc.append([self._totals[r] for r in res_names])
            series_pending.append(self.pending_pods)
            series_running.append(self.running_pods)
            if self.devices is not None and self.devices.has_target:
                series_frag.append(self.devices.frag_total)
            # Sampled on a uniform grid over [0, last arrival] (the heat map's time axis
            # is uniform; the drain after the last arrival is left out, as in the time
            # averages): at most HEATMAP_SAMPLES + 1 rows however long the drain.
            while now >= next_heat and next_heat <= t_end and heat_col is not None:
                heat_ts.append(now)
                heat_rows.append(self._node_share(heat_col))
                strand_rows.append(self._stranded(cols))
                next_heat += heat_every
        if self.progress is not None:
            self.progress(J, J)
        never = sum(1 for q in self.queues.values() for _ in q)
        alloc_arr = np.array(series_alloc, dtype=np.int64).reshape(-1, len(res_names))
        strand = np.array(strand_rows, dtype=np.int64).reshape(-1, len(res_names))
        dev_stats: dict = {}
        if self.devices is not None:
            dev_stats = self.devices.totals()
            dev_stats["memo_hits"] = self.devices.memo_hits
            dev_stats["memo_misses"] = self.devices.memo_misses
        return RunResult(
            trace=self.trace.summary(),
            profile=self.profile.name,
            seed=self.seed,
            nodes=len(self.nodes),
            wall_seconds=time.perf_counter() - wall0,
            arrival=np.array([j.arrival for j in jobs], dtype=np.float64),
            start=self.start,
            finish=self.finish,
            duration=np.array([j.duration for j in jobs], dtype=np.float64),
            tasks=np.array([j.tasks for j in jobs], dtype=np.int64),
            withdrawn=self.withdrawn + self.dropped,
            never_started=never,
            t=np.array(series_t),
            alloc={r: alloc_arr[:, i] for i, r in enumerate(res_names)},
            capacity=capacity,
            pending=np.array(series_pending, dtype=np.int64),
            running=np.array(series_running, dtype=np.int64),
            frag=np.array(series_frag) if series_frag else None,
            heat_t=np.array(heat_ts),
            heat=np.array(heat_rows).reshape(len(heat_ts), -1),
            heat_resource=heat_res,
            stranded={r: strand[:, i] for i, r in enumerate(res_names)},
            placement_seconds=self.place_seconds,
            placements=self.placements,
            placer_stats=self.placer.stats(),
            device_stats=dev_stats,
            events=self.events if self.record else None,
            anomalies=dict(st.anomalies),
            preemptions=self.preemptions,
            evicted_jobs=self.evicted_jobs,
            reservations=self.reservations,
            usage=self.usage_stats,
        )

    # ------------------------------------------------------------------ steps

    def _arrive(self, j: int, now: float) -> None:
        job = self.jobs[j]
        keys = []
        if job.tasks > 1:
            self._emit(
                PODGROUP_SUBMITTED,
                job.name,
                {
                    "metadata": {"name": job.name, "namespace": NAMESPACE},
                    "spec": {"minMember": job.tasks},
                },
                now,
            )
        for k in range(job.tasks):
            key, manifest = self._pod_manifest(job, k)
            self._emit(POD_SUBMITTED, key, manifest, now)
            keys.append(key)
            self.job_of[key] = j
        self.keys[j] = keys
        self.targets[j] = (
            ("pod", keys[0], 0)
            if job.tasks == 1
            else ("gang", namespaced_key(NAMESPACE, job.name), 0)
        )
        self.pending_pods += job.tasks
        shape = job.shape
        q = self.queues.get(shape)
        if q is None:
            q = self.queues[shape] = deque()
        q.append(j)

    def _schedule(self, now: float) -> tuple[list[int], bool]:
        """One scheduling pass over the pending shapes, oldest first; returns the jobs
        started and whether any were evicted."""
        order = sorted(
            (q[0], shape) for shape, q in self.queues.items() if q and shape not in self.blocked
        )
        if not order:
            return [], False
        targets = self.targets
        t0 = time.perf_counter()
        # Each shape's jobs in FIFO order, until one of them is not placed (the shape is
        # then blocked: placements only take room away). The pass changes no queue.
        placed, stopped, reservations = self.scheduler.run_groups(
            [map(targets.__getitem__, self.queues[shape]) for _, shape in order], now=now
        )
        self.place_seconds += time.perf_counter() - t0
        for g in stopped:
            self.blocked.add(order[g][1])
        started: list[int] = []
        evicted = False
        job_of, jobs, queues = self.job_of, self.jobs, self.queues
        for t, _, bindings, victims in placed:
            if victims:
                victims = self._evict(victims, t[1], now)
                evicted = True
            j = job_of[bindings[0][0]]
            self._commit(j, bindings, now, victims)
            shape = jobs[j].shape
            q = queues[shape]
            if q[0] == j:  # FIFO inside a shape: usually the head
                q.popleft()
            else:
                q.remove(j)
            if not q:
                del queues[shape]
            started.append(j)
        for r in reservations:
            data = {k: v for k, v in r.items() if k != "position"}
            self._emit(GANG_RESERVED, r["gang"], data, now)
            self.reservations += 1
        return started, evicted

    def _commit(
        self,
        j: int,
        bindings: list[tuple[str, str, tuple[int, ...]]],
        now: float,
        victims: list[dict[str, str]] | None = None,
    ) -> None:
        """Log job ``j``'s placement (the pass bound its devices), naming the pods its
        preemption evicted just before."""
        job = self.jobs[j]
        st = self.state
        out = []
        resources = self._units(job)
        again = self._runs.get(j, 0)  # placed again after an eviction: a fresh proposal id
        self._runs[j] = again + 1
        for pod, node, devs in bindings:
            b: dict[str, Any] = {"pod": pod, "node": node, "resources": resources}
            if devs:
                b["devices"] = list(devs)
            out.append(b)
        data: dict[str, Any] = {
            "proposal": f"{self._run_id}-{job.name}" + (f"-{again}" if again else ""),
            "replica": "esched-sim",
            "position": self.position,
            "gang": namespaced_key(NAMESPACE, job.name) if job.tasks > 1 else None,
            "bindings": out,
        }
        if victims:
            data["victims"] = victims
        self._emit(PLACEMENT_COMMITTED, job.name, data, now)
        self.placements += 1
        self.bound[j] = [(st.node_index[node], devs) for _, node, devs in bindings]
        self.start[j] = now
        self._bound_jobs[j] = None
        self.pending_pods -= job.tasks
        self.running_pods += job.tasks
        self._account(job, +1)
        if self.usage_stats is not None:
            bands = self.pass_config.bands or BandConfig()
            band = "prod" if bands.band_of(job.priority) >= Band.PRODUCTION else "non_prod"
            self.usage_stats.tasks[band] += job.tasks
        if self.on_place is not None:
            self.on_place(self, job, True)

    def _evict(
        self,
        victims: list[dict[str, str]],
        by: str,
        now: float,
        release_devices: bool = True,
        overload: str | None = None,
    ) -> list[dict[str, str]]:
        """Evict the victims of a preemption (and the rest of their jobs: a job's tasks
        run together), as the commit service logs it: each ``esched.pod.evicted`` names
        the decision that follows; the jobs go back to the pending queue. Returns the
        decision's victims (every pod evicted). ``release_devices=False``: the policy
        already gave their GPU devices back in the device table. ``overload``: not a
        preemption but an overload eviction (reason ``Overloaded``, this message; no
        decision follows)."""
        if overload is None:
            self.preemptions += 1
        out: list[tuple[int, str, int, tuple[int, ...]]] = []  # job, pod, node slot, devices
        for j in sorted({self.job_of[v["pod"]] for v in victims}):
            keys, bound = self.keys[j], self.bound[j]
            if bound is not None and keys is not None:
                out.extend((j, key, n, devs) for key, (n, devs) in zip(keys, bound, strict=True))
        decision = f"sim-{self._run_id}-{self.position + len(out) + 1}"  # the commit's id
        # Victims run on the sim's nodes, which are never removed: every slot has a name.
        names = cast("list[str]", self.state.node_names)
        for j, key, n, devs in out:
            job = self.jobs[j]
            data: dict[str, Any] = (
                {
                    "pod": key,
                    "node": names[n],
                    "reason": "Preempted",
                    "message": f"preempted to make room for {by}",
                    "by": by,
                    "decision": decision,
                }
                if overload is None
                else {"pod": key, "node": names[n], "reason": "Overloaded", "message": overload}
            )
            self._emit(POD_EVICTED, key, data, now)
            if self.devices is not None and release_devices:
                self.devices.release(n, job.gpu_milli, job.cpu_milli, devs)
        for j in sorted({j for j, *_ in out}):
            job = self.jobs[j]
            self.bound[j] = None
            self._bound_jobs.pop(j, None)
            self._run_seq.pop(j, None)
            self.start[j] = np.nan
            self.running_pods -= job.tasks
            self.pending_pods += job.tasks
            self._account(job, -1)
            if overload is None:
                self.evicted_jobs += 1
            q = self.queues.get(job.shape)
            if q is None:
                q = self.queues[job.shape] = deque()
            q.insert(bisect.bisect(q, j), j)
        return [{"pod": key, "node": names[n]} for _, key, n, _ in out]

    def _units(self, job: Job) -> dict[str, int]:
        out = {"pods": 1}
        if job.cpu_milli:
            out["cpu"] = job.cpu_milli
        if job.memory_bytes:
            out["memory"] = job.memory_bytes
        if job.gpu_milli:
            out[GPU_RESOURCE] = job.gpu_milli
        return out

    def _account(self, job: Job, sign: int) -> None:
        tot = self._totals
        k = job.tasks * sign
        if "cpu" in tot:
            tot["cpu"] += k * job.cpu_milli
        if "memory" in tot:
            tot["memory"] += k * job.memory_bytes
        if GPU_RESOURCE in tot:
            tot[GPU_RESOURCE] += k * job.gpu_milli

    # ------------------------------------------------------------------ usage

    def _usage_report(self, now: float) -> bool:
        """Log the running pods' usage at ``now`` (the model's fractions of their limits)
        as one ``esched.usage.reported`` with ``pods[]`` and ``nodes[]``; the state folds
        it (reservations: the live fold's rule, ``core/_reservations.pxd``). Then measure
        (:class:`UsageStats`) and handle overload. True if room may have been freed."""
        model, stats, st = self.usage_model, self.usage_stats, self.state
        assert model is not None and stats is not None, "reports run with a usage model"
        running = list(self._bound_jobs)
        jobs = self.jobs
        pods, names, keys, nodes, cpu_lim, mem_lim, prod = [], [], [], [], [], [], []
        bands = self.pass_config.bands or BandConfig()
        for j in running:
            job, bound, jkeys = jobs[j], self.bound[j], self.keys[j]
            if bound is None or jkeys is None:
                continue
            is_prod = bands.band_of(job.priority) >= Band.PRODUCTION
            for k, (key, (n, _)) in enumerate(zip(jkeys, bound, strict=True)):
                # A pod id stable across runs of the same job list (the usage model's
                # key): job index and task (gangs in the traces are far below 4096).
                pods.append((j << 12) | k)
                names.append(job.name)
                keys.append(key)
                nodes.append(n)
                cpu_lim.append(job.cpu_milli)
                mem_lim.append(job.memory_bytes)
                prod.append(is_prod)
        stats.reports += 1
        if not pods:
            return False
        f = model.fractions(np.array(pods, dtype=np.int64), names, now)
        cpu = np.ceil(f["cpu"] * np.array(cpu_lim, dtype=np.float64)).astype(np.int64)
        mem = np.ceil(f["memory"] * np.array(mem_lim, dtype=np.float64)).astype(np.int64)
        node = np.array(nodes, dtype=np.int64)
        n_nodes = st.n_nodes
        use_cpu = np.bincount(node, weights=cpu, minlength=n_nodes)
        use_mem = np.bincount(node, weights=mem, minlength=n_nodes)
        node_names = cast("list[str]", st.node_names)
        # Memory as a JSON number of bytes (a quantity as well): its values are nearly
        # all distinct, and a number skips the quantity parser's string path.
        entries = [
            {"pod": key, "usage": {"cpu": f"{c}m", "memory": m}}
            for key, c, m in zip(keys, cpu.tolist(), mem.tolist(), strict=True)
        ]
        # Every node, idle ones too: a node's last report stands until a newer one.
        node_entries = [
            {
                "name": node_names[n],
                "usage": {"cpu": f"{int(use_cpu[n])}m", "memory": int(use_mem[n])},
            }
            for n in range(n_nodes)
        ]
        self._emit(USAGE_REPORTED, "usage", {"pods": entries, "nodes": node_entries}, now)
        evicted = self._overload(now, node, {"cpu": cpu, "memory": mem})
        # Measured after the fold, weighted by the interval until the next report.
        w = self.usage_every
        # The report carries what the pods ask for (as the live rule reads it: an
        # overload lasts while the demand exceeds the node); until the next report a
        # throttled pod gets at most its cap, which is what ``usage`` of cpu measures.
        got = cpu
        if self._caps:
            got = cpu.copy()
            for i, (key, n) in enumerate(zip(keys, nodes, strict=True)):
                cap = self._caps.get(n, {}).get(key)
                if cap is not None and cpu[i] > cap:
                    got[i] = cap
                    stats.throttled_seconds += w
                    stats.throttled_cpu += w * float(cpu[i] - cap)
        slots = np.array([st.pod_index[k] for k in keys], dtype=np.int64)
        resv = st.pod_reservations()[slots]
        allocatable, limits = st.node_allocatable(), st.node_limits()
        prod_arr = np.array(prod, dtype=bool)
        for name, used in (("cpu", got), ("memory", mem)):
            c = st.res_index.get(name)
            if c is None:
                continue
            lim = limits[:, c]
            over = np.maximum(lim - allocatable[:, c], 0)
            total = float(lim.sum())
            stats.last_share[name] = float(over.sum()) / total if total else 0.0
            stats.limits[name] = stats.limits.get(name, 0.0) + w * total
            stats.reclaimed[name] = stats.reclaimed.get(name, 0.0) + w * float(over.sum())
            stats.usage[name] = stats.usage.get(name, 0.0) + w * float(used.sum())
            stats.reservations[name] = stats.reservations.get(name, 0.0) + w * float(
                resv[:, c].sum()
            )
        n_prod = int(prod_arr.sum())
        stats.task_seconds["prod"] += w * n_prod
        stats.task_seconds["non_prod"] += w * (len(prod_arr) - n_prod)
        return evicted or self.state.reclamation.enabled

    def _overload(self, now: float, node: np.ndarray, pod_use: dict[str, np.ndarray]) -> bool:
        """Borg's answer when a node's usage exceeds its allocatable (sections 5.5 and
        6.2), decided as the live dispatcher decides it: the core's planner
        (:func:`esched.core.overload.plan_overload` over
        :func:`~esched.core.overload.node_loads` of the folded state) and its episode
        rule (:class:`~esched.core.overload.Episodes`). On a resource that is not
        compressible (``overcommit`` off: memory) evict at once, non-production pods
        first, lowest priority first, until usage and reservations fit; on a
        compressible one (CPU) throttle: a throttled pod gets at most its cap until
        the episode ends (the first report where the node's pods fit again), and the
        same evictions once the episode has lasted ``evict_after`` seconds of virtual
        time. A victim's whole job is evicted (its tasks run together) and queues
        again. True if anything was evicted.

        ``node[p]``: the node slot of the report's pod ``p``; ``pod_use[resource][p]``
        its usage (the node sums decide which nodes are overloaded)."""
        st, stats = self.state, self.usage_stats
        assert stats is not None, "overload is handled with a usage model"
        cfg = st.reclamation
        bands = self.pass_config.bands or BandConfig()
        allocatable = st.node_allocatable()
        episodes = self._episodes
        victims: dict[int, str] = {}  # job -> why (the first overload that chose it)
        for name, per_pod in pod_use.items():
            c = st.res_index.get(name)
            if c is None:
                continue
            used = np.bincount(node, weights=per_pod, minlength=st.n_nodes)
            hot = used > allocatable[:, c]
            over = np.flatnonzero(hot).tolist()
            if over:
                stats.overloads[name] = stats.overloads.get(name, 0) + len(over)
            compressible = cfg.overcommits(name)
            if compressible:
                # Episodes that ended: their throttles are lifted.
                for slot, res in [k for k in self._hot if k[1] == name and not hot[k[0]]]:
                    episodes.observe((str(slot), res), False, now)
                    self._hot.discard((slot, res))
                    self._caps.pop(slot, None)
            for n in over:
                lasted = True
                if compressible:
                    self._hot.add((n, name))
                    episodes.observe((str(n), name), True, now)
                    lasted = episodes.lasted((str(n), name), now, cfg.evict_after)
                plan = plan_overload(
                    int(allocatable[n, c]),
                    node_loads(st, n, name, bands),
                    compressible=compressible,
                    evict=lasted,
                )
                caps = self._caps.setdefault(n, {}) if compressible else {}
                for t in plan.throttles:
                    if t.pod not in caps:  # once per pod per episode, as live
                        caps[t.pod] = t.cap
                        stats.throttled += 1
                for pod in plan.evictions:
                    caps.pop(pod, None)
                    j = self.job_of[pod]
                    if j in victims:
                        continue
                    victims[j] = (
                        f"node out of {name}: usage {plan.usage} > allocatable {plan.capacity}"
                        " (Borg 5.5: non-production first)"
                    )
                    band = (
                        "prod"
                        if bands.band_of(self.jobs[j].priority) >= Band.PRODUCTION
                        else "non_prod"
                    )
                    keys = self.keys[j]
                    assert keys is not None, "a running job was submitted"
                    stats.evictions[band] += len(keys)
        for j in sorted(victims):
            keys = self.keys[j]
            assert keys is not None, "a running job was submitted"
            stats.evicted_jobs += 1
            for held in self._caps.values():
                for pod_key in keys:
                    held.pop(pod_key, None)
            self._evict([{"pod": keys[0]}], "", now, overload=victims[j])
        return bool(victims)

    def _finish(self, j: int, now: float) -> None:
        job = self.jobs[j]
        keys, bound = self.keys[j], self.bound[j]
        if bound is None:
            return
        assert keys is not None, "a bound job was submitted"
        for key, (n, devs) in zip(keys, bound, strict=True):
            name = split_key(key)[1]
            self._emit(
                POD_SUCCEEDED,
                key,
                {"metadata": {"name": name, "namespace": NAMESPACE}},
                now,
            )
            if self.devices is not None:
                self.devices.release(n, job.gpu_milli, job.cpu_milli, devs)
        self.bound[j] = None
        self._bound_jobs.pop(j, None)
        self.finish[j] = now
        self.running_pods -= job.tasks
        self._account(job, -1)

    def _expire(self, j: int, now: float) -> None:
        """The trace deleted the pod: withdraw it if it is still pending."""
        if not np.isnan(self.start[j]) or self.keys[j] is None:
            return
        q = self.queues.get(self.jobs[j].shape)
        if q is None or j not in q:
            return
        q.remove(j)
        if not q:
            del self.queues[self.jobs[j].shape]
        self._withdraw(j, now)

    def _withdraw(self, j: int, now: float, dropped: bool = False) -> None:
        job = self.jobs[j]
        keys = self.keys[j]
        assert keys is not None, "a withdrawn job was submitted"
        for key in keys:
            name = split_key(key)[1]
            self._emit(POD_DELETED, key, {"metadata": {"name": name, "namespace": NAMESPACE}}, now)
        self.pending_pods -= job.tasks
        if dropped:
            self.dropped += 1
        else:
            self.withdrawn += 1

    # ------------------------------------------------------------------ snapshots

    def _node_share(self, col: int) -> np.ndarray:
        st = self.state
        cap = st.node_allocatable()[:, col].astype(np.float64)
        used = st.node_allocated()[:, col].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(cap > 0, used / np.where(cap > 0, cap, 1), np.nan)
        return share.astype(np.float32)

    def _stranded(self, cols: list[int]) -> list[int]:
        """Per resource: free units on nodes where another resource is exhausted (< 5%
        free), so nothing can use them (Borg's stranded resources)."""
        st = self.state
        n = st.n_nodes
        cap = st.node_allocatable()[:, cols].astype(np.float64)
        free = cap - st.node_allocated()[:, cols]
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(cap > 0, free / np.where(cap > 0, cap, 1), np.inf)
        exhausted = share < STRAND_EXHAUSTED
        out = []
        for i in range(len(cols)):
            others = (
                np.delete(exhausted, i, axis=1).any(axis=1)
                if len(cols) > 1
                else np.zeros(n, dtype=bool)
            )
            out.append(int(free[others & (cap[:, i] > 0), i].sum()))
        return out


#: A resource with less than this share free on a node is exhausted there.
STRAND_EXHAUSTED = 0.05


def simulate(trace: Trace, profile: Profile, seed: int = 0, **kw) -> RunResult:
    """Run ``trace`` under ``profile`` (see :class:`Simulator` for the keywords)."""
    return Simulator(trace, profile, seed, **kw).run()
