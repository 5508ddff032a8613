"""Following the feed (``ReplicaConfig.follow = "feed"``): a replica's state from the
whole fold up to its start, then from the dispatcher's feed of claims records and the
events replicas fold themselves (``services/store/feed.py``) instead of the store's
log; its own work's pods entered from their submissions when their work comes."""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from esched.core import PHASE_RUNNING
from esched.core._claims import MAGIC as CLAIMS_MAGIC
from esched.schemas.events import (
    PLACEMENT_COMMITTED,
    POD,
    POD_SUBMITTED,
    POD_UPDATED,
    stream_name,
)
from esched.services.bus import BusConsumer, BusError, Message
from esched.services.bus.signing import Keyring, split_signed
from esched.services.faults import poll_or_pause, retry_transient
from esched.services.replica.config import SERVICE
from esched.services.store.base import EventStore
from esched.services.store.feed import (
    CLAIMS,
    COMMITS,
    DECISIONS,
    MAY_MAKE_WORK,
    FeedError,
    commits_mentioning,
    decisions_mentioning,
    decode_message,
    message_range,
)
from esched.services.store.follower import LogFollower

log = logging.getLogger(__name__)

#: Pods released by claims remembered (for stale work items) at most.
RELEASED_KEPT = 100_000
#: The feed reader's fetch wait at the broker (ms) while messages come. A feed message
#: comes only every batch of the dispatcher's, so with the bus's adaptive wait (20-40
#: ms while messages keep coming) a replica sent tens of empty fetches a second, each
#: costing it CPU. The price is latency: the broker answers a waiting fetch when a
#: message comes, Kafka at once, tansu some way into the wait (a message reached a
#: reader 37 ms after its send at the median, 82 ms at p90, at 200 ms).
FEED_WAIT_MS = 200
#: ``(ceiling ms, after s)``: once the feed has brought nothing for ``after`` seconds,
#: the reader's wait doubles at each further empty poll up to the ceiling (an idle
#: replica sends a fetch a second instead of five), and the first message brings back
#: :data:`FEED_WAIT_MS`. On Kafka that costs no latency; on tansu the first message
#: after the idle time comes later (37 / 168 ms median at 200 / 1,000 ms waits).
FEED_IDLE_WAIT = (1_000, 5.0)
#: The feed reader's poll timeout (ms): a poll returns as soon as a message comes;
#: an empty one lets the wait grow (at 100 ms an idle reader woke 10 times a second).
FEED_POLL_MS = 1_000
#: The longest wait (ms) of a read of one feed message while looking for where to
#: start (:meth:`FeedFollower._start_near`): the message is there, so it comes at once.
PROBE_MS = 5_000
#: Rows read from the store per page while bridging a gap in the feed.
BRIDGE_PAGE = 5000
_POD_EVENTS = (POD_SUBMITTED, POD_UPDATED)


class FeedFollower(LogFollower):
    """A :class:`LogFollower` whose live part reads the feed.

    It starts as the whole fold does (snapshot + catch-up to the store's head), then
    reads the feed topic (a reader of its own, no group) from its last message that
    begins at or before its position (:meth:`_start_near`), skipping messages its
    position covers. A message that does not begin at its position (the
    feed begins later, or a new dispatcher's feed begins earlier) is bridged: the store's
    events up to the message's end are folded whole, as a :class:`LogFollower` folds
    them. ``after_fold`` gets the decisions (of ``decode``'s types) that hold
    ``mentions``, in the same step as the claims that hold their bindings;
    ``on_work()`` runs after a message covering an event that may make work.

    :meth:`enter` enters the pods of work items Pending from their submissions.
    """

    def __init__(
        self,
        store: EventStore,
        open_feed: Callable[[], BusConsumer],
        *,
        keyring: Keyring | None = None,
        on_work: Callable[[], None] | None = None,
        poll_timeout_ms: int = FEED_POLL_MS,
        **kwargs: Any,
    ) -> None:
        super().__init__(store, **kwargs)
        self._open_feed = open_feed
        self._keyring = keyring
        self._on_work = on_work
        self._poll_timeout_ms = poll_timeout_ms
        #: pod -> the position of the claims record that released it last
        self._released: dict[str, int] = {}
        self.messages = 0
        #: Feed messages polled (applied, skipped as covered, or refused), and reads
        #: of one message while looking for where to start.
        self.received = 0
        self.probes = 0
        self.parts = 0
        self.bridged = 0
        #: Feed messages whose claims this version cannot read (bridged instead).
        self.foreign = 0
        self.entered = 0
        #: Seconds of this thread's CPU in :meth:`enter` (its store read's wait left
        #: out); :attr:`follow_cpu` counts :meth:`apply`'s (the feed messages).
        self.enter_cpu = 0.0

    @property
    def reads(self) -> int:
        """Feed messages applied (reads of the store only to bridge: :attr:`bridged`)."""
        return self.messages

    @property
    def rows_read(self) -> int:
        """Parts of the feed messages applied."""
        return self.parts

    async def _follow_live(self) -> None:
        await self.read_feed()

    async def read_feed(self) -> None:
        """Apply the feed as it comes, from about the state's position on
        (:meth:`_start_near`), until cancelled."""
        consumer = self._open_feed()
        await retry_transient(consumer.start, what="feed start", service=SERVICE, peer="bus")
        try:
            await self._read(await self._start_near(consumer))
            while True:
                await self._read(
                    await poll_or_pause(
                        consumer, self._poll_timeout_ms, 100, service=SERVICE, pause=0.5
                    )
                )
        finally:
            with contextlib.suppress(BusError):
                await consumer.stop()

    async def _read(self, msgs: Sequence[Message]) -> None:
        self.received += len(msgs)
        readable, dead = split_signed(self._keyring, msgs)
        for m, reason, text, _f in dead:
            log.warning("refused feed message @%d (%s): %s", m.offset, reason, text)
        for m in readable:
            await self.apply_message(m.value)

    async def _start_near(self, consumer: BusConsumer) -> list[Message]:
        """Seek the feed back from its end to a message that begins at or before the
        state's position (1, 2, 4, ... messages back, one read each), and return it
        (to be applied first; the reader goes on after it): a replica that starts on a
        long feed reads a few messages of it, not all. Nothing is lost starting late:
        a message that begins after the position is bridged from the store. The whole
        feed when the bus cannot seek (:meth:`BusConsumer.bounds` empty)."""
        state = self.state
        assert state is not None
        bounds = await retry_transient(
            consumer.bounds, what="feed bounds", service=SERVICE, peer="bus"
        )
        if len(bounds) != 1:
            return []
        ((topic, partition), (first, end)) = next(iter(bounds.items()))
        back = 1
        while end - first > 0:
            at = max(first, end - back)
            consumer.seek(topic, partition, at)
            msgs = await poll_or_pause(consumer, PROBE_MS, 1, service=SERVICE, pause=0.5)
            self.probes += 1
            if not msgs:
                consumer.seek(topic, partition, at)  # (read from there on)
                return []
            readable, _dead = split_signed(self._keyring, msgs)
            try:
                begins = message_range(readable[0].value)[0] if readable else -1
            except FeedError:
                begins = -1
            if at == first or begins <= state.position:
                return msgs
            back *= 2
        return []

    async def apply_message(self, raw: bytes) -> None:
        """Apply one feed message (as :meth:`start`'s reader hands it over), bridging
        from the store when it does not begin at the state's position."""
        upto = self.apply(raw)
        if upto is not None:
            await self._bridge(upto)

    def apply(self, raw: bytes) -> int | None:
        """Apply one feed message that begins at the state's position (or one it
        covers: skipped); otherwise change nothing and return the message's end, to
        which the store's events must be folded instead (:meth:`apply_message`)."""
        began = time.thread_time()
        try:
            return self._apply(raw)
        finally:
            self.follow_cpu += time.thread_time() - began

    def _apply(self, raw: bytes) -> int | None:
        state = self.state
        assert state is not None
        try:
            after, upto = message_range(raw)
            if upto <= state.position:
                return None
            if after != state.position:
                return upto
            _a, _u, flags, parts = decode_message(raw)
        except FeedError as exc:
            log.warning("skipped a feed message: %s", exc)
            return None
        foreign = [d[:4] for k, _p, d in parts if k == CLAIMS and not d.startswith(CLAIMS_MAGIC)]
        if foreign:
            # Claims of another layout: a dispatcher of another version (a rolling
            # update). The store's events say the same, so they are folded instead.
            self.foreign += 1
            if self.foreign == 1:
                log.warning(
                    "feed claims %r, not %r (a dispatcher of another version): "
                    "folding the store's events instead",
                    foreign[0],
                    CLAIMS_MAGIC,
                )
            return upto
        mentions = self._mentions
        found: list[tuple[int, bytes]] = []
        commits: list[tuple[int, dict[str, Any]]] = []
        released: list[str] = []
        kept = self._released
        for kind, position, data in parts:
            if kind == CLAIMS:
                state.apply_claims(data, None, released)
                for key in released:
                    kept.pop(key, None)
                    kept[key] = position
                released.clear()
            elif kind == COMMITS:
                commits += [
                    (pos, {"type": PLACEMENT_COMMITTED, "data": {"proposal": pid}})
                    for pos, pid in commits_mentioning(data, mentions)
                ]
            elif kind == DECISIONS:
                found += decisions_mentioning(data, mentions)
            else:
                state.apply_payloads([(position, data)])
        while len(kept) > RELEASED_KEPT:
            del kept[next(iter(kept))]
        state.position = upto
        self.messages += 1
        self.parts += len(parts)
        after_fold = self._after
        if after_fold is not None and (found or commits):
            loads = self._decoder
            decode = self._decode
            if decode is not None and PLACEMENT_COMMITTED not in decode:
                commits = []
            events = commits
            if found:
                decoded = [(pos, loads(payload)) for pos, payload in found]
                if decode is not None:
                    decoded = [(p, e) for p, e in decoded if e.get("type") in decode]
                events = sorted(commits + decoded, key=lambda pe: pe[0])
            if events:
                after_fold(events)
        if flags & MAY_MAKE_WORK and self._on_work is not None:
            self._on_work()
        self._advance()
        return None

    async def _bridge(self, upto: int) -> None:
        """Fold the store's events up to ``upto`` whole (a gap in the feed)."""
        state = self.state
        assert state is not None
        self.bridged += 1
        while state.position < upto:
            rows = await retry_transient(
                functools.partial(self.store.read_payloads, int(state.position), BRIDGE_PAGE, upto),
                what="feed bridge read",
                service=SERVICE,
                peer="store",
            )
            if not rows:
                break
            self.fold_batch(rows)
            if self._on_work is not None:
                self._on_work()

    async def enter(self, pods: Sequence[tuple[str, int]]) -> int:
        """Enter the pods of work items ``(pod, work position)`` Pending from their
        latest submission (and the updates after it) as the state's position has them:
        not one released by a claims record after its work position (the item is stale:
        the pod was bound or withdrawn since), nor one the state holds bound. A pod
        Pending already is entered again (its work may follow an update). Returns how
        many were entered."""
        began = time.thread_time()
        state = self.state
        assert state is not None
        released = self._released
        keys: list[str] = []
        for key, position in pods:
            at = released.get(key)
            if at is not None and at > position:
                continue
            idx = state.pod_index.get(key)
            if idx is not None and state.phase_of(idx) == PHASE_RUNNING:
                continue
            keys.append(key)
        if not keys:
            self.enter_cpu += time.thread_time() - began
            return 0
        upto = int(state.position)
        streams = [stream_name(POD, key) for key in keys]
        self.enter_cpu += time.thread_time() - began
        rows = await retry_transient(
            lambda: self.store.read_streams(streams, _POD_EVENTS, upto),
            what="pod submissions read",
            service=SERVICE,
            peer="store",
        )
        began = time.thread_time()
        # Each pod's latest submission and what follows it (its updates), in log order.
        start: dict[str, int] = {}
        for i, (_pos, stream, etype, _payload) in enumerate(rows):
            if etype == POD_SUBMITTED:
                start[stream] = i
        chosen = [
            (pos, payload)
            for i, (pos, stream, _t, payload) in enumerate(rows)
            if i >= start.get(stream, len(rows))
        ]
        if chosen:
            state.enter_payloads(chosen)
        self.entered += len(start)
        self.enter_cpu += time.thread_time() - began
        return len(start)
