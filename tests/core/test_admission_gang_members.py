"""Admission's release reads a gang's pending members off the gang's own slots when
nothing else needs every pending pod (one queue, no capability, no guarantee), sets
the rows of one-member gangs instead of summing them, and sums the cluster's
allocatable as a product with the alive flags: the work let through, its order, the
holds and the rejections must be what summing every pending pod (and the alive
nodes' rows) gives, over a seeded mix of one-pod Volcano Jobs, multi-pod Jobs with
minResources, PodGroups without them, and plain pods."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from esched.core import ClusterState, admission
from esched.core.admission import OBSERVED, Admission, WorkItem, event_key
from esched.core.phases import PHASE_PENDING
from esched.core.queues import cluster_allocatable
from support.gang_mix import mixed_log

from .test_snapshot import random_log


def _every_pending(st: ClusterState, gangs: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The reference: every pending pod's gang compared with the asked ones."""
    pend = np.flatnonzero(st.pod_phases() == PHASE_PENDING)
    sel = pend[np.isin(st.pod_gangs()[pend], np.array(gangs, dtype=np.int64))]
    return sel.astype(np.int64), st.pod_gangs()[sel].astype(np.int64)


def _summed(
    k: int, rows: np.ndarray, req: np.ndarray, prio: np.ndarray, band: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The reference: every member added to its gang's row (ufunc.at)."""
    gang_req = np.zeros((k, req.shape[1]), dtype=np.int64)
    gang_n = np.zeros(k, dtype=np.int64)
    gang_prio = np.full(k, np.iinfo(np.int64).min, dtype=np.int64)
    gang_band = np.zeros(k, dtype=np.int64)
    np.add.at(gang_req, rows, req)
    np.add.at(gang_n, rows, 1)
    np.maximum.at(gang_prio, rows, prio)
    np.maximum.at(gang_band, rows, band)
    return gang_req, gang_n, gang_prio, gang_band


def admit(log: list[dict[str, Any]], batch: int = 5) -> list[Any]:
    """Fold ``log`` ``batch`` events at a time; after each batch, admission observes it
    and releases every pending pod and gang: (rejections, released, held) per batch."""
    st = ClusterState()
    adm = Admission()
    out: list[Any] = [adm.start(st)]
    for i in range(0, len(log), batch):
        events = list(enumerate(log[i : i + batch], int(st.position) + 1))
        st.apply_many(events)
        facts = [(p, e["type"], event_key(e["data"]), e["data"]) for p, e in events]
        rejected = adm.observe(st, [f for f in facts if f[1] in OBSERVED])
        items: list[WorkItem] = []
        gangs: dict[str, None] = {}
        for key in st.pending_pods():
            g = st.gang_of(st.pod_index[key])
            if g < 0:
                items.append(("pending", "pod", key, int(st.position)))
            else:
                gangs[st.gang_keys[g]] = None
        items += [("pending", "gang", key, int(st.position)) for key in gangs]
        released = adm.release(st, items)
        out.append((rejected, released, dict(adm.held)))
    return out


@pytest.mark.parametrize("multi", [True, False], ids=["multi-pod", "one-pod"])
@pytest.mark.parametrize("seed", range(8))
def test_release_by_gang_slots_is_release_by_every_pending_pod(
    seed: int, multi: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = mixed_log(seed, multi=multi)
    by_slots = admit(log)
    monkeypatch.setattr(admission, "pending_members", _every_pending)
    monkeypatch.setattr(admission, "gang_rows", _summed)
    assert admit(log) == by_slots
    released = [it for _r, rel, _h in by_slots[1:] for it in rel]
    held = [reason for _r, _rel, h in by_slots[1:] for reason in h.values()]
    # The mix did let gangs through and hold some as too large.
    assert sum(it[1] == "gang" for it in released) > 10
    assert "ClusterCapacity" in held


@pytest.mark.parametrize("seed", range(4))
def test_cluster_allocatable_sums_the_alive_nodes_rows(seed: int) -> None:
    st = ClusterState()
    for i, (pos, event) in enumerate(random_log(seed, 300)):
        st.apply(event, pos)
        if i % 25 == 0:
            rows = st.node_allocatable()[st.node_alive()]
            want = {st.res_names[r]: int(rows[:, r].sum()) for r in range(st.n_res)}
            assert cluster_allocatable(st) == want
