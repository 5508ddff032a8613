"""PriorityClass objects in the fold: a pod's ``priorityClassName`` resolves through them
as kube's Priority admission plugin does (plugin/pkg/admission/priority/admission.go:
the class's value; a pod naming no class takes the globalDefault class's; an explicit
``spec.priority`` is the pod's own), ``preemptionPolicy: Never`` keeps a pod from
evicting, the bands' ``classes`` mapping still overrides the band, and snapshots and
replay keep the classes."""

from __future__ import annotations

from esched.core import ClusterState, Placer
from esched.core.bands import Band, BandConfig
from esched.core.schedule import PassConfig, SchedulingPass, Target
from esched.services.replay import format_table
from support.fold import EV, Log, node, pod


def priority_class(name: str, value: int, **extra) -> dict:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **extra,
    }


def fold(*classes: dict) -> tuple[ClusterState, Log]:
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("n1", cpu="2"))
    for pc in classes:
        log(EV.PRIORITYCLASS_UPSERTED, pc)
    return st, log


def prio(st: ClusterState, key: str) -> int:
    record = st.pod(key)
    assert record is not None
    return record["priority"]


def test_a_pod_takes_its_priority_class_value() -> None:
    st, log = fold(priority_class("high-priority", 1_000_000))
    log(EV.POD_SUBMITTED, pod("a", priorityClassName="high-priority"))
    log(EV.POD_SUBMITTED, pod("b", priorityClassName="unknown-class"))
    assert prio(st, "ns/a") == 1_000_000
    assert prio(st, "ns/b") == 0  # kube would refuse the pod; esched folds it at 0


def test_an_explicit_priority_is_the_pods_own() -> None:
    st, log = fold(priority_class("high-priority", 1_000_000))
    log(EV.POD_SUBMITTED, pod("a", priority=7, priorityClassName="high-priority"))
    assert prio(st, "ns/a") == 7


def test_a_pod_naming_no_class_takes_the_global_default() -> None:
    st, log = fold(
        priority_class("low", 10, globalDefault=True),
        priority_class("high", 1000),
    )
    log(EV.POD_SUBMITTED, pod("a"))
    assert prio(st, "ns/a") == 10


def test_a_class_applies_to_pods_submitted_after_it() -> None:
    # Admission resolves the value once, when the pod is created.
    st, log = fold()
    log(EV.POD_SUBMITTED, pod("before", priorityClassName="late"))
    log(EV.PRIORITYCLASS_UPSERTED, priority_class("late", 500))
    log(EV.POD_SUBMITTED, pod("after", priorityClassName="late"))
    assert (prio(st, "ns/before"), prio(st, "ns/after")) == (0, 500)


def test_the_bands_class_mapping_overrides_the_class_value() -> None:
    st, log = fold(priority_class("nightly", 5000))
    log(EV.POD_SUBMITTED, pod("a", priorityClassName="nightly"))
    cid = st.pod_class_id("ns/a")
    spec = st.class_specs[cid]
    assert BandConfig().band_of(spec["priority"], spec["priorityClassName"]) == Band.PRODUCTION
    mapped = BandConfig(classes={"nightly": Band.BATCH})
    assert mapped.band_of(spec["priority"], spec["priorityClassName"]) == Band.BATCH


def test_a_never_preempting_class_waits_instead_of_evicting() -> None:
    st, log = fold(
        priority_class("urgent", 1_000_000),
        priority_class("polite", 1_000_000, preemptionPolicy="Never"),
    )
    log(EV.POD_SUBMITTED, pod("low", cpu="2", node_name="n1", priority=0))
    log(EV.POD_SUBMITTED, pod("nice", cpu="2", priorityClassName="polite"))
    log(EV.POD_SUBMITTED, pod("rude", cpu="2", priorityClassName="urgent"))
    sp = SchedulingPass(st, Placer(st), PassConfig())
    nice = sp.run([Target("pod", "ns/nice")])
    assert not nice.placements and "ns/nice" in nice.unschedulable
    rude = SchedulingPass(st, Placer(st), PassConfig()).run([Target("pod", "ns/rude")])
    assert [p.victims for p in rude.placements] == [[{"pod": "ns/low", "node": "n1"}]]


def test_snapshots_and_replay_keep_the_classes() -> None:
    st, _log = fold(priority_class("high", 1000, globalDefault=True, preemptionPolicy="Never"))
    again = ClusterState.from_bytes(st.to_bytes())
    assert again.priority_classes == st.priority_classes
    log2 = Log(again)
    log2(EV.POD_SUBMITTED, pod("a"))
    assert prio(again, "ns/a") == 1000
    summary = again.summary()
    assert summary["priorityClasses"] == {
        "high": {"value": 1000, "globalDefault": True, "preemptionPolicy": "Never"}
    }
    assert "high" in format_table(summary) and "Never" in format_table(summary)


def test_the_commit_check_refuses_victims_for_a_never_preempting_pod() -> None:
    # The same rule on the commit side (core/validation.py), so a replica that proposes
    # evictions for such a pod is refused, and the audit flags them.
    from esched.core.validation import PREEMPTION_ILLEGAL, Validator

    st, log = fold(
        priority_class("urgent", 1_000_000),
        priority_class("polite", 1_000_000, preemptionPolicy="Never"),
    )
    log(EV.POD_SUBMITTED, pod("low", cpu="2", node_name="n1", priority=0))
    log(EV.POD_SUBMITTED, pod("nice", cpu="2", priorityClassName="polite"))
    log(EV.POD_SUBMITTED, pod("rude", cpu="2", priorityClassName="urgent"))

    def proposal(who: str) -> dict:
        res = {"cpu": 2000, "memory": 2**30, "pods": 1}
        return {
            "proposal": f"p-{who}",
            "replica": "r1",
            "position": st.position,
            "gang": None,
            "bindings": [{"pod": f"ns/{who}", "node": "n1", "resources": res}],
            "victims": [{"pod": "ns/low", "node": "n1"}],
        }

    refused = Validator(st).check(proposal("nice"), record=False)
    assert not refused.ok and refused.reason == PREEMPTION_ILLEGAL
    assert "preemptionPolicy is Never" in refused.message
    assert Validator(st).check(proposal("rude"), record=False).ok


def test_a_pods_own_never_policy_keeps_it_from_preempting() -> None:
    st, log = fold()
    log(EV.POD_SUBMITTED, pod("low", cpu="2", node_name="n1", priority=0))
    log(EV.POD_SUBMITTED, pod("nice", cpu="2", priority=1000, preemptionPolicy="Never"))
    log(EV.POD_SUBMITTED, pod("rude", cpu="2", priority=1000))
    assert st.pod_class_id("ns/nice") != st.pod_class_id("ns/rude")
    nice = SchedulingPass(st, Placer(st), PassConfig()).run([Target("pod", "ns/nice")])
    assert not nice.placements
    rude = SchedulingPass(st, Placer(st), PassConfig()).run([Target("pod", "ns/rude")])
    assert [p.victims for p in rude.placements] == [[{"pod": "ns/low", "node": "n1"}]]
