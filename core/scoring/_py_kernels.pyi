# Typing stub for the Cython module core/scoring/_py_kernels.pyx (mypy reads this, not the .pyx).
from collections.abc import Sequence

__all__ = [
    "_py_broken_linear",
    "_py_div_by_cap",
    "_py_epvm",
    "_py_floor_div",
    "_py_kernel_and_inv",
    "_py_mixed",
    "_py_round_half_away",
    "_py_usage",
    "_py_usage_over",
]

def _py_floor_div(a: int, b: int) -> int: ...
def _py_div_by_cap(num: int, cap: int) -> int: ...
def _py_kernel_and_inv(
    kind: str, requested: Sequence[int], allocatable: Sequence[int], weights: Sequence[int]
) -> tuple[int, int]: ...
def _py_broken_linear(p: int, points: Sequence[tuple[int, int]]) -> int: ...
def _py_mixed(
    requested: Sequence[int],
    allocatable: Sequence[int],
    weights: Sequence[int],
    production: bool,
    exhaust_permille: int,
    strand_permille: int,
) -> int: ...
def _py_epvm(
    used: Sequence[int],
    request: Sequence[int],
    allocatable: Sequence[int],
    weights: Sequence[int],
    base: float,
) -> int: ...
def _py_usage(
    usage: Sequence[int] | None, allocatable: Sequence[int], weights: Sequence[int]
) -> int: ...
def _py_usage_over(usage: int, allocatable: int, percent: int) -> bool: ...
def _py_round_half_away(x: float) -> int: ...
