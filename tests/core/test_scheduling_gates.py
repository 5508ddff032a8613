"""kube's SchedulingGates: a pod with ``spec.schedulingGates`` is Pending and never
attempted; an ``esched.pod.updated`` that removes its last gate makes it work.

Cases ported from kubernetes/kubernetes
``pkg/scheduler/framework/plugins/schedulinggates/scheduling_gates_test.go``
(``TestPreEnqueue``, ``TestIsSchedulableAfterUpdateTargetPodSchedulingGatesEliminated``),
and the update rule of kube's pod validation (gates may only be removed once created).
"""

from __future__ import annotations

import pytest

from esched.core import ClusterState, Placer
from esched.core.schedule import PassConfig, SchedulingPass, Target
from esched.core.validation import SCHEDULING_GATED, Validator
from support.fold import EV, node, pod, ref


def gated_pod(name: str, gates: list[str], **kw) -> dict:
    return pod(name, schedulingGates=[{"name": g} for g in gates], **kw)


def update(name: str, gates: list[str]) -> dict:
    return {**ref(name), "spec": {"schedulingGates": [{"name": g} for g in gates]}}


def one_pass(st: ClusterState, *targets: Target):
    return SchedulingPass(st, Placer(st), PassConfig(preemption=False)).run(list(targets))


@pytest.mark.parametrize(
    ("gates", "attempted"),
    [
        # TestPreEnqueue "pod does not carry scheduling gates": nil status (enqueued).
        ([], True),
        # TestPreEnqueue "pod carries scheduling gates": UnschedulableAndUnresolvable,
        # "waiting for scheduling gates: [foo bar]" (never attempted).
        (["foo", "bar"], False),
    ],
)
def test_pre_enqueue_holds_back_exactly_the_gated_pods(log, state, gates, attempted) -> None:
    log(EV.NODE_ADDED, node("n1"))
    log(EV.POD_SUBMITTED, gated_pod("p", gates))
    assert state.pod("ns/p")["phase"] == "Pending"
    assert state.pod("ns/p")["schedulingGates"] == gates
    assert state.summary()["schedulingGated"] == ({"ns/p": gates} if gates else {})
    out = one_pass(state, Target("pod", "ns/p"))
    assert bool(out.placements) is attempted
    assert out.skipped == (0 if attempted else 1)
    assert not out.unschedulable  # a gated pod is not reported unschedulable either


def test_removing_the_last_gate_makes_the_pod_schedulable(log, state) -> None:
    # TestIsSchedulableAfterUpdateTargetPodSchedulingGatesEliminated: old [foo], new
    # [] -> Queue.
    log(EV.NODE_ADDED, node("n1"))
    log(EV.POD_SUBMITTED, gated_pod("p", ["foo"]))
    log(EV.POD_UPDATED, update("p", []))
    assert state.gated == {}
    assert state.pod("ns/p")["schedulingGates"] == []
    out = one_pass(state, Target("pod", "ns/p"))
    assert out.placements[0].bindings == [("ns/p", "n1", ())]


def test_removing_some_gates_keeps_the_pod_gated(log, state) -> None:
    log(EV.NODE_ADDED, node("n1"))
    log(EV.POD_SUBMITTED, gated_pod("p", ["foo", "bar"]))
    log(EV.POD_UPDATED, update("p", ["bar"]))
    assert state.gated == {"ns/p": ("bar",)}
    assert one_pass(state, Target("pod", "ns/p")).skipped == 1


def test_an_update_adding_a_gate_is_ignored_as_kube_refuses_it(log, state) -> None:
    # kube's ValidatePodUpdate: scheduling gates may only be removed after creation.
    log(EV.POD_SUBMITTED, gated_pod("p", ["foo"]))
    log(EV.POD_UPDATED, update("p", ["foo", "new"]))
    assert state.gated == {"ns/p": ("foo",)}
    assert state.anomalies.get("scheduling_gate_added") == 1
    log(EV.POD_SUBMITTED, pod("q"))
    log(EV.POD_UPDATED, update("q", ["new"]))  # an ungated pod cannot be gated later
    assert "ns/q" not in state.gated


def test_updates_of_unknown_or_bound_pods_are_anomalies(log, state) -> None:
    log(EV.NODE_ADDED, node("n1"))
    log(EV.POD_UPDATED, update("ghost", []))
    log(EV.POD_SUBMITTED, pod("r", node_name="n1"))
    log(EV.POD_UPDATED, update("r", []))
    assert state.anomalies.get("unknown_pod") == 1
    assert state.anomalies.get("update_not_pending") == 1


def test_gates_end_with_the_pod_and_survive_a_snapshot(log, state) -> None:
    log(EV.POD_SUBMITTED, gated_pod("p", ["foo"]))
    log(EV.POD_SUBMITTED, gated_pod("q", ["a", "b"]))
    log(EV.POD_DELETED, ref("p"))
    assert state.gated == {"ns/q": ("a", "b")}
    copy = ClusterState.from_bytes(state.to_bytes())
    assert copy.gated == {"ns/q": ("a", "b")}
    # A resubmit of the Pending pod without gates (kube: an update of the whole pod).
    log(EV.POD_SUBMITTED, pod("q"))
    assert state.gated == {}


def test_the_bytes_path_folds_gates_like_the_dict_path() -> None:
    import orjson

    a, b = ClusterState(), ClusterState()
    events = [
        (1, {"type": EV.POD_SUBMITTED, "id": "1", "source": "t", "data": gated_pod("p", ["x"])}),
        (2, {"type": EV.POD_SUBMITTED, "id": "2", "source": "t", "data": gated_pod("q", ["y"])}),
        (3, {"type": EV.POD_UPDATED, "id": "3", "source": "t", "data": update("q", [])}),
    ]
    a.apply_many(events)
    b.apply_payloads((pos, orjson.dumps(e)) for pos, e in events)
    assert a.gated == b.gated == {"ns/p": ("x",)}
    assert a.summary() == b.summary()


def test_a_gang_is_planned_without_its_gated_members(log, state) -> None:
    log(EV.NODE_ADDED, node("n1", cpu="8"))
    log(
        EV.PODGROUP_SUBMITTED,
        {"metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 2}},
    )
    log(EV.POD_SUBMITTED, pod("g-0", gang="g"))
    log(EV.POD_SUBMITTED, gated_pod("g-1", ["wait"], gang="g"))
    out = one_pass(state, Target("gang", "ns/g"))
    assert not out.placements and out.gangs_waiting == 1  # one placeable member of two
    log(EV.POD_UPDATED, update("g-1", []))
    out = one_pass(state, Target("gang", "ns/g"))
    assert sorted(p for p, _n, _d in out.placements[0].bindings) == ["ns/g-0", "ns/g-1"]


def test_commit_validation_refuses_to_bind_a_gated_pod(log, state) -> None:
    log(EV.NODE_ADDED, node("n1"))
    log(EV.POD_SUBMITTED, gated_pod("p", ["foo"]))
    verdict = Validator(state).check(
        {
            "proposal": "x",
            "replica": "r",
            "position": state.position,
            "gang": None,
            "bindings": [
                {"pod": "ns/p", "node": "n1", "resources": {"cpu": 500, "memory": 1 << 30}}
            ],
        }
    )
    assert not verdict.ok and verdict.reason == SCHEDULING_GATED


def test_replay_lists_gated_pods_with_their_gates(log, state) -> None:
    from esched.services.replay import format_table

    log(EV.POD_SUBMITTED, gated_pod("p", ["example.com/quota", "b"]))
    table = format_table(state.summary())
    assert "gated     1 (SchedulingGated" in table
    assert "ns/p" in table and "example.com/quota,b" in table
