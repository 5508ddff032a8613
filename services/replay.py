"""Fold the log into a :class:`~esched.core.ClusterState` for an audit or a restart.

The fold itself is the core's (one fold for replay, replicas, commit service,
simulator and audit); this module only feeds it: nearest snapshot at or before
the target position, then the tail of the log in large pages.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from esched.core import ClusterState
from esched.services.store.base import EventStore, StoredEvent

__all__ = [
    "SNAPSHOT_NAME",
    "fold_log",
    "format_table",
    "freeze_heap",
    "human",
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
) -> ClusterState:
    """The cluster state at position ``upto`` (or at time ``at``; default: the head)."""
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


def freeze_heap() -> None:
    """Exempt every object alive now from the cyclic GC (``gc.freeze``), once a service
    has built its fold: collections then stop rescanning the state's long-lived
    objects (a commit batch loop over a 10,000-node state spent ~20% of its time in
    the GC, 6% frozen). :func:`thaw_heap` when the service stops following, so what
    it leaves behind is collected again."""
    gc.collect()
    gc.freeze()


def thaw_heap() -> None:
    """Undo :func:`freeze_heap` (process-wide: only costs collection time)."""
    gc.unfreeze()


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


_BYTES = ("memory", "ephemeral-storage", "storage", "hugepages-")


def human(resource: str, units: int) -> str:
    """Base units for people: cores for cpu, GiB for byte resources, else the count."""
    if resource == "cpu":
        return f"{units / 1000:g}"
    if resource.startswith(_BYTES):
        return f"{units / 2**30:.1f}Gi"
    return str(units)


def format_table(summary: dict) -> str:
    """The replay summary as a human-readable table."""
    lines = [f"position  {summary['position']}"]
    nodes = summary["nodes"]
    lines.append(f"nodes     {nodes['count']}")
    lines.append(f"  {'RESOURCE':<24}{'ALLOCATABLE':>16}{'ALLOCATED':>16}{'USED':>8}")
    for res in sorted(nodes["allocatable"]):
        cap = nodes["allocatable"][res]
        used = nodes["allocated"].get(res, 0)
        pct = f"{100 * used / cap:.1f}%" if cap else "-"
        lines.append(f"  {res:<24}{human(res, cap):>16}{human(res, used):>16}{pct:>8}")
    pods = summary["pods"]
    lines.append("pods      " + "  ".join(f"{k}={v}" for k, v in pods.items()))
    if summary["gangs"]:
        lines.append(f"gangs     {len(summary['gangs'])}")
        lines.append(f"  {'GANG':<40}{'MIN':>6}{'PENDING':>9}{'RUNNING':>9}{'DONE':>6}")
        for name, g in summary["gangs"].items():
            done = g.get("Succeeded", 0) + g.get("Failed", 0)
            lines.append(
                f"  {name:<40}{g['minMember']:>6}{g.get('Pending', 0):>9}"
                f"{g.get('Running', 0):>9}{done:>6}"
            )
    if summary["queues"]:
        lines.append(f"queues    {len(summary['queues'])}")
        lines.append(
            f"  {'QUEUE':<24}{'STATE':<10}{'PRIO':>6}{'WEIGHT':>7}{'PENDING':>9}"
            f"{'RUNNING':>9}{'SHARE':>8}  ALLOCATED/FAIR SHARE"
        )
        for name, q in summary["queues"].items():
            fair = q.get("fairShare") or {}
            alloc = q.get("allocated") or {}
            res = " ".join(
                f"{r}={human(r, alloc.get(r, 0))}/{human(r, fair.get(r, 0))}"
                for r in sorted(set(fair) | set(alloc))
                if r != "pods"
            )
            lines.append(
                f"  {q.get('path', name):<24}{q.get('state', ''):<10}"
                f"{q.get('priority', 0):>6}{q.get('weight', 0):>7}"
                f"{q.get('Pending', 0):>9}{q.get('Running', 0):>9}"
                f"{q.get('share', 0.0):>8.3f}  {res}"
            )
    if summary.get("reservations"):
        lines.append(f"reserved  {len(summary['reservations'])}")
        lines.append(f"  {'GANG':<40}NODES HELD FOR IT")
        for gang, held in summary["reservations"].items():
            lines.append(f"  {gang:<40}{' '.join(held)}")
    return "\n".join(lines)
