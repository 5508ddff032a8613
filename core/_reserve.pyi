# Typing stub for the Cython module core/_reserve.pyx (mypy reads this, not the .pyx).
from collections.abc import Sequence
from typing import Any

from esched.core._placer import Placer

__all__ = ["hide_reserved", "reservation_nodes"]

def hide_reserved(pl: Placer, gang: str | None) -> None: ...
def reservation_nodes(
    pl: Placer, pods: Sequence[dict[str, Any] | str | int], need: int
) -> list[str]: ...
