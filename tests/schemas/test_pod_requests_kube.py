"""A pod's requests as kube computes them: sidecars, init containers, pod-level resources.

Ported from kubernetes/kubernetes
``staging/src/k8s.io/component-helpers/resource/helpers_test.go`` (TestPodResourceRequests,
the spec-only cases without status resources; TestPodLevelResourceRequests, the cases with
``SkipPodLevelResources: false``), case names kept. esched adds ``pods: 1`` to every
request (the node's pod count is a resource dimension), left out of the comparison.
"""

from __future__ import annotations

from typing import Any

import pytest

from esched.schemas.objects import pod_resource_requests
from esched.schemas.quantity import to_base_units

ALWAYS = "Always"


def _c(requests: dict[str, str], restart: str | None = None, **resources: Any) -> dict:
    c: dict[str, Any] = {"name": "c", "resources": {"requests": requests, **resources}}
    if restart:
        c["restartPolicy"] = restart
    return c


def _pod(containers=(), init=(), pod_resources=None, overhead=None) -> dict:
    spec: dict[str, Any] = {"containers": list(containers), "initContainers": list(init)}
    if pod_resources is not None:
        spec["resources"] = pod_resources
    if overhead is not None:
        spec["overhead"] = overhead
    return {"metadata": {"name": "p"}, "spec": spec}


def _units(want: dict[str, str]) -> dict[str, int]:
    return {k: to_base_units(k, v) for k, v in want.items()}


CPU = "cpu"
MEM = "memory"
HP2 = "hugepages-2Mi"
HP1G = "hugepages-1Gi"

# TestPodResourceRequests: (description, pod, expectedRequests)
POD_REQUESTS = [
    (
        "nil options, larger init container",
        _pod([_c({CPU: "1"})], [_c({CPU: "4"})]),
        {CPU: "4"},
    ),
    (
        "nil options, larger containers",
        _pod([_c({CPU: "2"}), _c({CPU: "3"})], [_c({CPU: "2"})]),
        {CPU: "5"},
    ),
    (
        "pod overhead included",
        _pod(
            [_c({CPU: "2"}), _c({CPU: "3"})],
            [_c({CPU: "2"}, limits={CPU: "2"})],
            overhead={CPU: "1", MEM: "1Gi"},
        ),
        {CPU: "6", MEM: "1Gi"},
    ),
    (
        "restartable init container",
        _pod([_c({CPU: "1"})], [_c({CPU: "1"}, ALWAYS)]),
        {CPU: "2"},
    ),
    (
        "multiple restartable init containers",
        _pod(
            [_c({CPU: "1"})],
            [
                _c({CPU: "5"}),
                _c({CPU: "1"}, ALWAYS),
                _c({CPU: "2"}, ALWAYS),
                _c({CPU: "3"}, ALWAYS),
            ],
        ),
        {CPU: "7"},
    ),
    (
        "multiple restartable and regular init containers",
        _pod(
            [_c({CPU: "1"})],
            [
                _c({CPU: "5"}),
                _c({CPU: "1"}, ALWAYS),
                _c({CPU: "2"}, ALWAYS),
                _c({CPU: "5"}),
                _c({CPU: "3"}, ALWAYS),
            ],
        ),
        {CPU: "8"},
    ),
    (
        "restartable-init, init and regular",
        _pod([_c({CPU: "100"})], [_c({CPU: "10"}, ALWAYS), _c({CPU: "200"})]),
        {CPU: "210"},
    ),
]

# TestPodLevelResourceRequests (SkipPodLevelResources false): (name, pod, expectedRequests)
POD_LEVEL = [
    ("nil", _pod(), {}),
    (
        "pod level memory resource with SkipPodLevelResources false",
        _pod(pod_resources={"requests": {MEM: "2Mi"}}),
        {MEM: "2Mi"},
    ),
    (
        "pod level memory and container level cpu resources with SkipPodLevelResources false",
        _pod([_c({CPU: "2m"})], pod_resources={"requests": {MEM: "2Mi"}}),
        {MEM: "2Mi", CPU: "2m"},
    ),
    (
        "pod level unsupported resources set at both pod-level and container-level with "
        "SkipPodLevelResources false",
        _pod([_c({"storage": "3Mi"})], pod_resources={"requests": {"storage": "2Mi"}}),
        {"storage": "3Mi"},
    ),
    (
        "pod level unsupported resources set at pod-level with SkipPodLevelResources false",
        _pod([_c({MEM: "3Mi"})], pod_resources={"requests": {"storage": "2Mi"}}),
        {MEM: "3Mi"},
    ),
    (
        "only container level resources set with SkipPodLevelResources false",
        _pod([_c({MEM: "3Mi", CPU: "2m"})]),
        {MEM: "3Mi", CPU: "2m"},
    ),
    (
        "both container-level and pod-level resources set with SkipPodLevelResources false",
        _pod([_c({MEM: "3Mi", CPU: "2m"})], pod_resources={"requests": {MEM: "6Mi", CPU: "8m"}}),
        {MEM: "6Mi", CPU: "8m"},
    ),
    (
        "container-level resources and init container set with SkipPodLevelResources false",
        _pod([_c({MEM: "3Mi", CPU: "2m"})], [_c({MEM: "5Mi", CPU: "4m"})]),
        {MEM: "5Mi", CPU: "4m"},
    ),
    (
        "container-level resources and sidecar container set with SkipPodLevelResources false",
        _pod([_c({MEM: "3Mi", CPU: "2m"})], [_c({MEM: "5Mi", CPU: "4m"}, ALWAYS)]),
        {MEM: "8Mi", CPU: "6m"},
    ),
    (
        "container-level resources, init and sidecar container set with "
        "SkipPodLevelResources false",
        _pod(
            [_c({MEM: "3Mi", CPU: "2m"})],
            [_c({MEM: "5Mi", CPU: "4m"}, ALWAYS), _c({MEM: "6Mi", CPU: "8m"})],
        ),
        {MEM: "11Mi", CPU: "12m"},
    ),
    (
        "pod-level resources, container-level resources, init and sidecar container set with "
        "SkipPodLevelResources false",
        _pod(
            [_c({MEM: "3Mi", CPU: "2m"})],
            [_c({MEM: "5Mi", CPU: "4m"}, ALWAYS), _c({MEM: "6Mi", CPU: "8m"})],
            pod_resources={"requests": {MEM: "15Mi", CPU: "18m"}},
        ),
        {MEM: "15Mi", CPU: "18m"},
    ),
    (
        "pod-level resources, hugepage request/limit single page size",
        _pod(pod_resources={"limits": {HP2: "2Mi"}, "requests": {MEM: "10Mi", HP2: "2Mi"}}),
        {MEM: "10Mi", HP2: "2Mi"},
    ),
    (
        "pod-level resources, hugepage request/limit multiple page sizes",
        _pod(
            pod_resources={
                "limits": {HP2: "2Mi", HP1G: "1Gi"},
                "requests": {CPU: "1", HP2: "2Mi", HP1G: "1Gi"},
            }
        ),
        {CPU: "1", HP2: "2Mi", HP1G: "1Gi"},
    ),
    (
        "pod-level resources, container-level resources, hugepage request/limit single page size",
        _pod(
            [_c({HP2: "6Mi"}, limits={HP2: "6Mi"})],
            pod_resources={"limits": {HP2: "10Mi"}, "requests": {CPU: "1", HP2: "10Mi"}},
        ),
        {CPU: "1", HP2: "10Mi"},
    ),
    (
        "pod-level resources, container-level resources, hugepage request/limit multiple page "
        "sizes",
        _pod(
            [_c({CPU: "1", HP1G: "2Gi"}, limits={HP1G: "2Gi"})],
            pod_resources={
                "limits": {HP2: "10Mi", HP1G: "2Gi"},
                "requests": {CPU: "1", HP2: "10Mi", HP1G: "2Gi"},
            },
        ),
        {CPU: "1", HP2: "10Mi", HP1G: "2Gi"},
    ),
    (
        "pod-level resources, container-level resources, hugepage request/limit multiple page "
        "sizes between pod-level and container-level",
        _pod(
            [_c({MEM: "4Mi", HP1G: "1Gi"}, limits={HP1G: "1Gi"})],
            pod_resources={"limits": {HP2: "10Mi"}, "requests": {CPU: "1", HP2: "10Mi"}},
        ),
        {CPU: "1", MEM: "4Mi", HP2: "10Mi", HP1G: "1Gi"},
    ),
]


@pytest.mark.parametrize(("case", "pod", "want"), POD_REQUESTS + POD_LEVEL)
def test_pod_requests_follow_kubes_component_helpers(case, pod, want):
    fit = dict(pod_resource_requests(pod).fit)
    assert fit.pop("pods") == 1
    assert fit == _units(want), case


def test_pod_level_limits_alone_default_the_requests():
    # API defaulting (pkg/apis/core/v1 defaultPodRequests): what the scheduler sees of a
    # pod that sets pod-level limits only; kube's helpers_test starts from defaulted pods.
    pod = _pod([_c({})], pod_resources={"limits": {CPU: "2", MEM: "1Gi"}})
    fit = pod_resource_requests(pod).fit
    assert (fit[CPU], fit[MEM]) == (2000, 1 << 30)
    # ...while a resource the containers request defaults to their sum, not the limit.
    pod = _pod([_c({CPU: "500m"})], pod_resources={"limits": {CPU: "2"}})
    assert pod_resource_requests(pod).fit[CPU] == 500


def test_scoring_requests_with_sidecars_and_pod_level_resources():
    # Non-zero requests (scoring): per-container defaults (100m, 200Mi) summed the same
    # way, sidecars included; with pod-level requests, those requests and no defaults
    # (kube's PodInfo.calculateResource: no NonMissingContainerRequests then).
    side = _pod([_c({CPU: "1"})], [_c({CPU: "1"}, ALWAYS)])
    assert pod_resource_requests(side).nonzero == (2000, 2 * 200 * 1024 * 1024)
    level = _pod([_c({})], pod_resources={"requests": {CPU: "3"}}, overhead={CPU: "1"})
    assert pod_resource_requests(level).nonzero == (4000, 0)


def test_the_fold_charges_a_pod_with_sidecars_and_pod_level_resources_by_the_rule():
    from esched.core import ClusterState
    from esched.schemas import events as ev

    state = ClusterState()
    node = {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "64", "pods": "9"}}}
    pod = _pod([_c({CPU: "1"})], [_c({CPU: "2"}, ALWAYS), _c({CPU: "9"})])
    pod["spec"]["nodeName"] = "n"
    level = _pod([_c({CPU: "1"})], pod_resources={"requests": {CPU: "5", MEM: "1Gi"}})
    level["metadata"]["name"] = "q"
    level["spec"]["nodeName"] = "n"
    for i, (etype, data) in enumerate(
        [(ev.NODE_ADDED, node), (ev.POD_SUBMITTED, pod), (ev.POD_SUBMITTED, level)], 1
    ):
        state.apply({"type": etype, "id": f"e{i}", "source": "t", "data": data}, i)
    # max(1 + 2, 9 + 2) + 5 (pod-level replaces the containers' 1)
    assert state.node("n")["allocated"]["cpu"] == 11_000 + 5_000
