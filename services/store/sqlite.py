"""SQLite event store: the embedded default for a single process.

stdlib ``sqlite3`` on one dedicated worker thread (a connection is not shared
between threads, and one thread needs no extra dependency); WAL mode so readers in
other processes do not block the writer. Appends run under ``BEGIN IMMEDIATE``
(the database write lock), which serializes appenders across connections and
processes: positions are gap-free and in commit order, as in PostgreSQL.
Subscriptions are woken in-process by appends and poll for other processes' appends.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import orjson

from .base import (
    DEFAULT_POLL_INTERVAL,
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
    validate_events,
    validate_expected_head,
)
from .chain import ZERO_HASH, link, row_digest

__all__ = ["SqliteEventStore"]

R = TypeVar("R")

MEMORY = ":memory:"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_POSITION = 2**63 - 1

# Result codes after which a retry may succeed: busy/locked (another writer held
# the lock past busy_timeout), I/O error, disk full, WAL protocol race.
_TRANSIENT_CODES = {
    sqlite3.SQLITE_BUSY,
    sqlite3.SQLITE_LOCKED,
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_FULL,
    sqlite3.SQLITE_PROTOCOL,
}

_SELECT_EVENT = (
    "SELECT position, id, type, stream, stream_version, time, recorded_at, payload FROM events"
)


def _to_us(when: datetime) -> int:
    """Microseconds since the epoch, exactly (a float timestamp would round)."""
    delta = as_utc(when) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _from_us(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def _now_us() -> int:
    return _to_us(datetime.now(UTC))


def _translate(exc: sqlite3.Error, context: str = "") -> StoreError:
    """The one place sqlite3 errors become store errors."""
    what = f"{context}{type(exc).__name__}: {exc}"
    code = getattr(exc, "sqlite_errorcode", None)
    primary = None if code is None else code & 0xFF  # extended codes carry the primary
    if primary in _TRANSIENT_CODES:
        return TransientStoreError(what)
    if primary == sqlite3.SQLITE_CANTOPEN:
        return StoreConfigError(what)
    if isinstance(exc, sqlite3.OperationalError) and "no such table" in str(exc):
        return StoreError(f"{what} (the schema is missing: run `esched store migrate`)")
    if isinstance(exc, sqlite3.ProgrammingError) and "closed" in str(exc):
        return StoreError(f"event store is closed ({exc})")
    return StoreError(what)


def _statements(script: str) -> list[str]:
    """Split a migration file into statements (sqlite3.execute runs one at a time;
    executescript would COMMIT our transaction first)."""
    out: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    rest = "\n".join(ln for ln in buf.splitlines() if not ln.strip().startswith("--")).strip()
    if rest:
        raise StoreConfigError(f"incomplete SQL statement at the end of a migration: {rest[:80]!r}")
    return out


class SqliteEventStore(EventStore):
    """The event store in a SQLite file (or ``:memory:``).

    ``busy_timeout`` (s) is how long an append waits for another writer's lock
    before a :class:`TransientStoreError`; ``synchronous`` is SQLite's durability
    pragma (FULL: a committed append survives power loss).
    """

    def __init__(
        self,
        path: str,
        *,
        busy_timeout: float = 10.0,
        synchronous: str = "FULL",
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        if not path:
            raise StoreConfigError("empty SQLite path")
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise StoreConfigError(f"bad synchronous setting {synchronous!r}")
        self.path = path
        self._busy_timeout = busy_timeout
        self._synchronous = synchronous.upper()
        self._poll_interval = poll_interval
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._subscriptions: set[Subscription] = set()
        self._wakeups = _Wakeups()

    def __repr__(self) -> str:
        return f"SqliteEventStore({self.path!r})"

    # ------------------------------------------------------------------ plumbing

    async def _run(self, fn: Callable[..., R], *args: Any) -> R:
        """Run ``fn(conn, *args)`` on the worker thread, translating sqlite3 errors."""
        if self._executor is None or self._conn is None:
            raise StoreError("event store is closed" if self._closed else "store not connected")
        conn = self._conn
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, functools.partial(fn, conn, *args))
        except sqlite3.Error as exc:
            raise _translate(exc) from exc

    def _signal(self) -> None:
        """Wake this process's subscriptions (called after a committed append)."""
        self._wakeups.wake_all()

    # ------------------------------------------------------------------ lifecycle

    async def connect(self) -> None:
        """Open the database on a dedicated worker thread (idempotent while open)."""
        if self._closed:
            raise StoreError("event store is closed")
        if self._conn is not None:
            return
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="esched-sqlite")

        def open_db() -> sqlite3.Connection:
            # isolation_level=None: we issue BEGIN IMMEDIATE / COMMIT ourselves.
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout, isolation_level=None)
            try:
                # WAL is a property of the file: set it once. Switching needs an
                # exclusive lock and fails at once ("database is locked") while another
                # connection is open, which the busy timeout does not cover.
                # Two first openers can race: the loser's switch fails while the
                # winner's connection is open, but by then the file is WAL. So re-check
                # with a short backoff, within the busy timeout.
                deadline = time.monotonic() + self._busy_timeout
                delay = 0.01
                while conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    try:
                        # (an in-memory database answers "memory" and stays so)
                        conn.execute("PRAGMA journal_mode=WAL")
                        break
                    except sqlite3.OperationalError as exc:
                        if "locked" not in str(exc) or time.monotonic() > deadline:
                            raise
                        time.sleep(delay)
                        delay = min(delay * 2, 0.2)
                conn.execute(f"PRAGMA synchronous={self._synchronous}")
            except BaseException:
                conn.close()
                raise
            return conn

        try:
            self._conn = await asyncio.get_running_loop().run_in_executor(executor, open_db)
        except sqlite3.Error as exc:
            executor.shutdown(wait=False)
            raise _translate(exc, f"cannot open SQLite database {self.path!r}: ") from exc
        self._executor = executor

    async def close(self) -> None:
        """Close subscriptions and the database; idempotent."""
        self._closed = True
        for sub in list(self._subscriptions):
            await sub.aclose()
        conn, self._conn = self._conn, None
        executor, self._executor = self._executor, None
        if executor is None:
            return
        if conn is not None:
            try:
                await asyncio.get_running_loop().run_in_executor(executor, conn.close)
            except sqlite3.Error:
                pass
        executor.shutdown(wait=False)

    async def migrate(self) -> list[str]:
        """Apply pending migrations in one IMMEDIATE transaction (serializes processes)."""
        migrations = load_migrations("sqlite")

        def run(conn: sqlite3.Connection) -> list[str]:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    " name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)"
                )
                done = {r[0] for r in conn.execute("SELECT name FROM schema_migrations")}
                applied = []
                for name, sql in migrations:
                    if name in done:
                        continue
                    for stmt in _statements(sql):
                        conn.execute(stmt)
                    conn.execute(
                        "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)",
                        (name, _now_us()),
                    )
                    if name == CHAIN_MIGRATION:
                        _backfill_chain_sync(conn)
                    applied.append(name)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return applied

        return await self._run(run)

    # ------------------------------------------------------------------ writing

    async def append(
        self, events: Sequence[NewEvent], *, expected_head: int | None = None
    ) -> AppendResult:
        """Append a batch atomically; see :meth:`EventStore.append`."""
        validate_events(events)
        validate_expected_head(expected_head)
        events = list(events)
        if not events:
            return AppendResult([], 0, await self.head())
        result = await self._run(_append_sync, events, expected_head)
        if result.duplicates < len(events):
            self._signal()
        return result

    # ------------------------------------------------------------------ reading

    async def read(
        self, after: int = 0, limit: int = 10_000, upto: int | None = None
    ) -> list[StoredEvent]:
        """Events after ``after`` up to ``upto``, at most ``limit``; see :meth:`EventStore.read`."""
        if limit <= 0:
            return []
        top = after + limit if upto is None else min(upto, after + limit)

        def run(conn: sqlite3.Connection) -> list[StoredEvent]:
            rows = conn.execute(
                _SELECT_EVENT + " WHERE position > ? AND position <= ? ORDER BY position LIMIT ?",
                (after, top, limit),
            ).fetchall()
            return [
                StoredEvent(
                    p, i, t, s, v, None if tm is None else _from_us(tm), _from_us(rec), payload
                )
                for p, i, t, s, v, tm, rec, payload in rows
            ]

        return await self._run(run)

    async def read_payloads(
        self, after: int, limit: int, upto: int | None = None
    ) -> list[tuple[int, bytes]]:
        """``(position, payload)`` pairs; see :meth:`EventStore.read_payloads`."""
        if limit <= 0:
            return []
        top = after + limit if upto is None else min(upto, after + limit)

        def run(conn: sqlite3.Connection) -> list[tuple[int, bytes]]:
            return conn.execute(
                "SELECT position, payload FROM events WHERE position > ? AND position <= ?"
                " ORDER BY position",
                (after, top),
            ).fetchall()

        return await self._run(run)

    async def read_streams(
        self, streams: Sequence[str], types: Sequence[str], upto: int
    ) -> list[tuple[int, str, str, bytes]]:
        """See :meth:`EventStore.read_streams`."""
        names = list(dict.fromkeys(streams))
        kinds = list(types)
        if not names or not kinds:
            return []

        def run(conn: sqlite3.Connection) -> list[tuple[int, str, str, bytes]]:
            out: list[tuple[int, str, str, bytes]] = []
            # (SQLite binds at most 999 variables in older builds)
            for i in range(0, len(names), 500):
                part = names[i : i + 500]
                marks = ",".join("?" * len(part))
                types_ = ",".join("?" * len(kinds))
                out += conn.execute(
                    "SELECT position, stream, type, payload FROM events"
                    f" WHERE stream IN ({marks}) AND type IN ({types_}) AND position <= ?",
                    (*part, *kinds, upto),
                ).fetchall()
            out.sort()
            return out

        return await self._run(run)

    async def chain_rows(self, after: int, limit: int) -> list[tuple[int, bytes | None, bytes]]:
        """``(position, stored hash, digest)``; see :meth:`EventStore.chain_rows`."""

        def run(conn: sqlite3.Connection) -> list[tuple[int, bytes | None, bytes]]:
            rows = conn.execute(
                _CHAIN_SELECT + " WHERE position > ? AND position <= ? ORDER BY position",
                (after, after + limit),
            ).fetchall()
            return [
                (position, hash_, row_digest(position, version, id_, type_, stream, payload))
                for position, version, id_, type_, stream, payload, hash_ in rows
            ]

        return await self._run(run) if limit > 0 else []

    async def head_hash(self) -> tuple[int, bytes | None]:
        """The head position and its stored hash; see :meth:`EventStore.head_hash`."""

        def run(conn: sqlite3.Connection) -> tuple[int, bytes | None]:
            position, hash_ = conn.execute(
                "SELECT position, hash FROM log_head WHERE one = 1"
            ).fetchone()
            return int(position), hash_

        return await self._run(run)

    async def head(self) -> int:
        """The last position (0 when empty)."""
        return await self._run(_head_sync)

    async def position_at(self, when: datetime) -> int:
        """The last position recorded at or before ``when``."""
        us = _to_us(when)

        def run(conn: sqlite3.Connection) -> int:
            row = conn.execute(
                "SELECT position FROM events WHERE recorded_at <= ?"
                " ORDER BY recorded_at DESC, position DESC LIMIT 1",
                (us,),
            ).fetchone()
            return 0 if row is None else row[0]

        return await self._run(run)

    def subscribe(
        self,
        after: int,
        batch: int = 1000,
        *,
        payloads: bool = False,
        min_interval: float = 0.0,
        busy_interval: float = 0.0,
    ) -> Subscription:
        """Catch up from ``after``, then follow appends (in-process signal plus polling)."""
        if self._conn is None:
            raise StoreError("event store is closed" if self._closed else "store not connected")
        sub = Subscription(
            self,
            _LocalWaker(self._wakeups, self.path),
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

    async def save_snapshot(self, name: str, position: int, data: bytes) -> None:
        """Store a snapshot (replacing one at the same name and position)."""
        if position < 0:
            raise ValueError("snapshot position must be >= 0")
        blob = bytes(data)

        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO snapshots (name, position, data, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (name, position)"
                " DO UPDATE SET data = excluded.data, created_at = excluded.created_at",
                (name, position, blob, _now_us()),
            )

        await self._run(run)

    async def load_snapshot(self, name: str, upto: int | None = None) -> tuple[int, bytes] | None:
        """The newest snapshot of ``name`` at or before ``upto``."""
        top = _MAX_POSITION if upto is None else upto

        def run(conn: sqlite3.Connection) -> tuple[int, bytes] | None:
            row = conn.execute(
                "SELECT position, data FROM snapshots WHERE name = ? AND position <= ?"
                " ORDER BY position DESC LIMIT 1",
                (name, top),
            ).fetchone()
            return None if row is None else (row[0], row[1])

        return await self._run(run)

    async def prune_snapshots(self, name: str, keep: int = 3) -> int:
        """Delete all but the newest ``keep`` snapshots of ``name``."""
        if keep < 0:
            raise ValueError("keep must be >= 0")

        def run(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                "DELETE FROM snapshots WHERE name = ? AND position NOT IN"
                " (SELECT position FROM snapshots WHERE name = ? ORDER BY position DESC LIMIT ?)",
                (name, name, keep),
            )
            return cur.rowcount

        return await self._run(run)


#: The migration that adds the chain; the rows before it are chained in its transaction.
CHAIN_MIGRATION = "0002_hash_chain"
_CHAIN_SELECT = "SELECT position, stream_version, id, type, stream, payload, hash FROM events"


def _backfill_chain_sync(conn: sqlite3.Connection) -> None:
    """Chain the rows stored before the chain existed (inside the migration's
    IMMEDIATE transaction: appends wait)."""
    prev = ZERO_HASH
    rows = conn.execute(_CHAIN_SELECT + " ORDER BY position").fetchall()
    updates = []
    for position, version, id_, type_, stream, payload, _hash in rows:
        prev = link(prev, row_digest(position, version, id_, type_, stream, payload))
        updates.append((prev, position))
    conn.executemany("UPDATE events SET hash = ? WHERE position = ?", updates)
    conn.execute("UPDATE log_head SET hash = ? WHERE one = 1", (prev,))


def _head_sync(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT position FROM log_head WHERE one = 1").fetchone()[0]


def _append_sync(
    conn: sqlite3.Connection, events: list[NewEvent], expected_head: int | None = None
) -> AppendResult:
    """The append transaction, on the worker thread."""
    ids = orjson.dumps(list(dict.fromkeys(ev.id for ev in events))).decode()
    streams = orjson.dumps(list(dict.fromkeys(ev.stream for ev in events))).decode()
    # IMMEDIATE takes the write lock now (waiting up to busy_timeout), so the
    # head and lookups below cannot change under us.
    conn.execute("BEGIN IMMEDIATE")
    try:
        head, last_at, prev = conn.execute(
            "SELECT position, recorded_at, hash FROM log_head WHERE one = 1"
        ).fetchone()
        # json_each: one statement whatever the batch size (no bound-variable limit).
        existing = dict(
            conn.execute(
                "SELECT id, position FROM events WHERE id IN (SELECT value FROM json_each(?))",
                (ids,),
            ).fetchall()
        )
        versions = {
            stream: version
            for stream, version in conn.execute(
                "SELECT j.value, (SELECT max(stream_version) FROM events WHERE stream = j.value)"
                " FROM json_each(?) AS j",
                (streams,),
            ).fetchall()
            if version is not None
        }
        # Under the write lock: comparing expected_head here is atomic with the insert.
        # May raise ConflictError or HeadConflictError (rolled back, nothing stored).
        plan = plan_append(events, head, existing, versions, expected_head)
        if plan.rows:
            recorded_at = max(_now_us(), last_at)  # monotonic even if the clock steps back
            # The chain (services/store/chain.py), under the write lock.
            prev = ZERO_HASH if prev is None else bytes(prev)
            records = []
            for i, pos, version in plan.rows:
                ev = events[i]
                payload = bytes(ev.payload)
                prev = link(prev, row_digest(pos, version, ev.id, ev.type, ev.stream, payload))
                when = None if ev.time is None else _to_us(ev.time)
                records.append(
                    (pos, ev.id, ev.type, ev.stream, version, when, recorded_at, payload, prev)
                )
            conn.executemany(
                "INSERT INTO events (position, id, type, stream, stream_version, time,"
                " recorded_at, payload, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                records,
            )
            conn.execute(
                "UPDATE log_head SET position = ?, recorded_at = ?, hash = ? WHERE one = 1",
                (plan.head, recorded_at, prev),
            )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return AppendResult(plan.positions, plan.duplicates, plan.head)


class _Wakeups:
    """The events of this process's subscriptions, set after each committed append
    (from the worker thread: each on its own loop)."""

    def __init__(self) -> None:
        self._events: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._lock = threading.Lock()

    def add(self, entry: tuple[asyncio.AbstractEventLoop, asyncio.Event]) -> None:
        with self._lock:
            self._events.add(entry)

    def discard(self, entry: tuple[asyncio.AbstractEventLoop, asyncio.Event]) -> None:
        with self._lock:
            self._events.discard(entry)

    def wake_all(self) -> None:
        with self._lock:
            events = list(self._events)
        for loop, event in events:
            if loop.is_closed():
                continue
            loop.call_soon_threadsafe(event.set)


#: A file's modification time is the kernel's coarse clock (a few ms): a commit in
#: the same tick as a read's stamp may leave it as it was, so a stamp taken less
#: than this long (ns) after a file was written proves nothing.
_MTIME_MARGIN_NS = 100_000_000

_Stamp = tuple[tuple[tuple[int, int, int] | None, ...], int]


class _LocalWaker(Waker):
    """Woken by this process's appends; other processes' are found by polling, whose
    read is skipped while the database file and its WAL are as they were when the
    last read began (a commit writes the WAL: a stat of two files, no query)."""

    def __init__(self, wakeups: _Wakeups, path: str) -> None:
        self._wakeups = wakeups
        self._entry: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self._files = (path, path + "-wal")
        self._stamp: _Stamp | None = None

    def _now(self) -> _Stamp:
        found: list[tuple[int, int, int] | None] = []
        for name in self._files:
            try:
                st = os.stat(name)
            except OSError:
                found.append(None)
            else:
                found.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(found), time.time_ns()

    def read_begins(self) -> None:
        self._stamp = self._now()

    def may_have_grown(self) -> bool:
        if self._stamp is None:
            return True
        files, at = self._stamp
        if files[0] is None or self._now()[0] != files:
            return True  # no file to watch (in memory), or written since
        newest = max(f[2] for f in files if f is not None)
        return at - newest < _MTIME_MARGIN_NS

    async def start(self, wake: asyncio.Event) -> None:
        self._entry = (asyncio.get_running_loop(), wake)
        self._wakeups.add(self._entry)

    @property
    def alive(self) -> bool:
        return self._entry is not None

    async def stop(self) -> None:
        entry, self._entry = self._entry, None
        if entry is not None:
            self._wakeups.discard(entry)
