"""PostgreSQL event store (asyncpg): the system of record.

Appends are serialized by a row lock on the one-row ``log_head`` table, held for the
whole append transaction: positions are gap-free and commit order is position
order, so a reader never sees N+1 before N. New rows go in with one COPY per batch;
the duplicate and stream-version lookup is one round trip. ``NOTIFY esched_events``
inside the transaction (delivered on commit) wakes subscribers, which also poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from operator import itemgetter
from typing import Any, ParamSpec, TypeVar

import asyncpg
import asyncpg.exceptions as pgx

from ._chain import COPY_COLUMNS, CopyChain
from .base import (
    DEFAULT_POLL_INTERVAL,
    NOTIFY_CHANNEL,
    AppendResult,
    EventStore,
    NewEvent,
    StoreConfigError,
    StoredEvent,
    StoreError,
    Subscription,
    TransientStoreError,
    Waker,
    as_utc,
    load_migrations,
    plan_append,
    redact_url,
    scrub,
    validate_events,
    validate_expected_head,
)
from .chain import (
    VERIFY_BATCH,
    VERIFY_PARALLEL,
    ZERO_HASH,
    ChainReport,
    chain_hashes,
    link,
    past_the_head,
    row_digest,
)

__all__ = ["CHAIN_COPY", "PostgresEventStore"]

#: With the LISTEN connection up, how often (s) a subscription reads the log without
#: a notification (instead of every ``poll_interval``): only for a connection that
#: died without asyncpg noticing (see :meth:`_ListenWaker.may_have_grown`).
LISTEN_POLL_INTERVAL = 30.0

P = ParamSpec("P")
R = TypeVar("R")

#: pg_advisory_lock key serializing concurrent `migrate` runs ("esched" in ASCII).
MIGRATE_LOCK_KEY = 0x65736368_6564
#: application_name of the store's connections, so operators (and the fault
#: tests) can tell the pool's connections from a subscriber's LISTEN connection.
POOL_APP_NAME = "esched-store"
LISTEN_APP_NAME = "esched-subscriber"
_MAX_POSITION = 2**63 - 1

_COLUMNS = (
    "position",
    "id",
    "type",
    "stream",
    "stream_version",
    "time",
    "recorded_at",
    "payload",
    "hash",
)
_SELECT_EVENT = (
    "SELECT position, id, type, stream, stream_version, time, recorded_at, payload FROM events"
)

# FOR UPDATE waits for the previous appender to commit, then returns the row
# version it wrote (READ COMMITTED re-check), so the head read here is current.
_LOCK_HEAD = (
    "SELECT position, recorded_at, clock_timestamp(), hash FROM log_head WHERE one FOR UPDATE"
)
# The chain's rows as the client hashes them (services/store/_chain.pyx).
_CHAIN_SELECT = "SELECT position, stream_version, id, type, stream, payload, hash FROM events"
#: One range of the chain for CopyChain, its predecessor (lo) included; in the primary
#: key's order, since an UPDATE moves a row in the heap. lo and hi are ints (COPY
#: takes no parameters). Public for ``esched bench verify``'s transport baseline.
CHAIN_COPY = (
    f"SELECT {COPY_COLUMNS} FROM events"
    " WHERE position >= {lo} AND position <= {hi} ORDER BY position"
)
# Which ids of the batch are stored, and each stream's version: one round trip.
# The per-stream max() is an index-only backward scan of (stream, stream_version).
_LOOKUP = """
SELECT true, e.id, e.position FROM events AS e WHERE e.id = ANY($1::text[])
UNION ALL
SELECT false, s.stream, (SELECT max(v.stream_version) FROM events AS v WHERE v.stream = s.stream)
FROM unnest($2::text[]) AS s(stream)
"""
_ADVANCE = (
    "WITH h AS (UPDATE log_head SET position = $1, recorded_at = $2, hash = $4 WHERE one)"
    f" SELECT pg_notify('{NOTIFY_CHANNEL}', $3::text)"
)

# Errors after which the operation may succeed if retried. Connection classes
# also mean the pool's other idle connections are probably dead too.
_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    pgx.PostgresConnectionError,  # incl. ConnectionDoesNotExistError
    pgx.AdminShutdownError,
    pgx.CrashShutdownError,
    pgx.CannotConnectNowError,
    asyncpg.InterfaceError,
    # A backend killed while the connection sat idle in the pool leaves asyncpg's
    # protocol confused ("cannot switch to state ..."): the connection is dead.
    asyncpg.exceptions.InternalClientError,
    OSError,
    TimeoutError,
)
_TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    *_CONNECTION_ERRORS,
    pgx.TransactionRollbackError,  # serialization failure, deadlock detected
    pgx.OperatorInterventionError,  # query canceled (statement timeout)
    pgx.LockNotAvailableError,
    pgx.TooManyConnectionsError,
    pgx.InsufficientResourcesError,
)


def _lost_connection(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection (or the server behind it) is gone."""
    if isinstance(exc, _CONNECTION_ERRORS):
        return True
    # ALTER DATABASE ... ALLOW_CONNECTIONS false (maintenance) is SQLSTATE 55000,
    # a class shared with real bugs, so it is told apart by its message. A
    # read-only transaction error means we reached a demoted primary (failover).
    if isinstance(exc, pgx.ObjectNotInPrerequisiteStateError):
        return "not currently accepting connections" in str(exc)
    return isinstance(exc, pgx.ReadOnlySQLTransactionError)


_DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    OSError,
    TimeoutError,
)


def _translated(fn: Callable[P, Awaitable[R]] | None = None, *, idempotent: bool = False) -> Any:
    """Run a method with driver errors translated by :meth:`PostgresEventStore._translate`.

    ``idempotent`` methods (reads) are retried once, at once, after a lost
    connection: the pool has then replaced its dead connections, and a stale
    pooled connection should not fail a read. Appends are not retried here: the
    caller decides (``retry_store_op``), and a retry is safe since ids dedupe.
    """

    def decorate(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            self: PostgresEventStore = args[0]  # type: ignore[assignment]
            try:
                return await fn(*args, **kwargs)
            except _DRIVER_ERRORS as exc:
                err = await self._translate(exc)
                if not (idempotent and _lost_connection(exc)):
                    raise err from exc
            try:
                return await fn(*args, **kwargs)
            except _DRIVER_ERRORS as exc:
                raise await self._translate(exc) from exc

        return wrapper

    return decorate if fn is None else decorate(fn)


class PostgresEventStore(EventStore):
    """The event store on PostgreSQL (``postgresql://user@host:port/db``).

    ``min_size``/``max_size`` size the connection pool; ``command_timeout`` (s)
    bounds each statement; ``poll_interval`` (s) is the subscriptions' safety net.
    """

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        command_timeout: float | None = 60.0,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        if not url.startswith(("postgresql://", "postgres://")):
            raise StoreConfigError(f"not a PostgreSQL URL: {redact_url(url)!r}")
        self.url = url
        self._min_size = min_size
        self._max_size = max_size
        self._command_timeout = command_timeout
        self._poll_interval = poll_interval
        self._pool: asyncpg.Pool | None = None
        self._closed = False
        self._subscriptions: set[Subscription] = set()

    def __repr__(self) -> str:
        return f"PostgresEventStore({_redact(self.url)!r})"

    # ------------------------------------------------------------------ errors

    async def _translate(self, exc: BaseException) -> StoreError:
        """A driver error raised by an operation, as a store error (see :func:`_translate`)."""
        if self._closed or self._pool is None:
            return StoreError("event store is closed" if self._closed else "store not connected")
        if _lost_connection(exc):
            # The server restarted or our backends were killed: every idle pooled
            # connection is likely dead as well; have the pool replace them all
            # so the caller's retry does not meet another corpse.
            with contextlib.suppress(Exception):
                await self._pool.expire_connections()
        return _translate(exc)

    def _require_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreError("event store is closed" if self._closed else "store not connected")
        return self._pool

    # ------------------------------------------------------------------ lifecycle

    async def connect(self) -> None:
        """Create the connection pool (idempotent while open)."""
        if self._closed:
            raise StoreError("event store is closed")
        if self._pool is not None:
            return
        try:
            self._pool = await asyncpg.create_pool(
                self.url,
                min_size=self._min_size,
                max_size=self._max_size,
                command_timeout=self._command_timeout,
                server_settings={"application_name": POOL_APP_NAME},
                reset=_no_session_state,
            )
        except _DRIVER_ERRORS as exc:
            raise _translate(exc, "cannot connect: ") from exc
        except ValueError as exc:  # asyncpg's DSN parser
            raise StoreConfigError(
                f"bad PostgreSQL URL {_redact(self.url)!r}: {scrub(str(exc), self.url)}"
            ) from None

    async def close(self) -> None:
        """Close live subscriptions and the pool; idempotent."""
        self._closed = True
        for sub in list(self._subscriptions):
            await sub.aclose()
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), 5)
            except _DRIVER_ERRORS:  # TimeoutError included
                pool.terminate()

    @_translated
    async def migrate(self) -> list[str]:
        """Apply pending migrations under an advisory lock; see :meth:`EventStore.migrate`."""
        applied: list[str] = []
        async with self._require_pool().acquire() as conn:
            # A session lock, released below or when the connection dies: two
            # processes migrating at once run one after the other.
            await conn.execute("SELECT pg_advisory_lock($1)", MIGRATE_LOCK_KEY)
            try:
                await conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    " name text PRIMARY KEY,"
                    " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
                )
                done = {r[0] for r in await conn.fetch("SELECT name FROM schema_migrations")}
                for name, sql in load_migrations("postgresql"):
                    if name in done:
                        continue
                    async with conn.transaction():  # DDL is transactional in PostgreSQL
                        await conn.execute(sql)
                        await conn.execute("INSERT INTO schema_migrations (name) VALUES ($1)", name)
                        if name == CHAIN_MIGRATION:
                            await _backfill_chain(conn)
                    applied.append(name)
            finally:
                if not conn.is_closed():
                    try:
                        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATE_LOCK_KEY)
                    except BaseException:
                        # The pool does not reset sessions (_no_session_state): a
                        # connection that may still hold the lock must not go back.
                        conn.terminate()
                        raise
        return applied

    # ------------------------------------------------------------------ writing

    @_translated
    async def append(
        self, events: Sequence[NewEvent], *, expected_head: int | None = None
    ) -> AppendResult:
        """Append a batch atomically; see :meth:`EventStore.append`."""
        validate_events(events)
        validate_expected_head(expected_head)
        if not events:
            return AppendResult([], 0, await self.head())
        ids = list(dict.fromkeys(ev.id for ev in events))
        streams = list(dict.fromkeys(ev.stream for ev in events))
        async with self._require_pool().acquire() as conn, conn.transaction():
            head, last_at, now, prev = await conn.fetchrow(_LOCK_HEAD)
            existing: dict[str, int] = {}
            versions: dict[str, int] = {}
            for is_id, key, value in await conn.fetch(_LOOKUP, ids, streams):
                if is_id:
                    existing[key] = value
                elif value is not None:
                    versions[key] = value
            # The head row is locked: comparing expected_head here is atomic with the insert.
            # May raise ConflictError or HeadConflictError (nothing stored either way).
            plan = plan_append(events, head, existing, versions, expected_head)
            if plan.rows:
                # Never earlier than the last append's: position_at() relies on
                # recorded_at growing with position even if the clock steps back.
                recorded_at = max(now, last_at)
                records = []
                # The chain (services/store/chain.py), under the head lock: the head's
                # hash is the previous event's.
                prev = ZERO_HASH if prev is None else prev
                for i, pos, version in plan.rows:
                    ev = events[i]
                    when = None if ev.time is None else as_utc(ev.time)  # naive = UTC
                    payload = bytes(ev.payload)
                    prev = link(prev, row_digest(pos, version, ev.id, ev.type, ev.stream, payload))
                    records.append(
                        (pos, ev.id, ev.type, ev.stream, version, when, recorded_at, payload, prev)
                    )
                await conn.copy_records_to_table("events", records=records, columns=_COLUMNS)
                await conn.fetchval(_ADVANCE, plan.head, recorded_at, str(plan.head), prev)
        return AppendResult(plan.positions, plan.duplicates, plan.head)

    # ------------------------------------------------------------------ reading

    @_translated(idempotent=True)
    async def read(
        self, after: int = 0, limit: int = 10_000, upto: int | None = None
    ) -> list[StoredEvent]:
        """Events after ``after`` up to ``upto``, at most ``limit``; see :meth:`EventStore.read`."""
        if limit <= 0:
            return []
        # Positions are gap-free: bounding the range by the limit as well keeps
        # the plan cheap whatever the planner's statistics say.
        top = after + limit if upto is None else min(upto, after + limit)
        rows = await self._require_pool().fetch(
            _SELECT_EVENT + " WHERE position > $1 AND position <= $2 ORDER BY position LIMIT $3",
            after,
            top,
            limit,
        )
        return list(map(StoredEvent._make, rows))

    @_translated(idempotent=True)
    async def read_payloads(
        self, after: int, limit: int, upto: int | None = None
    ) -> list[tuple[int, bytes]]:
        """``(position, payload)`` pairs; see :meth:`EventStore.read_payloads`."""
        # Positions are gap-free, so the range alone bounds the page. No ORDER BY:
        # with stale statistics (a freshly loaded log) the planner would pick a
        # bitmap scan plus an on-disk sort of the whole page, several times slower
        # than sorting here (_read_page).
        return await _read_page(self._require_pool(), after, limit, upto)

    @_translated(idempotent=True)
    async def read_streams(
        self, streams: Sequence[str], types: Sequence[str], upto: int
    ) -> list[tuple[int, str, str, bytes]]:
        """See :meth:`EventStore.read_streams`: by the (stream, version) index, in its
        order (ordered by position, or bounded by it or the type, the planner scans
        the whole log instead, stale statistics or not); the few other rows of those
        streams are dropped here."""
        if not streams or not types:
            return []
        rows = await self._require_pool().fetch(
            "SELECT position, stream, type, payload FROM events WHERE stream = ANY($1::text[])"
            " ORDER BY stream, stream_version",
            list(dict.fromkeys(streams)),
        )
        wanted = frozenset(types)
        out = [
            (position, stream, type_, payload)
            for position, stream, type_, payload in rows
            if position <= upto and type_ in wanted
        ]
        out.sort()
        return out

    @_translated(idempotent=True)
    async def chain_rows(self, after: int, limit: int) -> list[tuple[int, bytes | None, bytes]]:
        """``(position, stored hash, digest)``; see :meth:`EventStore.chain_rows`."""
        if limit <= 0:
            return []
        rows = await self._require_pool().fetch(
            _CHAIN_SELECT + " WHERE position > $1 AND position <= $2 ORDER BY position",
            after,
            after + limit,
        )
        return [
            (position, hash_, row_digest(position, version, id_, type_, stream, payload))
            for position, version, id_, type_, stream, payload, hash_ in rows
        ]

    async def verify(self, upto: int | None = None) -> ChainReport:
        """Walk the hash chain here, streaming the rows with ``COPY ... (FORMAT
        binary)`` into :class:`~esched.services.store._chain.CopyChain`, several
        ranges at once; see :meth:`EventStore.verify`."""
        started = time.perf_counter()
        report = ChainReport()
        head_pos, head_hash = await self.head_hash()
        target = head_pos if upto is None else min(upto, head_pos)
        report.head = head_pos
        step = VERIFY_BATCH * 2
        sem = asyncio.Semaphore(VERIFY_PARALLEL)

        async def check(lo: int) -> CopyChain:
            walk = CopyChain(lo, min(target, lo + step), ZERO_HASH)
            async with sem:
                await self._copy_chain(walk)
            walk.finish()
            return walk

        tasks = [asyncio.ensure_future(check(lo)) for lo in range(0, target, step)]
        last = ZERO_HASH
        try:
            for task in tasks:
                walk = await task
                if walk.broken_at is not None:
                    report.ok = False
                    report.broken_at, report.reason = walk.broken_at, walk.reason
                    break
                last = walk.last_hash
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if report.ok and target == head_pos and (head_hash or ZERO_HASH) != last:
            report.ok = False
            report.broken_at = head_pos
            report.reason = "the head's hash does not match the last stored event"
        if report.ok and target == head_pos:
            first, _none = await self._fetchrow(
                "SELECT min(position), NULL FROM events WHERE position > $1", head_pos
            )
            if first is not None:
                await past_the_head(report, first, self.head_hash)
        report.checked = target if report.ok else max(0, (report.broken_at or 1) - 1)
        report.head_hash = last.hex() if report.ok else ""
        report.seconds = time.perf_counter() - started
        report.rate = report.checked / report.seconds if report.seconds > 0 else 0.0
        return report

    @_translated(idempotent=True)
    async def _copy_chain(self, walk: CopyChain) -> None:
        """Stream ``walk``'s range into it (a retry starts the range again)."""
        walk.restart()

        async def sink(chunk: bytes) -> None:
            walk.feed(chunk)

        async with self._require_pool().acquire() as conn:
            await conn.copy_from_query(
                CHAIN_COPY.format(lo=walk.after, hi=walk.upto), output=sink, format="binary"
            )

    @_translated(idempotent=True)
    async def _fetchrow(self, sql: str, *args: Any) -> Any:
        return await self._require_pool().fetchrow(sql, *args)

    @_translated(idempotent=True)
    async def head_hash(self) -> tuple[int, bytes | None]:
        """The head position and its stored hash; see :meth:`EventStore.head_hash`."""
        row = await self._require_pool().fetchrow("SELECT position, hash FROM log_head WHERE one")
        return int(row[0]), row[1]

    @_translated(idempotent=True)
    async def head(self) -> int:
        """The last position (0 when empty)."""
        return await self._require_pool().fetchval("SELECT position FROM log_head WHERE one")

    @_translated(idempotent=True)
    async def position_at(self, when: datetime) -> int:
        """The last position recorded at or before ``when``."""
        # A binary search over positions (migration 0003): recorded_at has no index.
        return await self._require_pool().fetchval("SELECT esched_position_at($1)", as_utc(when))

    def subscribe(
        self,
        after: int,
        batch: int = 1000,
        *,
        payloads: bool = False,
        min_interval: float = 0.0,
        busy_interval: float = 0.0,
    ) -> Subscription:
        """Catch up from ``after``, then follow LISTEN/NOTIFY (plus polling)."""
        self._require_pool()
        sub = Subscription(
            self,
            _ListenWaker(self.url, self._command_timeout),
            after,
            batch,
            poll_interval=self._poll_interval,
            on_close=self._subscriptions.discard,
            payloads=payloads,
            min_interval=min_interval,
            busy_interval=busy_interval,
        )
        self._subscriptions.add(sub)
        return sub

    # ------------------------------------------------------------------ snapshots

    @_translated
    async def save_snapshot(self, name: str, position: int, data: bytes) -> None:
        """Store a snapshot (replacing one at the same name and position)."""
        if position < 0:
            raise ValueError("snapshot position must be >= 0")
        await self._require_pool().execute(
            "INSERT INTO snapshots (name, position, data) VALUES ($1, $2, $3)"
            " ON CONFLICT (name, position)"
            " DO UPDATE SET data = EXCLUDED.data, created_at = clock_timestamp()",
            name,
            position,
            bytes(data),
        )

    @_translated(idempotent=True)
    async def load_snapshot(self, name: str, upto: int | None = None) -> tuple[int, bytes] | None:
        """The newest snapshot of ``name`` at or before ``upto``."""
        row = await self._require_pool().fetchrow(
            "SELECT position, data FROM snapshots WHERE name = $1 AND position <= $2"
            " ORDER BY position DESC LIMIT 1",
            name,
            _MAX_POSITION if upto is None else upto,
        )
        return None if row is None else (row[0], row[1])

    @_translated
    async def prune_snapshots(self, name: str, keep: int = 3) -> int:
        """Delete all but the newest ``keep`` snapshots of ``name``."""
        if keep < 0:
            raise ValueError("keep must be >= 0")
        status = await self._require_pool().execute(
            "DELETE FROM snapshots WHERE name = $1 AND position NOT IN"
            " (SELECT position FROM snapshots WHERE name = $1 ORDER BY position DESC LIMIT $2)",
            name,
            keep,
        )
        return int(status.split()[-1])


#: The migration that adds the chain; the rows before it are chained right after it.
CHAIN_MIGRATION = "0004_hash_chain"
_BACKFILL_PAGE = 50_000


async def _backfill_chain(conn: asyncpg.Connection) -> None:
    """Chain the rows stored before the chain existed, under the head lock (appends
    wait), inside the migration's transaction."""
    head = (await conn.fetchrow(_LOCK_HEAD))[0]
    prev, after = ZERO_HASH, 0
    while after < head:
        rows = await conn.fetch(
            _CHAIN_SELECT + " WHERE position > $1 AND position <= $2 ORDER BY position",
            after,
            min(head, after + _BACKFILL_PAGE),
        )
        if not rows:
            break
        hashes = chain_hashes(prev, [row_digest(*r[:6]) for r in rows])
        await conn.execute(
            "UPDATE events SET hash = v.h FROM unnest($1::bigint[], $2::bytea[]) AS v(p, h)"
            " WHERE events.position = v.p",
            [r[0] for r in rows],
            hashes,
        )
        prev, after = hashes[-1], rows[-1][0]
    await conn.execute("UPDATE log_head SET hash = $1 WHERE one", prev)


async def _no_session_state(conn: asyncpg.Connection) -> None:
    """The pool's reset: nothing to undo, so no round trip.

    asyncpg's default reset sends ``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *;
    RESET ALL`` every time a connection goes back to the pool: one more round trip
    at the end of every append and read. The store leaves no session state behind
    (no SET, no cursor outlives its call, LISTEN has a connection of its own, and
    migrate releases its advisory lock or terminates the connection); an open
    transaction is still rolled back by asyncpg before this runs.
    """


_ROWS_SQL = "SELECT position, payload FROM events WHERE position > $1 AND position <= $2"


async def _read_page(
    conn: asyncpg.Pool | asyncpg.Connection, after: int, limit: int, upto: int | None = None
) -> list[tuple[int, bytes]]:
    """:meth:`PostgresEventStore.read_payloads` on a pool or a connection.

    The rows come in heap order, which is position order for an append-only table,
    so the sort is one linear pass. They stay asyncpg Records (they unpack, index and
    compare like tuples): making tuples of them cost as much as the sort. (A page
    as one ``bytea`` aggregate, split in C, halved the client's instructions per row
    but cost the server more than it saved: see docs/store.md.)
    """
    if limit <= 0:
        return []
    top = after + limit if upto is None else min(upto, after + limit)
    rows = await conn.fetch(_ROWS_SQL, after, top)
    rows.sort(key=itemgetter(0))
    return rows


class _ListenWaker(Waker):
    """A dedicated connection LISTENing on ``esched_events``; a subscription's
    payload reads go over it too (:attr:`Waker.reads_payloads`)."""

    reads_payloads = True

    def __init__(self, url: str, command_timeout: float | None = None) -> None:
        self._url = url
        self._command_timeout = command_timeout
        self._conn: asyncpg.Connection | None = None
        self._read_at = -math.inf  # monotonic time the last read began

    def read_begins(self) -> None:
        self._read_at = time.monotonic()

    def may_have_grown(self) -> bool:
        # Every append notifies in its own transaction, and a notification is lost
        # only with its connection, which asyncpg reports (alive turns False: the
        # subscription reads and reconnects). What is left is a connection dead
        # without a word: read once every LISTEN_POLL_INTERVAL for it.
        return time.monotonic() - self._read_at >= LISTEN_POLL_INTERVAL

    async def start(self, wake: asyncio.Event) -> None:
        try:
            conn = await asyncpg.connect(
                self._url,
                server_settings={"application_name": LISTEN_APP_NAME},
                timeout=10,
                command_timeout=self._command_timeout,
            )
        except _DRIVER_ERRORS as exc:
            raise _translate(exc, "cannot connect: ") from exc

        def on_notify(*_: object) -> None:
            wake.set()

        def on_terminated(_: object) -> None:
            wake.set()  # read now, then reconnect: the loop sees alive == False

        try:
            conn.add_termination_listener(on_terminated)
            await conn.add_listener(NOTIFY_CHANNEL, on_notify)
        except _DRIVER_ERRORS as exc:
            conn.terminate()
            raise _translate(exc, "LISTEN failed: ") from exc
        except BaseException:  # cancelled: do not leak the half-set-up connection
            conn.terminate()
            raise
        self._conn = conn

    @property
    def alive(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def read_payloads(self, after: int, limit: int) -> list[tuple[int, bytes]]:
        conn = self._conn
        if conn is None:
            raise TransientStoreError("the LISTEN connection is not open")
        try:
            return await _read_page(conn, after, limit)
        except _DRIVER_ERRORS as exc:
            raise _translate(exc) from exc

    async def stop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None or conn.is_closed():
            return
        try:
            await conn.close(timeout=2)
        except asyncio.CancelledError:
            conn.terminate()
            raise
        except Exception:  # already broken: nothing to say goodbye to
            conn.terminate()


def _translate(exc: BaseException, context: str = "") -> StoreError:
    """The one place asyncpg and socket errors become store errors."""
    what = f"{context}{type(exc).__name__}: {exc}"
    if isinstance(exc, pgx.InvalidCatalogNameError | pgx.InvalidAuthorizationSpecificationError):
        return StoreConfigError(what)  # unknown database, bad user or password
    if isinstance(exc, _TRANSIENT_ERRORS) or _lost_connection(exc):
        return TransientStoreError(what)
    if isinstance(exc, pgx.UndefinedTableError):
        return StoreError(f"{what} (the schema is missing: run `esched store migrate`)")
    return StoreError(what)


_redact = redact_url
