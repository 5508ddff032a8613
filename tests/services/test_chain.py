"""The hash chain's one rule (``store/_chain.pyx``) and the PostgreSQL walk over COPY.

The COPY streams below follow PostgreSQL's binary COPY format (the "Binary Format"
section of https://www.postgresql.org/docs/current/sql-copy.html): signature, flags,
header extension, then per row an int16 field count and per field an int32 length
(-1 for NULL) and the bytes; an int16 -1 ends the data.
"""

from __future__ import annotations

import hashlib
import random
import struct

import asyncpg
import pytest

from esched.services.store import postgres as pg_adapter
from esched.services.store._chain import CopyChain
from esched.services.store.chain import ZERO_HASH, link, row_digest, verify_store
from support.events import append_events, pod

Row = tuple[int, int, bytes, str, str, str]  # position, version, payload, id, type, stream


def _documented_digest(
    position: int, version: int, id_: str, type_: str, stream: str, payload: bytes
) -> bytes:
    # The formula as services/store/chain.py's docstring states it.
    return hashlib.sha256(
        struct.pack(">qqi", position, version, len(payload))
        + payload
        + f"{id_}\x1f{type_}\x1f{stream}".encode()
    ).digest()


def _chained(rows: list[Row]) -> list[bytes]:
    prev, out = ZERO_HASH, []
    for position, version, payload, id_, type_, stream in rows:
        prev = hashlib.sha256(
            prev + _documented_digest(position, version, id_, type_, stream, payload)
        ).digest()
        out.append(prev)
    return out


def _copy_stream(rows: list[Row], hashes: list[bytes | None]) -> bytes:
    out = [b"PGCOPY\n\xff\r\n\x00", struct.pack(">ii", 0, 0)]
    for (position, version, payload, id_, type_, stream), h in zip(rows, hashes, strict=True):
        fields = [
            struct.pack(">q", position),
            struct.pack(">q", version),
            payload,
            id_.encode(),
            type_.encode(),
            stream.encode(),
            h,
        ]
        out.append(struct.pack(">h", len(fields)))
        for f in fields:
            out.append(struct.pack(">i", -1) if f is None else struct.pack(">i", len(f)) + f)
    out.append(struct.pack(">h", -1))
    return b"".join(out)


ROWS: list[Row] = [
    (p, 1, b'{"n": %d, "text": "\xc3\xa9"}' % p, f"id-{p}", "esched.pod.submitted", f"pod-t/p{p}")
    for p in range(1, 7)
]


def _walk(stream: bytes, after: int, upto: int, cuts: list[int]) -> CopyChain:
    walk = CopyChain(after, upto, ZERO_HASH)
    at = 0
    for cut in [*cuts, len(stream)]:
        walk.feed(stream[at:cut])
        at = cut
    walk.finish()
    return walk


def test_the_digest_and_link_are_the_documented_formula():
    for position, version, payload, id_, type_, stream in ROWS:
        d = row_digest(position, version, id_, type_, stream, payload)
        assert d == _documented_digest(position, version, id_, type_, stream, payload)
        assert link(ZERO_HASH, d) == hashlib.sha256(ZERO_HASH + d).digest()
    with pytest.raises(ValueError):
        link(b"short", ZERO_HASH)


def test_a_copy_stream_split_anywhere_gives_the_same_verdict():
    hashes = _chained(ROWS)
    good = _copy_stream(ROWS, hashes)
    tampered_rows = list(ROWS)
    tampered_rows[2] = (
        3,
        1,
        b'{"n": 3, "moved": true}',
        "id-3",
        "esched.pod.submitted",
        "pod-t/p3",
    )
    bad = _copy_stream(tampered_rows, hashes)
    rng = random.Random(19)
    splits = [[], list(range(1, len(good)))] + [
        sorted(rng.sample(range(1, len(good)), 5)) for _ in range(50)
    ]
    for cuts in splits:
        ok = _walk(good, 0, 6, cuts)
        assert (ok.broken_at, ok.checked, ok.last_hash) == (None, 6, hashes[-1])
        broken = _walk(bad, 0, 6, [c for c in cuts if c < len(bad)])
        assert broken.broken_at == 3 and "does not match" in broken.reason
        assert broken.checked == 2


def test_a_range_starts_from_its_predecessors_stored_hash():
    hashes = _chained(ROWS)
    walk = _walk(_copy_stream(ROWS[2:], hashes[2:]), 3, 6, [])
    assert (walk.broken_at, walk.checked, walk.last_hash) == (None, 3, hashes[-1])
    # The predecessor itself gone: the break is at its position.
    gone = _walk(_copy_stream(ROWS[3:], hashes[3:]), 3, 6, [])
    assert gone.broken_at == 3 and "missing" in gone.reason


def test_missing_rows_and_hashes_are_breaks_at_their_positions():
    hashes = _chained(ROWS)
    short = _walk(_copy_stream(ROWS[:4], hashes[:4]), 0, 6, [])
    assert short.broken_at == 5 and "missing" in short.reason
    hole = _walk(_copy_stream(ROWS[:2] + ROWS[3:], hashes[:2] + hashes[3:]), 0, 6, [])
    assert hole.broken_at == 3 and "next stored: 4" in hole.reason
    unhashed = _walk(_copy_stream(ROWS, [*hashes[:4], None, hashes[5]]), 0, 6, [])
    assert unhashed.broken_at == 5 and unhashed.reason == "no hash stored"


def test_a_stream_that_is_not_binary_copy_is_refused():
    with pytest.raises(ValueError, match="COPY"):
        CopyChain(0, 1, ZERO_HASH).feed(b"position,hash\n" + bytes(20))


async def test_postgres_verify_over_many_ranges_names_the_first_break(pg_store, monkeypatch):
    # Small ranges, so the walk spans several COPYs checked at once.
    monkeypatch.setattr(pg_adapter, "VERIFY_BATCH", 2)
    await append_events(pg_store, *(pod(f"p{i}", "1") for i in range(13)))
    report = await pg_store.verify()
    walked = await verify_store(pg_store.chain_rows, pg_store.head_hash)
    assert report.ok and report.checked == 13 and report.head_hash == walked.head_hash
    conn = await asyncpg.connect(pg_store.url)
    try:
        await conn.execute(
            "UPDATE events SET payload = payload || ' '::bytea WHERE position IN (6, 11)"
        )
    finally:
        await conn.close()
    report = await pg_store.verify()
    assert (report.ok, report.broken_at, report.checked) == (False, 6, 5)
    walked = await verify_store(pg_store.chain_rows, pg_store.head_hash)
    assert (walked.ok, walked.broken_at) == (False, 6)


async def test_bench_verify_reports_rates_and_cpu_for_a_fresh_database(pg_url):
    from esched.services.bench_verify import run_verify_bench

    result = await run_verify_bench(pg_url.rsplit("/", 1)[0], 400, 20, 1, False)
    assert result["events"] == 400 and result["store"] == "postgresql (dropped)"
    (run,) = result["runs"]
    assert run["events_per_s"] > 0 and run["client_cpu_s_per_1m"] >= 0
    assert len(result["baseline_copy_only"]) == 1
