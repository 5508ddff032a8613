"""Shared pytest fixtures.

PostgreSQL: a real server at ``ESCHED_TEST_PG`` (default
``postgresql://postgres@127.0.0.1:5432``). Each test that asks for ``pg_url`` gets
a fresh database with a unique name, dropped afterwards. Never a SQLite stand-in.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import asyncpg
import pytest

PG_SERVER = os.environ.get("ESCHED_TEST_PG", "postgresql://postgres@127.0.0.1:5432")


def _pg_admin(sql: str) -> None:
    """Run one statement on the server's ``postgres`` database.

    In a helper thread with its own event loop, so the fixtures below are plain
    (sync) fixtures usable by sync and async tests alike, and never touch the
    test's event loop.
    """

    async def run() -> None:
        conn = await asyncpg.connect(f"{PG_SERVER}/postgres", timeout=5)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        try:
            pool.submit(asyncio.run, run()).result()
        except (OSError, asyncpg.PostgresError) as exc:
            pytest.fail(f"PostgreSQL at {PG_SERVER}: {exc}")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """URL of a fresh, empty PostgreSQL database; dropped (with its sessions) after."""
    name = f"esched_test_{uuid.uuid4().hex[:12]}"
    _pg_admin(f'CREATE DATABASE "{name}"')
    yield f"{PG_SERVER}/{name}"
    # WITH (FORCE) terminates sessions a failed test may have left behind.
    _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["postgresql", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """An event store URL for each adapter: a fresh PostgreSQL database, or a
    SQLite file in ``tmp_path``. The contract suite runs once per adapter."""
    if request.param == "postgresql":
        return request.getfixturevalue("pg_url")
    return f"sqlite:///{tmp_path}/events.db"
