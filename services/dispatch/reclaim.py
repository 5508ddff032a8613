"""Reclaim: proposals evicting pods of reclaimable queues for starved queues' parked pods."""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson

from esched.core import PHASE_PENDING, Placer
from esched.core.queues import queue_view
from esched.core.reclaim import may_reclaim, plan_gang_reclaim, plan_reclaim, reclaim_order
from esched.core.validation import Validator
from esched.schemas.events import PLACEMENT_REJECTED, proposal_envelope, proposal_key, timestamp
from esched.services.bus.signing import send_signed
from esched.services.dispatch.config import SERVICE
from esched.services.dispatch.overload import _Overload
from esched.services.faults import retry_transient
from esched.services.store.base import StoredEvent

log = logging.getLogger(__name__)

#: Proposal ids of the dispatcher's reclaims start with this.
RECLAIM_PREFIX = "reclaim-"


class _Reclaim(_Overload):
    """Plan, check and send reclaim proposals."""

    def _plan_reclaims(self) -> None:
        """Reclaim proposals for starved queues' parked pods (one pod per queue per pass)."""
        if not self._reclaim_due():
            return
        now = time.monotonic()
        if now < self._next_reclaim:
            return
        self._next_reclaim = now + self.config.reclaim_interval
        st = self.state
        self._reclaim_seen = int(st.position)
        view = queue_view(st, self.admission.queue_hierarchy)
        order = reclaim_order(st, view)
        if order is None:
            return  # no queue holds more than its deserved share: nothing to reclaim
        if self._placer is None:
            self._placer = Placer(st)
        position = int(st.position)
        tried: set[str] = set()
        # Queues of higher priority first, then the lower shares (Volcano's reclaim
        # action pops its queues by QueueOrderFn); parked order within a queue.
        parked = [p for p in self._parked if p in st.pod_index]
        parked.sort(key=lambda p: order[st.queue_names[st.queue_of(st.pod_index[p])]])
        for pod in parked:
            if self._reclaiming.get(pod, 0.0) > now:
                continue
            idx = st.pod_index.get(pod)
            if idx is None or st.phase_of(idx) != PHASE_PENDING:
                continue
            q = st.queue_of(idx)
            queue = st.queue_names[q]
            if (
                queue in tried
                or not may_reclaim(st, queue, view)
                or (st.queue_meta[q].get("state") or "Open") != "Open"
            ):
                continue  # only an Open queue reclaims (proportion's allocatable)
            g = st.gang_of(idx)
            if g >= 0:
                # A gang member: reclaim for the whole gang, all or nothing.
                gang = st.gang_keys[g]
                if self.admission.gang_rejected(gang):
                    continue
                tried.add(queue)
                gplan = plan_gang_reclaim(
                    st, self._placer, gang, view, self.admission.queue_hierarchy
                )
                if gplan is None:
                    continue
                requests = {
                    p: dict(st.class_specs[st.pod_class_id(p)]["requests"])
                    for p, _n in gplan.bindings
                }
                data = gplan.proposal(f"{RECLAIM_PREFIX}{gang}-{position}", position, requests)
                for member in st.gang_members(gang, "Pending"):
                    self._reclaiming[member] = now + self.config.reclaim_timeout
                if not self._valid(data):
                    continue
                self._reclaims.append(data)
                log.info(
                    "reclaim for gang %s (queue %s): %d member(s), evicting %s",
                    gang,
                    queue,
                    len(gplan.bindings),
                    ", ".join(p for p, _n in gplan.victims),
                )
                continue
            tried.add(queue)
            plan = plan_reclaim(st, self._placer, pod, view, self.admission.queue_hierarchy)
            if plan is None:
                continue
            pod_requests = dict(st.class_specs[st.class_of(idx)]["requests"])
            data = plan.proposal(f"{RECLAIM_PREFIX}{pod}-{position}", position, pod_requests)
            self._reclaiming[pod] = now + self.config.reclaim_timeout
            if not self._valid(data):
                continue
            self._reclaims.append(data)
            log.info(
                "reclaim for %s (queue %s) on %s: evicting %s",
                pod,
                queue,
                plan.node,
                ", ".join(plan.victims),
            )
        for pod, until in list(self._reclaiming.items()):
            if until <= now:
                del self._reclaiming[pod]

    def _fold(self, rows: list[StoredEvent]) -> None:
        """Fold as the wake-ups do, then forget the reclaims the commit service refused
        (a victim already gone, the shares moved): their pods are planned again on the
        next reclaim pass, not after ``reclaim_timeout`` (and not never, when the log
        stands still after the refusal)."""
        super()._fold(rows)
        for r in rows:
            if r.type != PLACEMENT_REJECTED:
                continue
            data = orjson.loads(r.payload).get("data") or {}
            if not str(data.get("proposal") or "").startswith(RECLAIM_PREFIX):
                continue
            for pod in data.get("pods") or ():
                self._reclaiming.pop(str(pod), None)
            self._reclaim_seen = -1  # due again, even if nothing else moves
            self._next_reclaim = 0.0

    def _valid(self, data: dict[str, Any]) -> bool:
        """Whether the commit service would accept reclaim proposal ``data`` on this fold
        (its own :class:`~esched.core.validation.Validator`: fit, constraints, queue
        capability, the reclaim rule), so a plan it must refuse, e.g. one taking the
        reclaiming queue over its capability, is not sent round again and again."""
        if self._validator is None or self._validator.state is not self.state:
            self._validator = Validator(
                self.state,
                self.admission.quota.bands,
                queue_hierarchy=self.admission.queue_hierarchy,
            )
        self._validator.begin()
        verdict = self._validator.check(data, record=False)
        if not verdict.ok:
            log.info(
                "reclaim for %s not proposed: %s (%s)",
                proposal_key(data),
                verdict.reason,
                verdict.message,
            )
        return verdict.ok

    def _reclaim_due(self) -> bool:
        """Parked pods, and the state changed since the last reclaim pass."""
        return bool(
            self.config.reclaim_interval and self._parked and self._reclaim_seen != self.position
        )

    async def _send_reclaims(self) -> None:
        if not self._reclaims:
            return
        batch, self._reclaims = self._reclaims, []
        if self._submit is not None:
            await self._submit(batch)
        else:
            assert self._producer is not None
            producer = self._producer
            stamp = timestamp()
            records = [
                (
                    proposal_key(p).encode(),
                    orjson.dumps(proposal_envelope(p, "esched/dispatch", time=stamp)),
                )
                for p in batch
            ]
            await retry_transient(
                lambda: send_signed(producer, self.bus.keyring, self.bus.topics.proposals, records),
                what="reclaim proposals send",
                service=SERVICE,
                peer="bus",
            )
        self.totals.reclaims += len(batch)
