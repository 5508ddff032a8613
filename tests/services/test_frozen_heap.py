"""The frozen heap of a service that follows the log (services/store/snapshots.py):
what survives a young collection is frozen, and cycles frozen while alive are
collected once the frozen heap has doubled."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from esched.services.store import snapshots
from esched.services.store.snapshots import FROZEN_GEN0, freeze_heap, thaw_heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_what_survives_a_young_collection_of_a_frozen_heap_is_frozen() -> None:
    # A growing fold's survivors are not left to middle-generation collections,
    # which would rescan each of them again.
    freeze_heap()
    try:
        kept: list[list[int]] = [[] for _ in range(1000)]
        gc.collect(0)
        # (the collected generations list every tracked object but the frozen ones)
        assert gc.is_tracked(kept[0])
        assert not any(o is kept[0] or o is kept[-1] for o in gc.get_objects())
    finally:
        thaw_heap()
    assert gc.get_freeze_count() == 0


async def test_a_cycle_frozen_while_alive_is_collected_once_the_frozen_heap_doubles() -> None:
    freeze_heap()
    try:
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        gc.collect(0)  # the live cycle is frozen
        del a, b
        assert gone() is not None
        # The fold keeps growing: young collections freeze what it keeps, until the
        # frozen heap has doubled and the loop runs a full collection.
        base = gc.get_freeze_count()
        kept: list[list[int]] = []
        while gone() is not None and len(kept) < 2 * base + 100_000:
            kept.extend([] for _ in range(10_000))
            await asyncio.sleep(0)
        assert gone() is None
        assert len(kept) >= base // 2  # not before it had grown by about the heap
        # and by the young collection (and the loop iteration) after it had doubled
        assert len(kept) <= base + FROZEN_GEN0 + 10_000
    finally:
        thaw_heap()


def _count_full_collections(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the full collections the running loop makes (one entry each)."""
    runs: list[int] = []
    full = snapshots._full_collection

    def counted() -> None:
        runs.append(1)
        full()

    monkeypatch.setattr(snapshots, "_full_collection", counted)
    return runs


async def test_a_full_collection_does_not_schedule_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Its own collection's callback saw the heap doubled against the old base: it
    # must not leave a second full collection due.
    freeze_heap()
    runs = _count_full_collections(monkeypatch)
    try:
        kept: list[list[int]] = []
        while not runs and len(kept) < 10 * gc.get_freeze_count() + 1_000_000:
            kept.extend([] for _ in range(10_000))
            await asyncio.sleep(0)
        assert runs == [1]
        for _ in range(10):
            await asyncio.sleep(0)
        assert runs == [1]
    finally:
        thaw_heap()


async def test_frozen_objects_freed_by_reference_counting_do_not_count_towards_the_doubling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A batch in flight at each young collection is frozen, then freed: the frozen
    # heap does not grow, so no full collection is due (each would rescan it all).
    freeze_heap()
    runs = _count_full_collections(monkeypatch)
    try:
        base = gc.get_freeze_count()
        for _ in range(3 * base // FROZEN_GEN0 + 3):
            in_flight: list[list[int]] = [[] for _ in range(10_000)]
            gc.collect(0)  # frozen while alive, counted as a young collection's survivors
            del in_flight
            await asyncio.sleep(0)
        assert gc.get_freeze_count() < base + 10_000
        assert runs == []
    finally:
        thaw_heap()
