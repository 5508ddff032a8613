"""The validation pipeline: size, JSON, envelope, type, data schema, then per-type checks."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import orjson

from esched.schemas.events import EXTERNAL_TYPES, TYPES
from esched.schemas.validator.checks import QUANTITY_CHECKS as _CHECKS
from esched.schemas.validator.compiled import (
    ENVELOPE_URI,
    SCHEMA_BASE_URI,
    Compiled,
    validators,
)
from esched.schemas.validator.errors import InvalidEvent, short_repr
from esched.schemas.validator.messages import schema_error, unsupported_error
from esched.schemas.validator.timewindow import check_time

__all__ = [
    "MAX_EVENT_BYTES",
    "compile_validators",
    "parse_event",
    "validate_data",
    "validate_event",
]

#: The per-type checks, bound by assignment: CPython 3.11 compiles ``name.get(...)`` on
#: an *imported* name as an attribute load (a bound method built every event) rather
#: than a method call, which costs ~100 instructions an event.
_QUANTITY_CHECKS = _CHECKS

#: Largest accepted event, in bytes of the serialized message (Kafka's default is 1 MiB).
MAX_EVENT_BYTES = 1_048_576

#: This module's reference to the compiled validators, set on first use: one global
#: lookup per event, as when they lived in one module.
_compiled: Compiled | None = None


def _load() -> Compiled:
    global _compiled
    _compiled = validators()
    return _compiled


def compile_validators() -> None:
    """Compile every schema now rather than on the first :func:`validate_event` (a
    few hundred milliseconds): for a service whose first validation comes with its
    first burst of work, e.g. the job controller's first Job's pods."""
    _compiled or _load()


def validate_event(event: Any, *, allowed_types: Collection[str] = EXTERNAL_TYPES) -> dict:
    """Validate an already-decoded event; return it unchanged or raise InvalidEvent.

    Checks, in order: a JSON object (``not_object``), the CloudEvents 1.0 envelope
    (``envelope``), the type is an esched type in ``allowed_types``
    (``unknown_type``), ``data`` against ``schemas/v1/<type>.json`` (``schema``),
    and every quantity (``quantity``).
    """
    if not isinstance(event, dict):
        raise InvalidEvent("not_object", f"event must be a JSON object, not {type(event).__name__}")
    v = _compiled or _load()
    try:
        valid = v.envelope_valid(event)
    except ValueError as exc:  # a Python value with no JSON type, anywhere in the event
        raise unsupported_error(event, exc, "envelope") from None
    if not valid:
        try:
            invalid = schema_error(v.envelope, event, "", "envelope", ENVELOPE_URI)
        except ValueError as err:
            invalid = unsupported_error(event, err, "envelope")
        raise invalid from None
    when = event.get("time")
    if when is not None:
        check_time(when)
    etype = event["type"]
    if etype not in allowed_types:
        if etype in TYPES:
            msg = f"type: {etype!r} is an esched type not accepted here"
            if etype not in EXTERNAL_TYPES:
                msg += " (internal: only esched's own services write it)"
        else:
            msg = f"type: unknown event type {short_repr(etype)}; known types: " + ", ".join(
                t for t in TYPES if t in allowed_types
            )
        raise InvalidEvent("unknown_type", msg, "type")
    validate_data(etype, event["data"], v)
    return event


def validate_data(etype: str, data: Any, compiled: Compiled | None = None) -> Any:
    """Validate the ``data`` of an event of esched type ``etype``, as the last steps
    of :func:`validate_event` do: its schema (``schema``), then its quantities
    (``quantity``); return it unchanged or raise InvalidEvent, fields named
    ``data.…`` as there. For a producer whose envelope is its own making (the job
    controller's pods built from a Job's template); ``compiled``: the validators
    when the caller has them."""
    v = compiled or _compiled or _load()
    data_valid = v.data_valid.get(etype)
    if data_valid is None:  # allowed by the caller, but no schema: never accept blindly
        raise InvalidEvent("unknown_type", f"type: no schema for {etype!r}", "type")
    try:
        if not data_valid(data):
            raise schema_error(
                v.data[etype], data, "data", "schema", f"{SCHEMA_BASE_URI}{etype}.json"
            ) from None
    except ValueError as err:
        if isinstance(err, InvalidEvent):
            raise
        raise unsupported_error({"data": data}, err, "schema") from None
    check = _QUANTITY_CHECKS.get(etype)
    if check is not None:
        check(data)
    return data


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
