"""Which node and which victims a preemption takes, as kube-scheduler's DefaultPreemption
chooses them, inside Borg's band rule.

The cases are kube's own (kubernetes/kubernetes
pkg/scheduler/framework/plugins/defaultpreemption/default_preemption_test.go:
``TestPickStrategy`` / ``TestSelectBestCandidate``, the node choice of
``pickOneNodeForPreemption``; ``TestSelectNodesForPreemption``, "mixed priority pods are
preempted, pick later StartTime one when priorities are equal", the victims of one node).
Their resources in units of kube's ``DefaultMilliCPURequest`` (small 1, medium 2,
large 3, very large 5 cpus; nodes of 5), their priorities kube's (neg -100, low 0,
mid 100, high 1000, very high 10000), so that the preemptor (high or very high) is
production and the victims batch (mid) or best-effort (neg, low): Borg's band rule,
which esched applies first, admits the same victims kube does in every case here
(kube's one other candidate, a high pod under a very high preemptor, is prod for
prod, which Borg forbids; it is on a node kube does not pick either). A pod's start
time, kube's ``status.startTime``, is in esched the log position of its binding:
each case submits its pods by name and binds them in the order of kube's start times,
so that no other order (a pod's slot, its submission) agrees with the starts by chance.
"""

from __future__ import annotations

import pytest

from esched.core import ClusterState, Placer
from esched.core.bands import Band
from support.fold import EV, Log, commit, node, pod

NEG, LOW, MID, HIGH, VERY_HIGH = -100, 0, 100, 1000, 10000
SMALL, MEDIUM, LARGE, VERY_LARGE = 1, 2, 3, 5

# (name, node, priority, cpus, start): start orders the bindings (kube's startTime).
Running = tuple[str, str, int, int, int]


def _plan(nodes: list[str], running: list[Running], priority: int, cpus: int):
    st = ClusterState()
    log = Log(st)
    for name in nodes:
        log(EV.NODE_ADDED, node(name, cpu=str(VERY_LARGE), memory="64Gi"))
    for name, _where, prio, c, _start in sorted(running):
        log(EV.POD_SUBMITTED, pod(name, cpu=str(c), memory="1Gi", priority=prio))
    for name, where, _prio, c, _start in sorted(running, key=lambda r: (r[4], r[0])):
        resources = {"cpu": c * 1000, "memory": 1 << 30, "pods": 1}
        log(EV.PLACEMENT_COMMITTED, commit((f"ns/{name}", where, resources)))
    log(EV.POD_SUBMITTED, pod("p", cpu=str(cpus), memory="1Gi", priority=priority))
    return st, Placer(st).plan_preemption("ns/p", assume=False)


PICK_CASES = {
    "node with min highest priority pod is picked": (
        ["node1", "node2", "node3"],
        [
            ("p1.1", "node1", MID, MEDIUM, 0),
            ("p1.2", "node1", MID, LARGE, 0),
            ("p2.1", "node2", MID, MEDIUM, 0),
            ("p2.2", "node2", LOW, MEDIUM, 0),
            ("p3.1", "node3", LOW, MEDIUM, 0),
            ("p3.2", "node3", LOW, MEDIUM, 0),
        ],
        HIGH,
        "node3",
    ),
    "when highest priorities are the same, minimum sum of priorities is picked": (
        ["node1", "node2", "node3"],
        [
            ("p1.1", "node1", MID, MEDIUM, 0),
            ("p1.2", "node1", MID, LARGE, 0),
            ("p2.1", "node2", MID, LARGE, 0),
            ("p2.2", "node2", LOW, MEDIUM, 0),
            ("p3.1", "node3", MID, MEDIUM, 0),
            ("p3.2", "node3", MID, MEDIUM, 0),
        ],
        HIGH,
        "node2",
    ),
    "when highest priority and sum are the same, minimum number of pods is picked": (
        ["node1", "node2", "node3"],
        [
            ("p1.1", "node1", MID, SMALL, 0),
            ("p1.2", "node1", NEG, SMALL, 0),
            ("p1.3", "node1", MID, SMALL, 0),
            ("p1.4", "node1", NEG, SMALL, 0),
            ("p2.1", "node2", MID, LARGE, 0),
            ("p2.2", "node2", NEG, MEDIUM, 0),
            ("p3.1", "node3", MID, MEDIUM, 0),
            ("p3.2", "node3", NEG, SMALL, 0),
            ("p3.3", "node3", LOW, SMALL, 0),
        ],
        HIGH,
        "node2",
    ),
    # Summed as they are, node1's (100 - 100 - 100 = -100) would be the smallest; kube
    # adds 2^31 to each, so that fewer victims weigh less.
    "sum of adjusted priorities is considered": (
        ["node1", "node2", "node3"],
        [
            ("p1.1", "node1", MID, SMALL, 0),
            ("p1.2", "node1", NEG, SMALL, 0),
            ("p1.3", "node1", NEG, SMALL, 0),
            ("p2.1", "node2", MID, LARGE, 0),
            ("p2.2", "node2", NEG, MEDIUM, 0),
            ("p3.1", "node3", MID, MEDIUM, 0),
            ("p3.2", "node3", NEG, SMALL, 0),
            ("p3.3", "node3", LOW, SMALL, 0),
        ],
        HIGH,
        "node2",
    ),
    "non-overlapping lowest high priority, sum priorities, and number of pods": (
        ["node1", "node2", "node3", "node4"],
        [
            ("p1.1", "node1", MID, SMALL, 0),
            ("p1.2", "node1", LOW, SMALL, 0),
            ("p1.3", "node1", LOW, SMALL, 0),
            ("p2.1", "node2", HIGH, LARGE, 0),
            ("p3.1", "node3", MID, MEDIUM, 0),
            ("p3.2", "node3", LOW, SMALL, 0),
            ("p3.3", "node3", LOW, SMALL, 0),
            ("p3.4", "node3", LOW, MEDIUM, 0),
            ("p4.1", "node4", MID, MEDIUM, 0),
            ("p4.2", "node4", MID, SMALL, 0),
            ("p4.3", "node4", MID, SMALL, 0),
            ("p4.4", "node4", NEG, SMALL, 0),
        ],
        VERY_HIGH,
        "node1",
    ),
    "same priority, same number of victims, different start time for each node's pod": (
        ["node1", "node2", "node3"],
        [
            ("p1.1", "node1", MID, MEDIUM, 2),
            ("p1.2", "node1", MID, MEDIUM, 2),
            ("p2.1", "node2", MID, MEDIUM, 3),
            ("p2.2", "node2", MID, MEDIUM, 3),
            ("p3.1", "node3", MID, MEDIUM, 1),
            ("p3.2", "node3", MID, MEDIUM, 1),
        ],
        HIGH,
        "node2",
    ),
    "same priority, same number of victims, different start time for all pods": (
        ["node1", "node2", "node3"],
        [
            ("p1.1", "node1", MID, MEDIUM, 5),
            ("p1.2", "node1", MID, MEDIUM, 3),
            ("p2.1", "node2", MID, MEDIUM, 6),
            ("p2.2", "node2", MID, MEDIUM, 2),
            ("p3.1", "node3", MID, MEDIUM, 4),
            ("p3.2", "node3", MID, MEDIUM, 7),
        ],
        HIGH,
        "node3",
    ),
    "different priority, same number of victims, different start time for all pods": (
        ["node1", "node2", "node3"],
        [
            ("p1.1", "node1", LOW, MEDIUM, 5),
            ("p1.2", "node1", MID, MEDIUM, 3),
            ("p2.1", "node2", MID, MEDIUM, 7),
            ("p2.2", "node2", LOW, MEDIUM, 2),
            ("p3.1", "node3", LOW, MEDIUM, 4),
            ("p3.2", "node3", MID, MEDIUM, 6),
        ],
        HIGH,
        "node2",
    ),
}


@pytest.mark.parametrize("case", sorted(PICK_CASES))
def test_the_node_is_picked_as_kube_picks_it(case):
    nodes, running, priority, expected = PICK_CASES[case]
    _st, plan = _plan(nodes, running, priority, VERY_LARGE)
    assert plan is not None
    assert plan["node"] == expected


def test_of_equal_priority_the_later_started_pod_is_the_victim():
    """kube: "mixed priority pods are preempted, pick later StartTime one when
    priorities are equal". c (mid) must go; of a and b (low, one of them enough) the
    later started, a, goes and b is reprieved; d is not lower than the preemptor."""
    running = [
        ("a", "machine1", LOW, SMALL, 7),
        ("b", "machine1", LOW, SMALL, 6),
        ("c", "machine1", MID, MEDIUM, 5),
        ("d", "machine1", HIGH, SMALL, 4),
        ("e", "machine2", HIGH, LARGE, 3),
    ]
    _st, plan = _plan(["machine1", "machine2"], running, HIGH, LARGE)
    assert plan is not None
    assert plan["node"] == "machine1"
    assert sorted(plan["victims"]) == ["ns/a", "ns/c"]


def test_a_start_is_the_position_of_the_binding_and_survives_a_snapshot():
    st, _ = _plan(["n1"], [("x", "n1", LOW, SMALL, 0), ("y", "n1", LOW, SMALL, 1)], HIGH, SMALL)
    starts = dict(zip(st.pod_keys, st.pod_starts().tolist(), strict=True))
    # node at 1, x and y submitted at 2 and 3, bound at 4 and 5; p Pending: not started
    assert starts == {"ns/x": 4, "ns/y": 5, "ns/p": 0}
    back = ClusterState.from_bytes(st.to_bytes())
    assert back.pod_starts().tolist() == st.pod_starts().tolist()


def test_a_lower_highest_priority_wins_over_fewer_victims():
    """kube's order puts the highest victim priority before the number of victims (a
    case of ours, after pickOneNodeForPreemption's rules 2 and 4): one victim of
    priority 500 costs more than two of 100, all of them batch."""
    running = [
        ("a1", "node-a", 500, VERY_LARGE, 0),
        ("b1", "node-b", MID, MEDIUM, 0),
        ("b2", "node-b", MID, LARGE, 0),
    ]
    _st, plan = _plan(["node-a", "node-b"], running, HIGH, VERY_LARGE)
    assert plan is not None
    assert plan["node"] == "node-b"
    assert plan["cost"] == {"band": Band.BATCH, "pods": 2, "priority": 2 * MID}
