"""The schema files themselves: complete, well-formed, and what they accept."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from referencing import Registry, Resource

from esched.schemas.events import EXTERNAL_TYPES, INTERNAL_TYPES, TYPES
from esched.schemas.validator import SCHEMA_BASE_URI, load_schema, schema_names

from .examples import DATA, event

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas" / "v1"


def registry() -> Registry:
    """All our schemas, by $id, for the reference implementation (jsonschema)."""
    return Registry().with_resources(
        (SCHEMA_BASE_URI + f"{n}.json", Resource.from_contents(load_schema(n)))
        for n in schema_names()
    )


def reference_validator(name: str) -> jsonschema.Draft7Validator:
    """jsonschema's Draft 7 validator for a schema, asserting its formats.

    Draft 7 makes ``format`` an annotation unless the validator is given a format
    checker; esched asserts its formats (an event whose ``since`` is not a
    date-time is refused), so the reference must too (rfc3339-validator checks
    ``date-time``).
    """
    return jsonschema.Draft7Validator(
        load_schema(name),
        registry=registry(),
        format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER,
    )


def test_every_type_has_a_schema_file_and_no_stray_files() -> None:
    files = {p.name for p in SCHEMA_DIR.glob("*.json")}
    expected = {f"{n}.json" for n in schema_names()}
    assert files == expected
    assert set(TYPES) == set(EXTERNAL_TYPES) | set(INTERNAL_TYPES)
    assert set(DATA) == set(TYPES)


@pytest.mark.parametrize("name", schema_names())
def test_schema_is_valid_draft7_with_matching_id(name: str) -> None:
    schema = json.loads((SCHEMA_DIR / f"{name}.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert schema["$id"] == f"{SCHEMA_BASE_URI}{name}.json"
    assert schema.get("title") and schema.get("description")


@pytest.mark.parametrize("etype", TYPES)
def test_examples_pass_the_reference_validator(etype: str) -> None:
    reference_validator("cloudevent").validate(event(etype))
    reference_validator(etype).validate(DATA[etype])


@pytest.mark.parametrize(
    ("etype", "data"),
    [
        ("esched.node.added", {"metadata": {"name": "n"}}),  # no resources at all
        ("esched.node.added", {"metadata": {"name": "N_1"}, "status": {"capacity": {}}}),
        (
            "esched.node.added",
            {
                "metadata": {"name": "n"},
                "status": {"capacity": {}},
                "spec": {"taints": [{"key": "k", "effect": "Sometimes"}]},
            },
        ),
        ("esched.pod.submitted", {"metadata": {"name": "p"}, "spec": {"containers": []}}),
        (
            "esched.pod.submitted",
            {
                "metadata": {"name": "p"},
                "spec": {
                    "containers": [{"name": "c"}],
                    "tolerations": [{"key": "k", "operator": "Exists", "value": "v"}],
                },
            },
        ),
        (
            "esched.pod.submitted",
            {
                "metadata": {"name": "p"},
                "spec": {
                    "containers": [{"name": "c"}],
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {"key": "k", "operator": "In", "values": []}
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                },
            },
        ),
        ("esched.podgroup.submitted", {"metadata": {"name": "g"}, "spec": {"minMember": -1}}),
        ("esched.podgroup.submitted", {"metadata": {"name": "g"}, "spec": {"minMember": 100001}}),
        ("esched.queue.upserted", {"metadata": {"name": "q"}, "spec": {"weight": 0}}),
        ("esched.queue.upserted", {"metadata": {"name": "q"}, "status": {"state": "Gone"}}),
        ("esched.usage.reported", {"window": 10}),
        ("esched.placement.proposed", {**DATA["esched.placement.proposed"], "bindings": []}),
        ("esched.placement.committed", {**DATA["esched.placement.proposed"], "position": -1}),
        ("esched.pod.unschedulable", {"pod": "ns/p", "reasons": {"x": -1}, "message": ""}),
    ],
)
def test_reference_validator_rejects(etype: str, data: dict) -> None:
    assert not reference_validator(etype).is_valid(data)
