"""Retry with capped exponential backoff and jitter, for transient peer failures.

The one retry policy of the services: :class:`Backoff` for the delays and
:func:`retry_until` for the loop; :func:`esched.services.faults.retry_transient` is
the services' use of it (transient store or broker failures, counted per peer).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["Backoff", "retry_until"]

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(slots=True)
class Backoff:
    """Delays ``base * 2**n`` capped at ``cap``, each drawn uniformly from [delay/2, delay].

    Half the delay is jitter ("equal jitter"): clients that failed together spread
    out, and none retries sooner than half its step.
    """

    base: float = 0.1
    cap: float = 10.0
    attempt: int = 0

    def next_delay(self) -> float:
        delay = min(self.cap, self.base * (2**self.attempt))
        self.attempt += 1
        return random.uniform(delay / 2, delay)

    def reset(self) -> None:
        self.attempt = 0


async def retry_until(
    op: Callable[[], Awaitable[T]],
    *,
    retriable: Callable[[BaseException], bool],
    what: str,
    on_retry: Callable[[BaseException], None] | None = None,
    backoff: Backoff | None = None,
    attempts: int | None = None,
) -> T:
    """Run ``op`` until it succeeds, sleeping between tries while ``retriable(exc)``.

    Non-retriable errors propagate at once. ``attempts=None`` retries forever:
    the right policy for a service whose peer went away and will come back.
    """
    backoff = backoff or Backoff()
    tries = 0
    while True:
        try:
            return await op()
        except Exception as exc:
            tries += 1
            if not retriable(exc) or (attempts is not None and tries >= attempts):
                raise
            delay = backoff.next_delay()
            log.warning(
                "%s failed (%s: %s); retry %d in %.2fs", what, type(exc).__name__, exc, tries, delay
            )
            if on_retry:
                on_retry(exc)
            await asyncio.sleep(delay)
