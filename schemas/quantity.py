"""Kubernetes resource quantities, parsed exactly into integer base units.

Base units: ``cpu`` in milli-CPU, everything else (memory, ephemeral-storage,
``pods``, extended resources such as ``nvidia.com/gpu``) in whole units (bytes,
counts). Parsing uses exact rational arithmetic, so ``1.5Gi`` is exactly
1610612736 bytes and ``0.1`` CPU is exactly 100 milli-CPU. A value that is not a
whole number of base units is rounded *up*, as Kubernetes' ``Value()`` and
``MilliValue()`` do: a request is never under-counted.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

__all__ = [
    "MAX_BASE_UNITS",
    "MAX_QUANTITY_CHARS",
    "QuantityError",
    "format_units",
    "human_pairs",
    "human_units",
    "parse_quantity",
    "resource_list",
    "to_base_units",
]

#: Larger than any real node (2**62 bytes is 4 EiB); beyond it a value is absurd, and
#: keeping below int64 lets the core use fixed-width integers without overflow checks.
MAX_BASE_UNITS = 2**62
#: Longer strings are rejected before parsing: no real quantity needs more, and it
#: bounds the work (and the parse cache's memory) an adversarial event can cause.
MAX_QUANTITY_CHARS = 64

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?[0-9]+)|(?P<dec>[numkMGTPE]?))$"
)


class QuantityError(ValueError):
    """An invalid resource quantity; ``field`` names where it was found."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        shown = repr(value)
        if len(shown) > 80:  # keep dead-letter reasons readable
            shown = shown[:77] + "..."
        super().__init__(f"{field}: invalid quantity {shown}: {reason}")


@lru_cache(maxsize=65536)
def _parse_str(text: str) -> Fraction:
    m = _QUANTITY.match(text.strip())
    if m is None:
        raise ValueError("not a Kubernetes quantity (e.g. 250m, 1.5, 2Gi, 512Mi, 1e3)")
    num = Fraction(m["num"])
    if m["bin"]:
        return num * _BINARY[m["bin"]]
    if m["exp"]:
        exp = int(m["exp"][1:])
        if abs(exp) > 30:
            raise ValueError("exponent out of range")
        return num * Fraction(10) ** exp
    return num * _DECIMAL[m["dec"] or ""]


def parse_quantity(value: object, field: str = "quantity") -> Fraction:
    """Parse a quantity (string in Kubernetes notation, or a JSON number) exactly."""
    if isinstance(value, bool):
        raise QuantityError(field, value, "a boolean is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        # repr() gives the shortest decimal that round-trips: 0.1 stays 1/10.
        value = repr(value)
    if not isinstance(value, str):
        raise QuantityError(field, value, "must be a string or a number")
    if len(value) > MAX_QUANTITY_CHARS:
        raise QuantityError(field, value, f"too long (more than {MAX_QUANTITY_CHARS} characters)")
    try:
        return _parse_str(value)
    except ValueError as exc:
        raise QuantityError(field, value, str(exc)) from None


def to_base_units(resource: str, value: object, field: str | None = None) -> int:
    """Convert a quantity of ``resource`` to integer base units (milli-CPU for cpu)."""
    field = field or resource
    q = parse_quantity(value, field)
    if resource == "cpu":
        q *= 1000
    if q < 0:
        raise QuantityError(field, value, "must not be negative")
    units = -((-q.numerator) // q.denominator)  # ceiling
    if units > MAX_BASE_UNITS:
        raise QuantityError(field, value, f"absurdly large (> {MAX_BASE_UNITS} base units)")
    return units


def resource_list(values: dict | None, field: str) -> dict[str, int]:
    """Convert a Kubernetes ResourceList (``{"cpu": "500m", ...}``) to base units."""
    if not values:
        return {}
    return {name: to_base_units(name, v, f"{field}.{name}") for name, v in values.items()}


def format_units(resource: str, units: int) -> str:
    """Base units back in Kubernetes notation, for messages: ``cpu`` as cores or
    ``m``, binary sizes as ``Ki``..``Ei`` when exact, counts as plain integers."""
    if resource == "cpu":
        return str(units // 1000) if units % 1000 == 0 else f"{units}m"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for suffix, factor in reversed(_BINARY.items()):
            if units >= factor and units % factor == 0:
                return f"{units // factor}{suffix}"
    return str(units)


_HUMAN_BYTES = ("memory", "ephemeral-storage", "storage", "hugepages-")


def human_units(resource: str, units: int) -> str:
    """Base units for people: cores for cpu, GiB for byte resources, else the count."""
    if resource == "cpu":
        return f"{units / 1000:g}"
    if resource.startswith(_HUMAN_BYTES):
        return f"{units / 2**30:.1f}Gi"
    return str(units)


def human_pairs(first: dict[str, int], second: dict[str, int]) -> str:
    """Two resource lists side by side for people, ``cpu=2/4 memory=1.0Gi/2.0Gi``.

    The queue tables of ``esched replay`` and ``esched audit`` (allocated / fair share)
    show them this way; the pod count is left out, as the tables count pods apart.
    """
    return " ".join(
        f"{r}={human_units(r, first.get(r, 0))}/{human_units(r, second.get(r, 0))}"
        for r in sorted(set(first) | set(second))
        if r != "pods"
    )
