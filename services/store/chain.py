"""The log's hash chain: each stored event carries a hash over the one before it.

``hash(n) = sha256(hash(n-1) || digest(n))`` with ``hash(0)`` 32 zero bytes, and
``digest(n) = sha256(canonical(n))`` over what a decision or fact *is*: position,
stream version, the payload (length-prefixed) and id, type and stream (joined by
the unit separator U+001F, which the store refuses inside them, so the split is
unique)::

    int8(position) int8(stream_version) int4(len payload) payload
    id US type US stream

(big-endian integers, UTF-8 text). Both are computed in one place, the Cython
module ``_chain`` (OpenSSL's SHA-256): the appends, the walks and the PostgreSQL
migration's backfill all call it; the database never computes a digest. The
adapters write the hash in the same transaction as the append, and keep the
head's hash next to the head position, so an UPDATE of a stored event, a DELETE
of any row (the last one included) or a forged row in between shows as a broken
link at its position.
:func:`verify_store` walks the chain in this process (the adapters' ``chain_rows``
give each row's stored hash and digest); the PostgreSQL adapter's ``verify``
streams the rows with ``COPY ... (FORMAT binary)`` into ``_chain.CopyChain``,
several ranges at once, since a chain whose every link matches its stored
predecessor is a valid chain.

What the chain does not stop: a writer with the database's credentials who
rewrites a row *and* recomputes every hash after it. Against that, keep the head
hash that ``esched store verify`` prints somewhere the database's writers cannot
change; a later verify that does not reproduce it shows the rewrite.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ._chain import link, row_digest

__all__ = [
    "SEPARATOR",
    "VERIFY_BATCH",
    "VERIFY_PARALLEL",
    "ZERO_HASH",
    "ChainReport",
    "chain_hashes",
    "link",
    "past_the_head",
    "row_digest",
    "verify_rows",
    "verify_store",
]

#: The hash before position 1.
ZERO_HASH = bytes(32)
#: Events checked per read: large batches keep the per-round-trip cost small.
VERIFY_BATCH = 50_000
#: Ranges read at once: the server hashes each on its own connection.
VERIFY_PARALLEL = 3

#: Refused inside an event's id, type and stream (it separates them in the digest).
SEPARATOR = "\x1f"


def chain_hashes(prev: bytes, digests: list[bytes]) -> list[bytes]:
    """The hashes of consecutive rows after one whose hash is ``prev``."""
    out = []
    for d in digests:
        prev = link(prev, d)
        out.append(prev)
    return out


@dataclass(slots=True)
class ChainReport:
    """What :func:`verify_store` found."""

    ok: bool = True
    #: events whose link was checked
    checked: int = 0
    #: the log head (the head table's position) and its hash (hex) as recomputed
    head: int = 0
    head_hash: str = ZERO_HASH.hex()
    #: the first position at which the chain breaks, and why
    broken_at: int | None = None
    reason: str | None = None
    seconds: float = 0.0
    #: events per second of the walk
    rate: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "ok": self.ok,
            "checked": self.checked,
            "head": self.head,
            "head_hash": self.head_hash,
            "broken_at": self.broken_at,
            "reason": self.reason,
            "seconds": round(self.seconds, 3),
            "events_per_second": round(self.rate),
        }


def verify_rows(
    prev: bytes, expected: int, rows: list[Any], report: ChainReport
) -> tuple[bytes, int]:
    """Check ``rows`` of ``(position, stored hash, digest)`` in order after the row
    at ``expected - 1`` whose hash is ``prev``; returns the last hash and the next
    expected position. Sets ``report.broken_at`` at the first broken link."""
    for position, stored, digest in rows:
        if position != expected:
            report.ok = False
            report.broken_at = expected
            report.reason = f"position {expected} is missing (next stored: {position})"
            return prev, expected
        prev = link(prev, digest)
        if stored != prev:
            report.ok = False
            report.broken_at = position
            report.reason = (
                "no hash stored"
                if stored is None
                else "stored hash does not match the event's content and the chain before it"
            )
            return prev, expected
        expected += 1
    report.checked += len(rows)
    return prev, expected


async def past_the_head(
    report: ChainReport, first: int, head: Callable[[], Awaitable[tuple[int, bytes | None]]]
) -> None:
    """A row at ``first``, read past the head the walk ended at: a break unless an
    append made it meanwhile. The head is read again after the row: a row and its
    head move are one transaction, so a row past that head was never appended."""
    now, _hash = await head()
    if first > now:
        report.ok = False
        report.broken_at = first
        report.reason = f"position {first} is past the head ({now}): not appended by the store"


async def verify_store(
    read: Callable[[int, int], Awaitable[list[Any]]],
    head: Callable[[], Awaitable[tuple[int, bytes | None]]],
    *,
    upto: int | None = None,
    batch: int = VERIFY_BATCH,
    parallel: int = VERIFY_PARALLEL,
) -> ChainReport:
    """Walk the chain with ``read(after, limit)`` (rows of ``(position, hash,
    digest)`` with ``after < position <= after + limit``) up to the head (``head()``:
    position and stored hash of the log head), or ``upto``.

    Up to ``parallel`` ranges are read at once (the server computes their digests on
    as many connections) while the client links them in order."""
    report = ChainReport()
    started = time.perf_counter()
    head_pos, head_hash = await head()
    target = head_pos if upto is None else min(upto, head_pos)
    report.head = head_pos
    prev, expected = ZERO_HASH, 1
    ranges = iter(range(0, target, batch))
    inflight: deque[asyncio.Future[list[Any]]] = deque()

    def more() -> None:
        while len(inflight) < parallel:
            after = next(ranges, None)
            if after is None:
                return
            inflight.append(asyncio.ensure_future(read(after, min(batch, target - after))))

    try:
        more()
        while inflight and report.ok:
            rows = await inflight.popleft()
            more()
            prev, expected = verify_rows(prev, expected, rows, report)
    finally:
        for fut in inflight:
            fut.cancel()
        if inflight:
            await asyncio.gather(*inflight, return_exceptions=True)
    if report.ok and expected <= target:
        report.ok = False
        report.broken_at = expected
        report.reason = f"position {expected} is missing (the head is {head_pos})"
    if report.ok and target == head_pos and (head_hash or ZERO_HASH) != prev:
        # The rows agree with each other but not with the head: the last rows were
        # deleted (or the head rewound).
        report.ok = False
        report.broken_at = head_pos
        report.reason = "the head's hash does not match the last stored event"
    if report.ok and target == head_pos:
        rows = await read(head_pos, batch)
        if rows:
            await past_the_head(report, rows[0][0], head)
    report.head_hash = prev.hex()
    report.seconds = time.perf_counter() - started
    report.rate = report.checked / report.seconds if report.seconds > 0 else 0.0
    return report
