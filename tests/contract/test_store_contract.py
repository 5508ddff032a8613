"""The event store contract: one suite, run against every adapter.

``store_url`` (tests/conftest.py) is parametrized over a fresh PostgreSQL database
on the real server and a SQLite file. PostgreSQL-only fault tests (killed
backends) are at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import defaultdict
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from esched.services.store import (
    ConflictError,
    EventStore,
    HeadConflictError,
    NewEvent,
    PostgresEventStore,
    SqliteEventStore,
    StoreConfigError,
    StoreError,
    TransientStoreError,
    open_store,
    retry_store_op,
    sqlite_path,
)
from esched.services.store.base import StoredEvent
from esched.services.store.postgres import LISTEN_APP_NAME, POOL_APP_NAME
from support.aio import eventually

_ids = itertools.count(1)


def ev(
    stream: str = "pod/ns/a",
    *,
    id: str | None = None,
    expected: int | None = None,
    time: datetime | None = None,
    type: str = "esched.pod.submitted",
) -> NewEvent:
    """A NewEvent whose payload names its id (so tests can check bytes round trip)."""
    eid = id or f"ev-{next(_ids)}"
    payload = b'{"id":"%s","stream":"%s"}' % (eid.encode(), stream.encode())
    return NewEvent(eid, type, stream, payload, time=time, expected_version=expected)


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[EventStore]:
    """A connected, migrated store on a fresh database."""
    s = open_store(store_url)
    await s.connect()
    await s.migrate()
    yield s
    await s.close()


async def collect(sub, until: int, within: float = 10.0) -> list[int]:
    """Positions handed out by ``sub`` until position ``until`` is seen."""
    got: list[int] = []
    async with asyncio.timeout(within):
        while not got or got[-1] < until:
            batch = await anext(sub)
            assert batch, "a subscription never yields an empty batch"
            got.extend(e.position for e in batch)
    return got


# --------------------------------------------------------------------------- basics


async def test_append_read_round_trip(store: EventStore) -> None:
    t = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    a = ev("node/n1", time=t, type="esched.node.added")
    b = ev("pod/ns/p1")
    c = ev("node/n1", type="esched.node.updated")
    before = datetime.now(UTC) - timedelta(seconds=1)

    result = await store.append([a, b, c])

    assert result.positions == [1, 2, 3]
    assert result.duplicates == 0
    assert result.head == 3
    assert await store.head() == 3
    got = await store.read()
    assert [(e.position, e.id, e.type, e.stream, e.stream_version) for e in got] == [
        (1, a.id, "esched.node.added", "node/n1", 1),
        (2, b.id, "esched.pod.submitted", "pod/ns/p1", 1),
        (3, c.id, "esched.node.updated", "node/n1", 2),
    ]
    assert [e.payload for e in got] == [a.payload, b.payload, c.payload]
    assert all(type(e.payload) is bytes for e in got)
    assert got[0].time == t
    assert got[1].time is None
    for e in got:
        assert e.recorded_at.tzinfo is not None
        assert before <= e.recorded_at <= datetime.now(UTC) + timedelta(seconds=1)


async def test_empty_append_is_a_no_op(store: EventStore) -> None:
    await store.append([ev()])
    result = await store.append([])
    assert (result.positions, result.duplicates, result.head) == ([], 0, 1)


async def test_duplicates_are_acknowledged_never_stored_twice(store: EventStore) -> None:
    a, b = ev(), ev()
    first = await store.append([a, b])
    assert first.positions == [1, 2]

    # Across batches: same ids again, with a new one in between.
    c = ev()
    again = await store.append([b, c, a])
    assert again.positions == [2, 3, 1]
    assert again.duplicates == 2
    assert again.head == 3

    # Within one batch: the repeat gets the first occurrence's position.
    d = ev()
    inside = await store.append([d, d, c, d])
    assert inside.positions == [4, 4, 3, 4]
    assert inside.duplicates == 3
    assert inside.head == 4

    # An all-duplicate batch changes nothing.
    same = await store.append([a, b, c, d])
    assert same.positions == [1, 2, 3, 4]
    assert same.duplicates == 4
    assert await store.head() == 4

    got = await store.read()
    assert [e.id for e in got] == [a.id, b.id, c.id, d.id]
    assert [e.position for e in got] == [1, 2, 3, 4]


async def test_stream_versions_and_expected_version(store: EventStore) -> None:
    r = await store.append([ev("s/1", expected=0), ev("s/1", expected=1), ev("s/2", expected=0)])
    assert r.positions == [1, 2, 3]
    got = await store.read()
    assert [(e.stream, e.stream_version) for e in got] == [("s/1", 1), ("s/1", 2), ("s/2", 1)]
    # None = no check, but the version still advances.
    await store.append([ev("s/1")])
    assert (await store.read(after=3))[0].stream_version == 3


async def test_conflict_stores_nothing_of_the_batch(store: EventStore) -> None:
    await store.append([ev("s/1"), ev("s/1")])  # s/1 at version 2
    ok, bad = ev("s/2", expected=0), ev("s/1", expected=1)

    with pytest.raises(ConflictError) as info:
        await store.append([ok, bad])

    assert (info.value.stream, info.value.expected, info.value.actual) == ("s/1", 1, 2)
    assert await store.head() == 2
    assert [e.id for e in await store.read()] == [e.id for e in (await store.read())[:2]]
    assert ok.id not in {e.id for e in await store.read()}

    # A new stream must be new when expected_version=0.
    with pytest.raises(ConflictError):
        await store.append([ev("s/1", expected=0)])
    # Inside a batch, expectations chain: the second event sees the first.
    with pytest.raises(ConflictError):
        await store.append([ev("s/3", expected=0), ev("s/3", expected=0)])
    assert await store.head() == 2

    # The right expectation succeeds; and its retry is a duplicate, not a conflict.
    good = ev("s/1", expected=2)
    assert (await store.append([good])).positions == [3]
    retry = await store.append([good])
    assert (retry.positions, retry.duplicates) == ([3], 1)


async def test_expected_head_stores_when_the_head_matches(store: EventStore) -> None:
    r = await store.append([ev("s/1")], expected_head=0)  # empty log: head 0
    assert r.positions == [1]
    r = await store.append([ev("s/1"), ev("s/2")], expected_head=1)
    assert (r.positions, r.head) == ([2, 3], 3)
    assert await store.head() == 3
    # Combined with expected_version: both must hold.
    r = await store.append([ev("s/1", expected=2)], expected_head=3)
    assert r.positions == [4]


async def test_expected_head_conflict_stores_nothing(store: EventStore) -> None:
    await store.append([ev("s/1")])
    seen = await store.head()  # a writer validates against the log up to here...
    await store.append([ev("s/other")])  # ...and another append gets in first
    a, b = ev("s/1"), ev("s/2")

    with pytest.raises(HeadConflictError) as info:
        await store.append([a, b], expected_head=seen)

    assert isinstance(info.value, StoreError) and not isinstance(info.value, ConflictError)
    assert (info.value.expected, info.value.actual) == (1, 2)
    assert await store.head() == 2
    assert {a.id, b.id}.isdisjoint(e.id for e in await store.read())
    # An expected head ahead of the log is refused too.
    with pytest.raises(HeadConflictError):
        await store.append([a], expected_head=5)
    # An expected-version mismatch is reported first.
    with pytest.raises(ConflictError):
        await store.append([ev("s/1", expected=0)], expected_head=seen)
    # Re-validated at the new head, the same batch is stored.
    r = await store.append([a, b], expected_head=2)
    assert r.positions == [3, 4]
    # A batch of duplicates only is acknowledged without the check (a retried
    # append whose first attempt committed), but a new id in it is checked.
    retry = await store.append([a, b], expected_head=0)
    assert (retry.positions, retry.duplicates) == ([3, 4], 2)
    with pytest.raises(HeadConflictError):
        await store.append([a, ev("s/3")], expected_head=0)
    assert await store.head() == 4
    with pytest.raises(ValueError):
        await store.append([ev("s/1")], expected_head=-1)


async def test_concurrent_expected_head_one_winner(store_url: str, store) -> None:
    """Of several writers expecting the same head, exactly one appends."""
    await store.append([ev("job/x")])
    writers = [open_store(store_url) for _ in range(4)]
    for w in writers:
        await w.connect()
    try:
        outcomes = await asyncio.gather(
            *(w.append([ev(f"job/{i}")], expected_head=1) for i, w in enumerate(writers)),
            return_exceptions=True,
        )
    finally:
        for w in writers:
            await w.close()
    assert sum(not isinstance(o, BaseException) for o in outcomes) == 1
    assert all(isinstance(o, HeadConflictError) for o in outcomes if isinstance(o, BaseException))
    assert await store.head() == 2


async def test_read_after_upto_limit(store: EventStore) -> None:
    await store.append([ev(f"s/{i % 3}") for i in range(30)])
    assert [e.position for e in await store.read()] == list(range(1, 31))
    assert [e.position for e in await store.read(after=10, limit=5)] == [11, 12, 13, 14, 15]
    assert [e.position for e in await store.read(after=10, upto=13)] == [11, 12, 13]
    assert [e.position for e in await store.read(after=25, limit=100)] == list(range(26, 31))
    assert await store.read(after=30) == []
    assert await store.read(after=5, upto=5) == []
    assert [e.position for e in await store.read(upto=2)] == [1, 2]
    assert await store.read(after=3, limit=0) == []


async def test_read_payloads(store: EventStore) -> None:
    events = [ev() for _ in range(20)]
    await store.append(events)
    page = await store.read_payloads(0, 7)
    assert page == [(i + 1, events[i].payload) for i in range(7)]
    assert [p for p, _ in await store.read_payloads(15, 100)] == [16, 17, 18, 19, 20]
    assert [p for p, _ in await store.read_payloads(3, 100, upto=6)] == [4, 5, 6]
    assert await store.read_payloads(20, 10) == []
    assert await store.read_payloads(0, 0) == []
    assert len(await store.read_payloads(0, 10_000)) == 20


async def test_read_streams_gives_the_events_of_those_streams_and_types(
    store: EventStore,
) -> None:
    events = [
        ev("pod/ns/a"),
        ev("pod/ns/b"),
        ev("pod/ns/a", type="esched.pod.updated"),
        ev("pod/ns/a", type="esched.pod.deleted"),
        ev("pod/ns/c"),
        ev("pod/ns/a"),
    ]
    await store.append(events)
    kinds = ["esched.pod.submitted", "esched.pod.updated"]
    got = await store.read_streams(["pod/ns/a", "pod/ns/c", "pod/ns/a"], kinds, 6)
    assert got == [
        (p, events[p - 1].stream, events[p - 1].type, events[p - 1].payload) for p in (1, 3, 5, 6)
    ]
    assert [p for p, *_ in await store.read_streams(["pod/ns/a"], kinds, 5)] == [1, 3]
    assert [
        p for p, _ in await store.read_streams([f"pod/ns/{i}" for i in range(700)], kinds, 9)
    ] == []
    assert await store.read_streams([], kinds, 6) == []


async def test_read_payloads_gives_every_payload_byte_for_byte(store: EventStore) -> None:
    # Empty, binary (every byte value, NULs included) and large (past a socket read)
    # payloads come back exactly, as int/bytes pairs.
    payloads = [b"", bytes(range(256)) * 3, b"x" * 300_000, b"\x00", b'{"a":1}']
    await store.append([NewEvent(f"bin-{i}", "t", f"s/{i}", p) for i, p in enumerate(payloads)])
    page = await store.read_payloads(0, 100)
    assert page == list(enumerate(payloads, 1))
    assert all(type(pos) is int and type(p) is bytes for pos, p in page)
    assert await store.read_payloads(1, 2) == [(2, payloads[1]), (3, payloads[2])]
    assert await store.read_payloads(0, 10_000) == list(enumerate(payloads, 1))


async def test_naive_event_time_is_utc(store: EventStore) -> None:
    naive = datetime(2026, 5, 6, 7, 8, 9, 123456)
    await store.append([ev(time=naive)])
    assert (await store.read())[0].time == naive.replace(tzinfo=UTC)


async def test_position_at(store: EventStore) -> None:
    assert await store.position_at(datetime.now(UTC)) == 0
    await store.append([ev(), ev()])
    await asyncio.sleep(0.05)
    between = datetime.now(UTC)
    await asyncio.sleep(0.05)
    await store.append([ev()])

    assert await store.position_at(between) == 2
    assert await store.position_at(datetime(2000, 1, 1, tzinfo=UTC)) == 0
    assert await store.position_at(datetime.now(UTC) + timedelta(hours=1)) == 3
    # A naive datetime is UTC.
    assert await store.position_at(between.replace(tzinfo=None)) == 2
    # Exactly at an event's recorded_at counts as "at or before".
    third = (await store.read(after=2))[0]
    assert await store.position_at(third.recorded_at) == 3


async def test_position_at_finds_the_last_event_of_every_append(store: EventStore) -> None:
    # Batches of 1..5 events: the answer at each batch's recorded_at is its last
    # position, a microsecond earlier it is the previous batch's (a search over
    # positions must land on every boundary, not only on a few).
    lasts, times = [0], []
    for size in (1, 3, 2, 5, 1, 4, 1, 2, 3, 1, 5):
        result = await store.append([ev() for _ in range(size)])
        lasts.append(result.head)
        times.append((await store.read(after=result.head - 1))[0].recorded_at)
        await asyncio.sleep(0.002)
    for k, at in enumerate(times):
        assert await store.position_at(at) == lasts[k + 1]
        assert await store.position_at(at - timedelta(microseconds=1)) == lasts[k]


# --------------------------------------------------------------------------- concurrency


async def test_concurrent_appenders_gap_free_in_commit_order(store_url: str, store) -> None:
    """8 appenders, each its own store instance (own connections), 50 batches each,
    all writing to shared streams. A concurrent reader must never see a gap."""
    appenders, batches, size = 8, 50, 4
    total = appenders * batches * size
    opts = {"max_size": 1} if store_url.startswith("postgresql") else {}
    writers = [open_store(store_url, **opts) for _ in range(appenders)]
    for w in writers:
        await w.connect()
    done = asyncio.Event()

    async def write(w: EventStore, k: int) -> list[list[int]]:
        out = []
        for b in range(batches):
            events = [ev(f"shared/{(b + i) % 5}", id=f"w{k}-b{b}-{i}") for i in range(size)]
            out.append((await retry_store_op(lambda e=events: w.append(e))).positions)
        return out

    async def tail() -> list[int]:
        # Readers never see N+1 before N: every read continues the previous one.
        seen: list[int] = []
        while not done.is_set() or len(seen) < total:
            page = await store.read(after=len(seen), limit=97)
            start = len(seen) + 1
            assert [e.position for e in page] == list(range(start, start + len(page)))
            seen.extend(e.position for e in page)
            await asyncio.sleep(0)
        return seen

    sub = store.subscribe(0, batch=64)
    try:
        async with asyncio.timeout(40):
            reader = asyncio.create_task(tail())
            subscriber = asyncio.create_task(collect(sub, total, within=40))
            results = await asyncio.gather(*(write(w, k) for k, w in enumerate(writers)))
            done.set()
            seen, streamed = await asyncio.gather(reader, subscriber)
    finally:
        await sub.aclose()
        for w in writers:
            await w.close()

    assert seen == list(range(1, total + 1))
    assert streamed == list(range(1, total + 1))
    assert await store.head() == total
    # Each appender's batches were committed in its own order: positions grow.
    for per_batch in results:
        flat = [p for batch in per_batch for p in batch]
        assert flat == sorted(flat)
        assert all(b == list(range(b[0], b[0] + size)) for b in per_batch)  # batch contiguous
    # Stream versions are 1..n in position order for every stream.
    events = await store.read(limit=total)
    assert len({e.id for e in events}) == total
    versions: dict[str, list[int]] = defaultdict(list)
    for e in events:
        versions[e.stream].append(e.stream_version)
    for vs in versions.values():
        assert vs == list(range(1, len(vs) + 1))


async def test_concurrent_expected_version_one_winner(store_url: str, store) -> None:
    """Optimistic concurrency: of several writers expecting the same version, one wins."""
    await store.append([ev("job/x")])
    writers = [open_store(store_url) for _ in range(4)]
    for w in writers:
        await w.connect()
    try:
        outcomes = await asyncio.gather(
            *(w.append([ev("job/x", expected=1)]) for w in writers), return_exceptions=True
        )
    finally:
        for w in writers:
            await w.close()
    assert sum(not isinstance(o, BaseException) for o in outcomes) == 1
    assert all(isinstance(o, ConflictError) for o in outcomes if isinstance(o, BaseException))
    assert await store.head() == 2


# --------------------------------------------------------------------------- subscribe


async def test_subscribe_catches_up_then_follows_live(store: EventStore) -> None:
    await store.append([ev() for _ in range(25)])
    async with store.subscribe(after=5, batch=7) as sub:
        caught_up = await collect(sub, 25)
        assert caught_up == list(range(6, 26))

        async def writer(k: int) -> None:
            for b in range(10):
                await store.append([ev(f"w/{k}", id=f"live-{k}-{b}-{i}") for i in range(3)])
                await asyncio.sleep(0.002 * k)

        writers = asyncio.gather(*(writer(k) for k in range(4)))
        live = await collect(sub, 25 + 4 * 10 * 3)
        await writers
        assert live == list(range(26, 146))


async def test_subscribe_batches_are_bounded_and_contiguous(store: EventStore) -> None:
    await store.append([ev() for _ in range(10)])
    async with store.subscribe(after=0, batch=4) as sub:
        sizes = [len(await anext(sub)) for _ in range(3)]
    assert sizes == [4, 4, 2]


async def test_a_payload_subscription_gathers_the_appends_of_its_interval_into_one_read(
    store: EventStore,
) -> None:
    # Counted, not timed: five appends made within the interval after a read come
    # back as one batch from one more read, as (position, payload) pairs.
    await store.append([ev(id="first")])
    async with store.subscribe(after=0, batch=100, payloads=True, min_interval=2.0) as sub:
        first = await anext(sub)
        assert [(p, bytes(b)) for p, b in first] == [(1, _payload(await store.read(0, 1)))]
        for i in range(5):
            await store.append([ev(id=f"later-{i}")])
        gathered = await anext(sub)
        assert [p for p, _ in gathered] == [2, 3, 4, 5, 6]
        assert sub.reads == 2
        assert sub.rows == 6  # the rows of both reads: a read's size is rows / reads


async def test_a_quiet_log_is_not_reread_at_each_poll_but_an_unsignalled_append_is_found(
    store_url: str,
) -> None:
    # Counted, not timed: while nothing is appended, the polls every 50 ms read
    # nothing (the LISTEN connection is up; the SQLite files are as they were);
    # an append by another store (on SQLite: no in-process wake-up, as from
    # another process) is still handed out.
    reader, writer = open_store(store_url, poll_interval=0.05), open_store(store_url)
    await reader.connect()
    await reader.migrate()
    await writer.connect()
    try:
        await writer.append([ev()])
        async with reader.subscribe(0) as sub:
            assert [e.position for e in await anext(sub)] == [1]
            following = asyncio.create_task(anext(sub))
            await eventually(lambda: sub.polls_skipped >= 1, within=10)
            reads, skipped = sub.reads, sub.polls_skipped
            await eventually(lambda: sub.polls_skipped >= skipped + 5, within=10)
            assert sub.reads == reads
            await writer.append([ev()])
            assert [e.position for e in await asyncio.wait_for(following, 10)] == [2]
    finally:
        await writer.close()
        await reader.close()


def _payload(rows: list[StoredEvent]) -> bytes:
    return bytes(rows[0].payload)


async def test_subscribe_is_cancellable(store: EventStore) -> None:
    sub = store.subscribe(after=0)
    waiting = asyncio.create_task(anext(sub))
    await asyncio.sleep(0.1)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    # Cancelling a wait skips nothing: the next event still arrives.
    await store.append([ev()])
    async with asyncio.timeout(5):
        assert [e.position for e in await anext(sub)] == [1]
    await sub.aclose()
    await sub.aclose()  # idempotent
    with pytest.raises(StopAsyncIteration):
        await anext(sub)


async def test_close_ends_subscriptions(store_url: str) -> None:
    s = open_store(store_url)
    await s.connect()
    await s.migrate()
    sub = s.subscribe(0)
    waiting = asyncio.create_task(anext(sub))
    await asyncio.sleep(0.1)
    await s.close()
    async with asyncio.timeout(5):
        with pytest.raises(StopAsyncIteration):
            await waiting


# --------------------------------------------------------------------------- snapshots


async def test_snapshots(store: EventStore) -> None:
    assert await store.load_snapshot("state") is None
    for pos in (10, 20, 30, 40):
        await store.save_snapshot("state", pos, b"s%d" % pos)
    await store.save_snapshot("other", 25, b"o")

    assert await store.load_snapshot("state") == (40, b"s40")
    assert await store.load_snapshot("state", upto=39) == (30, b"s30")
    assert await store.load_snapshot("state", upto=30) == (30, b"s30")
    assert await store.load_snapshot("state", upto=9) is None
    assert await store.load_snapshot("other", upto=100) == (25, b"o")

    await store.save_snapshot("state", 40, b"replaced")
    assert await store.load_snapshot("state") == (40, b"replaced")

    big = bytes(range(256)) * 40_000  # 10 MB, binary-safe
    await store.save_snapshot("big", 1, big)
    assert await store.load_snapshot("big") == (1, big)

    assert await store.prune_snapshots("state", keep=2) == 2
    assert await store.load_snapshot("state", upto=25) is None
    assert await store.load_snapshot("state", upto=35) == (30, b"s30")
    assert await store.prune_snapshots("state", keep=2) == 0
    assert await store.load_snapshot("other") == (25, b"o")  # other names untouched


# --------------------------------------------------------------------------- migrations


async def test_migrate_is_idempotent(store: EventStore) -> None:
    assert await store.migrate() == []
    assert await store.migrate() == []


async def test_concurrent_migrate_applies_once(store_url: str) -> None:
    stores = [open_store(store_url) for _ in range(3)]
    for s in stores:
        await s.connect()
    try:
        applied = await asyncio.gather(*(s.migrate() for s in stores))
        assert sorted(len(a) for a in applied)[:-1] == [0, 0]
        assert "0001_event_log" in max(applied, key=len)
        assert (await stores[0].append([ev()])).head == 1
    finally:
        for s in stores:
            await s.close()


async def test_unmigrated_store_says_so(store_url: str) -> None:
    async with open_store(store_url) as s:
        with pytest.raises(StoreError, match="migrate"):
            await s.head()


# --------------------------------------------------------------------------- lifecycle


async def test_close_is_idempotent_and_final(store_url: str) -> None:
    s = open_store(store_url)
    await s.connect()
    await s.migrate()
    await s.close()
    await s.close()
    with pytest.raises(StoreError, match="closed"):
        await s.append([ev()])
    with pytest.raises(StoreError, match="closed"):
        await s.head()


# --------------------------------------------------------------------------- open_store


@pytest.mark.parametrize(
    "url",
    [
        "",
        "   ",
        "esched.db",
        "mysql://root@localhost/db",
        "kafka://localhost:9092",
        "sqlite://somehost/x.db",
        "sqlite:///",
        "sqlite:///x.db?mode=ro",
        "postgresql://postgres@127.0.0.1:notaport/db",
    ],
)
def test_open_store_rejects_bad_urls(url: str) -> None:
    with pytest.raises(StoreConfigError) as info:
        open_store(url)
    message = str(info.value)
    assert "postgresql://" in message or "sqlite:///" in message or "port" in message


def test_open_store_picks_the_adapter(tmp_path) -> None:
    assert isinstance(open_store("postgresql://u@h/db"), PostgresEventStore)
    assert isinstance(open_store("postgres://u@h:5433/db"), PostgresEventStore)
    assert isinstance(open_store(f"sqlite:///{tmp_path}/x.db"), SqliteEventStore)
    assert sqlite_path(f"sqlite:///{tmp_path}/x.db") == f"{tmp_path}/x.db"
    assert sqlite_path("sqlite:///rel/x.db") == "rel/x.db"
    assert sqlite_path("sqlite://:memory:") == ":memory:"
    assert "secret" not in repr(open_store("postgresql://u:secret@h/db"))


async def test_sqlite_memory_store() -> None:
    async with open_store("sqlite://:memory:") as s:
        assert await s.migrate() == ["0001_event_log", "0002_hash_chain"]
        assert (await s.append([ev(), ev()])).head == 2


async def test_unreachable_postgres_is_transient() -> None:
    s = open_store("postgresql://postgres@127.0.0.1:1/nope")
    with pytest.raises(TransientStoreError):
        await s.connect()
    await s.close()


async def test_unknown_database_is_a_config_error() -> None:
    s = open_store("postgresql://postgres@127.0.0.1:5432/esched_no_such_database")
    with pytest.raises(StoreConfigError):
        await s.connect()
    await s.close()


async def test_unopenable_sqlite_path_is_a_config_error(tmp_path) -> None:
    s = open_store(f"sqlite:///{tmp_path}/missing-dir/x.db")
    with pytest.raises(StoreConfigError):
        await s.connect()
    await s.close()


# --------------------------------------------------------------------------- retry helper


async def test_retry_store_op_retries_only_transient_errors() -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise TransientStoreError("connection lost")
        return "ok"

    assert await retry_store_op(flaky, attempts=5, base_delay=0.001, max_delay=0.01) == "ok"
    assert calls == 3

    calls = 0

    async def conflict() -> None:
        nonlocal calls
        calls += 1
        raise ConflictError("s", 1, 2)

    with pytest.raises(ConflictError):
        await retry_store_op(conflict, attempts=5, base_delay=0.001)
    assert calls == 1

    async def down() -> None:
        raise TransientStoreError("down")

    with pytest.raises(TransientStoreError):
        await retry_store_op(down, attempts=3, base_delay=0.001, max_delay=0.001)


# --------------------------------------------------------------------------- PostgreSQL faults


async def _terminate(url: str, app_name: str) -> list[int]:
    """Kill the backends of this database with ``application_name``; their pids."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = $1"
            " AND pid <> pg_backend_pid()",
            app_name,
        )
        return [r["pid"] for r in rows]
    finally:
        await conn.close()


async def _backends(url: str, app_name: str) -> list[int]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = $1",
            app_name,
        )
        return [r["pid"] for r in rows]
    finally:
        await conn.close()


@pytest.mark.postgres
async def test_pg_subscription_survives_killed_listen_connection(pg_url: str) -> None:
    async with PostgresEventStore(pg_url, poll_interval=0.5) as store:
        await store.migrate()
        await store.append([ev() for _ in range(10)])
        async with store.subscribe(0, batch=3) as sub:
            got = await collect(sub, 10)
            listeners = await _backends(pg_url, LISTEN_APP_NAME)
            assert len(listeners) == 1

            # Kill the LISTEN backend while the subscriber waits, and append
            # around the kill: nothing may be skipped or repeated.
            consumer = asyncio.create_task(collect(sub, 40))
            await asyncio.sleep(0.1)
            await store.append([ev() for _ in range(10)])
            assert await _terminate(pg_url, LISTEN_APP_NAME) == listeners
            await store.append([ev() for _ in range(10)])
            await store.append([ev() for _ in range(10)])
            got += await consumer
            assert got == list(range(1, 41))

            # It reconnected (a new LISTEN backend), and live wake-ups still work.
            await store.append([ev()])
            async with asyncio.timeout(5):
                assert [e.position for e in await anext(sub)] == [41]
            again = await _backends(pg_url, LISTEN_APP_NAME)
            assert len(again) == 1 and again != listeners


async def _collect_pairs(sub, until: int, within: float = 10.0) -> list[int]:
    """Positions of the ``(position, payload)`` pairs ``sub`` hands out up to ``until``."""
    got: list[int] = []
    async with asyncio.timeout(within):
        while not got or got[-1] < until:
            got.extend(pos for pos, _payload in await anext(sub))
    return got


@contextlib.asynccontextmanager
async def _log_head_locked(url: str) -> AsyncIterator[None]:
    """The log head's row locked by a connection of its own: appends wait meanwhile."""
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute("SELECT position FROM log_head WHERE one FOR UPDATE")
            yield
    finally:
        await conn.close()


async def _waiting_on_a_lock(url: str, app_name: str) -> bool:
    """Whether a backend of ``app_name`` waits for a lock (a row another holds)."""
    conn = await asyncpg.connect(url)
    try:
        return bool(
            await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name = $1 AND wait_event_type = 'Lock'",
                app_name,
            )
        )
    finally:
        await conn.close()


@pytest.mark.postgres
async def test_pg_payload_subscription_reads_over_its_listen_connection(pg_url: str) -> None:
    # A follower's reads skip the pool: with the pool's one connection held (an append
    # waiting for the log head another connection has locked), the subscription still
    # catches up; its LISTEN backend killed between appends, it reconnects and reads
    # on, skipping and repeating nothing.
    async with PostgresEventStore(pg_url, min_size=1, max_size=1, poll_interval=0.3) as store:
        await store.migrate()
        events = [ev() for _ in range(10)]
        await store.append(events)
        async with store.subscribe(0, batch=3, payloads=True) as sub:
            async with _log_head_locked(pg_url):
                more = [ev() for _ in range(10)]
                late = asyncio.create_task(store.append(more))
                await eventually(lambda: _waiting_on_a_lock(pg_url, POOL_APP_NAME))
                async with asyncio.timeout(5):
                    first = await anext(sub)
                    assert first == [(i + 1, events[i].payload) for i in range(3)]
                    got = [p for p, _ in first] + await _collect_pairs(sub, 10, within=5)
                assert not late.done()
            await late  # the lock released: positions 11 to 20
            listeners = await _backends(pg_url, LISTEN_APP_NAME)
            consumer = asyncio.create_task(_collect_pairs(sub, 40))
            assert await _terminate(pg_url, LISTEN_APP_NAME) == listeners
            await store.append([ev() for _ in range(10)])
            await store.append([ev() for _ in range(10)])
            got += await consumer
            assert got == list(range(1, 41))
            again = await _backends(pg_url, LISTEN_APP_NAME)
            assert len(again) == 1 and again != listeners


@pytest.mark.postgres
async def test_pg_append_after_pool_connections_killed(pg_url: str) -> None:
    async with PostgresEventStore(pg_url, min_size=4, max_size=4) as store:
        await store.migrate()
        first = [ev(f"s/{i}") for i in range(5)]
        await store.append(first)
        # Make the pool hold several connections, then kill every one of them.
        await asyncio.gather(*(store.head() for _ in range(8)))
        killed = await _terminate(pg_url, POOL_APP_NAME)
        assert len(killed) >= 1

        second = [ev(f"s/{i}") for i in range(5)]
        batch = first + second  # a retry of an append that partly happened
        try:
            outcome: object = await store.append(batch)
        except TransientStoreError as exc:
            outcome = exc
        result = await retry_store_op(
            lambda: store.append(batch), attempts=6, base_delay=0.01, max_delay=0.2
        )

        assert result.positions == list(range(1, 11))
        assert result.duplicates == (10 if not isinstance(outcome, Exception) else 5)
        got = await store.read()
        assert [e.id for e in got] == [e.id for e in batch]
        assert [e.stream_version for e in got] == [1] * 5 + [2] * 5
        assert await store.head() == 10
        # Reads work again too (the pool replaced its dead connections).
        assert len(await store.read_payloads(0, 100)) == 10


@pytest.mark.postgres
async def test_pg_reads_after_pool_connections_killed(pg_url: str) -> None:
    async with PostgresEventStore(pg_url, min_size=2, max_size=2) as store:
        await store.migrate()
        await store.append([ev() for _ in range(3)])
        await _terminate(pg_url, POOL_APP_NAME)
        head = await retry_store_op(store.head, attempts=4, base_delay=0.01)
        assert head == 3


@pytest.mark.postgres
async def test_pg_subscription_survives_all_connections_killed(pg_url: str) -> None:
    """Pool and LISTEN connections killed at once: the subscriber backs off,
    reconnects and re-reads; writers retry; nothing is skipped or repeated."""
    async with PostgresEventStore(pg_url, poll_interval=0.3) as store:
        await store.migrate()
        await store.append([ev() for _ in range(5)])
        async with store.subscribe(0, batch=4) as sub:
            consumer = asyncio.create_task(collect(sub, 35))
            await asyncio.sleep(0.1)
            for _ in range(3):
                await _terminate(pg_url, LISTEN_APP_NAME)
                await _terminate(pg_url, POOL_APP_NAME)
                batch = [ev() for _ in range(10)]
                await retry_store_op(lambda b=batch: store.append(b), attempts=6, base_delay=0.01)
                await asyncio.sleep(0.05)
            assert await consumer == list(range(1, 36))


@pytest.mark.postgres
async def test_pg_append_killed_mid_transaction_is_all_or_nothing(pg_url: str) -> None:
    """An appender killed while inside its transaction (waiting for the log lock)
    stores nothing; the retried append then stores the batch exactly once."""
    async with PostgresEventStore(pg_url, max_size=2) as store:
        await store.migrate()
        await store.append([ev("s/x")])
        blocker = await asyncpg.connect(pg_url)
        try:
            lock = blocker.transaction()
            await lock.start()
            await blocker.execute("SELECT 1 FROM log_head FOR UPDATE")
            batch = [ev("s/x") for _ in range(5)]
            appending = asyncio.create_task(store.append(batch))
            async with asyncio.timeout(10):
                while True:  # wait until the appender is blocked on the log lock
                    waiting = await blocker.fetch(
                        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                        " AND application_name = $1 AND wait_event_type = 'Lock'",
                        POOL_APP_NAME,
                    )
                    if waiting:
                        break
                    await asyncio.sleep(0.02)
            await blocker.execute("SELECT pg_terminate_backend($1)", waiting[0]["pid"])
            with pytest.raises(TransientStoreError):
                await appending
            await lock.rollback()
        finally:
            await blocker.close()
        assert await store.head() == 1
        result = await retry_store_op(lambda: store.append(batch), attempts=4, base_delay=0.01)
        assert (result.positions, result.duplicates) == ([2, 3, 4, 5, 6], 0)
        assert [e.stream_version for e in await store.read()] == [1, 2, 3, 4, 5, 6]


@pytest.mark.postgres
async def test_pg_database_closed_for_connections_is_transient(pg_url: str) -> None:
    """Maintenance (ALLOW_CONNECTIONS false, sessions killed) is an outage to wait
    out, not a configuration error; the store recovers once the database is back."""
    server, dbname = pg_url.rsplit("/", 1)
    async with PostgresEventStore(pg_url) as store:
        await store.migrate()
        await store.append([ev()])
        admin = await asyncpg.connect(f"{server}/postgres")
        try:
            await admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS false')
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", dbname
            )
            for _ in range(2):  # the dead pooled connection, then the refused new one
                with pytest.raises(TransientStoreError):
                    await store.append([ev()])
        finally:
            await admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
            await admin.close()
        result = await retry_store_op(lambda: store.append([ev()]), attempts=4, base_delay=0.01)
        assert result.head == 2
