# Typing stub for the Cython module core/_state.pyx (mypy reads this, not the .pyx).
# The tables' dtypes are the typedefs of core/_types.pxd: units int64, index int32,
# word uint64, flag uint8, phase int8.
from collections.abc import Iterable
from typing import Any, SupportsIndex

import numpy as np
import numpy.typing as npt

from esched.core._interpod import InterPodIndex

__all__ = ["PHASES", "SNAPSHOT_MAGIC", "ClusterState", "PositionError"]

PHASES: tuple[str, str, str, str]
SNAPSHOT_MAGIC: bytes
USAGE_MAX_AGE: float
GANG_SIZE_ANNOTATION: str
BASE_RESOURCES: tuple[str, ...]

class PositionError(ValueError):
    """An event's log position is not after the state's position (out of order or replayed)."""

    position: int
    current: int
    def __init__(self, position: int, current: int) -> None: ...

class ClusterState:
    """The cluster as contiguous typed arrays, built only by folding events."""

    # log position and counters
    position: int
    anomalies: dict[str, int]
    #: reason -> log position of its first occurrence
    anomaly_first: dict[str, int]
    #: pod key deleted before it was submitted -> position of the delete
    tombstones: dict[str, int]
    #: Pending pod key -> the names of its scheduling gates, while it has any
    gated: dict[str, tuple[str, ...]]
    #: pod key -> the ``spec.schedulerName`` it names (pods naming none are absent)
    scheduler_of: dict[str, str]
    #: pod key -> True when its ``volcano.sh/preemptable`` is false: never a victim
    not_preemptable: dict[str, bool]
    # resources
    res_names: list[str]
    res_index: dict[str, int]
    n_res: int
    # nodes
    n_nodes: int
    node_names: list[str | None]
    node_index: dict[str, int]
    node_gen: int
    port_ids: dict[tuple[Any, ...], int]
    port_strs: list[tuple[Any, ...]]
    port_words: int
    port_bits_np: npt.NDArray[np.uint64]
    node_ports: dict[int, dict[int, int]]
    class_ports: list[tuple[tuple[int, ...], tuple[int, ...]] | None]
    class_flags_np: npt.NDArray[np.uint8]
    interpod: InterPodIndex
    node_labels: list[dict[str, str]]
    node_taint_list: list[list[tuple[str, str, str]]]
    allocatable_np: npt.NDArray[np.int64]
    allocated_np: npt.NDArray[np.int64]
    version_np: npt.NDArray[np.int64]
    flags_np: npt.NDArray[np.uint8]
    label_bits_np: npt.NDArray[np.uint64]
    taint_bits_np: npt.NDArray[np.uint64]
    nz_np: npt.NDArray[np.int64]
    label_words: int
    taint_words: int
    label_ids: dict[str, int]
    label_strs: list[str]
    taint_ids: dict[tuple[str, str, str], int]
    taint_strs: list[tuple[str, str, str]]
    # pods
    n_pods: int
    pod_index: dict[str, int]
    pod_keys: list[str | None]
    pod_node_np: npt.NDArray[np.int32]
    pod_class_np: npt.NDArray[np.int32]
    pod_gang_np: npt.NDArray[np.int32]
    pod_queue_np: npt.NDArray[np.int32]
    pod_phase_np: npt.NDArray[np.int8]
    pod_prio_np: npt.NDArray[np.int64]
    pod_alloc_np: npt.NDArray[np.int64]
    pod_dev_np: npt.NDArray[np.int64]
    # equivalence classes
    n_classes: int
    class_index: dict[Any, int]
    class_specs: list[dict[str, Any]]
    class_req_np: npt.NDArray[np.int64]
    class_nz_np: npt.NDArray[np.int64]
    # gangs
    n_gangs: int
    gang_index: dict[str, int]
    gang_keys: list[str]
    gang_meta: list[dict[str, Any]]
    gang_min_np: npt.NDArray[np.int32]
    gang_counts_np: npt.NDArray[np.int64]
    # queues
    n_queues: int
    queue_index: dict[str, int]
    queue_names: list[str]
    queue_meta: list[dict[str, Any]]
    priority_classes: dict[str, dict[str, Any]]
    queue_alloc_np: npt.NDArray[np.int64]
    queue_counts_np: npt.NDArray[np.int64]
    # gang reservations
    reservations: dict[str, list[str]]
    reserved_nodes: dict[str, str]
    # last reported usage
    pod_usage: dict[str, dict[str, int]]
    # measured node load (the Usage plugin)
    usage_clock: float
    usage_max_age: float
    usage_gen: int

    def __init__(self, *, usage_max_age: float = ...) -> None: ...
    def node_usage(self, name: str) -> dict[str, int] | None: ...
    def usage_rows(self) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]: ...
    def apply(self, event: dict[str, Any], position: int) -> None: ...
    def apply_many(self, events: Iterable[tuple[int, dict[str, Any]]]) -> int: ...
    def apply_payloads(self, rows: Iterable[tuple[int, bytes | str]]) -> int: ...
    @property
    def event_counts(self) -> dict[str, int]: ...
    def summary(self) -> dict[str, Any]: ...
    def pod(self, key: str) -> dict[str, Any] | None: ...
    def node(self, name: str) -> dict[str, Any] | None: ...
    def node_port_keys(self, n: SupportsIndex) -> dict[tuple[Any, ...], int]: ...
    def intern_class(self, pod: dict[str, Any]) -> int: ...
    def pod_class_id(self, key: str) -> int: ...
    def gang_members(self, key: str, phase: str | None = None) -> list[str]: ...
    def gang_min_member(self, key: str) -> int: ...
    def pending_pods(self) -> list[str]: ...
    # read API: per slot (IndexError outside the rows in use) ...
    def phase_of(self, p: SupportsIndex) -> int: ...
    def node_of(self, p: SupportsIndex) -> int: ...
    def queue_of(self, p: SupportsIndex) -> int: ...
    def gang_of(self, p: SupportsIndex) -> int: ...
    def class_preempts(self, cid: SupportsIndex) -> bool: ...
    def class_of(self, p: SupportsIndex) -> int: ...
    def priority_of(self, p: SupportsIndex) -> int: ...
    def allocation_of(self, p: SupportsIndex) -> npt.NDArray[np.int64]: ...
    # ... and read-only views of the rows in use, valid until the next fold
    def pod_phases(self) -> npt.NDArray[np.int8]: ...
    def pod_nodes(self) -> npt.NDArray[np.int32]: ...
    def pod_queues(self) -> npt.NDArray[np.int32]: ...
    def pod_gangs(self) -> npt.NDArray[np.int32]: ...
    def pod_classes(self) -> npt.NDArray[np.int32]: ...
    def pod_priorities(self) -> npt.NDArray[np.int64]: ...
    def pod_allocations(self) -> npt.NDArray[np.int64]: ...
    def phase_count(self, phase: int) -> int: ...
    def pods_in_phase(self, phase: int) -> npt.NDArray[np.intp]: ...
    def pods_on_node(self, n: SupportsIndex) -> list[str]: ...
    def gang_count(self, g: SupportsIndex, phase: int) -> int: ...
    def gang_min_of(self, g: SupportsIndex) -> int: ...
    def gang_shortfall(self, g: SupportsIndex) -> int: ...
    def node_allocatable(self) -> npt.NDArray[np.int64]: ...
    def node_allocated(self) -> npt.NDArray[np.int64]: ...
    def node_alive(self) -> npt.NDArray[np.bool_]: ...
    def is_alive(self, n: SupportsIndex) -> bool: ...
    def class_requests(self) -> npt.NDArray[np.int64]: ...
    def queue_allocations(self) -> npt.NDArray[np.int64]: ...
    def label_words_of(self, n: SupportsIndex) -> npt.NDArray[np.uint64]: ...
    def taint_words_of(self, n: SupportsIndex) -> npt.NDArray[np.uint64]: ...
    def tables(self) -> dict[str, npt.NDArray[Any]]: ...
    def to_bytes(self) -> bytes: ...
    @classmethod
    def from_bytes(cls, data: bytes) -> ClusterState: ...
    def copy(self) -> ClusterState: ...
