"""Quincy's min-cost-flow network (core/flow.py) on tiny cases solved by hand, and the
policy (core/quincy.py) on a folded state: fairness bounds, preemption, racks.

The network is the one of Isard et al., "Quincy: Fair Scheduling for Distributed
Computing Clusters" (SOSP '09), section 4 (figure 4 and the E_j/F_j bounds of 4.3).
"""

from __future__ import annotations

import numpy as np
import pytest

from esched.core import ClusterState, Placer
from esched.core.flow import UNFAIR, FlowProblem, fair_shares, solve
from esched.core.quincy import FlowJob, QuincyConfig, QuincyPolicy
from support.fold import EV, Log, commit, node, pod

pytest.importorskip("ortools")


def problem(
    *,
    racks: list[int],
    slots: list[int],
    jobs: list[int],
    wait: list[int],
    emin: list[int],
    emax: list[int],
    running: list[int] | None = None,
    kill: list[int] | None = None,
    any_cost: int = 10,
    **prefs: list,
) -> FlowProblem:
    T = len(jobs)
    s = np.array(slots, dtype=np.int32)[:, None]
    return FlowProblem(
        machine_rack=np.array(racks, np.int32),
        n_racks=max(racks) + 1,
        slots=s,
        machine_cap=s[:, 0].copy(),
        machine_cost=np.zeros(s.shape, np.int64),
        task_job=np.array(jobs, np.int32),
        task_class=np.zeros(T, np.int32),
        task_wait_cost=np.array(wait, np.int64),
        task_any_cost=np.full(T, any_cost, np.int64),
        task_running_on=np.array(running or [-1] * T, np.int32),
        task_kill_cost=np.array(kill or [0] * T, np.int64),
        job_min=np.array(emin, np.int64),
        job_max=np.array(emax, np.int64),
        **{k: np.array(v) for k, v in prefs.items()},
    )


def test_locality_picks_the_cheapest_assignment_of_preferred_machines_and_racks():
    # Two racks of two one-slot machines. Both tasks prefer machine 0 (cost 1); task 1
    # also prefers rack 1 (cost 3); anywhere costs 10. By hand: task 0 -> m0 (1) and
    # task 1 -> rack 1 (3) = 4 beats task 1 -> m0 and task 0 -> X (1 + 10 = 11).
    p = problem(
        racks=[0, 0, 1, 1],
        slots=[1, 1, 1, 1],
        jobs=[0, 0],
        wait=[100, 100],
        emin=[0],
        emax=[2],
        pref_task=[0, 1],
        pref_machine=[0, 0],
        pref_cost=[1, 1],
        rack_pref_task=[1],
        rack_pref_rack=[1],
        rack_pref_cost=[3],
    )
    r = solve(p)
    assert r.cost == 4
    assert r.task_node[0] == 0
    assert r.task_node[1] in (2, 3)


def test_unscheduled_cost_decides_who_waits_when_slots_are_short():
    # One job, three tasks, two slots: the one with the lowest unscheduled cost (10)
    # waits; cost = 10 + 2 * anywhere (1).
    p = problem(
        racks=[0, 0],
        slots=[1, 1],
        jobs=[0, 0, 0],
        wait=[10, 30, 20],
        emin=[0],
        emax=[3],
        any_cost=1,
    )
    r = solve(p)
    assert r.cost == 12
    assert r.task_node[0] == -1 and sorted(r.task_node[1:].tolist()) == [0, 1]


def test_fairness_bounds_hold_against_costs():
    # Jobs A (tasks 0-2, unscheduled cost 100 each) and B (tasks 3-5, 20 each; running
    # anywhere costs 10), four slots. Without bounds A takes three (saving 90 each),
    # B the last (saving 10); with E = F = 2 each job gets exactly two.
    kw = dict(racks=[0, 0, 0, 0], slots=[1, 1, 1, 1], jobs=[0, 0, 0, 1, 1, 1])
    wait = [100, 100, 100, 20, 20, 20]
    free = solve(problem(wait=wait, emin=[0, 0], emax=[3, 3], **kw))
    placed = np.bincount(np.array(kw["jobs"])[free.task_node >= 0], minlength=2)
    assert placed.tolist() == [3, 1]
    fair = solve(problem(wait=wait, emin=[2, 2], emax=[2, 2], **kw))
    placed = np.bincount(np.array(kw["jobs"])[fair.task_node >= 0], minlength=2)
    assert placed.tolist() == [2, 2]
    assert fair.below_min == 0


def test_minimum_beyond_the_cluster_is_paid_not_infeasible():
    # E = 3 for a job on a two-slot cluster: the flow still exists, one task short.
    p = problem(racks=[0, 0], slots=[1, 1], jobs=[0, 0, 0], wait=[5, 5, 5], emin=[3], emax=[3])
    r = solve(p)
    assert (r.task_node >= 0).sum() == 2
    assert r.below_min == 1
    assert r.cost >= UNFAIR


@pytest.mark.parametrize(("kill", "killed"), [(50, True), (500, False)])
def test_running_task_is_killed_only_when_it_costs_less(kill, killed):
    # One slot held by running task 0 (job 0, unscheduled cost 10, kill cost `kill`);
    # task 1 of job 1 waits at 100. Kill: 10 + 50 + anywhere 1 = 61 < keep: 100.
    # Keep: 100 < 10 + 500 + 1.
    p = problem(
        racks=[0],
        slots=[1],
        jobs=[0, 1],
        wait=[10, 100],
        emin=[0, 0],
        emax=[1, 1],
        running=[0, -1],
        kill=[kill, 0],
        any_cost=1,
    )
    r = solve(p)
    if killed:
        assert r.task_node.tolist() == [-1, 0] and r.cost == 61
        assert r.kills(p).tolist() == [0]
    else:
        assert r.task_node.tolist() == [0, -1] and r.cost == 100
        assert r.kills(p).size == 0


def test_fair_shares_water_fill_then_give_rounding_to_the_oldest():
    # One task = 10% of the cluster: demands 20%, 80%, 200% -> level 40%: 2, 4, 4 tasks.
    assert fair_shares([0.1, 0.1, 0.1], [2, 8, 20], [0, 1, 2]).tolist() == [2, 4, 4]
    # Oversubscribed: three one-task jobs of half the cluster each: the oldest two run.
    assert fair_shares([0.5, 0.5, 0.5], [1, 1, 1], [2, 0, 1]).tolist() == [1, 0, 1]
    # Demand under the cluster: everyone gets everything.
    assert fair_shares([0.1, 0.2], [3, 2], [0, 1]).tolist() == [3, 2]


def test_fair_shares_when_rounding_puts_the_demand_a_hair_over_the_cluster():
    # 87 jobs of 1-4 tasks of 1/211 of the cluster: the demands sum to 1 + 2e-16 but
    # their running sums to 1 - 8e-16 (a whole-trace Philly round on 40 machines
    # crashed here): every job gets its demand.
    n = [4, 2, 4, 2, 4, 3, 3, 3, 3, 3, 2, 2, 4, 3, 4, 3, 2, 1, 2, 1, 2, 1, 4, 1, 1, 4, 2, 3, 1]
    n += [4, 1, 2, 1, 4, 4, 3, 3, 1, 1, 1, 2, 2, 4, 3, 4, 3, 3, 2, 3, 4, 2, 1, 2, 3, 4, 1, 2]
    n += [2, 1, 1, 4, 2, 2, 2, 2, 3, 1, 2, 3, 4, 1, 1, 1, 4, 4, 1, 4, 2, 4, 1, 1, 2, 3, 4, 2]
    n += [1, 2]
    dom = [1 / 211] * len(n)
    assert sum(n) == 211 and float((np.asarray(dom) * n).sum()) > 1.0
    assert fair_shares(dom, n, range(len(n))).tolist() == n


def _fair_shares_replaced(dom, n, order) -> list[int]:
    """fair_shares as it was before it walked the rounding's hand-out as Python floats
    (core/flow.py at ef40125, verbatim): the oracle for the walk."""
    dom = np.asarray(dom, dtype=np.float64)
    n = np.asarray(n, dtype=np.int64)
    J = dom.shape[0]
    demand = dom * n
    if float(demand.sum()) <= 1.0:
        return n.tolist()
    d = np.sort(demand)
    below = np.concatenate(([0.0], np.cumsum(d)[:-1]))
    used = below + d * (J - np.arange(J))
    i = int(np.searchsorted(used, 1.0))
    if i >= J:
        lam = float(d[-1])
    else:
        lam = d[i - 1] if i > 0 and used[i - 1] >= 1.0 else (1.0 - below[i]) / (J - i)
    share = np.minimum(demand, lam)
    out = np.minimum(np.floor(share / dom + 1e-9).astype(np.int64), n)
    left = 1.0 - float((out * dom).sum())
    if left > 1e-12:
        for j in np.asarray(order, dtype=np.int64):
            if out[j] < n[j] and dom[j] <= left + 1e-12:
                out[j] += 1
                left -= dom[j]
                if left <= 1e-12:
                    break
    return out.tolist()


@pytest.mark.parametrize("seed", range(40))
def test_fair_shares_hand_out_the_rounding_as_the_per_element_walk_did(seed):
    # Backlogs of a few to thousands of jobs of 1-8 GPU tasks on 8-640 GPUs, random
    # age order: the same shares, job for job.
    rng = np.random.default_rng(seed)
    J = int(rng.integers(2, 3000))
    gpus = int(rng.choice([8, 64, 640]))
    dom = rng.choice([1, 2, 4, 8], size=J) / gpus
    n = rng.integers(1, 5, size=J)
    order = rng.permutation(J)
    got = fair_shares(dom, n, order).tolist()
    assert got == _fair_shares_replaced(dom, n, order)
    assert float((np.asarray(got) * dom).sum()) <= 1.0 + 1e-9


# ---------------------------------------------------------------------- the policy


def state_with_running_job(b_priority: int = 0) -> tuple[ClusterState, Placer, list[FlowJob]]:
    """Node n1 with 2 CPUs held by job A's two independent 1-CPU tasks (priority 0,
    best effort); job B's 1-CPU task waits."""
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("n1", cpu="2"))
    for name in ("a1", "a2"):
        log(EV.POD_SUBMITTED, pod(name, cpu="1", memory=None, priority=0))
    log(EV.POD_SUBMITTED, pod("b1", cpu="1", memory=None, priority=b_priority))
    log(
        EV.PLACEMENT_COMMITTED,
        commit(*((f"ns/{a}", "n1", {"cpu": 1000, "pods": 1}) for a in ("a1", "a2"))),
    )
    placer = Placer(st)
    i = st.pod_index
    jobs = [
        FlowJob("A", [], [(i["ns/a1"], 0, ()), (i["ns/a2"], 0, ())], waited=100, ran=100),
        FlowJob("B", [i["ns/b1"]], waited=10),
    ]
    return st, placer, jobs


@pytest.mark.parametrize(("b_priority", "victims"), [(0, "any"), (100, "bands")])
def test_fair_with_preemption_evicts_the_job_over_its_share(b_priority, victims):
    # One task is half the cluster: A (2 tasks) and B (1) water-fill to A = 1, B = 1;
    # strict fairness with preemption kills A (whole) and runs B on n1: under Quincy's
    # rule ("any"), or under esched's bands when B is batch (100) and A best effort.
    st, placer, jobs = state_with_running_job(b_priority)
    config = QuincyConfig(preemption=True, victims=victims)
    plan = QuincyPolicy(st, placer, config).plan(jobs)
    assert [(p.job, p.victims) for p in plan.placements] == [(1, [0])]
    assert plan.placements[0].bindings == [(st.pod_index["ns/b1"], 0, ())]


def test_fair_with_preemption_keeps_a_job_of_the_same_band():
    # esched's commit rule: a best-effort job does not evict another; the flow's kill
    # is deferred (A keeps running), and B waits.
    st, placer, jobs = state_with_running_job(0)
    plan = QuincyPolicy(st, placer, QuincyConfig(preemption=True)).plan(jobs)
    assert plan.placements == []
    assert plan.kills_deferred == 1 and plan.repaired == 0


def test_fair_without_preemption_keeps_running_tasks():
    st, placer, jobs = state_with_running_job()
    policy = QuincyPolicy(st, placer, QuincyConfig(preemption=False))
    plan = policy.plan(jobs)
    # nothing fits on what is free now: the round is not solved
    assert plan.placements == [] and plan.skipped and plan.round is None
    # solved, the flow would pay B's minimum rather than move A
    prob, _ = policy.problem(jobs)
    assert solve(prob).below_min == 1


def test_placements_pass_the_feasibility_path_and_constraints():
    # Three 1-CPU pods, n1 (2 CPUs, tainted off: NoSchedule) and n2 (2 CPUs): only n2
    # passes the taint, so two run there and one waits; none lands on n1.
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("n1", cpu="2", taints=[{"key": "k", "effect": "NoSchedule"}]))
    log(EV.NODE_ADDED, node("n2", cpu="2"))
    for name in ("p1", "p2", "p3"):
        log(EV.POD_SUBMITTED, pod(name, cpu="1", memory=None))
    placer = Placer(st)
    i = st.pod_index
    jobs = [FlowJob(k, [i[f"ns/{k}"]], waited=w) for k, w in (("p1", 3), ("p2", 2), ("p3", 1))]
    plan = QuincyPolicy(st, placer, QuincyConfig(fairness="none")).plan(jobs)
    bound = [b for pl in plan.placements for b in pl.bindings]
    assert sorted(p for p, _, _ in bound) == [i["ns/p1"], i["ns/p2"]]
    assert {n for _, n, _ in bound} == {st.node_index["n2"]}
    # the round's bindings are assumed in the placer's view: n2 is full for p3
    assert placer.binding_reasons(i["ns/p3"], st.node_index["n2"]) != 0


def test_racks_come_from_labels_then_slot_order():
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("a", labels={"topology.kubernetes.io/zone": "z1"}))
    log(EV.NODE_ADDED, node("b", labels={"esched.dev/rack": "r9"}))
    log(EV.NODE_ADDED, node("c", labels={"topology.kubernetes.io/zone": "z1"}))
    for name in ("d", "e", "f"):
        log(EV.NODE_ADDED, node(name))
    racks, n = QuincyPolicy(st, Placer(st), QuincyConfig(rack_size=2)).racks()
    assert racks[0] == racks[2] != racks[1]
    assert racks[3] == racks[4] != racks[5]  # unlabelled: two per rack
    assert n == 4


def test_config_rejects_unknown_fairness():
    with pytest.raises(ValueError, match="fairness"):
        QuincyConfig(fairness="drf")


def test_bench_flow_reports_a_round_and_its_parts():
    from esched.services.bench_flow import run_flow_bench

    out = run_flow_bench(machines=40, tasks=400, repeat=1)["round"]
    assert out["machines"] == 40 and out["tasks"] == 400 and out["jobs"] == 40
    assert 0 < out["placed"] <= 400
    assert out["round_s"] >= out["solve_s"] > 0
    assert out["arcs"] > out["nodes"] > 40


def test_data_locality_places_a_job_where_its_data_is():
    # Two empty machines in different racks; the job's data all sits on n2: its
    # machine arc costs anywhere (1) + nothing to move, the X arc 1 + psi * 100.
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("n1", cpu="4", labels={"esched.dev/rack": "r1"}))
    log(EV.NODE_ADDED, node("n2", cpu="4", labels={"esched.dev/rack": "r2"}))
    for name in ("t1", "t2"):
        log(EV.POD_SUBMITTED, pod(name, cpu="1", memory=None))
    i = st.pod_index
    n2 = st.node_index["n2"]
    job = FlowJob("j", [i["ns/t1"], i["ns/t2"]], waited=5, data={n2: 100.0})
    plan = QuincyPolicy(st, Placer(st), QuincyConfig()).plan([job])
    assert [n for _, n, _ in plan.placements[0].bindings] == [n2, n2]
    assert plan.round is not None and plan.round.cost == 2 * 1
