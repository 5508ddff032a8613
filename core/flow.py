"""Quincy's min-cost-flow placement: a whole round decided at once.

Isard et al., "Quincy: Fair Scheduling for Distributed Computing Clusters" (SOSP '09),
section 4: the round's tasks and the cluster become one flow network whose minimum
cost flow is the placement. Nodes (supply in brackets):

- ``W_t`` one per task (1): pending tasks and, with preemption, running ones;
- ``U_j`` one per job (``F_j - N_j``): its tasks left unscheduled;
- ``X_k`` the cluster aggregator, ``R_lk`` one per rack, ``C_mk`` one per machine,
  here split by *shape class* k (see below), then ``C_m`` per machine;
- ``S`` the sink (``-sum F_j``: every unit of supply ends there).

Arcs (capacity, cost): ``W_t -> U_j`` (1, the task's unscheduled cost, growing with
its wait), ``W_t -> X_k`` (1, the worst-case data cost of running anywhere), data
locality preferences ``W_t -> R_lk`` and ``W_t -> C_mk`` (1, their data cost),
``X_k -> R_lk`` (the rack's slots, 0), ``R_lk -> C_mk`` (the machine's slots, a packing
cost), ``C_mk -> C_m`` (slots, 0), ``C_m -> S`` (the machine's task cap, 0), and
``U_j -> S`` (``F_j - E_j``, 0) so that ``E_j <= scheduled <= F_j``. A running task
has one arc to its own machine (cost 0: kept) and one to ``U_j`` (its unscheduled
cost plus a kill cost growing with the time it has run); without preemption running
tasks are not in the network at all and only their resources are subtracted.

Two changes to the paper's network, each for a reason:

- **Multi-dimensional resources.** Quincy had one task per machine. Here a machine's
  room is counted per shape class of the round (the distinct request vectors among
  its tasks): ``slots[m, k]`` = how many tasks of class k fit on machine m alone
  (each resource ``floor(free / request)``, GPU devices exactly), and
  ``C_m -> S`` is capped at ``max_k slots[m, k]``. A single-commodity flow cannot
  express "8 GPUs = eight 1-GPU tasks *or* one 8-GPU task": a round that mixes
  shapes on one machine can overcommit it. The caller checks every placement with
  the one feasibility path (:meth:`Placer.binding_reasons`, device fit) and drops the
  ones that no longer fit (they wait for the next round); :class:`FlowRound` counts
  them. Rounds with one shape per machine are exact.
- **Soft minimum.** ``E_j`` is kept by a second ``U_j -> S`` arc of capacity ``E_j``
  and a large cost (:attr:`FlowCosts.unfair`), so a round whose shapes cannot reach a
  job's minimum still has a flow (Quincy's identical slots always could).

The solver is OR-Tools' ``SimpleMinCostFlow`` (cost scaling); it is an optional
dependency (``pip install 'esched[flow]'``), imported when a round is solved.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "FlowCosts",
    "FlowProblem",
    "FlowRound",
    "FlowSolverMissing",
    "fair_shares",
    "require_solver",
    "solve",
]

#: Cost per task a job is short of its minimum E_j: above any sum of other costs.
UNFAIR = 1_000_000_000

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


class FlowSolverMissing(RuntimeError):
    """OR-Tools is not installed (the flow policy's optional dependency)."""


def require_solver() -> None:
    """Raise :class:`FlowSolverMissing` unless OR-Tools can be imported."""
    _solver()


def _solver() -> Any:
    try:
        from ortools.graph.python import min_cost_flow
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise FlowSolverMissing(
            "the Quincy flow policy needs OR-Tools: pip install 'esched[flow]' "
            "(or pip install ortools)"
        ) from exc
    return min_cost_flow.SimpleMinCostFlow()


@dataclass(frozen=True, slots=True)
class FlowCosts:
    """The network's integer costs (Quincy's ω, γ, ρ, α, θ; the solver needs integers).

    Scheduling must always beat waiting (``unscheduled`` > ``anywhere`` + ``pack``)
    so a round fills what it can; data costs are per data unit the trace gives.
    """

    #: base cost of leaving a task unscheduled this round
    unscheduled: int = 1_000
    #: Quincy's ω: added per second a task has waited
    wait_per_second: int = 1
    #: cost of running anywhere when the task has no data (the X arc's floor)
    anywhere: int = 1
    #: per data unit read across the core switch (ψ) and inside the rack (ξ)
    transfer_core: int = 2
    transfer_rack: int = 1
    #: the packing term on R -> C: an empty machine costs this much more than a full
    #: one, so equal data costs prefer fuller machines (best fit, linearised per round)
    pack: int = 10
    #: base cost of killing a running task, and per second it has run (Quincy's θ)
    kill: int = 1_000
    kill_per_second: int = 1
    #: cost per task below a job's minimum E_j (the soft minimum: far above all else)
    unfair: int = UNFAIR
    #: time-derived costs are capped here (keeps the solver's cost range safe)
    cap: int = 100_000_000

    def waiting(self, seconds: npt.ArrayLike) -> I64:
        """Unscheduled cost after ``seconds`` of waiting."""
        s = np.maximum(np.asarray(seconds, dtype=np.float64), 0.0)
        return self.unscheduled + np.minimum(s * self.wait_per_second, self.cap).astype(np.int64)

    def killing(self, seconds: npt.ArrayLike) -> I64:
        """Kill cost of a task that has run ``seconds``."""
        s = np.maximum(np.asarray(seconds, dtype=np.float64), 0.0)
        return self.kill + np.minimum(s * self.kill_per_second, self.cap).astype(np.int64)


def fair_shares(dominant: npt.ArrayLike, tasks: npt.ArrayLike, order: npt.ArrayLike) -> I64:
    """Quincy's allocation ``A_j`` in tasks, on the dominant resource.

    ``dominant[j]``: one task's share of the cluster in its dominant resource (Quincy:
    ``1/M``, one machine); ``tasks[j]``: ``N_j``, running plus waiting. Water-filling
    (section 3.2): every job gets an equal share of the cluster, capped at its demand,
    the rest shared again among the others; a job's share is then rounded down to
    whole tasks and the capacity left by rounding goes one task at a time to the jobs
    first in ``order`` (the jobs oldest first, each once), so ``sum A_j`` is as close
    to the cluster as whole tasks allow and an oversubscribed cluster serves its
    oldest jobs.
    """
    dom = np.asarray(dominant, dtype=np.float64)
    n = np.asarray(tasks, dtype=np.int64)
    J = dom.shape[0]
    out = np.zeros(J, dtype=np.int64)
    if J == 0:
        return out
    demand = dom * n
    total = float(demand.sum())
    if total <= 1.0:
        return n.copy()
    # Water level lam: sum(min(demand, lam)) = 1.
    d = np.sort(demand)
    below = np.concatenate(([0.0], np.cumsum(d)[:-1]))
    # with lam = d[i]: used = below[i] + d[i] * (J - i)
    used = below + d * (J - np.arange(J))
    i = int(np.searchsorted(used, 1.0))
    if i >= J:
        # the cumulative sums fall short of 1 where ``total`` did not (rounding):
        # every demand fits
        lam = float(d[-1])
    else:
        lam = d[i - 1] if i > 0 and used[i - 1] >= 1.0 else (1.0 - below[i]) / (J - i)
    share = np.minimum(demand, lam)
    out = np.minimum(np.floor(share / dom + 1e-9).astype(np.int64), n)
    left = 1.0 - float((out * dom).sum())
    if left > 1e-12:
        # One task more to each job in order while the capacity lasts; only jobs below
        # their demand can take one (each job is visited once), walked as Python
        # floats (the same arithmetic as numpy's float64, without its per-element
        # boxing: a backlog of thousands of jobs is walked every round).
        o = np.asarray(order, dtype=np.int64)
        o = o[out[o] < n[o]]
        for j, d in zip(o.tolist(), dom[o].tolist(), strict=True):
            if d <= left + 1e-12:
                out[j] += 1
                left -= d
                if left <= 1e-12:
                    break
    return out


@dataclass(slots=True)
class FlowProblem:
    """One round's network as typed arrays (indices are 0-based within the round).

    Machines ``m < M`` in racks ``machine_rack[m] < n_racks``; shape classes
    ``k < K``; tasks ``t < T`` of jobs ``j < J``.
    """

    machine_rack: I32  # [M]
    n_racks: int
    slots: I32  # [M, K] tasks of class k that fit on machine m alone (0: none)
    machine_cap: I32  # [M] tasks machine m takes in all
    machine_cost: I64  # [M, K] cost on R_lk -> C_mk (packing)
    task_job: I32  # [T]
    task_class: I32  # [T]
    task_wait_cost: I64  # [T] cost of W_t -> U_j
    task_any_cost: I64  # [T] cost of W_t -> X_k (pending tasks)
    task_running_on: I32  # [T] machine of a running task, -1 pending
    task_kill_cost: I64  # [T] added to a running task's W_t -> U_j
    job_min: I64  # [J] E_j over the job's tasks in the network
    job_max: I64  # [J] F_j
    unfair_cost: int = UNFAIR
    # data-locality preferences (optional): (task, machine, cost) and (task, rack, cost)
    pref_task: I32 = field(default_factory=lambda: np.zeros(0, np.int32))
    pref_machine: I32 = field(default_factory=lambda: np.zeros(0, np.int32))
    pref_cost: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    rack_pref_task: I32 = field(default_factory=lambda: np.zeros(0, np.int32))
    rack_pref_rack: I32 = field(default_factory=lambda: np.zeros(0, np.int32))
    rack_pref_cost: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    #: units per task node (identical tasks of a job as one node: an equivalent,
    #: smaller network); None: one each, as in the paper. Running tasks have 1.
    task_supply: I64 | None = None

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(machines, classes, tasks, jobs)."""
        M, K = self.slots.shape
        return M, K, self.task_job.shape[0], self.job_min.shape[0]


@dataclass(slots=True)
class FlowRound:
    """The solved round."""

    #: per task: the machine it runs on after the round, -1 unscheduled (a running
    #: task with -1 is killed); for a task of supply > 1, the first of its machines
    task_node: I32
    #: every (task, machine, units) of the flow, by task then machine
    assign_task: I32
    assign_machine: I32
    assign_count: I64
    cost: int
    nodes: int
    arcs: int
    build_seconds: float
    solve_seconds: float
    #: tasks the flow placed below their job's minimum (soft E_j paid)
    below_min: int = 0

    def kills(self, problem: FlowProblem) -> npt.NDArray[np.intp]:
        """Indices of running tasks the round moves off their machine (evictions)."""
        run = problem.task_running_on
        return np.flatnonzero((run >= 0) & (self.task_node != run))


def solve(p: FlowProblem) -> FlowRound:
    """Build the network of ``p``, solve it with OR-Tools, and read each task's machine."""
    t0 = time.perf_counter()
    M, K, T, J = p.shape
    L = p.n_racks
    slots = np.asarray(p.slots, dtype=np.int64)
    rack = np.asarray(p.machine_rack, dtype=np.int64)
    tj = np.asarray(p.task_job, dtype=np.int64)
    tk = np.asarray(p.task_class, dtype=np.int64)
    run = np.asarray(p.task_running_on, dtype=np.int64)
    # node ids
    S = 0
    W0 = 1
    U0 = W0 + T
    X0 = U0 + J
    R0 = X0 + K
    CK0 = R0 + L * K
    C0 = CK0 + M * K
    n_nodes = C0 + M

    def ck(m: Any, k: Any) -> Any:
        return CK0 + m * K + k

    tails: list[np.ndarray] = []
    heads: list[np.ndarray] = []
    caps: list[np.ndarray] = []
    costs: list[np.ndarray] = []

    def col(v: Any, n: int) -> np.ndarray:
        # a scalar as a column of n (np.full: a tenth of broadcast_to's call cost)
        if isinstance(v, (int, np.integer)):
            return np.full(n, v, dtype=np.int64)
        return np.asarray(v, dtype=np.int64)

    def arcs(t: Any, h: Any, c: Any, w: Any) -> int:
        t = np.asarray(t, dtype=np.int64)
        n = t.shape[0]
        tails.append(t)
        heads.append(col(h, n))
        caps.append(col(c, n))
        costs.append(col(w, n))
        return n

    tasks = np.arange(T, dtype=np.int64)
    sup = (
        np.ones(T, dtype=np.int64)
        if p.task_supply is None
        else np.asarray(p.task_supply, dtype=np.int64)
    )
    pend = np.flatnonzero(run < 0)
    running = np.flatnonzero(run >= 0)
    # W -> U (every task; a running task pays its kill cost on top)
    wait_cost = p.task_wait_cost + np.where(run >= 0, p.task_kill_cost, 0)
    n_u = arcs(W0 + tasks, U0 + tj, sup, wait_cost)
    # W -> X (pending tasks)
    n_x = arcs(W0 + pend, X0 + tk[pend], sup[pend], np.asarray(p.task_any_cost)[pend])
    # W -> C_mk: data-locality preferences, where the class fits the machine at all
    pt = np.asarray(p.pref_task, dtype=np.int64)
    pm = np.asarray(p.pref_machine, dtype=np.int64)
    pc = np.asarray(p.pref_cost, dtype=np.int64)
    ok = (run[pt] < 0) & (slots[pm, tk[pt]] > 0) if pt.size else np.zeros(0, bool)
    pt, pm, pc = pt[ok], pm[ok], pc[ok]
    n_pm = arcs(W0 + pt, ck(pm, tk[pt]), sup[pt], pc)
    # W -> R_lk: rack preferences
    rt = np.asarray(p.rack_pref_task, dtype=np.int64)
    rl = np.asarray(p.rack_pref_rack, dtype=np.int64)
    rc = np.asarray(p.rack_pref_cost, dtype=np.int64)
    ok = run[rt] < 0 if rt.size else np.zeros(0, bool)
    rt, rl, rc = rt[ok], rl[ok], rc[ok]
    n_pr = arcs(W0 + rt, R0 + rl * K + tk[rt], sup[rt], rc)
    # W -> C_mk for running tasks: kept where they are, at no cost
    n_keep = arcs(W0 + running, ck(run[running], tk[running]), 1, 0)
    # X_k -> R_lk: the rack's slots of class k
    rack_slots = np.zeros((L, K), dtype=np.int64)
    np.add.at(rack_slots, rack, slots)
    lk = np.flatnonzero(rack_slots.reshape(-1) > 0)
    n_xr = arcs(X0 + lk % K, R0 + lk, rack_slots.reshape(-1)[lk], 0)
    # R_lk -> C_mk and C_mk -> C_m where class k fits machine m
    mk = np.flatnonzero(slots.reshape(-1) > 0)
    mm, kk = mk // K, mk % K
    sl = slots.reshape(-1)[mk]
    n_rc = arcs(R0 + rack[mm] * K + kk, CK0 + mk, sl, np.asarray(p.machine_cost)[mm, kk])
    arcs(CK0 + mk, C0 + mm, sl, 0)
    # C_m -> S
    cap = np.asarray(p.machine_cap, dtype=np.int64)
    has = np.flatnonzero(cap > 0)
    arcs(C0 + has, S, cap[has], 0)
    # U_j -> S: F_j - E_j free, then E_j more at the unfairness cost (soft minimum)
    jobs = np.arange(J, dtype=np.int64)
    fmax = np.asarray(p.job_max, dtype=np.int64)
    emin = np.minimum(np.asarray(p.job_min, dtype=np.int64), fmax)
    arcs(U0 + jobs, S, fmax - emin, 0)
    arcs(U0 + jobs, S, emin, p.unfair_cost)

    supply = np.zeros(n_nodes, dtype=np.int64)
    supply[W0 : W0 + T] = sup
    n_of = np.bincount(tj, weights=sup, minlength=J).astype(np.int64)
    supply[U0 : U0 + J] = fmax - n_of
    supply[S] = -int(supply.sum())

    mcf = _solver()
    tail = np.concatenate(tails)
    head = np.concatenate(heads)
    capa = np.concatenate(caps)
    cost = np.concatenate(costs)
    mcf.add_arcs_with_capacity_and_unit_cost(tail, head, capa, cost)
    mcf.set_nodes_supplies(np.arange(n_nodes, dtype=np.int64), supply)
    t1 = time.perf_counter()
    status = mcf.solve()
    t2 = time.perf_counter()
    if status != mcf.OPTIMAL:
        raise RuntimeError(f"min-cost flow not solved: status {status}")
    flow = mcf.flows(np.arange(tail.shape[0], dtype=np.int64))

    # Read each task's machine. Arc blocks in the order they were added.
    o = n_u  # W -> U carries the rest: a task on none of the arcs below is unscheduled
    f_x = flow[o : o + n_x]
    o += n_x
    f_pm = flow[o : o + n_pm]
    o += n_pm
    f_pr = flow[o : o + n_pr]
    o += n_pr
    f_keep = flow[o : o + n_keep]
    o += n_keep
    f_xr = flow[o : o + n_xr]
    o += n_xr
    f_rc = flow[o : o + n_rc]

    # Units of flow per (task, machine). Tasks through a rack or the cluster
    # aggregator: the machine-level flow of each (rack, class) is a pool of slots;
    # the tasks routed to that rack directly take from it first, then the
    # aggregator's share of it (tasks of one class are interchangeable there, so any
    # decomposition is optimal).
    unit_t: list[np.ndarray] = [running[f_keep > 0], np.repeat(pt, f_pm)]
    unit_m: list[np.ndarray] = [run[running[f_keep > 0]], np.repeat(pm, f_pm)]
    pool_m = np.repeat(mm, f_rc)  # machine of each unit of R -> C flow
    pool_key = np.repeat(rack[mm] * K + kk, f_rc)
    order = np.argsort(pool_key, kind="stable")
    pool_m, pool_key = pool_m[order], pool_key[order]
    starts = np.searchsorted(pool_key, np.arange(L * K))
    taken = np.zeros(L * K, dtype=np.int64)
    for a in np.flatnonzero(f_pr > 0).tolist():
        key, c = int(rl[a] * K + tk[rt[a]]), int(f_pr[a])
        s0 = starts[key] + taken[key]
        unit_t.append(np.full(c, rt[a]))
        unit_m.append(pool_m[s0 : s0 + c])
        taken[key] += c
    via_x = pend[f_x > 0]
    x_units = f_x[f_x > 0]
    x_class = tk[via_x]
    into = f_xr  # X_k -> R_lk flow, per lk
    for k in np.unique(x_class).tolist():
        sel = x_class == k
        unit_t.append(np.repeat(via_x[sel], x_units[sel]))
        for a in np.flatnonzero((lk % K == k) & (into > 0)).tolist():
            key, c = int(lk[a]), int(into[a])
            s0 = starts[key] + taken[key]
            unit_m.append(pool_m[s0 : s0 + c])
            taken[key] += c
    ut = np.concatenate(unit_t).astype(np.int64)
    um = np.concatenate(unit_m).astype(np.int64)
    pairs, counts = np.unique(ut * max(M, 1) + um, return_counts=True)
    a_task, a_machine = pairs // max(M, 1), pairs % max(M, 1)
    out = np.full(T, -1, dtype=np.int32)
    out[a_task[::-1]] = a_machine[::-1]  # the first machine of each task
    # The last J arcs are the soft minimum's: their flow is what E_j was short of.
    below = int(flow[tail.shape[0] - J :].sum()) if J else 0
    return FlowRound(
        task_node=out,
        assign_task=a_task.astype(np.int32),
        assign_machine=a_machine.astype(np.int32),
        assign_count=counts.astype(np.int64),
        cost=int(mcf.optimal_cost()),
        nodes=n_nodes,
        arcs=int(tail.shape[0]),
        build_seconds=t1 - t0,
        solve_seconds=t2 - t1,
        below_min=below,
    )
