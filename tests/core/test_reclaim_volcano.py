"""Volcano's reclaim cases, ported: volcano-sh/volcano
pkg/scheduler/actions/reclaim/reclaim_test.go (``TestReclaim``), with the proportion
and gang plugins, planned by core/reclaim.py. Each case: the victims Volcano evicts."""

from __future__ import annotations

from typing import Any

import pytest

from esched.core import ClusterState, Placer
from esched.core.reclaim import plan_gang_reclaim, plan_reclaim, victims_legal
from support.fold import EV, Log, commit, node

G = 10**9  # "1G"
A100 = {"nvidia.com/A100": 10}


def _pod(
    name: str,
    cpu: str,
    mem: str,
    *,
    queue: str | None = None,
    group: str | None = None,
    preemptable: str | None = None,
    priority_class: str | None = None,
    preemption_policy: str | None = None,
) -> dict[str, Any]:
    ann: dict[str, str] = {}
    if queue:
        ann["volcano.sh/queue-name"] = queue
    if group:
        ann["scheduling.k8s.io/group-name"] = group
    if preemptable is not None:
        ann["volcano.sh/preemptable"] = preemptable
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    if preemption_policy:
        spec["preemptionPolicy"] = preemption_policy
    return {"metadata": {"name": name, "namespace": "c1", "annotations": ann}, "spec": spec}


def _one(name: str, group: str, preemptable: str) -> tuple[Any, ...]:
    """A running 1-CPU, 1G pod of ``group`` on n1 (reclaim_test.go's preemptees)."""
    return (_pod(name, "1", "1G", group=group, preemptable=preemptable), "n1", 1000, G)


def _gpu_pod(name: str, *, group: str, preemptable: str | None = None) -> dict[str, Any]:
    """A pod asking for 10 ``nvidia.com/A100`` and no CPU or memory."""
    p = _pod(name, "0", "0", group=group, preemptable=preemptable)
    p["spec"]["containers"][0]["resources"]["requests"] = {"nvidia.com/A100": "10"}
    return p


def _cluster(
    nodes: list[tuple[Any, ...]],
    queues: list[tuple[str, dict[str, Any]]],
    classes: dict[str, tuple[int, str | None]],
    groups: list[tuple[str, str, int, str | None]],
    running: list[tuple[Any, ...]],
    pending: list[dict[str, Any]],
) -> ClusterState:
    s = ClusterState()
    log = Log(s)
    for name, cpu, mem, *extra in nodes:
        log(
            EV.NODE_ADDED, node(name, cpu=cpu, memory=mem, pods="10", **(extra[0] if extra else {}))
        )
    for name, (value, policy) in classes.items():
        pc: dict[str, Any] = {"metadata": {"name": name}, "value": value}
        if policy:
            pc["preemptionPolicy"] = policy
        log(EV.PRIORITYCLASS_UPSERTED, pc)
    for name, spec in queues:
        log(EV.QUEUE_UPSERTED, {"metadata": {"name": name}, "spec": spec})
    for name, queue, min_member, pclass in groups:
        spec: dict[str, Any] = {"minMember": min_member, "queue": queue}
        if pclass:
            spec["priorityClassName"] = pclass
        log(EV.PODGROUP_SUBMITTED, {"metadata": {"name": name, "namespace": "c1"}, "spec": spec})
    for p, at, cpu, mem, *extra in running:
        log(EV.POD_SUBMITTED, p)
        key = f"c1/{p['metadata']['name']}"
        res = {"cpu": cpu, "memory": mem, "pods": 1, **(extra[0] if extra else {})}
        log(EV.PLACEMENT_COMMITTED, commit((key, at, res)))
    for p in pending:
        log(EV.POD_SUBMITTED, p)
    return s


def _evicted(s: ClusterState, preemptor: str) -> list[str]:
    """What esched's reclaim evicts for ``preemptor`` (a gang member plans for its gang),
    each plan checked by the commit service's rule."""
    idx = s.pod_index[preemptor]
    g = s.gang_of(idx)
    if g >= 0:
        gplan = plan_gang_reclaim(s, Placer(s), s.gang_keys[g])
        if gplan is None:
            return []
        victims = [v for v, _n in gplan.victims]
        assert victims_legal(s, [p for p, _n in gplan.bindings], victims) is None
        return victims
    plan = plan_reclaim(s, Placer(s), preemptor)
    if plan is None:
        return []
    assert victims_legal(s, preemptor, plan.victims) is None
    return list(plan.victims)


CLASSES = {"low-priority": (100, None), "mid-priority": (500, None), "high-priority": (1000, None)}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            dict(
                nodes=[("n1", "3", "3Gi")],
                queues=[("q1", {"weight": 1}), ("q2", {"weight": 1})],
                classes=CLASSES,
                groups=[("pg1", "q1", 1, "low-priority"), ("pg2", "q2", 1, "high-priority")],
                running=[
                    _one("preemptee1", "pg1", "false"),
                    _one("preemptee2", "pg1", "true"),
                    _one("preemptee3", "pg1", "false"),
                ],
                pending=[_pod("preemptor1", "1", "1G", group="pg2")],
                preemptor="c1/preemptor1",
                expect=["c1/preemptee2"],
            ),
            id="Two Queue with one Queue overusing resource, should reclaim",
        ),
        pytest.param(
            dict(
                nodes=[("n1", "4", "4Gi")],
                queues=[("q1", {"weight": 1}), ("q2", {"weight": 1}), ("q3", {"weight": 1})],
                classes=CLASSES,
                groups=[
                    ("pg1", "q1", 1, "mid-priority"),
                    ("pg2", "q2", 1, "low-priority"),
                    ("pg3", "q3", 1, "high-priority"),
                ],
                running=[
                    _one("preemptee1-1", "pg1", "true"),
                    _one("preemptee1-2", "pg1", "true"),
                    _one("preemptee2-1", "pg2", "true"),
                    _one("preemptee2-2", "pg2", "false"),
                ],
                pending=[_pod("preemptor1", "1", "1G", group="pg3")],
                preemptor="c1/preemptor1",
                expect=["c1/preemptee2-1"],  # the low-priority job's preemptable pod
            ),
            id="sort reclaimees when reclaiming from overusing queue",
        ),
        pytest.param(
            dict(
                nodes=[("n1", "4", "4Gi")],
                queues=[
                    ("q1", {"weight": 1, "priority": 5}),
                    ("q2", {"weight": 1, "priority": 10}),  # highest queue priority
                    ("q3", {"weight": 1, "priority": 1}),
                ],
                classes=CLASSES,
                groups=[
                    ("pg1", "q1", 1, "mid-priority"),
                    ("pg2", "q2", 1, "mid-priority"),
                    ("pg3", "q3", 1, "mid-priority"),
                ],
                running=[
                    _one("preemptee1-1", "pg1", "true"),
                    _one("preemptee1-2", "pg1", "false"),
                    _one("preemptee2-1", "pg2", "true"),
                    _one("preemptee2-2", "pg2", "false"),
                ],
                pending=[_pod("preemptor1", "1", "1G", group="pg3")],
                preemptor="c1/preemptor1",
                # The lowest-priority queue reclaims, from the lower-priority of the two
                # queues above their deserved shares.
                expect=["c1/preemptee1-1"],
            ),
            id="sort reclaimees when reclaiming from overusing queues with different queue "
            "priority",
        ),
        pytest.param(
            dict(
                nodes=[("n1", "1", "1Gi")],
                queues=[("q1", {"weight": 1}), ("q2", {"weight": 1})],
                classes={"low-priority": (100, None), "high-priority": (1000, "Never")},
                groups=[("pg2", "q2", 1, "high-priority")],
                # pg1 has minMember 0 in Volcano (no gang constraint): a plain pod here.
                running=[(_pod("preemptee1", "1", "1G", queue="q1"), "n1", 1000, G)],
                pending=[_pod("preemptor1", "1", "1G", group="pg2")],
                preemptor="c1/preemptor1",
                expect=[],
            ),
            id="can not reclaim resources when task preemption policy is never",
        ),
        pytest.param(
            dict(
                nodes=[("n1", "10", "2Gi")],
                queues=[
                    ("q1", {"weight": 1, "priority": 1}),
                    ("q2", {"weight": 1, "priority": 2}),
                    ("q3", {"weight": 3}),
                ],
                classes=CLASSES,
                groups=[("pg3", "q3", 1, "mid-priority")],
                # pg1 and pg2 have minMember 0 in Volcano: plain pods here.
                running=[
                    (
                        _pod("preemptee1-1", "1", "1G", queue="q1", priority_class="mid-priority"),
                        "n1",
                        1000,
                        G,
                    ),
                    (
                        _pod("preemptee2-1", "1", "1G", queue="q2", priority_class="mid-priority"),
                        "n1",
                        1000,
                        G,
                    ),
                ],
                pending=[_pod("preemptor1", "2", "1G", group="pg3")],
                preemptor="c1/preemptor1",
                # CPU is free on the node, memory is not: one victim's memory with the
                # free 147 MB is enough; the lower-priority queue gives first.
                expect=["c1/preemptee1-1"],
            ),
            id="Node available resources should be included in reclaimed resources",
        ),
        pytest.param(
            dict(
                nodes=[("n1", "10", "10G")],
                queues=[("q1", {"weight": 1}), ("q2", {"weight": 9})],
                classes=CLASSES,
                groups=[("pg-preemptor", "q2", 1, "low-priority")],
                running=[
                    (
                        _pod("victim-n1", "2", "2G", queue="q1", preemptable="true"),
                        "n1",
                        2000,
                        2 * G,
                    )
                ],
                pending=[_pod("preemptor1", "3", "3G", group="pg-preemptor")],
                preemptor="c1/preemptor1",
                expect=[],  # it fits as things are: nobody is evicted
            ),
            id="only commit evictions on the node where reclaim succeeds",
        ),
    ],
)
def test_volcano_reclaim_case(case):
    s = _cluster(
        case["nodes"],
        case["queues"],
        case["classes"],
        case["groups"],
        case["running"],
        case["pending"],
    )
    assert _evicted(s, case["preemptor"]) == case["expect"]


def test_a_pod_that_is_not_preemptable_is_never_a_victim_of_the_commit_check():
    """The commit service's rule refuses a reclaim naming a ``volcano.sh/preemptable:
    "false"`` pod, whatever the shares (Volcano skips such tasks as reclaimees); a
    value Go's ParseBool cannot read counts as false too, as in Volcano."""
    s = _cluster(
        [("n1", "2", "2Gi")],
        [("q1", {}), ("q2", {})],
        {},
        [],
        [
            (_pod("keep", "1", "1G", queue="q1", preemptable="false"), "n1", 1000, G),
            (_pod("odd", "1", "1G", queue="q1", preemptable="nope"), "n1", 1000, G),
        ],
        [_pod("want", "1", "1G", queue="q2")],
    )
    assert sorted(s.not_preemptable) == ["c1/keep", "c1/odd"]
    assert "not preemptable" in victims_legal(s, "c1/want", ["c1/keep"])
    assert _evicted(s, "c1/want") == []


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            dict(
                nodes=[("n1", "2", "4Gi"), ("n2", "2", "4Gi")],
                queues=[
                    ("q3", {"deserved": {"cpu": "2", "memory": "4Gi"}}),
                    ("q4", {"deserved": {"cpu": "2", "memory": "4Gi"}}),
                ],
                groups=[("pg5", "q3", 1, None), ("pg6", "q4", 1, None)],
                running=[
                    (
                        _pod("p5", "2", "4Gi", group="pg5", preemptable="false"),
                        "n1",
                        2000,
                        4 * 2**30,
                    ),
                    (_pod("p6", "2", "4Gi", group="pg5"), "n2", 2000, 4 * 2**30),
                ],
                pending=[_pod("p7", "2", "4Gi", group="pg6")],
                preemptor="c1/p7",
                expect=["c1/p6"],
            ),
            id="case2: Can reclaim from other queues when allocated < deserved",
        ),
        pytest.param(
            dict(
                nodes=[
                    ("n3", "2", "4Gi", {"nvidia.com/A100": "10"}),
                    ("n4", "2", "4Gi", {"nvidia.com/A100": "10"}),
                ],
                queues=[
                    ("q5", {"deserved": {"cpu": "2", "memory": "4Gi", "nvidia.com/A100": "10"}}),
                    ("q6", {"deserved": {"cpu": "2", "memory": "4Gi", "nvidia.com/A100": "10"}}),
                ],
                groups=[("pg7", "q5", 1, None), ("pg8", "q6", 1, None), ("pg9", "q6", 1, None)],
                running=[
                    (_gpu_pod("p8", group="pg7", preemptable="false"), "n3", 0, 0, A100),
                    (_gpu_pod("p9", group="pg7"), "n4", 0, 0, A100),
                    (_pod("p10", "2", "4Gi", group="pg8"), "n3", 2000, 4 * 2**30),
                    (_pod("p11", "2", "4Gi", group="pg8"), "n4", 2000, 4 * 2**30),
                ],
                pending=[_gpu_pod("p12", group="pg9")],
                preemptor="c1/p12",
                # q6 is over its share in CPU and memory, but p12 asks for neither: only
                # the A100s it asks for count for its queue (proportion's Preemptive).
                expect=["c1/p9"],
            ),
            id="case3: CPU & Memory are overused, scalar resource is not overused, but "
            "candidate pod has not request CPU & Memory, reclaim should happen",
        ),
    ],
)
def test_volcano_capacity_reclaim_case(case):
    """volcano-sh/volcano pkg/scheduler/plugins/capacity/capacity_test.go,
    ``Test_capacityPlugin_OnSessionOpenWithoutHierarchy``: ``spec.deserved`` caps the
    water-filled share as capacity's deserved does."""
    s = _cluster(
        case["nodes"], case["queues"], {}, case["groups"], case["running"], case["pending"]
    )
    assert _evicted(s, case["preemptor"]) == case["expect"]
