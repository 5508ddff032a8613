"""Quantities: every Kubernetes quantity of an event converted to base units, a pod's
totals within the core's integer range, and a Volcano queue's resource order."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from esched.schemas.objects import pod_resource_requests
from esched.schemas.quantity import MAX_BASE_UNITS, QuantityError, to_base_units
from esched.schemas.validator.errors import InvalidEvent, short_repr


@lru_cache(maxsize=16384, typed=True)
def _units(is_cpu: bool, value: Any) -> int | str:
    """Base units of a quantity, or the reason it is invalid (both cached)."""
    try:
        return to_base_units("cpu" if is_cpu else "units", value, "q")
    except QuantityError as exc:
        return exc.reason


#: Base units of the quantity strings met so far, for cpu (``[True]``) and for every
#: other resource (``[False]``): the same few requests and limits recur across pods,
#: and one dict lookup of the string replaces a conversion (and building any key).
#: Strings only, so that ``True`` (``== 1``) never passes for ``1``; valid ones only.
_KNOWN: tuple[dict[str, int], dict[str, int]] = ({}, {})
_KNOWN_MAX = 8192


def _quantity(name: str, value: Any, path: str) -> int:
    is_cpu = name == "cpu"
    if value.__class__ is str:
        known = _KNOWN[is_cpu].get(value)
        if known is not None:
            return known
    try:
        units = _units(is_cpu, value)
    except TypeError:  # unhashable: not a quantity at all
        units = "must be a string or a number"
    if isinstance(units, str):  # a cache miss only (known strings returned above)
        field = f"{path}.{name}"
        text = f"{field}: invalid quantity {short_repr(value)}: {units}"
        raise InvalidEvent("quantity", text, field)
    if value.__class__ is str and len(_KNOWN[is_cpu]) < _KNOWN_MAX:
        _KNOWN[is_cpu][value] = units
    return units


def _known_total(values: dict[str, Any]) -> int:
    """The sum of a ResourceList's base units if every quantity is a string converted
    before, else -1."""
    other, cpu = _KNOWN
    total = 0
    for name, value in values.items():
        if value.__class__ is not str:
            return -1
        units = (cpu if name == "cpu" else other).get(value)
        if units is None:
            return -1
        total += units
    return total


def resource_list_units(values: Any, path: str) -> dict[str, int]:
    """Base units of each quantity of a ResourceList, or InvalidEvent naming ``path.name``."""
    if not values:
        return {}
    return {name: _quantity(name, v, path) for name, v in values.items()}


def containers_total(containers: Any, path: str) -> int:
    """Check every quantity of ``containers``; return the sum of all of them."""
    total = 0
    for i, c in enumerate(containers or ()):
        res = c.get("resources")
        if res:
            for kind in ("requests", "limits"):
                values = res.get(kind)
                if values:
                    known = _known_total(values)
                    if known < 0:  # the path only on a miss
                        known = sum(
                            resource_list_units(values, f"{path}[{i}].resources.{kind}").values()
                        )
                    total += known
    return total


def _units_of(name: str, value: Any, field: str) -> int:
    # pod_resource_requests' ``units``: every quantity was converted (and checked) before.
    return _quantity(name, value, field)


def check_pod_totals(data: dict[str, Any]) -> None:
    """Every total the fold derives from a pod (requests summed over containers, an
    init container's, the overhead added, a limit standing for a missing request,
    the scoring requests with their per-container defaults) within the core's
    integer range, so the fold of a stored pod never overflows."""
    fit, nonzero = pod_resource_requests(data, _units_of)
    for name, units in (
        *fit.items(),
        ("cpu (scoring)", nonzero[0]),
        ("memory (scoring)", nonzero[1]),
    ):
        if units > MAX_BASE_UNITS:
            field = "data.spec.containers"
            raise InvalidEvent(
                "quantity",
                f"{field}: the pod's total {name} request is {units} base units, over the "
                f"limit of {MAX_BASE_UNITS} (containers, init containers, overhead and "
                "limits standing for requests added up)",
                field,
            )


def check_node(data: dict[str, Any]) -> None:
    """A node's allocatable and capacity quantities in base units."""
    status = data.get("status") or {}
    resource_list_units(status.get("allocatable"), "data.status.allocatable")
    resource_list_units(status.get("capacity"), "data.status.capacity")


def check_podgroup(data: dict[str, Any]) -> None:
    """A PodGroup's minResources quantities in base units."""
    resource_list_units(data["spec"].get("minResources"), "data.spec.minResources")


def _not_above(
    lower: dict[str, int], lower_path: str, upper: dict[str, int], upper_path: str
) -> None:
    for name, units in lower.items():
        if name in upper and units > upper[name]:
            field = f"{lower_path}.{name}"
            raise InvalidEvent(
                "quantity",
                f"{field}: {units} base units exceed {upper_path}.{name} ({upper[name]}); "
                "a Volcano queue needs guarantee <= deserved <= capability",
                field,
            )


def check_queue(data: dict[str, Any]) -> None:
    """A queue's capability, deserved and guarantee quantities in base units, the
    guarantee within deserved and both within capability."""
    spec = data.get("spec") or {}
    cap = resource_list_units(spec.get("capability"), "data.spec.capability")
    des = resource_list_units(spec.get("deserved"), "data.spec.deserved")
    gua = resource_list_units(
        (spec.get("guarantee") or {}).get("resource"), "data.spec.guarantee.resource"
    )
    for i, cluster in enumerate(spec.get("extendClusters") or ()):
        resource_list_units(cluster.get("capacity"), f"data.spec.extendClusters[{i}].capacity")
    _not_above(des, "data.spec.deserved", cap, "data.spec.capability")
    _not_above(gua, "data.spec.guarantee.resource", des, "data.spec.deserved")
    _not_above(gua, "data.spec.guarantee.resource", cap, "data.spec.capability")


def check_usage(data: dict[str, Any]) -> None:
    """A usage report's per-node and per-pod quantities in base units."""
    for key in ("nodes", "pods"):
        for i, item in enumerate(data.get(key) or ()):
            resource_list_units(item["usage"], f"data.{key}[{i}].usage")
