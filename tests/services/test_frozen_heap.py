"""The frozen heap of a service that follows the log (services/store/snapshots.py):
what survives a young collection is frozen, and cycles frozen while alive are
collected once the frozen heap has doubled."""

from __future__ import annotations

import asyncio
import gc
import weakref

from esched.services.store.snapshots import freeze_heap, thaw_heap


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
    finally:
        thaw_heap()
