"""The commit service's bus loop: proposals in, decided batch by batch, then
published, dead-lettered and their offsets committed in the background."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from esched.schemas.events import PLACEMENT_PROPOSED
from esched.schemas.validator import InvalidEvent, parse_event
from esched.services.bus import BusConsumer, BusError, Message
from esched.services.bus.deadletter import Dead, send_deadletters
from esched.services.bus.signing import split_signed
from esched.services.commit.config import SERVICE, NotLeader
from esched.services.commit.publish import _Publisher
from esched.services.faults import poll_or_pause, retry_transient

log = logging.getLogger(__name__)


class _ProposalConsumer(_Publisher):
    """Consume proposals while leading."""

    async def _ensure_topics(self) -> None:
        assert self.bus is not None
        await self.bus.ensure_topics()

    async def _stop_consumer(self) -> None:
        try:
            await self._drain_outgoing()  # its offsets are committed with this consumer
        except BusError as exc:
            log.warning(
                "publishing the last batch failed (%s); its proposals will be redelivered", exc
            )
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            with contextlib.suppress(BusError):
                await consumer.stop()

    async def _serve(self, exit_when_idle: bool, idle_polls: int) -> bool:
        """Consume proposals while leading; True when done (stopped or idle)."""
        assert self.bus is not None
        # Exclusive: the lease already makes this the only reader; group membership would
        # make a standby wait out the dead leader's session before reading anything.
        self._consumer = self.bus.consumer(
            [self.bus.topics.proposals], self.config.group, exclusive=True
        )
        await retry_transient(
            self._consumer.start,
            what="consumer start",
            service=SERVICE,
            peer="bus",
        )
        empty = 0
        while not self._stopping.is_set():
            if self.lease.lost.is_set():
                await self._step_down("lease_lost", "lease lost")
                raise NotLeader("lease lost")
            msgs = await self._poll()
            if msgs:
                empty = 0
                async with self._handling:
                    await self._handle(msgs)
                continue
            empty += 1
            if exit_when_idle and empty >= idle_polls and await self._consumer.lag() == 0:
                return True
        return True

    async def _poll(self) -> list[Message]:
        assert self._consumer is not None
        return await poll_or_pause(
            self._consumer,
            self.config.poll_timeout_ms,
            self.config.batch_size,
            service=SERVICE,
            pause=0.5,
        )

    async def _handle(self, msgs: Sequence[Message]) -> None:
        """Decide a polled batch; then, in the background while the next batch is
        decided, publish its decisions, dead-letter its bad proposals and commit its
        offsets (:meth:`_finish`, one batch after the other, in order)."""
        consumer = self._consumer
        assert consumer is not None
        items: list[dict[str, Any]] = []
        assert self.bus is not None
        # A proposal not signed by an esched service is refused before it is read.
        readable, dead = split_signed(self.bus.keyring, msgs)
        for m in readable:
            try:
                ev = parse_event(
                    m.value,
                    allowed_types=(PLACEMENT_PROPOSED,),
                    max_bytes=self.config.max_proposal_bytes,
                )
            except InvalidEvent as exc:
                dead.append((m, exc.reason, str(exc), exc.field))
                continue
            items.append(ev["data"])
        # NotLeader: this batch's offsets stay uncommitted (the previous batch finishes).
        decisions = await self._decide_batch(items) if items else []
        encoded = self._appended_payloads()
        offsets: dict[tuple[str, int], int] = {}
        for m in msgs:
            key = (m.topic, m.partition)
            offsets[key] = max(offsets.get(key, 0), m.offset + 1)
        # The previous batch's Kafka round trips (decisions acknowledged, offsets
        # committed) ran while this one was decided; this one's start once they are done.
        await self._drain_outgoing()
        self._outgoing = asyncio.create_task(
            self._finish(consumer, decisions, encoded, dead, offsets), name="commit-publish"
        )

    async def _finish(
        self,
        consumer: BusConsumer,
        decisions: list[dict[str, Any]],
        encoded: dict[int, tuple[dict[str, Any], bytes]],
        dead: list[Dead],
        offsets: dict[tuple[str, int], int],
    ) -> None:
        """Publish a decided batch (durable in the store already), dead-letter its bad
        proposals, then commit its offsets."""
        await self._publish(decisions, encoded)
        if dead:
            await self._deadletter(dead)
        try:
            await consumer.commit(offsets)
        except BusError as exc:
            # Decisions are durable; the next leader re-reads these proposals and the
            # decision ids make them duplicates. Nothing is decided twice.
            log.warning("offset commit failed (%s); proposals will be redelivered", exc)

    async def _drain_outgoing(self) -> None:
        """Wait for the batch being published (its failure is raised here)."""
        task, self._outgoing = self._outgoing, None
        if task is not None:
            await task

    async def _deadletter(self, dead: list[Dead]) -> None:
        assert self._producer is not None and self.bus is not None
        await send_deadletters(self._producer, self.bus.topics.deadletter, dead, service=SERVICE)
        self.totals.deadlettered += len(dead)
