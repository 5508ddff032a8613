"""Admission orders jobs by each class's band (its priority, or its priorityClassName
mapped by ``bands.classes``): the bands of the classes new since the last release are
resolved once per distinct (priority, priorityClassName), as one-pod Volcano Jobs
make a class per pod, nearly all alike."""

from __future__ import annotations

import pytest

from esched.core import ClusterState
from esched.core.admission import Admission
from esched.core.bands import Band, BandConfig
from esched.core.quota import Quota
from support.fold import EV, Log, node, pod

# (priority, priorityClassName) of the pods, four of each, each pod a class of its own
KINDS = [(0, None), (5000, None), (0, "nightly"), (2_000_000_000, "nightly")]


def test_new_classes_resolve_their_band_once_per_priority_and_class_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("n1"))
    bands = BandConfig(classes={"nightly": Band.BATCH})
    adm = Admission(Quota(bands=bands))
    log(EV.POD_SUBMITTED, pod("first"))
    before = adm._class_bands(st).tolist()  # the classes known at the last release
    for i in range(16):
        priority, class_name = KINDS[i % len(KINDS)]
        extra = {"priorityClassName": class_name} if class_name else {}
        log(EV.POD_SUBMITTED, pod(f"p{i}", cpu=f"{100 + i}m", priority=priority, **extra))
    assert st.n_classes == len(before) + 16
    resolve = BandConfig.band_of
    calls: list[tuple[int, str | None]] = []

    def counted(self: BandConfig, priority: int, name: str | None = None) -> Band:
        calls.append((priority, name))
        return resolve(self, priority, name)

    monkeypatch.setattr(BandConfig, "band_of", counted)
    got = adm._class_bands(st).tolist()
    want = [
        int(resolve(bands, int(s["priority"]), s.get("priorityClassName")))
        for s in st.class_specs[: st.n_classes]
    ]
    assert got == want
    assert (
        got[len(before) :]
        == [int(Band.BEST_EFFORT), int(Band.PRODUCTION), int(Band.BATCH), int(Band.BATCH)] * 4
    )
    assert sorted(calls, key=str) == sorted(set(calls), key=str)  # each pair once
    assert len(calls) == len(KINDS)
