"""Quincy as a placement policy: one round of jobs, from the folded state to bindings.

:class:`QuincyPolicy` builds the round's :class:`~esched.core.flow.FlowProblem` from a
:class:`~esched.core.ClusterState` (node allocatable and allocated arrays, the pods'
equivalence classes and allocations), solves it (:func:`esched.core.flow.solve`), and
turns the flow back into bindings that the one feasibility path accepts:

- **Shape classes.** The round's tasks are grouped by equivalence class; a machine's
  room for class k is ``slots[m, k]`` (each resource ``floor(free / request)``; GPU
  devices exactly from the :class:`~esched.core._devices.DeviceTable`: whole GPUs
  from idle devices, shares device by device), zero where the class's constraints
  (selector, affinity, taints, cordon) fail: :meth:`Placer.binding_reasons` of one
  pod of the class, its non-resource bits.
- **Racks** from a node label (``rack_labels``, first found); nodes without one are
  grouped in slot order into racks of ``rack_size``.
- **Locality.** A job may carry data (node slot -> data units); as in Quincy, the X
  arc costs the worst case (everything across the core switch), a rack or machine
  holding at least ``prefer_share`` of the data gets its own arc at its cost. A job
  without data has no preference arcs: every machine costs the same but for the
  packing term.
- **Fairness.** ``A_j`` by water-filling on each task's dominant share
  (:func:`~esched.core.flow.fair_shares`); ``strict``: ``E_j = F_j = A_j`` (Quincy's
  "fair"); ``none``: ``E_j = 0, F_j = N_j``. A gang runs whole or not at all, so its
  bounds are ``F_j = N_j`` and ``E_j = N_j`` only when its share covers it.
- **Preemption.** On: running tasks enter the network, kept at no cost or killed at
  their kill cost (which grows with the time they ran). Off: they stay where they are.

Every flow placement is then checked, oldest job first, on the placer's overlay
(:meth:`Placer.binding_reasons`, and device fit), evicting only the flow's victims on
that node and only while the task does not fit; a gang is all or nothing. What does
not fit is dropped and counted (the multi-dimensional approximation's cost, see
:mod:`esched.core.flow`); it waits for the next round.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain

import numpy as np

from esched.core._devices import DeviceTable
from esched.core._placer import RESOURCE_REASON_SHIFT, Placer
from esched.core._state import ClassMemo, ClusterState
from esched.core.bands import BandConfig, may_preempt
from esched.core.flow import FlowCosts, FlowProblem, FlowRound, fair_shares, solve
from esched.core.phases import PHASE_PENDING
from esched.core.schedule import PassResult, Placement, SchedulingPass, Target, placed_by_key

__all__ = [
    "RACK_LABELS",
    "FlowJob",
    "QuincyConfig",
    "QuincyPlacement",
    "QuincyPlan",
    "QuincyPolicy",
    "QuincyRounds",
]

#: Node labels naming a machine's rack, first found wins.
RACK_LABELS = ("esched.dev/rack", "topology.kubernetes.io/rack", "topology.kubernetes.io/zone")
#: Reason bits that are not about resources (constraints, cordon, node gone).
_NON_RESOURCE = (1 << RESOURCE_REASON_SHIFT) - 1
#: Resources that bound nothing in practice and do not define a dominant share.
_NOT_DOMINANT = ("pods",)


@dataclass(slots=True)
class FlowJob:
    """One job of a round: its pending and running pods (pod slots of the state)."""

    key: str
    #: pod slots waiting
    pending: Sequence[int]
    #: running tasks: (pod slot, node slot, GPU devices it holds)
    running: Sequence[tuple[int, int, tuple[int, ...]]] = ()
    #: seconds since it arrived (unscheduled cost) and since it started (kill cost)
    waited: float = 0.0
    ran: float = 0.0
    #: all tasks together or none (gangs)
    gang: bool = False
    #: data units per node slot (Quincy's locality input), if the workload has any
    data: Mapping[int, float] | None = None
    #: what a round reads of the job's pods, computed once (see :meth:`tasks`): a
    #: job waits through many rounds and its pods, their classes and where its
    #: running tasks run do not change meanwhile (``pending`` and ``running`` are
    #: not to be changed once a round has seen the job)
    _tasks: JobTasks | None = field(default=None, init=False, repr=False, compare=False)

    def tasks(self, pod_class: np.ndarray) -> JobTasks:
        """The job's network tasks, cached on the job: its pending pods by class
        (first seen first, pod order inside), one task each, and its running pods."""
        got = self._tasks
        if got is None:
            by_class: dict[int, list[int]] = {}
            for p in self.pending:
                by_class.setdefault(int(pod_class[p]), []).append(int(p))
            groups = list(by_class.values())
            first = int(self.pending[0]) if len(self.pending) else int(self.running[0][0])
            got = self._tasks = JobTasks(
                row=(first, len(self.pending), len(self.running), self.gang, len(groups)),
                firsts=[ps[0] for ps in groups],
                classes=list(by_class),
                sizes=[len(ps) for ps in groups],
                flat=[p for ps in groups for p in ps],
                run_pods=[int(p) for p, _, _ in self.running],
                run_nodes=[int(n) for _, n, _ in self.running],
            )
        return got


@dataclass(frozen=True, slots=True)
class JobTasks:
    """A job's part of a round's network (:meth:`FlowJob.tasks`)."""

    #: (a pod of the job, pending pods, running pods, gang, pending tasks): the
    #: round's per-job columns
    row: tuple[int, int, int, bool, int]
    #: per pending task (the job's pods of one class): its first pod, class and size
    firsts: list[int]
    classes: list[int]
    sizes: list[int]
    #: the pending pods, task by task
    flat: list[int]
    #: running pods and their machines
    run_pods: list[int]
    run_nodes: list[int]


@dataclass(frozen=True, slots=True)
class QuincyConfig:
    """The policy's switches: Quincy's Q (``fairness="none"``), QF (strict, no
    preemption), QFP (strict, preemption)."""

    fairness: str = "strict"  # "strict" | "none"
    preemption: bool = False
    costs: FlowCosts = field(default_factory=FlowCosts)
    rack_labels: tuple[str, ...] = RACK_LABELS
    #: machines per rack for nodes without a rack label (Quincy's cluster: ~30)
    rack_size: int = 32
    #: a machine or rack gets a preference arc when it holds this share of the data
    prefer_share: float = 0.1
    #: which running jobs a round may evict: "bands" (esched's commit rule, Borg's
    #: bands: strictly lower band, never prod; what the commit service and the audit
    #: accept) or "any" (Quincy's own: any job over its share; a log made so fails
    #: the audit's preemption check wherever jobs share a band)
    victims: str = "bands"
    #: priority bands for ``victims="bands"`` (None: the defaults of core/bands.py)
    bands: BandConfig | None = None
    #: more solves for the pods the feasibility check refused, on the room the
    #: accepted placements left (no fairness bounds, no preemption): the shape
    #: approximation's loss mostly comes back
    repair: int = 1

    def __post_init__(self) -> None:
        if self.fairness not in ("strict", "none"):
            raise ValueError(f"fairness must be 'strict' or 'none', not {self.fairness!r}")
        if self.victims not in ("bands", "any"):
            raise ValueError(f"victims must be 'bands' or 'any', not {self.victims!r}")
        if self.rack_size < 1:
            raise ValueError("rack_size must be at least 1")


@dataclass(slots=True)
class QuincyPlacement:
    """One job's accepted bindings and the running pods evicted for them."""

    job: int  # index into the round's job list
    #: (pod slot, node slot, GPU devices taken)
    bindings: list[tuple[int, int, tuple[int, ...]]]
    #: jobs (indices into the round's list) evicted to make room, whole
    victims: list[int]


@dataclass(slots=True)
class QuincyPlan:
    """What a round decided."""

    placements: list[QuincyPlacement]
    round: FlowRound | None
    #: flow placements the feasibility check refused and no repair solve placed (the
    #: shape approximation's cost)
    infeasible: int = 0
    #: pods the repair solves placed after the first solve's were refused
    repaired: int = 0
    #: gangs the flow placed only in part (dropped whole)
    gangs_incomplete: int = 0
    #: running tasks the flow would kill that no placement needed (kept running)
    kills_deferred: int = 0
    machines: int = 0
    classes: int = 0
    tasks: int = 0
    #: no pending task had room anywhere: nothing to place, the flow not solved
    #: (``round`` is None; the kills it would have chosen are not counted)
    skipped: bool = False
    #: wall seconds: building the problem from the state, the check of the placements
    problem_seconds: float = 0.0
    check_seconds: float = 0.0


class QuincyPolicy:
    """Quincy's flow scheduler over one state and placer (see the module doc).

    :param state: the folded state.
    :param placer: its placer; a round's accepted bindings and evictions are assumed
        in its view (as the scheduling pass does), devices bound in ``devices``.
    :param config: the variant and costs.
    :param devices: per-device GPU accounting (None: GPUs only as a summed resource).
    :param gpu_resource: the resource GPU requests are read from.
    :param gpu_scale: milli-GPU per unit of ``gpu_resource`` (1000 for whole devices,
        as ``nvidia.com/gpu``).
    """

    def __init__(
        self,
        state: ClusterState,
        placer: Placer,
        config: QuincyConfig | None = None,
        *,
        devices: DeviceTable | None = None,
        gpu_resource: str = "esched.dev/gpu-milli",
        gpu_scale: int = 1,
    ) -> None:
        self.state = state
        self.placer = placer
        self.config = config or QuincyConfig()
        self.devices = devices
        self.gpu_resource = gpu_resource
        self.gpu_scale = gpu_scale
        self._racks: tuple[int, np.ndarray, int] | None = None  # (node gen, racks, count)
        self._ok_cache = ClassMemo(state)  # class -> (nodes key, ok)

    # ------------------------------------------------------------------ network

    def racks(self) -> tuple[np.ndarray, int]:
        """Rack index per node slot and the number of racks (cached per node change)."""
        st = self.state
        if self._racks is not None and self._racks[0] == st.node_gen:
            return self._racks[1], self._racks[2]
        names: dict[str, int] = {}
        out = np.zeros(st.n_nodes, dtype=np.int32)
        unlabelled = 0
        for n in range(st.n_nodes):
            labels = st.node_labels[n] if n < len(st.node_labels) else {}
            rack = next((labels[k] for k in self.config.rack_labels if k in labels), None)
            if rack is None:
                rack = f"\0{unlabelled // self.config.rack_size}"
                unlabelled += 1
            out[n] = names.setdefault(rack, len(names))
        self._racks = (st.node_gen, out, len(names))
        return out, len(names)

    def _gpu_col(self) -> int:
        return self.state.res_index.get(self.gpu_resource, -1)

    def problem(self, jobs: Sequence[FlowJob]) -> tuple[FlowProblem, dict]:
        """The round's network for ``jobs`` (in age order, oldest first), and the
        bookkeeping :meth:`plan` reads it back with."""
        st = self.state
        cfg = self.config
        costs = cfg.costs
        preempt = cfg.preemption
        M = st.n_nodes
        alive = st.node_alive()
        alloc = st.node_allocatable()
        # the placer's view: the state plus what this round (or a repair) assumed
        if self.placer.synced_position != st.position:
            self.placer.sync()
        free = (alloc - self.placer.used_array()[:M]).astype(np.int64)
        pod_class = st.pod_classes()
        pod_alloc = st.pod_allocations()
        creq = st.class_requests()
        gcol = self._gpu_col()
        dev = self.devices if gcol >= 0 else None

        # fairness: A_j on each job's dominant share per task
        total = alloc[alive].sum(axis=0).astype(np.float64)
        dom_cols = [c for c in range(st.n_res) if st.res_names[c] not in _NOT_DOMINANT]
        # one pass over the jobs for their cached parts; the rest is arrays
        parts = [job.tasks(pod_class) for job in jobs]
        per_job = np.fromiter(
            chain.from_iterable(t.row for t in parts), np.int64, 5 * len(parts)
        ).reshape(-1, 5)
        first = per_job[:, 0]
        req = creq[pod_class[np.asarray(first, dtype=np.int64)]][:, dom_cols].astype(np.float64)
        tot = total[dom_cols]
        with np.errstate(divide="ignore", invalid="ignore"):
            sh = np.where(tot > 0, req / np.where(tot > 0, tot, 1.0), 0.0)
        dom = np.maximum(sh.max(axis=1) if sh.shape[1] else 0.0, 1e-12)
        n_pend = per_job[:, 1]
        n_run = per_job[:, 2]
        n_all = n_pend + n_run
        gang = per_job[:, 3].astype(bool)
        if cfg.fairness == "none":
            fair = n_all.copy()
        else:
            fair = fair_shares(dom, n_all, np.arange(len(jobs)))
        n_net = n_pend + (n_run if preempt else 0)
        if cfg.fairness == "none":
            fmax = n_net.copy()
            emin = np.zeros_like(fmax)
        elif preempt:
            fmax = np.minimum(fair, n_net)
            emin = fmax.copy()
        else:
            fmax = np.clip(fair - n_run, 0, n_net)
            emin = fmax.copy()
        # a gang runs whole: it may always take all its tasks, must only when its
        # share covers it
        fmax = np.where(gang, n_net, fmax)
        emin = np.where(gang, np.where(fair >= n_all, n_net, 0), emin)

        # Network tasks: each job's pending pods of one class as one node (identical
        # tasks: the same arcs and costs, so one node of supply = their count is an
        # equivalent network, ten times smaller for jobs of ten), then (with
        # preemption) each running pod on its own.
        # A job with F_j = 0 places nothing this round: its pending tasks could only
        # flow to U_j, so they are left out (the same optimum, a network the size of
        # what may run rather than of the backlog; its running tasks stay, to be killed).
        # Only the jobs with tasks in the network are visited, and each by its cached
        # lists, chained (no per-task Python work): the rest of the backlog costs
        # nothing here.
        may_run = fmax > 0
        pj = np.flatnonzero((n_pend > 0) & may_run)
        pparts = [parts[j] for j in pj.tolist()]
        p_groups = per_job[pj, 4]
        t_pod_l = list(chain.from_iterable(t.firsts for t in pparts))
        t_sup_l = list(chain.from_iterable(t.sizes for t in pparts))
        flat_l = list(chain.from_iterable(t.flat for t in pparts))
        t_job_a = np.repeat(pj, p_groups)
        t_run_a = np.full(t_job_a.shape[0], -1, dtype=np.int64)
        if preempt:
            # each job's running tasks after its pending ones, one task per pod
            rj = np.flatnonzero(n_run > 0)
            rparts = [parts[j] for j in rj.tolist()]
            r_pods = list(chain.from_iterable(t.run_pods for t in rparts))
            r_nodes = np.asarray(list(chain.from_iterable(t.run_nodes for t in rparts)), np.int64)
            r_job = np.repeat(rj, n_run[rj])
            t_order = np.argsort(np.concatenate((2 * t_job_a, 2 * r_job + 1)), kind="stable")
            f_order = np.argsort(
                np.concatenate((2 * np.repeat(pj, n_pend[pj]), 2 * r_job + 1)), kind="stable"
            )
            t_pod_a = np.asarray(t_pod_l + r_pods, dtype=np.int64)[t_order]
            t_sup_a = np.asarray(t_sup_l + [1] * len(r_pods), dtype=np.int64)[t_order]
            t_job_a = np.concatenate((t_job_a, r_job))[t_order]
            t_run_a = np.concatenate((t_run_a, r_nodes))[t_order]
            flat_a = np.asarray(flat_l + r_pods, dtype=np.int64)[f_order]
        else:
            t_pod_a = np.asarray(t_pod_l, dtype=np.int64)
            t_sup_a = np.asarray(t_sup_l, dtype=np.int64)
            flat_a = np.asarray(flat_l, dtype=np.int64)
        pods = t_pod_a  # one pod per task
        sup = t_sup_a
        tj = t_job_a.astype(np.int32)
        run = t_run_a.astype(np.int32)
        cids = pod_class[pods] if pods.size else np.zeros(0, np.int32)
        classes, tk = np.unique(cids, return_inverse=True)
        K = classes.shape[0]
        # With preemption a running task's room counts for the slots of C_mk (the flow
        # may kill it to make room); the machine's cap is its slots on what is free now
        # plus the tasks running there, so kept tasks and newcomers never share a slot.
        free_now = free.copy()
        freed_gpus = np.zeros(M, dtype=np.int64)
        on_machine = np.zeros(M, dtype=np.int64)
        if preempt and run.size:
            r = np.flatnonzero(run >= 0)
            np.add.at(free, run[r], pod_alloc[pods[r]])
            np.add.at(on_machine, run[r], 1)
            if dev is not None:
                np.add.at(freed_gpus, run[r], pod_alloc[pods[r], gcol] // 1000)
        slots = np.zeros((M, K), dtype=np.int32)
        cap = np.zeros(M, dtype=np.int64)
        mcost = np.zeros((M, K), dtype=np.int64)
        with np.errstate(divide="ignore", invalid="ignore"):
            free_share = np.where(alloc > 0, free_now / np.where(alloc > 0, alloc, 1), 0.0)
        idle0 = dfree = np.zeros(0, dtype=np.int64)
        if dev is not None:
            idle0 = dev.idle_devices(M)
            dfree = dev.device_free(M)
        for k in range(K):
            req = creq[classes[k]].astype(np.int64)
            cols = np.flatnonzero(req > 0).tolist()
            # with the running tasks' room, and on what is free now
            s = self._class_slots(req, cols, free, idle0, dfree, freed_gpus)
            s0 = self._class_slots(req, cols, free_now, idle0, dfree, None)
            rep = int(pods[np.flatnonzero(tk == k)[0]])  # a pod of the class
            ok = alive & self.constraints_ok(int(classes[k]), rep)
            slots[:, k] = np.where(ok, s, 0)
            cap = np.maximum(cap, np.where(ok, s0, 0))
            used_cols = [c for c in cols if st.res_names[c] not in _NOT_DOMINANT] or cols
            mcost[:, k] = np.round(costs.pack * free_share[:, used_cols].mean(axis=1)).astype(
                np.int64
            )
        cap = np.minimum(cap + on_machine, slots.max(axis=1) if K else 0)

        # costs per task
        waited = np.array([job.waited for job in jobs], dtype=np.float64)
        ran = np.array([job.ran for job in jobs], dtype=np.float64)
        wait_cost = costs.waiting(waited)[tj] if tj.size else np.zeros(0, np.int64)
        kill_cost = np.where(run >= 0, costs.killing(ran)[tj] if tj.size else 0, 0)
        any_cost = np.full(tj.shape[0], costs.anywhere, dtype=np.int64)
        racks, L = self.racks()
        # (task, machine or rack, cost) of the data-locality preference arcs
        pref: tuple[list[int], list[int], list[int]] = ([], [], [])
        rpref: tuple[list[int], list[int], list[int]] = ([], [], [])
        for j, job in enumerate(jobs):
            if not job.data or not n_pend[j]:
                continue
            data = {int(n): float(v) for n, v in job.data.items() if 0 <= int(n) < M}
            D = sum(data.values())
            if D <= 0:
                continue
            in_rack = np.zeros(L)
            for n, v in data.items():
                in_rack[racks[n]] += v
            psi, xi = costs.transfer_core, costs.transfer_rack
            worst = psi * D - (psi - xi) * float(in_rack.min())
            ts = np.flatnonzero((tj == j) & (run < 0)).tolist()
            any_cost[ts] = costs.anywhere + round(worst)
            for n, v in data.items():
                if v >= cfg.prefer_share * D:
                    rl = in_rack[racks[n]]
                    c = xi * (rl - v) + psi * (D - rl)
                    for t in ts:
                        pref[0].append(t)
                        pref[1].append(n)
                        pref[2].append(costs.anywhere + round(c))
            for rk in np.flatnonzero(in_rack >= cfg.prefer_share * D).tolist():
                c = xi * in_rack[rk] + psi * (D - in_rack[rk])
                for t in ts:
                    rpref[0].append(t)
                    rpref[1].append(rk)
                    rpref[2].append(costs.anywhere + round(c))
        prob = FlowProblem(
            machine_rack=racks.astype(np.int32),
            n_racks=L,
            slots=slots,
            machine_cap=cap.astype(np.int32),
            machine_cost=mcost,
            task_job=tj,
            task_class=tk.astype(np.int32),
            task_wait_cost=wait_cost.astype(np.int64),
            task_any_cost=any_cost,
            task_running_on=run,
            task_kill_cost=np.asarray(kill_cost, dtype=np.int64),
            job_min=emin.astype(np.int64),
            job_max=fmax.astype(np.int64),
            unfair_cost=costs.unfair,
            pref_task=np.asarray(pref[0], dtype=np.int32),
            pref_machine=np.asarray(pref[1], dtype=np.int32),
            pref_cost=np.asarray(pref[2], dtype=np.int64),
            rack_pref_task=np.asarray(rpref[0], dtype=np.int32),
            rack_pref_rack=np.asarray(rpref[1], dtype=np.int32),
            rack_pref_cost=np.asarray(rpref[2], dtype=np.int64),
            task_supply=sup,
        )
        return prob, {"pods": flat_a, "classes": classes}

    def _class_slots(
        self,
        req: np.ndarray,
        cols: list[int],
        free: np.ndarray,
        idle: np.ndarray,
        dfree: np.ndarray,
        freed_gpus: np.ndarray | None,
    ) -> np.ndarray:
        """Per machine, how many tasks of request ``req`` (its non-zero columns
        ``cols``) fit alone in ``free``; GPUs from ``idle`` whole devices, or device by
        device from ``dfree``, each plus ``freed_gpus`` whole devices a preemption frees
        (without a device table, GPUs are a summed resource like the rest)."""
        M = free.shape[0]
        gcol = self._gpu_col() if self.devices is not None else -1
        s = np.full(M, 1 << 20, dtype=np.int64)
        for c in cols:
            if c == gcol:
                g = int(req[c]) * self.gpu_scale
                if g >= 1000:
                    whole = idle if freed_gpus is None else idle + freed_gpus
                    s = np.minimum(s, whole // (g // 1000))
                else:
                    shares = (dfree // g).sum(axis=1)
                    if freed_gpus is not None:
                        shares = shares + freed_gpus * (1000 // g)
                    s = np.minimum(s, shares)
            else:
                s = np.minimum(s, np.maximum(free[:, c], 0) // req[c])
        return s

    def has_room(self, jobs: Sequence[FlowJob]) -> bool:
        """Whether a task of any pending pod of ``jobs`` fits some machine alone, on
        what is free now (the slots :meth:`problem` gives a round without
        preemption). False: a round without preemption places nothing, whatever its
        costs and bounds (every arc to a machine needs a slot)."""
        st = self.state
        M = st.n_nodes
        if self.placer.synced_position != st.position:
            self.placer.sync()
        pod_class = st.pod_classes()
        free = (st.node_allocatable() - self.placer.used_array()[:M]).astype(np.int64)
        alive = st.node_alive()
        creq = st.class_requests()
        idle = dfree = np.zeros(0, dtype=np.int64)
        if self.devices is not None and self._gpu_col() >= 0:
            idle = self.devices.idle_devices(M)
            dfree = self.devices.device_free(M)
        # Each class once, in the order its first pending pod comes, from the jobs'
        # cached classes; the first class with room answers (a round that places
        # something stops early; one that places nothing asks every class).
        seen: set[int] = set()
        for job in jobs:
            if not len(job.pending):
                continue
            t = job.tasks(pod_class)
            for cid, rep in zip(t.classes, t.firsts, strict=True):
                if cid in seen:
                    continue
                seen.add(cid)
                req = creq[cid].astype(np.int64)
                cols = np.flatnonzero(req > 0).tolist()
                s = self._class_slots(req, cols, free, idle, dfree, None)
                if ((s > 0) & alive).any() and (
                    alive & self.constraints_ok(cid, rep) & (s > 0)
                ).any():
                    return True
        return False

    @staticmethod
    def nothing_fits(prob: FlowProblem) -> bool:
        """Whether no pending task of ``prob`` has a slot on any machine: its flow
        places nothing (every arc to a machine, preference arcs too, needs a slot)."""
        pend = prob.task_running_on < 0
        return not bool((prob.slots[:, prob.task_class[pend]] > 0).any())

    def constraints_ok(self, cid: int, pod: int) -> np.ndarray:
        """Per node slot, whether class ``cid`` passes its constraints there (selector,
        affinity, taints, cordon: the non-resource bits of the one feasibility path,
        asked for pod slot ``pod`` of the class); cached per class until nodes change
        (or the class's id is given to a new class: :class:`ClassMemo`)."""
        st = self.state
        n_nodes = st.n_nodes
        # node changes that move constraints: slots, flags (cordon), labels, taints
        key = hash(
            (
                st.node_gen,
                st.flags_np[:n_nodes].tobytes(),
                st.label_bits_np[:n_nodes].tobytes(),
                st.taint_bits_np[:n_nodes].tobytes(),
            )
        )
        got = self._ok_cache.get(cid)
        if got is not None and got[0] == key:
            return got[1]
        ok = np.zeros(st.n_nodes, dtype=bool)
        reasons = self.placer.binding_reasons
        for n in np.flatnonzero(st.node_alive()).tolist():
            ok[n] = not (reasons(pod, n) & _NON_RESOURCE)
        self._ok_cache.put(cid, (key, ok))
        return ok

    def _legal_victims(self, jobs: Sequence[FlowJob]) -> Callable[[int, int], bool]:
        """``legal(j, v)``: whether job ``j``'s pending pods may evict running job ``v``
        under the configured rule (see :attr:`QuincyConfig.victims`)."""
        if self.config.victims == "any":
            return lambda j, v: True
        st = self.state
        band = self.placer.class_bands(self.config.bands)
        pod_class = st.pod_classes()
        memo: dict[tuple[int, int], bool] = {}

        def legal(j: int, v: int) -> bool:
            got = memo.get((j, v))
            if got is None:
                cids = [int(pod_class[p]) for p in jobs[j].pending]
                # a gang is as strong as its weakest member (as the validator says)
                me = min(int(band[c]) for c in cids)
                got = all(st.class_preempts(c) for c in cids) and all(
                    may_preempt(me, int(band[pod_class[p]])) for p, _, _ in jobs[v].running
                )
                memo[(j, v)] = got
            return got

        return legal

    @staticmethod
    def pod_machines(
        prob: FlowProblem, rnd: FlowRound, pods: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per network pod (``pods``: every task's pods, task by task): the pod, its
        task's job, the machine it ran on (-1 pending) and the machine the flow gives
        it (-1 none). A task's units go to its pods in pod order, machine by machine
        (the flow's assignments come sorted by task, then machine)."""
        T = prob.task_job.shape[0]
        sup = (
            np.ones(T, dtype=np.int64)
            if prob.task_supply is None
            else np.asarray(prob.task_supply, dtype=np.int64)
        )
        pod_task = np.repeat(np.arange(T, dtype=np.int64), sup)
        pos = np.arange(pod_task.shape[0], dtype=np.int64) - (np.cumsum(sup) - sup)[pod_task]
        count = np.asarray(rnd.assign_count, dtype=np.int64)
        unit_m = np.repeat(np.asarray(rnd.assign_machine, dtype=np.int64), count)
        got = np.bincount(
            np.asarray(rnd.assign_task, dtype=np.int64), weights=count, minlength=T
        ).astype(np.int64)
        placed = pos < got[pod_task]
        node = np.full(pod_task.shape[0], -1, dtype=np.int64)
        node[placed] = unit_m[(np.cumsum(got) - got)[pod_task[placed]] + pos[placed]]
        tj = np.asarray(prob.task_job, dtype=np.int64)[pod_task]
        run = np.asarray(prob.task_running_on, dtype=np.int64)[pod_task]
        return np.asarray(pods, dtype=np.int64), tj, run, node

    @staticmethod
    def _partial_gangs(prob: FlowProblem, rnd: FlowRound, gangs: np.ndarray) -> np.ndarray:
        """Jobs that are gangs and got some but not all of their pending tasks placed."""
        J = gangs.shape[0]
        tj = prob.task_job
        pend = prob.task_running_on < 0
        sup = prob.task_supply if prob.task_supply is not None else np.ones(tj.shape[0])
        at = rnd.assign_task
        keep = pend[at]
        placed = np.bincount(tj[at[keep]], weights=rnd.assign_count[keep], minlength=J)
        tasks = np.bincount(tj[pend], weights=sup[pend], minlength=J)
        return np.flatnonzero(gangs & (placed > 0) & (placed < tasks))

    # ------------------------------------------------------------------ round

    def plan(self, jobs: Sequence[FlowJob]) -> QuincyPlan:
        """Decide one round for ``jobs`` (oldest first): solve the flow, then accept
        its placements that pass the feasibility check (assumed in the placer's view,
        devices bound), evicting the flow's victims where the room is needed; the
        pods the check dropped get ``repair`` more solves on what is left."""
        return self._plan(jobs, 0)

    def _plan(self, jobs: Sequence[FlowJob], depth: int) -> QuincyPlan:
        if not any(len(j.pending) for j in jobs):
            return QuincyPlan([], None)
        t0 = time.perf_counter()
        # A round that can place nothing is not solved: without preemption when no
        # pending task fits any machine on what is free now; with it, when none fits
        # even on the room of the running tasks (the flow's kills are carried out only
        # for placements). The same (empty) plan as the solve's, without the network.
        if not self.config.preemption and not self.has_room(jobs):
            return QuincyPlan([], None, skipped=True, problem_seconds=time.perf_counter() - t0)
        prob, book = self.problem(jobs)
        t1 = time.perf_counter()
        if self.nothing_fits(prob):
            M, K, T, _ = prob.shape
            return QuincyPlan(
                [], None, machines=M, classes=K, tasks=T, skipped=True, problem_seconds=t1 - t0
            )
        rnd = solve(prob)
        # A gang the flow placed in part cannot run, and the room its members took
        # would be lost to the round: solve once more without those gangs.
        gangs = np.fromiter((j.gang for j in jobs), bool, len(jobs))
        part = self._partial_gangs(prob, rnd, gangs)
        if part.size:
            prob.job_max[part] = 0
            prob.job_min[part] = 0
            again = solve(prob)
            again.build_seconds += rnd.build_seconds
            again.solve_seconds += rnd.solve_seconds
            rnd = again
        t2 = time.perf_counter()
        # per pod: its network task's job and running machine, and the machine the
        # flow gives it (a task of supply > 1 hands its units out in pod order)
        pods, tj, run, node = self.pod_machines(prob, rnd, book["pods"])
        st = self.state
        placer = self.placer
        dev = self.devices
        gcol = self._gpu_col()
        creq = st.class_requests()
        pod_class = st.pod_classes()
        ccol = st.res_index.get("cpu", -1)
        # victims the flow chose, per node: running tasks routed off their machine
        killed_jobs_on: dict[int, list[int]] = {}
        rnd_kills = np.flatnonzero((run >= 0) & (node != run))
        for t in rnd_kills.tolist():
            killed_jobs_on.setdefault(int(run[t]), []).append(int(tj[t]))
        evicted: set[int] = set()
        legal = self._legal_victims(jobs)
        out: list[QuincyPlacement] = []
        infeasible = incomplete = 0
        placed_t = np.flatnonzero((run < 0) & (node >= 0))
        by_job: dict[int, list[int]] = {}
        for t in placed_t.tolist():
            by_job.setdefault(int(tj[t]), []).append(t)

        def request(p: int) -> tuple[int, int]:
            r = creq[pod_class[p]]
            return (
                int(r[gcol]) * self.gpu_scale if gcol >= 0 else 0,
                int(r[ccol]) if ccol >= 0 else 0,
            )

        def evict_job(v: int, sign: int) -> None:
            for p, n, devs in jobs[v].running:
                placer.assume_evicted(p, sign)
                if dev is not None:
                    g, c = request(p)
                    if sign > 0:
                        dev.release(n, g, c, devs)
                    else:
                        dev.bind(n, g, c, devs)

        for j in sorted(by_job):
            job = jobs[j]
            ts = by_job[j]
            if job.gang and len(ts) < len(job.pending):
                incomplete += 1
                continue
            bindings: list[tuple[int, int, tuple[int, ...]]] = []
            victims: list[int] = []
            for t in ts:
                p, n = int(pods[t]), int(node[t])
                g, c = request(p)
                mine: list[int] = []  # victims evicted for this task
                cands = killed_jobs_on.get(n, ())
                bits = placer.binding_reasons(p, n)
                while (bits or (dev is not None and g and not dev.fits(n, g))) and not (
                    bits & _NON_RESOURCE
                ):
                    v = next(
                        (v for v in cands if v not in evicted and v != j and legal(j, v)), None
                    )
                    if v is None:
                        break
                    evict_job(v, 1)
                    evicted.add(v)
                    mine.append(v)
                    bits = placer.binding_reasons(p, n)
                if bits or (dev is not None and g and not dev.fits(n, g)):
                    for v in mine:
                        evict_job(v, -1)
                        evicted.discard(v)
                    infeasible += 1
                    if job.gang:
                        break
                    continue
                devs: tuple[int, ...] = ()
                if dev is not None:
                    if g:
                        devs = tuple(dev.choose(n, g, c))
                    dev.bind(n, g, c, devs)
                placer.assume_binding(p, n)
                bindings.append((p, n, devs))
                victims.extend(mine)
            if job.gang and len(bindings) < len(ts):
                # all or nothing: give back what the gang took and the room it made
                for p, n, devs in bindings:
                    placer.assume_binding(p, n, -1)
                    if dev is not None:
                        g, c = request(p)
                        dev.release(n, g, c, devs)
                for v in victims:
                    evict_job(v, -1)
                    evicted.discard(v)
                continue
            if bindings:
                out.append(QuincyPlacement(j, bindings, victims))
        deferred = sum(1 for t in rnd_kills.tolist() if int(tj[t]) not in evicted)
        M, K, T, _ = prob.shape
        plan = QuincyPlan(
            out,
            rnd,
            infeasible=infeasible,
            gangs_incomplete=incomplete,
            kills_deferred=deferred,
            machines=M,
            classes=K,
            tasks=T,
            problem_seconds=t1 - t0,
            check_seconds=time.perf_counter() - t2,
        )
        if infeasible and depth < self.config.repair:
            self._repair(jobs, plan, depth)
        return plan

    def _repair(self, jobs: Sequence[FlowJob], plan: QuincyPlan, depth: int) -> None:
        """Solve again for the pods the check dropped, on the view the accepted
        placements left (slots counted afresh), without preemption; merge into
        ``plan``."""
        placed: dict[int, set[int]] = {}  # job -> its pods the round placed
        for pl in plan.placements:
            placed.setdefault(pl.job, set()).update(p for p, _, _ in pl.bindings)
        # A job the round placed nothing of has every pending pod left: the job itself,
        # its cached parts reused (a network without preemption and fairness reads
        # neither its running pods nor its kill clock), not rebuilt each round it waits.
        idx = [j for j, job in enumerate(jobs) if len(job.pending) and j not in placed]
        rest = [jobs[j] for j in idx]
        part: list[tuple[int, FlowJob]] = []  # jobs placed in part: what is left
        for j, mine in placed.items():
            job = jobs[j]
            left = [p for p in job.pending if p not in mine]
            if left and (not job.gang or len(left) == len(job.pending)):
                part.append(
                    (j, FlowJob(job.key, left, waited=job.waited, gang=job.gang, data=job.data))
                )
        if part:
            merged = sorted([*zip(idx, rest, strict=True), *part], key=lambda e: e[0])
            idx = [j for j, _ in merged]
            rest = [job for _, job in merged]
        if not rest:
            return
        sub = QuincyPolicy(
            self.state,
            self.placer,
            replace(self.config, preemption=False, fairness="none"),
            devices=self.devices,
            gpu_resource=self.gpu_resource,
            gpu_scale=self.gpu_scale,
        )
        sub._racks, sub._ok_cache = self._racks, self._ok_cache
        more = sub._plan(rest, depth + 1)
        for pl in more.placements:
            plan.placements.append(QuincyPlacement(idx[pl.job], pl.bindings, []))
        plan.repaired += sum(len(pl.bindings) for pl in more.placements)
        plan.infeasible = more.infeasible
        if more.round is not None and plan.round is not None:
            plan.round.solve_seconds += more.round.solve_seconds
            plan.round.build_seconds += more.round.build_seconds
        plan.problem_seconds += more.problem_seconds
        plan.check_seconds += more.check_seconds


class QuincyRounds:
    """Quincy's round as a live replica's pass (``esched replica --policy quincy``).

    :meth:`run` has :meth:`SchedulingPass.run`'s interface and result, so the replica
    proposes a round's placements to the commit service like any pass's (one
    proposal per job, the commit service validates each). A batch of work is one
    round: its pending pods and whole gangs become the round's jobs (a pod alone is a
    job of one task, a gang a job of its members, all or nothing), oldest first by
    the time this replica first saw them; :class:`QuincyPolicy` solves the flow and
    checks every placement on the placer's view (the view the pass shares, claims in
    flight assumed). What the round does not take, the one scheduling pass then
    judges on the view the round left (``scheduler``): it places what still fits
    (a round is work-conserving, as the simulator's repair solve), preempts by the
    bands, reports the rest unschedulable with kube's reasons, blocks gangs with
    members in flight, and handles what the flow does not model: pods placed by
    their labels (inter-pod rules), gangs with a minimum below their size or
    per-task minimums, gated pods and pods of other schedulers.

    Running pods are not in a live round (no flow preemption: eviction stays the
    pass's, by the bands), so fair shares split the cluster among the round's jobs.

    :param scheduler: the replica's scheduling pass (state, placer, devices, GPU
        resource and scale are read from it at each round).
    :param config: the flow's variant; ``preemption`` must be off.
    """

    def __init__(self, scheduler: SchedulingPass, config: QuincyConfig | None = None) -> None:
        config = config or QuincyConfig()
        if config.preemption:
            raise ValueError("live Quincy rounds do not preempt through the flow")
        self.scheduler = scheduler
        self.policy = QuincyPolicy(
            scheduler.state, scheduler.placer, config, devices=scheduler.devices
        )
        #: key (pod or gang) -> the caller's clock when this round mode first saw it
        self.first_seen: dict[str, float] = {}
        #: rounds, pods the flow placed, pods left to the pass, shape-check drops
        self.stats: Counter[str] = Counter()

    def run(
        self,
        targets: Iterable[Target],
        *,
        now: float = 0.0,
        in_flight: Mapping[str, str] | None = None,
        reserving: Collection[str] = (),
        out: PassResult | None = None,
    ) -> PassResult:
        """One round for ``targets``, then the one pass for what it left (see the
        class doc); the arguments are :meth:`SchedulingPass.run`'s."""
        if out is None:
            out = PassResult()
        sched = self.scheduler
        st = sched.state
        inflight = in_flight or {}
        jobs: list[FlowJob] = []
        job_target: list[Target] = []
        rest: list[Target] = []
        seen: dict[str, int] = {}  # job key -> index among the targets taken
        again: list[tuple[Target, str]] = []  # more targets of a job already taken
        for t in targets:
            got = self._job(t, inflight, seen)
            if isinstance(got, str):
                again.append((t, got))
                continue
            if got is None:
                rest.append(t)
                continue
            key, pods, gang = got
            seen[key] = len(jobs)
            first = self.first_seen.setdefault(key, now)
            jobs.append(FlowJob(key, pods, waited=now - first, gang=gang))
            job_target.append(t)
        placed: set[str] = set()
        if jobs:
            order = sorted(range(len(jobs)), key=lambda j: (-jobs[j].waited, job_target[j][2]))
            jobs = [jobs[j] for j in order]
            job_target = [job_target[j] for j in order]
            pol = self.policy
            pol.devices = sched.devices
            pol.gpu_resource, pol.gpu_scale = sched.gpu_resource, sched.gpu_scale
            plan = pol.plan(jobs)
            self.stats["rounds"] += 1
            self.stats["infeasible"] += plan.infeasible
            names = st.node_names
            keys = st.pod_keys
            for pl in plan.placements:
                job = jobs[pl.job]
                placed.add(job.key)
                self.first_seen.pop(job.key, None)
                self.stats["placed"] += len(pl.bindings)
                out.placements.append(
                    Placement(
                        job_target[pl.job],
                        job.key if job.gang else None,
                        [(str(keys[p]), str(names[n]), devs) for p, n, devs in pl.bindings],
                    )
                )
        left = [job_target[j] for j in range(len(jobs)) if jobs[j].key not in placed]
        # Another target of a job the round took: done if the round placed the job
        # (its pods are claimed now), else the pass sees the job once more.
        for t, key in again:
            if key in placed:
                out.skipped += 1
            else:
                rest.append(t)
        self.stats["to_pass"] += len(left) + len(rest)
        if left or rest:
            sched.run(left + rest, now=now, in_flight=inflight, reserving=reserving, out=out)
        # Keys seen but gone (placed by the pass, deleted) are forgotten.
        if len(self.first_seen) > 4 * max(len(left) + len(rest), 1024):
            pending = {k for k in self.first_seen if self._still_pending(k)}
            self.first_seen = {k: v for k, v in self.first_seen.items() if k in pending}
        return out

    def _still_pending(self, key: str) -> bool:
        st = self.scheduler.state
        idx = st.pod_index.get(key)
        if idx is not None:
            return bool(st.pod_phase_np[idx] == PHASE_PENDING)
        return key in st.gang_index and bool(st.gang_members(key, "Pending"))

    def _job(
        self, t: Target, inflight: Mapping[str, str], seen: Mapping[str, int]
    ) -> tuple[str, list[int], bool] | str | None:
        """(key, pending pod slots, gang) of the round's job for target ``t``; its key
        alone when the round already has that job; None when the one pass is to
        decide it (see the class doc)."""
        sched = self.scheduler
        st = sched.state
        kind, key = t[0], t[1]
        if kind == "pod":
            idx = st.pod_index.get(key)
            if idx is None or st.pod_phase_np[idx] != PHASE_PENDING or key in inflight:
                return None
            if st.gated and key in st.gated:
                return None
            named = st.scheduler_of
            if named and key in named and named[key] not in sched.scheduler_names:
                return None
            g = int(st.pod_gang_np[idx])
            if g < 0:
                if placed_by_key(st, int(st.pod_class_np[idx])):
                    return None
                if key in seen:
                    return key
                return key, [int(idx)], False
            key = str(st.gang_keys[g])
        if key in seen:
            return key
        g_idx = st.gang_index.get(key)
        if g_idx is None:
            return None
        members = st.gang_members(key, "Pending")
        if not members or st.gang_members(key, "Running"):
            return None
        if st.gang_meta[g_idx].get("minTaskMember") or st.gang_shortfall(g_idx) != len(members):
            return None
        slots: list[int] = []
        for m in members:
            idx = st.pod_index.get(m)
            if (
                idx is None
                or m in inflight
                or (st.gated and m in st.gated)
                or (st.scheduler_of and m in st.scheduler_of)
                or placed_by_key(st, int(st.pod_class_np[idx]))
            ):
                return None
            slots.append(int(idx))
        return key, slots, True
