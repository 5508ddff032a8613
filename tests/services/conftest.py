"""Fixtures for service tests (the shared broker fixture is in tests/conftest.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from esched.services.devbroker import DevBroker


@pytest.fixture
def dev_broker() -> Iterator[DevBroker]:
    """A broker of this test's own, which the test may stop and restart (outages)."""
    with DevBroker().running() as broker:
        yield broker


@pytest.fixture
def topic_prefix() -> str:
    """A fresh topic prefix, so tests sharing the broker never see each other's messages."""
    return f"t{uuid.uuid4().hex[:10]}."
