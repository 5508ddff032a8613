"""The dead-letter topic's one writer: what a dead letter holds, and how it is sent.

A message a service cannot use (invalid input for ingest, a malformed proposal for the
commit service) goes to the dead-letter topic with the reason, where it came from and
its original bytes, so an operator can see it and replay it once fixed.
"""

from __future__ import annotations

import base64
import functools
import logging
from collections.abc import Sequence
from datetime import UTC, datetime

import orjson

from esched.services import metrics
from esched.services.bus.base import BusProducer, Message
from esched.services.faults import retry_transient

__all__ = ["Dead", "deadletter_record", "send_deadletters"]

log = logging.getLogger(__name__)

#: A message refused: (message, reason code, explanation, offending field or None).
Dead = tuple[Message, str, str, str | None]


def deadletter_record(
    msg: Message, reason: str, message: str, fieldname: str | None, service: str
) -> bytes:
    """The dead-letter JSON: reason, where the message came from, its original bytes
    and headers."""
    return orjson.dumps(
        {
            "reason": reason,
            "field": fieldname,
            "message": message,
            "service": service,
            "time": datetime.now(UTC).isoformat(),
            "origin": {
                "topic": msg.topic,
                "partition": msg.partition,
                "offset": msg.offset,
                "timestamp_ms": msg.timestamp_ms,
                "key_b64": base64.b64encode(msg.key).decode() if msg.key is not None else None,
            },
            "value_b64": base64.b64encode(msg.value).decode(),
            # A binary-mode CloudEvent's attributes are its headers: kept, so the
            # record can be replayed whole once fixed.
            "headers": [
                {"key": name, "value_b64": base64.b64encode(value or b"").decode()}
                for name, value in msg.headers
            ],
        }
    )


async def send_deadletters(
    producer: BusProducer, topic: str, dead: Sequence[Dead], *, service: str
) -> None:
    """Send ``dead`` to the dead-letter ``topic`` (kept by the original key), retrying
    while the broker is away, and count each by ``service`` and reason."""
    records = [
        (m.key, deadletter_record(m, reason, text, fieldname, service))
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
        log.info("dead-letter %s/%d@%d: %s", m.topic, m.partition, m.offset, text)
