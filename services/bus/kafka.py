"""Kafka adapter of the bus port (aiokafka).

No idempotent producer and no transactions (the brokers esched must run on do not
all support them): producers use ``acks=all`` and consumers commit offsets by
hand after the work is durable, which gives at-least-once delivery; every
consumer downstream is idempotent on the CloudEvents id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence

from aiokafka import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ConsumerRebalanceListener,
    ConsumerRecord,
    TopicPartition,
)
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from esched.services.bus._hash import partition
from esched.services.bus.base import (
    DEFAULT_FEED_RETENTION_MS,
    DEFAULT_WORK_PARTITIONS,
    Bus,
    BusConsumer,
    BusError,
    BusProducer,
    Headers,
    Message,
    TopicNames,
)
from esched.services.bus.security import KafkaSecurity

__all__ = ["KafkaBus"]

log = logging.getLogger(__name__)

#: Upper bound on one event; the validator enforces the same default, the broker's
#: own limit (message.max.bytes, 1 MiB by default) should be at least this.
MAX_REQUEST_BYTES = 1_048_576 + 4096
#: Largest record batch a producer builds.
MAX_BATCH_BYTES = 512 * 1024
#: From this many records on, send_many builds one batch per partition itself.
BATCH_MIN_RECORDS = 32
#: How much longer than its timeout a poll may take before it is given up as caught
#: in a rebalance (seconds).
POLL_SLACK = 0.25
#: Longest aiokafka's background fetcher waits before looking at its partitions again
#: when no fetch is in flight (its ``consumer_timeout_ms``; aiokafka's default). Events
#: it acts on usually wake it sooner (a fetch answered, records taken, a partition
#: resumed), but not always: at 5 s a commit service's fetcher slept 4.9 s with no
#: fetch in flight and nothing buffered while 1,703 proposals waited on the broker
#: (a stall of a whole ``bench scale`` run). The bound is how long a missed wake-up
#: can hold a consumer that is fetching.
FETCHER_TIMEOUT_MS = 200
#: The same while every partition is paused (an idle replica's work consumer): the
#: routine then only waits for a resume, which wakes it, and the default woke it five
#: times a second to find every partition still paused.
PAUSED_FETCHER_TIMEOUT_MS = 5_000
#: How long tansu (0.6) holds a static member's SyncGroup. Neither that hold nor the
#: sync counts as contact with the member, and tansu checks every member's last
#: contact before counting the heartbeat that follows: with a session not above the
#: hold plus a heartbeat interval, every member of a settled group is dropped at its
#: first heartbeat after each sync, and the group rebalances forever
#: (tests/services/test_tansu_groups.py reproduces it with aiokafka alone).
TANSU_SYNC_HOLD_MS = 3_000


class FetchWait:
    """The adaptive fetch wait: with :func:`leave_group_on_stop`, the only code that
    touches aiokafka's internals.

    aiokafka takes ``fetch_max_wait_ms`` at construction only, but its fetcher (the
    consumer's private ``_fetcher``) reads the value from its private
    ``_fetch_max_wait_ms`` into every fetch request. This adapter sets it per poll
    (see :class:`KafkaBus`): ``busy_ms`` while polls bring records, ``idle_ms`` once
    one comes back empty, and once polls have stayed empty for ``grow_after``
    seconds, double the last wait at each further empty poll up to ``ceiling_ms``
    (an idle consumer then sends a fetch request every ``ceiling_ms`` instead of
    every ``idle_ms``). It writes the attribute only when the wait changes. If a
    release of aiokafka no longer has the attribute, the consumer keeps the idle wait
    it was built with and this says so (tests/services/test_bus_contract.py checks
    the installed aiokafka still reads it per request).
    """

    #: The attribute of aiokafka's ``Fetcher`` read into each fetch request.
    ATTRIBUTE = "_fetch_max_wait_ms"

    def __init__(
        self,
        idle_ms: int,
        busy_ms: int,
        ceiling_ms: int | None = None,
        grow_after: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.idle_ms = idle_ms
        self.busy_ms = busy_ms
        self.ceiling_ms = idle_ms if ceiling_ms is None else max(idle_ms, ceiling_ms)
        self.grow_after = grow_after
        self._clock = clock
        self._fetcher: object | None = None
        #: The wait last written (the fetcher's, unless something else wrote it).
        self._ms = idle_ms
        #: When the current run of empty polls began (None: the last poll had records).
        self._empty_since: float | None = None

    def attach(self, consumer: AIOKafkaConsumer) -> bool:
        """Adapt a started consumer's fetcher; False, with a warning, if it has no
        per-request wait to adapt (the wait stays ``idle_ms``)."""
        fetcher = getattr(consumer, "_fetcher", None)
        if not isinstance(getattr(fetcher, self.ATTRIBUTE, None), int):
            log.warning(
                "this aiokafka has no per-request fetch wait: fetching with "
                "fetch_max_wait_ms=%d only",
                self.idle_ms,
            )
            self._fetcher = None
            return False
        self._fetcher = fetcher
        self._empty_since = None
        self._write(self.idle_ms, force=True)
        return True

    def records_came(self, came: bool) -> None:
        """The last poll returned records (``came``) or nothing: the next fetch's wait."""
        if came:
            self._empty_since = None
            self._write(self.busy_ms)
            return
        now = self._clock()
        if self._empty_since is None:
            self._empty_since = now
            self._write(self.idle_ms)
        elif now - self._empty_since >= self.grow_after:
            self._write(min(self.ceiling_ms, max(self.idle_ms, 2 * self._ms)))
        else:
            self._write(self.idle_ms)

    def restart(self) -> None:
        """Back to the short idle wait, the run of empty polls forgotten: fetching is
        paused or resumed. aiokafka sends no fetch to a broker while one is in flight
        to it, and a broker answers one connection's requests in order, so a partition
        resumed during a long fetch waits for it whatever the client does (cancelling
        the request does not help): a consumer that pauses once idle for less than
        ``grow_after`` (a replica's work consumer) never has a long fetch in flight."""
        self._empty_since = None
        self._write(self.idle_ms)

    def routine_timeout(self, ms: int) -> None:
        """Set how long the attached fetcher's routine waits when nothing wakes it
        (its private ``_fetcher_timeout``, seconds; :data:`FETCHER_TIMEOUT_MS`)."""
        if self._fetcher is not None and hasattr(self._fetcher, "_fetcher_timeout"):
            self._fetcher._fetcher_timeout = ms / 1000

    def _write(self, ms: int, *, force: bool = False) -> None:
        if self._fetcher is not None and (force or ms != self._ms):
            setattr(self._fetcher, self.ATTRIBUTE, ms)
        self._ms = ms

    @property
    def current_ms(self) -> int:
        """The maximum wait of the next fetch request (as the fetcher will send it)."""
        if self._fetcher is None:
            return self.idle_ms
        return int(getattr(self._fetcher, self.ATTRIBUTE))


#: The attribute of aiokafka's group coordinator holding the static member name.
GROUP_INSTANCE_ATTRIBUTE = "_group_instance_id"
#: The attribute of aiokafka's group coordinator holding the member's generation.
GENERATION_ATTRIBUTE = "generation"

#: How a group's partitions are shared out, preferred first. Sticky: a member joining
#: or leaving moves only the partitions that must move (round robin reshuffles most
#: of them, and every moved partition is a pause in its work); round robin still
#: agrees with members that only know it.
ASSIGNORS = (StickyPartitionAssignor, RoundRobinPartitionAssignor)


def leave_group_on_stop(consumer: AIOKafkaConsumer) -> bool:
    """Make a static member's stop send LeaveGroup; whether it will.

    aiokafka closes a static member (``group_instance_id``) without LeaveGroup, as
    KIP-345 intends for a process about to restart: its partitions then wait for
    its session to expire. A service that stops on SIGTERM may not come back, so it
    leaves: aiokafka's close sends LeaveGroup (by member id, which every broker
    version takes) once the coordinator (the consumer's private ``_coordinator``)
    has no instance name (and, on tansu, a generation above 0). A restart under the
    same name then rejoins with a rebalance, as a dynamic member would. If a release
    of aiokafka lacks the attribute, the member stops without leaving and this says so
    (tests/services/test_bus_contract.py checks the installed aiokafka has it).
    """
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None:
        return True  # never joined a group (assigned partitions only): nothing to leave
    if not hasattr(coordinator, GROUP_INSTANCE_ATTRIBUTE):
        log.warning("this aiokafka has no group instance to clear: stopping without LeaveGroup")
        return False
    setattr(coordinator, GROUP_INSTANCE_ATTRIBUTE, None)
    # aiokafka leaves only from generation 1 on (Apache Kafka's first); tansu numbers
    # a group's first generation 0, whose members would stop without LeaveGroup and
    # hold their share for a session. LeaveGroup carries no generation, so such a
    # member passes as generation 1. (A heartbeat sent meanwhile fails with an illegal
    # generation; aiokafka then forgets the member and skips LeaveGroup, as before.)
    if getattr(coordinator, GENERATION_ATTRIBUTE, None) == 0 and getattr(
        coordinator, "member_id", ""
    ):
        setattr(coordinator, GENERATION_ATTRIBUTE, 1)
    return True


def _bus_error(exc: BaseException) -> BusError:
    retriable = bool(getattr(exc, "retriable", True)) or isinstance(exc, OSError | TimeoutError)
    return BusError(f"kafka: {type(exc).__name__}: {exc}", retriable=retriable)


class KafkaBus(Bus):
    """Bus on a Kafka cluster given by bootstrap servers (``host:port[,host:port]``)."""

    def __init__(
        self,
        bootstrap: str,
        topics: TopicNames | None = None,
        client_id: str = "esched",
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        heartbeat_interval_ms: int | None = None,
        static_membership: bool = True,
        fetch_max_wait_ms: int = 20,
        fetch_max_wait_busy_ms: int = 40,
        fetch_max_wait_idle_ms: int = 200,
        fetch_wait_grow_after: float = 1.0,
        security: KafkaSecurity | None = None,
        work_partitions: int = DEFAULT_WORK_PARTITIONS,
        feed_retention_ms: int = DEFAULT_FEED_RETENTION_MS,
    ):
        self.bootstrap = bootstrap
        #: TLS and SASL settings; their client arguments are built (and checked: a
        #: missing file, a mechanism without credentials) here, once, for every client.
        self.security = security or KafkaSecurity()
        self.client_kwargs = self.security.client_kwargs()
        self.topics = topics or TopicNames()
        self.client_id = client_id
        #: How soon the group notices a dead member and hands its partitions over.
        self.session_timeout_ms = session_timeout_ms
        #: How often a member heartbeats: it learns of a rebalance (another member
        #: joined, left or died) at its next heartbeat. Default a sixth of the session
        #: (aiokafka's, like Java's, is a third: one lost heartbeat less of margin).
        if heartbeat_interval_ms is None:
            heartbeat_interval_ms = max(100, session_timeout_ms // 6)
        if not 0 < heartbeat_interval_ms < session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be > 0 and below session_timeout_ms")
        self.heartbeat_interval_ms = heartbeat_interval_ms
        if session_timeout_ms <= TANSU_SYNC_HOLD_MS + heartbeat_interval_ms:
            log.warning(
                "kafka: a session of %d ms is too short for some brokers: Apache Kafka "
                "refuses one below group.min.session.timeout.ms (6000 by default), and on "
                "tansu a group whose session is not above %d ms (its SyncGroup hold plus "
                "the heartbeat interval) rebalances forever",
                session_timeout_ms,
                TANSU_SYNC_HOLD_MS + heartbeat_interval_ms,
            )
        #: Static membership (KIP-345): consumers given an ``instance`` name join under
        #: it, so a process restarted within its session takes its old place without a
        #: rebalance (on Apache Kafka 2.3+). Off: every member is dynamic.
        self.static_membership = static_membership
        #: How long a rebalance waits for every member to rejoin. A member notices a
        #: rebalance at its next heartbeat and tansu holds each JoinGroup 5 s and a
        #: SyncGroup 3 s: with the session timeout as the bound, a member on a small CPU
        #: share (a replica capped at 0.02 CPU) rejoined just too late, was dropped,
        #: rejoined, and the group rebalanced every 15 s. The Java client's bound
        #: (max.poll.interval.ms) is 300 s; a dead member is still found by its session.
        self.rebalance_timeout_ms = max(rebalance_timeout_ms, session_timeout_ms)
        #: Longest a fetch waits on the broker for data. Kafka answers a waiting fetch as
        #: soon as data arrives, but not every broker does (tansu holds it for the full
        #: wait: ~130 ms median per hop at aiokafka's default 500 ms, ~11 ms at 20 ms),
        #: and a scheduling pipeline has four hops. The cost is a fetch request per
        #: consumer every 20 ms until its wait grows (``fetch_max_wait_idle_ms``).
        self.fetch_max_wait_ms = fetch_max_wait_ms
        #: The wait while records keep coming (the last poll returned some): fewer,
        #: larger fetches. tansu scans a partition's record batches on every fetch that
        #: returns data, so at 1,000 pods/s the 20 ms wait's extra fetches cost more
        #: broker CPU than they saved (end to end p99 101-115 ms at 40 against
        #: 158-162 at 20, alternated); an idle consumer is unaffected.
        self.fetch_max_wait_busy_ms = fetch_max_wait_busy_ms
        #: The ceiling of the wait of a consumer whose polls have stayed empty for
        #: ``fetch_wait_grow_after`` seconds: from then on each empty poll doubles the
        #: wait (20, 40, 80, 160, 200 ms), and the first records bring back the busy
        #: wait. Each fetch request costs the broker CPU whether or not it finds
        #: records: on tansu, 8 idle consumers took 25% of a core at 20 ms, 4.7% at
        #: 200 ms. Kafka answers a waiting fetch as soon as data arrives, so there
        #: the ceiling costs no latency; tansu answers on its own schedule (a record
        #: reached an idle consumer in 4-8 ms median up to 200 ms, 43 ms at 500 ms).
        if fetch_max_wait_idle_ms < fetch_max_wait_ms:
            raise ValueError("fetch_max_wait_idle_ms must be >= fetch_max_wait_ms")
        self.fetch_max_wait_idle_ms = fetch_max_wait_idle_ms
        #: How long polls stay empty before the wait grows. Above a replica's
        #: ``idle_after`` (0.5 s): its work consumer pauses before its wait grows, so
        #: a partition it resumes never waits behind a long fetch (see
        #: :meth:`FetchWait.restart`).
        self.fetch_wait_grow_after = fetch_wait_grow_after
        if work_partitions < 1:
            raise ValueError("work_partitions must be >= 1")
        self.work_partitions = work_partitions
        if feed_retention_ms < 1:
            raise ValueError("feed_retention_ms must be >= 1")
        #: The feed topic's ``retention.ms`` (and ``segment.ms``: a broker deletes
        #: whole segments only, and the feed's few messages would otherwise stay in
        #: one segment for the broker's default week) at its creation.
        self.feed_retention_ms = feed_retention_ms

    def producer(self) -> BusProducer:
        return _KafkaProducer(self)

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
        return _KafkaConsumer(
            self,
            tuple(topics),
            group,
            exclusive=exclusive,
            instance=instance,
            partitions=partitions,
            wait_ms=wait_ms,
            idle_wait=idle_wait,
        )

    def topics_to_create(self, existing: Collection[str], partitions: int) -> list[NewTopic]:
        """The creation requests :meth:`ensure_topics` sends for the topics not in
        ``existing``: the work topic with :attr:`work_partitions` partitions, the feed
        with one (it is in log order) and its retention, the others with
        ``partitions``."""
        t = self.topics
        wanted = [*t.inputs, t.proposals, t.decisions, t.deadletter, t.work, t.feed]
        counts = {t.work: self.work_partitions, t.feed: 1}
        retention = str(self.feed_retention_ms)
        configs = {t.feed: {"retention.ms": retention, "segment.ms": retention}}
        return [
            NewTopic(name, counts.get(name, partitions), 1, topic_configs=configs.get(name))
            for name in wanted
            if name not in existing
        ]

    async def ensure_topics(self, partitions: int = 3) -> None:
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap, client_id=self.client_id, **self.client_kwargs
        )
        try:
            await admin.start()
            existing = set(await admin.list_topics())
            missing = self.topics_to_create(existing, partitions)
            if missing:
                try:
                    await admin.create_topics(missing)
                except TopicAlreadyExistsError:
                    pass  # another process created them first
                log.info("created topics %s", [m.name for m in missing])
            if self.topics.work in existing:
                await self._check_work_partitions(admin)
        except KafkaError as exc:
            raise _bus_error(exc) from exc
        finally:
            await admin.close()

    async def _check_work_partitions(self, admin: AIOKafkaAdminClient) -> None:
        """Warn when the work topic has fewer partitions than configured: replicas
        beyond its partition count get no work (the topic is not altered here:
        more partitions move keys, an operator's decision)."""
        described = await admin.describe_topics([self.topics.work])
        found = len(described[0].get("partitions") or ()) if described else 0
        if 0 < found < self.work_partitions:
            log.warning(
                "work topic %s has %d partitions, fewer than the %d configured: at most "
                "%d replicas share work (kafka-topics --alter --partitions %d adds them)",
                self.topics.work,
                found,
                self.work_partitions,
                found,
                self.work_partitions,
            )


class _KafkaProducer(BusProducer):
    def __init__(self, bus: KafkaBus) -> None:
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bus.bootstrap,
            client_id=bus.client_id,
            acks="all",
            enable_idempotence=False,
            # No linger: aiokafka keeps one request in flight per broker, and what is
            # sent meanwhile waits in the accumulator and goes out as one batch, so
            # batches grow with load by themselves. A fixed linger only delayed every
            # small send (a work item, a proposal, a decision: four hops end to end).
            linger_ms=0,
            max_request_size=MAX_REQUEST_BYTES,
            # send_many hands over one batch per partition: room for a whole flush
            # (the broker's per-batch limit, message.max.bytes, is 1 MiB by default).
            max_batch_size=MAX_BATCH_BYTES,
            request_timeout_ms=15_000,
            # The default partitioner's partitions, with murmur2 in C (not pure Python).
            partitioner=partition,
            **bus.client_kwargs,
        )
        self._started = False
        self._handover = asyncio.Lock()

    async def start(self) -> None:
        # Started from the first attempt on: a start cancelled after aiokafka made its
        # sender task must still stop it, or the task is destroyed pending.
        self._started = True
        try:
            await self._producer.start()
        except (KafkaError, OSError) as exc:
            await self.stop()
            raise _bus_error(exc) from exc
        except BaseException:
            await asyncio.shield(self.stop())
            raise

    async def stop(self) -> None:
        if self._started:
            self._started = False
            # Shielded: a stop cancelled half way would leave the sender task running.
            await asyncio.shield(self._producer.stop())

    async def send_many(self, topic: str, records: Sequence[tuple[bytes | None, bytes]]) -> None:
        """Send records (see :meth:`_send`)."""
        await self._send(topic, [(key, value, ()) for key, value in records])

    async def send_with_headers(
        self, topic: str, records: Sequence[tuple[bytes | None, bytes, Headers]]
    ) -> None:
        """Send records with headers (see :meth:`_send`)."""
        await self._send(topic, records)

    async def _send(
        self, topic: str, records: Sequence[tuple[bytes | None, bytes, Headers]]
    ) -> None:
        """A few records go through aiokafka's ``send``; more are grouped by partition
        (the default partitioner's, in C) and handed over as one record batch per
        partition (``send_batch``), in order: ``send`` costs ~10 µs of Python per record
        (a coroutine, metadata and partition lookups, the accumulator), a batch
        builder's append ~1 µs. One caller at a time hands batches over: aiokafka lets
        one batch per partition wait to be sent, and concurrent callers waiting for that
        slot run out of time (its wait loop subtracts the elapsed time cumulatively)."""
        producer = self._producer
        try:
            if len(records) < BATCH_MIN_RECORDS:
                futures = [
                    await producer.send(topic, value, key=key, headers=list(headers) or None)
                    for key, value, headers in records
                ]
                await asyncio.gather(*futures)
                return
            parts = sorted(await producer.partitions_for(topic))
            available = sorted(
                producer.client.cluster.available_partitions_for_topic(topic) or parts
            )
            by_partition: dict[int, list[tuple[bytes | None, bytes, Headers]]] = {}
            for rec in records:
                by_partition.setdefault(partition(rec[0], parts, available), []).append(rec)
            futures = []
            async with self._handover:
                for p, recs in by_partition.items():
                    batch = producer.create_batch()
                    for key, value, headers in recs:
                        hs = list(headers)
                        if batch.append(timestamp=None, key=key, value=value, headers=hs) is None:
                            # Full: send it, start the next (a first record always fits).
                            batch.close()
                            futures.append(await producer.send_batch(batch, topic, partition=p))
                            batch = producer.create_batch()
                            batch.append(timestamp=None, key=key, value=value, headers=hs)
                    batch.close()  # closed: sent at once, no linger
                    futures.append(await producer.send_batch(batch, topic, partition=p))
            await asyncio.gather(*futures)
        except (KafkaError, OSError) as exc:
            raise _bus_error(exc) from exc


class _Moves(ConsumerRebalanceListener):
    """The share a member had, from aiokafka's revocation until the next assignment.

    aiokafka rebalances eagerly: every member gives up its whole share when the
    group starts a rebalance and gets the next one only when the group has rejoined
    (seconds on a broker that holds JoinGroup), fetching nothing meanwhile."""

    def __init__(self) -> None:
        self.moving: frozenset[tuple[str, int]] | None = None

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        # A first join revokes nothing: there is no share to keep working.
        self.moving = frozenset((tp.topic, tp.partition) for tp in revoked) or None
        if revoked:
            # Operators (and the recovery tests) see when a member stops fetching
            # for a rebalance and when it has a share again.
            log.info("group rebalancing: share of %d partitions revoked", len(revoked))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.moving = None
        log.info("group rebalanced: share of %d partitions assigned", len(assigned))


#: Consumers closing in the background (a reference keeps each task alive).
_closing: set[asyncio.Future] = set()


def _closed(task: asyncio.Future) -> None:
    _closing.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.debug("closing a cancelled consumer failed: %s", task.exception())


class _KafkaConsumer(BusConsumer):
    def __init__(
        self,
        bus: KafkaBus,
        topics: tuple[str, ...],
        group: str,
        *,
        exclusive: bool = False,
        instance: str | None = None,
        partitions: Sequence[tuple[str, int]] | None = None,
        wait_ms: int | None = None,
        idle_wait: tuple[int, float] | None = None,
    ) -> None:
        #: Exclusive: assign every partition (or ``partitions``) by hand at start (no
        #: group membership).
        self._assign = topics if exclusive else ()
        self._only = None if partitions is None else sorted(set(partitions))
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bus.bootstrap,
            client_id=bus.client_id,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=MAX_REQUEST_BYTES * 4,
            session_timeout_ms=bus.session_timeout_ms,
            heartbeat_interval_ms=bus.heartbeat_interval_ms,
            rebalance_timeout_ms=bus.rebalance_timeout_ms,
            fetch_max_wait_ms=bus.fetch_max_wait_ms,
            consumer_timeout_ms=FETCHER_TIMEOUT_MS,
            group_instance_id=instance if bus.static_membership else None,
            partition_assignment_strategy=ASSIGNORS,
            **bus.client_kwargs,
        )
        self._moves = _Moves()
        #: A getmany that outlasted its poll (caught in a rebalance), for the next poll.
        self._fetch: asyncio.Future | None = None
        if not exclusive:
            self._consumer.subscribe(list(topics), listener=self._moves)
        self._wait = (
            FetchWait(
                bus.fetch_max_wait_ms,
                bus.fetch_max_wait_busy_ms,
                bus.fetch_max_wait_idle_ms,
                bus.fetch_wait_grow_after,
            )
            if wait_ms is None
            else FetchWait(wait_ms, wait_ms)
            if idle_wait is None
            else FetchWait(wait_ms, wait_ms, idle_wait[0], idle_wait[1])
        )
        self._started = False
        self._paused = False

    async def start(self) -> None:
        try:
            await self._consumer.start()
            if self._assign:
                await self._consumer.topics()  # metadata of every topic
                parts: list[TopicPartition] = []
                for topic in self._assign:
                    found = self._consumer.partitions_for_topic(topic)
                    if not found:
                        raise BusError(
                            f"kafka: topic {topic} has no partitions (yet)", retriable=True
                        )
                    parts.extend(
                        TopicPartition(topic, p)
                        for p in sorted(found)
                        if self._only is None or (topic, p) in self._only
                    )
                # Positions start at the group's committed offsets (else earliest).
                self._consumer.assign(parts)
        except asyncio.CancelledError:
            # A replica stopped while its group join is under way: close in the
            # background (the broker may hold the join's answer for seconds).
            closing = asyncio.ensure_future(self._consumer.stop())
            _closing.add(closing)
            closing.add_done_callback(_closed)
            raise
        except BusError:
            await self._consumer.stop()
            raise
        except (KafkaError, OSError) as exc:
            await self._consumer.stop()
            raise _bus_error(exc) from exc
        self._wait.attach(self._consumer)
        self._started = True

    async def stop(self) -> None:
        """Leave the group (the broker hands its partitions to the others) and close."""
        if self._started:
            self._started = False
            if self._fetch is not None:
                fetch, self._fetch = self._fetch, None
                fetch.cancel()
                with contextlib.suppress(BaseException):
                    await fetch
            leave_group_on_stop(self._consumer)
            await self._consumer.stop()

    async def poll(self, timeout_ms: int, max_records: int) -> list[Message]:
        # During a rebalance aiokafka's getmany waits for the next assignment whatever
        # its timeout (seconds: tansu holds a JoinGroup 5 s, a SyncGroup 3 s); the
        # caller gets its empty poll in time instead, so it can work meanwhile. A
        # getmany caught in a rebalance is not cancelled (aiokafka's bookkeeping of
        # when the consumer last polled would never close) but awaited again by the
        # next poll.
        fetch = self._fetch
        if fetch is None:
            if self._moves.moving is not None:
                await asyncio.sleep(timeout_ms / 1000)
                return []
            fetch = asyncio.ensure_future(self._getmany(timeout_ms, max_records))
        self._fetch = fetch  # stop() ends it should this poll be cancelled
        done, _ = await asyncio.wait({fetch}, timeout=timeout_ms / 1000 + POLL_SLACK)
        if not done:
            return []
        if self._fetch is fetch:
            self._fetch = None
        if fetch.cancelled():
            return []  # stop() ended it: the consumer is closing
        try:
            batches = fetch.result()
        except (KafkaError, OSError) as exc:
            raise _bus_error(exc) from exc
        out: list[Message] = []
        for tp, records in batches.items():
            out.extend(
                Message(
                    tp.topic,
                    tp.partition,
                    r.offset,
                    r.key,
                    r.value or b"",
                    r.timestamp,
                    tuple(r.headers) if r.headers else (),
                )
                for r in records
            )
        return out

    async def _getmany(
        self, timeout_ms: int, max_records: int
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """aiokafka's getmany, then the next fetch request's wait (longer while records
        keep coming, short again once a poll finds nothing, growing while polls keep
        finding nothing). Set here, in the same step: aiokafka's fetcher sends the next
        request as soon as records are taken, before the poll awaiting this resumes, and
        the first fetch of a burst would still wait the idle ceiling."""
        batches = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        self._wait.records_came(bool(batches))
        return batches

    async def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        try:
            await self._consumer.commit(
                {TopicPartition(t, p): off for (t, p), off in offsets.items()}
            )
        except (KafkaError, OSError) as exc:
            # After a rebalance the commit fails; the messages are redelivered to the new
            # owner, and the store's idempotence makes that harmless.
            raise _bus_error(exc) from exc

    def assignment(self) -> frozenset[tuple[str, int]]:
        return frozenset((tp.topic, tp.partition) for tp in self._consumer.assignment())

    def moving_share(self) -> frozenset[tuple[str, int]] | None:
        return self._moves.moving

    async def bounds(self) -> dict[tuple[str, int], tuple[int, int]]:
        parts = list(self._consumer.assignment())
        if not parts:
            return {}
        try:
            first = await self._consumer.beginning_offsets(parts)
            end = await self._consumer.end_offsets(parts)
        except (KafkaError, OSError) as exc:
            raise _bus_error(exc) from exc
        return {(tp.topic, tp.partition): (first[tp], end[tp]) for tp in parts}

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._consumer.seek(TopicPartition(topic, partition), offset)

    def pause_fetching(self) -> None:
        # aiokafka's fetcher sends no fetch request for a paused partition; a
        # rebalance's new assignment starts unpaused (fetching: never silently deaf).
        self._paused = True
        self._wait.restart()
        self._wait.routine_timeout(PAUSED_FETCHER_TIMEOUT_MS)
        self._consumer.pause(*self._consumer.assignment())

    def resume_fetching(self) -> None:
        self._paused = False
        self._wait.restart()
        self._wait.routine_timeout(FETCHER_TIMEOUT_MS)
        self._consumer.resume(*self._consumer.paused())

    @property
    def fetching(self) -> bool:
        return not self._paused

    @property
    def fetch_wait_ms(self) -> int:
        """The maximum wait of the next fetch request (see :class:`KafkaBus`)."""
        return self._wait.current_ms

    async def lag(self) -> int:
        total = 0
        for tp in self._consumer.assignment():
            high = self._consumer.highwater(tp)
            if high is None:
                continue
            total += max(0, high - await self._consumer.position(tp))
        return total
