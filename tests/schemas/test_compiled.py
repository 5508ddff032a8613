"""The compiled form of the schemas (jsonschema-rs): rewritten patterns and formats
decide as the files do under Python's ``re``; error paths; non-JSON values; caches."""

from __future__ import annotations

import copy
import json
import re
import time
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from esched.schemas.validator import (
    InvalidEvent,
    check_quantities,
    compile_validators,
    parse_event,
    validate_event,
)
from esched.schemas.validator.compiled import (
    FORMAT_PATTERNS,
    PATTERN_REWRITES,
    compiled_form,
    validators,
)

from .examples import DATA, event

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas" / "v1"
PROPS = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: What fastjsonschema 2.x checked the envelope's formats with (Python ``re.match``).
PYTHON_FORMATS = {
    "date-time": (
        r"^(?:\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-"
        r"(?:0[1-9]|[12]\d|30)|02-(?:0[1-9]|1\d|2[0-8]))|(?:\d\d(?:0[48]|[2468][048]|"
        r"[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)(t|T)(?:[01]\d|2[0-3]):"
        r"[0-5]\d:(?:[0-5]\d|60)(?:\.\d+)?(?:[+-](?:[01]\d|2[0-3]):[0-5]\d|"
        r"[+-](?:[01]\d|2[0-3])[0-5]\d|z|Z)\Z"
    ),
    "uri": r"^\w+:(\/?\/?)[^\s]+\Z",
    "uri-reference": r"^[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+\Z",
}


def _patterns(node: Any) -> set[str]:
    if isinstance(node, list):
        return set().union(*(_patterns(x) for x in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = {node["pattern"]} if isinstance(node.get("pattern"), str) else set()
    return found.union(*(_patterns(v) for v in node.values()))


def _python_verdict(pattern: str, value: str) -> bool:
    # As the reference validator, with "$" meaning the end of the text (ECMA-262).
    return re.search(re.sub(r"(?<!\\)\$", r"\\Z", pattern), value) is not None


def _compiled(schema: dict[str, Any]) -> jsonschema_rs.Validator:
    return jsonschema_rs.validator_for(compiled_form(schema), validate_formats=True)


def test_every_lookahead_pattern_is_rewritten() -> None:
    """A new lookahead pattern would silently run on the slow backtracking engine."""
    patterns = set().union(
        *(_patterns(json.loads(p.read_text())) for p in SCHEMA_DIR.glob("*.json"))
    )
    lookaround = {p for p in patterns if re.search(r"\(\?<?[=!]", p)}
    assert lookaround == set(PATTERN_REWRITES)
    for compiled in validators().schemas.values():
        assert not any(re.search(r"\(\?<?[=!]", p) for p in _patterns(compiled))


segments = st.sampled_from(
    [
        "a",
        "Z",
        "0",
        "9",
        "-",
        "_",
        ".",
        "/",
        "--",
        "..",
        "x" * 61,
        "y" * 62,
        "z" * 63,
        "a" * 250,
        "b" * 252,
        "c" * 253,
        "A_B",
        "é",
        " ",
        "\n",
        "",
    ]
)
names = st.lists(segments, max_size=8).map("".join)


@PROPS
@given(st.sampled_from(sorted(PATTERN_REWRITES)), names)
def test_rewritten_patterns_decide_as_the_originals(pattern: str, value: str) -> None:
    validator = _compiled({"type": "string", "pattern": pattern})
    assert validator.is_valid(value) == _python_verdict(pattern, value), (pattern, value)


@pytest.mark.parametrize("pattern", sorted(PATTERN_REWRITES))
@pytest.mark.parametrize(
    "value",
    [
        "a",
        "a" * 63,
        "a" * 64,
        "nvidia.com/gpu",
        "ns/p",
        f"{'a' * 253}/{'b' * 63}",
        f"{'a' * 254}/b",
        f"a/{'b' * 253}",
        f"{'a' * 63}/{'b' * 254}",
        f"{'a' * 64}/b",
        "a/b/c",
        "",
        "/a",
        "a/",
        "-a",
        "a-",
        "a..b/c",
        "A.b/c",
        "a/B_c",
        "a\n",
    ],
)
def test_rewritten_patterns_at_the_length_limits(pattern: str, value: str) -> None:
    validator = _compiled({"type": "string", "pattern": pattern})
    assert validator.is_valid(value) == _python_verdict(pattern, value)


timestamps = st.builds(
    lambda y, mo, d, t, h, mi, s, frac, tz: f"{y}-{mo}-{d}{t}{h}:{mi}:{s}{frac}{tz}",
    st.sampled_from(["2026", "2000", "1900", "2024", "0000", "٢٠٢٦", "20266"]),
    st.sampled_from(["01", "02", "12", "13", "00", "1"]),
    st.sampled_from(["01", "28", "29", "30", "31", "32"]),
    st.sampled_from(["T", "t", " ", "TT"]),
    st.sampled_from(["00", "23", "24", "١٢"]),
    st.sampled_from(["00", "59", "60"]),
    st.sampled_from(["00", "59", "60", "61"]),
    st.sampled_from(["", ".1", ".123456789", ".", ".x"]),
    st.sampled_from(["Z", "z", "+01:00", "-23:59", "+0100", "+24:00", "", "+01"]),
)
format_values = st.one_of(
    timestamps,
    st.text(max_size=12),
    st.lists(
        st.sampled_from(
            [
                "http",
                "urn",
                ":",
                "//",
                "/",
                "a",
                "é",
                "_",
                "٣",
                " ",
                "\x1c",
                "\x85",
                "\ufeff",
                "%",
                "[",
                "#",
                "?",
                "\u0301",
                "x" * 20,
            ]
        ),
        max_size=6,
    ).map("".join),
)


@PROPS
@given(st.sampled_from(sorted(FORMAT_PATTERNS)), format_values)
def test_format_patterns_decide_as_fastjsonschema_did(fmt: str, value: str) -> None:
    validator = _compiled({"type": "string", "format": fmt})
    expected = re.match(PYTHON_FORMATS[fmt], value) is not None
    assert validator.is_valid(value) == expected, (fmt, value)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"time": "2026-02-30T00:00:00Z"}, "time"),
        ({"time": "2026-01-01T00:00:00"}, "time"),
        ({"source": "a b"}, "source"),
        ({"dataschema": "//no-scheme"}, "dataschema"),
    ],
)
def test_format_errors(change: dict, field: str) -> None:
    with pytest.raises(InvalidEvent) as info:
        validate_event(event("esched.pod.submitted", **change))
    assert (info.value.reason, info.value.field) == ("envelope", field)
    assert info.value.message.startswith(f"{field}: ")


@pytest.mark.parametrize(
    "change",
    [
        {"time": "2024-02-29T23:59:60.5+01:00"},
        {"time": "2026-01-01t00:00:00z"},
        {"time": "2026-01-01T00:00:00+0100"},
        {"source": "urn:uuid:6e8bc430-9c3a-11d9"},
        {"source": "%zz[]"},
        {"dataschema": "https://esched.dev/schemas/v1/x.json"},
    ],
)
def test_formats_accept_what_they_accepted(change: dict) -> None:
    ev = event("esched.pod.submitted", **change)
    assert validate_event(ev) is ev


def _reject(ev: dict) -> InvalidEvent:
    with pytest.raises(InvalidEvent) as info:
        validate_event(ev)
    return info.value


def test_first_error_in_schema_then_event_order() -> None:
    pod = copy.deepcopy(DATA["esched.pod.submitted"])
    pod["spec"]["containers"][1]["name"] = "Bad_Name"
    pod["spec"]["containers"][0]["name"] = "Also_Bad"
    pod["metadata"]["name"] = "Bad_Too"
    exc = _reject(event("esched.pod.submitted", data=pod))
    assert exc.field == "data.metadata.name"  # metadata before spec, as in the schema
    del pod["metadata"]["name"]
    pod["metadata"]["namespace"] = "N"
    exc = _reject(event("esched.pod.submitted", data=pod))
    assert exc.field == "data.metadata.name" and "required" in exc.message
    del pod["metadata"]["namespace"]
    pod["metadata"]["name"] = "p"
    exc = _reject(event("esched.pod.submitted", data=pod))
    assert exc.field == "data.spec.containers[0].name"  # items in event order
    node = copy.deepcopy(DATA["esched.node.added"])
    node["status"]["allocatable"] = {"pods": [], "cpu": {}}
    exc = _reject(event("esched.node.added", data=node))
    assert exc.field == "data.status.allocatable.pods"  # map entries in event order


@pytest.mark.parametrize(
    ("key", "field"),
    [
        ("7", "data.status.allocatable.7"),
        ("07", "data.status.allocatable.07"),
        ("", "data.status.allocatable."),
        ("a~1/b", "data.status.allocatable.a~1/b"),
    ],
)
def test_field_of_odd_map_keys(key: str, field: str) -> None:
    node = copy.deepcopy(DATA["esched.node.added"])
    node["status"]["allocatable"] = {"cpu": "1", key: []}
    exc = _reject(event("esched.node.added", data=node))
    assert (exc.reason, exc.field) == ("schema", field)
    assert exc.message == f"{field}: must be string or number (got [])"


def test_messages_match_the_previous_validator() -> None:
    pod = copy.deepcopy(DATA["esched.pod.submitted"])
    pod["metadata"]["labels"]["bad key"] = "v"
    exc = _reject(event("esched.pod.submitted", data=pod))
    assert exc.message == (
        "data.metadata.labels.bad key: invalid name 'bad key': must be a Kubernetes "
        "qualified name such as 'app', 'example.com/zone' or 'nvidia.com/gpu'"
    )
    pod = copy.deepcopy(DATA["esched.pod.submitted"])
    pod["spec"]["priority"] = 2**31
    exc = _reject(event("esched.pod.submitted", data=pod))
    assert exc.message == (
        "data.spec.priority: must be smaller than or equal to 2147483647 (got 2147483648)"
    )
    exc = _reject(event("esched.pod.submitted", source=""))
    assert exc.message == "source: must be longer than or equal to 1 characters (got '')"
    exc = _reject(event("esched.pod.submitted", source="a b"))
    assert exc.message == "source: must be uri-reference (got 'a b')"
    exc = _reject(
        event("esched.usage.reported", data={"pods": [{"pod": "x" * 64 + "/p", "usage": {}}]})
    )
    assert exc.message.startswith("data.pods[0].pod: must be 'namespace/name'")


@pytest.mark.parametrize(
    ("where", "value", "reason", "field"),
    [
        ("labels", {1: "a"}, "schema", "data.metadata.labels.1"),
        ("labels", {"a": b"x"}, "schema", "data.metadata.labels.a"),
        ("name", {"x"}, "schema", "data.metadata.name"),
    ],
)
def test_python_values_without_json_type_are_invalid_events(
    where: str, value: Any, reason: str, field: str
) -> None:
    pod = copy.deepcopy(DATA["esched.pod.submitted"])
    pod["metadata"][where] = value
    exc = _reject(event("esched.pod.submitted", data=pod))
    assert (exc.reason, exc.field) == (reason, field)
    assert exc.message.startswith(f"{field}: ")
    exc = _reject({**event("esched.pod.submitted"), 3: "x"})
    assert exc.reason == "envelope"


def test_compiled_once() -> None:
    assert validators() is validators()


def test_compile_validators_compiles_what_validation_then_uses() -> None:
    compile_validators()
    compiled = validators()
    compile_validators()  # again: nothing recompiled
    assert validators() is compiled
    assert validate_event(event("esched.pod.submitted"), allowed_types=["esched.pod.submitted"])
    assert validators() is compiled


def test_cached_quantities_keep_bools_out() -> None:
    # Quantities are cached by their value: True (== 1 as a dict key) must not pass
    # as the number 1 checked before it, and an invalid one fails every time.
    data = copy.deepcopy(DATA["esched.podgroup.submitted"])
    for pods in ("7", 1, 1):
        data["spec"]["minResources"] = {"pods": pods}
        check_quantities("esched.podgroup.submitted", data)
    data["spec"]["minResources"] = {"pods": True}
    with pytest.raises(InvalidEvent) as info:
        check_quantities("esched.podgroup.submitted", data)
    assert info.value.field == "data.spec.minResources.pods"
    data["spec"]["minResources"] = {"cpu": "-250m"}
    for _ in range(2):
        with pytest.raises(InvalidEvent):
            check_quantities("esched.podgroup.submitted", data)


def test_a_cached_pod_quantity_still_names_its_field_when_another_is_bad() -> None:
    data = copy.deepcopy(DATA["esched.pod.submitted"])
    requests = data["spec"]["containers"][0].setdefault("resources", {}).setdefault("requests", {})
    requests.update({"cpu": "250m", "memory": "1Gi"})
    check_quantities("esched.pod.submitted", data)  # both cached now
    requests["memory"] = "1Qi"
    with pytest.raises(InvalidEvent) as info:
        check_quantities("esched.pod.submitted", data)
    assert info.value.field == "data.spec.containers[0].resources.requests.memory"


def test_large_refused_event_reports_quickly() -> None:
    """iter_errors builds every error: a 1 MiB event of wrong values must not take it."""
    node = copy.deepcopy(DATA["esched.node.added"])
    node["status"]["allocatable"] = {f"r{i}": [] for i in range(50_000)}
    raw = json.dumps(event("esched.node.added", data=node)).encode()
    started = time.perf_counter()
    with pytest.raises(InvalidEvent) as info:
        parse_event(raw, max_bytes=len(raw))
    assert time.perf_counter() - started < 1.0  # ranking all of them: ~2.5 s
    assert info.value.reason == "schema"
    assert re.fullmatch(r"data\.status\.allocatable\.r\d+", info.value.field or "")
    assert info.value.message == f"{info.value.field}: must be string or number (got [])"
