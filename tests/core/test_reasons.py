"""The reason code table: one wording per reason bit, codes derived from it."""

import pytest

from esched.core import _placer, reasons
from esched.core.reasons import (
    LEGACY_CODES,
    canonical_code,
    constraint_code,
    decision_code,
    is_resource_text,
    reason_code,
    reason_text,
    resource_bit,
    resource_text,
    taint_text,
    texts,
    unschedulable_message,
    untolerated_taint,
)


def test_the_placer_answers_in_the_tables_bits():
    assert _placer.REASONS is reasons.TEXTS
    assert _placer.RESOURCE_REASON_SHIFT == reasons.RESOURCE_SHIFT
    assert resource_bit(0) == 1 << reasons.RESOURCE_SHIFT
    assert resource_bit(10_000) == 1 << (reasons.RESOURCE_SHIFT + reasons.RESOURCE_BITS - 1)
    assert reasons.NON_RESOURCE < resource_bit(0)


def test_messages_are_kube_schedulers():
    bits = reasons.UNSCHEDULABLE | reasons.SELECTOR | resource_bit(0)
    assert texts(bits, ["cpu", "pods"]) == [
        "node(s) were unschedulable",
        "node(s) didn't match Pod's node affinity/selector",
        "Insufficient cpu",
        "Too many pods",
    ]
    assert resource_text("nvidia.com/gpu") == "Insufficient nvidia.com/gpu"
    assert is_resource_text("Too many pods") and is_resource_text("Insufficient memory")
    assert not is_resource_text(reasons.TEXTS[reasons.TAINT])


def test_codes_derive_from_the_messages():
    assert [reason_code(t) for t in reasons.TEXTS.values()] == [
        "NodeNotFound",
        "NodeUnschedulable",
        "NodeAffinity",
        "TaintToleration",
        "NodeName",
        "NodePorts",
        "InterPodAffinity",
        "InterPodAntiAffinity",
        "ExistingPodsAntiAffinity",
        "PodTopologySpread",
        "PodTopologySpreadMissingLabel",
        "UsageThreshold",
    ]
    assert reason_code(resource_text("cpu")) == "Insufficient.cpu"
    assert reason_code(resource_text("pods")) == "TooManyPods"


def test_a_rejection_and_an_unschedulable_report_spell_a_reason_alike():
    assert decision_code("cpu") == reason_code(resource_text("cpu")) == "Insufficient.cpu"
    assert decision_code("pods") == "TooManyPods"
    assert decision_code("nvidia.com/gpu") == "Insufficient.nvidia.com/gpu"
    assert constraint_code(reasons.TAINT | reasons.SELECTOR) == "NodeAffinity"  # table order
    assert constraint_code(reasons.TAINT) == reason_code(reasons.TEXTS[reasons.TAINT])
    with pytest.raises(ValueError):
        constraint_code(resource_bit(0))


def test_old_spellings_read_as_todays():
    assert canonical_code("insufficient_cpu") == "Insufficient.cpu"
    assert canonical_code("insufficient_pods") == "TooManyPods"
    assert canonical_code("insufficient_nvidia.com/gpu") == "Insufficient.nvidia.com/gpu"
    assert canonical_code("pod_not_pending") == "PodNotPending"
    assert canonical_code("node_gone") == "NodeNotFound"
    # The commit service's device rejection is the scheduling pass's code for it.
    assert canonical_code("device_unavailable") == reasons.INSUFFICIENT_GPU_DEVICES
    for new in ("Insufficient.cpu", "NodeAffinity", "PodNotPending", "Preempted"):
        assert canonical_code(new) == new
    assert all(canonical_code(new) == new for new in LEGACY_CODES.values())


def test_the_taint_message_names_the_taint_and_keeps_the_code():
    text = taint_text("dedicated", "user1")
    assert text == "node(s) had untolerated taint {dedicated: user1}"
    assert reason_code(text) == "TaintToleration"
    assert not is_resource_text(text)


# kubernetes/kubernetes pkg/scheduler/framework/plugins/tainttoleration/
# taint_toleration_test.go, TestTaintTolerationFilter: (taints, tolerations) -> the
# taint named by the filter's message, None where the pod fits. (The Gt/Lt cases
# need a feature gate esched does not implement.)
_TAINT_FILTER_CASES = [
    ([("dedicated", "user1", "NoSchedule")], [], ("dedicated", "user1")),
    (
        [("dedicated", "user1", "NoSchedule")],
        [{"key": "dedicated", "value": "user1", "effect": "NoSchedule"}],
        None,
    ),
    (
        [("dedicated", "user1", "NoSchedule")],
        [{"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"}],
        ("dedicated", "user1"),
    ),
    (
        [("foo", "bar", "NoSchedule")],
        [{"key": "foo", "operator": "Exists", "effect": "NoSchedule"}],
        None,
    ),
    (
        [("dedicated", "user2", "NoSchedule"), ("foo", "bar", "NoSchedule")],
        [
            {"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"},
            {"key": "foo", "operator": "Exists", "effect": "NoSchedule"},
        ],
        None,
    ),
    (
        [("foo", "bar", "NoSchedule")],
        [{"key": "foo", "operator": "Equal", "value": "bar", "effect": "PreferNoSchedule"}],
        ("foo", "bar"),
    ),
    ([("foo", "bar", "NoSchedule")], [{"key": "foo", "operator": "Equal", "value": "bar"}], None),
    (
        [("dedicated", "user1", "PreferNoSchedule")],
        [{"key": "dedicated", "operator": "Equal", "value": "user2", "effect": "NoSchedule"}],
        None,
    ),
    ([("dedicated", "user1", "PreferNoSchedule")], [], None),
]


@pytest.mark.parametrize(("taints", "tolerations", "named"), _TAINT_FILTER_CASES)
def test_the_untolerated_taint_is_kubes(taints, tolerations, named):
    assert untolerated_taint(taints, tolerations) == named


def test_a_code_gives_back_kubes_message():
    for text in [*reasons.TEXTS.values(), resource_text("cpu"), resource_text("pods")]:
        assert reason_text(reason_code(text)) == text
    assert reason_text("Insufficient.nvidia.com/gpu") == "Insufficient nvidia.com/gpu"
    assert reason_text("GangUnschedulable") == "GangUnschedulable"  # not kube's: as is


def test_the_unschedulable_message_is_kubes_fit_error():
    # kube's FitError.Error() (pkg/scheduler/framework/types.go): "0/N nodes are
    # available: " + each "count reason" sorted as strings, joined by ", ", then ".".
    reasons_ = {"Insufficient.cpu": 3, "TaintToleration": 2, "NodePorts": 1, "NodeName": 4}
    assert unschedulable_message(10, reasons_) == (
        "0/10 nodes are available: 1 node(s) didn't have free ports for the requested pod "
        "ports, 2 node(s) had untolerated taint, 3 Insufficient cpu, "
        "4 node(s) didn't match the requested node name."
    )
    assert unschedulable_message(1, {"TooManyPods": 1}, "preemption: not helpful.") == (
        "0/1 nodes are available: 1 Too many pods. preemption: not helpful."
    )
    # every code the table or the pass gives reads back as words
    for text in reasons.TEXTS.values():
        assert reason_text(reason_code(text)) == text
    assert reason_text("Insufficient.nvidia.com/gpu") == "Insufficient nvidia.com/gpu"
    assert reason_text("NodeReserved") == "node(s) were reserved for another gang"
