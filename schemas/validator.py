"""Validate esched events: size, JSON, CloudEvents envelope, type, data schema, quantities.

The JSON Schemas in ``schemas/v1/`` are the contract; this module compiles them once
(on first use) with fastjsonschema and adds the one check JSON Schema cannot express
exactly: every Kubernetes quantity in the event is converted to integer base units
by :mod:`esched.schemas.quantity`, so an accepted event can be folded without a
parse error.

Every failure is an :class:`InvalidEvent` with a closed ``reason`` (see
:data:`REASONS`), the dotted ``field`` at fault (``None`` when the whole message
is at fault) and a message that names the field::

    >>> parse_event(b'{"specversion": "1.0"}')
    Traceback (most recent call last):
    ...
    InvalidEvent: id: required property is missing
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Iterator
from functools import cache, lru_cache, partial
from importlib import resources
from typing import Any

import fastjsonschema
import orjson

from esched.schemas.events import EXTERNAL_TYPES, TYPES
from esched.schemas.quantity import QuantityError, to_base_units

__all__ = [
    "MAX_EVENT_BYTES",
    "REASONS",
    "SCHEMA_BASE_URI",
    "InvalidEvent",
    "bench_validate",
    "check_quantities",
    "inlined_schema",
    "load_schema",
    "parse_event",
    "schema_names",
    "validate_event",
]

#: Closed vocabulary of rejection reasons (dead-letter records and metrics use it).
REASONS = ("oversize", "not_json", "not_object", "envelope", "unknown_type", "schema", "quantity")
#: Largest accepted event, in bytes of the serialized message (Kafka's default is 1 MiB).
MAX_EVENT_BYTES = 1_048_576
#: ``$id`` prefix of every schema; ``<prefix><name>.json`` is ``schemas/v1/<name>.json``.
SCHEMA_BASE_URI = "https://esched.dev/schemas/v1/"

_ENVELOPE = "cloudevent"
_DEFINITIONS = "definitions"
# RFC 3986 URI-reference characters (CloudEvents ``source``); structure is not checked.
_URI_REFERENCE = r"^[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+\Z"


class InvalidEvent(ValueError):
    """An event that must not enter the log.

    ``reason`` is one of :data:`REASONS`; ``field`` is the dotted path at fault
    (``data.spec.containers[0].resources.requests.cpu``), or None; ``message`` is
    the human-readable text, also ``str(exc)``.
    """

    def __init__(self, reason: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.field = field
        self.message = message

    def __repr__(self) -> str:
        return (f"InvalidEvent(reason={self.reason!r}, field={self.field!r}, "
                f"message={self.message!r})")


# --------------------------------------------------------------------------- schemas


def schema_names() -> list[str]:
    """Names of the schema files: ``cloudevent``, ``definitions`` and one per event type."""
    return [_ENVELOPE, _DEFINITIONS, *TYPES]


@cache
def _schema_text(name: str) -> bytes:
    return (resources.files("esched.schemas") / "v1" / f"{name}.json").read_bytes()


def load_schema(name: str) -> dict[str, Any]:
    """A fresh copy of ``schemas/v1/<name>.json`` (``name`` as in :func:`schema_names`)."""
    if name not in schema_names():
        raise KeyError(f"no schema named {name!r}")
    return orjson.loads(_schema_text(name))


def _fetch(uri: str) -> dict[str, Any]:
    """fastjsonschema handler: resolve our ``$id`` URIs from package data, never the network."""
    if not uri.startswith(SCHEMA_BASE_URI) or not uri.endswith(".json"):
        raise ValueError(f"schema reference outside esched's schemas: {uri}")
    return load_schema(uri[len(SCHEMA_BASE_URI) : -len(".json")])


_Validator = Callable[..., Any]


_SHARED_REF = "definitions.json#/definitions/"
_LOCAL_REF = "#/definitions/"


def _inline(node: Any, local: dict[str, Any], shared: dict[str, Any]) -> Any:
    """Replace ``$ref``s to definitions by their content (our schemas are not recursive).

    fastjsonschema compiles each ``$ref`` target to a function and builds the error
    path string eagerly on every call into it; inlining turns the whole type into
    one straight-line function, several times faster on a typical pod.
    """
    if isinstance(node, list):
        return [_inline(x, local, shared) for x in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        if ref.startswith(_SHARED_REF):
            target, scope = shared[ref[len(_SHARED_REF) :]], shared
        elif ref.startswith(_LOCAL_REF):
            target, scope = local[ref[len(_LOCAL_REF) :]], local
        else:
            raise ValueError(f"unsupported $ref {ref!r} in esched schemas")
        merged = dict(_inline(target, scope, shared))
        merged.update({k: v for k, v in node.items() if k != "$ref"})  # annotations
        return merged
    return {k: (v if k == "definitions" else _inline(v, local, shared)) for k, v in node.items()}


def inlined_schema(name: str) -> dict[str, Any]:
    """``schemas/v1/<name>.json`` with every ``$ref`` expanded: self-contained."""
    shared = load_schema(_DEFINITIONS)["definitions"]
    schema = load_schema(name)
    local = shared if name == _DEFINITIONS else schema.get("definitions", {})
    out = _inline(schema, local, shared)
    out.pop("definitions", None)
    return out


_FORMAT_LOCALS = re.compile(r'"((?:[^"\\]|\\.)*)"\.format\(\*\*locals\(\)\)')
_PLACEHOLDER_ONLY = re.compile(r"^(?:[^{}]|\{[A-Za-z_][A-Za-z0-9_]*\})*$")
_FIRST_DEF = re.compile(r"^def (\w+)\(", re.M)


def _lazy_names(match: re.Match[str]) -> str:
    body = match.group(1)
    if not _PLACEHOLDER_ONLY.match(body):  # pragma: no cover - our schemas never do this
        return match.group(0)
    return f'f"{body}"'


#: Every ``pattern`` of the schemas, as a cached checker (see :func:`_fast_schema`).
_PATTERN_FORMATS: dict[str, Callable[[str], bool]] = {}
_PATTERN_PREFIX = "esched-pattern-"


_PATTERN_NAMES: dict[str, str] = {}
_DOLLAR = re.compile(r"(?<!\\)\$")


def _pattern_format(pattern: str) -> str:
    name = _PATTERN_NAMES.get(pattern)
    if name is None:  # a plain name: it is pasted into generated string literals
        name = _PATTERN_NAMES[pattern] = f"{_PATTERN_PREFIX}{len(_PATTERN_NAMES)}"
        # As fastjsonschema does for ``pattern``: "$" means end of string, not "before
        # a final newline" (Python's reading), so "name\n" is not a valid name.
        search = re.compile(_DOLLAR.sub(r"\\Z", pattern)).search
        _PATTERN_FORMATS[name] = lru_cache(maxsize=8192)(lambda s: search(s) is not None)
    return name


def _fast_schema(node: Any) -> Any:
    """The schema as compiled: same verdicts as the file, cheaper to evaluate.

    * ``pattern`` becomes a custom format running the same regular expression
      behind a cache: names, label keys and resource names repeat across events.
    * ``allOf`` members marked ``x-python-check`` (if/then rules between fields,
      such as "operator Exists needs an empty value") are dropped here and
      enforced by :func:`_check_rules`; failing ``if`` branches cost an exception
      each in fastjsonschema's code. The property-based tests check that the two
      agree with the schema files as evaluated by ``jsonschema``.
    """
    if isinstance(node, list):
        return [_fast_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "allOf":
            kept = [_fast_schema(x) for x in value
                    if not (isinstance(x, dict) and "x-python-check" in x)]
            if kept:
                out[key] = kept
        elif key == "pattern" and isinstance(value, str) and "format" not in node:
            out["format"] = _pattern_format(value)
            out["x-pattern"] = value
        elif key in ("properties", "definitions", "patternProperties"):
            out[key] = {k: _fast_schema(v) for k, v in value.items()}
        else:
            out[key] = _fast_schema(value)
    return out


def _compile(schema: dict[str, Any]) -> _Validator:
    """Compile with fastjsonschema, then make error paths lazy.

    fastjsonschema's generated code formats the error path of an array item or a map
    entry with ``"...{var}...".format(**locals())``, evaluated whenever a subschema
    fails, including the expected failures inside ``anyOf``; ``locals()`` of the
    large generated function is slow. An f-string naming the same variables is
    equivalent and cheap. Everything else is fastjsonschema's code unchanged.
    """
    schema = _fast_schema(schema)
    formats: dict[str, Any] = {"uri-reference": _URI_REFERENCE, **_PATTERN_FORMATS}
    code = fastjsonschema.compile_to_code(
        schema,
        handlers={"https": _fetch},  # no $ref is left, but never touch the network
        formats=formats,
        use_default=False,  # never modify the event
    )
    code = _FORMAT_LOCALS.sub(_lazy_names, code)
    namespace: dict[str, Any] = {}
    exec(compile(code, f"<schema {schema.get('$id', '?')}>", "exec"), namespace)
    first = _FIRST_DEF.search(code)
    assert first is not None
    return partial(namespace[first.group(1)], custom_formats=formats)


class _Compiled:
    """All validators, compiled once."""

    def __init__(self) -> None:
        started = time.perf_counter()
        self.envelope: _Validator = _compile(inlined_schema(_ENVELOPE))
        self.data: dict[str, _Validator] = {t: _compile(inlined_schema(t)) for t in TYPES}
        self.definitions: dict[str, Any] = load_schema(_DEFINITIONS)["definitions"]
        self.compile_s = time.perf_counter() - started


_compiled: _Compiled | None = None


def _validators() -> _Compiled:
    global _compiled
    if _compiled is None:
        _compiled = _Compiled()
    return _compiled


# ------------------------------------------------------------------ error messages


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _resolve(subschema: Any) -> Any:
    """Follow a ``$ref`` into definitions.json (enough for our own schemas)."""
    if isinstance(subschema, dict) and isinstance(subschema.get("$ref"), str):
        name = subschema["$ref"].rsplit("/", 1)[-1]
        return _validators().definitions.get(name, subschema)
    return subschema


def _bad_key(keys: object, subschema: Any) -> tuple[str | None, str]:
    """The first key violating a ``propertyNames`` schema, and why."""
    sub = _resolve(subschema)
    if not isinstance(sub, dict) or not isinstance(keys, dict):
        return None, "invalid key"
    why = sub.get("x-error") or "invalid key"
    for key in keys:
        if not isinstance(key, str):
            return str(key), "keys must be strings"
        if len(key) < sub.get("minLength", 0) or len(key) > sub.get("maxLength", 1 << 30):
            return key, why
        pattern = sub.get("x-pattern") or sub.get("pattern")
        if pattern and not re.search(_DOLLAR.sub(r"\\Z", pattern), key):
            return key, why
    return None, why


def _schema_error(exc: fastjsonschema.JsonSchemaValueException, root: str,
                  reason: str) -> InvalidEvent:
    """Turn a fastjsonschema exception into an InvalidEvent naming the field."""
    name = exc.name or "data"
    field = root + name[len("data") :] if name.startswith("data") else name
    field = field.lstrip(".")
    text = exc.message or ""
    detail = text[len(exc.name) :].strip() if exc.name and text.startswith(exc.name) else text
    definition = exc.definition if isinstance(exc.definition, dict) else {}
    custom = definition.get("x-error")
    rule = exc.rule
    if rule == "format" and "x-pattern" in definition:
        rule = "pattern"
        detail = f"must match pattern {definition['x-pattern']}"
    if rule == "required" and isinstance(exc.value, dict):
        missing = [k for k in exc.rule_definition or () if k not in exc.value]
        if missing:
            field = f"{field}.{missing[0]}" if field else str(missing[0])
            detail = custom or "required property is missing"
            custom = None
    elif rule == "propertyNames":
        key, why = _bad_key(exc.value, definition.get("propertyNames"))
        if key is not None:
            field = f"{field}.{key}" if field else key
            detail = f"invalid name {_short(key)}: {why}"
            custom = None
    elif rule in ("enum", "const", "type", "pattern", "format", "minimum", "maximum",
                  "exclusiveMinimum", "maxLength", "minLength", "minItems", "maxItems"):
        detail = f"{detail} (got {_short(exc.value)})"
    if custom:
        detail = f"{custom} (got {_short(exc.value)})" if rule not in ("anyOf", "not") else custom
    where = field or "event"
    return InvalidEvent(reason, f"{where}: {detail}", field or None)


# ---------------------------------------------------------------------- quantities


@lru_cache(maxsize=16384, typed=True)
def _units(is_cpu: bool, value: Any) -> int | str:
    """Base units of a quantity, or the reason it is invalid (both cached)."""
    try:
        return to_base_units("cpu" if is_cpu else "units", value, "q")
    except QuantityError as exc:
        return exc.reason


def _quantity(name: str, value: Any, path: str) -> int:
    try:
        units = _units(name == "cpu", value)
    except TypeError:  # unhashable: not a quantity at all
        units = "must be a string or a number"
    if units.__class__ is str:
        field = f"{path}.{name}"
        raise InvalidEvent("quantity", f"{field}: invalid quantity {_short(value)}: {units}", field)
    return units  # type: ignore[return-value]


def _resource_list(values: Any, path: str) -> dict[str, int]:
    if not values:
        return {}
    return {name: _quantity(name, v, path) for name, v in values.items()}


def _containers(containers: Any, path: str) -> None:
    for i, c in enumerate(containers or ()):
        res = c.get("resources")
        if res:
            for kind in ("requests", "limits"):
                if res.get(kind):
                    _resource_list(res[kind], f"{path}[{i}].resources.{kind}")


def _check_node(data: dict[str, Any]) -> None:
    status = data.get("status") or {}
    _resource_list(status.get("allocatable"), "data.status.allocatable")
    _resource_list(status.get("capacity"), "data.status.capacity")


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
            raise _rule_error(field, f"must be exactly one integer for operator {op} "
                                     f"(got {_short(values)})")


def _check_rules(spec: dict[str, Any]) -> None:
    """The if/then rules of the Pod schema (marked ``x-python-check``), in Python."""
    for i, tol in enumerate(spec.get("tolerations") or ()):
        if tol.get("operator", "Equal") == "Exists":
            if tol.get("value"):
                raise _rule_error(f"data.spec.tolerations[{i}].value",
                                  "must be empty when operator is Exists")
        elif not tol.get("key"):
            raise _rule_error(f"data.spec.tolerations[{i}].key",
                              "is required unless operator is Exists")
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
    for t, pref in enumerate(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
                             or ()):
        path = f"{base}.preferredDuringSchedulingIgnoredDuringExecution[{t}].preference"
        term = pref["preference"]
        _check_requirements(term.get("matchExpressions"), f"{path}.matchExpressions")
        _check_requirements(term.get("matchFields"), f"{path}.matchFields")


def _check_pod(data: dict[str, Any]) -> None:
    spec = data["spec"]
    if spec.get("tolerations") or spec.get("affinity"):
        _check_rules(spec)
    _containers(spec["containers"], "data.spec.containers")
    if spec.get("initContainers"):
        _containers(spec["initContainers"], "data.spec.initContainers")
    if spec.get("overhead"):
        _resource_list(spec["overhead"], "data.spec.overhead")


def _check_podgroup(data: dict[str, Any]) -> None:
    _resource_list(data["spec"].get("minResources"), "data.spec.minResources")


def _not_above(lower: dict[str, int], lower_path: str, upper: dict[str, int],
               upper_path: str) -> None:
    for name, units in lower.items():
        if name in upper and units > upper[name]:
            field = f"{lower_path}.{name}"
            raise InvalidEvent(
                "quantity",
                f"{field}: {units} base units exceed {upper_path}.{name} ({upper[name]}); "
                "a Volcano queue needs guarantee <= deserved <= capability",
                field,
            )


def _check_queue(data: dict[str, Any]) -> None:
    spec = data.get("spec") or {}
    cap = _resource_list(spec.get("capability"), "data.spec.capability")
    des = _resource_list(spec.get("deserved"), "data.spec.deserved")
    gua = _resource_list((spec.get("guarantee") or {}).get("resource"),
                         "data.spec.guarantee.resource")
    for i, cluster in enumerate(spec.get("extendClusters") or ()):
        _resource_list(cluster.get("capacity"), f"data.spec.extendClusters[{i}].capacity")
    _not_above(des, "data.spec.deserved", cap, "data.spec.capability")
    _not_above(gua, "data.spec.guarantee.resource", des, "data.spec.deserved")
    _not_above(gua, "data.spec.guarantee.resource", cap, "data.spec.capability")


def _check_usage(data: dict[str, Any]) -> None:
    for key in ("nodes", "pods"):
        for i, item in enumerate(data.get(key) or ()):
            _resource_list(item["usage"], f"data.{key}[{i}].usage")


_QUANTITY_CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "esched.node.added": _check_node,
    "esched.node.updated": _check_node,
    "esched.pod.submitted": _check_pod,
    "esched.podgroup.submitted": _check_podgroup,
    "esched.queue.upserted": _check_queue,
    "esched.usage.reported": _check_usage,
}


def check_quantities(event_type: str, data: dict[str, Any]) -> None:
    """Convert every quantity of a schema-valid ``data``; raise InvalidEvent("quantity").

    Also enforces a Volcano queue's ``guarantee <= deserved <= capability`` per resource.
    """
    check = _QUANTITY_CHECKS.get(event_type)
    if check is not None:
        check(data)


# ------------------------------------------------------------------------ the API


def validate_event(event: Any, *, allowed_types: Collection[str] = EXTERNAL_TYPES) -> dict:
    """Validate an already-decoded event; return it unchanged or raise InvalidEvent.

    Checks, in order: a JSON object (``not_object``), the CloudEvents 1.0 envelope
    (``envelope``), the type is an esched type in ``allowed_types``
    (``unknown_type``), ``data`` against ``schemas/v1/<type>.json`` (``schema``),
    and every quantity (``quantity``).
    """
    if not isinstance(event, dict):
        raise InvalidEvent(
            "not_object", f"event must be a JSON object, not {type(event).__name__}"
        )
    v = _compiled or _validators()
    try:
        v.envelope(event)
    except fastjsonschema.JsonSchemaValueException as exc:
        raise _schema_error(exc, "", "envelope") from None
    etype = event["type"]
    if etype not in allowed_types:
        if etype in TYPES:
            msg = f"type: {etype!r} is an esched type not accepted here"
            if etype not in EXTERNAL_TYPES:
                msg += " (internal: only esched's own services write it)"
        else:
            msg = f"type: unknown event type {_short(etype)}; known types: " + ", ".join(
                t for t in TYPES if t in allowed_types
            )
        raise InvalidEvent("unknown_type", msg, "type")
    validate_data = v.data.get(etype)
    if validate_data is None:  # allowed by the caller, but no schema: never accept blindly
        raise InvalidEvent("unknown_type", f"type: no schema for {etype!r}", "type")
    data = event["data"]
    try:
        validate_data(data)
    except fastjsonschema.JsonSchemaValueException as exc:
        raise _schema_error(exc, "data", "schema") from None
    check = _QUANTITY_CHECKS.get(etype)
    if check is not None:
        check(data)
    return event


def parse_event(raw: bytes | bytearray | memoryview | str, *,
                allowed_types: Collection[str] = EXTERNAL_TYPES,
                max_bytes: int = MAX_EVENT_BYTES) -> dict:
    """Decode and validate one serialized event (a Kafka message value).

    Checks size (``oversize``) and JSON (``not_json``, via orjson), then
    :func:`validate_event`. Returns the decoded envelope, content unchanged.
    """
    size = len(raw.encode("utf-8", "surrogatepass")) if isinstance(raw, str) else len(raw)
    if size > max_bytes:
        raise InvalidEvent("oversize", f"event is {size} bytes, over the limit of {max_bytes}")
    try:
        event = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent("not_json", f"not valid JSON: {exc}") from None
    return validate_event(event, allowed_types=allowed_types)


# -------------------------------------------------------------------------- bench


def sample_events() -> Iterator[dict[str, Any]]:
    """A representative mix for benchmarks: mostly pods, some nodes, gangs and usage."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "trainer-0",
            "namespace": "ml",
            "labels": {"app": "trainer", "tier": "batch"},
            "annotations": {"scheduling.k8s.io/group-name": "trainer",
                            "volcano.sh/queue-name": "research"},
        },
        "spec": {
            "priorityClassName": "batch",
            "priority": 100,
            "containers": [
                {"name": "main", "image": "trainer:1.4",
                 "resources": {"requests": {"cpu": "1500m", "memory": "4Gi"},
                               "limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1}}},
                {"name": "sidecar", "image": "log:2",
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}},
            ],
            "nodeSelector": {"pool": "gpu"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                             "effect": "NoSchedule"}],
        },
    }
    node = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "gpu-node-1", "labels": {"pool": "gpu", "zone": "a"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110",
                                   "nvidia.com/gpu": "4"}},
    }
    group = {"metadata": {"name": "trainer", "namespace": "ml"},
             "spec": {"minMember": 4, "queue": "research",
                      "minResources": {"cpu": "6", "memory": "16Gi"}}}
    usage = {"window": 10, "nodes": [{"name": "gpu-node-1",
                                      "usage": {"cpu": "12", "memory": "40Gi"}}]}

    def env(i: int, etype: str, data: dict[str, Any]) -> dict[str, Any]:
        return {"specversion": "1.0", "id": f"bench-{i}", "source": "esched-bench",
                "type": etype, "time": "2026-01-01T00:00:00Z", "data": data}

    mix = [("esched.pod.submitted", pod)] * 7 + [
        ("esched.node.added", node), ("esched.podgroup.submitted", group),
        ("esched.usage.reported", usage)]
    i = 0
    while True:
        for etype, data in mix:
            yield env(i, etype, data)
            i += 1


def _best_rate(fn: Callable[[int], None], n: int, rounds: int) -> tuple[float, float]:
    """(total seconds, best per-item seconds over ``rounds`` slices of ``n``)."""
    per = max(1, n // rounds)
    total, best = 0.0, float("inf")
    done = 0
    while done < n:
        k = min(per, n - done)
        t0 = time.perf_counter()
        fn(k)
        dt = time.perf_counter() - t0
        total += dt
        best = min(best, dt / k)
        done += k
    return total, best


def bench_validate(n: int = 100_000, rounds: int = 5) -> dict[str, Any]:
    """Measure validation throughput on ``n`` events (7 of 10 pods); for ``esched bench``.

    The work is cut into ``rounds`` slices; rates are those of the fastest slice
    (as ``timeit`` reports the minimum: other load on the machine only slows).
    Returns ``events``, ``seconds`` (all of ``validate_event``), ``events_per_s`` and
    ``us_per_event`` (``validate_event`` on decoded dicts), ``parse_events_per_s``
    (``parse_event`` on bytes: decode + validate), ``pod_us`` (one typical pod event)
    and ``compile_s`` (the one-off compile of all schemas).
    """
    compile_s = _validators().compile_s
    gen = sample_events()
    events = [next(gen) for _ in range(min(max(n, 1), 1000))]
    raws = [orjson.dumps(e) for e in events]
    pods = [e for e in events if e["type"] == "esched.pod.submitted"]
    m = len(events)

    def validate(k: int) -> None:
        for i in range(k):
            validate_event(events[i % m])

    def parse(k: int) -> None:
        for i in range(k):
            parse_event(raws[i % m])

    def pod(k: int) -> None:
        for i in range(k):
            validate_event(pods[i % len(pods)])

    validate_s, validate_best = _best_rate(validate, n, rounds)
    _, parse_best = _best_rate(parse, n, rounds)
    _, pod_best = _best_rate(pod, max(1, n // 2), rounds)
    return {
        "events": n,
        "seconds": round(validate_s, 6),
        "events_per_s": round(1 / validate_best),
        "us_per_event": round(validate_best * 1e6, 3),
        "pod_us": round(pod_best * 1e6, 3),
        "parse_events_per_s": round(1 / parse_best),
        "compile_s": round(compile_s, 3),
    }
