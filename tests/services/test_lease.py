"""Leader leases: one holder at a time; a dead holder is noticed and replaced quickly."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from esched.services.lease import (
    FileLease,
    LocalLease,
    PostgresLease,
    lease_key,
    open_lease,
)


def test_lease_keys_are_constant_signed_64_bit_and_per_name():
    assert lease_key("commit") == lease_key("commit") != lease_key("other")
    assert -(2**63) <= lease_key("commit") < 2**63


def test_open_lease_picks_the_mechanism_from_the_store_url(tmp_path):
    assert isinstance(open_lease("postgresql://u@h/db"), PostgresLease)
    file_lease = open_lease(f"sqlite:///{tmp_path}/x.db")
    assert isinstance(file_lease, FileLease) and file_lease.path == f"{tmp_path}/x.db.commit.lock"
    assert isinstance(open_lease("sqlite://:memory:"), LocalLease)


async def test_postgres_lease_is_exclusive_and_handed_over_on_release(pg_url):
    first, second = PostgresLease(pg_url), PostgresLease(pg_url, retry_interval=0.1)
    async with first.acquire():
        assert first.held
        assert not await second.try_acquire()
        with pytest.raises(TimeoutError):
            await second.wait(0.3)
    assert not first.held
    await asyncio.wait_for(second.acquire(), 2)
    assert second.held
    await second.close()
    await second.close()  # idempotent


async def test_a_killed_session_loses_the_lease_within_two_seconds(pg_url):
    holder = PostgresLease(pg_url, keepalive_interval=0.2)
    standby = PostgresLease(pg_url, retry_interval=0.1)
    await holder.acquire()
    waiting = asyncio.ensure_future(standby.wait())
    await asyncio.sleep(0.3)
    assert not waiting.done()

    admin = await asyncpg.connect(pg_url)
    started = time.monotonic()
    await admin.execute("SELECT pg_terminate_backend($1)", holder.backend_pid)
    await admin.close()
    await asyncio.wait_for(holder.lost.wait(), 2)
    assert not holder.held
    await asyncio.wait_for(waiting, 2)
    assert standby.held and time.monotonic() - started < 2.5
    await holder.release()
    await standby.release()


async def test_keepalive_notices_a_lock_released_behind_the_holders_back(pg_url):
    sessions: list[asyncpg.Connection] = []

    async def connect(url: str) -> asyncpg.Connection:
        sessions.append(await asyncpg.connect(url, timeout=5))
        return sessions[-1]

    holder = PostgresLease(pg_url, keepalive_interval=0.1, connect=connect)
    await holder.acquire()
    # Same session, lock gone (as a pooler reset or pg_advisory_unlock_all would do).
    await sessions[-1].execute("SELECT pg_advisory_unlock_all()")
    await asyncio.wait_for(holder.lost.wait(), 2)
    await holder.release()


async def test_file_lease_is_exclusive_across_open_files(tmp_path):
    path = str(tmp_path / "db.commit.lock")
    first, second = FileLease(path), FileLease(path, retry_interval=0.05)
    assert await first.try_acquire()
    assert not await second.try_acquire()
    waiting = asyncio.ensure_future(second.wait())
    await asyncio.sleep(0.1)
    assert not waiting.done()
    await first.release()
    await asyncio.wait_for(waiting, 1)
    assert second.held
    await second.release()


async def test_a_standby_told_to_stop_returns_false_without_the_lease(tmp_path):
    path = str(tmp_path / "db.commit.lock")
    leader, standby = FileLease(path), FileLease(path, retry_interval=0.05)
    assert await leader.try_acquire()
    stopping = asyncio.Event()
    standing_by = asyncio.ensure_future(standby.wait_unless(stopping))
    await asyncio.sleep(0.1)
    assert not standing_by.done()
    stopping.set()
    assert await asyncio.wait_for(standing_by, 1) is False
    assert not standby.held
    await leader.release()
    assert await asyncio.wait_for(standby.wait_unless(asyncio.Event()), 1) is True
    assert standby.held
    await standby.release()
