"""Error messages: the first schema error of an event as an :class:`InvalidEvent` that
names the field, in fastjsonschema's words and order."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any
from urllib.parse import urljoin

import jsonschema_rs

from esched.schemas.validator.compiled import validators
from esched.schemas.validator.errors import InvalidEvent, short_repr


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
    node: Any = validators().schemas.get(uri, {})
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
    node: Any = validators().schemas.get(target)
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
    schemas = validators().schemas
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
                key[-1] = _KEYWORD_ORDER["pattern"]  # added by compiled_form: a pattern
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


def schema_error(
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
        rule = "format" if "x-format" in node else "pattern"  # see compiled_form
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
            detail, custom = f"invalid name {short_repr(key)}: {why}", None
    elif rule in _GOT:
        detail = f"{detail} (got {short_repr(value)})"
    if custom:
        detail = custom if rule in ("anyOf", "not") else f"{custom} (got {short_repr(value)})"
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


def unsupported_error(event: dict[str, Any], exc: ValueError, reason: str) -> InvalidEvent:
    """An event holding a Python value JSON has no type for (a set, bytes, a non-str key)."""
    path = _not_json(event, [])
    field = _locate("", event, path)[0] if path else None
    if path:
        reason = "schema" if path[0] == "data" and len(path) > 1 else "envelope"
    return InvalidEvent(reason, f"{field or 'event'}: not a JSON value ({exc})", field)
