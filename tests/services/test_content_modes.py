"""Ingest takes what real producers send: CloudEvents in both Kafka content modes.

Producers are the official CloudEvents Python SDK (``cloudevents``: its Kafka binding's
``to_binary`` and ``to_structured``, module ``cloudevents.v1.kafka`` in 2.x,
``cloudevents.kafka`` in 1.x) and librdkafka through ``confluent-kafka``, writing to the
real broker (the tansu fixture); each event must be stored as the same envelope whatever
the mode (CloudEvents kafka-protocol-binding.md sections 3.1 and 3.2).
"""

from __future__ import annotations

import asyncio
import base64

import orjson
import pytest

from esched.schemas.kafka_binding import BINARY, STRUCTURED, encode_event
from esched.services.bus import TopicNames, open_bus
from esched.services.bus.kafka import KafkaBus
from esched.services.ingest import IngestConfig, IngestService
from esched.services.store import open_store


def pod_data(name: str) -> dict:
    return {
        "metadata": {"name": name, "namespace": "interop"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "250m"}}}]},
    }


def attributes(i: int, mode: str) -> dict:
    return {
        "specversion": "1.0",
        "id": f"{mode}-{i}",
        "source": "/interop/producer",
        "type": "esched.pod.submitted",
        "time": "2026-11-22T00:00:00Z",
        "datacontenttype": "application/json",
        "subject": f"pod/interop/{mode}-{i}",
        "tenant": "blue",  # an extension attribute
    }


def shared_attributes(event: dict) -> dict:
    """The attributes the test gives every event alike (all but id, subject and data)."""
    return {k: v for k, v in event.items() if k not in ("id", "subject", "data")}


async def _ingest(bus, store_url: str, expected: int) -> tuple[list[dict], IngestService]:
    store = open_store(store_url)
    await store.connect()
    await store.migrate()
    service = IngestService(bus, store, IngestConfig(group="interop", batch_size=64))
    await service.start()
    try:
        while service.totals.polled < expected:
            await asyncio.wait_for(service.run_once(), 30)
    finally:
        await service.stop()
    events = [orjson.loads(e.payload) for e in await store.read(0, 10_000)]
    await store.close()
    return events, service


async def test_binary_mode_and_batches_on_the_in_process_bus(tmp_path) -> None:
    bus = open_bus(None, "esched.")
    structured = {**attributes(0, "s"), "data": pod_data("s-0")}
    binary = {**attributes(0, "b"), "data": pod_data("b-0")}
    value, headers = encode_event(structured, STRUCTURED)
    bus.append(bus.topics.pods, None, value, headers)
    value, headers = encode_event(binary, BINARY)
    bus.append(bus.topics.pods, None, value, headers)
    batch = [{**attributes(i, "batch"), "data": pod_data(f"batch-{i}")} for i in range(3)]
    bus.append(
        bus.topics.pods,
        None,
        orjson.dumps(batch),
        (("content-type", b"application/cloudevents-batch+json"),),
    )
    bad_headers = (("ce_specversion", b"1.0"), ("ce_id", b"x"), ("content-type", b"text/plain"))
    bus.append(bus.topics.pods, b"k", b"not json", bad_headers)

    events, service = await _ingest(bus, f"sqlite:///{tmp_path}/es.sqlite", 4)
    assert [e["id"] for e in events] == ["s-0", "b-0", "batch-0", "batch-1", "batch-2"]
    assert shared_attributes(events[0]) == shared_attributes(events[1])
    assert service.totals.deadlettered == 1
    [dead] = [orjson.loads(m.value) for m in bus.log(bus.topics.deadletter)]
    # The original headers travel with the dead letter, so the record can be replayed.
    kept = [(h["key"], base64.b64decode(h["value_b64"])) for h in dead["headers"]]
    assert kept == list(bad_headers)
    assert dead["field"] == "datacontenttype"


def _sdk_kafka():
    pytest.importorskip("cloudevents")
    try:
        from cloudevents.v1 import kafka
        from cloudevents.v1.http import CloudEvent
    except ImportError:  # cloudevents 1.x
        from cloudevents import kafka  # type: ignore[no-redef]
        from cloudevents.http import CloudEvent  # type: ignore[no-redef]
    return kafka, CloudEvent


def _sdk_messages(n: int) -> list[tuple[str, object]]:
    """``(mode, KafkaMessage)`` pairs written by the official SDK."""
    kafka, CloudEvent = _sdk_kafka()
    out = []
    for i in range(n):
        for mode, convert in (
            ("sdk-binary", kafka.to_binary),
            ("sdk-structured", kafka.to_structured),
        ):
            attrs = attributes(i, mode)
            event = CloudEvent(attrs, pod_data(f"{mode}-{i}"))
            out.append((mode, convert(event)))
    return out


def _by_hand(i: int, mode: str) -> tuple[bytes, list[tuple[str, bytes]]]:
    """A record written from the binding's text alone (not esched's encoder):
    kafka-protocol-binding.md 3.1 (binary: ``ce_`` headers, ``content-type``) and 3.2
    (structured: ``content-type: application/cloudevents+json``)."""
    attrs = attributes(i, f"rd-{mode}")
    data = pod_data(f"rd-{mode}-{i}")
    if mode == STRUCTURED:
        value = orjson.dumps({**attrs, "data": data})
        return value, [("content-type", b"application/cloudevents+json; charset=UTF-8")]
    headers = [("content-type", attrs.pop("datacontenttype").encode())]
    headers += [(f"ce_{name}", str(value).encode()) for name, value in attrs.items()]
    return orjson.dumps(data), headers


@pytest.mark.kafka
async def test_the_cloudevents_sdk_and_librdkafka_in_both_modes_store_the_same_events(
    kafka_bootstrap, topic_prefix, pg_url
) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    bus = KafkaBus(kafka_bootstrap, TopicNames(topic_prefix), session_timeout_ms=3000)
    await bus.ensure_topics()
    n = 3
    # librdkafka (confluent-kafka) sends every record: the SDK's, and records written
    # by hand from the binding, one batch record (the JSON format's batch) among them.
    rd = confluent_kafka.Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all"})
    for _mode, msg in _sdk_messages(n):
        rd.produce(
            bus.topics.pods,
            key=msg.key,  # type: ignore[attr-defined]
            value=msg.value,  # type: ignore[attr-defined]
            headers=list(msg.headers.items()),  # type: ignore[attr-defined]
        )
    for i in range(n):
        for mode in (BINARY, STRUCTURED):
            value, headers = _by_hand(i, mode)
            rd.produce(bus.topics.nodes, value=value, headers=headers)
    batch = [{**attributes(i, "rd-batch"), "data": pod_data(f"rd-batch-{i}")} for i in range(n)]
    rd.produce(
        bus.topics.usage,
        value=orjson.dumps(batch),
        headers=[("content-type", b"application/cloudevents-batch+json")],
    )
    assert rd.flush(30) == 0

    events, service = await _ingest(bus, pg_url, 4 * n + 1)
    assert service.totals.deadlettered == 0, service.totals.reasons
    by_id = {e["id"]: e for e in events}
    assert len(by_id) == 5 * n
    for i in range(n):
        forms = []
        for mode in ("sdk-binary", "sdk-structured", "rd-binary", "rd-structured", "rd-batch"):
            event = by_id[f"{mode}-{i}"]
            assert event["tenant"] == "blue" and event["datacontenttype"] == "application/json"
            assert event["data"]["metadata"]["name"] == f"{mode}-{i}"
            forms.append(shared_attributes(event))
        assert all(f == forms[0] for f in forms), forms
