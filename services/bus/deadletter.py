"""The dead-letter topic's one writer: what a dead letter holds, and how it is sent.

A message a service cannot use (invalid input for ingest, a malformed proposal for the
commit service) goes to the dead-letter topic with the reason, where it came from and
its original bytes, so an operator can see it and replay it once fixed.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import logging
from collections.abc import Sequence
from datetime import UTC, datetime

import orjson

from esched.services import metrics
from esched.services.bus.base import BusProducer, Message
from esched.services.faults import retry_transient

__all__ = ["MAX_ORIGINAL_BYTES", "Dead", "deadletter_record", "send_deadletters"]

log = logging.getLogger(__name__)

#: A message refused: (message, reason code, explanation, offending field or None).
Dead = tuple[Message, str, str, str | None]


#: Bytes of the original message a dead letter keeps; the rest is cut and only the
#: original's size and SHA-256 say what it was. Base64 of this plus the other
#: fields stays far below any producer's request limit (Kafka's 1 MiB default), so
#: writing a dead letter can never fail for size.
MAX_ORIGINAL_BYTES = 64 * 1024
#: Longest reason text and field name kept (each from the offending input).
MAX_TEXT_CHARS = 1024
MAX_FIELD_CHARS = 256
#: Headers kept (Kafka allows any number; a record of thousands must not make the
#: dead letter too large to send).
MAX_HEADERS = 64


def _cut(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


def deadletter_record(
    msg: Message, reason: str, message: str, fieldname: str | None, service: str
) -> bytes:
    """The dead-letter JSON: reason, where the message came from, its original bytes
    and headers, bounded: at most :data:`MAX_ORIGINAL_BYTES` of the value
    (``value_truncated`` says if it was cut; ``value_bytes`` and ``value_sha256``
    identify the whole original), the key and each header value likewise cut, the
    texts cut to a few KiB."""
    value = msg.value
    key = msg.key
    return orjson.dumps(
        {
            "reason": _cut(reason, MAX_FIELD_CHARS),
            "field": _cut(fieldname, MAX_FIELD_CHARS),
            "message": _cut(message, MAX_TEXT_CHARS),
            "service": service,
            "time": datetime.now(UTC).isoformat(),
            "origin": {
                "topic": msg.topic,
                "partition": msg.partition,
                "offset": msg.offset,
                "timestamp_ms": msg.timestamp_ms,
                "key_b64": (
                    base64.b64encode(key[:MAX_FIELD_CHARS]).decode() if key is not None else None
                ),
            },
            "value_b64": base64.b64encode(value[:MAX_ORIGINAL_BYTES]).decode(),
            "value_bytes": len(value),
            "value_sha256": hashlib.sha256(value).hexdigest(),
            "value_truncated": len(value) > MAX_ORIGINAL_BYTES,
            # A binary-mode CloudEvent's attributes are its headers: kept (each cut
            # like the key, and no more of them than a record can carry), so the
            # record can be replayed whole once fixed.
            "headers": [
                {
                    "key": _cut(name, MAX_FIELD_CHARS),
                    "value_b64": base64.b64encode((hv or b"")[:MAX_TEXT_CHARS]).decode(),
                }
                for name, hv in msg.headers[:MAX_HEADERS]
            ],
        }
    )


async def send_deadletters(
    producer: BusProducer, topic: str, dead: Sequence[Dead], *, service: str
) -> None:
    """Send ``dead`` to the dead-letter ``topic`` (kept by the original key), retrying
    while the broker is away, and count each by ``service`` and reason."""
    records = [
        (
            m.key if m.key is None or len(m.key) <= MAX_FIELD_CHARS else m.key[:MAX_FIELD_CHARS],
            deadletter_record(m, reason, text, fieldname, service),
        )
        for m, reason, text, fieldname in dead
    ]
    await retry_transient(
        functools.partial(producer.send_many, topic, records),
        what="dead-letter send",
        service=service,
        peer="bus",
    )
    for m, reason, text, _field in dead:
        metrics.DEADLETTER.labels(service, reason).inc()
        log.info(
            "dead-letter %s/%d@%d: %s", m.topic, m.partition, m.offset, _cut(text, MAX_TEXT_CHARS)
        )
