"""Leadership of the commit service: taking the lease, rebuilding the state from the
newest snapshot and its fence, stepping down, saving snapshots."""

from __future__ import annotations

import asyncio
import functools
import logging
import time

import orjson

from esched.core import ClusterState
from esched.core.validation import Validator
from esched.services import metrics
from esched.services.commit.books import _Books
from esched.services.commit.config import FENCE_SNAPSHOT, SERVICE
from esched.services.faults import retry_transient
from esched.services.store.base import StoreError
from esched.services.store.snapshots import SNAPSHOT_NAME, freeze_heap, store_snapshot, thaw_heap

log = logging.getLogger(__name__)


class _Leadership(_Books):
    """Lead (one instance at a time), step down, snapshot for fast takeovers."""

    @property
    def leading(self) -> bool:
        """Whether this instance is the active leader with a built state."""
        return self._leading and not self.lease.lost.is_set()

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
        self._validator = self._new_validator(state)
        self._decided.clear()
        self._submitted.clear()
        self._snapshot_at = state.position
        await self._catch_up(live=False)

    def _new_validator(self, state: ClusterState) -> Validator:
        """The validator of :attr:`state`, with this service's bands, profile and queue
        tree."""
        return Validator(
            state,
            self.config.bands,
            self.config.profile,
            queue_hierarchy=self.config.queue_hierarchy,
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
