"""Read event files into bus records: CloudEvents JSONL, or Kubernetes/Volcano manifests.

A ``.jsonl`` / ``.ndjson`` file (or stdin that looks like one) is taken line by
line *as bytes*, so a malformed line still reaches the validator and, in ingest,
the dead-letter topic, instead of being lost here. Anything else is parsed as
JSON or multi-document YAML and converted by :mod:`esched.schemas.manifests`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from esched.schemas.events import message_key
from esched.schemas.manifests import events_from_documents, load_documents
from esched.services.bus.base import Bus, TopicNames

__all__ = ["Record", "publish_records", "read_records", "record_for_event"]


@dataclass(frozen=True, slots=True)
class Record:
    """One message to put on the bus, and where it came from (for error messages)."""

    topic: str
    key: bytes | None
    value: bytes
    origin: str


def record_for_event(event: dict, topics: TopicNames, origin: str) -> Record:
    """Route an event: topic by type; key by gang, else object (keeps a gang's order)."""
    key = message_key(event)
    return Record(
        topics.for_event_type(str(event.get("type", ""))),
        key.encode() if key else None,
        orjson.dumps(event),
        origin,
    )


def _raw_line_record(line: bytes, topics: TopicNames, origin: str) -> Record:
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError:
        return Record(topics.pods, None, line, origin)
    if not isinstance(event, dict):
        return Record(topics.pods, None, line, origin)
    routed = record_for_event(event, topics, origin)
    return Record(routed.topic, routed.key, line, origin)  # keep the producer's bytes


def _looks_like_jsonl(text: bytes) -> bool:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return (
        len(lines) > 1
        and all(ln.lstrip().startswith(b"{") for ln in lines[:5])
        and (not text.lstrip().startswith(b"{\n"))
    )


def read_records(paths: Iterable[str], topics: TopicNames) -> Iterator[Record]:
    """Records from each path in order; ``-`` reads stdin.

    Raises ``ValueError`` (with the file name) for a manifest that cannot be converted.
    """
    for path in paths:
        if path == "-":
            data, name = sys.stdin.buffer.read(), "<stdin>"
        else:
            data, name = Path(path).read_bytes(), path
        if path.endswith((".jsonl", ".ndjson")) or (
            not path.endswith((".yaml", ".yml", ".json")) and _looks_like_jsonl(data)
        ):
            for lineno, line in enumerate(data.splitlines(), 1):
                if line.strip():
                    yield _raw_line_record(line.strip(), topics, f"{name}:{lineno}")
            continue
        try:
            docs = load_documents(data.decode())
            events = list(events_from_documents(docs))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{name}: {exc}") from exc
        for i, event in enumerate(events):
            yield record_for_event(event, topics, f"{name}#{i}")


#: Messages per ``send_many`` call: bounds the producer's buffered batch.
PUBLISH_CHUNK = 5000


async def publish_records(bus: Bus, records: list[Record]) -> dict[str, int]:
    """Send ``records`` to their topics in order (per topic); return counts per topic."""
    by_topic: dict[str, list[tuple[bytes | None, bytes]]] = {}
    for rec in records:
        by_topic.setdefault(rec.topic, []).append((rec.key, rec.value))
    if not by_topic:
        return {}
    await bus.ensure_topics()
    producer = bus.producer()
    await producer.start()
    try:
        for topic, batch in by_topic.items():
            for i in range(0, len(batch), PUBLISH_CHUNK):
                await producer.send_many(topic, batch[i : i + PUBLISH_CHUNK])
    finally:
        await producer.stop()
    return {topic: len(batch) for topic, batch in sorted(by_topic.items())}
