# Typing stub for the Cython module core/_gang_plan.pyx (mypy reads this, not the .pyx).
from collections.abc import Sequence
from typing import Any

from esched.core._devices import GangDevices
from esched.core._placer import Placer

__all__ = ["gang_message", "gang_shortfall", "plan_gang"]

_Pod = dict[str, Any] | str | int

def plan_gang(
    pl: Placer,
    pods: Sequence[_Pod],
    min_member: int | None = None,
    devices: GangDevices | None = None,
) -> list[str | None] | None: ...
def gang_shortfall(
    pl: Placer, missing: list[int], fit: int, need: int, members: int
) -> dict[str, Any]: ...
def gang_message(report: dict[str, Any] | None) -> str: ...
