"""The reason code table: one wording per reason bit, codes derived from it."""

from esched.core import _placer, reasons
from esched.core.reasons import (
    code_text,
    decision_code,
    is_resource_text,
    reason_code,
    resource_bit,
    resource_text,
    texts,
    unschedulable_message,
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
    ]
    assert reason_code(resource_text("cpu")) == "Insufficient.cpu"
    assert reason_code(resource_text("pods")) == "TooManyPods"
    assert decision_code("cpu") == "insufficient_cpu"


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
        assert code_text(reason_code(text)) == text
    assert code_text("Insufficient.nvidia.com/gpu") == "Insufficient nvidia.com/gpu"
    assert code_text("NodeReserved") == "node(s) were reserved for another gang"
