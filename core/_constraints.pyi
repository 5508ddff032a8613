# Typing stub for the Cython module core/_constraints.pyx (mypy reads this, not the .pyx).
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "ANY",
    "FALSE",
    "NODE_IN",
    "NODE_NOT_IN",
    "NONE",
    "CompiledClass",
    "compile_class",
    "intern_stamp",
    "tolerates",
]

ANY: int
NONE: int
FALSE: int
NODE_IN: int
NODE_NOT_IN: int
NODE_NAME_FIELD: str

class CompiledClass:
    """The arrays behind a class's ClassView and the intern sizes they were built for."""

    stamp: tuple[int, int, int, int]
    expr_mask: npt.NDArray[np.uint64]
    expr_mode: npt.NDArray[np.int8]
    term_off: npt.NDArray[np.int32]
    intolerable: npt.NDArray[np.uint64]
    tolerates_unschedulable: bool
    has_labels: bool
    has_taints: bool
    pref_mask: npt.NDArray[np.uint64]
    has_pref: bool
    expr_node_off: npt.NDArray[np.int32]
    expr_nodes: npt.NDArray[np.int32]
    pinned: bool
    pin: int
    node_gen: int
    port_conflict: npt.NDArray[np.uint64]
    has_ports: bool
    n_terms: int
    pref_weight: npt.NDArray[np.int64]
    n_pref_terms: int
    prefer_intolerable: npt.NDArray[np.uint64]
    has_prefer_taints: bool
    def __init__(
        self,
        stamp: tuple[int, int, int, int],
        expr_mask: npt.NDArray[np.uint64],
        expr_mode: npt.NDArray[np.int8],
        term_off: npt.NDArray[np.int32],
        intolerable: npt.NDArray[np.uint64],
        tolerates_unschedulable: bool,
        has_labels: bool,
        has_taints: bool,
        pref_mask: npt.NDArray[np.uint64],
        has_pref: bool,
        expr_node_off: npt.NDArray[np.int32],
        expr_nodes: npt.NDArray[np.int32],
        pinned: bool,
        pin: int,
        node_gen: int,
        port_conflict: npt.NDArray[np.uint64],
        has_ports: bool,
        n_terms: int = 1,
        pref_weight: npt.NDArray[np.int64] | None = None,
        n_pref_terms: int = 0,
        prefer_intolerable: npt.NDArray[np.uint64] | None = None,
        has_prefer_taints: bool = False,
    ) -> None: ...

def intern_stamp(state: Any) -> tuple[int, int, int, int]: ...
def tolerates(tol: dict[str, Any], key: str, value: str, effect: str) -> bool: ...
def compile_class(state: Any, cid: int, added: dict[str, Any] | None = None) -> CompiledClass: ...
