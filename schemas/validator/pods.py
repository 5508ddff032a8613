"""Pod rules JSON Schema does not express: toleration and node-affinity operators,
scheduling gates, and the pod's checks in order (refused fields, rules, quantities)."""

from __future__ import annotations

import re
from typing import Any

from esched.schemas.quantity import MAX_BASE_UNITS
from esched.schemas.validator.errors import InvalidEvent, _short
from esched.schemas.validator.quantities import (
    _check_pod_totals,
    _containers,
    _resource_list,
)
from esched.schemas.validator.refused import _check_refused_fields

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
                field, f"must be exactly one integer for operator {op} (got {_short(values)})"
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


_DEFAULTS_PER_CONTAINER = 200 * 1024 * 1024 + 100


def _check_gates(gates: list[dict[str, Any]], path: str) -> None:
    """kube's validateSchedulingGates: gate names are unique."""
    seen: set[str] = set()
    for i, gate in enumerate(gates):
        if gate["name"] in seen:
            raise _rule_error(f"{path}[{i}].name", f"duplicate scheduling gate {gate['name']!r}")
        seen.add(gate["name"])


def _check_pod(data: dict[str, Any]) -> None:
    spec = data["spec"]
    _check_refused_fields(spec)
    if spec.get("schedulingGates"):
        _check_gates(spec["schedulingGates"], "data.spec.schedulingGates")
        if spec.get("nodeName"):
            # The API server's rule: a bound pod cannot wait for gates.
            raise _rule_error(
                "data.spec.nodeName", "cannot be set until all schedulingGates have been cleared"
            )
    if spec.get("tolerations") or spec.get("affinity"):
        _check_rules(spec)
    total = _containers(spec["containers"], "data.spec.containers")
    if spec.get("initContainers"):
        total += _containers(spec["initContainers"], "data.spec.initContainers")
    if spec.get("overhead"):
        total += sum(_resource_list(spec["overhead"], "data.spec.overhead").values())
    pod_level = spec.get("resources")
    if pod_level:
        for kind in ("requests", "limits"):
            if pod_level.get(kind):
                res = _resource_list(pod_level[kind], f"data.spec.resources.{kind}")
                total += sum(res.values())
    # Every total the fold derives is at most the sum of all quantities plus the
    # scoring defaults (0.1 cpu, 200 MiB per container): only a pod near the limit
    # pays for the exact walk.
    if total + len(spec["containers"]) * _DEFAULTS_PER_CONTAINER > MAX_BASE_UNITS:
        _check_pod_totals(data)


def _check_pod_update(data: dict[str, Any]) -> None:
    gates = (data.get("spec") or {}).get("schedulingGates")
    if gates:
        _check_gates(gates, "data.spec.schedulingGates")
