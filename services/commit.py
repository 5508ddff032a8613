"""The commit service: the single writer of placement decisions (Omega's shared state).

Replicas place pods on their own fold of the log and send *proposals*
(``esched.placement.proposed``: one pod or one whole gang, the log position
they saw and the resources they claim per node). The commit service holds the
authoritative state (the fold of the log, its own decisions included) and
decides each proposal:

* **fine-grained validation**, binding by binding: the pod exists and is still
  Pending and is not bound twice; the node exists and is alive; the claimed
  resources are the pod's requests; and it still fits, resource by resource and
  constraint by constraint, counting the earlier accepted bindings of the same
  batch. A node that changed since the replica's ``position`` is fine as long as
  the pod still fits: no coarse per-node version check (Omega measured 2-3x more
  conflicts with one).
* **gangs all-or-nothing**: every binding fits (on a scratch overlay) and the
  gang's running members plus the proposed ones reach ``minMember``, else the
  whole proposal is rejected with one reason.

Decisions (``esched.placement.committed`` / ``.rejected`` with a reason code) are
appended to the store in batches, id ``decision-<proposal>`` so a redelivered
proposal is answered with the decision already recorded; then published on the
decisions topic; only then are the proposals' offsets committed.

**One leader.** A :mod:`~esched.services.lease` keeps a single instance active;
standbys wait on it and, on takeover, rebuild the state from the newest snapshot
plus the tail of the log. Every batch is appended with ``expected_version`` on
the ``decisions`` stream (the version this instance folded), so if another
instance wrote decisions meanwhile the store refuses the batch
(:class:`~esched.services.store.ConflictError`) and this instance steps down.

**Valid at its own position.** The ``expected_version`` fence orders decisions
against decisions only, so each batch is also appended with ``expected_head``:
the log position it was validated at. If an external event (node removed or
shrunk, pod deleted, appended by ingest) got in between the catch-up and the
append, the store refuses the batch
(:class:`~esched.services.store.HeadConflictError`, nothing stored); this service
folds the new events and validates the batch's proposals again, so every
decision is valid at its own position. After ``_HEAD_ATTEMPTS`` refusals in a
row (a log that never stops moving) it appends once without the head check,
logging a warning and counting ``esched_commit_head_conflicts_total{outcome=
"unchecked"}``; an event interleaved then is tolerated by the fold (the binding
is ignored and counted as an anomaly), logged here, and reported by ``esched audit``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from esched.core import PHASE_PENDING, ClusterState
from esched.core.bands import BandConfig
from esched.core.validation import PREEMPTED, RECLAIMED, Validator, Verdict
from esched.schemas.events import (
    DECISIONS_STREAM,
    PLACEMENT_COMMITTED,
    PLACEMENT_PROPOSED,
    PLACEMENT_REJECTED,
    POD,
    POD_EVICTED,
    POD_SUBMITTED,
    POD_UNSCHEDULABLE,
    envelope,
    proposal_envelope,
    proposal_key,
    stream_name,
    timestamp,
)
from esched.schemas.validator import MAX_EVENT_BYTES, InvalidEvent, parse_event, validate_event
from esched.services import metrics
from esched.services.bus import Bus, BusConsumer, BusError, BusProducer, Message
from esched.services.bus.deadletter import Dead, send_deadletters
from esched.services.faults import count_retry, is_transient, poll_or_pause, retry_transient
from esched.services.lease import Lease, LocalLease
from esched.services.retry import retry_until
from esched.services.store.base import (
    ConflictError,
    EventStore,
    HeadConflictError,
    NewEvent,
    StoredEvent,
    StoreError,
)
from esched.services.store.rows import KEYED, row_fact
from esched.services.store.snapshots import (
    SNAPSHOT_NAME,
    freeze_heap,
    payload_pairs,
    store_snapshot,
    thaw_heap,
)

__all__ = [
    "FENCE_SNAPSHOT",
    "CommitConfig",
    "CommitService",
    "CommitTotals",
    "NotLeader",
    "decision_event",
    "decision_id",
    "eviction_events",
]

log = logging.getLogger(__name__)

SERVICE = "commit"

#: Companion snapshot series: the decisions stream's version at each state snapshot
#: this service saves, so a new leader knows its fence without re-reading the log.
FENCE_SNAPSHOT = "commit-fence"


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


@dataclass(frozen=True, slots=True)
class CommitConfig:
    """Tuning of the commit service."""

    group: str = "esched-commit"
    #: Proposals per decision batch (one store transaction, one fence check).
    batch_size: int = 1000
    #: Short, so a lost lease is noticed between polls within ~0.1 s.
    poll_timeout_ms: int = 100
    #: Save a snapshot after this many events folded since the last one (0: never).
    snapshot_every: int = 50_000
    source: str = "esched/commit"
    max_proposal_bytes: int = MAX_EVENT_BYTES
    #: After stepping down, wait this long before contending for the lease again, so a
    #: standby (retrying every 0.5 s) takes over rather than the instance that just failed.
    stepdown_backoff: float = 2.0
    #: How long :meth:`CommitService.stop` waits for an in-flight batch.
    stop_timeout: float = 10.0
    #: Proposal ids remembered (with the position of their decision) for idempotency
    #: without a store round trip; older redeliveries fall back to the store's own.
    remember: int = 200_000
    #: Priority bands for preemption legality (None: the documented defaults).
    bands: BandConfig | None = None


@dataclass(slots=True)
class CommitTotals:
    """What the service did so far."""

    proposals: int = 0
    committed: int = 0
    rejected: int = 0
    duplicates: int = 0
    deadlettered: int = 0
    takeovers: int = 0
    stepdowns: int = 0
    #: Pods evicted by committed preemptions.
    evicted: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "proposals": self.proposals,
            "committed": self.committed,
            "rejected": self.rejected,
            "duplicates": self.duplicates,
            "deadlettered": self.deadlettered,
            "takeovers": self.takeovers,
            "stepdowns": self.stepdowns,
            "evicted": self.evicted,
            "reasons": dict(sorted(self.reasons.items())),
        }


class NotLeader(Exception):
    """This instance is not (or no longer) the leader; nothing was decided."""


#: Rows per log read while catching up.
_PAGE = 10_000
#: Head-conditional appends of one batch before it is appended without the head check.
_HEAD_ATTEMPTS = 20


class CommitService:
    """The commit service facade: :meth:`start`, :meth:`run`, :meth:`decide`, :meth:`stop`.

    :param store: the event store (connected, migrated).
    :param bus: the bus for proposals in and decisions out; None in the embedded mode,
        where replicas call :meth:`decide` directly.
    :param lease: the leader lease (:func:`esched.services.lease.open_lease`); default a
        :class:`LocalLease` (one process only; the fence still guards the log).
    """

    def __init__(
        self,
        store: EventStore,
        bus: Bus | None = None,
        *,
        lease: Lease | None = None,
        config: CommitConfig | None = None,
    ) -> None:
        self.store = store
        self.bus = bus
        self.lease = lease or LocalLease("commit")
        self.config = config or CommitConfig()
        self.totals = CommitTotals()
        self.state: ClusterState | None = None
        self._validator: Validator | None = None
        #: Version of the decisions stream as of :attr:`state` (the fence).
        self.decisions_version = 0
        self._leading = False
        self._stopping = asyncio.Event()
        self._lock = asyncio.Lock()  # one decision batch at a time
        #: held while a polled batch is decided and handed to _finish (see stop)
        self._handling = asyncio.Lock()
        self._lead_lock = asyncio.Lock()  # one takeover at a time
        self._producer: BusProducer | None = None
        self._consumer: BusConsumer | None = None
        self._decided: OrderedDict[str, int] = OrderedDict()  # proposal -> decision position
        self._submitted: dict[str, float] = {}  # pending pod -> submit time (epoch s)
        self._expected: set[str] = set()  # decision ids of the batch being appended
        self._foreign: list[int] = []  # positions of decisions some other writer made
        self._snapshot_at = 0
        #: The last decided batch being published (see _handle)
        self._outgoing: asyncio.Task | None = None
        #: The snapshot being written (see _snapshot)
        self._snapshotting: asyncio.Task | None = None
        #: id(envelope) -> (envelope, its JSON) of the last appended batch, for _publish
        self._payloads: dict[int, tuple[dict[str, Any], bytes]] = {}

    # ------------------------------------------------------------------ lifecycle

    @property
    def leading(self) -> bool:
        """Whether this instance is the active leader with a built state."""
        return self._leading and not self.lease.lost.is_set()

    async def start(self) -> None:
        """Connect to the bus (if any), retrying while it is unreachable. Does not wait
        for the lease: :meth:`run` and :meth:`decide` do."""
        if self.bus is None:
            return
        await retry_until(
            self._ensure_topics,
            retriable=is_transient,
            what="create topics",
            on_retry=count_retry(SERVICE, "bus"),
        )
        self._producer = self.bus.producer()
        await retry_until(
            self._producer.start,
            retriable=is_transient,
            what="producer start",
            on_retry=count_retry(SERVICE, "bus"),
        )

    async def stop(self) -> None:
        """Stop deciding, leave the group, give the lease up, disconnect; idempotent."""
        self._stopping.set()
        # Let an in-flight batch finish first (a polled one until its publishing is
        # under way, a decide() call), but not forever: a batch waiting out a database
        # outage must not keep a SIGTERM from ending the process.
        held: list[asyncio.Lock] = []
        try:
            async with asyncio.timeout(self.config.stop_timeout):
                for lock in (self._handling, self._lock):
                    await lock.acquire()
                    held.append(lock)
        except TimeoutError:
            log.warning("stopping with a decision batch still in flight")
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.stop_timeout):
                    await self._drain_snapshot()
            await self._stop_consumer()
            if self._leading:
                self._leading = False
                metrics.COMMIT_LEADER.set(0)
                thaw_heap()
            await self.lease.release()
        finally:
            for lock in reversed(held):
                lock.release()
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await producer.stop()

    async def run(self, *, exit_when_idle: bool = False, idle_polls: int = 3) -> CommitTotals:
        """Lead, decide proposals from the bus, step down on a lost lease or a fence
        conflict and stand by again, until :meth:`stop` (or idle, with
        ``exit_when_idle``: ``idle_polls`` empty polls and no lag)."""
        if self.bus is None:
            raise RuntimeError("run() needs a bus; in the embedded mode call decide()")
        while not self._stopping.is_set():
            if not await self._become_leader():
                break
            try:
                if await self._serve(exit_when_idle, idle_polls):
                    break
            except NotLeader as exc:
                log.warning("stepped down: %s; standing by", exc)
                await self._stop_consumer()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self.config.stepdown_backoff)
            finally:
                await self._stop_consumer()
        return self.totals

    async def _ensure_topics(self) -> None:
        assert self.bus is not None
        await self.bus.ensure_topics()

    async def _stop_consumer(self) -> None:
        try:
            await self._drain_outgoing()  # its offsets are committed with this consumer
        except BusError as exc:
            log.warning(
                "publishing the last batch failed (%s); its proposals will be redelivered", exc
            )
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            with contextlib.suppress(BusError):
                await consumer.stop()

    # ------------------------------------------------------------------ leadership

    async def _become_leader(self) -> bool:
        """Wait for the lease (or :meth:`stop`), then rebuild the state; False if stopping."""
        if self.leading:
            return True
        if not await self.lease.wait_unless(self._stopping):
            await self.lease.release()
            return False
        started = time.perf_counter()
        await self._rebuild()
        freeze_heap()
        self._leading = True
        self.totals.takeovers += 1
        metrics.COMMIT_LEADER.set(1)
        assert self.state is not None
        log.info(
            "commit service leading from position %d (decisions version %d), rebuilt in %.2fs",
            self.state.position,
            self.decisions_version,
            time.perf_counter() - started,
            extra={"position": self.state.position, "decisions_version": self.decisions_version},
        )
        return True

    async def _step_down(self, cause: str, why: str) -> None:
        """Stop deciding, drop the state and the lease (another instance may lead)."""
        if self._leading:
            log.error("commit service stepping down: %s", why, extra={"cause": cause})
            self.totals.stepdowns += 1
            metrics.COMMIT_STEPDOWNS.labels(cause).inc()
        self._leading = False
        metrics.COMMIT_LEADER.set(0)
        self.state = None
        self._validator = None
        thaw_heap()
        await self.lease.release()

    async def _rebuild(self) -> None:
        """State = newest snapshot (with its fence companion) + the tail of the log."""
        state = ClusterState()
        version = 0
        # Start from this service's newest fence and the state snapshot at the same
        # position. A state snapshot without a fence (e.g. `esched replay
        # --save-snapshot`) cannot be used: the fence version would be a guess.
        fence = await retry_transient(
            functools.partial(self.store.load_snapshot, FENCE_SNAPSHOT),
            what="load the fence",
            service=SERVICE,
            peer="store",
        )
        if fence is not None:
            snap = await retry_transient(
                functools.partial(self.store.load_snapshot, SNAPSHOT_NAME, fence[0]),
                what="load the snapshot",
                service=SERVICE,
                peer="store",
            )
            if snap is not None and snap[0] == fence[0]:
                state = ClusterState.from_bytes(snap[1])
                version = int(orjson.loads(fence[1])["decisions_version"])
                log.info("restored snapshot at position %d", snap[0])
            else:
                log.info("no state snapshot at fence position %d; folding the whole log", fence[0])
        self.state = state
        self.decisions_version = version
        self._validator = Validator(state, self.config.bands)
        self._decided.clear()
        self._submitted.clear()
        self._snapshot_at = state.position
        await self._catch_up(live=False)

    # ------------------------------------------------------------------ the fold

    async def _catch_up(self, *, live: bool) -> list[tuple[str, str]]:
        """Fold every event after :attr:`state`'s position up to the head; returns the
        ``(type, stream)`` of each event folded."""
        assert self.state is not None
        folded: list[tuple[str, str]] = []
        while True:
            after = self.state.position
            rows = await retry_transient(
                functools.partial(self.store.read, after, _PAGE),
                what="read the log",
                service=SERVICE,
                peer="store",
            )
            self._fold_rows(rows, live)
            folded.extend((r.type, r.stream) for r in rows)
            if len(rows) < _PAGE:
                break
        metrics.COMMIT_PENDING_PODS.set(self.state.phase_count(PHASE_PENDING))
        return folded

    def _fold_rows(self, rows: list[StoredEvent], live: bool) -> None:
        """Fold stored events from their bytes (the fold's bytes path) and keep the
        books; decoded are only decisions (proposal ids, bindings) and pod events whose
        stream does not name their pod (``pod/<namespace>/<name>``)."""
        assert self.state is not None
        self.state.apply_payloads(payload_pairs(rows))
        submitted = self._submitted
        for r in rows:
            etype, stream = r.type, r.stream
            if stream == DECISIONS_STREAM:
                data = orjson.loads(r.payload).get("data")
                self._decision_books(
                    r.position,
                    r.id,
                    etype,
                    r.stream_version,
                    data if isinstance(data, dict) else {},
                    r.recorded_at.timestamp(),
                    live,
                )
            elif etype in KEYED:  # submit times booked; ended before a commit: dropped
                fact = row_fact(r)
                if fact is None:
                    continue
                key = fact[2]
                if etype == POD_SUBMITTED:
                    submitted[key] = (r.time or r.recorded_at).timestamp()
                else:
                    submitted.pop(key, None)

    def _decision_books(
        self,
        position: int,
        id_: str,
        type_: str,
        stream_version: int,
        data: dict[str, Any],
        recorded_at: float,
        live: bool,
    ) -> None:
        """The service's books on one event of the decisions stream: the fence version,
        foreign writers, decided proposals, submit → commit times."""
        self.decisions_version = stream_version
        if live and id_ not in self._expected:
            self._foreign.append(position)
        proposal = data.get("proposal")
        if isinstance(proposal, str):
            self._remember(proposal, position)
        if type_ == PLACEMENT_COMMITTED:
            for b in data.get("bindings") or ():
                t0 = self._submitted.pop(b.get("pod"), None)
                if live and t0 is not None:
                    metrics.SUBMIT_TO_COMMIT_SECONDS.observe(max(0.0, recorded_at - t0))

    def _remember(self, proposal: str, position: int) -> None:
        self._decided[proposal] = position
        self._decided.move_to_end(proposal)
        while len(self._decided) > self.config.remember:
            self._decided.popitem(last=False)

    # ------------------------------------------------------------------ deciding

    async def decide(self, proposals: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Decide proposals directly (the embedded mode); one decision envelope each,
        in order. Each item is a ``esched.placement.proposed`` envelope or just its
        ``data``. Waits for the lease if this instance is not leading.

        Raises :class:`~esched.schemas.validator.InvalidEvent` for a proposal that is
        not a valid proposal, and :class:`NotLeader` if leadership is lost (nothing
        of this call was decided, or the decisions were recorded by a fenced append
        only if the store accepted them; redeliver to the new leader, it is idempotent).
        """
        items = [_proposal_data(p) for p in proposals]
        if not self.leading:
            # One caller takes the lease and rebuilds the state; concurrent first calls
            # wait here and find it leading (a second rebuild would refold the log).
            async with self._lead_lock:
                if not await self._become_leader():
                    raise NotLeader("the service is stopping")
        decisions = await self._decide_batch(items)
        await self._publish(decisions, self._appended_payloads())
        return decisions

    async def _decide_batch(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Validate, append (fenced), fold; returns the recorded decision per item."""
        async with self._lock:
            if not self.leading:
                await self._step_down("lease_lost", "lease lost before deciding")
                raise NotLeader("lease lost")
            assert self.state is not None
            attempt = 0
            revalidate = True
            while True:
                # Validate against the fold up to ``before`` and append only if the log
                # is still there: an event that got in first means validating again,
                # unless every such event leaves the verdicts as they are.
                attempt += 1
                if revalidate:
                    await self._catch_up(live=True)
                    if self._foreign:
                        await self._foreign_writer()
                    out, fresh = self._validate(items)
                positions: dict[str, int] = {}
                before = self.state.position
                if not fresh:
                    break
                checked = attempt <= _HEAD_ATTEMPTS
                if not checked:
                    metrics.COMMIT_HEAD_CONFLICTS.labels("unchecked").inc()
                    log.warning(
                        "the log head moved under %d attempts in a row; appending "
                        "%d decisions without the head check",
                        _HEAD_ATTEMPTS,
                        len(fresh),
                        extra={"attempts": _HEAD_ATTEMPTS},
                    )
                try:
                    positions = await self._append(fresh, before if checked else None)
                except HeadConflictError as exc:
                    moved = await self._catch_up(live=True)
                    if self._foreign:
                        await self._foreign_writer()
                    revalidate = not _verdicts_hold(moved, fresh)
                    if revalidate:
                        metrics.COMMIT_HEAD_CONFLICTS.labels("revalidated").inc()
                        log.info(
                            "log head moved to %d before appending at %d; validating again",
                            exc.actual,
                            exc.expected,
                        )
                    else:
                        metrics.COMMIT_HEAD_CONFLICTS.labels("unaffected").inc()
                    continue
                break
            decisions = await self._resolve(out, fresh, positions, before)
            if (
                self.config.snapshot_every
                and self.state.position - self._snapshot_at >= self.config.snapshot_every
            ):
                self._snapshot()
            return decisions

    def _validate(
        self, items: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any] | int], list[dict[str, Any]]]:
        """Decide ``items`` on the current fold: (placeholders for :meth:`_resolve`,
        the fresh decision envelopes to append)."""
        assert self._validator is not None
        validator = self._validator
        validator.begin()
        out: list[dict[str, Any] | int] = []  # envelope, or position of a known decision
        fresh: list[dict[str, Any]] = []
        in_batch: dict[str, int] = {}
        now = timestamp()
        for data in items:
            pid = data["proposal"]
            known = self._decided.get(pid)
            if known is not None:
                out.append(known)
                continue
            if pid in in_batch:
                out.append(-1 - in_batch[pid])  # same proposal twice in one batch
                continue
            verdict = validator.check(data)
            env = decision_event(data, verdict, self.config.source, now)
            if verdict.ok:
                # Victims first: the fold frees their room, then binds the preemptor.
                fresh.extend(eviction_events(data, self.config.source, now))
            in_batch[pid] = len(fresh)
            fresh.append(env)
            out.append(env)
        return out, fresh

    async def _append(
        self, fresh: list[dict[str, Any]], expected_head: int | None
    ) -> dict[str, int]:
        """Append one batch fenced on the decisions stream and, unless None, on the log
        head; fold it. Returns id -> position. Raises :class:`HeadConflictError` (nothing
        stored) if the head is not ``expected_head``."""
        assert self.state is not None
        if self.lease.lost.is_set():
            await self._step_down("lease_lost", "lease lost before appending")
            raise NotLeader("lease lost")
        expected = self.decisions_version
        now = datetime.now(UTC)
        events = [
            NewEvent(
                id=env["id"],
                type=env["type"],
                stream=DECISIONS_STREAM,
                payload=orjson.dumps(env),
                time=now,
                # The first event carries the fence; the rest follow it atomically.
                expected_version=expected if i == 0 else None,
            )
            for i, env in enumerate(fresh)
        ]
        # The same bytes go to the decisions topic (see _publish).
        self._payloads = {id(env): (env, ev.payload) for env, ev in zip(fresh, events, strict=True)}
        self._expected = {env["id"] for env in fresh}
        try:
            res = await retry_transient(
                functools.partial(self.store.append, events, expected_head=expected_head),
                what="append decisions",
                service=SERVICE,
                peer="store",
            )
        except HeadConflictError:
            self._expected = set()
            raise
        except ConflictError as exc:
            metrics.COMMIT_CONFLICTS.labels("fenced").inc()
            await self._step_down(
                "fenced",
                f"decisions stream is at {exc.actual}, this instance expected "
                f"{exc.expected}: another commit service wrote decisions",
            )
            raise NotLeader(str(exc)) from exc
        anomalies = dict(self.state.anomalies)
        try:
            # Our own decisions, applied at once. After a head-checked append that
            # stored every event, they are exactly positions head+1.. of the log, in
            # this order: fold them from memory instead of reading them back (a read
            # and a decode of every decision). Otherwise read the log from the store.
            start = self.state.position + 1
            if (
                expected_head is not None
                and expected_head == self.state.position
                and res.duplicates == 0
                and res.positions == list(range(start, start + len(fresh)))
            ):
                stamp = datetime.now(UTC).timestamp()
                for i, (env, ev) in enumerate(zip(fresh, events, strict=True)):
                    self.state.apply(env, start + i)
                    self._decision_books(
                        start + i, ev.id, ev.type, expected + 1 + i, env["data"], stamp, True
                    )
            else:
                await self._catch_up(live=True)
        finally:
            self._expected = set()
        stale = {
            k: v - anomalies.get(k, 0)
            for k, v in self.state.anomalies.items()
            if k.startswith("commit_") and v != anomalies.get(k, 0)
        }
        if stale:
            # Only after an unchecked append (see the module docstring): an external
            # event landed between catch-up and append.
            log.warning(
                "external events interleaved with a decision batch: %s",
                stale,
                extra={"anomalies": stale},
            )
        if self._foreign:
            await self._foreign_writer()
        return {env["id"]: pos for env, pos in zip(fresh, res.positions, strict=True)}

    async def _foreign_writer(self) -> None:
        where = self._foreign[:5]
        self._foreign = []
        metrics.COMMIT_CONFLICTS.labels("foreign_writer").inc()
        await self._step_down(
            "foreign_writer", f"decisions at positions {where} were written by another instance"
        )
        raise NotLeader(f"another commit service wrote decisions at {where}")

    async def _resolve(
        self,
        out: list[dict[str, Any] | int],
        fresh: list[dict[str, Any]],
        positions: dict[str, int],
        before: int,
    ) -> list[dict[str, Any]]:
        """Turn placeholders into recorded decisions and count the outcomes.

        ``out`` holds a fresh envelope, the position of a decision remembered from
        the log (>= 0), or ``-1 - i`` for a repeat of ``fresh[i]`` in the same batch.
        A fresh decision whose id the store already had (at or before ``before``: a
        redelivered proposal older than this instance's memory) is answered with the
        stored one, which is what the log says.
        """
        wanted = {p for p in out if isinstance(p, int) and p >= 0}
        wanted |= {pos for pos in positions.values() if pos <= before}
        stored: dict[int, dict[str, Any]] = {}
        for pos in sorted(wanted):
            rows = await retry_transient(
                functools.partial(self.store.read, pos - 1, 1),
                what="read a decided event",
                service=SERVICE,
                peer="store",
            )
            if rows and rows[0].position == pos:
                stored[pos] = orjson.loads(rows[0].payload)
        recorded = [stored.get(positions[env["id"]], env) for env in fresh]
        result: list[dict[str, Any]] = []
        tally = {"duplicate": 0, "committed": 0, "rejected": 0, "pods": 0}
        for item in out:
            if isinstance(item, int) and item >= 0:
                env, kind = stored[item], "duplicate"
            elif isinstance(item, int):
                env, kind = recorded[-1 - item], "duplicate"
            else:
                env = recorded[fresh.index(item)] if positions[item["id"]] <= before else item
                kind = "duplicate" if env is not item else "fresh"
            result.append(env)
            self._count(env, kind, tally)
        # Metrics once per batch: labelled lookups per decision are measurable here.
        for outcome, n in tally.items():
            if n:
                metrics.COMMIT_PROPOSALS.labels(outcome).inc(n)
        if tally["pods"]:
            metrics.COMMITTED_PODS.inc(tally["pods"])
        return result

    def _count(self, env: dict[str, Any], kind: str, tally: dict[str, int]) -> None:
        """Count one decision in the totals and in ``tally`` (the batch's metrics)."""
        t = self.totals
        t.proposals += 1
        if kind == "duplicate":
            t.duplicates += 1
            tally["duplicate"] += 1
            return
        data = env["data"]
        if env["type"] == PLACEMENT_COMMITTED:
            t.committed += 1
            tally["committed"] += 1
            tally["pods"] += len(data["bindings"])
            if data.get("victims"):
                t.evicted += len(data["victims"])
                metrics.COMMIT_EVICTED.inc(len(data["victims"]))
        else:
            t.rejected += 1
            tally["rejected"] += 1
            reason = data["reason"]
            t.reasons[reason] = t.reasons.get(reason, 0) + 1
            metrics.COMMIT_CONFLICTS.labels(reason).inc()
            log.info(
                "rejected %s: %s (%s)",
                data["proposal"],
                reason,
                data["message"],
                extra={"proposal": data["proposal"], "replica": data["replica"], "reason": reason},
            )

    def _snapshot(self) -> None:
        """Snapshot the state and its fence version (same position) for fast takeovers:
        serialized now, written to the store in the background, one at a time (writing
        megabytes held the next decision batch back for the whole round trip)."""
        assert self.state is not None
        if self._snapshotting is not None and not self._snapshotting.done():
            return  # the previous one is still being written; a later batch tries again
        position = self.state.position
        self._snapshot_at = position
        self._snapshotting = asyncio.create_task(
            self._save_snapshot(position, self.state.to_bytes(), self.decisions_version),
            name="commit-snapshot",
        )

    async def _save_snapshot(self, position: int, data: bytes, version: int) -> None:
        try:
            await store_snapshot(self.store, position, data)
            await self.store.save_snapshot(
                FENCE_SNAPSHOT, position, orjson.dumps({"decisions_version": version})
            )
            await self.store.prune_snapshots(FENCE_SNAPSHOT, keep=10)
        except StoreError as exc:
            # Only a faster takeover is lost: the next one folds a longer tail.
            log.warning("snapshot at position %d not saved: %s", position, exc)
            return
        log.info("snapshot saved at position %d", position)

    async def _drain_snapshot(self) -> None:
        """Wait for the snapshot being written, if any."""
        task, self._snapshotting = self._snapshotting, None
        if task is not None:
            await task

    def _appended_payloads(self) -> dict[int, tuple[dict[str, Any], bytes]]:
        """The JSON of the batch just appended, for :meth:`_publish` (taken once)."""
        encoded, self._payloads = self._payloads, {}
        return encoded

    async def _publish(
        self, decisions: list[dict[str, Any]], encoded: dict[int, tuple[dict[str, Any], bytes]]
    ) -> None:
        """Send decisions to the decisions topic (after they are durable in the store);
        ``encoded``: their JSON as appended (:meth:`_appended_payloads`)."""
        if self._producer is None or not decisions or self.bus is None:
            return
        records = []
        for env in decisions:
            # A fresh decision as appended: its stored bytes; a duplicate answered from
            # the log (another object) is encoded here.
            hit = encoded.get(id(env))
            payload = hit[1] if hit is not None and hit[0] is env else orjson.dumps(env)
            records.append((_decision_key(env), payload))
        producer, topic = self._producer, self.bus.topics.decisions
        await retry_until(
            lambda: producer.send_many(topic, records),
            retriable=is_transient,
            what="decisions send",
            on_retry=count_retry(SERVICE, "bus"),
        )

    # ------------------------------------------------------------------ the bus loop

    async def _serve(self, exit_when_idle: bool, idle_polls: int) -> bool:
        """Consume proposals while leading; True when done (stopped or idle)."""
        assert self.bus is not None
        # Exclusive: the lease already makes this the only reader; group membership would
        # make a standby wait out the dead leader's session before reading anything.
        self._consumer = self.bus.consumer(
            [self.bus.topics.proposals], self.config.group, exclusive=True
        )
        await retry_until(
            self._consumer.start,
            retriable=is_transient,
            what="consumer start",
            on_retry=count_retry(SERVICE, "bus"),
        )
        empty = 0
        while not self._stopping.is_set():
            if self.lease.lost.is_set():
                await self._step_down("lease_lost", "lease lost")
                raise NotLeader("lease lost")
            msgs = await self._poll()
            if msgs:
                empty = 0
                async with self._handling:
                    await self._handle(msgs)
                continue
            empty += 1
            if exit_when_idle and empty >= idle_polls and await self._consumer.lag() == 0:
                return True
        return True

    async def _poll(self) -> list[Message]:
        assert self._consumer is not None
        return await poll_or_pause(
            self._consumer,
            self.config.poll_timeout_ms,
            self.config.batch_size,
            service=SERVICE,
            pause=0.5,
        )

    async def _handle(self, msgs: Sequence[Message]) -> None:
        """Decide a polled batch; then, in the background while the next batch is
        decided, publish its decisions, dead-letter its bad proposals and commit its
        offsets (:meth:`_finish`, one batch after the other, in order)."""
        consumer = self._consumer
        assert consumer is not None
        items: list[dict[str, Any]] = []
        dead: list[Dead] = []
        for m in msgs:
            try:
                ev = parse_event(
                    m.value,
                    allowed_types=(PLACEMENT_PROPOSED,),
                    max_bytes=self.config.max_proposal_bytes,
                )
            except InvalidEvent as exc:
                dead.append((m, exc.reason, str(exc), exc.field))
                continue
            items.append(ev["data"])
        # NotLeader: this batch's offsets stay uncommitted (the previous batch finishes).
        decisions = await self._decide_batch(items) if items else []
        encoded = self._appended_payloads()
        offsets: dict[tuple[str, int], int] = {}
        for m in msgs:
            key = (m.topic, m.partition)
            offsets[key] = max(offsets.get(key, 0), m.offset + 1)
        # The previous batch's Kafka round trips (decisions acknowledged, offsets
        # committed) ran while this one was decided; this one's start once they are done.
        await self._drain_outgoing()
        self._outgoing = asyncio.create_task(
            self._finish(consumer, decisions, encoded, dead, offsets), name="commit-publish"
        )

    async def _finish(
        self,
        consumer: BusConsumer,
        decisions: list[dict[str, Any]],
        encoded: dict[int, tuple[dict[str, Any], bytes]],
        dead: list[Dead],
        offsets: dict[tuple[str, int], int],
    ) -> None:
        """Publish a decided batch (durable in the store already), dead-letter its bad
        proposals, then commit its offsets."""
        await self._publish(decisions, encoded)
        if dead:
            await self._deadletter(dead)
        try:
            await consumer.commit(offsets)
        except BusError as exc:
            # Decisions are durable; the next leader re-reads these proposals and the
            # decision ids make them duplicates. Nothing is decided twice.
            log.warning("offset commit failed (%s); proposals will be redelivered", exc)

    async def _drain_outgoing(self) -> None:
        """Wait for the batch being published (its failure is raised here)."""
        task, self._outgoing = self._outgoing, None
        if task is not None:
            await task

    async def _deadletter(self, dead: list[Dead]) -> None:
        assert self._producer is not None and self.bus is not None
        await send_deadletters(self._producer, self.bus.topics.deadletter, dead, service=SERVICE)
        self.totals.deadlettered += len(dead)


#: Events that change no verdict of a batch they interleave with (unless they name one
#: of its pods): a new pod is only more pending work, a report changes nothing.
_NEUTRAL = frozenset({POD_SUBMITTED, POD_UNSCHEDULABLE})


def _verdicts_hold(moved: list[tuple[str, str]], fresh: list[dict[str, Any]]) -> bool:
    """Whether the decisions ``fresh`` stay exactly what validation said after the
    events ``moved`` got into the log first, so they may be appended after them
    without validating again. Only pod submissions and unschedulable reports of
    other pods qualify (ingest appending new work is the usual case under load), and
    only for batches without victims: preemption and reclaim legality depend on
    queue demand, which a new pod changes.
    """
    if not moved or any(t not in _NEUTRAL for t, _stream in moved):
        return False
    pods: set[str] = set()
    for env in fresh:
        data = env["data"]
        if data.get("victims") or data.get("reclaim"):
            return False
        pods.update(stream_name(POD, b["pod"]) for b in data["bindings"])
    return not any(stream in pods for _t, stream in moved)


def _decision_key(env: dict[str, Any]) -> bytes:
    """Partition key of a decision: its gang, else its first pod (per-object order)."""
    return proposal_key(env["data"]).encode()


def _proposal_data(item: dict[str, Any]) -> dict[str, Any]:
    """The ``data`` of a proposal given as an envelope or as bare data, validated."""
    if "specversion" in item and "data" in item:
        env = item
    else:
        env = proposal_envelope(item, f"esched/replica/{item.get('replica')}")
    return validate_event(env, allowed_types=(PLACEMENT_PROPOSED,))["data"]
