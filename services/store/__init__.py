"""The event store: one ordered, append-only, idempotent log of CloudEvents.

``open_store(url)`` picks the adapter from the URL:

* ``postgresql://user@host:port/db`` (or ``postgres://``): :class:`PostgresEventStore`,
  the system of record.
* ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` (as SQLAlchemy
  spells them) or ``sqlite://:memory:``: :class:`SqliteEventStore`, the embedded
  default for a single process.

The port, records and errors are in :mod:`esched.services.store.base`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from .base import (
    AppendResult,
    ConflictError,
    EventStore,
    HeadConflictError,
    NewEvent,
    StoreConfigError,
    StoredEvent,
    StoreError,
    Subscription,
    TransientStoreError,
    redact_url,
    retry_store_op,
    scrub,
)
from .postgres import PostgresEventStore
from .sqlite import MEMORY, SqliteEventStore

__all__ = [
    "AppendResult",
    "ConflictError",
    "EventStore",
    "HeadConflictError",
    "NewEvent",
    "PostgresEventStore",
    "SqliteEventStore",
    "StoreConfigError",
    "StoreError",
    "StoredEvent",
    "Subscription",
    "TransientStoreError",
    "open_store",
    "retry_store_op",
    "sqlite_path",
]

_EXPECTED = "expected postgresql://user@host:port/db or sqlite:///path (sqlite://:memory:)"


def sqlite_path(url: str) -> str:
    """The file path of a ``sqlite:`` URL (``:memory:`` for an in-memory database).

    ``sqlite:///x.db`` is ``x.db`` relative to the working directory and
    ``sqlite:////var/lib/x.db`` is absolute, as in SQLAlchemy.
    """
    if not url.lower().startswith("sqlite://"):
        raise StoreConfigError(f"not a SQLite URL: {url!r}; {_EXPECTED}")
    rest = url[len("sqlite://") :]
    if rest in ("", MEMORY, "/" + MEMORY):
        return MEMORY
    if not rest.startswith("/"):
        raise StoreConfigError(
            f"bad SQLite URL {url!r}: a SQLite URL has no host; use sqlite:///relative/path"
            " or sqlite:////absolute/path"
        )
    path = rest[1:]
    if not path:
        raise StoreConfigError(f"bad SQLite URL {url!r}: no file path")
    if "?" in path or "#" in path:
        raise StoreConfigError(f"bad SQLite URL {url!r}: query options are not supported")
    return path


def open_store(url: str, **options: Any) -> EventStore:
    """The event store for ``url`` (not yet connected: ``await store.connect()`` or
    ``async with``). ``options`` go to the adapter's constructor.

    Raises :class:`StoreConfigError` for an empty, unknown or malformed URL.
    """
    if not isinstance(url, str) or not url.strip():
        raise StoreConfigError(f"no event store URL given; {_EXPECTED}")
    url = url.strip()
    scheme, sep, _ = url.partition("://")
    scheme = scheme.lower()
    if not sep:
        raise StoreConfigError(f"bad event store URL {redact_url(url)!r}: no scheme; {_EXPECTED}")
    if scheme in ("postgresql", "postgres"):
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018  (raises ValueError on a non-numeric port)
        except ValueError as exc:
            raise StoreConfigError(
                f"bad PostgreSQL URL {redact_url(url)!r}: {scrub(str(exc), url)}; {_EXPECTED}"
            ) from None
        return PostgresEventStore(url, **options)
    if scheme == "sqlite":
        return SqliteEventStore(sqlite_path(url), **options)
    raise StoreConfigError(f"unsupported event store URL scheme {scheme + '://'!r}; {_EXPECTED}")
