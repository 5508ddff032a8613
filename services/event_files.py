"""Read event files into bus records: CloudEvents JSONL, or Kubernetes/Volcano manifests.

A ``.jsonl`` / ``.ndjson`` file (or stdin that looks like one) is taken line by
line *as bytes*, so a malformed line still reaches the validator and, in ingest,
the dead-letter topic, instead of being lost here. Anything else is parsed as
JSON or multi-document YAML and converted by :mod:`esched.schemas.manifests`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from esched.schemas.events import message_key
from esched.schemas.kafka_binding import BINARY, STRUCTURED_CONTENT_TYPE, encode_event
from esched.schemas.manifests import events_from_documents, input_nodes, load_documents
from esched.services.bus.base import Bus, Headers, TopicNames

__all__ = ["Record", "publish_records", "read_records", "record_for_event", "with_mode"]


@dataclass(frozen=True, slots=True)
class Record:
    """One message to put on the bus, and where it came from (for error messages)."""

    topic: str
    key: bytes | None
    value: bytes
    origin: str
    #: Record headers (a CloudEvents content mode's; see :func:`with_mode`).
    headers: Headers = ()


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


def with_mode(rec: Record, mode: str | None) -> Record:
    """``rec`` in a CloudEvents content mode: ``None`` as it is (no headers, the
    structured envelope), ``"structured"`` with ``content-type:
    application/cloudevents+json``, ``"binary"`` with ``ce_`` headers and the data as the
    value. A value that is not a JSON object stays as it is (ingest dead-letters it)."""
    if mode is None:
        return rec
    if mode != BINARY:
        return Record(
            rec.topic,
            rec.key,
            rec.value,
            rec.origin,
            (("content-type", STRUCTURED_CONTENT_TYPE.encode()),),
        )
    try:
        event = orjson.loads(rec.value)
    except orjson.JSONDecodeError:
        return rec
    if not isinstance(event, dict):
        return rec
    value, headers = encode_event(event, BINARY)
    return Record(rec.topic, rec.key, value, rec.origin, headers)


def _read(path: str) -> tuple[bytes, str]:
    if path == "-":
        return sys.stdin.buffer.read(), "<stdin>"
    return Path(path).read_bytes(), path


def read_records(
    paths: Iterable[str],
    topics: TopicNames,
    *,
    warn: Callable[[str], None] | None = None,
    mode: str | None = None,
) -> Iterator[Record]:
    """Records from each path in order; ``-`` reads stdin.

    Every file is read before the first record is made: a DaemonSet runs on the Node
    objects (and node events) of all the files. ``warn`` gets one line per object
    skipped (kinds that do not affect scheduling) and per DaemonSet without nodes;
    ``mode``: see :func:`with_mode`. Raises ``ValueError`` (with the file name) for a
    manifest that cannot be converted.
    """
    loaded: list[tuple[str, list[bytes] | None, list[dict[str, Any]]]] = []
    for path in paths:
        data, name = _read(path)
        if path.endswith((".jsonl", ".ndjson")) or (
            not path.endswith((".yaml", ".yml", ".json")) and _looks_like_jsonl(data)
        ):
            lines = data.splitlines()
            parsed = []
            for line in lines:
                try:
                    event = orjson.loads(line) if line.strip() else None
                except orjson.JSONDecodeError:
                    event = None
                # Only node events matter across files (a DaemonSet's nodes).
                if isinstance(event, dict) and str(event.get("type", "")).startswith(
                    "esched.node."
                ):
                    parsed.append(event)
            loaded.append((name, lines, parsed))
            continue
        try:
            docs = load_documents(data.decode())
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{name}: {exc}") from exc
        loaded.append((name, None, docs))
    nodes = input_nodes(doc for _name, _lines, docs in loaded for doc in docs)
    for name, raw_lines, docs in loaded:
        if raw_lines is not None:
            for lineno, line in enumerate(raw_lines, 1):
                if line.strip():
                    yield with_mode(
                        _raw_line_record(line.strip(), topics, f"{name}:{lineno}"), mode
                    )
            continue
        say = None if warn is None else (lambda line, name=name: warn(f"{name}: {line}"))
        try:
            events = list(events_from_documents(docs, nodes=nodes, warn=say))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{name}: {exc}") from exc
        for i, event in enumerate(events):
            yield with_mode(record_for_event(event, topics, f"{name}#{i}"), mode)


#: Messages per ``send_many`` call: bounds the producer's buffered batch.
PUBLISH_CHUNK = 5000


async def publish_records(bus: Bus, records: list[Record]) -> dict[str, int]:
    """Send ``records`` to their topics in order (per topic); return counts per topic."""
    by_topic: dict[str, list[tuple[bytes | None, bytes, Headers]]] = {}
    for rec in records:
        by_topic.setdefault(rec.topic, []).append((rec.key, rec.value, rec.headers))
    if not by_topic:
        return {}
    await bus.ensure_topics()
    producer = bus.producer()
    await producer.start()
    try:
        for topic, batch in by_topic.items():
            for i in range(0, len(batch), PUBLISH_CHUNK):
                chunk = batch[i : i + PUBLISH_CHUNK]
                if any(headers for _k, _v, headers in chunk):
                    await producer.send_with_headers(topic, chunk)
                else:
                    await producer.send_many(topic, [(k, v) for k, v, _h in chunk])
    finally:
        await producer.stop()
    return {topic: len(batch) for topic, batch in sorted(by_topic.items())}
