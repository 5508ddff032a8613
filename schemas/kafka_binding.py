"""The CloudEvents 1.0 Kafka protocol binding: one Kafka record in, validated events out,
and an envelope out as a record in either content mode.

Which mode a record is in (the binding's sections 3.1 and 3.2):

- ``content-type`` header ``application/cloudevents-batch+json``: a JSON array of
  structured events (the JSON event format's batch);
- ``content-type`` ``application/cloudevents+json`` (any ``+json`` cloudevents
  type): **structured**, the whole envelope is the value;
- otherwise a ``ce_specversion`` header: **binary**, each context attribute is a
  ``ce_<name>`` header, ``content-type`` is ``datacontenttype`` and the value is the
  data;
- otherwise (no header at all, the way esched and kcat publish): structured. A
  structured envelope without ``datacontenttype`` takes the ``content-type`` header's
  (the CloudEvents SDK moves it there).

What the JSON event format asks of a reader is done before validation: a null
attribute is absent, and ``data_base64`` with a JSON ``datacontenttype`` is decoded
into ``data``. Extension attributes are kept. An event read in binary mode, from a
batch, or changed by those rules is stored as :func:`~esched.schemas.events.envelope_of_attributes`
builds it; an unchanged structured event is stored as it came (its bytes; a Volcano
Job with ingest's marker put in front, :func:`~esched.schemas.events.stored_form`).
Either way the stored event has the same attributes and data whatever the mode.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Collection, Sequence
from typing import Any

import orjson

from esched.schemas.events import EXTERNAL_TYPES, envelope_of_attributes
from esched.schemas.validator import MAX_EVENT_BYTES, InvalidEvent, validate_event

__all__ = [
    "BATCH",
    "BATCH_CONTENT_TYPE",
    "BINARY",
    "STRUCTURED",
    "STRUCTURED_CONTENT_TYPE",
    "Decoded",
    "Headers",
    "content_mode",
    "decode_record",
    "encode_event",
    "is_json_type",
]

#: Kafka record headers as the bus carries them: ``(name, value)`` pairs, in order.
Headers = tuple[tuple[str, bytes], ...]
#: One event of a record: ``(envelope, bytes to store)``, or why it is refused.
Decoded = tuple[dict[str, Any], bytes] | InvalidEvent

STRUCTURED = "structured"
BINARY = "binary"
BATCH = "batch"
STRUCTURED_CONTENT_TYPE = "application/cloudevents+json"
BATCH_CONTENT_TYPE = "application/cloudevents-batch+json"

_CONTENT_TYPE = "content-type"
_PREFIX = "ce_"
# A JSON media type, parameters allowed (the envelope schema's datacontenttype rule).
_JSON_TYPE = re.compile(r"^application/(?:[^;]*\+)?json(?:;.*)?$", re.IGNORECASE)


def _header_text(name: str, value: bytes | str | None) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidEvent(
            "envelope", f"header {name}: not UTF-8 text", name.removeprefix(_PREFIX)
        ) from None


def _content_type(headers: Sequence[tuple[str, bytes]]) -> str | None:
    for name, value in headers:
        if name.lower() == _CONTENT_TYPE:
            return _header_text(name, value).strip()
    return None


def content_mode(headers: Sequence[tuple[str, bytes]]) -> str:
    """:data:`STRUCTURED`, :data:`BINARY` or :data:`BATCH` for a record's headers."""
    if not headers:
        return STRUCTURED
    ctype = (_content_type(headers) or "").lower()
    if ctype.startswith("application/cloudevents-batch"):
        return BATCH
    if ctype.startswith("application/cloudevents"):
        return STRUCTURED
    if any(name.lower() == "ce_specversion" for name, _v in headers):
        return BINARY
    return STRUCTURED


def is_json_type(content_type: str | None) -> bool:
    """Whether ``content_type`` is a JSON media type (``application/json``, ``…+json``)."""
    return content_type is not None and _JSON_TYPE.match(content_type) is not None


def _normalized(event: Any, header_type: str | None) -> tuple[Any, bool]:
    """A structured envelope as the JSON event format reads it; whether it changed."""
    if not isinstance(event, dict):
        return event, False
    changed = False
    if None in event.values():  # "null ... MUST be treated as absent"
        event = {k: v for k, v in event.items() if v is not None}
        changed = True
    if header_type and "datacontenttype" not in event:
        event = {**event, "datacontenttype": header_type}
        changed = True
    if "data_base64" in event and "data" not in event:
        ctype = event.get("datacontenttype")
        # Without a datacontenttype data_base64 is opaque bytes: left for the validator.
        if isinstance(ctype, str) and is_json_type(ctype):
            raw = event["data_base64"]
            try:
                data = orjson.loads(base64.b64decode(str(raw), validate=True))
            except (binascii.Error, ValueError) as exc:
                raise InvalidEvent(
                    "envelope",
                    f"data_base64: not base64 of JSON ({ctype}): {exc}",
                    "data_base64",
                ) from None
            event = {k: v for k, v in event.items() if k != "data_base64"}
            event["data"] = data
            changed = True
    return event, changed


def _structured(
    event: Any, header_type: str | None, allowed: Collection[str], raw: bytes | None
) -> Decoded:
    try:
        event, changed = _normalized(event, header_type)
        validate_event(event, allowed_types=allowed)
    except InvalidEvent as exc:
        return exc
    if changed or raw is None:
        event = envelope_of_attributes(event, event["data"])
        return event, orjson.dumps(event)
    return event, raw


def _binary(
    value: bytes, headers: Sequence[tuple[str, bytes]], allowed: Collection[str]
) -> Decoded:
    attrs: dict[str, Any] = {}
    try:
        for name, hvalue in headers:
            lower = name.lower()
            if lower == _CONTENT_TYPE:
                attrs["datacontenttype"] = _header_text(name, hvalue).strip()
            elif lower.startswith(_PREFIX) and hvalue is not None:
                attrs[lower[len(_PREFIX) :]] = _header_text(name, hvalue)
        ctype = attrs.get("datacontenttype")
        if ctype is not None and not is_json_type(ctype):
            raise InvalidEvent(
                "envelope",
                f"content-type: {ctype!r} is not JSON; esched's data is a JSON object "
                "(application/json)",
                "datacontenttype",
            )
        if not value:
            raise InvalidEvent("envelope", "data: the record has no value (no data)", "data")
        try:
            data = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise InvalidEvent("not_json", f"data: not valid JSON: {exc}", "data") from None
        event = envelope_of_attributes(attrs, data)
        validate_event(event, allowed_types=allowed)
    except InvalidEvent as exc:
        return exc
    return event, orjson.dumps(event)


def decode_record(
    value: bytes,
    headers: Sequence[tuple[str, bytes]] = (),
    *,
    allowed_types: Collection[str] = EXTERNAL_TYPES,
    max_bytes: int = MAX_EVENT_BYTES,
) -> list[Decoded]:
    """The events of one Kafka record (one, or a batch's), each validated.

    Each item is ``(envelope, payload)``, the payload being the bytes to store, or
    the :class:`~esched.schemas.validator.InvalidEvent` that refuses it (a batch
    item's message starts with ``batch[i]``).
    """
    if len(value) > max_bytes:
        return [
            InvalidEvent("oversize", f"event is {len(value)} bytes, over the limit of {max_bytes}")
        ]
    try:
        mode = content_mode(headers)
        header_type = _content_type(headers) if headers else None
    except InvalidEvent as exc:
        return [exc]
    if mode == BINARY:
        return [_binary(value, headers, allowed_types)]
    try:
        decoded = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        return [InvalidEvent("not_json", f"not valid JSON: {exc}")]
    if mode == STRUCTURED:
        # The SDK's structured records carry datacontenttype as the content-type header.
        if header_type is not None and header_type.lower().startswith("application/cloudevents"):
            header_type = None
        return [_structured(decoded, header_type, allowed_types, value)]
    if not isinstance(decoded, list):
        return [
            InvalidEvent(
                "not_object",
                f"a {BATCH_CONTENT_TYPE} record must be a JSON array, not {type(decoded).__name__}",
            )
        ]
    out: list[Decoded] = []
    for i, item in enumerate(decoded):
        one = _structured(item, None, allowed_types, None)
        if isinstance(one, InvalidEvent):
            one = InvalidEvent(one.reason, f"batch[{i}]: {one.message}", one.field)
        out.append(one)
    return out


def encode_event(event: dict[str, Any], mode: str = STRUCTURED) -> tuple[bytes, Headers]:
    """``(value, headers)`` of one envelope as a Kafka record in ``mode``.

    Structured: the envelope as the value, ``content-type: application/cloudevents+json``.
    Binary: every attribute but ``data`` as a ``ce_<name>`` header (``datacontenttype``
    as ``content-type``), ``data`` as JSON in the value.
    """
    if mode == STRUCTURED:
        return orjson.dumps(event), ((_CONTENT_TYPE, STRUCTURED_CONTENT_TYPE.encode()),)
    if mode != BINARY:
        raise ValueError(f"unknown content mode {mode!r} (expected {STRUCTURED} or {BINARY})")
    headers: list[tuple[str, bytes]] = []
    for name, value in event.items():
        if name == "data" or value is None:
            continue
        text = value if isinstance(value, str) else orjson.dumps(value).decode()
        if name == "datacontenttype":
            headers.append((_CONTENT_TYPE, text.encode()))
        else:
            headers.append((f"{_PREFIX}{name}", text.encode()))
    return orjson.dumps(event.get("data")), tuple(headers)
