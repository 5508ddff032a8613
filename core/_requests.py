"""Pod requests as kube-scheduler's resource *scoring* sees them.

``schemas.objects.pod_requests`` gives the requests used for fitting. Scoring
(NodeResourcesFit strategies) differs for cpu and memory: a container that does
not set a request for them counts as requesting kube-scheduler's non-zero
defaults, so that a node full of request-less pods does not look empty
(``pkg/scheduler/util.GetNonzeroRequests``: 100m CPU, 200Mi memory, applied per
container through ``PodResourcesOptions.NonMissingContainerRequests``).
An explicit ``0`` is kept as 0: only a *missing* request gets the default.
"""

from __future__ import annotations

from typing import Any

from esched.schemas.quantity import to_base_units

__all__ = ["DEFAULT_MEMORY_REQUEST", "DEFAULT_MILLI_CPU_REQUEST", "nonzero_requests"]

#: kube-scheduler's schedutil.DefaultMilliCPURequest.
DEFAULT_MILLI_CPU_REQUEST = 100
#: kube-scheduler's schedutil.DefaultMemoryRequest (200 MiB).
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024


def _container_nonzero(container: dict[str, Any]) -> tuple[int, int]:
    res = container.get("resources") or {}
    # API defaulting: a limit without a request is the request.
    values = dict(res.get("limits") or {})
    values.update(res.get("requests") or {})
    cpu = to_base_units("cpu", values["cpu"]) if "cpu" in values else DEFAULT_MILLI_CPU_REQUEST
    mem = (
        to_base_units("memory", values["memory"]) if "memory" in values else DEFAULT_MEMORY_REQUEST
    )
    return cpu, mem


def nonzero_requests(pod: dict[str, Any]) -> tuple[int, int]:
    """``(milli-CPU, memory bytes)`` with non-zero defaults per container, as kube scores."""
    spec = pod.get("spec") or {}
    cpu = mem = 0
    for c in spec.get("containers") or ():
        c_cpu, c_mem = _container_nonzero(c)
        cpu += c_cpu
        mem += c_mem
    for c in spec.get("initContainers") or ():
        c_cpu, c_mem = _container_nonzero(c)
        cpu = max(cpu, c_cpu)
        mem = max(mem, c_mem)
    overhead = spec.get("overhead") or {}
    if "cpu" in overhead:
        cpu += to_base_units("cpu", overhead["cpu"])
    if "memory" in overhead:
        mem += to_base_units("memory", overhead["memory"])
    return cpu, mem
