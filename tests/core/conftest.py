"""Fixtures of the core tests: an empty state and a log that folds into it."""

from __future__ import annotations

import pytest

from support.fold import Log


@pytest.fixture
def state():
    from esched.core import ClusterState

    return ClusterState()


@pytest.fixture
def log(state):
    return Log(state)
