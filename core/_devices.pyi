# Typing stub for the Cython module core/_devices.pyx (mypy reads this, not the .pyx).
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["GPU_MILLI", "MAX_DEVICES", "DeviceTable", "GangDevices", "request_shape"]

GPU_MILLI: int
MAX_DEVICES: int

def request_shape(g: int) -> tuple[int, int]: ...

class DeviceTable:
    """GPU devices per node slot: exact device fit, binding, and FGD's fragmentation."""

    n_nodes: int
    free_np: npt.NDArray[np.int32]
    ndev_np: npt.NDArray[np.int32]
    model_np: npt.NDArray[np.int32]
    cpu_free_np: npt.NDArray[np.int64]
    ver_np: npt.NDArray[np.int64]
    frag_np: npt.NDArray[np.float64]
    frag_total: float
    models: dict[str, int]
    model_names: list[str]
    has_target: bool
    memo_hits: int
    memo_misses: int
    def __init__(self, max_devices: int = ...) -> None: ...
    def model_id(self, name: str | None) -> int: ...
    def set_node(self, n: int, devices: int, model: str | None, cpu_milli: int) -> None: ...
    def remove_node(self, n: int) -> None: ...
    def fits(self, n: int, g: int) -> bool: ...
    def fit_mask(self, g: int, out: npt.NDArray[np.uint8]) -> int: ...
    def choose(self, n: int, g: int, cpu: int = 0, fgd: bool = False) -> tuple[int, ...]: ...
    def bind(self, n: int, g: int, cpu: int, devices: Iterable[int]) -> None: ...
    def release(self, n: int, g: int, cpu: int, devices: Iterable[int]) -> None: ...
    def set_target(self, types: Iterable[Sequence[Any]]) -> None: ...
    def node_frag(self, n: int) -> float: ...
    def delta(self, n: int, g: int, cpu: int = 0) -> float: ...
    def fgd_scores(
        self,
        g: int,
        cpu: int,
        mask: npt.NDArray[np.uint8],
        out: npt.NDArray[np.int64],
        weight: int = 1,
    ) -> None: ...
    def free_of(self, n: int) -> list[int]: ...
    def totals(self) -> dict[str, Any]: ...

class GangDevices:
    """The devices a gang's members take, planned member by member (exact)."""

    table: DeviceTable
    gpu_milli: list[int]
    cpu_milli: list[int]
    fgd: bool
    buf: npt.NDArray[np.uint8]
    taken: list[tuple[int, tuple[int, ...]] | None]
    def __init__(
        self,
        table: DeviceTable,
        gpu_milli: Sequence[int],
        cpu_milli: Sequence[int],
        fgd: bool = False,
        n_slots: int = 0,
    ) -> None: ...
    def mask(self, i: int) -> npt.NDArray[np.uint8] | None: ...
    def take(self, i: int, n: int) -> None: ...
    def undo(self) -> None: ...
