"""A gang's members are read from the slots the gang has held, not from every pod: the
answer must be what a scan of every pod slot gives, through resubmits that move a pod
to another gang, deletions whose slots are reused, and snapshots."""

from __future__ import annotations

import numpy as np
import pytest

from esched.core import ClusterState
from esched.core.phases import PHASES, phase_code
from support.fold import EV, envelope, pod

from .test_snapshot import random_log


def _scanned(s: ClusterState, key: str, phase: str | None) -> list[str | None]:
    """Every pod slot scanned (what gang_members answered before it kept spans)."""
    g = s.gang_index.get(key)
    if g is None:
        return []
    mask = s.pod_gang_np[: s.n_pods] == g
    if phase is not None:
        mask &= s.pod_phase_np[: s.n_pods] == phase_code(phase)
    return [s.pod_keys[i] for i in np.flatnonzero(mask)]


def _check(s: ClusterState) -> None:
    for key in [*s.gang_keys, "ns/unknown"]:
        for phase in (None, *PHASES):
            assert s.gang_members(key, phase) == _scanned(s, key, phase), (key, phase)


@pytest.mark.parametrize("seed", range(6))
def test_gang_members_are_those_a_scan_of_every_pod_finds(seed: int) -> None:
    log = random_log(seed, 600)
    s = ClusterState()
    checked_gangs = 0
    for i in range(0, len(log), 20):
        s.apply_many(log[i : i + 20])
        _check(s)
        checked_gangs += sum(bool(s.gang_members(k)) for k in s.gang_keys)
        restored = ClusterState.from_bytes(s.to_bytes())
        _check(restored)
    assert checked_gangs > 0  # the log did put pods in gangs


def test_a_pod_resubmitted_to_another_gang_leaves_the_first() -> None:
    s = ClusterState()
    s.apply_many(
        enumerate(
            [
                envelope(EV.POD_SUBMITTED, pod("a", gang="g1")),
                envelope(EV.POD_SUBMITTED, pod("b", gang="g2")),
                envelope(EV.POD_SUBMITTED, pod("a", gang="g2")),  # still Pending: updated
            ],
            1,
        )
    )
    assert s.gang_members("ns/g1") == []
    assert s.gang_members("ns/g1", "Pending") == []
    assert s.gang_members("ns/g2", "Pending") == ["ns/a", "ns/b"]
    _check(s)
