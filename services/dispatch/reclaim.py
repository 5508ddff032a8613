"""Reclaim: proposals evicting pods of reclaimable queues for starved queues' parked pods."""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson

from esched.core import PHASE_PENDING, Placer
from esched.core.queues import queue_view
from esched.core.reclaim import may_reclaim, plan_gang_reclaim, plan_reclaim
from esched.core.validation import Validator
from esched.schemas.events import proposal_envelope, proposal_key, timestamp
from esched.services.bus.signing import send_signed
from esched.services.dispatch.config import SERVICE
from esched.services.dispatch.wakeups import _WakeUps
from esched.services.faults import retry_transient

log = logging.getLogger(__name__)


class _Reclaim(_WakeUps):
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
        view = queue_view(st)
        prios = {int(m.get("priority") or 0) for m in st.queue_meta[: st.n_queues]}
        if len(prios) < 2 and not any(v["share"] < 1.0 for v in view.values()):
            return  # nobody starved, and no queue above another: nothing to reclaim
        if self._placer is None:
            self._placer = Placer(st)
        position = int(st.position)
        tried: set[str] = set()
        for pod in list(self._parked):
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
                or st.queue_meta[q].get("state") == "Closed"
            ):
                continue  # a Closed queue schedules nothing: it reclaims nothing either
            g = st.gang_of(idx)
            if g >= 0:
                # A gang member: reclaim for the whole gang, all or nothing.
                gang = st.gang_keys[g]
                if self.admission.gang_rejected(gang):
                    continue
                tried.add(queue)
                gplan = plan_gang_reclaim(st, self._placer, gang, view)
                if gplan is None:
                    continue
                requests = {
                    p: dict(st.class_specs[st.pod_class_id(p)]["requests"])
                    for p, _n in gplan.bindings
                }
                data = gplan.proposal(f"reclaim-{gang}-{position}", position, requests)
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
            plan = plan_reclaim(st, self._placer, pod, view)
            if plan is None:
                continue
            pod_requests = dict(st.class_specs[st.class_of(idx)]["requests"])
            data = plan.proposal(f"reclaim-{pod}-{position}", position, pod_requests)
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

    def _valid(self, data: dict[str, Any]) -> bool:
        """Whether the commit service would accept reclaim proposal ``data`` on this fold
        (its own :class:`~esched.core.validation.Validator`: fit, constraints, queue
        capability, the reclaim rule), so a plan it must refuse, e.g. one taking the
        reclaiming queue over its capability, is not sent round again and again."""
        if self._validator is None or self._validator.state is not self.state:
            self._validator = Validator(self.state, self.admission.quota.bands)
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
