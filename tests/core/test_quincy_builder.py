"""The round's problem builder, optimized (per-job caches, one pass over the backlog,
an array read-back), against the builder it replaced: on every round of simulated runs
the two give the same network, array for array, and the same machine per pod.

``reference_problem`` and ``reference_pod_machines`` are the replaced code, kept here
verbatim (core/quincy.py at commit dc436ae) as the differential oracle.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from esched.core import load_profile
from esched.core.flow import FlowProblem, FlowRound, fair_shares, solve
from esched.core.quincy import FlowJob, QuincyConfig, QuincyPolicy
from esched.services.sim import quincy as sim_quincy
from esched.services.sim.quincy import QuincySimulator
from esched.services.sim.traces import GIB, Job, synthetic

pytest.importorskip("ortools")

BEST_FIT = load_profile(
    Path(__file__).resolve().parents[2] / "deploy" / "profiles" / "best-fit.yaml"
)
_NOT_DOMINANT = ("pods",)


def reference_problem(self: QuincyPolicy, jobs: Sequence[FlowJob]) -> tuple[FlowProblem, dict]:
    """``QuincyPolicy.problem`` as it was before the per-job caches (commit dc436ae),
    verbatim but for the names it reached through ``self``."""
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
    gcol = self.state.res_index.get(self.gpu_resource, -1)
    dev = self.devices if gcol >= 0 else None

    # fairness: A_j on each job's dominant share per task
    total = alloc[alive].sum(axis=0).astype(np.float64)
    dom_cols = [c for c in range(st.n_res) if st.res_names[c] not in _NOT_DOMINANT]
    first = [job.pending[0] if len(job.pending) else job.running[0][0] for job in jobs]
    req = creq[pod_class[np.asarray(first, dtype=np.int64)]][:, dom_cols].astype(np.float64)
    tot = total[dom_cols]
    with np.errstate(divide="ignore", invalid="ignore"):
        sh = np.where(tot > 0, req / np.where(tot > 0, tot, 1.0), 0.0)
    dom = np.maximum(sh.max(axis=1) if sh.shape[1] else 0.0, 1e-12)
    n_pend = np.array([len(job.pending) for job in jobs], dtype=np.int64)
    n_run = np.array([len(job.running) for job in jobs], dtype=np.int64)
    n_all = n_pend + n_run
    gang = np.array([job.gang for job in jobs], dtype=bool)
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
    g_pods: list[list[int]] = []
    t_job: list[int] = []
    t_run: list[int] = []
    job_tasks: list[list[int]] = []  # per job, its pending network tasks
    # A job with F_j = 0 places nothing this round: its pending tasks could only
    # flow to U_j, so they are left out (the same optimum, a network the size of
    # what may run rather than of the backlog; its running tasks stay, to be killed).
    may_run = fmax > 0
    for j, job in enumerate(jobs):
        mine: list[int] = []
        if len(job.pending) and may_run[j]:
            by_class: dict[int, list[int]] = {}
            for p in job.pending:
                by_class.setdefault(int(pod_class[p]), []).append(int(p))
            for ps in by_class.values():
                mine.append(len(g_pods))
                g_pods.append(ps)
                t_job.append(j)
                t_run.append(-1)
        job_tasks.append(mine)
        if preempt:
            for p, n, _ in job.running:
                g_pods.append([int(p)])
                t_job.append(j)
                t_run.append(n)
    pods = np.asarray([ps[0] for ps in g_pods], dtype=np.int64)  # one pod per task
    sup = np.asarray([len(ps) for ps in g_pods], dtype=np.int64)
    tj = np.asarray(t_job, dtype=np.int32)
    run = np.asarray(t_run, dtype=np.int32)
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
        s = np.full(M, 1 << 20, dtype=np.int64)  # with the running tasks' room
        s0 = s.copy()  # on what is free now
        for c in cols:
            if dev is not None and c == gcol:
                g = int(req[c]) * self.gpu_scale
                if g >= 1000:
                    s = np.minimum(s, (idle0 + freed_gpus) // (g // 1000))
                    s0 = np.minimum(s0, idle0 // (g // 1000))
                else:
                    shares = (dfree // g).sum(axis=1)
                    s = np.minimum(s, shares + freed_gpus * (1000 // g))
                    s0 = np.minimum(s0, shares)
            else:
                s = np.minimum(s, np.maximum(free[:, c], 0) // req[c])
                s0 = np.minimum(s0, np.maximum(free_now[:, c], 0) // req[c])
        rep = int(pods[np.flatnonzero(tk == k)[0]])  # a pod of the class
        ok = alive & self.constraints_ok(int(classes[k]), rep)
        slots[:, k] = np.where(ok, s, 0)
        cap = np.maximum(cap, np.where(ok, s0, 0))
        used_cols = [c for c in cols if st.res_names[c] not in _NOT_DOMINANT] or cols
        mcost[:, k] = np.round(costs.pack * free_share[:, used_cols].mean(axis=1)).astype(np.int64)
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
        ts = job_tasks[j]
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
    return prob, {"pods": g_pods, "classes": classes}


def reference_pod_machines(
    prob: FlowProblem, rnd: FlowRound, g_pods: list[list[int]]
) -> tuple[list[int], list[int], list[int], list[int]]:
    """The per-pod read-back of ``QuincyPolicy._plan`` before it was vectorized."""
    pods_l: list[int] = []
    tj_l: list[int] = []
    run_l: list[int] = []
    node_l: list[int] = []
    units: dict[int, list[int]] = {}
    for t, m, c in zip(
        rnd.assign_task.tolist(),
        rnd.assign_machine.tolist(),
        rnd.assign_count.tolist(),
        strict=True,
    ):
        units.setdefault(t, []).extend([m] * c)
    for t, ps in enumerate(g_pods):
        got = units.get(t, [])
        for i, p in enumerate(ps):
            pods_l.append(p)
            tj_l.append(int(prob.task_job[t]))
            run_l.append(int(prob.task_running_on[t]))
            node_l.append(got[i] if i < len(got) else -1)
    return pods_l, tj_l, run_l, node_l


FIELDS = (
    "machine_rack",
    "slots",
    "machine_cap",
    "machine_cost",
    "task_job",
    "task_class",
    "task_wait_cost",
    "task_any_cost",
    "task_running_on",
    "task_kill_cost",
    "job_min",
    "job_max",
    "pref_task",
    "pref_machine",
    "pref_cost",
    "rack_pref_task",
    "rack_pref_rack",
    "rack_pref_cost",
    "task_supply",
)


class Checked(QuincyPolicy):
    """The policy, checking every round's problem and read-back against the oracle."""

    rounds: ClassVar[Counter[str]] = Counter()
    #: rounds each job was in (a job waiting through rounds reuses its cached parts)
    seen_jobs: ClassVar[Counter[str]] = Counter()

    def problem(self, jobs: Sequence[FlowJob]) -> tuple[FlowProblem, dict]:
        prob, book = super().problem(jobs)
        # the oracle on fresh jobs: nothing cached
        fresh = [
            FlowJob(j.key, list(j.pending), list(j.running), j.waited, j.ran, j.gang, j.data)
            for j in jobs
        ]
        want, want_book = reference_problem(self, fresh)
        for name in FIELDS:
            np.testing.assert_array_equal(getattr(prob, name), getattr(want, name), err_msg=name)
        assert prob.n_racks == want.n_racks and prob.unfair_cost == want.unfair_cost
        assert book["pods"].tolist() == [p for ps in want_book["pods"] for p in ps]
        np.testing.assert_array_equal(book["classes"], want_book["classes"])
        got_rnd, want_rnd = solve(prob), solve(want)
        assert got_rnd.cost == want_rnd.cost
        np.testing.assert_array_equal(got_rnd.task_node, want_rnd.task_node)
        new = self.pod_machines(prob, got_rnd, book["pods"])
        old = reference_pod_machines(want, want_rnd, want_book["pods"])
        assert [a.tolist() for a in new] == list(old)
        c = Checked.rounds
        c["rounds"] += 1
        Checked.seen_jobs.update(j.key for j in jobs)
        c["tasks"] += prob.shape[2]
        c["running_tasks"] += int((prob.task_running_on >= 0).sum())
        c["placed_pods"] += int((new[3] >= 0).sum())
        c["grouped_tasks"] += int((np.asarray(prob.task_supply) > 1).sum())
        return prob, book


#: Quincy's four variants: greedy flow, fair, fair with preemption (any victim, by bands).
EVERY_VARIANT = pytest.mark.parametrize(
    "config",
    [
        QuincyConfig(fairness="none"),
        QuincyConfig(),
        QuincyConfig(preemption=True, victims="any"),
        QuincyConfig(preemption=True),
    ],
    ids=["Q", "QF", "QFP", "QFP-bands"],
)


def mixed_trace():
    """The synthetic GPU workload (shares, whole GPUs, CPU only) on few nodes, over
    capacity, with gangs of 2-4 pods and jobs of the same shape mixed in."""
    tr = synthetic(nodes=6, jobs=120, seed=5, load=1.6)
    extra = [Job(f"gang-{i}", 600.0 * i, 1800.0, 2000, 4 * GIB, 1000, 2 + i % 3) for i in range(12)]
    tr.jobs = sorted(tr.jobs + extra, key=lambda j: j.arrival)
    return tr


@EVERY_VARIANT
def test_optimized_builder_gives_the_replaced_builders_network_and_placements(config, monkeypatch):
    monkeypatch.setattr(sim_quincy, "QuincyPolicy", Checked)
    Checked.rounds = Counter()
    Checked.seen_jobs = Counter()
    tr = mixed_trace()
    r = QuincySimulator(tr, BEST_FIT, 1, preemption=config.preemption, quincy=config).run()
    seen = Checked.rounds
    # every round of the run went through the check, with real work in it: waiting
    # backlogs (cached jobs seen again), gangs grouped into one task, placements
    assert seen["rounds"] >= r.placer_stats["flow"]["solved"] > 20
    assert seen["placed_pods"] >= r.placements - r.placer_stats["flow"]["repaired"] > 0
    assert seen["grouped_tasks"] > 0
    assert Checked.seen_jobs.most_common(1)[0][1] >= 5
    if config.preemption:
        assert seen["running_tasks"] > 0
    assert r.never_started == 0


class NeverSkips(QuincyPolicy):
    """The policy solving every round, as before rounds that place nothing were
    skipped: the oracle for the skip."""

    def has_room(self, jobs: Sequence[FlowJob]) -> bool:
        return True

    @staticmethod
    def nothing_fits(prob: FlowProblem) -> bool:
        return False


@EVERY_VARIANT
@pytest.mark.parametrize("round_seconds", [0.0, 300.0])
def test_skipped_rounds_leave_the_run_unchanged(config, round_seconds, monkeypatch):
    """A round where no pending task fits anywhere is not solved: the run (every
    event of its log, every start and finish) is the one that solves every round."""

    def run(policy: type[QuincyPolicy]):
        monkeypatch.setattr(sim_quincy, "QuincyPolicy", policy)
        sim = QuincySimulator(
            mixed_trace(),
            BEST_FIT,
            1,
            preemption=config.preemption,
            quincy=config,
            round_seconds=round_seconds,
            record=True,
        )
        return sim.run()

    every = run(NeverSkips)
    skips = run(QuincyPolicy)
    assert every.events == skips.events
    np.testing.assert_array_equal(every.start, skips.start)
    np.testing.assert_array_equal(every.finish, skips.finish)
    got, want = skips.placer_stats["flow"], every.placer_stats["flow"]
    assert got["rounds"] == want["rounds"]
    assert want["skipped"] == 0
    # the skip is real: without preemption most rounds of an overfull cluster place
    # nothing; with it, the running tasks' room almost always fits something
    assert got["solved"] + got["skipped"] == want["solved"]
    if not config.preemption:
        assert got["skipped"] > 0.2 * got["rounds"]


@EVERY_VARIANT
def test_jobs_cached_parts_leave_the_run_unchanged(config, monkeypatch):
    """A job's network parts are built once and reused by every round and repair solve
    that sees it (:meth:`FlowJob.tasks`), not rebuilt each time: the run is the one
    that rebuilds them at each call, event for event, and a waiting job's parts are
    built once."""
    built: Counter[str] = Counter()
    last: dict[int, object] = {}  # id(job) -> the parts it last gave (kept alive)
    tasks = FlowJob.tasks

    def counted(self: FlowJob, pod_class: np.ndarray):
        got = tasks(self, pod_class)
        if last.get(id(self)) is not got:  # new parts: built by this call
            built[self.key] += 1
            last[id(self)] = got
        return got

    def rebuilt(self: FlowJob, pod_class: np.ndarray):
        return counted(replace(self), pod_class)  # a copy has no parts cached

    def run(method):
        built.clear()
        monkeypatch.setattr(FlowJob, "tasks", method)
        sim = QuincySimulator(
            mixed_trace(), BEST_FIT, 1, preemption=config.preemption, quincy=config, record=True
        )
        return sim.run(), Counter(built)

    (want, rebuilds), (got, reused) = run(rebuilt), run(counted)
    assert got.events == want.events
    np.testing.assert_array_equal(got.start, want.start)
    np.testing.assert_array_equal(got.finish, want.finish)
    counters = [
        {k: v for k, v in r.placer_stats["flow"].items() if not k.endswith("seconds")}
        for r in (got, want)
    ]
    assert counters[0] == counters[1]
    assert sum(rebuilds.values()) > 2 * sum(reused.values())
    if config.preemption:
        assert counters[0]["repaired"] > 0  # repair solves ran, on the cached parts
    if got.evicted_jobs == 0:
        # a job's parts are built once while it waits, and once more while it runs
        assert max(reused.values()) <= 2
