# Typing stub for the Cython module services/replica/_records.pyx (mypy reads this, not the .pyx).
from collections.abc import Callable, Iterable, Sequence
from typing import Any

def proposal_records(
    parts: tuple[bytes, ...] | None,
    gang_template: Callable[[], tuple[bytes, ...] | None],
    pids: list[str],
    placements: Sequence[Any],
    which: Iterable[int],
    class_of: Callable[[str], int],
    resources: dict[int, bytes],
    nodes: dict[str, bytes],
    plain_ids: bool,
    requests_json: Callable[[int], bytes],
    other: Callable[[int], tuple[bytes, bytes]],
) -> list[tuple[bytes, bytes]]: ...
