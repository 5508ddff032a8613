"""Constraint compilation: a pod class's selector, affinity, node groups and
tolerations as bit masks over the state's interned labels and taints.

Runs once per class (and again when new labels or taints are interned); the per-node
checks over the masks are :mod:`esched.core._feasibility` (``_feasibility.pxd``).
An expression is a mode (:data:`ANY`: some bit of its mask is on the node,
:data:`NONE`: none is, :data:`FALSE`: never matches) and a mask; term 0 is the
nodeSelector and the queue's required/anti node groups (ANDed), terms 1.. the
required node affinity's nodeSelectorTerms (ORed). Compiled by Cython: a random
workload compiles thousands of classes per placer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from esched.core.queues import NODE_GROUP_LABEL
from esched.schemas.objects import NODE_NAME_FIELD

__all__ = [
    "ANY",
    "FALSE",
    "NODE_IN",
    "NODE_NOT_IN",
    "NONE",
    "CompiledClass",
    "compile_class",
    "intern_stamp",
    "tolerates",
]

# Expression modes (the same values as _feasibility.pxd's EXPR_*; _placer checks at import).
ANY = 0
NONE = 1
FALSE = 2
NODE_IN = 3
NODE_NOT_IN = 4



class CompiledClass:
    """The arrays behind a class's ClassView and the intern sizes they were built for.

    ``expr_mask`` uint64 [n_exprs, label_words], ``expr_mode`` int8 [n_exprs],
    ``term_off`` int32 [n_terms + 1], ``intolerable`` uint64 [taint_words] (the
    NoSchedule/NoExecute taints not tolerated), ``pref_mask`` uint64 [label_words] (the
    queue's preferred node groups), ``expr_node_off`` int32 [n_exprs + 1] and
    ``expr_nodes`` int32 (the node slots of the NODE_IN / NODE_NOT_IN expressions),
    ``pinned`` / ``pin`` (spec.nodeName and its slot, -1 if no such node). Node slots
    are valid while the state's ``node_gen`` equals ``node_gen`` (-1: none named), as
    is ``port_conflict`` uint64 [port_words] (the host-port keys that, bound on a node,
    conflict with the class's host ports; ``has_ports``). ``term_off`` holds the
    ``n_terms`` required terms (term 0 included), then the ``n_pref_terms`` preferred
    ones (weights ``pref_weight`` int64); ``prefer_intolerable`` uint64 [taint_words]:
    the PreferNoSchedule taints not tolerated (``has_prefer_taints``).
    """

    __slots__ = ("stamp", "expr_mask", "expr_mode", "term_off", "intolerable",
                 "tolerates_unschedulable", "has_labels", "has_taints", "pref_mask", "has_pref",
                 "expr_node_off", "expr_nodes", "pinned", "pin", "node_gen", "port_conflict",
                 "has_ports", "n_terms", "pref_weight", "n_pref_terms", "prefer_intolerable",
                 "has_prefer_taints")

    def __init__(self, stamp, expr_mask, expr_mode, term_off, intolerable,
                 tolerates_unschedulable, has_labels, has_taints, pref_mask, has_pref,
                 expr_node_off, expr_nodes, pinned, pin, node_gen, port_conflict, has_ports,
                 n_terms=1, pref_weight=None, n_pref_terms=0, prefer_intolerable=None,
                 has_prefer_taints=False):
        self.n_terms = n_terms
        self.pref_weight = pref_weight
        self.n_pref_terms = n_pref_terms
        self.prefer_intolerable = prefer_intolerable
        self.has_prefer_taints = has_prefer_taints
        self.port_conflict = port_conflict
        self.has_ports = has_ports
        self.expr_node_off = expr_node_off
        self.expr_nodes = expr_nodes
        self.pinned = pinned
        self.pin = pin
        self.node_gen = node_gen
        self.stamp = stamp
        self.expr_mask = expr_mask
        self.expr_mode = expr_mode
        self.term_off = term_off
        self.intolerable = intolerable
        self.tolerates_unschedulable = tolerates_unschedulable
        self.has_labels = has_labels
        self.has_taints = has_taints
        self.pref_mask = pref_mask
        self.has_pref = has_pref


def intern_stamp(state: Any) -> tuple[int, int, int, int]:
    """What a compiled class depends on: the interned labels and taints, and their widths."""
    return (len(state.label_strs), len(state.taint_strs), state.label_words, state.taint_words)


def tolerates(tol: dict, key: str, value: str, effect: str) -> bool:
    """v1helper.TolerationsTolerateTaint / Toleration.ToleratesTaint for one toleration."""
    if tol.get("effect") and tol.get("effect") != effect:
        return False
    tkey = tol.get("key") or ""
    op = tol.get("operator") or "Equal"
    if tkey == "":
        return op == "Exists"
    if tkey != key:
        return False
    if op == "Exists":
        return True
    return op == "Equal" and (tol.get("value") or "") == value


def _int_or_none(text: Any) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _term_exprs(st: Any, term: dict, exprs: list, prefix: list) -> bool:
    """Append one NodeSelectorTerm's expressions (after ``prefix``, already compiled
    ones ANDed in) to ``exprs``; True if it names nodes (matchFields)."""
    node_index = st.node_index
    names_nodes = False
    exprs.extend(prefix)
    names_nodes = any(m >= NODE_IN for m, _ in prefix)
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        exprs.append((FALSE, []))  # kube: an empty term matches nothing
    for e in fields:
        # kube's NodeSelectorRequirementsAsFieldSelector: metadata.name with In or
        # NotIn; anything else is an error there, a term that never matches here.
        op, values = e.get("operator"), e.get("values") or []
        if e.get("key") != NODE_NAME_FIELD or op not in ("In", "NotIn"):
            exprs.append((FALSE, []))
            continue
        names_nodes = True
        slots = sorted({node_index[v] for v in values if v in node_index})
        exprs.append((NODE_IN if op == "In" else NODE_NOT_IN, slots))
    for e in expressions:
        key, op, values = e.get("key", ""), e.get("operator"), e.get("values") or []
        if op == "In":
            exprs.append((ANY, _bits_for_values(st, key, values)))
        elif op == "NotIn":
            exprs.append((NONE, _bits_for_values(st, key, values)))
        elif op == "Exists":
            exprs.append((ANY, [st.label_ids[key]] if key in st.label_ids else []))
        elif op == "DoesNotExist":
            exprs.append((NONE, [st.label_ids[key]] if key in st.label_ids else []))
        elif op in ("Gt", "Lt") and len(values) == 1 and _int_or_none(values[0]) is not None:
            bound = int(values[0])
            prefix_text = key + "="
            hits = []
            for text, bit in st.label_ids.items():
                if text.startswith(prefix_text):
                    num = _int_or_none(text[len(prefix_text) :])
                    if num is not None and (num > bound if op == "Gt" else num < bound):
                        hits.append(bit)
            exprs.append((ANY, hits))
        else:
            exprs.append((FALSE, []))
    return names_nodes


def _bits_for_values(st: Any, key: str, values: Any) -> list:
    return [st.label_ids[f"{key}={v}"] for v in values if f"{key}={v}" in st.label_ids]


def compile_class(state: Any, cid: int, added: dict | None = None) -> CompiledClass:
    """Class ``cid`` of ``state`` (a ClusterState) compiled against its interned sets.

    ``added``: the profile's NodeAffinity ``addedAffinity`` ({"required": NodeSelector,
    "preferred": [PreferredSchedulingTerm]}), applied to every pod of the profile.
    """
    st = state
    spec = st.class_specs[cid]
    cons = spec["constraints"] or {}
    W = st.label_words
    exprs = []  # (mode, [bits]); NODE_IN / NODE_NOT_IN: (mode, [node slots])
    node_index = st.node_index
    names_nodes = False
    offsets = [0]

    def bits_for_values(key, values):
        return _bits_for_values(st, key, values)

    # term 0: nodeSelector, every pair must be present
    for k, v in (cons.get("nodeSelector") or {}).items():
        exprs.append((ANY, bits_for_values(k, [v])))
    # The queue's node-group affinity (Volcano), ANDed like the selector: in one of
    # the required groups, in none of the anti groups (preferred is not a filter).
    node_group = cons.get("nodeGroup") or {}
    if node_group.get("required"):
        exprs.append((ANY, bits_for_values(NODE_GROUP_LABEL, node_group["required"])))
    if node_group.get("anti"):
        exprs.append((NONE, bits_for_values(NODE_GROUP_LABEL, node_group["anti"])))
    offsets.append(len(exprs))
    pref = np.zeros(max(W, 1), dtype=np.uint64)
    for b in bits_for_values(NODE_GROUP_LABEL, node_group.get("preferred") or ()):
        pref[b >> 6] |= np.uint64(1) << np.uint64(b & 63)
    # kube's NodeAffinity with the profile's addedAffinity: its required terms ANDed
    # with the pod's (a node must match one term of each), its preferred terms scored
    # with the pod's.
    added = added or {}
    for required in (cons.get("required"), added.get("required")):
        terms = (required or {}).get("nodeSelectorTerms") or ()
        if not terms:
            continue
        if len(offsets) > 2:
            # Second set of required terms (the profile's, after the pod's): ORed terms
            # cannot carry an AND of two sets, so the product of both (kube ANDs them).
            first = [exprs[offsets[i]:offsets[i + 1]] for i in range(1, len(offsets) - 1)]
            del exprs[offsets[1]:]
            del offsets[2:]
            for a in first:
                for term in terms:
                    names_nodes |= _term_exprs(st, term, exprs, a)
                    offsets.append(len(exprs))
            continue
        for term in terms:
            names_nodes |= _term_exprs(st, term, exprs, [])
            offsets.append(len(exprs))
    n_terms = len(offsets) - 1
    weights = []
    for preferred in list(cons.get("preferred") or ()) + list(added.get("preferred") or ()):
        term = preferred.get("preference") or {}
        # kube's NewPreferredSchedulingTerms: a zero weight or an empty term is skipped.
        if not preferred.get("weight") or not (
            term.get("matchExpressions") or term.get("matchFields")
        ):
            continue
        names_nodes |= _term_exprs(st, term, exprs, [])
        offsets.append(len(exprs))
        weights.append(int(preferred["weight"]))
    n_e = len(exprs)
    mask = np.zeros((max(n_e, 1), W), dtype=np.uint64)
    mode = np.zeros(max(n_e, 1), dtype=np.int8)
    node_off = np.zeros(n_e + 1, dtype=np.int32)
    nodes: list = []
    for i, (m, bits) in enumerate(exprs):
        mode[i] = m
        if m >= NODE_IN:
            nodes.extend(bits)
        else:
            for b in bits:
                mask[i, b >> 6] |= np.uint64(1) << np.uint64(b & 63)
        node_off[i + 1] = len(nodes)
    node_name = cons.get("nodeName")
    pin = -1
    if node_name:
        names_nodes = True
        pin = node_index.get(node_name, -1)
    tolerations = cons.get("tolerations") or []
    intol = np.zeros(st.taint_words, dtype=np.uint64)
    any_taint = False
    for bit, (key, value, effect) in enumerate(st.taint_strs):
        if effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, key, value, effect) for t in tolerations):
            intol[bit >> 6] |= np.uint64(1) << np.uint64(bit & 63)
            any_taint = True
    # TaintToleration's score: the PreferNoSchedule taints no toleration tolerates
    # (a toleration with no effect tolerates every effect, as in kube).
    prefer = np.zeros(st.taint_words, dtype=np.uint64)
    for bit, (key, value, effect) in enumerate(st.taint_strs):
        if effect == "PreferNoSchedule" and not any(
            tolerates(t, key, value, effect) for t in tolerations
        ):
            prefer[bit >> 6] |= np.uint64(1) << np.uint64(bit & 63)
    ports = st.class_ports[cid]
    conflict = np.zeros(st.port_words, dtype=np.uint64)
    if ports is not None:
        names_nodes = True  # the mask is as wide as the state's port words
        for b in ports[1]:
            conflict[b >> 6] |= np.uint64(1) << np.uint64(b & 63)
    return CompiledClass(
        stamp=intern_stamp(st),
        expr_mask=mask,
        expr_mode=mode,
        term_off=np.asarray(offsets, dtype=np.int32),
        intolerable=intol,
        tolerates_unschedulable=any(
            tolerates(t, "node.kubernetes.io/unschedulable", "", "NoSchedule") for t in tolerations
        ),
        has_labels=offsets[n_terms] > 0,
        has_taints=any_taint,
        pref_mask=pref,
        has_pref=bool(pref.any()),
        expr_node_off=node_off,
        expr_nodes=np.asarray(nodes or [-1], dtype=np.int32),
        pinned=bool(node_name),
        pin=pin,
        node_gen=st.node_gen if names_nodes else -1,
        port_conflict=conflict,
        has_ports=ports is not None,
        n_terms=n_terms,
        pref_weight=np.asarray(weights or [0], dtype=np.int64),
        n_pref_terms=len(weights),
        prefer_intolerable=prefer,
        has_prefer_taints=bool(prefer.any()),
    )
