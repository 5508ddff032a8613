"""What the dispatcher and the commit service spend per pod beyond the fold, for plain
pods and for one-pod Volcano Jobs (each pod a one-member gang).

The flow is :func:`~esched.services.bench_follow.flow_log`'s (the ``bench scale``
pods on a preloaded cluster, each pod's events then its committed placement), with
each pod's decision moved ``LAG`` pods later, so that pods wait pending as they do
when ``bench e2e`` submits its pods at once. It is handed over ``BATCH`` rows at a
time, as stored rows, through ``itertools.starmap`` (callgrind's
``--toggle-collect=starmap_next`` counts the batches and nothing else):

* ``dispatch``, ``dispatch-jobs``: the dispatcher's fold of a batch and the outbox's
  release (``Dispatcher.fold_and_release``: the fold, admission's ``observe``, the
  work made ready, ``Admission.release``), as the leader's fold and flush run them;
* ``dispatch-release``, ``dispatch-release-jobs``: the same batches with only
  admission's release (``Admission.release``) run through ``itertools.starmap``, so
  that callgrind counts it alone;
* ``commit``, ``commit-jobs``: per ``PROPOSALS`` decisions, the commit service's fold
  of the rows before them (``CommitService.fold_rows``), then their proposals, as a
  replica sends them (``gang`` set for a Job's pod), parsed (``parse_event``),
  validated (``CommitService.validate``), checked against the next rows as after a
  head conflict (``verdicts_hold``), then folded from memory with their books
  (``CommitService.apply_decisions``), as after a head-checked append.

``python -m esched.services.bench_gangs [pods] MODE [nodes]`` (default 4,000 pods,
2,000 nodes 20% full) prints the CPU time per pod. Under callgrind with
``--toggle-collect=starmap_next``, ``callgrind_annotate --inclusive=yes`` gives the
fold's part (``__pyx_pw_*apply_payloads``), which the figure beyond the fold subtracts.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import orjson

from esched.core import ClusterState
from esched.schemas.events import (
    DECISIONS_STREAM,
    PLACEMENT_COMMITTED,
    PLACEMENT_PROPOSED,
    proposal_envelope,
    stream_of,
)
from esched.schemas.validator import parse_event
from esched.services.bench_follow import flow_log
from esched.services.commit import CommitService
from esched.services.commit.arbiter import verdicts_hold
from esched.services.dispatch import Dispatcher
from esched.services.store.base import StoredEvent
from esched.services.store.snapshots import freeze_heap, thaw_heap

__all__ = ["LAG", "lagged_rows", "run_commit", "run_dispatch"]

#: Rows per batch handed to a service (a follower's read gathers about this many).
BATCH = 64
#: Proposals the commit service decides in one batch.
PROPOSALS = 32
#: Pods submitted before the first pod's decision comes (the pending backlog).
LAG = 1000


def lagged_rows(
    flow: list[tuple[int, bytes]], lag: int = LAG
) -> tuple[list[StoredEvent], list[dict[str, Any]]]:
    """The flow as stored rows, each decision moved ``lag`` pods later (positions
    renumbered), and the proposal ``data`` each decision answers, in order."""
    now = datetime.now(UTC)
    envs = [orjson.loads(payload) for _pos, payload in flow]
    order: list[dict[str, Any]] = []
    waiting: deque[dict[str, Any]] = deque()
    for env in envs:
        if env["type"] == PLACEMENT_COMMITTED:
            waiting.append(env)
            if len(waiting) > lag:
                order.append(waiting.popleft())
        else:
            order.append(env)
    order.extend(waiting)
    rows = []
    version = 0
    for pos, env in enumerate(order, flow[0][0]):
        stream = stream_of(env)
        if stream == DECISIONS_STREAM:
            version += 1
        rows.append(
            StoredEvent(pos, env["id"], env["type"], stream, version, now, now, orjson.dumps(env))
        )
    proposals = [
        {k: env["data"][k] for k in ("proposal", "replica", "position", "gang", "bindings")}
        for env in order
        if env["type"] == PLACEMENT_COMMITTED
    ]
    return rows, proposals


def _flow(pods: int, nodes: int, jobs: bool) -> tuple[bytes, list[StoredEvent], list[Any]]:
    snapshot, flow = flow_log(nodes=nodes, pods=pods, replicas=2, jobs=jobs)
    rows, proposals = lagged_rows(flow)
    if jobs:  # a one-pod Job's proposal names its gang (the Job's key), as a replica's does
        state = ClusterState.from_bytes(snapshot)
        state.apply_payloads([(r.position, r.payload) for r in rows])
        for data in proposals:
            idx = state.pod_index[data["bindings"][0]["pod"]]
            data["gang"] = state.gang_keys[state.gang_of(idx)]
    return snapshot, rows, proposals


def _run_batches(batch: Callable[..., object], args: Iterable[tuple[Any, ...]]) -> float:
    """CPU seconds of ``batch`` over ``args``, the heap frozen, through
    ``itertools.starmap`` (what callgrind's ``--toggle-collect=starmap_next`` counts)."""
    freeze_heap()
    try:
        t0 = time.process_time()
        deque(itertools.starmap(batch, args), maxlen=0)
        return time.process_time() - t0
    finally:
        thaw_heap()


def _batches(rows: list[StoredEvent]) -> list[list[StoredEvent]]:
    return [rows[i : i + BATCH] for i in range(0, len(rows), BATCH)]


def run_dispatch(pods: int, nodes: int, jobs: bool, release_only: bool = False) -> dict[str, Any]:
    """The dispatcher's CPU per pod on the flow (fold, admission, release);
    ``release_only``: of admission's release alone."""
    snapshot, rows, _proposals = _flow(pods, nodes, jobs)
    state = ClusterState.from_bytes(snapshot)
    d = Dispatcher(cast(Any, None), cast(Any, None))
    d.follower = cast(Any, SimpleNamespace(state=state, position=int(state.position)))
    d.leading = True
    d.admission.start(state)
    released: list[int] = []

    def batch(rows: list[StoredEvent]) -> None:
        released.append(len(d.fold_and_release(rows)[0]))

    if not release_only:
        cpu = _run_batches(batch, ((b,) for b in _batches(rows)))
    else:
        release = d.admission.release
        spent = [0.0]

        def counted(*args: Any) -> Any:
            got: list[Any] = []
            c0 = time.process_time()
            deque(itertools.starmap(lambda *a: got.append(release(*a)), [args]), maxlen=0)
            spent[0] += time.process_time() - c0
            return got[0]

        d.admission.release = counted  # type: ignore[method-assign,assignment]
        freeze_heap()
        try:
            for b in _batches(rows):
                batch(b)
        finally:
            thaw_heap()
        cpu = spent[0]
    return {
        "pods": pods,
        "rows": len(rows),
        "released": sum(released),
        "held": d.admission.held_counts(),
        "cpu_us_per_pod": round(cpu / pods * 1e6, 2),
    }


def run_commit(pods: int, nodes: int, jobs: bool) -> dict[str, Any]:
    """The commit service's CPU per pod on the flow (fold, proposals decided)."""
    snapshot, rows, proposals = _flow(pods, nodes, jobs)
    state = ClusterState.from_bytes(snapshot)
    c = CommitService(cast(Any, None))
    c.adopt(state)
    wire = [orjson.dumps(proposal_envelope(p, f"esched/replica/{p['replica']}")) for p in proposals]
    # Per batch of ``PROPOSALS`` decisions: the rows before them other than decisions
    # (folded first, as a catch-up does), then their proposals (the decisions folded
    # after those rows: positions renumbered so).
    batches: list[list[StoredEvent]] = [[]]
    decided = 0
    for r in rows:
        if r.stream == DECISIONS_STREAM:
            decided += 1
        batches[-1].append(r)
        if decided == PROPOSALS:
            batches.append([])
            decided = 0
    pos = itertools.count(rows[0].position)
    batches = [
        [
            r._replace(position=next(pos))
            for r in sorted(b, key=lambda r: r.stream == DECISIONS_STREAM)
        ]
        for b in batches
    ]
    work = []
    at = 0
    for i, b in enumerate(batches):
        others = [r for r in b if r.stream != DECISIONS_STREAM]
        positions = [r.position for r in b if r.stream == DECISIONS_STREAM]
        after = batches[i + 1] if i + 1 < len(batches) else []
        moved = [(r.type, r.stream) for r in after if r.stream != DECISIONS_STREAM][:BATCH]
        work.append((others, wire[at : at + len(positions)], positions, moved))
        at += len(positions)
    parse_event(wire[0], allowed_types=(PLACEMENT_PROPOSED,))  # its schemas compiled
    committed = [0, 0, 0]  # committed, rejected, verdicts holding

    def batch(
        others: list[StoredEvent], msgs: list[bytes], positions: list[int], moved: list[Any]
    ) -> None:
        c.fold_rows(others)
        if not msgs:
            return
        items = [parse_event(m, allowed_types=(PLACEMENT_PROPOSED,))["data"] for m in msgs]
        fresh = c.validate(items)
        committed[2] += verdicts_hold(moved, fresh, state)
        # Decisions only (no victims in this flow), at their renumbered positions.
        assert len(fresh) == len(positions)
        c.apply_decisions(fresh, positions[0], positions[0])
        for env in fresh:
            committed[env["type"] != PLACEMENT_COMMITTED] += 1

    cpu = _run_batches(batch, work)
    return {
        "pods": pods,
        "rows": len(rows),
        "committed": committed[0],
        "rejected": committed[1],
        "verdicts_hold": committed[2],
        "foreign": c.foreign_decisions,
        "cpu_us_per_pod": round(cpu / pods * 1e6, 2),
    }


if __name__ == "__main__":
    import sys

    pods = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    mode = sys.argv[2] if len(sys.argv) > 2 else "dispatch"
    nodes = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    jobs = mode.endswith("-jobs")
    if mode.startswith("dispatch-release"):
        out = run_dispatch(pods, nodes, jobs, release_only=True)
    else:
        out = (run_dispatch if mode.startswith("dispatch") else run_commit)(pods, nodes, jobs)
    print(orjson.dumps(out).decode())
