"""Pod rules JSON Schema does not express: toleration and node-affinity operators,
scheduling gates, and the pod's checks in order (refused fields, rules, quantities)."""

from __future__ import annotations

import re
from typing import Any

from esched.schemas._requests import DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST
from esched.schemas.quantity import MAX_BASE_UNITS
from esched.schemas.validator.errors import InvalidEvent, short_repr
from esched.schemas.validator.quantities import (
    check_pod_totals,
    containers_total,
    resource_list_units,
)
from esched.schemas.validator.refused import check_refused_fields

_INT_VALUE = re.compile(r"^-?[0-9]{1,18}\Z")


def _rule_error(field: str, text: str) -> InvalidEvent:
    return InvalidEvent("schema", f"{field}: {text}", field)


def _check_requirements(reqs: Any, path: str) -> None:
    """NodeSelectorRequirement rules between operator and values (as kube-apiserver)."""
    for i, req in enumerate(reqs or ()):
        op, values = req["operator"], req.get("values")
        field = f"{path}[{i}].values"
        if op in ("In", "NotIn"):
            if not values:
                raise _rule_error(field, f"must be non-empty for operator {op}")
        elif op in ("Exists", "DoesNotExist"):
            if values:
                raise _rule_error(field, f"must be empty for operator {op}")
        elif not values or len(values) != 1 or not _INT_VALUE.match(values[0]):
            raise _rule_error(
                field, f"must be exactly one integer for operator {op} (got {short_repr(values)})"
            )


def _check_rules(spec: dict[str, Any]) -> None:
    """The if/then rules of the Pod schema (marked ``x-python-check``), in Python."""
    for i, tol in enumerate(spec.get("tolerations") or ()):
        if tol.get("operator", "Equal") == "Exists":
            if tol.get("value"):
                raise _rule_error(
                    f"data.spec.tolerations[{i}].value", "must be empty when operator is Exists"
                )
        elif not tol.get("key"):
            raise _rule_error(
                f"data.spec.tolerations[{i}].key", "is required unless operator is Exists"
            )
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if affinity else None
    if not node_affinity:
        return
    base = "data.spec.affinity.nodeAffinity"
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    for t, term in enumerate((required or {}).get("nodeSelectorTerms") or ()):
        path = f"{base}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{t}]"
        _check_requirements(term.get("matchExpressions"), f"{path}.matchExpressions")
        _check_requirements(term.get("matchFields"), f"{path}.matchFields")
    for t, pref in enumerate(
        node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    ):
        path = f"{base}.preferredDuringSchedulingIgnoredDuringExecution[{t}].preference"
        term = pref["preference"]
        _check_requirements(term.get("matchExpressions"), f"{path}.matchExpressions")
        _check_requirements(term.get("matchFields"), f"{path}.matchFields")


#: The scoring defaults a container may add to a pod's totals (the request rule's).
_DEFAULTS_PER_CONTAINER = DEFAULT_MEMORY_REQUEST + DEFAULT_MILLI_CPU_REQUEST


def _check_gates(gates: list[dict[str, Any]], path: str) -> None:
    """kube's validateSchedulingGates: gate names are unique."""
    seen: set[str] = set()
    for i, gate in enumerate(gates):
        if gate["name"] in seen:
            raise _rule_error(f"{path}[{i}].name", f"duplicate scheduling gate {gate['name']!r}")
        seen.add(gate["name"])


_LABEL_OPS = ("In", "NotIn", "Exists", "DoesNotExist")
_POLICIES = ("Honor", "Ignore")


def _check_label_selector(sel: Any, path: str) -> None:
    """A metav1.LabelSelector: matchLabels of strings; In/NotIn with values,
    Exists/DoesNotExist without (kube's ValidateLabelSelector)."""
    if not isinstance(sel, dict):
        raise _rule_error(path, "must be an object")
    labels = sel.get("matchLabels") or {}
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise _rule_error(f"{path}.matchLabels", "must map label keys to strings")
    for i, req in enumerate(sel.get("matchExpressions") or ()):
        field = f"{path}.matchExpressions[{i}]"
        if not isinstance(req, dict) or not isinstance(req.get("key"), str):
            raise _rule_error(field, "must have a key")
        op, values = req.get("operator"), req.get("values")
        if op not in _LABEL_OPS:
            raise _rule_error(f"{field}.operator", f"must be one of {', '.join(_LABEL_OPS)}")
        if op in ("In", "NotIn") and not values:
            raise _rule_error(f"{field}.values", f"must be non-empty for operator {op}")
        if op in ("Exists", "DoesNotExist") and values:
            raise _rule_error(f"{field}.values", f"must be empty for operator {op}")


def _check_pod_affinity_term(term: Any, path: str) -> None:
    if not isinstance(term, dict) or not term.get("topologyKey"):
        raise _rule_error(f"{path}.topologyKey", "is required")
    if term.get("labelSelector") is not None:
        _check_label_selector(term["labelSelector"], f"{path}.labelSelector")
    if term.get("namespaceSelector") is not None:
        _check_label_selector(term["namespaceSelector"], f"{path}.namespaceSelector")
    namespaces = term.get("namespaces")
    if namespaces is not None and (
        not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces)
    ):
        raise _rule_error(f"{path}.namespaces", "must be a list of namespace names")


def _check_pod_affinity_terms(affinity: dict[str, Any]) -> None:
    """Pod (anti-)affinity terms, required and preferred, as the API server checks them."""
    for key in ("podAffinity", "podAntiAffinity"):
        base = f"data.spec.affinity.{key}.requiredDuringSchedulingIgnoredDuringExecution"
        for i, term in enumerate(
            (affinity.get(key) or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or ()
        ):
            _check_pod_affinity_term(term, f"{base}[{i}]")
        base = f"data.spec.affinity.{key}.preferredDuringSchedulingIgnoredDuringExecution"
        for i, wterm in enumerate(
            (affinity.get(key) or {}).get("preferredDuringSchedulingIgnoredDuringExecution") or ()
        ):
            path = f"{base}[{i}]"
            w = wterm.get("weight") if isinstance(wterm, dict) else None
            if not isinstance(w, int) or isinstance(w, bool) or not 1 <= w <= 100:
                raise _rule_error(f"{path}.weight", "must be in the range 1-100")
            _check_pod_affinity_term(wterm.get("podAffinityTerm"), f"{path}.podAffinityTerm")


def _check_spread(constraints: Any) -> None:
    """topologySpreadConstraints as kube's validateTopologySpreadConstraints checks them."""
    for i, c in enumerate(constraints):
        path = f"data.spec.topologySpreadConstraints[{i}]"
        if not isinstance(c, dict):
            raise _rule_error(path, "must be an object")
        skew = c.get("maxSkew")
        if not isinstance(skew, int) or isinstance(skew, bool) or skew < 1:
            raise _rule_error(f"{path}.maxSkew", "must be an integer greater than zero")
        if not c.get("topologyKey") or not isinstance(c["topologyKey"], str):
            raise _rule_error(f"{path}.topologyKey", "is required")
        if c.get("whenUnsatisfiable") not in ("DoNotSchedule", "ScheduleAnyway"):
            raise _rule_error(
                f"{path}.whenUnsatisfiable", "must be DoNotSchedule or ScheduleAnyway"
            )
        md = c.get("minDomains")
        if md is not None and (not isinstance(md, int) or isinstance(md, bool) or md < 1):
            raise _rule_error(f"{path}.minDomains", "must be an integer greater than zero")
        for key in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
            if c.get(key) is not None and c[key] not in _POLICIES:
                raise _rule_error(f"{path}.{key}", "must be Honor or Ignore")
        if c.get("labelSelector") is not None:
            _check_label_selector(c["labelSelector"], f"{path}.labelSelector")


def check_pod(data: dict[str, Any]) -> None:
    """A submitted pod's checks beyond its schema: refused fields, spread and inter-pod
    terms, scheduling gates, toleration and node-affinity rules, every quantity in
    base units and the totals the fold derives within range."""
    spec = data["spec"]
    check_refused_fields(spec)
    if spec.get("topologySpreadConstraints"):
        _check_spread(spec["topologySpreadConstraints"])
    affinity = spec.get("affinity")
    if isinstance(affinity, dict) and (
        affinity.get("podAffinity") or affinity.get("podAntiAffinity")
    ):
        _check_pod_affinity_terms(affinity)
    if spec.get("schedulingGates"):
        _check_gates(spec["schedulingGates"], "data.spec.schedulingGates")
        if spec.get("nodeName"):
            # The API server's rule: a bound pod cannot wait for gates.
            raise _rule_error(
                "data.spec.nodeName", "cannot be set until all schedulingGates have been cleared"
            )
    if spec.get("tolerations") or spec.get("affinity"):
        _check_rules(spec)
    total = containers_total(spec["containers"], "data.spec.containers")
    if spec.get("initContainers"):
        total += containers_total(spec["initContainers"], "data.spec.initContainers")
    if spec.get("overhead"):
        total += sum(resource_list_units(spec["overhead"], "data.spec.overhead").values())
    pod_level = spec.get("resources")
    if pod_level:
        for kind in ("requests", "limits"):
            if pod_level.get(kind):
                res = resource_list_units(pod_level[kind], f"data.spec.resources.{kind}")
                total += sum(res.values())
    # Every total the fold derives is at most the sum of all quantities plus the
    # scoring defaults (0.1 cpu, 200 MiB per container, init and sidecar containers
    # included: sidecars add theirs to the sum): only a pod near the limit pays for
    # the exact walk.
    containers = len(spec["containers"]) + len(spec.get("initContainers") or ())
    if total + containers * _DEFAULTS_PER_CONTAINER > MAX_BASE_UNITS:
        check_pod_totals(data)


def check_pod_update(data: dict[str, Any]) -> None:
    """An ``esched.pod.updated``'s checks beyond its schema: its scheduling gates."""
    gates = (data.get("spec") or {}).get("schedulingGates")
    if gates:
        _check_gates(gates, "data.spec.schedulingGates")
