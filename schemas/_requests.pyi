# Typing stub for the Cython module schemas/_requests.pyx (mypy reads this, not the .pyx).

from collections.abc import Callable
from typing import Any

# Quantities and PodSum are the C contract of _requests.pxd (cimported by the fold).
__all__ = [
    "AGGREGATED_SPEC_FIELDS",
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "HUGEPAGES_PREFIX",
    "POD_LEVEL_RESOURCES",
    "pod_level_resource",
    "pod_totals",
]

DEFAULT_MILLI_CPU_REQUEST: int
DEFAULT_MEMORY_REQUEST: int
AGGREGATED_SPEC_FIELDS: tuple[str, ...]
POD_LEVEL_RESOURCES: tuple[str, ...]
HUGEPAGES_PREFIX: str

def pod_level_resource(name: str) -> bool: ...
def pod_totals(
    spec: dict[str, Any], kind: str, units: Callable[[str, Any, str], int]
) -> tuple[dict[str, int], int, int]: ...
