"""Validate esched events: size, JSON, CloudEvents envelope, type, data schema, quantities.

The JSON Schemas in ``schemas/v1/`` are the contract; this module compiles them once
(on first use) with jsonschema-rs and adds the one check JSON Schema cannot express
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
from collections.abc import Callable, Collection, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from functools import cache, lru_cache
from importlib import resources
from typing import Any
from urllib.parse import urljoin

import jsonschema_rs
import orjson

from esched.schemas.events import EXTERNAL_TYPES, TYPES, envelope
from esched.schemas.objects import pod_resource_requests
from esched.schemas.quantity import MAX_BASE_UNITS, QuantityError, to_base_units

__all__ = [
    "MAX_EVENT_BYTES",
    "REASONS",
    "SCHEMA_BASE_URI",
    "TIME_WINDOW",
    "UNSUPPORTED_POD_FIELDS",
    "InvalidEvent",
    "bench_validate",
    "check_quantities",
    "load_schema",
    "parse_event",
    "schema_names",
    "validate_event",
]

#: Closed vocabulary of rejection reasons (dead-letter records and metrics use it).
REASONS = (
    "oversize",
    "not_json",
    "not_object",
    "envelope",
    "unknown_type",
    "schema",
    "quantity",
    "unsupported",
)
#: Largest accepted event, in bytes of the serialized message (Kafka's default is 1 MiB).
MAX_EVENT_BYTES = 1_048_576
#: The event times accepted (``time``, as UTC): a time outside is a producer's bug
#: or an attack, and one near the ends of ``datetime``'s range cannot even be
#: converted to UTC. Wide enough for replayed historical traces.
TIME_WINDOW = (datetime(1970, 1, 1, tzinfo=UTC), datetime(2200, 1, 1, tzinfo=UTC))
#: ``$id`` prefix of every schema; ``<prefix><name>.json`` is ``schemas/v1/<name>.json``.
SCHEMA_BASE_URI = "https://esched.dev/schemas/v1/"

_ENVELOPE = "cloudevent"
_ENVELOPE_URI = f"{SCHEMA_BASE_URI}{_ENVELOPE}.json"
_DEFINITIONS = "definitions"


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
        return (
            f"InvalidEvent(reason={self.reason!r}, field={self.field!r}, message={self.message!r})"
        )


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


def _no_network(uri: str) -> dict[str, Any]:
    """jsonschema-rs retriever: every ``$ref`` we use is in the registry; never fetch."""
    raise ValueError(f"schema reference outside esched's schemas: {uri}")


# Lookahead-free equivalents of the schemas' lookahead patterns. jsonschema-rs runs a
# pattern with lookaround on a backtracking engine (fancy-regex) at ~0.6 µs a string,
# ten times the cost of a plain one, and a pod has a dozen qualified names. Each such
# pattern becomes one plain pattern that also bounds the last segment (name <= 63),
# and a length bound on the first: a string of at most 255 characters cannot have a
# longer first segment, else a second plain pattern checks it. tests/schemas checks
# the equivalence on random strings and that every lookahead pattern is listed here.
_SUBDOMAIN = r"[a-z0-9]+(?:-+[a-z0-9]+)*(?:\.[a-z0-9]+(?:-+[a-z0-9]+)*)*"
_LABEL = r"[a-z0-9]+(?:-+[a-z0-9]+)*"
_NAME = r"[A-Za-z0-9]+(?:[-_.]+[A-Za-z0-9]+)*"
# Same languages, at most 63 characters: alphanumeric at both ends, any of the
# separators in between.
_LABEL_63 = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_NAME_63 = r"[A-Za-z0-9](?:[-_.A-Za-z0-9]{0,61}[A-Za-z0-9])?"
_QUALIFIED = rf"(?:(?=[^/]{{1,253}}/){_SUBDOMAIN}/)?(?=[^/]{{1,63}}$){_NAME}"


def _bounded(pattern: str, first_253: str) -> dict[str, Any]:
    return {"pattern": pattern, "x-also": {"anyOf": [{"maxLength": 255}, {"pattern": first_253}]}}


_PATTERN_REWRITES: dict[str, dict[str, Any]] = {
    # QualifiedName: [subdomain (<= 253) "/"] name (<= 63)
    f"^{_QUALIFIED}$": _bounded(f"^(?:{_SUBDOMAIN}/)?{_NAME_63}$", r"^(?:[^/]{1,253}/)?[^/]*$"),
    # Toleration key: empty or a qualified name
    f"^(?:{_QUALIFIED})?$": _bounded(
        f"^(?:(?:{_SUBDOMAIN}/)?{_NAME_63})?$", r"^(?:[^/]{1,253}/)?[^/]*$"
    ),
    # PodKey: namespace (DNS label, <= 63) "/" name (DNS subdomain, <= 253)
    f"^(?=[^/]{{1,63}}/){_LABEL}/(?=[^/]{{1,253}}$){_SUBDOMAIN}$": _bounded(
        f"^{_LABEL_63}/{_SUBDOMAIN}$", r"^[^/]*/[^/]{1,253}$"
    ),
}

#: The envelope's formats as the patterns fastjsonschema checked them with (Python
#: ``re``), for jsonschema-rs's engine, which reads ``\d``, ``\w`` and ``\s`` as
#: ECMA-262 does (ASCII): Python's Unicode classes are spelled out (identical on
#: every character of Python's Unicode database); ``$`` is the end of the text.
#: A Python format callback would cost ~1 µs an event; these cost ~0.1 µs.
_FORMAT_PATTERNS = {
    "date-time": (
        r"^(?:\p{Nd}{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\p{Nd}|3[01])|(?:0[469]|11)-"
        r"(?:0[1-9]|[12]\p{Nd}|30)|02-(?:0[1-9]|1\p{Nd}|2[0-8]))|(?:\p{Nd}\p{Nd}(?:0[48]|"
        r"[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)(t|T)"
        r"(?:[01]\p{Nd}|2[0-3]):[0-5]\p{Nd}:(?:[0-5]\p{Nd}|60)(?:\.\p{Nd}+)?"
        r"(?:[+-](?:[01]\p{Nd}|2[0-3]):[0-5]\p{Nd}|[+-](?:[01]\p{Nd}|2[0-3])[0-5]\p{Nd}|z|Z)$"
    ),
    "uri": r"^[\p{L}\p{N}_]+:(/?/?)[^\p{White_Space}\x1c-\x1f]+$",
    # RFC 3986 characters only (CloudEvents ``source``); structure is not checked.
    "uri-reference": r"^[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+$",
}


def _compiled_form(node: Any) -> Any:
    """The schema as compiled: same verdicts as the file, cheaper to evaluate.

    * ``allOf`` members marked ``x-python-check`` (if/then rules between fields,
      such as "operator Exists needs an empty value") are dropped here and
      enforced by :func:`_check_rules`, whose messages name the field at fault.
    * A ``pattern`` in :data:`_PATTERN_REWRITES` becomes its lookahead-free form (the
      length bound in an added ``allOf`` member carrying the same ``x-error``);
      ``x-pattern`` keeps the original for messages.
    * A ``format`` in :data:`_FORMAT_PATTERNS` becomes that ``pattern``
      (``x-format`` names it for messages).

    ``tests/schemas`` checks that the verdicts agree with the schema files as the
    reference ``jsonschema`` (Python ``re``) evaluates them, and each rewritten
    pattern and format with its original on random strings.
    """
    if isinstance(node, list):
        return [_compiled_form(x) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "allOf":
            kept = [
                _compiled_form(x)
                for x in value
                if not (isinstance(x, dict) and "x-python-check" in x)
            ]
            if kept:
                out[key] = kept
        elif key in ("properties", "definitions", "patternProperties"):
            out[key] = {k: _compiled_form(v) for k, v in value.items()}
        else:
            out[key] = _compiled_form(value)
    extra: list[dict[str, Any]] = []
    pattern = node.get("pattern")
    if isinstance(pattern, str) and pattern in _PATTERN_REWRITES:
        rewrite = _PATTERN_REWRITES[pattern]
        out["pattern"], out["x-pattern"] = rewrite["pattern"], pattern
        extra.append({**rewrite["x-also"], "x-pattern": pattern})
    fmt = node.get("format")
    if isinstance(fmt, str) and fmt in _FORMAT_PATTERNS:
        del out["format"]
        extra.append({"pattern": _FORMAT_PATTERNS[fmt], "x-format": fmt})
    if extra:
        if "x-error" in node:
            extra = [{**x, "x-error": node["x-error"]} for x in extra]
        out["allOf"] = [*out.get("allOf", ()), *extra]
    return out


class _Compiled:
    """All validators (jsonschema-rs), compiled once."""

    def __init__(self) -> None:
        started = time.perf_counter()
        self.schemas: dict[str, dict[str, Any]] = {
            f"{SCHEMA_BASE_URI}{n}.json": _compiled_form(load_schema(n)) for n in schema_names()
        }
        registry = jsonschema_rs.Registry(list(self.schemas.items()), retriever=_no_network)

        def compile_(name: str) -> Any:
            return jsonschema_rs.validator_for(
                self.schemas[f"{SCHEMA_BASE_URI}{name}.json"],
                registry=registry,
                retriever=_no_network,
                validate_formats=True,
            )

        self.envelope = compile_(_ENVELOPE)
        self.data = {t: compile_(t) for t in TYPES}
        self.envelope_valid: Callable[[Any], bool] = self.envelope.is_valid
        self.data_valid: dict[str, Callable[[Any], bool]] = {
            t: v.is_valid for t, v in self.data.items()
        }
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


def _int_key(key: str) -> int | None:
    try:
        return int(key)
    except ValueError:
        return None


def _step(node: Any, token: str | int) -> tuple[str, Any, int]:
    """One step down an instance path: (field suffix, child, position in the parent).

    jsonschema-rs reports an object key that reads as a number ("7") as an int.
    """
    if isinstance(node, list) and isinstance(token, int) and 0 <= token < len(node):
        return f"[{token}]", node[token], token
    if isinstance(node, dict):
        key = str(token)
        if key not in node and isinstance(token, int):
            key = next((k for k in node if _int_key(k) == token), key)
        if key in node:
            return f".{key}", node[key], list(node).index(key)
    return (f"[{token}]" if isinstance(token, int) else f".{token}"), None, 0


def _locate(root: str, instance: Any, path: Iterable[str | int]) -> tuple[str, Any]:
    """The dotted field of an instance path (``data.spec.containers[0].name``), and
    the value there, taken from the event itself (jsonschema-rs's copy sorts keys)."""
    field, node = root, instance
    for token in path:
        suffix, node, _ = _step(node, token)
        field += suffix
    return (field[1:] if field.startswith(".") else field), node


def _keyword(err: jsonschema_rs.ValidationError, root_uri: str) -> tuple[str, dict[str, Any]]:
    """The failing keyword and the (compiled) subschema holding it."""
    location = err.absolute_keyword_location
    if location:
        uri, _, pointer = location.partition("#")
        parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]
    else:
        uri, parts = root_uri, [str(p) for p in err.schema_path]
    node: Any = _validators().schemas.get(uri, {})
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.get(part, {})
    return (parts[-1] if parts else ""), (node if isinstance(node, dict) else {})


def _detail(rule: str, node: dict[str, Any], err: jsonschema_rs.ValidationError) -> str:
    """What the failed keyword demands, in fastjsonschema's words (kept for continuity)."""
    value: Any = node.get(rule)  # the keyword's schema value (rule names a keyword of node)
    if rule == "type":
        return "must be " + " or ".join([value] if isinstance(value, str) else value)
    if rule == "enum":
        return f"must be one of {value}"
    if rule == "const":
        return f"must be same as const definition: {value}"
    if rule == "pattern":
        return f"must match pattern {node.get('x-pattern', value)}"
    if rule == "format":
        return f"must be {node.get('x-format', value)}"
    texts = {
        "minLength": "must be longer than or equal to {} characters",
        "maxLength": "must be shorter than or equal to {} characters",
        "minimum": "must be bigger than or equal to {}",
        "maximum": "must be smaller than or equal to {}",
        "exclusiveMinimum": "must be bigger than {}",
        "exclusiveMaximum": "must be smaller than {}",
        "minItems": "must contain at least {} items",
        "maxItems": "must contain less than or equal to {} items",
        "minProperties": "must contain at least {} properties",
        "maxProperties": "must contain less than or equal to {} properties",
        "multipleOf": "must be multiple of {}",
    }
    if rule in texts:
        return texts[rule].format(value)
    if rule == "anyOf":
        return "cannot be validated by any definition"
    if rule == "not":
        return (
            "must not be there" if value in ({}, True) else "must NOT match a disallowed definition"
        )
    return err.message


_GOT = frozenset(
    {
        "enum",
        "const",
        "type",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "minItems",
        "maxItems",
    }
)


#: fastjsonschema's order of keywords, so that the error reported first (when there
#: are several) is the one it reported: "spec" missing before "spec.x" wrong, etc.
_KEYWORD_ORDER = {
    k: i
    for i, k in enumerate(
        (
            "type",
            "enum",
            "allOf",
            "anyOf",
            "oneOf",
            "not",
            "minLength",
            "maxLength",
            "pattern",
            "format",
            "minimum",
            "maximum",
            "multipleOf",
            "minItems",
            "maxItems",
            "uniqueItems",
            "items",
            "minProperties",
            "maxProperties",
            "required",
            "dependencies",
            "properties",
            "patternProperties",
            "additionalProperties",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "propertyNames",
            "contains",
            "const",
            "if",
        )
    )
}
_NAMED = frozenset({"properties", "patternProperties", "definitions", "dependencies"})
#: Errors are ranked only in an instance of at most this many values (a rich pod
#: has ~100): ``iter_errors`` builds every error at once and ranking costs ~50 µs an
#: error, so an instance full of wrong values costs at most ~7 ms. A larger instance
#: (a 1 MiB event can hold 100,000 values) reports jsonschema-rs's first error
#: (``validate``, which stops there): a correct error, not always the one
#: fastjsonschema would have named first.
_RANKED_MAX_VALUES = 128


def _values_at_most(instance: Any, limit: int) -> bool:
    """Whether ``instance`` holds at most ``limit`` values (cost bounded by ``limit``)."""
    stack, count = [instance], 0
    while stack:
        node = stack.pop()
        if isinstance(node, dict | list):
            count += len(node)
            if count > limit:
                return False
            stack.extend(node.values() if isinstance(node, dict) else node)
    return True


def _entry(node: Any, path: list[str | int], depth: int) -> tuple[str | int | None, int]:
    """The map key (or item index) at ``path[depth]``, and the next depth.

    jsonschema-rs drops empty keys from instance paths: an entry missing from the
    map, or a path that ends too soon, means the key ``""``.
    """
    token = path[depth] if depth < len(path) else None
    if (
        isinstance(node, dict)
        and "" in node
        and (token is None or not (str(token) in node or any(_int_key(k) == token for k in node)))
    ):
        return "", depth
    return token, depth + 1


@cache
def _ref_target(uri: str, ref: str) -> tuple[str, Any]:
    """The URI and (compiled) schema a ``$ref`` in the resource at ``uri`` names."""
    target, _, pointer = urljoin(uri, ref).partition("#")
    node: Any = _validators().schemas.get(target)
    for part in pointer.split("/")[1:]:
        node = (
            node.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(node, dict) else None
        )
    return target, node


def _trace(
    err: jsonschema_rs.ValidationError, root_uri: str, root: str, instance: Any
) -> tuple[list[int], str, Any]:
    """Follow an error's evaluation path through the schemas and the instance.

    Returns its sort key (fastjsonschema's depth-first order: each keyword at its
    place in :data:`_KEYWORD_ORDER`, a property at its place in the schema, an array
    item or a map entry at its place in the event), the dotted field at fault
    (``data.spec.containers[0].name``) and the value there, taken from the event
    itself (jsonschema-rs's copy sorts keys).
    """
    schemas = _validators().schemas
    uri, node, prev = root_uri, schemas.get(root_uri), ""
    inst, path, depth, field = instance, list(err.instance_path), 0, root
    key: list[int] = []

    def step(token: str | int | None) -> int:
        nonlocal inst, field
        if token is None:
            return 0
        suffix, inst, pos = _step(inst, token)
        field += suffix
        return pos

    for tok in err.evaluation_path:
        if isinstance(tok, int):
            node = node[tok] if isinstance(node, list) and tok < len(node) else None
            if (
                prev == "allOf"
                and isinstance(node, dict)
                and ("x-pattern" in node or "x-format" in node)
            ):
                key[-1] = _KEYWORD_ORDER["pattern"]  # added by _compiled_form: a pattern
            key.append(tok)
        elif prev in _NAMED:
            key.append(list(node).index(tok) if isinstance(node, dict) and tok in node else 0)
            node = node.get(tok) if isinstance(node, dict) else None
            if prev == "properties":
                step(tok)
                depth += 1
            elif prev == "patternProperties":
                token, depth = _entry(inst, path, depth)
                key.append(step(token))
        elif tok == "$ref" and isinstance(node, dict) and isinstance(node.get("$ref"), str):
            key.append(0)
            uri, node = _ref_target(uri, node["$ref"])
        else:
            key.append(_KEYWORD_ORDER.get(tok, len(_KEYWORD_ORDER)))
            node = node.get(tok) if isinstance(node, dict) else None
            if tok in ("items", "additionalProperties") and isinstance(node, dict | bool):
                token, depth = _entry(inst, path, depth)
                key.append(step(token))
        prev = "" if prev in _NAMED else tok if isinstance(tok, str) else ""
    for token in path[depth:]:  # keywords this walk does not know
        step(token)
    return key, (field[1:] if field.startswith(".") else field), inst


def _schema_error(
    validator: Any, instance: Any, root: str, reason: str, root_uri: str
) -> InvalidEvent:
    """The first error of an instance ``is_valid`` refused, as an InvalidEvent naming
    the field. Only called on failure: ``iter_errors`` costs more than ``is_valid``."""
    if _values_at_most(instance, _RANKED_MAX_VALUES):
        errors = list(validator.iter_errors(instance))  # may raise ValueError (no JSON type)
    else:
        try:
            validator.validate(instance)
            errors = []
        except jsonschema_rs.ValidationError as only:
            errors = [only]
    if not errors:  # pragma: no cover - is_valid and iter_errors disagree
        return InvalidEvent(reason, f"{root or 'event'}: invalid", root or None)
    traced = [(*_trace(e, root_uri, root, instance), i) for i, e in enumerate(errors)]
    _, field, value, first = min(traced, key=lambda t: (t[0], t[3]))
    err = errors[first]
    rule, node = _keyword(err, root_uri)
    if rule in ("pattern", "anyOf") and ("x-format" in node or "x-pattern" in node):
        rule = "format" if "x-format" in node else "pattern"  # see _compiled_form
    custom = node.get("x-error")
    detail = _detail(rule, node, err)
    if rule == "required" and isinstance(value, dict):
        missing = [k for k in node.get("required", ()) if k not in value]
        if not missing:  # pragma: no cover - jsonschema-rs names it too
            missing = [err.kind.as_dict().get("property")]
        field = f"{field}.{missing[0]}" if field else str(missing[0])
        detail, custom = custom or "required property is missing", None
    elif rule == "propertyNames":
        inner = err.kind.as_dict().get("error")
        if inner is not None:
            key = inner.instance
            _, inner_node = _keyword(inner, root_uri)
            why = inner_node.get("x-error") or node.get("x-error") or "invalid key"
            field = f"{field}.{key}" if field else str(key)
            detail, custom = f"invalid name {_short(key)}: {why}", None
    elif rule in _GOT:
        detail = f"{detail} (got {_short(value)})"
    if custom:
        detail = custom if rule in ("anyOf", "not") else f"{custom} (got {_short(value)})"
    return InvalidEvent(reason, f"{field or 'event'}: {detail}", field or None)


_JSON_SCALARS = (str, int, float, bool, type(None))


def _not_json(value: Any, path: list[str | int]) -> list[str | int] | None:
    """Path to the first value jsonschema-rs cannot take (not a JSON type), or None."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return [*path, str(k)]
            found = _not_json(v, [*path, k])
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = _not_json(v, [*path, i])
            if found is not None:
                return found
    elif not isinstance(value, _JSON_SCALARS):
        return path
    return None


def _unsupported(event: dict[str, Any], exc: ValueError, reason: str) -> InvalidEvent:
    """An event holding a Python value JSON has no type for (a set, bytes, a non-str key)."""
    path = _not_json(event, [])
    field = _locate("", event, path)[0] if path else None
    if path:
        reason = "schema" if path[0] == "data" and len(path) > 1 else "envelope"
    return InvalidEvent(reason, f"{field or 'event'}: not a JSON value ({exc})", field)


# ---------------------------------------------------------------------- quantities


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
        raise InvalidEvent("quantity", f"{field}: invalid quantity {_short(value)}: {units}", field)
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


def _resource_list(values: Any, path: str) -> dict[str, int]:
    """Base units of each quantity of a ResourceList, or InvalidEvent naming ``path.name``."""
    if not values:
        return {}
    return {name: _quantity(name, v, path) for name, v in values.items()}


def _containers(containers: Any, path: str) -> int:
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
                            _resource_list(values, f"{path}[{i}].resources.{kind}").values()
                        )
                    total += known
    return total


def _units_of(name: str, value: Any, field: str) -> int:
    # pod_resource_requests' ``units``: every quantity was converted (and checked) before.
    return _quantity(name, value, field)


def _check_pod_totals(data: dict[str, Any]) -> None:
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


#: Pod fields that change where kube-scheduler may place a pod and that esched does
#: not implement: field -> (kube plugin, what). A pod setting one is refused (reason
#: ``unsupported``, dead-lettered by ingest) rather than placed as if it were absent.
UNSUPPORTED_POD_FIELDS = {
    "spec.affinity.podAffinity": ("InterPodAffinity", "inter-pod affinity"),
    "spec.affinity.podAntiAffinity": ("InterPodAffinity", "inter-pod anti-affinity"),
    "spec.topologySpreadConstraints": ("PodTopologySpread", "topology spread constraints"),
    "spec.resourceClaims": ("DynamicResources", "DRA resource claims"),
    "spec.volumes[].persistentVolumeClaim": ("VolumeBinding", "volumes of persistent claims"),
    "spec.volumes[].ephemeral": ("VolumeBinding", "generic ephemeral volumes"),
}


def _refused_field(field: str, path: str) -> InvalidEvent:
    plugin, what = UNSUPPORTED_POD_FIELDS[field]
    return InvalidEvent(
        "unsupported",
        f"data.{path}: {what} ({plugin}) not implemented by esched; the pod is refused "
        "rather than placed ignoring them",
        f"data.{path}",
    )


def _check_refused_fields(spec: dict[str, Any]) -> None:
    affinity = spec.get("affinity") or {}
    for key in ("podAffinity", "podAntiAffinity"):
        if affinity.get(key):
            raise _refused_field(f"spec.affinity.{key}", f"spec.affinity.{key}")
    for key in ("topologySpreadConstraints", "resourceClaims"):
        if spec.get(key):
            raise _refused_field(f"spec.{key}", f"spec.{key}")
    for i, volume in enumerate(spec.get("volumes") or ()):
        for key in ("persistentVolumeClaim", "ephemeral"):
            if isinstance(volume, dict) and key in volume:
                raise _refused_field(f"spec.volumes[].{key}", f"spec.volumes[{i}].{key}")


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


def _check_podgroup(data: dict[str, Any]) -> None:
    _resource_list(data["spec"].get("minResources"), "data.spec.minResources")


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


def _check_queue(data: dict[str, Any]) -> None:
    spec = data.get("spec") or {}
    cap = _resource_list(spec.get("capability"), "data.spec.capability")
    des = _resource_list(spec.get("deserved"), "data.spec.deserved")
    gua = _resource_list(
        (spec.get("guarantee") or {}).get("resource"), "data.spec.guarantee.resource"
    )
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
    "esched.pod.updated": _check_pod_update,
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


_SAFE_YEARS = (TIME_WINDOW[0].year + 1, TIME_WINDOW[1].year - 2)
_RFC3339 = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.\d+)?(?:([Zz])|([+-])(\d\d):?(\d\d))\Z"
)


def _utc(value: Any) -> datetime | None:
    """An RFC 3339 ``time`` (as the schema's format admits it: ``t``/``z`` in either
    case, a leap second, ``+hhmm``) in UTC, or None if it is not one or lies outside
    :data:`TIME_WINDOW`. The year is checked before any arithmetic, so nothing near
    the ends of ``datetime``'s range is ever converted."""
    m = _RFC3339.match(value) if isinstance(value, str) else None
    if m is None:
        return None
    year = int(m[1])
    low, high = TIME_WINDOW
    if not low.year - 1 <= year <= high.year:
        return None
    try:
        when = datetime(year, int(m[2]), int(m[3]), int(m[4]), int(m[5]), min(int(m[6]), 59))
    except ValueError:
        return None
    if m[7] is None:
        offset = timedelta(hours=int(m[9]), minutes=int(m[10]))
        when = when - offset if m[8] == "+" else when + offset
    when = when.replace(tzinfo=UTC)
    return when if low <= when < high else None


def _check_time(value: Any) -> None:
    """``time`` is RFC 3339 within :data:`TIME_WINDOW` (UTC)."""
    # The schema checked the format; a year a whole year inside the window stays
    # inside whatever its offset (at most a day): the common case, one slice.
    year = value[:4] if value.__class__ is str else ""
    if year.isdigit() and _SAFE_YEARS[0] <= int(year) <= _SAFE_YEARS[1] and value[4:5] == "-":
        return
    if _utc(value) is None:
        low, high = TIME_WINDOW
        raise InvalidEvent(
            "envelope",
            f"time: {_short(value)} is not an RFC 3339 timestamp within "
            f"{low.year}..{high.year - 1} (UTC)",
            "time",
        )


def validate_event(event: Any, *, allowed_types: Collection[str] = EXTERNAL_TYPES) -> dict:
    """Validate an already-decoded event; return it unchanged or raise InvalidEvent.

    Checks, in order: a JSON object (``not_object``), the CloudEvents 1.0 envelope
    (``envelope``), the type is an esched type in ``allowed_types``
    (``unknown_type``), ``data`` against ``schemas/v1/<type>.json`` (``schema``),
    and every quantity (``quantity``).
    """
    if not isinstance(event, dict):
        raise InvalidEvent("not_object", f"event must be a JSON object, not {type(event).__name__}")
    v = _compiled or _validators()
    try:
        valid = v.envelope_valid(event)
    except ValueError as exc:  # a Python value with no JSON type, anywhere in the event
        raise _unsupported(event, exc, "envelope") from None
    if not valid:
        try:
            invalid = _schema_error(v.envelope, event, "", "envelope", _ENVELOPE_URI)
        except ValueError as err:
            invalid = _unsupported(event, err, "envelope")
        raise invalid from None
    when = event.get("time")
    if when is not None:
        _check_time(when)
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
    data_valid = v.data_valid.get(etype)
    if data_valid is None:  # allowed by the caller, but no schema: never accept blindly
        raise InvalidEvent("unknown_type", f"type: no schema for {etype!r}", "type")
    data = event["data"]
    try:
        if not data_valid(data):
            raise _schema_error(
                v.data[etype], data, "data", "schema", f"{SCHEMA_BASE_URI}{etype}.json"
            ) from None
    except ValueError as err:
        if isinstance(err, InvalidEvent):
            raise
        raise _unsupported(event, err, "schema") from None
    check = _QUANTITY_CHECKS.get(etype)
    if check is not None:
        check(data)
    return event


def parse_event(
    raw: bytes | bytearray | memoryview | str,
    *,
    allowed_types: Collection[str] = EXTERNAL_TYPES,
    max_bytes: int = MAX_EVENT_BYTES,
) -> dict:
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
            "annotations": {
                "scheduling.k8s.io/group-name": "trainer",
                "volcano.sh/queue-name": "research",
            },
        },
        "spec": {
            "priorityClassName": "batch",
            "priority": 100,
            "containers": [
                {
                    "name": "main",
                    "image": "trainer:1.4",
                    "resources": {
                        "requests": {"cpu": "1500m", "memory": "4Gi"},
                        "limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1},
                    },
                },
                {
                    "name": "sidecar",
                    "image": "log:2",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                },
            ],
            "nodeSelector": {"pool": "gpu"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
    }
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-node-1", "labels": {"pool": "gpu", "zone": "a"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": "4"}
        },
    }
    group = {
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {
            "minMember": 4,
            "queue": "research",
            "minResources": {"cpu": "6", "memory": "16Gi"},
        },
    }
    usage = {
        "window": 10,
        "nodes": [{"name": "gpu-node-1", "usage": {"cpu": "12", "memory": "40Gi"}}],
    }

    def env(i: int, etype: str, data: dict[str, Any]) -> dict[str, Any]:
        return envelope(
            etype,
            "esched-bench",
            data,
            id=f"bench-{i}",
            time="2026-01-01T00:00:00Z",
            content_type=None,
        )

    mix: list[tuple[str, dict[str, Any]]] = [("esched.pod.submitted", pod)] * 7 + [
        ("esched.node.added", node),
        ("esched.podgroup.submitted", group),
        ("esched.usage.reported", usage),
    ]
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
