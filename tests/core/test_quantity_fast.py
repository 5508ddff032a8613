"""The fold's C quantity parser (core/_quantity.pxd) against the rule it speeds up,
:func:`esched.schemas.quantity.to_base_units`: wherever the C parser gives a value it
is the reference's, and it gives one for the common spellings (else the fold would
still pay for the reference's Fraction parsing).

The spellings are those of Kubernetes' own tests
(kubernetes/apimachinery pkg/api/resource/quantity_test.go, TestQuantityParse:
"1.5Gi", "0.1", "5m", "1e3", "1E", ".5", "+3"), plus the edges of esched's rule:
MAX_BASE_UNITS, the exponent bound, negative values, whitespace, and rounding up of
a part of a base unit (milli-cpu against bytes).
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from esched.core import ClusterState
from esched.core._quantity import _py_quantity_units
from esched.schemas.quantity import MAX_BASE_UNITS, QuantityError, to_base_units
from support.fold import EV, node

RESOURCES = ("cpu", "memory", "nvidia.com/gpu")
SUFFIXES = (
    *("", "n", "u", "m", "k", "M", "G", "T", "P", "E"),
    *("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"),
    *("K", "ki", "mi", "e", "E+", "x", "i", "MiB"),  # not quantities
)


def reference(resource: str, value: object) -> int | None:
    """to_base_units, None where it raises."""
    try:
        return to_base_units(resource, value)
    except QuantityError:
        return None


@st.composite
def spelled(draw: st.DrawFn) -> str:
    """A quantity as a string, mostly in the grammar, with its edges."""
    sign = draw(st.sampled_from(["", "", "+", "-"]))
    whole = draw(st.text("0123456789", max_size=22))
    frac = draw(st.none() | st.text("0123456789", max_size=22))
    num = whole if frac is None else f"{whole}.{frac}"
    if draw(st.booleans()):
        e = draw(st.integers(-40, 40))
        zeros = "0" * draw(st.integers(0, 2))
        mark = draw(st.sampled_from(["e", "E"]))
        esign = draw(st.sampled_from(["", "+", "-"])) if e >= 0 else "-"
        suffix = f"{mark}{esign}{zeros}{abs(e)}"
    else:
        suffix = draw(st.sampled_from(SUFFIXES))
    pad = draw(st.sampled_from(["", "", "", " ", "\t", "\n", "\u00a0"]))
    where = draw(st.sampled_from(["left", "right", "both"]))
    text = sign + num + suffix
    return {"left": pad + text, "right": text + pad, "both": pad + text + pad}[where]


quantities = (
    spelled()
    | st.integers(-(2**64), 2**64)
    | st.sampled_from([MAX_BASE_UNITS, MAX_BASE_UNITS + 1, MAX_BASE_UNITS // 1000 + 1])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=70)
    | st.sampled_from([True, False, None, b"1", [1]])
)


# 1,000 drawn cases (was 3,000): the spellings that found bugs are the @examples below.
@settings(max_examples=1000, deadline=None)
@given(st.sampled_from(RESOURCES), quantities)
@example("memory", str(MAX_BASE_UNITS))  # the largest value, exactly
@example("memory", str(MAX_BASE_UNITS + 1))  # absurdly large
@example("memory", "4Ei")  # 2**62 bytes: the largest
@example("cpu", "4Ei")  # 2**62 * 1000 milli-cpu: absurd
@example("memory", "4.000000000000001Ei")
@example("cpu", "4611686018427387.904")  # MAX_BASE_UNITS milli-cpu, 19 digits
@example("cpu", "4611686018427387.905")
@example("memory", "1e30")
@example("memory", "1e31")  # exponent out of range
@example("cpu", "1e-30")  # a part of a milli-cpu: 1m
@example("memory", "1n")  # a part of a byte: 1
@example("cpu", "1n")
@example("memory", "1500m")  # 1.5 bytes: 2
@example("cpu", "0.0001")  # 0.1 milli-cpu: 1m
@example("cpu", "-0")
@example("cpu", "-1")
@example("cpu", " 1")
@example("cpu", "1\n")
@example("cpu", "1.")
@example("cpu", ".")
@example("cpu", "+")
@example("cpu", "1E")  # exa
@example("cpu", "1E3")  # an exponent
@example("cpu", "1e")
@example("memory", "0.5Ki")
@example("memory", "0.0000000000000000000001Ki")
@example("cpu", 1e16)  # repr: 1e+16
@example("cpu", -0.0)
@example("cpu", float("nan"))
@example("cpu", True)
@example("memory", "1" * 64)
@example("memory", "1" * 65)  # too long
def test_c_parser_gives_the_reference_units_or_leaves_the_value_to_it(
    resource: str, value: object
) -> None:
    fast = _py_quantity_units(resource, value)
    if fast is not None:
        assert fast == reference(resource, value), (resource, value)


@pytest.mark.parametrize(
    ("resource", "value"),
    [
        ("cpu", "250m"),
        ("cpu", "1.5"),
        ("cpu", "+3"),
        ("cpu", ".5"),
        ("cpu", "100u"),
        ("cpu", "1e3"),
        ("cpu", "1E3"),
        ("cpu", 2),
        ("cpu", 0.1),
        ("cpu", 1.5),
        ("memory", "512Mi"),
        ("memory", "1.5Gi"),
        ("memory", "2Gi"),
        ("memory", "3G"),
        ("memory", "1500m"),
        ("memory", 4294967296),
        ("ephemeral-storage", "3E"),
        ("nvidia.com/gpu", "8"),
    ],
)
def test_common_spellings_take_the_c_parser(resource: str, value: object) -> None:
    assert _py_quantity_units(resource, value) == to_base_units(resource, value)


@pytest.mark.parametrize("value", ["-1", " 1", "1e31", "x", str(MAX_BASE_UNITS + 1), True])
def test_unusual_or_invalid_values_are_left_to_the_reference(value: object) -> None:
    assert _py_quantity_units("memory", value) is None


def test_usage_report_folds_through_either_parser_alike() -> None:
    """A node's usage in common spellings (C) and unusual ones (the reference: padded,
    negative zero, an int subclass) fold to the same units; a bad value is still a
    malformed report that changes nothing."""

    def fold(usage: dict[str, object]) -> ClusterState:
        st = ClusterState()
        st.apply({"type": EV.NODE_ADDED, "id": "n", "source": "t", "data": node("n1")}, 1)
        report = {"window": 10, "nodes": [{"name": "n1", "usage": usage}]}
        st.apply(
            {
                "type": EV.USAGE_REPORTED,
                "id": "u",
                "source": "t",
                "time": "2026-01-01T00:00:10Z",
                "data": report,
            },
            2,
        )
        return st

    common = fold({"cpu": "1500m", "memory": "1Gi"})
    unusual = fold({"cpu": " 1.5 ", "memory": "\t1Gi"})
    assert common.node_usage("n1") == {"cpu": 1500, "memory": 2**30}
    assert unusual.node_usage("n1") == common.node_usage("n1")
    bad = fold({"cpu": "1500m", "memory": "-1Gi"})
    assert bad.anomalies.get("malformed") == 1
    assert bad.node_usage("n1") is None
