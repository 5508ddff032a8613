"""Placing work: one scheduling pass per batch, proposals sent and their decisions
awaited, rejected ones retried with backoff."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

import orjson

from esched.core.reasons import canonical_code
from esched.core.schedule import Target
from esched.schemas.events import (
    PLACEMENT_COMMITTED,
    proposal_envelope,
    proposal_key,
    timestamp,
)
from esched.services import metrics
from esched.services.bus.signing import send_signed
from esched.services.faults import retry_transient
from esched.services.replica._records import proposal_records
from esched.services.replica.config import SERVICE
from esched.services.replica.proposals import Proposed, binding, proposal_data, proposal_parts
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
            began = self.totals.clock()
            self._resync()
            began = self.totals.add_cpu("renew", began)
            # Undecided claims of other batches this pass's view assumes.
            foreign = [(b, pid) for pid in self._inflight if (b := self._waiting.get(pid))]
            candidates: dict[str, tuple[Target, dict[str, int], str]] = {}
            blocked: list[tuple[Target, list[asyncio.Future]]] = []
            judged_at = int(self.state.position)  # the state this pass's verdicts see
            t0 = time.perf_counter()
            proposed = self._plan(targets, candidates, blocked)
            t1 = time.perf_counter()
            self.totals.add_cpu("plan", began)
            retry: list[Target] = []
            if proposed is not None:
                retry = await self._decided(proposed, planned)
            elif planned is not None:
                planned.set()
            log.debug(
                "replica %s: planned %d in %.1f ms, decided in %.1f ms",
                self.id,
                0 if proposed is None else len(proposed.pids),
                (t1 - t0) * 1e3,
                (time.perf_counter() - t1) * 1e3,
            )
            doubt = bool(retry)
            if candidates and not doubt and foreign:
                await asyncio.wait(
                    {b.all_decided for b, _pid in foreign}, timeout=self.config.decision_timeout
                )
                doubt = not all(b.committed(pid) for b, pid in foreign)
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
        self, proposed: Proposed, planned: asyncio.Event | None = None
    ) -> list[Target]:
        """Propose, wait for the decisions, count them; the targets of rejected ones."""
        decisions = await self._propose(proposed, planned)
        began = self.totals.clock()
        retry: list[Target] = []
        committed = placed = 0
        for pid, pl in zip(proposed.pids, proposed.placements, strict=True):
            env = decisions[pid]
            if env["type"] == PLACEMENT_COMMITTED:
                committed += 1
                placed += len(pl.bindings)
            else:
                # A decision of an older commit service may spell it the old way.
                reason = canonical_code(str(env["data"].get("reason")))
                self.totals.conflicts += 1
                self.totals.reasons[reason] = self.totals.reasons.get(reason, 0) + 1
                metrics.REPLICA_PROPOSALS.labels(self.id, "rejected").inc()
                metrics.REPLICA_CONFLICTS.labels(self.id, reason).inc()
                retry.append(pl.target)
        # Counted once per pass: labelled metric lookups per pod are measurable here.
        self.totals.committed += committed
        self.totals.placed_pods += placed
        metrics.REPLICA_PROPOSALS.labels(self.id, "committed").inc(committed)
        metrics.REPLICA_PLACED_PODS.labels(self.id).inc(placed)
        self.totals.add_cpu("decided", began)
        return retry

    def _requests_of(self, cid: int) -> dict[str, int]:
        memo = self._requests = self._requests.on(self.state)
        req: dict[str, int] | None = memo.get(cid)
        if req is None:
            req = dict(self.state.class_specs[cid]["requests"])
            memo.put(cid, req)
        return req

    def _plan(
        self,
        targets: list[Target],
        unschedulable: dict[str, tuple[Target, dict[str, int], str]],
        blocked: list[tuple[Target, list[asyncio.Future]]] | None = None,
    ) -> Proposed | None:
        """The proposals of ``targets`` (None: none) by one scheduling pass on the
        current view (pods assumed as placed); pods no node fits go to
        ``unschedulable`` (pod -> target, reasons, message).

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
        unschedulable.update(result.unschedulable)
        self.totals.skipped += result.skipped
        self.totals.gangs_waiting += result.gangs_waiting
        for t, busy in result.blocked:
            futures = list({b.all_decided for pid in busy if (b := self._waiting.get(pid))})
            if blocked is not None and futures:
                blocked.append((t, futures))
            else:
                self.totals.skipped += 1
        self._to_reserve.extend(result.reservations)
        placements = result.placements
        if not placements:
            return None
        for pl in placements:
            if pl.victims:
                self.totals.preemptions += 1
                self.totals.victims += len(pl.victims)
        # Ids: the instance's prefix and a counter (see _ReplicaBase._pid_prefix).
        prefix = self._pid_prefix
        seq = self._pid_seq
        pids = [f"{prefix}{next(seq):x}" for _ in placements]
        return Proposed(pids, placements, int(self.state.position))

    def _data(self, proposed: Proposed, i: int) -> dict[str, Any]:
        """The ``esched.placement.proposed`` data of the batch's ``i``-th proposal."""
        pl = proposed.placements[i]
        class_of = self.state.pod_class_id
        bindings = [
            binding(pod, node, self._requests_of(class_of(pod)), devices)
            for pod, node, devices in pl.bindings
        ]
        return proposal_data(
            proposed.pids[i], self.id, proposed.position, pl.gang, bindings, pl.victims
        )

    def _records(self, proposed: Proposed, which: Sequence[int]) -> list[tuple[bytes, bytes]]:
        """The ``(key, value)`` records of the batch's proposals ``which``: a one-pod
        proposal (a one-pod gang's too) joined from the template's pieces, any other
        from its envelope."""
        source = self.config.source_prefix + self.id
        now = timestamp()
        specs = self.state.class_specs
        # (filled by proposal_records: valid for the state's classes through this call)
        self._resources_json = self._resources_json.on(self.state)
        resources_json = self._resources_json.values()

        def other(i: int) -> tuple[bytes, bytes]:
            data = self._data(proposed, i)
            envelope = proposal_envelope(data, source, time=now)
            return proposal_key(data).encode(), orjson.dumps(envelope)

        return proposal_records(
            proposal_parts(self.id, source, proposed.position, now),
            lambda: proposal_parts(self.id, source, proposed.position, now, gang=True),
            proposed.pids,
            proposed.placements,
            which,
            self.state.pod_class_id,
            resources_json,
            self._node_json,
            self._pid_prefix_plain,
            lambda cid: orjson.dumps(specs[cid]["requests"]),  # as _requests_of's copy
            other,
        )

    async def _propose(
        self, proposed: Proposed, planned: asyncio.Event | None = None
    ) -> dict[str, dict[str, Any]]:
        """Claim and send proposals and wait until their decisions are in this
        replica's fold (proposal id -> decision). ``planned`` is set once the claims
        are recorded (before the first await: the view and the claims never
        disagree)."""
        began = self.totals.clock()
        if not self.totals.first_proposal_at:
            self.totals.first_proposal_at = time.perf_counter()
        pids = proposed.pids
        self._waiting.update(dict.fromkeys(pids, proposed))
        self._claim(proposed)
        if planned is not None:
            planned.set()
        self.totals.proposals += len(pids)
        self.totals.add_cpu("claim", began)
        try:
            pending: Sequence[int] = range(len(pids))
            while True:
                await self._send(proposed, pending)
                await asyncio.wait((proposed.all_decided,), timeout=self.config.decision_timeout)
                if proposed.all_decided.done():
                    break
                pending = [i for i, pid in enumerate(pids) if pid not in proposed.decisions]
                if self._stopping.is_set():
                    raise asyncio.CancelledError
                log.warning(
                    "replica %s: %d proposal(s) undecided after %.0fs; re-sending",
                    self.id,
                    len(pending),
                    self.config.decision_timeout,
                )
            self.totals.last_decision_at = time.perf_counter()
            return proposed.decisions
        finally:
            waiting = self._waiting
            for pid in pids:
                waiting.pop(pid, None)

    async def _send(self, proposed: Proposed, which: Sequence[int]) -> None:
        if self._submit is not None:
            await self._submit([self._data(proposed, i) for i in which])
            return
        assert self._producer is not None
        began = self.totals.clock()
        records = self._records(proposed, which)
        self.totals.add_cpu("records", began)
        producer = self._producer
        await retry_transient(
            lambda: send_signed(producer, self.bus.keyring, self.bus.topics.proposals, records),
            what="proposals send",
            service=SERVICE,
            peer="bus",
        )
