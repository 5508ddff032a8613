"""The events a replica appends itself: unschedulable reports and gang reservations."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import orjson

from esched.core.reasons import unschedulable_message
from esched.schemas.events import (
    GANG,
    GANG_RESERVED,
    POD,
    POD_UNSCHEDULABLE,
    envelope,
    stream_name,
    timestamp,
)
from esched.services import metrics
from esched.services.faults import append_envelopes
from esched.services.replica.claims import _Claims
from esched.services.replica.config import SERVICE

log = logging.getLogger(__name__)


def unschedulable_id(pod: str, position: int) -> str:
    """Event id of the unschedulable report for ``pod`` from work at ``position``:
    deterministic, so a redelivered work item is answered by the same (deduped) event."""
    return f"unschedulable-{pod}-{position}"


class _Reports(_Claims):
    """Append unschedulable reports and reservations (deterministic ids: dedupe)."""

    async def _reserve(self) -> None:
        """Append the reservations of the last pass (deterministic ids: dedupe)."""
        now = datetime.now(UTC)
        envelopes: list[tuple[dict[str, Any], str]] = []
        for r in self._to_reserve:
            data = {k: v for k, v in r.items() if k != "position"}
            env = envelope(
                GANG_RESERVED,
                self.config.source_prefix + self.id,
                data,
                id=f"reserve-{r['gang']}-{r['position']}",
                time=timestamp(),
            )
            envelopes.append((env, stream_name(GANG, r["gang"])))
        self._to_reserve = []
        events, res = await append_envelopes(
            self.store, envelopes, time=now, what="reservation append", service=SERVICE
        )
        self.totals.reservations += len(events) - res.duplicates
        for e in events:
            log.info("replica %s: %s", self.id, orjson.loads(e.payload)["data"]["message"])

    async def _report_unschedulable(
        self, pods: dict[str, tuple[int, dict[str, int], str, int]]
    ) -> None:
        """Append one ``esched.pod.unschedulable`` per pod (deterministic ids: dedupe)."""
        st = self.state
        n_nodes = len(st.node_index)
        now = datetime.now(UTC)
        envelopes: list[tuple[dict[str, Any], str]] = []
        for pod, (position, reasons, extra, judged_at) in pods.items():
            message = unschedulable_message(n_nodes, reasons, extra)
            # position: the state the verdict was reached on (not the fold's position
            # now), so the dispatcher can tell whether capacity freed after it: no lost
            # wake-ups.
            data = {"pod": pod, "reasons": reasons, "message": message, "position": judged_at}
            env = envelope(
                POD_UNSCHEDULABLE,
                self.config.source_prefix + self.id,
                data,
                id=unschedulable_id(pod, position),
                time=timestamp(),
            )
            envelopes.append((env, stream_name(POD, pod)))
        _, res = await append_envelopes(
            self.store, envelopes, time=now, what="unschedulable append", service=SERVICE
        )
        fresh = len(envelopes) - res.duplicates
        self.totals.unschedulable += fresh
        metrics.REPLICA_UNSCHEDULABLE.labels(self.id).inc(fresh)
