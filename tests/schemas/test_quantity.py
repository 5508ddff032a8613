"""Kubernetes quantities → exact integer base units; pod request aggregation."""

from __future__ import annotations

from fractions import Fraction

import pytest

from esched.schemas.objects import node_allocatable, pod_limits, pod_requests
from esched.schemas.quantity import (
    MAX_BASE_UNITS,
    QuantityError,
    parse_quantity,
    resource_list,
    to_base_units,
)

GI = 2**30
MI = 2**20


@pytest.mark.parametrize(
    ("resource", "value", "units"),
    [
        ("cpu", "250m", 250),
        ("cpu", "1.5", 1500),
        ("cpu", "2", 2000),
        ("cpu", 2, 2000),
        ("cpu", 0.1, 100),  # a float is read by its shortest decimal: exactly 100m
        ("cpu", 1.5, 1500),
        ("cpu", "1e3", 1_000_000),  # 1000 cores
        ("cpu", "1E3", 1_000_000),  # Kubernetes reads E<digits> as an exponent too
        ("cpu", "100u", 1),  # 0.1 milli-CPU rounds *up* to 1m, as MilliValue()
        ("cpu", "0", 0),
        ("cpu", "+3", 3000),
        ("cpu", ".5", 500),
        ("memory", "2Gi", 2 * GI),
        ("memory", "512Mi", 512 * MI),
        ("memory", "1.5Gi", 1_610_612_736),
        ("memory", "1e3", 1000),
        ("memory", "1k", 1000),
        ("memory", "1Ki", 1024),
        ("memory", "1M", 1_000_000),
        ("memory", "1G", 10**9),
        ("memory", "1Ti", 2**40),
        ("memory", "1500m", 2),  # 1.5 bytes rounds up
        ("memory", 4294967296, 4 * GI),
        ("nvidia.com/gpu", "1", 1),
        ("nvidia.com/gpu", 8, 8),
        ("pods", "110", 110),
        ("ephemeral-storage", "3E", 3 * 10**18),
    ],
)
def test_to_base_units(resource: str, value: object, units: int) -> None:
    assert to_base_units(resource, value) == units


def test_parse_is_exact() -> None:
    assert parse_quantity("0.1") == Fraction(1, 10)
    assert parse_quantity(0.1) == Fraction(1, 10)
    assert parse_quantity("1.5Gi") == Fraction(3 * 2**29)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("-1", "negative"),
        (-0.5, "negative"),
        ("-250m", "negative"),
        ("1.5.5", "not a Kubernetes quantity"),
        ("Mi", "not a Kubernetes quantity"),
        ("", "not a Kubernetes quantity"),
        ("abc", "not a Kubernetes quantity"),
        ("2 Gi", "not a Kubernetes quantity"),
        ("2gi", "not a Kubernetes quantity"),
        ("0x10", "not a Kubernetes quantity"),
        ("1e400", "exponent out of range"),
        ("9999999Ei", "absurdly large"),
        (2**63, "absurdly large"),
        (float("inf"), "not a Kubernetes quantity"),
        (float("nan"), "not a Kubernetes quantity"),
        (True, "boolean"),
        (None, "string or a number"),
        ([1], "string or a number"),
        ("1" * 65, "too long"),
    ],
)
def test_invalid_quantities(value: object, why: str) -> None:
    with pytest.raises(QuantityError) as info:
        to_base_units("memory", value, "spec.x.memory")
    assert why in info.value.reason
    assert info.value.field == "spec.x.memory"
    assert str(info.value).startswith("spec.x.memory: invalid quantity")


def test_limit_is_absurd_not_int64_overflow() -> None:
    assert to_base_units("memory", MAX_BASE_UNITS) == MAX_BASE_UNITS
    with pytest.raises(QuantityError):
        to_base_units("memory", MAX_BASE_UNITS + 1)


def test_error_message_is_bounded() -> None:
    with pytest.raises(QuantityError) as info:
        to_base_units("cpu", "x" * 10_000, "f")
    assert len(str(info.value)) < 200


def test_resource_list_names_the_field() -> None:
    assert resource_list({"cpu": "500m", "memory": "1Gi"}, "r") == {"cpu": 500, "memory": GI}
    assert resource_list(None, "r") == {}
    with pytest.raises(QuantityError) as info:
        resource_list({"cpu": "1", "memory": "lots"}, "status.allocatable")
    assert info.value.field == "status.allocatable.memory"


def _pod(containers: list, init: list | None = None, overhead: dict | None = None) -> dict:
    spec: dict = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    if overhead is not None:
        spec["overhead"] = overhead
    return {"metadata": {"name": "p"}, "spec": spec}


def _c(requests: dict | None = None, limits: dict | None = None) -> dict:
    res: dict = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    return {"name": "c", "resources": res}


def test_pod_requests_sum_containers() -> None:
    pod = _pod([_c({"cpu": "250m", "memory": "64Mi"}), _c({"cpu": "1", "memory": "1Gi"})])
    assert pod_requests(pod) == {"cpu": 1250, "memory": 64 * MI + GI, "pods": 1}


def test_pod_requests_init_containers_take_the_max() -> None:
    # app containers: 1250m; the largest init container (2 CPU) runs alone, so 2000m wins;
    # memory: app 1Gi + 64Mi beats every init container.
    pod = _pod(
        [_c({"cpu": "250m", "memory": "64Mi"}), _c({"cpu": "1", "memory": "1Gi"})],
        init=[_c({"cpu": "2", "memory": "128Mi"}), _c({"cpu": "500m"})],
    )
    assert pod_requests(pod) == {"cpu": 2000, "memory": 64 * MI + GI, "pods": 1}


def test_pod_requests_overhead_is_added() -> None:
    pod = _pod(
        [_c({"cpu": "1"})], init=[_c({"cpu": "2"})], overhead={"cpu": "100m", "memory": "10Mi"}
    )
    # max(1000, 2000) + 100 overhead
    assert pod_requests(pod) == {"cpu": 2100, "memory": 10 * MI, "pods": 1}


def test_limit_without_request_is_the_request() -> None:
    pod = _pod([_c(limits={"cpu": "2", "nvidia.com/gpu": "1"}), _c({"cpu": "100m"}, {"cpu": "1"})])
    # first container: requested at its limits; second: its request, not its limit
    assert pod_requests(pod) == {"cpu": 2100, "nvidia.com/gpu": 1, "pods": 1}
    assert pod_limits(pod) == {"cpu": 3000, "nvidia.com/gpu": 1}


def test_pod_without_resources_requests_one_pod_slot() -> None:
    assert pod_requests(_pod([{"name": "c"}])) == {"pods": 1}


def test_pod_requests_names_bad_field() -> None:
    with pytest.raises(QuantityError) as info:
        pod_requests(_pod([_c({"cpu": "1"}), _c({"cpu": "-1"})]))
    assert info.value.field == "spec.containers[1].resources.requests.cpu"


@pytest.mark.parametrize(
    ("read", "spec", "field"),
    [
        (
            pod_requests,
            {"containers": [_c(limits={"memory": "-1"})]},
            # a limit standing for the missing request is read as that request
            "spec.containers[0].resources.requests.memory",
        ),
        (
            pod_limits,
            {"containers": [_c({"cpu": "1"}, {"cpu": "x"})]},
            "spec.containers[0].resources.limits.cpu",
        ),
        (
            pod_requests,
            {"containers": [_c()], "initContainers": [_c({"cpu": "1"}), _c({"cpu": "-2"})]},
            "spec.initContainers[1].resources.requests.cpu",
        ),
        (
            pod_requests,
            {"containers": [_c()], "resources": {"requests": {"memory": "-1"}}},
            "spec.resources.requests.memory",
        ),
        (
            pod_requests,
            {"containers": [_c()], "resources": {"limits": {"cpu": "-1"}}},
            "spec.resources.limits.cpu",
        ),
        (pod_requests, {"containers": [_c()], "overhead": {"cpu": "-1"}}, "spec.overhead.cpu"),
    ],
)
def test_pod_requests_name_the_bad_field_wherever_it_is(read, spec: dict, field: str) -> None:
    with pytest.raises(QuantityError) as info:
        read({"spec": spec})
    assert info.value.field == field


def test_node_allocatable_falls_back_to_capacity() -> None:
    assert node_allocatable({"status": {"capacity": {"cpu": "4"}}}) == {"cpu": 4000}
    assert node_allocatable(
        {"status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "3500m"}}}
    ) == {"cpu": 3500}
