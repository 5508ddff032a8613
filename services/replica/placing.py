"""Placing work: one scheduling pass per batch, proposals sent and their decisions
awaited, rejected ones retried with backoff."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson

from esched.core.reasons import canonical_code
from esched.core.schedule import PassResult, Target
from esched.schemas.events import PLACEMENT_COMMITTED, proposal_envelope, proposal_key, timestamp
from esched.services import metrics
from esched.services.bus.signing import send_signed
from esched.services.faults import retry_transient
from esched.services.replica.base import Undecided
from esched.services.replica.config import SERVICE
from esched.services.replica.reports import _Reports
from esched.services.retry import Backoff

log = logging.getLogger(__name__)


class _Placing(_Reports):
    """Place, propose, wait for the decisions, retry the rejected."""

    async def _place(self, targets: list[Target], planned: asyncio.Event | None = None) -> None:
        """Place, propose, wait, retry rejected ones; report the unplaceable.

        An unschedulable verdict is final only if every claim in the view it was
        reached on was committed: this pass's proposals and those of other batches
        still in flight (assumed). Otherwise the view held room that is in fact free,
        so those pods are judged again on fresh state. Verdicts still in doubt when
        the retries run out are reported as provisional (data ``position`` 0: "judged
        on no particular state"), which the dispatcher re-publishes after backoff
        once any capacity event is in the log. A gang with a member in another
        batch's undecided proposal is planned once that one is decided.
        """
        assert self.placer is not None
        # pod -> (work position, reasons, message, position the verdict was reached on)
        unschedulable: dict[str, tuple[int, dict[str, int], str, int]] = {}
        attempt = 0
        backoff = Backoff(self.config.retry_backoff, self.config.retry_backoff_max)
        while targets and not self._stopping.is_set():
            self._resync()
            # Undecided claims of other batches this pass's view assumes.
            foreign = [f for pid in self._inflight if (f := self._waiting.get(pid)) is not None]
            candidates: dict[str, tuple[Target, dict[str, int], str]] = {}
            blocked: list[tuple[Target, list[asyncio.Future]]] = []
            judged_at = int(self.state.position)  # the state this pass's verdicts see
            t0 = time.perf_counter()
            proposals, by_proposal = self._plan(targets, candidates, blocked)
            t1 = time.perf_counter()
            retry: list[Target] = []
            if proposals:
                retry = await self._decided(proposals, by_proposal, planned)
            elif planned is not None:
                planned.set()
            log.debug(
                "replica %s: planned %d in %.1f ms, decided in %.1f ms",
                self.id,
                len(proposals),
                (t1 - t0) * 1e3,
                (time.perf_counter() - t1) * 1e3,
            )
            doubt = bool(retry)
            if candidates and not doubt and foreign:
                done, pending = await asyncio.wait(foreign, timeout=self.config.decision_timeout)
                doubt = bool(pending) or any(
                    f.cancelled() or f.result()["type"] != PLACEMENT_COMMITTED for f in done
                )
            again: dict[tuple[str, str], Target] = {}
            if doubt:
                for t in retry:
                    again[(t.kind, t.key)] = t
                for t, _reasons, _msg in candidates.values():
                    again.setdefault((t.kind, t.key), t)
            else:
                for pod, (t, reasons, msg) in candidates.items():
                    unschedulable[pod] = (t.position, reasons, msg, judged_at)
            if blocked:
                await asyncio.wait(
                    {f for _t, fs in blocked for f in fs}, timeout=self.config.decision_timeout
                )
                for t, _fs in blocked:
                    again.setdefault((t.kind, t.key), t)
            if not again:
                break
            targets = list(again.values())
            if not doubt:
                continue  # only blocked gangs: planned now, not a retry
            attempt += 1
            if attempt > self.config.max_retries:
                # The dispatcher re-publishes a rejected proposal's pods after a delay,
                # and provisional verdicts after backoff.
                for pod, (t, reasons, msg) in candidates.items():
                    unschedulable[pod] = (t.position, reasons, msg, 0)
                self.totals.gave_up += len(targets)
                log.info(
                    "replica %s: %d target(s) still conflicting after %d retries",
                    self.id,
                    len(targets),
                    self.config.max_retries,
                )
                break
            self.totals.retries += len(targets)
            # The services' one backoff (services/retry.py: capped, equal jitter), so
            # replicas that collided do not collide again in step.
            await asyncio.sleep(backoff.next_delay())
        if unschedulable:
            await self._report_unschedulable(unschedulable)
        if self._to_reserve:
            await self._reserve()

    async def _decided(
        self,
        proposals: list[dict[str, Any]],
        by_proposal: dict[str, Target],
        planned: asyncio.Event | None = None,
    ) -> list[Target]:
        """Propose, wait for the decisions, count them; the targets of rejected ones."""
        decisions = await self._propose(proposals, planned)
        retry: list[Target] = []
        committed = placed = 0
        for pid, env in decisions.items():
            data = env["data"]
            if env["type"] == PLACEMENT_COMMITTED:
                committed += 1
                placed += len(data["bindings"])
            else:
                # A decision of an older commit service may spell it the old way.
                reason = canonical_code(str(data.get("reason")))
                self.totals.conflicts += 1
                self.totals.reasons[reason] = self.totals.reasons.get(reason, 0) + 1
                metrics.REPLICA_PROPOSALS.labels(self.id, "rejected").inc()
                metrics.REPLICA_CONFLICTS.labels(self.id, reason).inc()
                retry.append(by_proposal[pid])
        # Counted once per pass: labelled metric lookups per pod are measurable here.
        self.totals.committed += committed
        self.totals.placed_pods += placed
        metrics.REPLICA_PROPOSALS.labels(self.id, "committed").inc(committed)
        metrics.REPLICA_PLACED_PODS.labels(self.id).inc(placed)
        return retry

    def _requests_of(self, cid: int) -> dict[str, int]:
        req = self._requests.get(cid)
        if req is None:
            req = dict(self.state.class_specs[cid]["requests"])
            self._requests[cid] = req
        return req

    def _plan(
        self,
        targets: list[Target],
        unschedulable: dict[str, tuple[Target, dict[str, int], str]],
        blocked: list[tuple[Target, list[asyncio.Future]]] | None = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Target]]:
        """Proposals for ``targets`` by one scheduling pass on the current view (pods
        assumed as placed); pods no node fits go to ``unschedulable`` (pod -> target,
        reasons, message).

        A pod with an undecided claim (another batch proposed it) is skipped: that
        batch retries it if it is rejected. A gang with a member in an undecided
        proposal goes to ``blocked`` with the futures of those decisions.
        """
        assert self.scheduler is not None
        result = (self.rounds or self.scheduler).run(
            targets,
            now=time.monotonic(),
            in_flight=self._inflight_pods,
            reserving={r["gang"] for r in self._to_reserve},
        )
        proposals, by_proposal = self._proposals(result)
        unschedulable.update(result.unschedulable)
        self.totals.skipped += result.skipped
        self.totals.gangs_waiting += result.gangs_waiting
        for t, busy in result.blocked:
            futures = [f for pid in busy if (f := self._waiting.get(pid)) is not None]
            if blocked is not None and futures:
                blocked.append((t, futures))
            else:
                self.totals.skipped += 1
        self._to_reserve.extend(result.reservations)
        return proposals, by_proposal

    def _proposals(self, result: PassResult) -> tuple[list[dict[str, Any]], dict[str, Target]]:
        """The ``esched.placement.proposed`` data of a pass's placements (one proposal
        per placement: all or nothing), and the target of each by proposal id."""
        st = self.state
        position = int(st.position)
        proposals: list[dict[str, Any]] = []
        by_proposal: dict[str, Target] = {}
        for pl in result.placements:
            pid = f"{self._pid_prefix}{next(self._pid_seq):x}"
            proposal: dict[str, Any] = {
                "proposal": pid,
                "replica": self.id,
                "position": position,
                "gang": pl.gang,
                "bindings": [
                    binding(pod, node, self._requests_of(st.pod_class_id(pod)), devices)
                    for pod, node, devices in pl.bindings
                ],
            }
            if pl.victims:
                # One transaction: the commit service evicts these and binds, or neither.
                proposal["victims"] = pl.victims
                self.totals.preemptions += 1
                self.totals.victims += len(pl.victims)
            proposals.append(proposal)
            by_proposal[pid] = pl.target
        return proposals, by_proposal

    async def _propose(
        self, proposals: list[dict[str, Any]], planned: asyncio.Event | None = None
    ) -> dict[str, dict[str, Any]]:
        """Claim and send proposals and wait until their decisions are in this
        replica's fold. ``planned`` is set once the claims are recorded (before the
        first await: the view and the claims never disagree)."""
        loop = asyncio.get_running_loop()
        if not self.totals.first_proposal_at:
            self.totals.first_proposal_at = time.perf_counter()
        futures = {p["proposal"]: loop.create_future() for p in proposals}
        self._waiting.update(futures)
        undecided = Undecided(len(futures), loop.create_future())
        self._batch_of.update(dict.fromkeys(futures, undecided))
        self._claim(proposals)
        if planned is not None:
            planned.set()
        self.totals.proposals += len(proposals)
        try:
            pending = list(proposals)
            while True:
                await self._send(pending)
                await asyncio.wait((undecided.all_decided,), timeout=self.config.decision_timeout)
                pending = [p for p in proposals if not futures[p["proposal"]].done()]
                if not pending:
                    break
                if self._stopping.is_set():
                    raise asyncio.CancelledError
                log.warning(
                    "replica %s: %d proposal(s) undecided after %.0fs; re-sending",
                    self.id,
                    len(pending),
                    self.config.decision_timeout,
                )
            self.totals.last_decision_at = time.perf_counter()
            return {pid: f.result() for pid, f in futures.items()}
        finally:
            for pid in futures:
                self._waiting.pop(pid, None)
                self._batch_of.pop(pid, None)

    async def _send(self, proposals: list[dict[str, Any]]) -> None:
        if self._submit is not None:
            await self._submit(proposals)
            return
        assert self._producer is not None
        now = timestamp()
        records = [
            (
                proposal_key(p).encode(),
                orjson.dumps(proposal_envelope(p, self.config.source_prefix + self.id, time=now)),
            )
            for p in proposals
        ]
        producer = self._producer
        await retry_transient(
            lambda: send_signed(producer, self.bus.keyring, self.bus.topics.proposals, records),
            what="proposals send",
            service=SERVICE,
            peer="bus",
        )


def binding(pod: str, node: str, resources: dict[str, int], devices: tuple[int, ...]) -> dict:
    """One binding of a proposal; ``devices`` only when GPU devices were chosen."""
    b: dict[str, Any] = {"pod": pod, "node": node, "resources": resources}
    if devices:
        b["devices"] = list(devices)
    return b
