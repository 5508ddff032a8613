"""Fold the log into a :class:`~esched.core.ClusterState`, and snapshots of that fold.

The fold itself is the core's (one fold for replay, replicas, commit service,
simulator and audit); this module only feeds it: nearest snapshot at or before
the target position, then the tail of the log in large pages. Every service that
builds a state from the store starts here (a live one then follows the log with
:class:`~esched.services.store.follower.LogFollower`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from esched.core import ClusterState
from esched.core.reservations import ReclamationConfig
from esched.services.store.base import EventStore, StoredEvent

__all__ = [
    "PAGE",
    "SNAPSHOT_NAME",
    "anomaly_report",
    "fold_log",
    "format_anomalies",
    "freeze_heap",
    "payload_pairs",
    "save_snapshot",
    "store_snapshot",
    "thaw_heap",
]

log = logging.getLogger(__name__)

#: Snapshots of the full cluster fold share one name; other folds may use others.
SNAPSHOT_NAME = "cluster-state"
#: Rows per read: big enough that a round trip is amortized over ~10 ms of folding.
PAGE = 20_000
#: Rows folded between two turns of the event loop (~1 ms of folding).
SLICE = 500


async def fold_log(
    store: EventStore,
    *,
    upto: int | None = None,
    at: datetime | None = None,
    use_snapshot: bool = True,
    progress: Callable[[int, int], None] | None = None,
    reclamation: ReclamationConfig | None = None,
) -> ClusterState:
    """The cluster state at position ``upto`` (or at time ``at``; default: the head).

    ``reclamation``: the reservation rule's configuration (the config file's
    ``reclamation:`` section; None: the defaults), set before anything is folded.
    """
    if at is not None:
        upto = await store.position_at(at)
    state: ClusterState | None = None
    if use_snapshot:
        snap = await store.load_snapshot(SNAPSHOT_NAME, upto)
        if snap is not None:
            state = ClusterState.from_bytes(snap[1])
            log.info("restored snapshot at position %d", snap[0])
    if state is None:
        state = ClusterState()
    if reclamation is not None:
        state.reclamation = reclamation
    target = upto if upto is not None else await store.head()
    after = state.position
    # A fold allocates millions of short-lived objects next to a large long-lived state:
    # cyclic GC passes would rescan that state over and over (measured: 1.6x slower).
    # Nothing here makes reference cycles, so collect once at the end instead.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        # Read the next page while folding this one: the database and the fold overlap.
        pending = asyncio.ensure_future(store.read_payloads(after, PAGE, upto))
        while True:
            rows = await pending
            if not rows:
                break
            after = rows[-1][0]
            pending = asyncio.ensure_future(store.read_payloads(after, PAGE, upto))
            # The bytes path of the fold: the same handlers as apply_many, without
            # decoding each envelope into a dozen dicts first. Fold in slices and let
            # the event loop run between them: the next page streams in meanwhile
            # (PostgreSQL works on the other core), instead of stalling on a full
            # socket buffer until the whole page is folded.
            for i in range(0, len(rows), SLICE):
                state.apply_payloads(rows[i : i + SLICE])
                await asyncio.sleep(0)
            if progress:
                progress(after, target)
    finally:
        if gc_was_enabled:
            gc.enable()
    return state


#: The youngest generation's collection threshold while the heap is frozen (CPython's
#: default is 700 allocations): a follower's allocations per event are mostly short
#: lived or kept for good (memo entries, the state's keys), so frequent young
#: collections only rescan survivors; one every 50,000 cost following ~4% less.
FROZEN_GEN0 = 50_000
_GEN0 = gc.get_threshold()[0]
#: Objects frozen by the last full collection (:func:`_full_collection`); 0: not frozen.
_frozen_base = 0
#: An upper bound of the frozen heap's growth since: the last count of it, plus the
#: survivors of the young collections after that count (the allocations that
#: triggered them, less what they collected). Counting walks the frozen list, so it
#: is only done when this bound says the heap may have doubled: the bound alone
#: also counts what was frozen and then freed by reference counting (with one-pod
#: Jobs, the commit service's first young collection froze 50,000 by the bound and
#: grew the frozen heap by 22,000).
_frozen_since = 0
#: A full collection is due (scheduled on the running event loop, not yet run).
_full_due = False


def freeze_heap() -> None:
    """Exempt every object alive now from the cyclic GC (``gc.freeze``), once a service
    has built its fold: collections then stop rescanning the state's long-lived
    objects (a commit batch loop over a 10,000-node state spent ~20% of its time in
    the GC, 6% frozen), and young collections run every :data:`FROZEN_GEN0`
    allocations. What survives a young collection is frozen too: a fold that keeps
    growing (the job controller's jobs) would otherwise have it rescanned by every
    middle-generation collection (at 100,000 one-pod Jobs, 0.8 s of the controller's
    3.4 s). A cycle frozen while alive and dropped later is freed by the full
    collection run when the frozen heap, counted, has doubled since the last one (on
    the running event loop, between two of its callbacks): such garbage stays below
    the heap the last full collection left, and each object is scanned about once
    more per doubling. Frozen objects freed by reference counting (a batch in flight
    at a young collection) do not count towards the doubling.
    :func:`thaw_heap` when the service stops following, so what it leaves behind is
    collected again."""
    _full_collection()
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, FROZEN_GEN0), gen1, gen2)
    if _refreeze not in gc.callbacks:
        gc.callbacks.append(_refreeze)


def thaw_heap() -> None:
    """Undo :func:`freeze_heap` (process-wide: only costs collection time)."""
    global _frozen_base
    with contextlib.suppress(ValueError):
        gc.callbacks.remove(_refreeze)
    _frozen_base = 0
    gc.unfreeze()
    _gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(_GEN0, gen1, gen2)


def _full_collection() -> None:
    """Collect the whole heap, frozen part included, and freeze what survives."""
    global _frozen_base, _frozen_since, _full_due
    # Not frozen while it runs, so its own collection's _refreeze does nothing: it
    # would find the heap doubled against the old base and schedule another one.
    _frozen_base = 0
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    _frozen_base = gc.get_freeze_count()
    _frozen_since = 0
    _full_due = False


def _refreeze(phase: str, info: dict[str, int]) -> None:
    """A GC callback while the heap is frozen: after each collection, freeze its
    survivors (only a list splice), and once the frozen heap has doubled, have the
    running event loop make a full collection (none can start inside a collection)."""
    global _frozen_since, _full_due
    if phase != "stop" or not _frozen_base:
        return
    gc.freeze()
    _frozen_since += gc.get_threshold()[0] - info["collected"]
    if _full_due or _frozen_since < _frozen_base:
        return
    _frozen_since = gc.get_freeze_count() - _frozen_base
    if _frozen_since < _frozen_base:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # no loop (a benchmark's synchronous fold): the caller's freeze_heap
    _full_due = True
    loop.call_soon(_full_if_frozen)


def _full_if_frozen() -> None:
    if _frozen_base and _full_due:
        _full_collection()


def payload_pairs(rows: Sequence[StoredEvent]) -> list[tuple[int, bytes]]:
    """``(position, payload bytes)`` of stored rows: the input of the fold's bytes path
    (:meth:`ClusterState.apply_payloads`)."""
    return [(r.position, r.payload) for r in rows]


async def save_snapshot(store: EventStore, state: ClusterState, keep: int = 3) -> int:
    """Save ``state`` as the newest snapshot and prune old ones; returns its position."""
    return await store_snapshot(store, state.position, state.to_bytes(), keep)


async def store_snapshot(store: EventStore, position: int, data: bytes, keep: int = 3) -> int:
    """:func:`save_snapshot` of a state serialized already (``data``: its
    :meth:`~ClusterState.to_bytes` at ``position``); returns the position."""
    await store.save_snapshot(SNAPSHOT_NAME, position, data)
    await store.prune_snapshots(SNAPSHOT_NAME, keep=keep)
    return position


def anomaly_report(state: ClusterState) -> dict[str, dict[str, int]]:
    """The events the fold ignored: reason -> {count, first (log position)}."""
    first = state.anomaly_first
    return {
        reason: {"count": int(count), "first": int(first.get(reason, 0))}
        for reason, count in sorted(state.anomalies.items())
    }


def format_anomalies(anomalies: dict[str, Any]) -> list[str]:
    """Table lines for :func:`anomaly_report` (none when there is nothing)."""
    if not anomalies:
        return []
    lines = [f"anomalies {sum(a['count'] for a in anomalies.values())}"]
    lines.append(f"  {'REASON':<32}{'COUNT':>8}{'FIRST AT':>12}")
    for reason, a in anomalies.items():
        lines.append(f"  {reason:<32}{a['count']:>8}{a['first']:>12}")
    return lines
