"""Whether a batch's verdicts hold after events got into the log first
(``verdicts_hold`` in services/commit/arbiter.py) looks a moved PodGroup's (or
Job's) gang up by its members instead of each bound pod's gang: the answer must be
the one of comparing every pod's gang's stream, over a seeded mix of one-pod Jobs,
multi-pod Jobs and PodGroups, plain pods and batches naming them."""

from __future__ import annotations

import random
from typing import Any

import pytest

from esched.core import ClusterState
from esched.schemas import events as E
from esched.schemas.events import JOB, POD, PODGROUP, stream_key, stream_name, stream_of
from esched.services.commit.arbiter import NEUTRAL, verdicts_hold
from support.gang_mix import mixed_log


def _by_every_pod(
    moved: list[tuple[str, str]], fresh: list[dict[str, Any]], state: ClusterState
) -> bool:
    """The reference: every bound pod's gang's stream compared with the moved ones."""
    if not moved or any(t not in NEUTRAL for t, _stream in moved):
        return False
    groups = False
    checked = [stream for _t, stream in moved]
    for t, stream in moved:
        if t == E.PODGROUP_SUBMITTED:
            if stream_key(stream, PODGROUP) is None:
                return False
            groups = True
        elif t == E.JOB_SUBMITTED:
            key = stream_key(stream, JOB)
            if key is None:
                return False
            groups = True
            checked.append(stream_name(PODGROUP, key))
    streams: set[str] = set()
    for env in fresh:
        data = env["data"]
        if data.get("victims") or data.get("reclaim"):
            return False
        if groups and isinstance(data.get("gang"), str):
            streams.add(stream_name(PODGROUP, data["gang"]))
        for b in data["bindings"]:
            streams.add(stream_name(POD, b["pod"]))
            if groups:
                idx = state.pod_index.get(b["pod"])
                g = -1 if idx is None else state.gang_of(idx)
                if g >= 0:
                    streams.add(stream_name(PODGROUP, state.gang_keys[g]))
    return not any(stream in streams for stream in checked)


def _batch(rnd: random.Random, st: ClusterState, names: list[str]) -> list[dict[str, Any]]:
    """Decisions on a few pods (known or not), each naming its gang, another gang or
    none, one in twenty with a victim."""
    out = []
    for i in range(rnd.randint(1, 4)):
        pods = rnd.sample(names, min(len(names), rnd.randint(1, 2)))
        idx = st.pod_index.get(pods[0])
        g = -1 if idx is None else st.gang_of(idx)
        gang = rnd.choice(
            [None, st.gang_keys[g] if g >= 0 else None, rnd.choice(st.gang_keys or [None])]
        )
        data: dict[str, Any] = {"gang": gang, "bindings": [{"pod": p} for p in pods]}
        if rnd.random() < 0.05:
            data["victims"] = [{"pod": pods[0], "node": "n0"}]
        out.append({"id": f"d{i}", "data": data})
    return out


@pytest.mark.parametrize("seed", range(6))
def testverdicts_hold_by_gang_members_is_by_every_pods_gang(seed: int) -> None:
    rnd = random.Random(seed)
    log = mixed_log(seed)
    st = ClusterState()
    answers = {True: 0, False: 0}
    for at in range(20, len(log), 15):
        st.apply_many(enumerate(log[at - 15 if at > 20 else 0 : at], int(st.position) + 1))
        moved_all = [(e["type"], stream_of(e)) for e in log[at : at + 15]]
        st_after = ClusterState.from_bytes(st.to_bytes())
        st_after.apply_many(enumerate(log[at : at + 15], int(st.position) + 1))
        names = [*st_after.pod_index, "t/nobody"]
        for _ in range(20):
            moved = rnd.sample(moved_all, rnd.randint(0, len(moved_all)))
            moved = [m for m in moved if m[0] in NEUTRAL] if rnd.random() < 0.8 else moved
            if rnd.random() < 0.1:  # a stream naming a PodGroup on another neutral event
                moved.append((E.POD_UNSCHEDULABLE, stream_name(PODGROUP, rnd.choice(names))))
            fresh = _batch(rnd, st_after, names)
            want = _by_every_pod(moved, fresh, st_after)
            assert verdicts_hold(moved, fresh, st_after) == want, (moved, fresh)
            answers[want] += 1
    assert answers[True] > 20 and answers[False] > 20
