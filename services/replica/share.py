"""A replica's share of the work partitions: recorded in the store, and read again
while a restarted replica rejoins the group."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import orjson

from esched.services.bus import BusConsumer, BusError
from esched.services.replica.placing import _Placing
from esched.services.store.base import TransientStoreError

log = logging.getLogger(__name__)


class _Share(_Placing):
    """Record the share of the work partitions; read it while rejoining."""

    @property
    def share_snapshot_name(self) -> str:
        """Snapshot series recording this replica's share of the work partitions."""
        return f"replica-share/{self.config.group}/{self.id}"

    async def _start_provisional(self) -> None:
        """Read the previous share of the work partitions while the group join runs.

        A restarted replica rejoins the group under its static name and gets its old
        partitions back, but the join takes the broker's time (tansu holds it about 8 s;
        Kafka answers a static member's rejoin at once). Until then it reads the share
        it had, recorded in the store, from the group's committed offsets, without
        joining and without committing offsets: redelivered to whoever owns them
        after the join, the items are skipped (their pods are no longer pending). If
        the share moved meanwhile (this replica was away longer than its session),
        two replicas may propose the same pod for a moment: the commit service
        commits one and rejects the other, so nothing is placed twice.
        """
        if not self.config.resume_share:
            return
        try:
            saved = await self.store.load_snapshot(self.share_snapshot_name)
        except TransientStoreError as exc:
            log.warning(
                "replica %s: previous share unknown (%s); waiting for the group", self.id, exc
            )
            return
        if saved is None:
            return
        await self._open_provisional([(str(t), int(p)) for t, p in orjson.loads(saved[1])])

    async def _open_provisional(self, share: list[tuple[str, int]]) -> bool:
        """Read ``share`` (its work partitions) by assignment, from the group's
        committed offsets, as ``_provisional``; whether it could."""
        work = [(t, p) for t, p in share if t == self.bus.topics.work]
        if not work:
            return False
        provisional = self.bus.consumer(
            [self.bus.topics.work],
            self.config.group,
            exclusive=True,
            partitions=work,
            wait_ms=self.config.work_fetch_wait_ms,
        )
        try:
            await provisional.start()
        except BusError as exc:
            log.warning(
                "replica %s: cannot read its previous share (%s); waiting for the group",
                self.id,
                exc,
            )
            return False
        self._provisional = provisional
        return True

    async def _stop_provisional(self) -> None:
        self._bridging = False
        if self._provisional is not None:
            provisional, self._provisional = self._provisional, None
            with contextlib.suppress(BusError):
                await provisional.stop()

    async def _bridge_rebalance(self) -> None:
        """Keep placing this replica's share while the group moves partitions.

        aiokafka rebalances eagerly (no cooperative protocol): when one replica
        leaves or dies, every replica gives up its whole share and fetches nothing
        until the group has rejoined (tansu holds a JoinGroup 5 s and a SyncGroup
        3 s). Meanwhile this reads the share it had by assignment, as a restart
        does (:meth:`_start_provisional`), and goes back to the group consumer once
        it has a share again. The sticky assignor gives a surviving replica its old
        partitions back, so the items read meanwhile are redelivered to it and
        skipped (their pods are no longer pending); a partition that moved after
        all may be proposed from twice for a moment, and the commit service
        commits one proposal and rejects the other."""
        consumer = self._consumer
        if consumer is None or not self.config.bridge_rebalance:
            return
        moving = consumer.moving_share()
        if moving is not None and self._provisional is None:
            if await self._open_provisional(sorted(moving)):
                self._bridging = True
                log.info(
                    "replica %s: the group is rebalancing; working its share %s meanwhile",
                    self.id,
                    partitions(moving),
                    extra={"replica": self.id},
                )
        elif moving is None and self._bridging:
            await self._stop_provisional()
            log.info(
                "replica %s: rebalanced; share %s",
                self.id,
                partitions(consumer.assignment()),
                extra={"replica": self.id},
            )

    async def _joined(self) -> None:
        """The group join of a restart is done: stop reading the previous share."""
        joining, self._joining = self._joining, None
        await self._stop_provisional()
        if joining is not None:
            joining.result()  # a failed join ends the service, as in start()
            log.info(
                "replica %s joined the group; share %s",
                self.id,
                partitions(self._consumer.assignment() if self._consumer else ()),
            )

    async def _record_share(self, consumer: BusConsumer) -> None:
        """Record this replica's share of the work partitions when it changed."""
        share = consumer.assignment()
        if not share or share == self._saved_share:
            return
        try:
            await self.store.save_snapshot(
                self.share_snapshot_name, self.follower.position, orjson.dumps(sorted(share))
            )
            await self.store.prune_snapshots(self.share_snapshot_name, keep=2)
        except TransientStoreError as exc:
            log.warning("replica %s: share not recorded (%s)", self.id, exc)
            return
        self._saved_share = share


def partitions(share: Any) -> str:
    """``topic[0,3]``-style text of a set of (topic, partition) pairs, for logs."""
    by_topic: dict[str, list[int]] = {}
    for topic, part in share:
        by_topic.setdefault(topic, []).append(part)
    return " ".join(f"{t}{sorted(ps)}" for t, ps in sorted(by_topic.items())) or "[]"
