"""esched services as OS processes: the one harness of ``esched bench e2e`` and the tests.

Each service runs as ``python -c "<esched CLI>" <command> ...`` with the configuration in
its environment (:func:`service_env`), its log (stderr) and its JSON summary (stdout)
in files, and stops with SIGTERM like under a process supervisor (SIGKILL after a
grace period).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

__all__ = ["ServiceProcess", "await_until", "run_esched", "service_env", "wait_until"]

#: The ``esched`` command line as a Python statement (no console script needed).
CLI = "from esched.services.cli import main; main()"


def service_env(
    store: str, kafka: str, prefix: str = "esched.", log_level: str = "info"
) -> dict[str, str]:
    """The environment of every esched process of one deployment."""
    return {
        **os.environ,
        "ESCHED_KAFKA": kafka,
        "ESCHED_STORE": store,
        "ESCHED_TOPIC_PREFIX": prefix,
        "ESCHED_LOG_LEVEL": log_level,
    }


def run_esched(
    args: Sequence[str], env: dict[str, str], timeout: float = 60, check: bool = True
) -> subprocess.CompletedProcess[bytes]:
    """One ``esched`` command to its end (``store migrate``, ``publish``, ``audit``, ...)."""
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
        check=check,
    )


class ServiceProcess:
    """One ``esched`` service process; its log (stderr) and output (stdout) in files.

    :param profile: run it under cProfile, which writes ``<name>.prof`` into ``logdir``
        when the process ends on SIGTERM.
    """

    def __init__(
        self,
        name: str,
        args: Sequence[str],
        env: dict[str, str],
        logdir: Path,
        profile: bool = False,
    ) -> None:
        self.name = name
        self.log = logdir / f"{name}.log"
        self.out = logdir / f"{name}.out"
        if profile:
            main = logdir / "_esched_main.py"
            main.write_text(CLI + "\n")
            cmd = [sys.executable, "-m", "cProfile", "-o", str(logdir / f"{name}.prof"), str(main)]
        else:
            cmd = [sys.executable, "-c", CLI]
        with self.log.open("wb") as err, self.out.open("wb") as out:
            self.proc = subprocess.Popen(
                [*cmd, *args], env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def logged(self, text: str) -> bool:
        """Whether its log has ``text`` so far."""
        return text in self.log.read_text(errors="replace")

    def died(self) -> bool:
        """Whether it ended on its own (a SIGKILL sent by :meth:`kill9` is not that)."""
        return self.proc.poll() is not None and self.proc.returncode != -signal.SIGKILL

    def check_alive(self) -> None:
        """Raise RuntimeError, with the tail of its log, if it has ended."""
        if self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{tail}")

    def kill9(self) -> None:
        """SIGKILL: no goodbye to the group, no lease release."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, grace: float = 20) -> int | None:
        """SIGTERM, then SIGKILL if it has not ended within ``grace`` s; its exit status
        (None: it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                return None
        return self.proc.returncode

    def summary(self) -> dict[str, Any] | None:
        """The JSON summary it printed on stdout when it stopped, if any."""
        with contextlib.suppress(ValueError, OSError):
            data = orjson.loads(self.out.read_bytes() or b"null")
            return data if isinstance(data, dict) else None
        return None


def _ended(what: str, services: Iterable[ServiceProcess]) -> None:
    for s in services:
        if s.died():
            tail = s.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(
                f"{s.name} exited with {s.proc.returncode} while waiting for {what}:\n{tail}"
            )


def wait_until(
    what: str,
    check: Callable[[], bool],
    within: float,
    services: Iterable[ServiceProcess] = (),
    interval: float = 0.2,
) -> float:
    """Poll ``check()`` until true; the seconds it took.

    Raises TimeoutError naming ``what`` after ``within`` s, and RuntimeError (with
    the tail of its log) as soon as one of ``services`` ends on its own.
    """
    t0 = time.monotonic()
    watched = list(services)
    while not check():
        _ended(what, watched)
        if time.monotonic() - t0 > within:
            raise TimeoutError(f"timed out after {within}s waiting for {what}")
        time.sleep(interval)
    return time.monotonic() - t0


async def await_until(
    what: str,
    check: Callable[[], bool],
    within: float,
    services: Iterable[ServiceProcess] = (),
    interval: float = 0.1,
) -> float:
    """:func:`wait_until` for a caller on an event loop (sleeps without blocking it)."""
    t0 = time.monotonic()
    watched = list(services)
    while not check():
        _ended(what, watched)
        if time.monotonic() - t0 > within:
            raise TimeoutError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(interval)
    return time.monotonic() - t0
