"""The CloudEvents Kafka protocol binding as ingest reads it: both content modes and the
batch format give the same stored event.

Cases follow the CloudEvents 1.0 Kafka protocol binding (kafka-protocol-binding.md,
sections 3.1 binary and 3.2 structured) and the JSON event format (json-format.md:
null attributes, ``data_base64``, the batch format), as the official Python SDK
(cloudevents, ``cloudevents.kafka``) writes records.
"""

from __future__ import annotations

import base64

import orjson
import pytest

from esched.schemas.kafka_binding import (
    BATCH,
    BATCH_CONTENT_TYPE,
    BINARY,
    STRUCTURED,
    content_mode,
    decode_record,
    encode_event,
)
from esched.schemas.validator import InvalidEvent


def pod_event(**extra) -> dict:
    event = {
        "specversion": "1.0",
        "id": "e1",
        "source": "/producers/ci",
        "type": "esched.pod.submitted",
        "time": "2026-11-22T00:00:00Z",
        "datacontenttype": "application/json",
        "data": {
            "metadata": {"name": "a", "namespace": "ns"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        },
    }
    event.update(extra)
    return event


def only(value: bytes, headers=()) -> tuple[dict, bytes]:
    [one] = decode_record(value, headers)
    assert not isinstance(one, InvalidEvent), one
    return one


def test_a_structured_record_without_headers_is_stored_as_it_came() -> None:
    raw = orjson.dumps(pod_event())
    event, payload = only(raw)
    assert payload == raw and event["id"] == "e1"


def test_binary_and_structured_records_store_the_same_event() -> None:
    event = pod_event(traceparent="00-abc-def-01", subject="pod/ns/a")
    structured = only(*encode_event(event, STRUCTURED))
    binary = only(*encode_event(event, BINARY))
    assert orjson.loads(structured[1]) == orjson.loads(binary[1]) == event


def test_the_mode_follows_the_content_type_then_ce_specversion() -> None:
    assert content_mode(()) == STRUCTURED
    assert content_mode((("content-type", b"application/cloudevents+json; charset=utf-8"),)) == (
        STRUCTURED
    )
    assert content_mode((("content-type", BATCH_CONTENT_TYPE.encode()),)) == BATCH
    assert content_mode((("ce_specversion", b"1.0"), ("content-type", b"application/json"))) == (
        BINARY
    )
    # The SDK's structured record: datacontenttype moved to the content-type header.
    assert content_mode((("content-type", b"application/json"),)) == STRUCTURED


def test_null_optional_attributes_are_absent() -> None:
    # json-format.md 2.4: "a null value for an attribute MUST be treated as absent".
    raw = orjson.dumps(pod_event(subject=None, time=None, dataschema=None, datacontenttype=None))
    event, payload = only(raw)
    assert not {"subject", "time", "dataschema", "datacontenttype"} & set(event)
    assert orjson.loads(payload) == event


def test_extension_attributes_are_kept_in_the_stored_envelope() -> None:
    headers = (
        ("ce_specversion", b"1.0"),
        ("ce_id", b"e1"),
        ("ce_source", b"/producers/ci"),
        ("ce_type", b"esched.pod.submitted"),
        ("ce_tenant", b"blue"),
        ("content-type", b"application/json"),
    )
    event, payload = only(orjson.dumps(pod_event()["data"]), headers)
    assert event["tenant"] == "blue" and orjson.loads(payload)["tenant"] == "blue"
    assert "time" not in event  # not invented: the producer gave none


def test_data_base64_with_a_json_content_type_is_decoded() -> None:
    data = pod_event()["data"]
    raw = pod_event()
    del raw["data"]
    raw["data_base64"] = base64.b64encode(orjson.dumps(data)).decode()
    event, payload = only(orjson.dumps(raw))
    assert event["data"] == data and "data_base64" not in orjson.loads(payload)


def test_data_base64_of_an_opaque_type_is_refused() -> None:
    raw = pod_event(datacontenttype="application/octet-stream")
    del raw["data"]
    raw["data_base64"] = base64.b64encode(b"\x00\x01").decode()
    [err] = decode_record(orjson.dumps(raw))
    assert isinstance(err, InvalidEvent) and err.reason == "envelope"


def test_the_sdk_structured_form_takes_datacontenttype_from_the_header() -> None:
    event = pod_event()
    ctype = event.pop("datacontenttype")
    stored, _ = only(orjson.dumps(event), (("content-type", ctype.encode()),))
    assert stored["datacontenttype"] == "application/json"


def test_a_binary_record_with_non_json_data_is_dead_lettered_with_the_field() -> None:
    headers = (
        ("ce_specversion", b"1.0"),
        ("ce_id", b"e1"),
        ("ce_source", b"s"),
        ("ce_type", b"esched.pod.submitted"),
        ("content-type", b"text/plain"),
    )
    [err] = decode_record(b"hello", headers)
    assert isinstance(err, InvalidEvent) and err.field == "datacontenttype"


def test_a_binary_record_without_specversion_header_value_is_named() -> None:
    headers = (("ce_specversion", b"0.3"), ("ce_id", b"x"), ("ce_source", b"s"), ("ce_type", b"t"))
    [err] = decode_record(b"{}", headers)
    assert isinstance(err, InvalidEvent) and err.field == "specversion"


def test_a_batch_stores_each_good_event_and_names_each_bad_one() -> None:
    good = pod_event()
    bad = pod_event(id="e2", specversion="0.3")
    results = decode_record(
        orjson.dumps([good, bad]), (("content-type", BATCH_CONTENT_TYPE.encode()),)
    )
    assert not isinstance(results[0], InvalidEvent) and results[0][0]["id"] == "e1"
    assert isinstance(results[1], InvalidEvent) and results[1].message.startswith("batch[1]")


@pytest.mark.parametrize("value", [b"{}", b"[1"])
def test_a_batch_that_is_not_an_array_is_refused(value: bytes) -> None:
    [err] = decode_record(value, (("content-type", BATCH_CONTENT_TYPE.encode()),))
    assert isinstance(err, InvalidEvent) and err.reason in ("not_object", "not_json")
