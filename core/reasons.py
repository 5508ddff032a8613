"""Why a pod does not fit a node: the reason bits and their one wording.

The core's feasibility (``core/_feasibility.pxd``) answers with integer bits; this
module is their code table: each bit's message as kube-scheduler spells it
("Insufficient cpu", "node(s) didn't match Pod's node affinity/selector", ...), the
event code derived from that message (``Insufficient.cpu``, ``NodeAffinity``: the
``reasons`` keys of ``esched.pod.unschedulable``) and the commit service's rejection
code of a resource (``insufficient_cpu``, :func:`decision_code`). Strings exist only
at the edge: :meth:`esched.core.Placer.explain`, ``fits``, ``reason_texts``, events.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = [
    "NODE_NAME",
    "NODE_PORTS",
    "NON_RESOURCE",
    "NOT_ALIVE",
    "RESOURCE_SHIFT",
    "SELECTOR",
    "TAINT",
    "TEXTS",
    "UNSCHEDULABLE",
    "code_text",
    "decision_code",
    "is_resource_text",
    "reason_code",
    "resource_bit",
    "resource_text",
    "texts",
    "unschedulable_message",
]

# The bits (the same values as _feasibility.pxd's REASON_*; tests/core checks both).
NOT_ALIVE = 1
UNSCHEDULABLE = 2
SELECTOR = 4
TAINT = 8
NODE_NAME = 16
NODE_PORTS = 32
#: Bit index of resource column 0 (``bits >> RESOURCE_SHIFT``: the resource bits).
RESOURCE_SHIFT = 8
#: Resource columns with a bit of their own; columns beyond share the last bit.
RESOURCE_BITS = 56
#: Every bit that is not a resource's.
NON_RESOURCE = NOT_ALIVE | UNSCHEDULABLE | SELECTOR | TAINT | NODE_NAME | NODE_PORTS

#: Bit -> kube-scheduler's message, then its event code.
_TABLE = {
    NOT_ALIVE: ("node(s) not found", "NodeNotFound"),
    UNSCHEDULABLE: ("node(s) were unschedulable", "NodeUnschedulable"),
    SELECTOR: ("node(s) didn't match Pod's node affinity/selector", "NodeAffinity"),
    TAINT: ("node(s) had untolerated taint", "TaintToleration"),
    NODE_NAME: ("node(s) didn't match the requested node name", "NodeName"),
    NODE_PORTS: ("node(s) didn't have free ports for the requested pod ports", "NodePorts"),
}
#: Bit -> kube-scheduler's message, for the bits below RESOURCE_SHIFT.
TEXTS = {bit: text for bit, (text, _) in _TABLE.items()}
_CODES = {text: code for text, code in _TABLE.values()}
_TOO_MANY_PODS = ("Too many pods", "TooManyPods")
_INSUFFICIENT = "Insufficient "


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


def decision_code(name: str) -> str:
    """The commit service's rejection code of a binding short of resource ``name``
    (``insufficient_cpu``: the snake-case vocabulary of ``esched.placement.rejected``)."""
    return "insufficient_" + name


def reason_code(text: str) -> str:
    """The event code of a message (``Insufficient cpu`` -> ``Insufficient.cpu``).

    A code is a letter followed by letters, digits, ``_ . / : -`` (schemas/README.md);
    a message outside the table is cleaned into one.
    """
    code = _CODES.get(text)
    if code is not None:
        return code
    if text == _TOO_MANY_PODS[0]:
        return _TOO_MANY_PODS[1]
    if text.startswith(_INSUFFICIENT):
        return "Insufficient." + text[len(_INSUFFICIENT) :].replace(" ", "_")
    cleaned = "".join(c if c.isalnum() or c in "_./:-" else "_" for c in text).strip("_")
    return cleaned if cleaned[:1].isalpha() else f"R{cleaned}"


#: Codes of the scheduling pass's own reasons (no feasibility bit) -> their words.
_PASS_TEXTS = {
    "NodeReserved": "node(s) were reserved for another gang",
    "InsufficientGPUDevices": "node(s) had no GPU device with room",
    "NoNodes": "no nodes available to schedule pods",
}
_CODE_TEXTS = {code: text for text, code in _TABLE.values()} | {
    _TOO_MANY_PODS[1]: _TOO_MANY_PODS[0]
}


def code_text(code: str) -> str:
    """The message of an event code (the inverse of :func:`reason_code`)."""
    text = _CODE_TEXTS.get(code) or _PASS_TEXTS.get(code)
    if text is not None:
        return text
    if code.startswith("Insufficient."):
        return resource_text(code[len("Insufficient.") :])
    return code


def unschedulable_message(n_nodes: int, reasons: Mapping[str, int], extra: str = "") -> str:
    """kube-scheduler's FitError message from counts of nodes per reason code:
    ``0/5 nodes are available: 2 node(s) had untolerated taint, 3 Insufficient cpu.``
    (each "count text", sorted as strings, as kube's sortReasonsHistogram), then
    ``extra`` (kube's PostFilter message, e.g. why preemption did not help)."""
    parts = sorted(f"{count} {code_text(code)}" for code, count in reasons.items())
    message = f"0/{n_nodes} nodes are available: {', '.join(parts)}."
    return f"{message} {extra}" if extra else message
