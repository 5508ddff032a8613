"""The outbox: admission rejections appended, work items published in allocation order."""

from __future__ import annotations

import functools
from datetime import UTC, datetime

import orjson

from esched.core.admission import WorkItem
from esched.schemas.events import POD, POD_REJECTED, envelope, stream_name, timestamp
from esched.services import metrics
from esched.services.bus.signing import send_signed
from esched.services.dispatch.config import SERVICE
from esched.services.dispatch.reclaim import _Reclaim
from esched.services.faults import append_envelopes, retry_transient


def work_item(
    kind: str, key: str, position: int, pods: list[str] | None = None
) -> tuple[bytes, bytes]:
    """The ``(key, value)`` record of one work item (``pods``: a gang's Pending pods,
    for replicas that follow the feed)."""
    if pods is None:
        return key.encode(), orjson.dumps({kind: key, "position": position})
    return key.encode(), orjson.dumps({kind: key, "position": position, "pods": pods})


class _Outbox(_Reclaim):
    """Append rejections, send reclaims, publish work (at-least-once)."""

    async def _append_rejections(self) -> None:
        """Append the decided rejections (deterministic ids: a retry or a second
        leader's copy dedupes)."""
        if not self._rejections:
            return
        rejections = list(self._rejections)
        now = datetime.now(UTC)
        stamp = timestamp(now)
        envelopes = [
            (
                envelope(
                    POD_REJECTED,
                    "esched/dispatch",
                    r.data(),
                    id=r.event_id,
                    time=stamp,
                    subject=r.pod,
                ),
                stream_name(POD, r.pod),
            )
            for r in rejections
        ]
        _, res = await append_envelopes(
            self.store, envelopes, time=now, what="rejection append", service=SERVICE
        )
        self._rejections = self._rejections[len(rejections) :]
        if res.duplicates == 0:
            # (A batch with duplicates is a retry or another leader's copy: counted there.)
            for r in rejections:
                self.totals.rejected[r.reason] = self.totals.rejected.get(r.reason, 0) + 1
                metrics.ADMISSION_REJECTED.labels(r.reason).inc()

    async def _publish_feed(self) -> None:
        """Send the feed's messages for what was folded since (in log order, on the
        feed topic's one partition; at-least-once: a follower skips what it has)."""
        feed = self._feed
        if feed is None or self._producer is None or not feed.pending:
            return
        records: list[tuple[bytes | None, bytes]] = [(None, m) for m in feed.take()]
        await retry_transient(
            functools.partial(
                send_signed, self._producer, self.bus.keyring, self.bus.topics.feed, records
            ),
            what="feed send",
            service=SERVICE,
            peer="bus",
        )
        self.totals.feed_messages += len(records)

    def _release(self) -> list[WorkItem]:
        """Empty the outbox: the items admission hands out now, in allocation order
        (the rest it holds)."""
        items, self._outbox = self._outbox, []
        return self.admission.release(self.state, items)

    async def _flush(self) -> None:
        """Append overload handling and rejections; publish the outbox in allocation
        order, holding what the queues do not admit (at-least-once; duplicates are
        harmless)."""
        # The feed first: a replica following it waits for the positions work names.
        await self._publish_feed()
        # Overload first: its append is checked against the head it was planned on.
        await self._append_overload()
        await self._append_rejections()
        await self._send_reclaims()
        if not self._outbox or self._producer is None:
            return
        admitted = self._release()
        held = self.admission.held_counts()
        self.totals.held = held
        for reason in ("QueueClosed", "QueueCapability", "ClusterCapacity", "QueueOverused"):
            metrics.DISPATCH_HELD.labels(reason).set(held.get(reason, 0))
        if self._feed is not None:
            # Replicas following the feed enter a gang's Pending pods from its item.
            st = self.state
            batch = [
                (
                    cause,
                    work_item(
                        kind,
                        key,
                        position,
                        st.gang_members(key, "Pending") if kind == "gang" else None,
                    ),
                )
                for cause, kind, key, position in admitted
            ]
        else:
            batch = [
                (cause, work_item(kind, key, position)) for cause, kind, key, position in admitted
            ]
        producer = self._producer
        topic = self.bus.topics.work
        for i in range(0, len(batch), self.config.chunk):
            chunk = batch[i : i + self.config.chunk]
            records = [rec for _cause, rec in chunk]
            await retry_transient(
                functools.partial(send_signed, producer, self.bus.keyring, topic, records),
                what="work send",
                service=SERVICE,
                peer="bus",
            )
            counts: dict[str, int] = {}
            for cause, _rec in chunk:
                counts[cause] = counts.get(cause, 0) + 1
            # Metrics once per cause: a labelled lookup per item showed in the profile.
            for cause, n in counts.items():
                self.totals.by_cause[cause] = self.totals.by_cause.get(cause, 0) + n
                metrics.DISPATCH_WORK.labels(cause).inc(n)
            self.totals.published += len(chunk)
