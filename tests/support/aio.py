"""Async test helpers: wait for a condition, and catch exceptions nobody awaited."""

from __future__ import annotations

import asyncio
import gc
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

__all__ = ["eventually", "loop_exceptions"]


async def eventually(
    predicate: Callable[[], Any | Awaitable[Any]],
    within: float = 5.0,
    *,
    interval: float = 0.02,
    message: str | Callable[[], str] = "",
) -> Any:
    """Wait until ``predicate()`` (sync or async) is truthy; return its value.

    Fails the test after ``within`` seconds with ``message`` (or ``message()``, for a
    description of what was there instead). The predicate is checked first at once,
    then every ``interval`` s: a test waits as long as the event takes, not a fixed
    guess.
    """
    deadline = time.monotonic() + within
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            what = message() if callable(message) else message
            pytest.fail(f"not true within {within:g} s" + (f": {what}" if what else ""))
        await asyncio.sleep(interval)


@pytest.fixture
async def loop_exceptions() -> AsyncIterator[list[dict[str, Any]]]:
    """Fail the test if an exception reached its event loop's exception handler.

    Such an exception was raised where nobody awaits it (a background task, a
    callback): the test may pass while the code under test is broken. As in asyncpg's
    test base, a handler records each one and the test fails at teardown. Added to
    every async test by tests/conftest.py.
    """
    caught: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: caught.append(context))
    try:
        yield caught
        gc.collect()  # "Task exception was never retrieved" is reported on collection
    finally:
        loop.set_exception_handler(previous)
    if caught:
        lines = [
            f"{c.get('message', '')}: {c.get('exception')!r}" if c.get("exception") else str(c)
            for c in caught
        ]
        pytest.fail("exception(s) reached the event loop's handler:\n" + "\n".join(lines))
