"""Whatever validation accepts, the fold takes without raising (issue 19, part 1).

A log of mutated example events (every type, internal ones included), plus pods
built to sit at the edge of the core's integer range (many containers, init
containers, overhead, limits standing for requests, extended resources, bound by
``spec.nodeName``, several on one node) and commits of such pods: each event is
validated, the accepted ones are folded by both paths (dict and stored bytes), and
neither may raise; both must agree. And the commit service's validator never
raises on a proposal validation accepts (it commits or rejects it).
"""

from __future__ import annotations

import copy

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from esched.core import ClusterState
from esched.core.validation import Validator
from esched.schemas.events import TYPES
from esched.schemas.validator import InvalidEvent, validate_event

from .examples import DATA, event
from .test_fuzz import json_paths, json_values, mutated, set_at

BIG = st.sampled_from(["4Ei", "2Ei", "1Ei", str(2**62), str(2**62 - 1), "9e18", "1", "0"])
RESOURCE = st.sampled_from(["cpu", "memory", "example.com/gpu", "pods"])
resources = st.dictionaries(RESOURCE, BIG, max_size=3)


@st.composite
def edge_pod(draw: st.DrawFn) -> tuple[str, dict]:
    def container(i: int) -> dict:
        res: dict = {}
        if draw(st.booleans()):
            res["requests"] = draw(resources)
        if draw(st.booleans()):
            res["limits"] = draw(resources)
        return {"name": f"c{i}", "resources": res}

    spec: dict = {"containers": [container(i) for i in range(draw(st.integers(1, 4)))]}
    if draw(st.booleans()):
        spec["initContainers"] = [container(9)]
    if draw(st.booleans()):
        spec["overhead"] = draw(resources)
    if draw(st.booleans()):
        spec["nodeName"] = "n1"
    name = draw(st.sampled_from(["a", "b", "c"]))
    return "esched.pod.submitted", {"metadata": {"name": name, "namespace": "t"}, "spec": spec}


@st.composite
def edge_commit(draw: st.DrawFn) -> tuple[str, dict]:
    pod = draw(st.sampled_from(["t/a", "t/b", "t/c"]))
    units = draw(st.sampled_from([1, 2**62, 2**62 - 1, 2**63 - 1, 2**63, -1]))
    binding = {"pod": pod, "node": "n1", "resources": {"memory": units}}
    return "esched.placement.committed", {"proposal": "p", "bindings": [binding]}


NODE = (
    "esched.node.added",
    {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4Ei", "memory": "4Ei"}}},
)
events = st.lists(st.one_of(mutated(), edge_pod(), edge_pod(), edge_commit()), max_size=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events)
def test_the_fold_never_raises_on_what_validation_accepts(log: list[tuple[str, dict]]) -> None:
    accepted = []
    for i, (etype, data) in enumerate([NODE, *log]):
        ev = event(etype, data=data)
        ev["id"] = f"e{i}"
        try:
            validate_event(ev, allowed_types=TYPES)
        except InvalidEvent:
            continue
        accepted.append((len(accepted) + 1, ev))
    by_dict = ClusterState()
    by_dict.apply_many(accepted)
    by_bytes = ClusterState()
    by_bytes.apply_payloads([(pos, orjson.dumps(ev)) for pos, ev in accepted])
    assert by_dict.summary() == by_bytes.summary()
    assert by_dict.anomalies == by_bytes.anomalies
    assert "unapplicable" not in by_dict.anomalies  # validation let nothing through it
    # Totals are exact integers (no int64 wrap): nothing negative.
    for total in by_dict.summary()["nodes"]["allocated"].values():
        assert total >= 0


@st.composite
def _mutated_data(draw: st.DrawFn, etype: str) -> dict:
    data = copy.deepcopy(DATA[etype])
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(json_paths(data)))
        delete = bool(path) and draw(st.booleans())
        data = set_at(data, path, draw(json_values), delete)
    return data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated_data("esched.placement.proposed"))
def test_the_commit_validator_never_raises_on_an_accepted_proposal(data: dict) -> None:
    # A proposal that passes validation can only be committed or rejected: a raise
    # would stop the commit service at the same message after every restart.
    try:
        validate_event(event("esched.placement.proposed", data=data), allowed_types=TYPES)
    except InvalidEvent:
        return
    state = ClusterState()
    etype, body = NODE
    state.apply(event(etype, data=body), 1)
    validator = Validator(state)
    validator.begin()
    verdict = validator.check(data, record=False)
    assert verdict.ok in (True, False)
