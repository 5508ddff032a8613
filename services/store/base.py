"""The event store port: one ordered, append-only log of CloudEvents.

Every adapter (``postgres.py``, ``sqlite.py``) implements :class:`EventStore` and
passes the same contract suite (``tests/contract/test_store_contract.py``).

Semantics every adapter guarantees:

* **Idempotent on event id.** A duplicate id (already stored, or repeated inside
  one batch) is acknowledged with the position it already has, never stored twice.
* **Gap-free global position** 1, 2, 3, ... assigned in commit order, so a reader
  that sees position N has seen every position below N.
* **Per-stream version** 1, 2, ... with optimistic concurrency: an event with
  ``expected_version`` is only stored if its stream is at that version; a mismatch
  raises :class:`ConflictError` and nothing of the batch is stored.
* **Conditional append on the log head**: ``append(events, expected_head=N)``
  stores the batch only if the head (last position) is ``N`` at append time, else
  raises :class:`HeadConflictError` and nothing is stored. A writer that validated
  the batch against the log up to ``N`` so knows no event got in between.
* **Atomic batches**: all of an append or nothing.

Errors: adapters translate driver errors in one place into :class:`StoreError`
(and its subclasses). Only :class:`TransientStoreError` is worth retrying.
"""

from __future__ import annotations

import abc
import asyncio
import math
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from esched.services.retry import Backoff, retry_until
from esched.services.store.chain import SEPARATOR, ChainReport, verify_store

__all__ = [
    "AppendResult",
    "ConflictError",
    "EventStore",
    "HeadConflictError",
    "NewEvent",
    "StoreConfigError",
    "StoreError",
    "StoredEvent",
    "Subscription",
    "TransientStoreError",
    "Waker",
    "redact_url",
    "retry_store_op",
    "scrub",
]

T = TypeVar("T")

#: The PostgreSQL NOTIFY channel appends signal on (payload: the new head).
NOTIFY_CHANNEL = "esched_events"
#: Subscriptions re-read at least this often even without a signal: a NOTIFY can
#: be lost with its connection, and other processes may append to a SQLite file.
DEFAULT_POLL_INTERVAL = 1.0


# --------------------------------------------------------------------------- errors


class StoreError(Exception):
    """Any failure of the event store that is not worth retrying as is."""


class TransientStoreError(StoreError):
    """Connection lost, server shutting down, serialization failure, lock timeout.

    The operation may be retried (appends are idempotent on event id, so retrying
    an append whose commit may or may not have happened is safe).
    """


class ConflictError(StoreError):
    """An ``expected_version`` did not match the stream's version; nothing was stored."""

    def __init__(self, stream: str, expected: int, actual: int) -> None:
        super().__init__(
            f"stream {stream!r} is at version {actual}, expected {expected}; batch not stored"
        )
        self.stream = stream
        self.expected = expected
        self.actual = actual

    def __reduce__(self):  # keep pickling (e.g. across processes) working with 3 args
        return (type(self), (self.stream, self.expected, self.actual))


class HeadConflictError(StoreError):
    """An ``expected_head`` did not match the log head; nothing was stored."""

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(f"log head is at {actual}, expected {expected}; batch not stored")
        self.expected = expected
        self.actual = actual

    def __reduce__(self):  # keep pickling working with 2 args
        return (type(self), (self.expected, self.actual))


class StoreConfigError(StoreError):
    """The store cannot be configured as asked (bad URL, unknown scheme, bad option)."""


# --------------------------------------------------------------------------- records


class NewEvent(NamedTuple):
    """An event to append.

    ``payload`` is the whole CloudEvents envelope as JSON bytes; the store keeps it
    opaque (bytes in, the same bytes out) so replay can decode it however it likes.
    (A named tuple: one is built per event appended, at a third of a frozen
    dataclass's cost.)
    """

    id: str  #: CloudEvents id, the idempotency key
    type: str
    stream: str  #: e.g. "pod/ns/name" (esched.schemas.events.stream_of)
    payload: bytes
    time: datetime | None = None  #: the envelope's time, if any
    #: Optimistic concurrency: the stream's version before this event (0 = new stream).
    expected_version: int | None = None


class StoredEvent(NamedTuple):
    """An event as the log holds it (a named tuple: every follower of the log builds
    one per event read, at a quarter of a frozen dataclass's cost)."""

    position: int
    id: str
    type: str
    stream: str
    stream_version: int
    time: datetime | None
    recorded_at: datetime
    payload: bytes


@dataclass(frozen=True, slots=True)
class AppendResult:
    """The answer to an append."""

    #: Per input event, in input order; for a duplicate id, the position it already has.
    positions: list[int]
    #: How many inputs were already stored (or repeated inside the batch).
    duplicates: int
    #: Log head after the append.
    head: int


# --------------------------------------------------------------------------- helpers


#: URL query parameters whose values are secrets (libpq's ``password``, the TLS
#: client key's ``sslpassword``).
_SECRET_PARAMS = re.compile(r"([?&](?:ssl)?password=)([^&#]*)", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (with or without a scheme, and
    whatever the password contains; in the query too), for messages, logs and reprs."""
    url = _SECRET_PARAMS.sub(r"\1***", url)
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    creds, at, host = rest.rpartition("@")
    if not at or ":" not in creds:
        return url
    return f"{scheme}{sep}{creds.split(':', 1)[0]}:***@{host}"


def scrub(text: str, url: str) -> str:
    """``text`` (a driver's error message about ``url``) without the URL's password
    or any piece of it a parser may have quoted (split at ``/ : @ ? #``)."""
    for m in _SECRET_PARAMS.finditer(url):
        if len(m.group(2)) >= 2:
            text = text.replace(m.group(2), "***")
    rest = url.partition("://")[2] or url
    creds, at, _host = rest.rpartition("@")
    if not at or ":" not in creds:
        return text
    password = creds.split(":", 1)[1]
    pieces = [password, *(p for p in re.split(r"[/:@?#]", password) if len(p) >= 2)]
    for piece in sorted(pieces, key=len, reverse=True):
        if piece:
            text = text.replace(piece, "***")
    return text


def as_utc(when: datetime) -> datetime:
    """``when`` as an aware UTC datetime; a naive datetime is taken to be UTC."""
    tz = when.tzinfo
    if tz is UTC:  # the common case (every parsed "Z" / "+00:00"): nothing to convert
        return when
    if tz is None:
        return when.replace(tzinfo=UTC)
    return when.astimezone(UTC)


@dataclass(slots=True)
class PlannedAppend:
    """What an append will store, computed once the appender holds the log lock.

    Shared by the adapters so the duplicate / version rules live in one place.
    """

    positions: list[int]
    duplicates: int
    #: (index into the input, position, stream_version) of each event to store.
    rows: list[tuple[int, int, int]]
    head: int


def plan_append(
    events: Sequence[NewEvent],
    head: int,
    existing: dict[str, int],
    versions: dict[str, int],
    expected_head: int | None = None,
) -> PlannedAppend:
    """Assign positions and stream versions to a batch.

    ``existing`` maps already stored ids (of this batch) to their positions;
    ``versions`` maps each stream of the batch to its current version (missing = 0).
    Raises :class:`ConflictError` on the first expected-version mismatch, then
    :class:`HeadConflictError` if ``expected_head`` is given, the batch has
    anything new to store and ``head`` is not ``expected_head``.
    """
    positions: list[int] = []
    rows: list[tuple[int, int, int]] = []
    seen: dict[str, int] = dict(existing)
    current = dict(versions)
    duplicates = 0
    pos = head
    for i, ev in enumerate(events):
        known = seen.get(ev.id)
        if known is not None:
            # A duplicate is an answer, not an error: no version check either,
            # so a retried append whose first attempt committed is acknowledged.
            positions.append(known)
            duplicates += 1
            continue
        version = current.get(ev.stream, 0)
        if ev.expected_version is not None and ev.expected_version != version:
            raise ConflictError(ev.stream, ev.expected_version, version)
        pos += 1
        version += 1
        current[ev.stream] = version
        seen[ev.id] = pos
        positions.append(pos)
        rows.append((i, pos, version))
    if rows and expected_head is not None and expected_head != head:
        raise HeadConflictError(expected_head, head)
    return PlannedAppend(positions, duplicates, rows, pos)


_PAYLOAD_TYPES = (bytes, bytearray, memoryview)  # a tuple: isinstance is faster than on a union


def validate_events(events: Sequence[NewEvent]) -> None:
    """Reject malformed input early with a clear message (a bug, not a store error)."""
    for ev in events:
        if not isinstance(ev.payload, _PAYLOAD_TYPES):
            raise TypeError(f"event {ev.id!r}: payload must be bytes, not {type(ev.payload)}")
        if not ev.id:
            raise ValueError("event id must be a non-empty string")
        if SEPARATOR in ev.id or SEPARATOR in ev.type or SEPARATOR in ev.stream:
            # It separates these fields in the hash chain's digest (.chain).
            raise ValueError(f"event {ev.id!r}: U+001F in its id, type or stream")
        if ev.expected_version is not None and ev.expected_version < 0:
            raise ValueError(f"event {ev.id!r}: expected_version must be >= 0")


def validate_expected_head(expected_head: int | None) -> None:
    """Reject a malformed ``expected_head`` early (a bug, not a store error)."""
    if expected_head is not None and (
        isinstance(expected_head, bool) or not isinstance(expected_head, int) or expected_head < 0
    ):
        raise ValueError(f"expected_head must be an int >= 0 or None, not {expected_head!r}")


async def retry_store_op(
    fn: Callable[[], Awaitable[T]],
    *,
    attempts: int = 5,
    base_delay: float = 0.05,
    max_delay: float = 2.0,
) -> T:
    """Call ``fn()`` until it succeeds, retrying only :class:`TransientStoreError`,
    at most ``attempts`` times.

    For a store client that gives up after a bounded wait (tools, tests). A
    service that must outlive an outage retries forever with
    :func:`esched.services.faults.retry_transient`; both share one backoff policy.

    Capped exponential backoff with jitter (:mod:`esched.services.retry`), so many
    clients reconnecting after an outage do not stampede the server.
    :class:`ConflictError` and every other error propagate at once. After
    ``attempts`` failures the last :class:`TransientStoreError` is raised.
    """
    if attempts < 1:
        raise ValueError("attempts must be >= 1")
    return await retry_until(
        fn,
        retriable=lambda exc: isinstance(exc, TransientStoreError),
        what="store operation",
        backoff=Backoff(base=base_delay, cap=max_delay),
        attempts=attempts,
    )


# --------------------------------------------------------------------------- subscriptions


class Waker(abc.ABC):
    """How an adapter tells a subscription that the log may have grown."""

    @abc.abstractmethod
    async def start(self, wake: asyncio.Event) -> None:
        """Begin setting ``wake`` on appends; raise TransientStoreError if impossible now."""

    @property
    @abc.abstractmethod
    def alive(self) -> bool:
        """False once the signal source is lost (e.g. the LISTEN connection dropped)."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop signalling and release resources; idempotent."""

    #: Whether :meth:`read_payloads` reads the log over the waker's own connection:
    #: a subscription's reads then skip the store's pool.
    reads_payloads: bool = False

    async def read_payloads(self, after: int, limit: int) -> list[tuple[int, bytes]]:
        """:meth:`EventStore.read_payloads` over the signal source's connection, for a
        waker with :attr:`reads_payloads` while :attr:`alive`."""
        raise NotImplementedError

    def read_begins(self) -> None:  # noqa: B027 - optional: a waker that polls compares nothing
        """A read of the log begins: what :meth:`may_have_grown` compares with."""

    def may_have_grown(self) -> bool:
        """After a wait of ``poll_interval`` without a wake-up: whether the log may have
        grown, unsignalled, since the last read began (False: the subscription skips
        that poll's read and waits again). By default always: every poll reads."""
        return True


class Subscription(AsyncIterator[list[StoredEvent]]):
    """Catch up from a position, then follow the log live.

    Each ``__anext__`` returns the next non-empty batch (at most ``batch`` events,
    contiguous positions). It never skips or repeats an event: the next read always
    starts right after the last position handed out, and positions are gap-free
    and commit-ordered. Safe to cancel while waiting; use ``async with`` (or
    ``aclose()``) to release the live connection promptly.

    A lost signal source (dropped LISTEN connection) or a transient read failure is
    survived: the subscription backs off, reconnects and re-reads from the last
    position; polling every ``poll_interval`` seconds covers a lost signal.

    ``payloads``: batches of ``(position, payload)`` pairs (:meth:`EventStore.read_payloads`)
    instead of whole rows, for a follower that only folds bytes (no ids, times or
    types to decode per row). ``min_interval``: start reads at most this often (s) once
    caught up: under load every append signals, and reading after each one costs a
    round trip per append; waiting out the rest of the interval gathers the appends
    of that time into one read (catch-up, with full batches, never waits).
    ``busy_interval``: the least time between reads after one that found at least
    ``busy_rows`` events: under a burst a read's fixed cost (~100 µs of client CPU,
    more than the rows it brings) is spread over more rows; at light load reads
    stay ``min_interval`` apart.
    """

    def __init__(
        self,
        store: EventStore,
        waker: Waker,
        after: int,
        batch: int,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        on_close: Callable[[Subscription], None] | None = None,
        *,
        payloads: bool = False,
        min_interval: float = 0.0,
        busy_interval: float = 0.0,
        busy_rows: int = 64,
    ) -> None:
        if after < 0 or batch < 1:
            raise ValueError("after must be >= 0 and batch >= 1")
        self._store = store
        self._waker = waker
        self._wake = asyncio.Event()
        self._started = False
        self._closed = False
        # Reads failing transiently back off up to 0.04 s, 0.08 s, ... (Backoff), at most
        # the poll interval (the wait without a wake-up).
        self._retry = Backoff(base=0.04, cap=poll_interval)
        self.position = after  #: last position handed out
        self.batch = batch
        self.poll_interval = poll_interval
        self._on_close = on_close  # lets the store forget (and not re-close) us
        self._payloads = payloads
        self.min_interval = min_interval
        self.busy_interval = max(busy_interval, min_interval)
        self.busy_rows = busy_rows
        self._read_at = -math.inf  # monotonic time the last read that found little began
        self._gap = min_interval  # least time from that read to the next
        #: Reads issued so far (a follower's cost while idle is counted by this).
        self.reads = 0
        #: Rows those reads brought: with ``reads``, the rows a read gathers.
        self.rows = 0
        #: Polls whose read the waker ruled out (:meth:`Waker.may_have_grown`).
        self.polls_skipped = 0

    def __aiter__(self) -> Subscription:
        return self

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop following the log; idempotent."""
        self._closed = True
        self._started = False
        self._wake.set()  # a concurrent __anext__ returns at once, not after a poll
        await self._waker.stop()
        if self._on_close is not None:
            self._on_close(self)

    async def _backoff(self) -> None:
        self._retry.cap = self.poll_interval
        await asyncio.sleep(self._retry.next_delay())

    async def __anext__(self) -> list[StoredEvent]:
        while True:
            if self._closed:
                raise StopAsyncIteration
            if not self._started or not self._waker.alive:
                # (Re)establish the signal source BEFORE reading, so an append that
                # commits during the read still wakes the wait below.
                await self._waker.stop()
                try:
                    await self._waker.start(self._wake)
                    self._started = True
                except TransientStoreError:
                    self._started = False  # poll until the source is back
            if self._gap > 0:
                wait = self._read_at + self._gap - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                    if self._closed:
                        raise StopAsyncIteration
            self._wake.clear()
            began = time.monotonic()
            self._waker.read_begins()
            self.reads += 1
            try:
                if not self._payloads:
                    events: list[Any] = await self._store.read(self.position, self.batch)
                elif self._waker.reads_payloads and self._waker.alive:
                    # Over the LISTEN connection: a pool checkout and return cost a
                    # read more client CPU than the query (~50 µs).
                    events = await self._waker.read_payloads(self.position, self.batch)
                else:
                    events = await self._store.read_payloads(self.position, self.batch)
            except TransientStoreError:
                await self._backoff()
                continue
            self._retry.reset()
            self.rows += len(events)
            # A full batch is catch-up: the next read follows at once.
            self._read_at = -math.inf if len(events) >= self.batch else began
            self._gap = self.busy_interval if len(events) >= self.busy_rows else self.min_interval
            if events:
                self.position = events[-1][0]  # position: a row's and a pair's first field
                return events
            await self._wait_for_growth()

    async def _wait_for_growth(self) -> None:
        """Wait for a wake-up, or for a poll at which the waker cannot rule out that
        the log grew unsignalled (a lost NOTIFY, another process's SQLite append)."""
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self.poll_interval)
                return
            except TimeoutError:
                if self._closed or not self._waker.alive or self._waker.may_have_grown():
                    return
                self.polls_skipped += 1


# --------------------------------------------------------------------------- the port


class EventStore(abc.ABC):
    """The event log: append-only, totally ordered, idempotent on event id.

    Use as ``async with open_store(url) as store:`` or call :meth:`connect` and
    :meth:`close`. :meth:`migrate` must have run once against the database.
    """

    async def __aenter__(self) -> EventStore:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @abc.abstractmethod
    async def connect(self) -> None:
        """Open connections. Raises TransientStoreError if the server is unreachable."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close connections and live subscriptions; idempotent."""

    @abc.abstractmethod
    async def migrate(self) -> list[str]:
        """Apply the versioned SQL migrations not yet applied; return their names.

        Idempotent (a second run applies nothing and returns ``[]``); safe when
        several processes run it at once.
        """

    @abc.abstractmethod
    async def append(
        self, events: Sequence[NewEvent], *, expected_head: int | None = None
    ) -> AppendResult:
        """Append a batch atomically (all or nothing).

        Duplicate ids (already stored, or repeated in the batch) are acknowledged
        with their existing position and counted in ``duplicates``. Raises
        :class:`ConflictError` on an expected-version mismatch (nothing stored) and
        :class:`TransientStoreError` when the outcome is unknown and may be retried.

        ``expected_head``: if given, the batch is stored only if the log head (the
        last position, 0 when empty) is exactly that at append time, checked under
        the same lock that orders appends; otherwise :class:`HeadConflictError`
        (carrying the expected and actual head) is raised and nothing is stored. A
        batch with nothing new to store (empty, or only duplicate ids) is
        acknowledged without the check, like the version check, so retrying an
        append whose first attempt committed is answered, not refused. An
        expected-version mismatch is reported first (:class:`ConflictError`).
        """

    @abc.abstractmethod
    async def read(
        self, after: int = 0, limit: int = 10_000, upto: int | None = None
    ) -> list[StoredEvent]:
        """Events with ``after < position <= upto`` (no upper bound if None), in order,
        at most ``limit`` of them."""

    @abc.abstractmethod
    async def read_payloads(
        self, after: int, limit: int, upto: int | None = None
    ) -> list[tuple[int, bytes]]:
        """Like :meth:`read` but only ``(position, payload)``: the fast path for replay."""

    @abc.abstractmethod
    async def read_streams(
        self, streams: Sequence[str], types: Sequence[str], upto: int
    ) -> list[tuple[int, str, str, bytes]]:
        """``(position, stream, type, payload)`` of the events of ``streams`` whose type is one of
        ``types``, at positions up to ``upto``, in log order (by the stream index: a
        replica that follows the feed reads its work's pod submissions so)."""

    @abc.abstractmethod
    async def head(self) -> int:
        """The last position in the log (0 when empty)."""

    @abc.abstractmethod
    async def chain_rows(self, after: int, limit: int) -> list[tuple[int, bytes | None, bytes]]:
        """``(position, stored hash, digest)`` of the events with ``after < position <=
        after + limit``, in order: the hash chain's links (:mod:`.chain`), the digest
        computed from the row as stored."""

    @abc.abstractmethod
    async def head_hash(self) -> tuple[int, bytes | None]:
        """The log head's position and the hash stored with it."""

    async def verify(self, upto: int | None = None) -> ChainReport:
        """Walk the hash chain up to the head (or ``upto``); the report names the
        first position where it breaks (an edited, deleted or inserted row)."""
        return await verify_store(self.chain_rows, self.head_hash, upto=upto)

    @abc.abstractmethod
    async def position_at(self, when: datetime) -> int:
        """The last position recorded at or before ``when`` (0 if none).

        A naive ``when`` is taken to be UTC.
        """

    @abc.abstractmethod
    def subscribe(
        self,
        after: int,
        batch: int = 1000,
        *,
        payloads: bool = False,
        min_interval: float = 0.0,
        busy_interval: float = 0.0,
    ) -> Subscription:
        """Follow the log from ``after``: catch up, then live. See :class:`Subscription`
        (``payloads``: ``(position, payload)`` pairs instead of rows; ``min_interval``,
        ``busy_interval``: the least time between live reads, at light load and in a
        burst)."""

    @abc.abstractmethod
    async def save_snapshot(self, name: str, position: int, data: bytes) -> None:
        """Store folded state ``data`` of snapshot series ``name`` as of ``position``.

        Saving the same (name, position) again replaces the data.
        """

    @abc.abstractmethod
    async def load_snapshot(self, name: str, upto: int | None = None) -> tuple[int, bytes] | None:
        """The newest snapshot of ``name`` at a position <= ``upto`` (any if None),
        as ``(position, data)``, or None."""

    @abc.abstractmethod
    async def prune_snapshots(self, name: str, keep: int = 3) -> int:
        """Delete all but the newest ``keep`` snapshots of ``name``; return how many went."""


# --------------------------------------------------------------------------- migrations

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def load_migrations(dialect: str) -> list[tuple[str, str]]:
    """The versioned migrations of ``dialect`` as ``(name, sql)``, oldest first.

    Files are ``migrations/<dialect>/NNNN_what.sql``; the name is the file stem and
    the order is the file name's. Applied names are kept in ``schema_migrations``.
    """
    folder = MIGRATIONS_DIR / dialect
    files = sorted(folder.glob("*.sql"))
    if not files:
        raise StoreConfigError(f"no migrations found in {folder}")
    return [(f.stem, f.read_text(encoding="utf-8")) for f in files]
