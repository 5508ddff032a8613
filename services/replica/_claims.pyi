# Typing stub for the Cython module services/replica/_claims.pyx (mypy reads this, not the .pyx).
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

def claimed_slots(
    claims: Iterable[tuple[Sequence[tuple[str, str, Any]], Sequence[str], list[int]]],
    pod_keys: list[str | None],
    node_names: list[str | None],
    pod_index: dict[str, int],
    node_index: dict[str, int],
) -> tuple[NDArray[np.int64], NDArray[np.int64], list[int]]: ...
