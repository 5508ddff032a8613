"""Lost peers versus bugs: what a service retries, and polling that survives a broker blip.

A transient failure of the store (:class:`TransientStoreError`) or of the broker
(a retriable :class:`BusError`) means a peer went away and will come back: the
service waits with backoff and counts the retry. Anything else is a bug or bad
configuration and propagates.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

import orjson

from esched.services import metrics
from esched.services.bus.base import BusConsumer, BusError, Message
from esched.services.retry import Backoff, retry_until
from esched.services.store.base import AppendResult, EventStore, NewEvent, TransientStoreError

__all__ = ["append_envelopes", "count_retry", "is_transient", "poll_or_pause", "retry_transient"]

T = TypeVar("T")
log = logging.getLogger(__name__)

#: Longest wait between two retries of a lost peer. Low: a retry costs a connection
#: attempt, while a long step delays every service by up to that much once the
#: broker or the database is back (after a 20 s broker pause, a 10 s cap let
#: services sit idle for seconds with the broker answering).
RECONNECT_CAP = 1.0


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` is a lost store or broker, worth a retry."""
    return isinstance(exc, TransientStoreError) or (isinstance(exc, BusError) and exc.retriable)


def count_retry(service: str, peer: str) -> Callable[[BaseException], None]:
    """An ``on_retry`` callback counting ``esched_retries_total{service, peer}``."""
    counter = metrics.RETRIES.labels(service, peer)
    return lambda _exc: counter.inc()


async def retry_transient(
    op: Callable[[], Awaitable[T]],
    *,
    what: str,
    service: str,
    peer: str,
    backoff: Backoff | None = None,
) -> T:
    """``op()`` retried forever while it fails transiently (:func:`is_transient`),
    with backoff, each retry counted for ``service`` and ``peer`` ("store", "bus").

    A service whose database or broker went away waits for it rather than dying;
    any other error propagates at once. Retries back off up to :data:`RECONNECT_CAP`.
    """
    return await retry_until(
        op,
        retriable=is_transient,
        what=what,
        on_retry=count_retry(service, peer),
        backoff=backoff or Backoff(cap=RECONNECT_CAP),
    )


async def append_envelopes(
    store: EventStore,
    envelopes: Iterable[tuple[dict[str, Any], str]],
    *,
    time: datetime,
    what: str,
    service: str,
) -> tuple[list[NewEvent], AppendResult]:
    """Append ``(envelope, stream)`` pairs as one batch recorded at ``time``, retried
    while the store is away (:func:`retry_transient`); the events and the result.

    For a service's own records with deterministic ids: a retry, or another
    instance's copy, dedupes (``AppendResult.duplicates``).
    """
    events = [
        NewEvent(env["id"], env["type"], stream, orjson.dumps(env), time)
        for env, stream in envelopes
    ]
    res = await retry_transient(
        lambda: store.append(events), what=what, service=service, peer="store"
    )
    return events, res


async def poll_or_pause(
    consumer: BusConsumer, timeout_ms: int, max_records: int, *, service: str, pause: float
) -> list[Message]:
    """One poll; on a retriable broker error, count it, wait ``pause`` s, return ``[]``.

    The caller's loop then simply polls again, so a broker outage is a run of empty
    polls, not a crash.
    """
    try:
        return await consumer.poll(timeout_ms, max_records)
    except BusError as exc:
        if not exc.retriable:
            raise
        metrics.RETRIES.labels(service, "bus").inc()
        log.warning("%s: poll failed: %s", service, exc)
        await asyncio.sleep(pause)
        return []
