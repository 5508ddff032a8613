"""Event files become bus records: raw JSONL lines kept byte for byte, manifests converted."""

from __future__ import annotations

import orjson

from esched.services.bus import TopicNames
from esched.services.event_files import read_records

TOPICS = TopicNames("esched.")


def test_jsonl_lines_keep_their_bytes_and_route_by_type_and_gang(tmp_path):
    gang_pod = {
        "specversion": "1.0",
        "id": "1",
        "source": "s",
        "type": "esched.pod.submitted",
        "data": {
            "metadata": {
                "name": "w0",
                "namespace": "ml",
                "annotations": {"scheduling.k8s.io/group-name": "train"},
            }
        },
    }
    lone_pod = {**gang_pod, "id": "2", "data": {"metadata": {"name": "solo"}}}
    node = {
        "specversion": "1.0",
        "id": "3",
        "source": "s",
        "type": "esched.node.added",
        "data": {"metadata": {"name": "n1"}},
    }
    lines = [
        orjson.dumps(gang_pod),
        b'{ "spaced" :  true }',
        orjson.dumps(lone_pod),
        orjson.dumps(node),
        b"garbage",
    ]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n\n")

    records = list(read_records([str(path)], TOPICS))

    assert [r.value for r in records] == lines  # malformed lines too: ingest dead-letters them
    assert [r.topic for r in records] == [
        "esched.pods",
        "esched.pods",
        "esched.pods",
        "esched.nodes",
        "esched.pods",
    ]
    assert records[0].key == b"ml/train"  # a gang's pods share a key, so keep their order
    assert records[2].key == b"default/solo"
    assert records[3].key == b"n1"
    assert records[4].origin.endswith("in.jsonl:5")


def test_yaml_manifests_are_converted_to_events(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "kind: Node\napiVersion: v1\nmetadata: {name: n1}\n"
        "status: {allocatable: {cpu: '4'}}\n---\n"
        "kind: Pod\napiVersion: v1\nmetadata: {name: p, namespace: x}\n"
        "spec: {containers: [{name: c}]}\n"
    )
    records = list(read_records([str(path)], TOPICS))
    events = [orjson.loads(r.value) for r in records]
    assert [e["type"] for e in events] == ["esched.node.added", "esched.pod.submitted"]
    assert [r.topic for r in records] == ["esched.nodes", "esched.pods"]
    assert records[1].key == b"x/p"
