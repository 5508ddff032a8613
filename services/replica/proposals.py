"""A pass's proposals: their data (the one home of its fields), the batch that waits
for their decisions, and their records on the wire.

Most proposals are one pod bound to one node, without GPU devices or victims (a
one-pod Volcano Job's too, with its gang). Their records are the same bytes apart
from four fields (five with a gang), so each is joined from the pieces of a template
that :func:`proposal_data` and :func:`proposal_envelope` write once per send
(:func:`proposal_parts`): byte for byte what ``orjson.dumps`` of the envelope gives,
without a dict per pod. Any other proposal goes through the envelope.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import orjson

from esched.core.schedule import Placement
from esched.schemas.events import PLACEMENT_COMMITTED, proposal_envelope

__all__ = ["Proposed", "binding", "proposal_data", "proposal_parts"]

# Stand-ins for the per-pod fields while the template is written: a NUL never appears
# in an id, key or timestamp, and JSON escapes it (\u0000), so each is found once.
_PID = "\x00pid"
_POD = "\x00pod"
_NODE = "\x00node"
_RES = "\x00res"
_GANG = "\x00gang"


def binding(pod: str, node: str, resources: dict[str, int], devices: tuple[int, ...]) -> dict:
    """One binding of a proposal; ``devices`` only when GPU devices were chosen."""
    b: dict[str, Any] = {"pod": pod, "node": node, "resources": resources}
    if devices:
        b["devices"] = list(devices)
    return b


def proposal_data(
    pid: str,
    replica: str,
    position: int,
    gang: str | None,
    bindings: list[dict[str, Any]],
    victims: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """The ``esched.placement.proposed`` data of one proposal: all or nothing, the
    victims evicted in the same transaction when there are any."""
    data: dict[str, Any] = {
        "proposal": pid,
        "replica": replica,
        "position": position,
        "gang": gang,
        "bindings": bindings,
    }
    if victims:
        data["victims"] = victims
    return data


def proposal_parts(
    replica: str, source: str, position: int, time: str, *, gang: bool = False
) -> tuple[bytes, ...] | None:
    """The six pieces of a one-pod proposal's record, written by the envelope itself,
    between which its id (twice, JSON-escaped without quotes), its pod, its node and
    its resources (each as JSON) go; with ``gang``, seven pieces for a one-pod
    proposal of a gang, its gang's key (as JSON) after the ids. None if the template
    cannot be split (then every such record is written from its envelope)."""
    data = proposal_data(
        _PID,
        replica,
        position,
        _GANG if gang else None,
        [binding(_POD, _NODE, _RES, ())],  # type: ignore[arg-type]
    )
    template = orjson.dumps(proposal_envelope(data, source, time=time))
    pid = orjson.dumps(_PID)[1:-1]
    marks = (pid, pid) + ((orjson.dumps(_GANG),) if gang else ())
    marks += (orjson.dumps(_POD), orjson.dumps(_NODE), orjson.dumps(_RES))
    parts: list[bytes] = []
    at = 0
    for mark in marks:
        found = template.find(mark, at)
        if found < 0:
            return None
        parts.append(template[at:found])
        at = found + len(mark)
    parts.append(template[at:])
    if any(b"\\u0000" in part for part in parts):  # a stand-in where none belongs
        return None
    return tuple(parts)


class Proposed:
    """One pass's proposals (ids and placements, at the log ``position`` they were
    planned on) and the decisions folded for them; ``all_decided`` is set once each
    has one (one wake-up per batch instead of a future per proposal)."""

    __slots__ = ("all_decided", "decisions", "left", "pids", "placements", "position")

    def __init__(self, pids: list[str], placements: Sequence[Placement], position: int) -> None:
        self.pids = pids
        self.placements = placements
        self.position = position
        #: proposal id -> its decision's envelope, as folded (a committed one: its type
        #: and proposal id, see base.own_decision)
        self.decisions: dict[str, dict[str, Any]] = {}
        self.left = len(pids)
        self.all_decided: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def decide(self, pid: str, event: dict[str, Any]) -> None:
        """Record the decision of proposal ``pid`` (the first one folded counts)."""
        if pid in self.decisions:
            return
        self.decisions[pid] = event
        self.left -= 1
        if self.left <= 0 and not self.all_decided.done():
            self.all_decided.set_result(None)

    def committed(self, pid: str) -> bool | None:
        """Whether ``pid``'s decision is a commit; None while undecided."""
        ev = self.decisions.get(pid)
        return None if ev is None else ev["type"] == PLACEMENT_COMMITTED
