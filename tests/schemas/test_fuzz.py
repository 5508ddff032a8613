"""Property tests: garbage never escapes as anything but InvalidEvent; the compiled
validator agrees with the reference implementation on the schema files; whatever is
accepted can be folded (quantities convert)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from esched.schemas.events import TYPES
from esched.schemas.objects import node_allocatable, pod_limits, pod_requests
from esched.schemas.quantity import resource_list
from esched.schemas.validator import InvalidEvent, parse_event, validate_event

from .examples import DATA, event
from .test_schemas import reference_validator

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Printable text: Python's "$" quirk (matches before a final newline) is a known
# difference of jsonschema's pattern check, not ours to chase.
text = st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=12)
quantityish = st.sampled_from(
    [
        "1",
        "250m",
        "2Gi",
        "-1",
        "1e3",
        "1.5.5",
        "Mi",
        "0.1",
        "1e99",
        "99999Ei",
        "",
        " ",
        "1E",
        "3k",
        "+5",
    ]
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    text,
    quantityish,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)


@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes_only_raise_invalid_event(raw: bytes) -> None:
    try:
        parse_event(raw)
    except InvalidEvent:
        pass


@FUZZ
@given(json_values)
def test_random_json_only_raises_invalid_event(value: Any) -> None:
    raw = orjson.dumps(value)
    try:
        parse_event(raw)
    except InvalidEvent:
        pass
    ev = event("esched.pod.submitted", data=value if isinstance(value, dict) else {"x": value})
    try:
        validate_event(ev)
    except InvalidEvent:
        pass


def json_paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """The path of every value in a JSON document (``()``: the whole), keys and
    indexes in order."""
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += json_paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += json_paths(v, (*prefix, i))
    return out


def set_at(root: Any, path: tuple, value: Any, delete: bool) -> Any:
    """``root`` with the value at ``path`` replaced by ``value`` (or deleted); the
    whole document replaced when ``path`` is empty."""
    if not path:
        return value
    node = root
    for key in path[:-1]:
        node = node[key]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return root


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, dict]:
    etype = draw(st.sampled_from(TYPES))
    data = copy.deepcopy(DATA[etype])
    for _ in range(draw(st.integers(1, 3))):
        paths = json_paths(data)
        path = draw(st.sampled_from(paths))
        delete = bool(path) and draw(st.booleans())
        data = set_at(data, path, draw(json_values), delete)
    return etype, data


def _folds(etype: str, data: dict) -> None:
    """What the fold does with an accepted event must not raise."""
    if etype == "esched.pod.submitted":
        pod_requests(data)
        pod_limits(data)
    elif etype in ("esched.node.added", "esched.node.updated"):
        node_allocatable(data)
    elif etype == "esched.podgroup.submitted":
        resource_list(data["spec"].get("minResources"), "minResources")
    elif etype == "esched.usage.reported":
        for item in data.get("nodes", []) + data.get("pods", []):
            resource_list(item["usage"], "usage")


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
# Found by this test: esched refuses a ``since`` that is not a date-time; the
# reference agrees only when it asserts formats (``reference_validator``).
@example(("esched.pod.throttled", {**DATA["esched.pod.throttled"], "since": ""}))
def test_mutations_agree_with_reference_and_accepted_events_fold(case: tuple[str, dict]) -> None:
    etype, data = case
    ev = event(etype, data=data)
    try:
        validate_event(ev, allowed_types=TYPES)
        verdict = "ok"
    except InvalidEvent as exc:
        assert exc.reason in ("envelope", "schema", "quantity"), exc
        verdict = exc.reason
    if verdict == "envelope":  # data itself is not an object
        assert not isinstance(data, dict)
        return
    reference_ok = reference_validator(etype).is_valid(data)
    # "quantity" is a check beyond the schema: schema-valid, quantities not. So is
    # Volcano's job webhook for a Job (refused as "schema" with Volcano's message).
    beyond = ("quantity",) + (("schema",) if etype == "esched.job.submitted" else ())
    if reference_ok and verdict in beyond:
        return
    assert (verdict in ("ok", "quantity")) == reference_ok, (verdict, data)
    if verdict == "ok":
        _folds(etype, data)


tolerations = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "key": st.sampled_from(["", "k", "example.com/k"]),
            "operator": st.sampled_from(["Equal", "Exists"]),
            "value": st.sampled_from(["", "v"]),
            "effect": st.sampled_from(["", "NoSchedule", "NoExecute"]),
        },
    ),
    max_size=3,
)
requirements = st.lists(
    st.fixed_dictionaries(
        {
            "key": st.sampled_from(["zone", "gpu-mem"]),
            "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]),
        },
        optional={"values": st.lists(st.sampled_from(["a", "7", "-3", "x1"]), max_size=2)},
    ),
    max_size=3,
)


@FUZZ
@given(tolerations, requirements, requirements)
def test_python_rules_agree_with_schema_conditionals(tols: list, exprs: list, fields: list) -> None:
    """The if/then rules enforced in Python give the reference validator's verdict."""
    pod = copy.deepcopy(DATA["esched.pod.submitted"])
    pod["spec"]["tolerations"] = tols
    term = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]
    term["matchExpressions"] = exprs
    term["matchFields"] = fields
    try:
        validate_event(event("esched.pod.submitted", data=pod))
        ok = True
    except InvalidEvent as exc:
        assert exc.reason == "schema"
        ok = False
    assert ok == reference_validator("esched.pod.submitted").is_valid(pod)
