"""The commit service's fold of the log and its books: the fence version, decided
proposals, foreign writers, submit → commit times."""

from __future__ import annotations

import functools
import logging
from typing import Any

import orjson

from esched.core import PHASE_PENDING
from esched.schemas.events import (
    DECISIONS_STREAM,
    JOB_SUBMITTED,
    PLACEMENT_COMMITTED,
    POD_SUBMITTED,
)
from esched.services import metrics
from esched.services.commit.base import _CommitBase
from esched.services.commit.config import SERVICE
from esched.services.faults import retry_transient
from esched.services.store.base import StoredEvent
from esched.services.store.rows import KEYED, row_fact
from esched.services.store.snapshots import payload_pairs

log = logging.getLogger(__name__)


#: Rows per log read while catching up.
_PAGE = 10_000


class _Books(_CommitBase):
    """Folding the log into the authoritative state, and the books kept on the way."""

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
            elif etype == JOB_SUBMITTED:
                # Its first submission implies its first pods (the gang of its key, in
                # the fold): submitted at the Job's time. Those booked already (a Job
                # published again) keep theirs.
                fact = row_fact(r)
                if fact is None:
                    continue
                at = (r.time or r.recorded_at).timestamp()
                for pod in self.state.gang_members(fact[2], "Pending"):
                    submitted.setdefault(pod, at)

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
