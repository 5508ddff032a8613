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
    env = ev.envelope("esched.pod.failed", "src", {"x": 1}, id="fixed", time="t0", content_type=None)
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
