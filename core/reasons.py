"""Why a pod does not get a node: the reason bits, their one wording and their one code.

The core's feasibility (``core/_feasibility.pxd``) answers with integer bits; this
module is their table: each bit's message as kube-scheduler spells it
("Insufficient cpu", "node(s) didn't match Pod's node affinity/selector", ...) and
the code derived from that message (``Insufficient.cpu``, ``NodeAffinity``). A code
is spelled one way on the wire: the ``reasons`` keys of ``esched.pod.unschedulable``
and the ``reason`` of ``esched.placement.rejected`` (:func:`decision_code`) are the
same code for the same reason (docs/events.md, "Reason codes"). Logs written before
that carry older spellings (``insufficient_cpu``, ``pod_not_pending``):
:func:`canonical_code` reads them as today's. Strings exist only at the edge:
:meth:`esched.core.Placer.explain`, ``fits``, ``reason_texts``, events.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from esched.core._constraints import tolerates

__all__ = [
    "EXISTING_ANTI_AFFINITY",
    "GANG_UNSCHEDULABLE",
    "INSUFFICIENT_GPU_DEVICES",
    "LEGACY_CODES",
    "NODE_NAME",
    "NODE_PORTS",
    "NODE_RESERVED",
    "NON_RESOURCE",
    "NOT_ALIVE",
    "NO_NODES",
    "OTHER_SCHEDULER",
    "POD_AFFINITY",
    "POD_ANTI_AFFINITY",
    "QUEUE_OVERUSED",
    "RESOURCE_SHIFT",
    "SCHEDULING_GATED",
    "SELECTOR",
    "SPREAD",
    "SPREAD_LABEL",
    "TAINT",
    "TEXTS",
    "UNSCHEDULABLE",
    "USAGE",
    "canonical_code",
    "constraint_code",
    "decision_code",
    "is_resource_text",
    "reason_code",
    "reason_text",
    "resource_bit",
    "resource_text",
    "taint_text",
    "texts",
    "unschedulable_message",
    "untolerated_taint",
]

# The bits (the same values as _feasibility.pxd's REASON_*; tests/core checks both).
NOT_ALIVE = 1
UNSCHEDULABLE = 2
SELECTOR = 4
TAINT = 8
NODE_NAME = 16
NODE_PORTS = 32
POD_AFFINITY = 64
POD_ANTI_AFFINITY = 128
EXISTING_ANTI_AFFINITY = 256
SPREAD = 512
SPREAD_LABEL = 1024
USAGE = 2048
#: Bit index of resource column 0 (``bits >> RESOURCE_SHIFT``: the resource bits).
RESOURCE_SHIFT = 12
#: Resource columns with a bit of their own; columns beyond share the last bit.
RESOURCE_BITS = 52
#: Every bit that is not a resource's.
NON_RESOURCE = (1 << RESOURCE_SHIFT) - 1

#: Bit -> kube-scheduler's message, then its event code.
_TABLE = {
    NOT_ALIVE: ("node(s) not found", "NodeNotFound"),
    UNSCHEDULABLE: ("node(s) were unschedulable", "NodeUnschedulable"),
    SELECTOR: ("node(s) didn't match Pod's node affinity/selector", "NodeAffinity"),
    TAINT: ("node(s) had untolerated taint", "TaintToleration"),
    NODE_NAME: ("node(s) didn't match the requested node name", "NodeName"),
    NODE_PORTS: ("node(s) didn't have free ports for the requested pod ports", "NodePorts"),
    # kube's InterPodAffinity filter (plugins/interpodaffinity/filtering.go): its three
    # messages, a code each (the first failing per node, in this order).
    POD_AFFINITY: ("node(s) didn't match pod affinity rules", "InterPodAffinity"),
    POD_ANTI_AFFINITY: ("node(s) didn't match pod anti-affinity rules", "InterPodAntiAffinity"),
    EXISTING_ANTI_AFFINITY: (
        "node(s) didn't satisfy existing pods anti-affinity rules",
        "ExistingPodsAntiAffinity",
    ),
    # kube's PodTopologySpread filter (plugins/podtopologyspread/filtering.go).
    SPREAD: ("node(s) didn't match pod topology spread constraints", "PodTopologySpread"),
    SPREAD_LABEL: (
        "node(s) didn't match pod topology spread constraints (missing required label)",
        "PodTopologySpreadMissingLabel",
    ),
    # The Usage plugin's filter (Volcano's usage predicate: "the CPU/memory load of the
    # node exceeds the upper limit"), one bit for every resource it checks.
    USAGE: ("node(s) had measured load above the usage threshold", "UsageThreshold"),
}
#: Bit -> kube-scheduler's message, for the bits below RESOURCE_SHIFT.
TEXTS = {bit: text for bit, (text, _) in _TABLE.items()}
_CODES = {text: code for text, code in _TABLE.values()}
_TEXTS_BY_CODE = {code: text for text, code in _CODES.items()}
_TOO_MANY_PODS = ("Too many pods", "TooManyPods")
_INSUFFICIENT = "Insufficient "


#: Codes of reasons that are no reason bit: the scheduling pass's and the commit
#: service's own, spelled once here for both.
#: The node's summed GPU has room, none of its devices does (or, in a rejected proposal,
#: a device the binding names has no room for the pod's share).
INSUFFICIENT_GPU_DEVICES = "InsufficientGPUDevices"
#: The node is reserved for a starving gang the pod is not a member of.
NODE_RESERVED = "NodeReserved"
#: A gang member: its gang as a whole does not fit.
GANG_UNSCHEDULABLE = "GangUnschedulable"
#: The cluster has no node at all.
NO_NODES = "NoNodes"
#: kube's SchedulingGates (PreEnqueue) and PodScheduled condition reason: the pod has
#: scheduling gates, so it is not attempted until an update removes the last one.
SCHEDULING_GATED = "SchedulingGated"
#: The pod names a ``spec.schedulerName`` that is not esched's profile: another
#: scheduler's pod, which esched leaves Pending (kube-scheduler ignores it likewise).
OTHER_SCHEDULER = "OtherScheduler"
#: Volcano's proportion ``allocatable``: a gang member beyond ``minMember`` would take
#: its queue over its deserved share while another queue waits.
QUEUE_OVERUSED = "QueueOverused"
#: The scheduling pass's own codes (no feasibility bit) -> their words.
_PASS_TEXTS = {
    NODE_RESERVED: "node(s) were reserved for another gang",
    INSUFFICIENT_GPU_DEVICES: "node(s) had no GPU device with room",
    NO_NODES: "no nodes available to schedule pods",
    SCHEDULING_GATED: "waiting for scheduling gates",
    OTHER_SCHEDULER: "node(s) not tried: the pod names a scheduler esched does not run",
    QUEUE_OVERUSED: "queue at its deserved share while another queue waits",
}


def resource_bit(col: int) -> int:
    """The reason bit of resource column ``col``."""
    return 1 << (RESOURCE_SHIFT + min(col, RESOURCE_BITS - 1))


def resource_text(name: str) -> str:
    """kube's message for a resource the node has too little of."""
    return _TOO_MANY_PODS[0] if name == "pods" else _INSUFFICIENT + name


def is_resource_text(text: str) -> bool:
    """Whether a message is a resource's (room), not a constraint's."""
    return text == _TOO_MANY_PODS[0] or text.startswith(_INSUFFICIENT)


def texts(bits: int, short: Iterable[str] = ()) -> list[str]:
    """The messages of ``bits``: the constraint bits in table order, then one per name in
    ``short`` (the resources the node has too little of, in column order)."""
    out = [text for bit, text in TEXTS.items() if bits & bit]
    out.extend(resource_text(name) for name in short)
    return out


def taint_text(key: str, value: str) -> str:
    """kube's message for a node with a taint the pod does not tolerate, naming it
    (``node(s) had untolerated taint {dedicated: gpu}``): kube-scheduler's TaintToleration
    filter (``plugins/tainttoleration/taint_toleration.go``) through v1.33; later
    releases dropped the taint from the message, esched keeps it (it says what to do)."""
    return f"{TEXTS[TAINT]} {{{key}: {value}}}"


#: Taint effects that keep a pod off a node (kube: ``DoNotScheduleTaintsFilterFunc``).
_NO_SCHEDULE = ("NoSchedule", "NoExecute")


def untolerated_taint(
    taints: Iterable[tuple[str, str, str]], tolerations: Iterable[dict[str, Any]]
) -> tuple[str, str] | None:
    """The first ``(key, value)`` of ``taints`` ((key, value, effect), in the node's
    order) with a NoSchedule / NoExecute effect that no toleration tolerates, as
    kube's ``FindMatchingUntoleratedTaint``; None if every such taint is tolerated."""
    tols = list(tolerations)
    for key, value, effect in taints:
        if effect in _NO_SCHEDULE and not any(tolerates(t, key, value, effect) for t in tols):
            return key, value
    return None


def decision_code(name: str) -> str:
    """The rejection code of a binding short of resource ``name``: the same code as an
    unschedulable report's (``Insufficient.cpu``, ``TooManyPods``)."""
    return reason_code(resource_text(name))


def constraint_code(bits: int) -> str:
    """The code of the first constraint bit in ``bits`` (table order: ``NodeNotFound``,
    ``NodeUnschedulable``, ``NodeAffinity``, ``TaintToleration``)."""
    for bit, (_text, code) in _TABLE.items():
        if bits & bit:
            return code
    raise ValueError(f"no constraint bit in {bits:#x}")


#: Codes of logs written before the one spelling -> today's. Resource shortages were
#: ``insufficient_<name>`` in rejections (:func:`canonical_code` reads those by rule).
LEGACY_CODES = {
    "malformed": "Malformed",
    "pod_unknown": "PodUnknown",
    "pod_not_pending": "PodNotPending",
    "node_gone": "NodeNotFound",
    "resources_mismatch": "ResourcesMismatch",
    "constraint": "Constraint",
    "gang_unknown": "GangUnknown",
    "gang_incomplete": "GangIncomplete",
    "victim_gone": "VictimGone",
    "preemption_illegal": "PreemptionIllegal",
    "victim_gang_split": "VictimGangSplit",
    "node_reserved": NODE_RESERVED,
    "reclaim_illegal": "ReclaimIllegal",
    "queue_closed": "QueueClosed",
    "queue_capability": "QueueCapability",
    "device_unavailable": INSUFFICIENT_GPU_DEVICES,
}


def canonical_code(code: str) -> str:
    """A reason code as spelled today, given any spelling a log may hold (older logs
    wrote rejections in snake case: ``insufficient_cpu``, ``pod_not_pending``)."""
    new = LEGACY_CODES.get(code)
    if new is not None:
        return new
    if code.startswith("insufficient_"):
        return decision_code(code[len("insufficient_") :])
    return code


def reason_text(code: str) -> str:
    """kube's message for a code of this table (``Insufficient.cpu`` -> ``Insufficient
    cpu``, ``TaintToleration`` -> ``node(s) had untolerated taint``), the scheduling
    pass's own codes in words (``NodeReserved``); another code as is. The inverse of
    :func:`reason_code`."""
    if code == _TOO_MANY_PODS[1]:
        return _TOO_MANY_PODS[0]
    if code.startswith("Insufficient."):
        return _INSUFFICIENT + code[len("Insufficient.") :]
    return _TEXTS_BY_CODE.get(code) or _PASS_TEXTS.get(code, code)


def reason_code(text: str) -> str:
    """The event code of a message (``Insufficient cpu`` -> ``Insufficient.cpu``).

    A code is a letter followed by letters, digits, ``_ . / : -`` (schemas/README.md);
    a message outside the table is cleaned into one.
    """
    code = _CODES.get(text)
    if code is not None:
        return code
    if text.startswith(TEXTS[TAINT] + " {"):
        return _CODES[TEXTS[TAINT]]  # taint_text: the taint named, the same reason
    if text == _TOO_MANY_PODS[0]:
        return _TOO_MANY_PODS[1]
    if text.startswith(_INSUFFICIENT):
        return "Insufficient." + text[len(_INSUFFICIENT) :].replace(" ", "_")
    cleaned = "".join(c if c.isalnum() or c in "_./:-" else "_" for c in text).strip("_")
    return cleaned if cleaned[:1].isalpha() else f"R{cleaned}"


def unschedulable_message(n_nodes: int, reasons: Mapping[str, int], extra: str = "") -> str:
    """kube-scheduler's FitError message from counts of nodes per reason code:
    ``0/5 nodes are available: 2 node(s) had untolerated taint, 3 Insufficient cpu.``
    (each "count text", sorted as strings, as kube's sortReasonsHistogram), then
    ``extra`` (kube's PostFilter message, e.g. why preemption did not help)."""
    parts = sorted(f"{count} {reason_text(code)}" for code, count in reasons.items())
    message = f"0/{n_nodes} nodes are available: {', '.join(parts)}."
    return f"{message} {extra}" if extra else message
