# Typing stub for the Cython module core/_state.pyx (mypy reads this, not the .pyx).
# The tables' dtypes are the typedefs of core/_types.pxd: units int64, index int32,
# word uint64, flag uint8, phase int8.
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["PHASES", "SNAPSHOT_MAGIC", "ClusterState", "PositionError"]

PHASES: tuple[str, str, str, str]
SNAPSHOT_MAGIC: bytes
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
    # resources
    res_names: list[str]
    res_index: dict[str, int]
    n_res: int
    # nodes
    n_nodes: int
    node_names: list[str | None]
    node_index: dict[str, int]
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
    queue_alloc_np: npt.NDArray[np.int64]
    queue_counts_np: npt.NDArray[np.int64]
    # gang reservations
    reservations: dict[str, list[str]]
    reserved_nodes: dict[str, str]
    # last reported usage
    node_usage: dict[str, dict[str, int]]
    pod_usage: dict[str, dict[str, int]]

    def __init__(self) -> None: ...
    def apply(self, event: dict[str, Any], position: int) -> None: ...
    def apply_many(self, events: Iterable[tuple[int, dict[str, Any]]]) -> int: ...
    def apply_payloads(self, rows: Iterable[tuple[int, bytes | str]]) -> int: ...
    @property
    def event_counts(self) -> dict[str, int]: ...
    def summary(self) -> dict[str, Any]: ...
    def pod(self, key: str) -> dict[str, Any] | None: ...
    def node(self, name: str) -> dict[str, Any] | None: ...
    def intern_class(self, pod: dict[str, Any]) -> int: ...
    def pod_class_id(self, key: str) -> int: ...
    def gang_members(self, key: str, phase: str | None = None) -> list[str]: ...
    def gang_min_member(self, key: str) -> int: ...
    def pending_pods(self) -> list[str]: ...
    def to_bytes(self) -> bytes: ...
    @classmethod
    def from_bytes(cls, data: bytes) -> ClusterState: ...
    def copy(self) -> ClusterState: ...
