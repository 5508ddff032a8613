"""The audit's driver: :class:`Auditor` folds the log event by event through the checks;
:func:`audit_events` and :func:`audit_store` feed it a list or a store."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any

import orjson

from esched.core.admission import OBSERVED, Fact, event_key
from esched.core.bands import BandConfig
from esched.core.jobs import FIRST_TYPES, FOLDED_TYPES
from esched.core.queues import summary_view
from esched.core.quota import Quota
from esched.core.validation import OVERLOADED
from esched.schemas.events import (
    NODE_REMOVED,
    PLACEMENT_COMMITTED,
    PLACEMENT_REJECTED,
    POD_DELETED,
    POD_EVICTED,
    POD_FAILED,
    POD_REJECTED,
    POD_SUBMITTED,
    POD_SUCCEEDED,
)
from esched.services.audit.bindings import _BindingChecks
from esched.services.store.base import EventStore, StoredEvent
from esched.services.store.rows import row_fact
from esched.services.store.snapshots import PAGE, anomaly_report

#: Events after which a pod no longer needs admission's verdict.
_ENDS = frozenset({POD_REJECTED, POD_DELETED, POD_SUCCEEDED, POD_FAILED})
#: Events the audit decodes whole (it checks more of them than admission reads).
_DECODED = frozenset({PLACEMENT_COMMITTED, PLACEMENT_REJECTED, NODE_REMOVED, POD_EVICTED})


class Auditor(_BindingChecks):
    """Feed it the log in order (:meth:`feed`), then read :meth:`report`."""

    def feed(self, position: int, event: dict[str, Any], *, jobs: bool = True) -> None:
        """Check (if a decision) and fold one event (``jobs`` False: the job fold has
        it already)."""
        etype: Any = event.get("type")  # any JSON value; only known types are checked
        raw = event.get("data")
        data: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if jobs and etype in FOLDED_TYPES:
            self._job_event(position, etype, event, data)
        self.checked["events"] += 1
        if etype in (PLACEMENT_COMMITTED, PLACEMENT_REJECTED):
            self._decision(position, etype, event, data)
            return
        if etype == NODE_REMOVED:
            name = (data.get("metadata") or {}).get("name")
            if isinstance(name, str):
                self._removed.add(name)
        elif etype == POD_EVICTED and isinstance(data.get("decision"), str):
            self._eviction(position, data)
        elif etype == POD_EVICTED and data.get("reason") == OVERLOADED:
            self._overload_eviction(position, event, data)
        self.state.apply(event, position)
        if etype == POD_SUBMITTED:
            self._node_name(position, data)
        self._admit((position, etype, event_key(data), data))

    def feed_row(self, row: StoredEvent) -> None:
        """:meth:`feed` of a stored event: decoded only where the audit reads more of
        it than admission's :func:`row_fact` (decisions, node removals, evictions);
        everything else is folded from its bytes."""
        if row.type in FOLDED_TYPES and (self.jobs.jobs or row.type in FIRST_TYPES):
            event = orjson.loads(row.payload)
            raw = event.get("data")
            self._job_event(row.position, row.type, event, raw if isinstance(raw, dict) else {})
            if row.type in _DECODED or row.type == POD_SUBMITTED:
                self.feed(row.position, event, jobs=False)
                return
        elif row.type in _DECODED or (row.type == POD_SUBMITTED and b'"nodeName"' in row.payload):
            self.feed(row.position, orjson.loads(row.payload))
            return
        self.checked["events"] += 1
        self.state.apply_payloads([(row.position, row.payload)])
        if row.type in OBSERVED:
            fact = row_fact(row)
            if fact is not None:
                self._admit(fact)

    def _admit(self, fact: Fact) -> None:
        for r in self.admission.observe(self.state, [fact]):
            self._refused[r.pod] = r.message
        if self._refused and fact[1] in _ENDS:
            self._refused.pop(fact[2], None)  # rejected (or gone) as it should be

    def report(self, *, complete: bool = True) -> dict[str, Any]:
        """``{"ok", "position", "checked", "violations", "by_kind"}``.

        ``complete`` False: the log goes on past what was fed (``--upto``), so
        evictions whose decision is not fed yet are counted in ``checked`` as
        ``evictions_awaiting_decision``, not flagged (the decision is in the same
        append, just beyond the cut).
        """
        if complete:
            for decision, evicted in sorted(self._evictions.items()):
                self._flag(
                    evicted[0][0],
                    "preemption_unrecorded",
                    f"{len(evicted)} pod(s) evicted for {decision}, which is not in the log",
                )
        elif self._evictions:
            self.checked["evictions_awaiting_decision"] = sum(
                len(v) for v in self._evictions.values()
            )
        self._evictions.clear()
        queues = {
            name: {k: q[k] for k in ("path", "state", "fairShare", "allocated", "share")}
            for name, q in summary_view(
                self.state.summary()["queues"], self.state, self.admission.queue_hierarchy
            ).items()
        }
        return {
            "ok": not self.kinds,
            "position": int(self.state.position),
            "checked": dict(self.checked),
            "by_kind": dict(sorted(self.kinds.items())),
            "violations": [asdict(v) for v in self.violations],
            "queues": queues,
            "anomalies": anomaly_report(self.state),
            "jobs": self.jobs.summaries(),
        }


def audit_events(
    events: Iterable[tuple[int, dict[str, Any]]],
    quota: Quota | None = None,
    bands: BandConfig | None = None,
    queue_hierarchy: str = "parent",
) -> dict[str, Any]:
    """Audit ``(position, envelope)`` pairs in log order; returns the report."""
    auditor = Auditor(quota, bands, queue_hierarchy)
    for position, event in events:
        auditor.feed(position, event)
    return auditor.report()


async def audit_store(
    store: EventStore,
    *,
    upto: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    quota: Quota | None = None,
    bands: BandConfig | None = None,
    queue_hierarchy: str = "parent",
) -> dict[str, Any]:
    """Audit the log in ``store`` from position 0 up to ``upto`` (default: the head);
    ``queue_hierarchy`` as the scheduler ran (``esched.core.queues.QUEUE_HIERARCHIES``)."""
    auditor = Auditor(quota, bands, queue_hierarchy)
    head = await store.head()
    target = upto if upto is not None else head
    after = 0
    while after < target:
        rows = await store.read(after, PAGE, target)
        if not rows:
            break
        for row in rows:
            auditor.feed_row(row)
        after = rows[-1].position
        if progress:
            progress(after, target)
    # The hash chain: an edited, deleted or inserted row breaks it at its position.
    chain = await store.verify(upto=None if target >= head else target)
    if not chain.ok and chain.broken_at is not None:
        auditor.flag(chain.broken_at, "chain_broken", chain.reason or "hash chain broken")
    report = auditor.report(complete=target >= head)
    report["position"] = max(report["position"], after)
    report["chain"] = {"ok": chain.ok, "checked": chain.checked, "head_hash": chain.head_hash}
    return report
