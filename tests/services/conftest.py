"""Fixtures for service tests (the shared broker fixture is in tests/conftest.py)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from esched.services.devbroker import DevBroker
from esched.services.store import EventStore, open_store


@pytest.fixture
def dev_broker() -> Iterator[DevBroker]:
    """A broker of this test's own, which the test may stop and restart (outages)."""
    with DevBroker().running() as broker:
        yield broker


@pytest.fixture
def topic_prefix() -> str:
    """A fresh topic prefix, so tests sharing the broker never see each other's messages."""
    return f"t{uuid.uuid4().hex[:10]}."


async def _migrated(url: str) -> AsyncIterator[EventStore]:
    store = open_store(url)
    await store.connect()
    await store.migrate()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[EventStore]:
    """A migrated, empty store: PostgreSQL or SQLite (``store_url`` is parametrized)."""
    async for s in _migrated(store_url):
        yield s


@pytest.fixture
async def pg_store(pg_url: str) -> AsyncIterator[EventStore]:
    """A migrated, empty PostgreSQL store (tests of what only PostgreSQL has)."""
    async for s in _migrated(pg_url):
        yield s
