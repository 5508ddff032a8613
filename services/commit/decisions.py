"""The events the commit service writes: decisions on proposals and the evictions of a
committed preemption, and the proposals it reads."""

from __future__ import annotations

from typing import Any

from esched.core.validation import PREEMPTED, RECLAIMED, Verdict
from esched.schemas.events import (
    PLACEMENT_COMMITTED,
    PLACEMENT_PROPOSED,
    PLACEMENT_REJECTED,
    POD_EVICTED,
    envelope,
    proposal_envelope,
    proposal_key,
)
from esched.schemas.validator import validate_event


def decision_id(proposal: str) -> str:
    """The event id of the decision on ``proposal``: the store's idempotency key."""
    return f"decision-{proposal}"


def eviction_events(
    data: dict[str, Any], source: str = "esched/commit", time_: str | None = None
) -> list[dict[str, Any]]:
    """The ``esched.pod.evicted`` envelopes of a committed preemption, one per victim.

    They go into the log in the same append as the decision and just before it, so
    the fold frees the victims' room and then binds the preemptor. Ids are
    deterministic (``evicted-<proposal>-<pod>``): a redelivered proposal dedupes.
    """
    by = proposal_key(data)
    reason, what = (RECLAIMED, "reclaimed") if data.get("reclaim") else (PREEMPTED, "preempted")
    out = []
    for v in data.get("victims") or ():
        body = {
            "pod": v["pod"],
            "node": v["node"],
            "reason": reason,
            "message": f"{what} to make room for {by}",
            "by": by,
            "decision": decision_id(data["proposal"]),
        }
        out.append(
            envelope(
                POD_EVICTED,
                source,
                body,
                id=f"evicted-{data['proposal']}-{v['pod']}",
                time=time_,
            )
        )
    return out


def decision_event(
    data: dict[str, Any], verdict: Verdict, source: str = "esched/commit", time_: str | None = None
) -> dict[str, Any]:
    """The CloudEvents envelope recording ``verdict`` on proposal ``data``.

    Both kinds carry the proposal's bindings, so an audit can re-validate a
    rejection as well as a commit.
    """
    body: dict[str, Any] = {
        "proposal": data["proposal"],
        "replica": data["replica"],
        "position": data["position"],
        "gang": data.get("gang"),
        "bindings": data["bindings"],
    }
    if data.get("victims"):
        body["victims"] = data["victims"]
    if data.get("reclaim"):
        body["reclaim"] = True
    if verdict.ok:
        etype = PLACEMENT_COMMITTED
    else:
        etype = PLACEMENT_REJECTED
        body["pods"] = list(verdict.pods) or [b["pod"] for b in data["bindings"]]
        body["reason"] = verdict.reason
        body["message"] = verdict.message
    return envelope(etype, source, body, id=decision_id(data["proposal"]), time=time_)


def proposal_data(item: dict[str, Any]) -> dict[str, Any]:
    """The ``data`` of a proposal given as an envelope or as bare data, validated."""
    if "specversion" in item and "data" in item:
        env = item
    else:
        env = proposal_envelope(item, f"esched/replica/{item.get('replica')}")
    return validate_event(env, allowed_types=(PLACEMENT_PROPOSED,))["data"]
