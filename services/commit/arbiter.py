"""Arbitration of proposals: validate a batch on the authoritative fold, append its
decisions fenced on the decisions stream and the log head, fold them, count them."""

from __future__ import annotations

import functools
import logging
from datetime import UTC, datetime
from typing import Any

import orjson

from esched.core import ClusterState
from esched.schemas.events import (
    DECISIONS_STREAM,
    JOB,
    JOB_SUBMITTED,
    JOB_TIMER,
    JOB_UPDATED,
    PLACEMENT_COMMITTED,
    POD,
    POD_SUBMITTED,
    POD_THROTTLED,
    POD_UNSCHEDULABLE,
    PODGROUP,
    PODGROUP_SUBMITTED,
    stream_key,
    stream_name,
    timestamp,
)
from esched.services import metrics
from esched.services.commit.config import SERVICE, NotLeader
from esched.services.commit.decisions import decision_event, eviction_events
from esched.services.commit.leader import _Leadership
from esched.services.faults import retry_transient
from esched.services.store.base import ConflictError, HeadConflictError, NewEvent

log = logging.getLogger(__name__)


class _Arbiter(_Leadership):
    """Decide a batch of proposals: validate, append (fenced), fold, count."""

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
                checked = attempt <= self.config.head_attempts
                if not checked:
                    metrics.COMMIT_HEAD_CONFLICTS.labels("unchecked").inc()
                    log.warning(
                        "the log head moved under %d attempts in a row; appending "
                        "%d decisions without the head check",
                        self.config.head_attempts,
                        len(fresh),
                        extra={"attempts": self.config.head_attempts},
                    )
                try:
                    positions = await self._append(fresh, before if checked else None)
                except HeadConflictError as exc:
                    moved = await self._catch_up(live=True)
                    if self._foreign:
                        await self._foreign_writer()
                    revalidate = not verdicts_hold(moved, fresh, self.state)
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
                self._fold_own(fresh, start, expected + 1)
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

    def _fold_own(self, fresh: list[dict[str, Any]], start: int, version: int) -> None:
        """Fold this instance's decisions ``fresh`` from memory with their books, at log
        positions ``start``.. and decisions-stream versions ``version``.. (ids in
        :attr:`_expected`, else they count as a foreign writer's)."""
        assert self.state is not None
        stamp = datetime.now(UTC).timestamp()
        for i, env in enumerate(fresh):
            self.state.apply(env, start + i)
            self._decision_books(
                start + i, env["id"], env["type"], version + i, env["data"], stamp, True
            )

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


#: Events that change no verdict of a batch they interleave with (unless they name one
#: of its pods): a new pod is only more pending work, a report or a throttle (the
#: dispatcher's, for an overloaded node's agent) changes nothing in the fold, nor do
#: the Job lifecycle's records (the job controller's; the cluster fold only counts
#: them). A PodGroup qualifies too unless it is the gang of one of the batch's pods
#: (:func:`verdicts_hold`), and so does a Volcano Job, which implies its PodGroup
#: (the gang of the Job's key).
NEUTRAL = frozenset(
    {
        POD_SUBMITTED,
        POD_UNSCHEDULABLE,
        POD_THROTTLED,
        JOB_SUBMITTED,
        JOB_UPDATED,
        JOB_TIMER,
        PODGROUP_SUBMITTED,
    }
)


def verdicts_hold(
    moved: list[tuple[str, str]], fresh: list[dict[str, Any]], state: ClusterState
) -> bool:
    """Whether the decisions ``fresh`` stay exactly what validation said after the
    events ``moved`` got into the log first (``state``: the fold that has them), so
    they may be appended after them without validating again. Only pod submissions,
    unschedulable reports, throttles and PodGroups of other pods and gangs and the Job
    lifecycle's records qualify (ingest and the job controller appending new work is
    the usual case under load), and only for batches without victims: preemption and
    reclaim legality depend on queue demand, which a new pod changes. A PodGroup sets
    its gang's ``minMember``, ``minTaskMember``, queue and priority class, which only
    the gang's own members' verdicts read; a queue it names first is created empty
    (nothing bound there, no capability). A Volcano Job may imply its PodGroup and
    first pods: it counts as the PodGroup of the gang its key names, and its pods,
    new pending work, are that gang's members (a batch binding one of them does not
    hold).
    """
    if not moved or any(t not in NEUTRAL for t, _stream in moved):
        return False
    checked = {stream for _t, stream in moved}
    groups = False
    gangs: set[str] = set()  # the gangs whose PodGroup moved: a PodGroup's, a Job's
    for t, stream in moved:
        if t == PODGROUP_SUBMITTED:
            if stream_key(stream, PODGROUP) is None:
                return False  # its gang is named by its stream only
            groups = True
        elif t == JOB_SUBMITTED:
            key = stream_key(stream, JOB)
            if key is None:
                return False  # its gang is named by its stream only
            groups = True
            gangs.add(key)
    if groups:  # any moved stream naming a PodGroup names its gang
        prefix = stream_name(PODGROUP, "")
        gangs.update(s[len(prefix) :] for s in checked if s.startswith(prefix))
    pods: set[str] = set()
    for env in fresh:
        data = env["data"]
        if data.get("victims") or data.get("reclaim"):
            return False
        gang = data.get("gang")
        if gangs and isinstance(gang, str) and gang in gangs:
            return False  # the gang it names
        for b in data["bindings"]:
            if stream_name(POD, b["pod"]) in checked:
                return False
            pods.add(b["pod"])
    # A pod's gang moved: looked up from each moved gang's members, not each pod's
    # gang (three lookups and a stream name per pod cost a one-pod Job's decision
    # more than the check of the Job's own stream).
    return not any(p in pods for key in gangs for p in state.gang_members(key))
