# Typing stub for the Cython module core/_placer.pyx (mypy reads this, not the .pyx).
from collections.abc import Iterable, Sequence
from typing import Any, final, overload

import numpy as np
import numpy.typing as npt

from esched.core._devices import GangDevices
from esched.core._state import ClusterState
from esched.core.bands import BandConfig
from esched.core.profile import Profile

__all__ = [
    "EPOCH_BITS",
    "EXTERNAL_PLUGIN_KINDS",
    "REASONS",
    "SIMD",
    "Placer",
    "num_feasible_nodes_to_find",
]

# A pod as the placer takes it: a manifest, a pod key in the state, or a class id.
_Pod = dict[str, Any] | str | int

EPOCH_BITS: int
EXTERNAL_PLUGIN_KINDS: frozenset[str]
RESOURCE_REASON_SHIFT: int
REASONS: dict[int, str]
SIMD: str

def num_feasible_nodes_to_find(n_all: int, percentage: int = 0) -> int: ...

@final  # a cdef class Cython does not let Python subclass
class Placer:
    """Place pods on a :class:`ClusterState` with a profile, seed and optional cache."""

    plugin_names: list[str]
    profile: Profile
    percentage: int
    use_cache: bool
    sample: bool
    prune: bool
    seed: int
    synced_position: int
    hits: int
    misses: int
    placed: int
    visited: int
    unschedulable: int
    python_plugin_errors: int
    class_last_np: npt.NDArray[np.int64]
    class_run_np: npt.NDArray[np.int64]
    class_miss_np: npt.NDArray[np.int64]
    class_off_np: npt.NDArray[np.int64]
    class_pause_np: npt.NDArray[np.int64]
    steps_aside: int
    returns: int
    gang_failure: dict[str, Any] | None
    def __init__(
        self,
        state: ClusterState,
        profile: Profile | None = None,
        seed: int = 0,
        cache: bool = True,
        sample: bool = True,
        hide_reserved: bool = True,
        bands: BandConfig | None = None,
        prune: bool = True,
    ) -> None: ...
    fit_bands_cfg: BandConfig | None
    @property
    def fused_path(self) -> bool: ...
    def sync(self) -> None: ...
    def place(
        self,
        pod: _Pod,
        assume: bool = True,
        mask: npt.NDArray[np.uint8] | None = None,
        extra: npt.NDArray[np.int64] | None = None,
        rank: npt.NDArray[np.int64] | None = None,
    ) -> tuple[str, int] | None: ...
    def place_classes(self, class_ids: npt.ArrayLike) -> npt.NDArray[np.int32]: ...
    def assume_claims(
        self,
        pods: Sequence[int] | npt.NDArray[np.int64],
        nodes: Sequence[int] | npt.NDArray[np.int64],
        victims: Iterable[int] | None = None,
    ) -> int: ...
    def binding_reasons(self, p: int, n: int) -> int: ...
    def reason_texts(self, p: int, n: int, reasons: int) -> list[str]: ...
    def assume_binding(self, p: int, n: int, sign: int = 1) -> None: ...
    def assume_evicted(self, p: int, sign: int = 1) -> None: ...
    def place_batch(self, pods: Iterable[_Pod]) -> list[tuple[str, int] | None]: ...
    # Every member has a node when min_member is all of them (None); else members
    # beyond min_member that did not fit have None.
    @overload
    def plan_gang(
        self, pods: Sequence[_Pod], min_member: None = None, devices: GangDevices | None = None
    ) -> list[str] | None: ...
    @overload
    def plan_gang(
        self, pods: Sequence[_Pod], min_member: int, devices: GangDevices | None = None
    ) -> list[str | None] | None: ...
    def gang_message(self, report: dict[str, Any] | None = None) -> str: ...
    def class_bands(self, bands: BandConfig | None = None) -> npt.NDArray[np.uint8]: ...
    def plan_preemption(
        self, pod: _Pod, bands: BandConfig | None = None, assume: bool = True
    ) -> dict[str, Any] | None: ...
    def plan_gang_preempting(
        self, pods: Sequence[_Pod], min_member: int | None = None, bands: BandConfig | None = None
    ) -> dict[str, Any] | None: ...
    def reservation_nodes(self, pods: Sequence[_Pod], need: int) -> list[str]: ...
    def explain(self, pod: _Pod) -> dict[str, Any]: ...
    def scores(self, pod: _Pod, node: str) -> dict[str, int]: ...
    def fits(self, pod: _Pod, node: str) -> list[str]: ...
    def stats(self) -> dict[str, Any]: ...
    def release_cache_rows(self, changes: int = 1) -> None: ...
    def used_array(self) -> npt.NDArray[np.int64]: ...
