"""A pure-Python reference of feasibility and kube's resource scoring, for tests only.

Written from kube-scheduler v1.30's Go (noderesources, nodeaffinity, tainttoleration),
independent of the Cython core, so property tests can compare the two.
"""

from __future__ import annotations

import math

from esched.schemas.objects import node_allocatable, pod_requests
from esched.schemas.quantity import to_base_units

DEFAULT_CPU = 100
DEFAULT_MEM = 200 * 1024 * 1024


def nonzero(pod: dict) -> tuple[int, int]:
    cpu = mem = 0
    for c in pod.get("spec", {}).get("containers") or []:
        r = dict((c.get("resources") or {}).get("limits") or {})
        r.update((c.get("resources") or {}).get("requests") or {})
        cpu += to_base_units("cpu", r["cpu"]) if "cpu" in r else DEFAULT_CPU
        mem += to_base_units("memory", r["memory"]) if "memory" in r else DEFAULT_MEM
    return cpu, mem


def _tolerated(tols, key, value, effect) -> bool:
    for t in tols or []:
        if t.get("effect") and t["effect"] != effect:
            continue
        op = t.get("operator") or "Equal"
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t["key"] != key:
            continue
        if op == "Exists" or (op == "Equal" and (t.get("value") or "") == value):
            return True
    return False


def _expr_ok(labels: dict, e: dict) -> bool:
    key, op, values = e["key"], e["operator"], e.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        try:
            have, bound = int(labels[key]), int(values[0])
        except (KeyError, ValueError, IndexError):
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def feasible(node: dict, used: dict, pod: dict) -> bool:
    spec = pod.get("spec") or {}
    alloc = node_allocatable(node)
    for r, q in pod_requests(pod).items():
        if q > 0 and used.get(r, 0) + q > alloc.get(r, 0):
            return False
    nspec = node.get("spec") or {}
    tols = spec.get("tolerations")
    if nspec.get("unschedulable") and not _tolerated(
        tols, "node.kubernetes.io/unschedulable", "", "NoSchedule"
    ):
        return False
    for t in nspec.get("taints") or []:
        if t["effect"] in ("NoSchedule", "NoExecute") and not _tolerated(
            tols, t["key"], t.get("value") or "", t["effect"]
        ):
            return False
    labels = node["metadata"].get("labels") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    req = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if req:
        terms = req.get("nodeSelectorTerms") or []
        if not any(
            t.get("matchExpressions") and all(_expr_ok(labels, e) for e in t["matchExpressions"])
            for t in terms
        ):
            return False
    return True


def least_allocated(node: dict, used_nz: tuple[int, int], pod: dict) -> int:
    alloc = node_allocatable(node)
    pc, pm = nonzero(pod)
    total = wsum = 0
    for cap, req in (
        (alloc.get("cpu", 0), used_nz[0] + pc),
        (alloc.get("memory", 0), used_nz[1] + pm),
    ):
        if cap == 0:
            continue
        total += 0 if req > cap else (cap - req) * 100 // cap
        wsum += 1
    return total // wsum if wsum else 0


def most_allocated(node: dict, used_nz: tuple[int, int], pod: dict) -> int:
    alloc = node_allocatable(node)
    pc, pm = nonzero(pod)
    total = wsum = 0
    for cap, req in (
        (alloc.get("cpu", 0), used_nz[0] + pc),
        (alloc.get("memory", 0), used_nz[1] + pm),
    ):
        if cap == 0:
            continue
        total += min(req, cap) * 100 // cap
        wsum += 1
    return total // wsum if wsum else 0


def balanced(node: dict, used: dict, pod: dict) -> int:
    alloc = node_allocatable(node)
    req = pod_requests(pod)
    fr = []
    for r in ("cpu", "memory"):
        if alloc.get(r, 0) == 0:
            continue
        fr.append(min(1.0, (used.get(r, 0) + req.get(r, 0)) / alloc[r]))
    std = 0.0
    if len(fr) == 2:
        std = abs((fr[0] - fr[1]) / 2)
    elif len(fr) > 2:
        mean = sum(fr) / len(fr)
        std = math.sqrt(sum((f - mean) ** 2 for f in fr) / len(fr))
    return int((1 - std) * 100)


def _normalize(raw: dict, reverse: bool) -> dict:
    """kube's helper.DefaultNormalizeScore(MaxNodeScore, reverse) over ``raw``."""
    top = max(raw.values(), default=0)
    if top == 0:
        return {n: (100 if reverse else 0) for n in raw}
    return {n: (100 - 100 * r // top if reverse else 100 * r // top) for n, r in raw.items()}


def taint_toleration(nodes: list, pod: dict) -> dict:
    """TaintToleration's normalized scores over ``nodes`` (the scored ones): the count
    of PreferNoSchedule taints the pod does not tolerate, reverse-normalized."""
    tols = pod.get("spec", {}).get("tolerations")
    raw = {
        n["metadata"]["name"]: sum(
            1
            for t in n["spec"].get("taints") or []
            if t["effect"] == "PreferNoSchedule"
            and not _tolerated(tols, t["key"], t.get("value") or "", t["effect"])
        )
        for n in nodes
    }
    return _normalize(raw, True)


def node_affinity(nodes: list, pod: dict) -> dict:
    """NodeAffinity's normalized scores over ``nodes``: the weights of the preferred
    terms each matches (every expression of the term), normalized."""
    terms = ((pod.get("spec", {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    ) or []
    raw = {}
    for n in nodes:
        labels = n["metadata"].get("labels") or {}
        raw[n["metadata"]["name"]] = sum(
            t["weight"]
            for t in terms
            if t["preference"].get("matchExpressions")
            and all(_expr_ok(labels, e) for e in t["preference"]["matchExpressions"])
        )
    return _normalize(raw, False)
