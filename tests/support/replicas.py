"""A replica wired to a commit service in the same process, recording what it
proposes: the scheduling pass's and Quincy's live tests place one batch of work and
compare the proposals with what the simulator or the pass decided."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from esched.services.bus.memory import MemoryBus
from esched.services.commit import CommitService
from esched.services.replica import Replica


@contextlib.asynccontextmanager
async def recording_replica(store: Any, **kwargs: Any) -> AsyncIterator[tuple[Replica, list[dict]]]:
    """Replica ``r1`` over ``store`` and a fresh in-memory bus, started, its proposals
    decided by a :class:`CommitService` on the same store and appended, in order, to
    the yielded list; both stopped on exit. ``kwargs`` go to :class:`Replica`
    (profile, config)."""
    commit = CommitService(store)
    proposed: list[dict] = []

    async def submit(proposals: list[dict]) -> Any:
        proposed.extend(proposals)
        return await commit.decide(proposals)

    replica = Replica(store, MemoryBus(), "r1", submit=submit, **kwargs)
    await replica.start()
    try:
        yield replica, proposed
    finally:
        await replica.stop()
        await commit.stop()
