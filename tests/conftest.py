"""Shared pytest fixtures.

PostgreSQL: a real server at ``ESCHED_TEST_PG`` (default
``postgresql://postgres@127.0.0.1:5432``). Each test that asks for ``pg_url`` gets
a fresh database with a unique name, dropped afterwards. Never a SQLite stand-in.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

PG_SERVER = os.environ.get("ESCHED_TEST_PG", "postgresql://postgres@127.0.0.1:5432")


async def _admin() -> asyncpg.Connection:
    try:
        return await asyncpg.connect(f"{PG_SERVER}/postgres", timeout=5)
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(f"PostgreSQL at {PG_SERVER} is not reachable: {exc}")


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """URL of a fresh, empty PostgreSQL database; dropped (with its sessions) after."""
    name = f"esched_test_{uuid.uuid4().hex[:12]}"
    admin = await _admin()
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    yield f"{PG_SERVER}/{name}"
    admin = await _admin()
    try:
        # WITH (FORCE) terminates sessions a failed test may have left behind.
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture(params=["postgresql", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """An event store URL for each adapter: a fresh PostgreSQL database, or a
    SQLite file in ``tmp_path``. The contract suite runs once per adapter."""
    if request.param == "postgresql":
        return request.getfixturevalue("pg_url")
    return f"sqlite:///{tmp_path}/events.db"
