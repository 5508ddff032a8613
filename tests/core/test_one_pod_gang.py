"""A gang that places one member (a one-pod Volcano Job's) takes the single pod's
:meth:`Placer.place` in the scheduling pass instead of :meth:`Placer.plan_gang`
(:func:`esched.core.schedule.plan_one`): the same decision. Random clusters are folded twice
and passed once each way; the passes' results, the placers' views and counters and
the failure reports must agree."""

from __future__ import annotations

import random
from typing import Any

import pytest

from esched.core import ClusterState, Placer, schedule
from esched.core.schedule import (
    PassConfig,
    SchedulingPass,
    Target,
    member_task,
)
from esched.schemas.events import split_key
from support.fold import EV, Log, node, pod


def _fold(seed: int) -> tuple[ClusterState, list[Target]]:
    rng = random.Random(seed)
    st = ClusterState()
    log = Log(st)
    n_nodes = rng.randint(3, 24)
    for i in range(n_nodes):
        labels = {"zone": rng.choice("ab")}
        taints = [{"key": "t", "value": "x", "effect": "NoSchedule"}] if rng.random() < 0.1 else []
        log(
            EV.NODE_ADDED,
            node(
                f"n{i}",
                cpu=str(rng.randint(1, 8)),
                memory=f"{rng.randint(2, 16)}Gi",
                labels=labels,
                taints=taints,
            ),
        )
    for i in range(rng.randint(0, n_nodes * 2)):  # running pods
        log(
            EV.POD_SUBMITTED,
            pod(
                f"run{i}",
                cpu=f"{rng.randint(1, 20) * 100}m",
                node_name=f"n{rng.randrange(n_nodes)}",
            ),
        )
    targets: list[Target] = []
    for i in range(rng.randint(10, 60)):
        cpu = f"{rng.randint(1, 60) * 100}m"  # some fit nowhere
        extra: dict[str, Any] = {}
        if rng.random() < 0.2:
            extra["nodeSelector"] = {"zone": rng.choice("ab")}
        shape = rng.random()
        if shape < 0.6:
            # A one-pod gang, as a one-pod Volcano Job's pod: <job>-<task>-0; some with
            # a task minimum (the pod's task or another), some named otherwise.
            name = f"j{i}"
            spec: dict[str, Any] = {"minMember": 1}
            roll = rng.random()
            if roll < 0.5:
                spec["minTaskMember"] = {"w": 1}
            elif roll < 0.6:
                spec["minTaskMember"] = {"master": 1}
            log(
                EV.PODGROUP_SUBMITTED, {"metadata": {"name": name, "namespace": "ns"}, "spec": spec}
            )
            member = f"{name}-w-0" if rng.random() < 0.9 else f"{name}x"
            log(EV.POD_SUBMITTED, pod(member, cpu=cpu, gang=name, **extra))
            kind = "gang" if rng.random() < 0.8 else "pod"
            targets.append(Target(kind, f"ns/{name}" if kind == "gang" else f"ns/{member}", i))
            if rng.random() < 0.1:
                # Nodes reserved for it (the starvation guard's): plan_gang's path.
                nodes = rng.sample([f"n{k}" for k in range(n_nodes)], min(2, n_nodes))
                log(EV.GANG_RESERVED, {"gang": f"ns/{name}", "nodes": nodes, "message": "t"})
        elif shape < 0.8:
            name = f"g{i}"
            log(
                EV.PODGROUP_SUBMITTED,
                {"metadata": {"name": name, "namespace": "ns"}, "spec": {"minMember": 2}},
            )
            for k in range(rng.choice((1, 2, 3))):  # one member: it waits
                log(EV.POD_SUBMITTED, pod(f"{name}-w-{k}", cpu=cpu, gang=name, **extra))
            targets.append(Target("gang", f"ns/{name}", i))
        else:
            log(EV.POD_SUBMITTED, pod(f"p{i}", cpu=cpu, **extra))
            targets.append(Target("pod", f"ns/p{i}", i))
    # Redelivered items and some targets twice.
    targets += rng.sample(targets, len(targets) // 5)
    return st, targets


def _through_plan_gang(placer: Placer, _st: ClusterState, pod_key: str) -> list[str | None] | None:
    return placer.plan_gang([pod_key], 1)


def _outcome(st: ClusterState, targets: list[Target], cfg: PassConfig) -> tuple[Any, ...]:
    placer = Placer(st)
    sp = SchedulingPass(st, placer, cfg)
    reports = []
    results = []
    for start in range(0, len(targets), 7):  # several passes, the view kept
        out = sp.run(targets[start : start + 7], now=float(start))
        results.append(
            (
                [(p.target, p.gang, p.bindings, p.victims) for p in out.placements],
                sorted(out.unschedulable.items()),
                out.blocked,
                out.reservations,
                out.skipped,
                out.gangs_waiting,
            )
        )
        reports.append(placer.gang_failure)
    return (
        results,
        reports,
        placer.used_array().tolist(),
        placer.placed,
        placer.unschedulable,
        placer.visited,
    )


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("preemption", [False, True])
def test_a_one_member_gang_is_placed_as_plan_gang_places_it(
    seed: int, preemption: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = PassConfig(preemption=preemption, reserve_after=5.0)
    st, targets = _fold(seed)
    fast = _outcome(st, targets, cfg)
    again, _ = _fold(seed)
    monkeypatch.setattr(schedule, "plan_one", _through_plan_gang)
    slow = _outcome(again, targets, cfg)
    assert fast == slow


def test_the_fast_path_is_taken_and_reports_a_failure_as_plan_gang(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("n1", cpu="2"))
    for name, cpu in (("a", "1"), ("b", "4")):
        log(
            EV.PODGROUP_SUBMITTED,
            {"metadata": {"name": name, "namespace": "ns"}, "spec": {"minMember": 1}},
        )
        log(EV.POD_SUBMITTED, pod(f"{name}-w-0", cpu=cpu, gang=name))
    placer = Placer(st)
    sp = SchedulingPass(st, placer, PassConfig(preemption=False))
    calls = []
    plan_one = schedule.plan_one
    monkeypatch.setattr(
        schedule, "plan_one", lambda pl, st, key: calls.append(key) or plan_one(pl, st, key)
    )
    out = sp.run([Target("gang", "ns/a"), Target("gang", "ns/b")])
    assert calls == ["ns/a-w-0", "ns/b-w-0"]
    assert [p.bindings for p in out.placements] == [[("ns/a-w-0", "n1", ())]]
    _t, reasons, message = out.unschedulable["ns/b-w-0"]
    assert reasons["GangUnschedulable"] == 1
    assert message == "gang ns/b: 0/1 members fit; short of cpu: 3"


def _member_task_by_split(gang: str, pod: str) -> tuple[str, int] | None:
    """member_task as it was written before it read a prefix: both keys split."""
    namespace, job = split_key(gang)
    pod_namespace, name = split_key(pod)
    if pod_namespace != namespace or not name.startswith(job + "-"):
        return None
    task, _, index = name[len(job) + 1 :].rpartition("-")
    if not task or not index.isdigit():
        return None
    return task, int(index)


def test_a_member_name_reads_as_by_splitting_both_keys() -> None:
    rng = random.Random(7)
    alphabet = "ab-/0123"
    for _ in range(20000):
        gang = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
        pod_key = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        if rng.random() < 0.5:
            pod_key = gang + "-" + pod_key
        assert member_task(gang, pod_key) == _member_task_by_split(gang, pod_key)
