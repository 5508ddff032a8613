"""parse_event / validate_event: every reason, field paths, unchanged results."""

from __future__ import annotations

import copy

import orjson
import pytest

from esched.schemas.events import EXTERNAL_TYPES, INTERNAL_TYPES, TYPES
from esched.schemas.objects import DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST
from esched.schemas.quantity import MAX_BASE_UNITS
from esched.schemas.validator import (
    MAX_EVENT_BYTES,
    REASONS,
    InvalidEvent,
    bench_validate,
    parse_event,
    validate_data,
    validate_event,
)

from .examples import event


def reject(raw: object, **kw: object) -> InvalidEvent:
    with pytest.raises(InvalidEvent) as info:
        if isinstance(raw, bytes | str):
            parse_event(raw, **kw)  # type: ignore[arg-type]
        else:
            validate_event(raw, **kw)  # type: ignore[arg-type]
    exc = info.value
    assert exc.reason in REASONS
    assert str(exc) == exc.message
    if exc.field:
        assert exc.message.startswith(exc.field + ":")
    return exc


@pytest.mark.parametrize("etype", EXTERNAL_TYPES)
def test_valid_external_events_pass_unchanged(etype: str) -> None:
    ev = event(etype)
    raw = orjson.dumps(ev)
    assert parse_event(raw) == ev
    before = copy.deepcopy(ev)
    assert validate_event(ev) is ev
    assert ev == before  # no defaults filled in


@pytest.mark.parametrize("etype", INTERNAL_TYPES)
def test_internal_events_need_allowing(etype: str) -> None:
    ev = event(etype)
    exc = reject(ev)
    assert exc.reason == "unknown_type" and "internal" in exc.message
    assert validate_event(ev, allowed_types=TYPES) is ev


def test_validate_data_refuses_what_validate_event_refuses_with_the_same_error() -> None:
    """The data alone (a producer's own envelope) is checked as inside an envelope:
    schema, then quantities and refused fields, the same reason, field and message."""
    ok = event("esched.pod.submitted")
    assert validate_data(ok["type"], ok["data"]) is ok["data"]
    bad_schema = event("esched.pod.submitted")
    bad_schema["data"]["spec"]["containers"] = "none"
    refused = event("esched.pod.submitted")
    refused["data"]["spec"]["resourceClaims"] = [{"name": "gpu"}]
    for ev in (bad_schema, refused):
        whole = reject(ev)
        with pytest.raises(InvalidEvent) as alone:
            validate_data(ev["type"], ev["data"])
        assert (alone.value.reason, alone.value.field, alone.value.message) == (
            whole.reason,
            whole.field,
            whole.message,
        )


def test_minimal_envelope_and_extension_attributes() -> None:
    ev = {
        "specversion": "1.0",
        "id": "1",
        "source": "urn:uuid:6e8bc430-9c3a",
        "type": "esched.node.removed",
        "data": {"metadata": {"name": "n"}},
        "partitionkey": "n",
        "traceparent": "00-abc",
    }
    assert validate_event(ev) is ev


def test_oversize() -> None:
    raw = orjson.dumps(event("esched.pod.submitted"))
    exc = reject(raw, max_bytes=len(raw) - 1)
    assert exc.reason == "oversize" and str(len(raw)) in exc.message
    assert parse_event(raw, max_bytes=len(raw))
    assert reject(b" " * (MAX_EVENT_BYTES + 1)).reason == "oversize"


@pytest.mark.parametrize(
    "raw",
    [b"", b"{", b"\xff\xfe", b"NaN", b'{"a": 1,}', b"nul", b'{"a": Infinity}', '{"a": "\udc00"}'],
)
def test_not_json(raw: bytes | str) -> None:
    assert reject(raw).reason == "not_json"


@pytest.mark.parametrize("raw", [b"[]", b"1", b'"x"', b"null", b"true"])
def test_not_object(raw: bytes) -> None:
    assert reject(raw).reason == "not_object"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"specversion": "0.3"}, "specversion"),
        ({"id": ""}, "id"),
        ({"id": "x" * 257}, "id"),
        ({"id": 7}, "id"),
        ({"source": ""}, "source"),
        ({"source": "has space"}, "source"),
        ({"type": ""}, "type"),
        ({"time": "2026-13-01T00:00:00Z"}, "time"),
        ({"time": "yesterday"}, "time"),
        ({"datacontenttype": "application/xml"}, "datacontenttype"),
        ({"dataschema": "not a uri"}, "dataschema"),
        ({"data": "text"}, "data"),
        ({"data_base64": "AAAA"}, "data_base64"),
        ({"Bad-Attr": 1}, "Bad-Attr"),
    ],
)
def test_envelope(change: dict, field: str) -> None:
    exc = reject(event("esched.pod.submitted", **change))
    assert (exc.reason, exc.field) == ("envelope", field)


@pytest.mark.parametrize("missing", ["specversion", "id", "source", "type", "data"])
def test_envelope_required(missing: str) -> None:
    ev = event("esched.pod.submitted")
    del ev[missing]
    exc = reject(ev)
    assert (exc.reason, exc.field) == ("envelope", missing)
    assert "required" in exc.message


def test_unknown_type_lists_known_types() -> None:
    exc = reject(event("esched.pod.submitted", type="com.example.thing"))
    assert (exc.reason, exc.field) == ("unknown_type", "type")
    assert "com.example.thing" in exc.message and "esched.pod.submitted" in exc.message
    exc = reject(event("esched.pod.submitted"), allowed_types=("esched.node.added",))
    assert exc.reason == "unknown_type"


def _pod_event(mutate) -> dict:  # type: ignore[no-untyped-def]
    ev = event("esched.pod.submitted")
    mutate(ev["data"])
    return ev


@pytest.mark.parametrize(
    ("mutate", "field", "words"),
    [
        (lambda d: d["metadata"].pop("name"), "data.metadata.name", "required"),
        (lambda d: d["metadata"].update(name="Has_Caps"), "data.metadata.name", "DNS-1123"),
        (lambda d: d["metadata"].update(namespace="a.b"), "data.metadata.namespace", "DNS-1123"),
        (
            lambda d: d["metadata"]["labels"].update({"bad key": "v"}),
            "data.metadata.labels.bad key",
            "qualified name",
        ),
        (
            lambda d: d["metadata"]["labels"].update(app="x" * 64),
            "data.metadata.labels.app",
            "label value",
        ),
        (
            lambda d: d["metadata"]["annotations"].update(n=1),
            "data.metadata.annotations.n",
            "string",
        ),
        (lambda d: d.pop("spec"), "data.spec", "required"),
        (lambda d: d["spec"].update(containers=[]), "data.spec.containers", "at least 1"),
        (
            lambda d: d["spec"]["containers"][1].pop("name"),
            "data.spec.containers[1].name",
            "required",
        ),
        (
            lambda d: d["spec"]["containers"][0]["resources"]["requests"].update(cpu=True),
            "data.spec.containers[0].resources.requests.cpu",
            "string or number",
        ),
        (lambda d: d["spec"].update(priority=2**31), "data.spec.priority", "2147483647"),
        (lambda d: d["spec"].update(priority="high"), "data.spec.priority", "integer"),
        (
            lambda d: d["spec"]["tolerations"][1].update(operator="In"),
            "data.spec.tolerations[1].operator",
            "Equal",
        ),
        (
            lambda d: d["spec"]["tolerations"][0].update(value="x"),
            "data.spec.tolerations[0].value",
            "empty when operator is Exists",
        ),
        (
            lambda d: d["spec"]["tolerations"][1].pop("key"),
            "data.spec.tolerations[1].key",
            "unless operator is Exists",
        ),
        (
            lambda d: d["spec"]["tolerations"][0].update(effect="Never"),
            "data.spec.tolerations[0].effect",
            "NoSchedule",
        ),
        (
            lambda d: d["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"][0]["matchExpressions"][1].update(values=["x"]),
            "data.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[1].values",
            "one integer",
        ),
        (
            lambda d: d["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"][0]["matchExpressions"][2].update(values=["x"]),
            "data.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[2].values",
            "must be empty",
        ),
        (
            lambda d: d["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"][0]["matchExpressions"][0].update(operator="Like"),
            "data.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0].operator",
            "In",
        ),
    ],
)
def test_schema_errors_name_the_field(mutate, field: str, words: str) -> None:  # type: ignore[no-untyped-def]
    exc = reject(_pod_event(mutate))
    assert exc.reason == "schema"
    assert exc.field == field
    assert words in exc.message


@pytest.mark.parametrize(
    ("etype", "mutate", "field"),
    [
        (
            "esched.pod.submitted",
            lambda d: d["spec"]["containers"][0]["resources"]["requests"].update(cpu="-1"),
            "data.spec.containers[0].resources.requests.cpu",
        ),
        (
            "esched.pod.submitted",
            lambda d: d["spec"]["containers"][1]["resources"]["requests"].update(memory="1.5.5"),
            "data.spec.containers[1].resources.requests.memory",
        ),
        (
            "esched.pod.submitted",
            lambda d: d["spec"]["containers"][0]["resources"]["limits"].update(
                {"nvidia.com/gpu": "99999Ei"}
            ),
            "data.spec.containers[0].resources.limits.nvidia.com/gpu",
        ),
        (
            "esched.pod.submitted",
            lambda d: d["spec"]["initContainers"][0]["resources"]["requests"].update(cpu="Mi"),
            "data.spec.initContainers[0].resources.requests.cpu",
        ),
        (
            "esched.pod.submitted",
            lambda d: d["spec"]["overhead"].update(cpu=-0.5),
            "data.spec.overhead.cpu",
        ),
        (
            "esched.pod.submitted",
            lambda d: d["spec"].update(resources={"requests": {"memory": "2 Gi"}}),
            "data.spec.resources.requests.memory",
        ),
        (
            "esched.pod.submitted",
            lambda d: d["spec"].update(resources={"limits": {"cpu": "-1"}}),
            "data.spec.resources.limits.cpu",
        ),
        (
            "esched.node.added",
            lambda d: d["status"]["allocatable"].update(memory="lots"),
            "data.status.allocatable.memory",
        ),
        (
            "esched.node.updated",
            lambda d: d["status"]["capacity"].update(cpu="1e99"),
            "data.status.capacity.cpu",
        ),
        (
            "esched.podgroup.submitted",
            lambda d: d["spec"]["minResources"].update(cpu="-2"),
            "data.spec.minResources.cpu",
        ),
        (
            "esched.queue.upserted",
            lambda d: d["spec"]["capability"].update(cpu="x"),
            "data.spec.capability.cpu",
        ),
        (
            "esched.queue.upserted",
            lambda d: d["spec"]["guarantee"]["resource"].update(cpu="-1"),
            "data.spec.guarantee.resource.cpu",
        ),
        (
            "esched.queue.upserted",
            lambda d: d["spec"]["deserved"].update(cpu=101),
            "data.spec.deserved.cpu",
        ),  # deserved > capability
        (
            "esched.queue.upserted",
            lambda d: d["spec"]["guarantee"]["resource"].update(cpu=81),
            "data.spec.guarantee.resource.cpu",
        ),  # guarantee > deserved
        (
            "esched.usage.reported",
            lambda d: d["pods"][0]["usage"].update(cpu="1..2"),
            "data.pods[0].usage.cpu",
        ),
        (
            "esched.usage.reported",
            lambda d: d["nodes"][0]["usage"].update(memory="-1Gi"),
            "data.nodes[0].usage.memory",
        ),
    ],
)
def test_quantity_errors_name_the_field(etype: str, mutate, field: str) -> None:  # type: ignore[no-untyped-def]
    ev = event(etype)
    mutate(ev["data"])
    exc = reject(orjson.dumps(ev))
    assert (exc.reason, exc.field) == ("quantity", field)


def test_a_pod_whose_sidecars_scoring_defaults_pass_the_core_range_is_refused() -> None:
    # Two sidecars without requests add 200 MiB each to the scoring memory (kube's
    # GetNonzeroRequests): the pod's sum passes 2**62 though its quantities do not.
    memory = MAX_BASE_UNITS - DEFAULT_MEMORY_REQUEST - DEFAULT_MILLI_CPU_REQUEST
    ev = event("esched.pod.submitted")
    spec = ev["data"]["spec"]
    spec["containers"] = [{"name": "app", "resources": {"requests": {"memory": str(memory)}}}]
    spec["initContainers"] = [{"name": f"side-{i}", "restartPolicy": "Always"} for i in (0, 1)]
    spec.pop("overhead", None)
    spec.pop("resources", None)
    exc = reject(orjson.dumps(ev))
    assert (exc.reason, exc.field) == ("quantity", "data.spec.containers")
    assert "memory (scoring)" in str(exc)


def test_every_reason_is_reachable() -> None:
    seen = {
        reject(b"x" * 20, max_bytes=10).reason,
        reject(b"{").reason,
        reject(b"[]").reason,
        reject(b"{}").reason,
        reject(orjson.dumps(event("esched.pod.submitted", type="x.y"))).reason,
        reject(orjson.dumps(event("esched.node.removed", data={}))).reason,
        reject(
            orjson.dumps(
                event(
                    "esched.pod.submitted",
                    data={
                        "metadata": {"name": "p"},
                        "spec": {
                            "containers": [{"name": "c"}],
                            "resourceClaims": [{"name": "gpu", "resourceClaimName": "g"}],
                        },
                    },
                )
            )
        ).reason,
        reject(
            orjson.dumps(
                event(
                    "esched.node.added",
                    data={"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "-1"}}},
                )
            )
        ).reason,
    }
    assert seen == set(REASONS)


def test_other_types_schema_errors() -> None:
    cases = [
        ("esched.node.added", {"metadata": {"name": "n"}}, "data.status"),
        ("esched.node.added", {"metadata": {"name": "n"}, "status": {}}, "data.status"),
        (
            "esched.podgroup.submitted",
            {"metadata": {"name": "g"}, "spec": {}},
            "data.spec.minMember",
        ),
        ("esched.usage.reported", {"window": 5}, None),
        (
            "esched.usage.reported",
            {"pods": [{"pod": "no-namespace", "usage": {}}]},
            "data.pods[0].pod",
        ),
    ]
    for etype, data, field in cases:
        exc = reject(event(etype, data=data))
        assert exc.reason == "schema", (etype, exc)
        if field:
            assert exc.field == field, (etype, exc)
    exc = reject(event("esched.node.added", data={"metadata": {"name": "n"}, "status": {}}))
    assert "allocatable or status.capacity" in exc.message
    exc = reject(event("esched.placement.proposed", data={}), allowed_types=TYPES)
    assert exc.field == "data.proposal"


def test_bench_validate_reports_rates() -> None:
    result = bench_validate(200)
    assert result["events"] == 200
    assert result["events_per_s"] > 0 and result["parse_events_per_s"] > 0
    assert result["us_per_event"] > 0 and result["pod_us"] > 0


# Pod fields that change placement and that esched does not honour are refused, never
# accepted and ignored (docs/scheduling.md, "Refused pod fields"): one case per field.
_UNSUPPORTED = [
    (
        lambda s: s.update(resourceClaims=[{"name": "gpu", "resourceClaimName": "gpu-0"}]),
        "data.spec.resourceClaims",
    ),
    (
        lambda s: s.update(
            volumes=[{"name": "tmp", "emptyDir": {}}, {"name": "d", "persistentVolumeClaim": {}}]
        ),
        "data.spec.volumes[1].persistentVolumeClaim",
    ),
    (
        lambda s: s.update(volumes=[{"name": "e", "ephemeral": {"volumeClaimTemplate": {}}}]),
        "data.spec.volumes[0].ephemeral",
    ),
]


@pytest.mark.parametrize(("mutate", "field"), _UNSUPPORTED)
def test_pod_fields_esched_does_not_honour_are_refused_with_the_field(mutate, field) -> None:
    e = event("esched.pod.submitted")
    mutate(e["data"]["spec"])
    with pytest.raises(InvalidEvent) as info:
        validate_event(e)
    assert info.value.reason == "unsupported" and info.value.field == field


def test_scheduling_gates_are_accepted_on_a_pod_and_on_its_update() -> None:
    e = event("esched.pod.submitted")
    e["data"]["spec"]["schedulingGates"] = [{"name": "example.com/quota"}, {"name": "b"}]
    assert validate_event(e) is e
    u = event("esched.pod.updated")
    assert validate_event(u) is u
    u["data"]["spec"]["schedulingGates"] = []  # every gate removed
    assert validate_event(u) is u


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        # kube's validateSchedulingGates: names are unique qualified names.
        ({"schedulingGates": [{"name": "a"}, {"name": "a"}]}, "data.spec.schedulingGates[1].name"),
        ({"schedulingGates": [{"name": "not a name"}]}, "data.spec.schedulingGates[0].name"),
        # kube's pod validation: "nodeName: cannot be set until all schedulingGates
        # have been cleared".
        ({"schedulingGates": [{"name": "a"}], "nodeName": "n1"}, "data.spec.nodeName"),
    ],
)
def test_malformed_scheduling_gates_are_refused_with_the_field(spec, field) -> None:
    e = event("esched.pod.submitted")
    e["data"]["spec"].update(spec)
    with pytest.raises(InvalidEvent) as info:
        validate_event(e)
    assert info.value.field == field


def test_a_pod_update_changing_other_fields_is_refused() -> None:
    # Only the fields the fold honours may change: the rest would be accepted and ignored.
    u = event("esched.pod.updated")
    u["data"]["spec"]["nodeSelector"] = {"zone": "a"}
    with pytest.raises(InvalidEvent):
        validate_event(u)


def test_volumes_that_do_not_bind_claims_are_accepted() -> None:
    # emptyDir, configMap, secret, hostPath, downwardAPI: no scheduling constraint in kube.
    e = event("esched.pod.submitted")
    e["data"]["spec"]["volumes"] = [
        {"name": "a", "emptyDir": {}},
        {"name": "b", "configMap": {"name": "cm"}},
        {"name": "c", "secret": {"secretName": "s"}},
    ]
    assert validate_event(e) is e


def test_required_pod_affinity_and_anti_affinity_are_accepted() -> None:
    # Honoured by the core (kube's InterPodAffinity filter): accepted at ingest, with a
    # namespaceSelector (empty: every namespace; else matched against the Namespace
    # events' labels), matchLabelKeys and namespaces.
    for nsel in ({}, {"matchLabels": {"team": "a"}}):
        e = event("esched.pod.submitted")
        term = {
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app": "web"}},
            "namespaceSelector": nsel,
            "namespaces": ["a"],
            "matchLabelKeys": ["pod-template-hash"],
        }
        required = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        preferred = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": term}
            ]
        }
        e["data"]["spec"]["affinity"].update(podAffinity=required, podAntiAffinity=preferred)
        assert validate_event(e) is e


def test_do_not_schedule_topology_spread_is_accepted_and_malformed_ones_are_refused() -> None:
    e = event("esched.pod.submitted")
    c = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
    e["data"]["spec"]["topologySpreadConstraints"] = [dict(c, minDomains=2)]
    assert validate_event(e) is e
    for bad, field in [
        ({"maxSkew": 0}, "maxSkew"),
        ({"topologyKey": ""}, "topologyKey"),
        ({"whenUnsatisfiable": "Sometimes"}, "whenUnsatisfiable"),
        ({"minDomains": 0}, "minDomains"),
        ({"nodeTaintsPolicy": "Maybe"}, "nodeTaintsPolicy"),
    ]:
        e["data"]["spec"]["topologySpreadConstraints"] = [dict(c, **bad)]
        with pytest.raises(InvalidEvent) as info:
            validate_event(e)
        assert info.value.field == f"data.spec.topologySpreadConstraints[0].{field}"
