# Typing stub for the Cython module core/_preempt.pyx (mypy reads this, not the .pyx).
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from esched.core._placer import Placer
from esched.core._state import ClusterState
from esched.core.bands import BandConfig

__all__ = [
    "class_bands",
    "interpod_victims",
    "plan_gang_preempting",
    "plan_preemption",
    "select_victims",
]

_Pod = dict[str, Any] | str | int

def select_victims(
    state: ClusterState,
    used: npt.NDArray[Any],
    alloc: npt.NDArray[Any],
    ok: npt.NDArray[Any],
    cid: int,
    class_band: npt.NDArray[Any],
    evicted: npt.NDArray[Any],
    exclude_gang: int = -1,
    cache: dict[Any, Any] | None = None,
    must: npt.NDArray[Any] | None = None,
) -> tuple[int, list[int], list[int], tuple[Any, int, int]] | None: ...
def class_bands(pl: Placer, bands: BandConfig | None = None) -> npt.NDArray[np.uint8]: ...
def plan_preemption(
    pl: Placer, pod: _Pod, bands: BandConfig | None = None, assume: bool = True
) -> dict[str, Any] | None: ...
def plan_gang_preempting(
    pl: Placer,
    pods: Sequence[_Pod],
    min_member: int | None = None,
    bands: BandConfig | None = None,
) -> dict[str, Any] | None: ...
def interpod_victims(
    placer: Placer,
    state: ClusterState,
    pod: _Pod,
    nodes: list[int],
    got: tuple[int, list[int], list[int], tuple[Any, int, int]] | None,
    cid: int,
    class_band: npt.NDArray[Any],
    evicted: npt.NDArray[Any] | None,
    exclude_gang: int = -1,
    cache: dict[Any, Any] | None = None,
) -> tuple[int, list[int], list[int], tuple[Any, int, int]] | None: ...
