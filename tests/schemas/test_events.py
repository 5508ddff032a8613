"""The conventions schemas/events.py owns: envelopes, stream names, keys."""

from __future__ import annotations

import re

from esched.schemas import events as ev
from esched.schemas.validator import validate_event

from .examples import DATA


def test_envelope_is_a_valid_cloudevent_of_its_type() -> None:
    env = ev.envelope(ev.POD_SUBMITTED, "tests", DATA[ev.POD_SUBMITTED], id="e-1")
    assert validate_event(env) == env
    assert env["specversion"] == "1.0"
    assert env["datacontenttype"] == "application/json"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", env["time"])


def test_envelope_keeps_the_callers_id_and_time_and_leaves_out_unset_fields() -> None:
    env = ev.envelope(
        "esched.pod.failed", "src", {"x": 1}, id="fixed", time="t0", content_type=None
    )
    assert env == {
        "specversion": "1.0",
        "id": "fixed",
        "source": "src",
        "type": "esched.pod.failed",
        "time": "t0",
        "data": {"x": 1},
    }
    full = ev.envelope("t", "s", {}, id="i", time="t0", subject="pod/a/b", dataschema="u")
    assert (full["subject"], full["dataschema"]) == ("pod/a/b", "u")


def test_proposal_envelope_id_is_the_proposals() -> None:
    env = ev.proposal_envelope({"proposal": "r1-7"}, "esched/replica/r1", time="t0")
    assert (env["id"], env["type"], env["time"]) == ("proposal-r1-7", ev.PLACEMENT_PROPOSED, "t0")


def test_pod_keys_default_the_namespace() -> None:
    assert ev.namespaced_key(None, "a") == ev.namespaced_key("", "a") == "default/a"
    assert ev.metadata_key({"name": "a", "namespace": "ml"}) == "ml/a"
    assert ev.metadata_key(None) == "default/"
    assert ev.split_key("ml/a") == ("ml", "a")


def test_stream_names_round_trip() -> None:
    for kind, key in [(ev.POD, "ns/a"), (ev.GANG, "ns/g"), (ev.NODE, "n1"), ("decisions", "")]:
        stream = ev.stream_name(kind, key) if key else kind
        assert ev.parse_stream(stream) == (kind, key)
    assert ev.stream_key("pod/ns/a", ev.POD) == "ns/a"
    assert ev.stream_key("podgroup/ns/a", ev.POD) is None
    assert ev.stream_key("gang/ns/a", ev.POD) is None


def test_stream_of_uses_the_key_rule() -> None:
    pod = {"metadata": {"name": "a"}}
    assert ev.stream_of({"type": ev.POD_SUBMITTED, "data": pod}) == "pod/default/a"
    assert ev.stream_of({"type": ev.POD_UNSCHEDULABLE, "data": {"pod": "ns/a"}}) == "pod/ns/a"
    assert ev.stream_of({"type": ev.GANG_RESERVED, "data": {"gang": "ns/g"}}) == "gang/ns/g"
    assert ev.stream_of({"type": ev.NODE_ADDED, "data": {"metadata": {"name": "n"}}}) == "node/n"
    proposal = {"type": ev.PLACEMENT_PROPOSED, "data": {"replica": "r1"}}
    assert ev.stream_of(proposal) == "proposals/r1"


def test_bus_keys_keep_a_gangs_messages_together() -> None:
    member = {
        "metadata": {
            "name": "w-0",
            "namespace": "ml",
            "annotations": {"scheduling.k8s.io/group-name": "job"},
        }
    }
    group = {"metadata": {"name": "job", "namespace": "ml"}}
    assert ev.message_key({"type": ev.POD_SUBMITTED, "data": member}) == "ml/job"
    assert ev.message_key({"type": ev.PODGROUP_SUBMITTED, "data": group}) == "ml/job"
    alone = {"metadata": {"name": "p"}}
    assert ev.message_key({"type": ev.POD_SUBMITTED, "data": alone}) == "default/p"
    assert ev.message_key({"type": ev.NODE_ADDED, "data": {"metadata": {"name": "n"}}}) == "n"
    assert ev.message_key({"type": ev.USAGE_REPORTED, "data": {"nodes": []}}) is None
    bindings = [{"pod": "ns/a", "node": "n"}]
    assert ev.proposal_key({"gang": "ns/g", "bindings": bindings}) == "ns/g"
    assert ev.proposal_key({"gang": None, "bindings": bindings}) == "ns/a"


def test_a_job_is_stored_as_its_bytes_with_ingests_marker_put_in_front() -> None:
    """A Job without the marker, received as one JSON object, is stored as the bytes
    received with the marker as the envelope's first member (not encoded again: the
    producer's member order and spacing stay); any other form is encoded whole."""
    import orjson

    env = ev.envelope(ev.JOB_SUBMITTED, "tests", DATA[ev.JOB_SUBMITTED], id="j-1")
    raw = orjson.dumps(env, option=orjson.OPT_INDENT_2)
    stored, payload = ev.stored_form(env, raw)
    assert payload == b'{"eschedimplies":"pods",' + raw[1:]
    assert orjson.loads(payload) == stored == {**env, ev.IMPLIES: ev.IMPLIES_PODS}
    assert ev.implies_pods(stored)
    # Spaces before the object, or a marker of another value: encoded whole, in order.
    for event, received in ((env, b" " + raw), ({**env, ev.IMPLIES: "x"}, raw)):
        stored, payload = ev.stored_form(event, received)
        assert payload == orjson.dumps(stored) and ev.implies_pods(orjson.loads(payload))
    # A pod's bytes are stored as received.
    pod = ev.envelope(ev.POD_SUBMITTED, "tests", DATA[ev.POD_SUBMITTED], id="p-1")
    pod_raw = orjson.dumps(pod)
    assert ev.stored_form(pod, pod_raw)[1] is pod_raw
