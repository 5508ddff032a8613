"""Leader leases: exactly one active instance of a singleton service (the commit service).

A lease is held, never renewed by writing: losing the thing that holds it (a
database session, a process) loses the lease. Two implementations, chosen from
the event store URL by :func:`open_lease`:

* :class:`PostgresLease`: a session advisory lock (``pg_try_advisory_lock``) on a
  dedicated connection. Standbys retry every ``retry_interval`` seconds. The
  holder runs a keepalive query every ``keepalive_interval`` seconds and listens
  for the connection's termination, so a killed session (``pg_terminate_backend``,
  a server restart, a network partition) sets :attr:`Lease.lost` within about
  ``keepalive_interval + keepalive_timeout`` seconds. The server releases the lock
  of a dead session at once, so a standby takes over within ``retry_interval``.
* :class:`FileLease`: an ``fcntl.flock`` on ``<db path>.<name>.lock``, for the
  embedded SQLite store (one host). The kernel releases it when the process dies.

A lease alone does not fence a deposed leader that has not noticed yet; the
commit service also appends every decision batch with ``expected_version`` on the
``decisions`` stream, so a write by a second leader is refused by the store.

Usage::

    lease = open_lease(store_url, "commit")
    async with lease.acquire():      # waits until this instance is the leader
        ...                          # work until lease.lost is set
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import fcntl
import logging
import os
import zlib
from collections.abc import Awaitable, Callable, Generator
from typing import Any

import asyncpg

from esched.services.store import sqlite_path
from esched.services.store.sqlite import MEMORY

__all__ = [
    "FileLease",
    "Lease",
    "LeaseLost",
    "LocalLease",
    "PostgresLease",
    "lease_key",
    "open_lease",
]

log = logging.getLogger(__name__)

#: Standbys try again this often: takeover latency after the leader's session dies.
DEFAULT_RETRY_INTERVAL = 0.5
#: The holder checks its session this often; with the timeout below, a dead session
#: is noticed within ~1.5 s, before a standby (retrying every 0.5 s) can have written much.
DEFAULT_KEEPALIVE_INTERVAL = 0.5
DEFAULT_KEEPALIVE_TIMEOUT = 1.0
#: High 32 bits of every esched advisory lock key ("esch"), so esched's locks never
#: collide with an application's small integer keys in a shared database.
_KEY_BASE = 0x65736368 << 32


def lease_key(name: str) -> int:
    """The advisory lock key of lease ``name``: constant, a signed 64-bit integer."""
    key = _KEY_BASE | zlib.crc32(name.encode())
    return key - (1 << 64) if key >= 1 << 63 else key


class LeaseLost(Exception):
    """The lease was lost while held (or was never held)."""


class Lease(abc.ABC):
    """One named leadership lease. ``lost`` is set when a held lease goes away."""

    def __init__(self, name: str, retry_interval: float = DEFAULT_RETRY_INTERVAL) -> None:
        self.name = name
        self.retry_interval = retry_interval
        #: Set when the lease is lost while held; cleared on every acquisition.
        self.lost = asyncio.Event()
        self._held = False

    @property
    def held(self) -> bool:
        """Whether this instance holds the lease and has not seen it lost."""
        return self._held and not self.lost.is_set()

    @abc.abstractmethod
    async def try_acquire(self) -> bool:
        """Take the lease if it is free; True if this instance now holds it."""

    @abc.abstractmethod
    async def release(self) -> None:
        """Give the lease up (idempotent); standbys can take it at once."""

    async def wait(self, within: float | None = None) -> None:
        """Wait until this instance holds the lease (TimeoutError after ``within`` s)."""

        async def loop() -> None:
            logged = False
            while not await self.try_acquire():
                if not logged:
                    log.info("lease %r is held elsewhere; standing by", self.name)
                    logged = True
                await asyncio.sleep(self.retry_interval)
            log.info("lease %r acquired", self.name)

        if self.held:
            return
        await asyncio.wait_for(loop(), within)

    async def wait_unless(self, stopping: asyncio.Event) -> bool:
        """Wait for the lease or for ``stopping``; True if this instance now holds it.

        The services' way to stand by: a standby that is told to stop must not
        keep polling the lock, and must not be left holding it half-acquired.
        """
        waiter = asyncio.ensure_future(self.wait())
        stopper = asyncio.ensure_future(stopping.wait())
        try:
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if not waiter.done():
                waiter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiter
        if stopping.is_set():
            return False
        waiter.result()
        return True

    def acquire(self, timeout: float | None = None) -> _Acquisition:
        """``await lease.acquire()`` or ``async with lease.acquire():`` (released on exit)."""
        return _Acquisition(self, timeout)

    async def close(self) -> None:
        """Release and free resources; idempotent."""
        await self.release()


class _Acquisition:
    """Awaitable and async context manager returned by :meth:`Lease.acquire`."""

    def __init__(self, lease: Lease, timeout: float | None) -> None:
        self._lease = lease
        self._timeout = timeout

    def __await__(self) -> Generator[Any, None, Lease]:
        yield from self._lease.wait(self._timeout).__await__()
        return self._lease

    async def __aenter__(self) -> Lease:
        await self._lease.wait(self._timeout)
        return self._lease

    async def __aexit__(self, *exc: object) -> None:
        await self._lease.release()


async def _connect(url: str) -> asyncpg.Connection:
    return await asyncpg.connect(url, timeout=5)


class PostgresLease(Lease):
    """A session advisory lock on a connection of its own (see the module docstring)."""

    def __init__(
        self,
        url: str,
        name: str = "commit",
        *,
        retry_interval: float = DEFAULT_RETRY_INTERVAL,
        keepalive_interval: float = DEFAULT_KEEPALIVE_INTERVAL,
        keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT,
        connect: Callable[[str], Awaitable[asyncpg.Connection]] | None = None,
    ) -> None:
        super().__init__(name, retry_interval)
        self.url = url
        #: Opens the lease's session from ``url`` (default :func:`asyncpg.connect`, 5 s
        #: timeout): e.g. for connection options the URL cannot carry, or for a test that
        #: acts on the session the lock lives in.
        self.connect = connect or _connect
        self.key = lease_key(name)
        self.keepalive_interval = keepalive_interval
        self.keepalive_timeout = keepalive_timeout
        self._conn: asyncpg.Connection | None = None
        self._keepalive: asyncio.Task[None] | None = None

    @property
    def backend_pid(self) -> int | None:
        """The server process id of the lease's session (for operators and tests)."""
        return self._conn.get_server_pid() if self._conn is not None else None

    async def try_acquire(self) -> bool:
        if self.held:
            return True
        try:
            if self._conn is None or self._conn.is_closed():
                # A dedicated connection, not the store's pool: the lock lives and dies
                # with this session, and pool recycling must never drop it.
                self._conn = await self.connect(self.url)
            got = await self._conn.fetchval(
                "SELECT pg_try_advisory_lock($1)", self.key, timeout=self.keepalive_timeout * 5
            )
        except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("lease %r: cannot reach PostgreSQL (%s); retrying", self.name, exc)
            await self._drop_connection()
            return False
        if not got:
            return False
        self._held = True
        self.lost.clear()
        self._conn.add_termination_listener(self._on_terminated)
        self._keepalive = asyncio.ensure_future(self._keep_alive())
        return True

    def _on_terminated(self, _conn: asyncpg.Connection) -> None:
        # asyncpg calls this when the session ends (server closed it, socket reset).
        self._mark_lost("connection terminated")

    def _mark_lost(self, why: str) -> None:
        if self._held and not self.lost.is_set():
            log.error("lease %r lost: %s; this instance must stop deciding", self.name, why)
            self.lost.set()

    async def _keep_alive(self) -> None:
        """Ping the lock's session; any failure means the lock may be gone."""
        conn = self._conn
        assert conn is not None
        while self._held and not self.lost.is_set():
            await asyncio.sleep(self.keepalive_interval)
            try:
                # Check the lock itself, not just the socket: a pooler or a
                # pg_advisory_unlock_all elsewhere in the session would also end it.
                ok = await conn.fetchval(
                    "SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' "
                    "AND pid = pg_backend_pid() AND objid = ($1::bigint & 4294967295)::oid "
                    "AND granted",
                    self.key,
                    timeout=self.keepalive_timeout,
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure: the lease is in doubt
                self._mark_lost(f"keepalive failed ({type(exc).__name__}: {exc})")
                return
            if not ok:
                self._mark_lost("advisory lock no longer held by this session")
                return

    async def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.remove_termination_listener(self._on_terminated)
            # terminate(), not close(): close() waits on a server that may be gone.
            conn.terminate()

    async def release(self) -> None:
        was_held, self._held = self._held, False
        task, self._keepalive = self._keepalive, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if (
            was_held
            and self._conn is not None
            and not self._conn.is_closed()
            and not self.lost.is_set()
        ):
            with contextlib.suppress(Exception):
                await self._conn.execute("SELECT pg_advisory_unlock($1)", self.key, timeout=1)
        # Closing the session releases a lock we could not unlock explicitly.
        await self._drop_connection()
        if was_held:
            log.info("lease %r released", self.name)


class FileLease(Lease):
    """``fcntl.flock`` on a lock file next to the SQLite database (one host only)."""

    def __init__(
        self, path: str, name: str = "commit", *, retry_interval: float = DEFAULT_RETRY_INTERVAL
    ) -> None:
        super().__init__(name, retry_interval)
        self.path = path
        self._fd: int | None = None

    async def try_acquire(self) -> bool:
        if self.held:
            return True
        # A new open file description per attempt: flock conflicts between
        # descriptions, so two instances in one process exclude each other too.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except OSError:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        self._held = True
        self.lost.clear()
        return True

    async def release(self) -> None:
        self._held = False
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


class LocalLease(Lease):
    """Always granted: for an in-memory store, which only this process can see."""

    async def try_acquire(self) -> bool:
        self._held = True
        self.lost.clear()
        return True

    async def release(self) -> None:
        self._held = False


def open_lease(store_url: str, name: str = "commit", **options: Any) -> Lease:
    """The lease for the store at ``store_url``: advisory lock (PostgreSQL), lock
    file (SQLite file) or an always-granted local lease (in-memory SQLite)."""
    scheme = store_url.partition("://")[0].lower()
    if scheme in ("postgresql", "postgres"):
        return PostgresLease(store_url, name, **options)
    path = sqlite_path(store_url)
    if path == MEMORY:
        return LocalLease(name, **options)
    return FileLease(f"{path}.{name}.lock", name, **options)
