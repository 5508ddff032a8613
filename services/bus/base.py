"""The bus port: topics of byte messages with consumer groups and committed offsets.

Two adapters: :mod:`.kafka` (aiokafka, for real deployments) and :mod:`.memory`
(in-process, for the embedded single-process mode and tests of service logic).
Delivery is at-least-once: a consumer commits offsets only after the work for
them is durable, and every consumer downstream is idempotent on event id.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from esched.services.bus.signing import Keyring

__all__ = [
    "DEFAULT_FEED_RETENTION_MS",
    "DEFAULT_WORK_PARTITIONS",
    "Bus",
    "BusConsumer",
    "BusError",
    "BusProducer",
    "Headers",
    "Message",
    "TopicNames",
]


#: Partitions of the work topic: the most replicas that can share work (a replica
#: without a partition idles). 24 lets 1, 2, 3, 4, 6, 8, 12 or 24 replicas take equal
#: shares; more partitions cost the broker and each fetch a little more.
DEFAULT_WORK_PARTITIONS = 24
#: How long the broker keeps the feed's messages (its topic's ``retention.ms``, set
#: when :meth:`Bus.ensure_topics` creates it). A replica starts reading the feed near
#: the position its fold reached and folds from the store whatever the feed no longer
#: holds, so the feed need only cover a restart: an hour.
DEFAULT_FEED_RETENTION_MS = 3_600_000


class BusError(Exception):
    """A bus operation failed; ``retriable`` says whether trying again can help."""

    def __init__(self, message: str, *, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable


#: Record headers: ``(name, value)`` pairs in the order the producer wrote them.
Headers = tuple[tuple[str, bytes], ...]


class Message(NamedTuple):
    """One record read from a topic (a named tuple: one is built per record consumed,
    and a frozen dataclass's ``__init__`` cost several times as much)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int = 0
    #: The record's headers (CloudEvents binary content mode carries its attributes
    #: in them); empty for most records.
    headers: Headers = ()


@dataclass(frozen=True, slots=True)
class GroupOptions:
    """How a service's consumer-group members are timed (Kafka; the in-process bus
    has no groups).

    ``session_timeout_ms``: without a heartbeat this long, the group drops a member
    and hands its partitions to the others (how long a killed member's work waits).
    ``heartbeat_interval_ms``: a member learns of a rebalance at its next heartbeat
    (None: a sixth of the session). ``static_membership``: members with an instance
    name join under it (KIP-345). A member that stops cleanly always leaves its group.
    """

    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int | None = None
    static_membership: bool = True


@dataclass(frozen=True, slots=True)
class TopicNames:
    """The topics of the external contract, under a configurable prefix."""

    prefix: str = "esched."

    @property
    def nodes(self) -> str:
        return f"{self.prefix}nodes"

    @property
    def pods(self) -> str:
        return f"{self.prefix}pods"

    @property
    def usage(self) -> str:
        return f"{self.prefix}usage"

    @property
    def decisions(self) -> str:
        return f"{self.prefix}decisions"

    @property
    def deadletter(self) -> str:
        return f"{self.prefix}deadletter"

    @property
    def proposals(self) -> str:
        """Placement proposals from the replicas to the commit service (internal)."""
        return f"{self.prefix}proposals"

    @property
    def work(self) -> str:
        """Pending work (pods / gangs) from the dispatcher to the replicas (internal)."""
        return f"{self.prefix}work"

    @property
    def feed(self) -> str:
        """Claims records and the events replicas fold themselves, from the dispatcher
        to replicas that follow the feed (internal, one partition; see
        ``services/store/feed.py``)."""
        return f"{self.prefix}feed"

    @property
    def inputs(self) -> tuple[str, str, str]:
        """Topics ingest reads; any input event type is accepted on any of them."""
        return (self.nodes, self.pods, self.usage)

    def for_event_type(self, event_type: str) -> str:
        """The topic an event type is published to (the topic only sets ordering)."""
        kind = event_type.split(".")[1] if event_type.count(".") >= 2 else ""
        if kind == "node":
            return self.nodes
        if kind == "usage":
            return self.usage
        return self.pods


class BusProducer(abc.ABC):
    """Sends messages; ``send`` returns once the broker has acknowledged them."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Connect. Raises :class:`BusError` if the bus cannot be reached."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Flush and disconnect; safe to call twice."""

    @abc.abstractmethod
    async def send_many(self, topic: str, records: Sequence[tuple[bytes | None, bytes]]) -> None:
        """Send ``(key, value)`` records to ``topic`` and wait for every acknowledgement."""

    async def send_with_headers(
        self, topic: str, records: Sequence[tuple[bytes | None, bytes, Headers]]
    ) -> None:
        """Send ``(key, value, headers)`` records and wait for every acknowledgement.

        An adapter without record headers sends header-less records through
        :meth:`send_many` and refuses the others (not retriable)."""
        if any(headers for _k, _v, headers in records):
            raise BusError(f"{type(self).__name__} has no record headers", retriable=False)
        await self.send_many(topic, [(key, value) for key, value, _h in records])

    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        """Send one record and wait for its acknowledgement."""
        await self.send_many(topic, [(key, value)])


class BusConsumer(abc.ABC):
    """Reads topics as a member of a consumer group; offsets are committed explicitly."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Join the group. Raises :class:`BusError` if the bus cannot be reached."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Leave the group; safe to call twice. Uncommitted messages are redelivered."""

    @abc.abstractmethod
    async def poll(self, timeout_ms: int, max_records: int) -> list[Message]:
        """Up to ``max_records`` messages, waiting at most ``timeout_ms`` for the first."""

    @abc.abstractmethod
    async def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit ``{(topic, partition): next offset to read}`` for the group."""

    @abc.abstractmethod
    async def lag(self) -> int:
        """Messages on the subscribed partitions not yet consumed (best effort)."""

    def assignment(self) -> frozenset[tuple[str, int]]:
        """The ``(topic, partition)`` pairs this consumer reads now (empty if unknown)."""
        return frozenset()

    def moving_share(self) -> frozenset[tuple[str, int]] | None:
        """While the group moves partitions (a rebalance: this member's share revoked,
        the next not yet assigned), the share it had; None otherwise, and on buses
        without group rebalances."""
        return None

    async def bounds(self) -> dict[tuple[str, int], tuple[int, int]]:
        """``{(topic, partition): (first offset held, next offset to be written)}`` of
        the partitions this consumer reads, for :meth:`seek` (empty: the bus cannot
        say, and a reader reads from where it started)."""
        return {}

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Read ``(topic, partition)`` from ``offset`` on (within :meth:`bounds`)."""
        raise NotImplementedError

    def pause_fetching(self) -> None:  # noqa: B027 - optional: nothing to pause in memory
        """Stop asking the broker for records (no fetch requests) until
        :meth:`resume_fetching`: a consumer that knows no records are coming, or that
        will not poll for a while, costs nothing meanwhile. Records fetched but not
        yet polled may be dropped (aiokafka drops a paused partition's) and are
        fetched again after :meth:`resume_fetching`: the position does not move. So
        pause after a poll that took all there was, and resume before polling."""

    def resume_fetching(self) -> None:  # noqa: B027 - optional
        """Fetch again after :meth:`pause_fetching`."""

    @property
    def fetching(self) -> bool:
        """False while paused by :meth:`pause_fetching`."""
        return True

    @property
    def fetch_wait_ms(self) -> int:
        """The longest the next fetch request waits on the broker for records (0: a
        poll sends no request, e.g. in memory): a poll of about this long sends one."""
        return 0


class Bus(abc.ABC):
    """Factory for producers and group consumers on one bus."""

    topics: TopicNames
    #: The keys internal records (proposals, work) are signed and checked with
    #: (:mod:`.signing`); None: unsigned. A property of the deployment's bus, like
    #: its topic names, so every service on it agrees.
    keyring: Keyring | None = None
    #: Partitions the work topic is created with (:meth:`ensure_topics`).
    work_partitions: int = DEFAULT_WORK_PARTITIONS

    @abc.abstractmethod
    def producer(self) -> BusProducer:
        """A new producer."""

    @abc.abstractmethod
    def consumer(
        self,
        topics: Sequence[str],
        group: str,
        *,
        exclusive: bool = False,
        instance: str | None = None,
        partitions: Sequence[tuple[str, int]] | None = None,
        wait_ms: int | None = None,
        idle_wait: tuple[int, float] | None = None,
    ) -> BusConsumer:
        """A new consumer of ``topics`` in consumer group ``group``.

        ``instance``: a stable member name (Kafka static membership, KIP-345): a
        process restarted under the same name takes its old place in the group
        without waiting for the old member's session to expire. Two live consumers
        must never share one.

        ``exclusive``: the caller is the group's only reader (a singleton guarded by
        a lease, like the commit service). It reads every partition from the group's
        committed offsets and commits to the group, but does not join it: no
        rebalance, so a standby that took the lease reads at once instead of
        waiting for the group to expire the dead leader's membership.

        ``partitions`` (with ``exclusive``): read only these ``(topic, partition)``
        pairs, from the group's committed offsets, without joining the group (a
        restarted replica working its previous share while it rejoins).

        ``wait_ms``: how long a fetch may wait at the broker for records, whether
        polls bring records or not (None: the bus's adaptive wait). For a topic whose
        messages come far apart (the feed): each empty fetch costs the reader CPU.
        ``idle_wait`` (with ``wait_ms``): ``(ceiling_ms, after_s)``: once polls have
        found nothing for ``after_s`` seconds, each further empty poll doubles the
        wait up to ``ceiling_ms``; the first records bring back ``wait_ms``. An idle
        reader then sends a fetch every ``ceiling_ms``; a broker that answers a
        waiting fetch when records arrive (Kafka) delivers as soon, one that answers
        on its own schedule (tansu) some way into the longer wait.
        """

    async def ensure_topics(self, partitions: int = 3) -> None:  # noqa: B027 - optional
        """Create the contract's topics if the bus needs and allows it: the work topic
        with :attr:`work_partitions` partitions, the others with ``partitions``."""
