"""Overload handling through the real path: usage reports in a SQLite store, the
dispatcher appending evictions (memory) and throttles then evictions (sustained cpu)
in Borg's order, and the audit of those evictions (core/overload.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import orjson
import pytest

from esched.core import PHASE_PENDING, PHASE_RUNNING
from esched.core.reservations import (
    ReclamationConfig,
    current_reclamation,
    use_reclamation,
)
from esched.schemas.events import (
    POD_DELETED,
    POD_EVICTED,
    POD_THROTTLED,
    USAGE_REPORTED,
    stream_of,
)
from esched.schemas.validator import validate_event
from esched.services.audit import audit_events, audit_store
from esched.services.bus.memory import MemoryBus
from esched.services.dispatch import DispatchConfig, Dispatcher
from esched.services.store import NewEvent, open_store
from esched.services.store.base import AppendResult, EventStore, HeadConflictError
from support.aio import eventually
from support.events import ev, node, pod


@pytest.fixture(autouse=True)
def reclamation_on() -> Iterator[None]:
    before = current_reclamation()
    use_reclamation(ReclamationConfig(enabled=True))
    yield
    use_reclamation(before)


def _usage(eid: str, second: int, pods: dict[str, dict[str, str]]) -> dict:
    e = ev(eid, USAGE_REPORTED, {"pods": [{"pod": f"t/{p}", "usage": u} for p, u in pods.items()]})
    e["time"] = f"2026-11-22T00:{second // 60:02d}:{second % 60:02d}Z"
    return e


def _running(name: str, *, cpu: str = "1", memory: str = "1Gi", priority: int) -> dict:
    return pod(name, cpu, memory=memory, priority=priority, node_name="n1")


async def _append(es: Any, *events: dict) -> None:
    await es.append([NewEvent(e["id"], e["type"], stream_of(e), orjson.dumps(e)) for e in events])


async def _open(tmp_path: Path, events: list[dict]) -> Any:
    es = open_store(f"sqlite:///{tmp_path / 'o.sqlite'}")
    await es.connect()
    await es.migrate()
    await _append(es, *events)
    return es


async def _lead(store: Any) -> tuple[Dispatcher, asyncio.Task]:
    d = Dispatcher(store, MemoryBus(), config=DispatchConfig(tick=0.02))
    await d.start()
    task = asyncio.create_task(d.run())
    await eventually(lambda: d.leading, 5, interval=0.01)
    return d, task


async def _start(tmp_path: Path, events: list[dict]) -> tuple[Any, Dispatcher, asyncio.Task]:
    es = await _open(tmp_path, events)
    d, task = await _lead(es)
    return es, d, task


async def _stop(d: Dispatcher, task: asyncio.Task) -> None:
    await d.stop()
    await task


async def _of_type(es: Any, etype: str) -> list[dict]:
    rows = await es.read(0, 10_000)
    return [orjson.loads(r.payload) for r in rows if r.type == etype]


MEMORY_NODE = [
    node("n1", "8", memory="8Gi"),
    _running("web", memory="4Gi", priority=2000),  # production
    _running("etl", memory="2Gi", priority=100),  # batch
    _running("scratch", memory="2Gi", priority=0),  # best-effort
]


async def test_memory_overload_evicts_non_production_lowest_priority_first(tmp_path: Path) -> None:
    es, d, task = await _start(tmp_path, MEMORY_NODE)
    try:
        # web runs 3Gi over its 4Gi soft bound: 11Gi used on an 8Gi node.
        await _append(
            es,
            _usage(
                "u1",
                10,
                {"web": {"memory": "7Gi"}, "etl": {"memory": "2Gi"}, "scratch": {"memory": "2Gi"}},
            ),
        )

        async def evicted() -> list[str]:
            return [e["data"]["pod"] for e in await _of_type(es, POD_EVICTED)]

        for _ in range(250):
            if len(await evicted()) >= 2:
                break
            await asyncio.sleep(0.02)
        # scratch (9Gi need left), then etl (7Gi <= 8Gi): web, production, stays.
        assert await evicted() == ["t/scratch", "t/etl"]
        events = await _of_type(es, POD_EVICTED)
        for e in events:
            validate_event(e, allowed_types=(POD_EVICTED,))
            assert e["data"]["reason"] == "Overloaded" and e["data"]["resource"] == "memory"
            assert e["data"]["report"] == "u1" and e["time"] == "2026-11-22T00:00:10Z"
        await eventually(lambda: d.totals.overload_evictions == 2, 5)
        st = d.state
        # (the dispatcher's fold reads its own appends back from the log)
        await eventually(lambda: st.phase_of(st.pod_index["t/scratch"]) == PHASE_PENDING, 5)
        assert st.phase_of(st.pod_index["t/web"]) == PHASE_RUNNING
        report = await audit_store(es)
        assert report["ok"], report["violations"]
        assert report["checked"]["overload_evictions"] == 2
    finally:
        await _stop(d, task)
    # A restarted dispatcher folds the evictions and decides nothing again.
    d2 = Dispatcher(es, MemoryBus(), config=DispatchConfig(tick=0.02))
    await d2.start()
    task2 = asyncio.create_task(d2.run())
    try:
        await eventually(lambda: d2.leading, 5, interval=0.01)
        await _append(es, _usage("u2", 20, {"web": {"memory": "7Gi"}}))
        await eventually(lambda: d2.idle(), 5)
        assert len(await _of_type(es, POD_EVICTED)) == 2
    finally:
        await _stop(d2, task2)
        await es.close()


async def test_sustained_cpu_overload_throttles_then_evicts_after_evict_after(
    tmp_path: Path,
) -> None:
    es, d, task = await _start(
        tmp_path,
        [
            node("n1", "8", memory="8Gi"),
            _running("api", cpu="4", priority=2000),
            _running("crunch", cpu="4", priority=100),
        ],
    )
    try:
        load = {"api": {"cpu": "5"}, "crunch": {"cpu": "4"}}  # 9 cpu on 8
        await _append(es, _usage("c0", 0, load))
        await eventually(lambda: d.totals.overload_throttles == 1, 5)
        (throttle,) = await _of_type(es, POD_THROTTLED)
        validate_event(throttle, allowed_types=(POD_THROTTLED,))
        # The batch pod gives up the excess; api (latency-sensitive) is not touched.
        assert throttle["data"]["pod"] == "t/crunch"
        assert (throttle["data"]["usage"], throttle["data"]["cap"]) == (4000, 3000)
        assert throttle["data"]["since"] == "2026-11-22T00:00:00Z"
        # Still overloaded 30 s later: the same episode, no new throttle, no eviction.
        await _append(es, _usage("c30", 30, load))
        await eventually(lambda: d.idle(), 5)
        assert len(await _of_type(es, POD_THROTTLED)) == 1
        assert await _of_type(es, POD_EVICTED) == []
        # 60 s (evict_after) on the log's clock: the batch pod is evicted.
        await _append(es, _usage("c60", 60, load))
        await eventually(lambda: d.totals.overload_evictions == 1, 5)
        (evicted,) = await _of_type(es, POD_EVICTED)
        assert evicted["data"]["pod"] == "t/crunch" and evicted["data"]["resource"] == "cpu"
        assert evicted["data"]["since"] == "2026-11-22T00:00:00Z"
        assert (await audit_store(es))["ok"]
        # A throttle changes nothing in the fold, and is no anomaly of it.
        assert "unknown_type" not in d.state.anomalies
    finally:
        await _stop(d, task)
        await es.close()


def _forged(pod_name: str, usage: dict[str, str]) -> list[tuple[int, dict]]:
    events = [
        *MEMORY_NODE,
        _usage("u1", 10, usage),
        ev(
            f"forged-{pod_name}",
            POD_EVICTED,
            {"pod": f"t/{pod_name}", "node": "n1", "reason": "Overloaded", "resource": "memory"},
        ),
    ]
    return list(enumerate(events, 1))


def test_audit_reports_a_production_pod_evicted_while_non_production_ran() -> None:
    over = {"web": {"memory": "7Gi"}, "etl": {"memory": "2Gi"}, "scratch": {"memory": "2Gi"}}
    report = audit_events(_forged("web", over))
    assert report["by_kind"] == {"overload_order": 1}
    assert "t/etl" in report["violations"][0]["detail"]


def test_audit_reports_an_overload_eviction_that_was_not_needed() -> None:
    calm = {"web": {"memory": "3Gi"}, "etl": {"memory": "1Gi"}, "scratch": {"memory": "1Gi"}}
    report = audit_events(_forged("scratch", calm))
    assert report["by_kind"] == {"overload_unneeded": 1}


def test_audit_accepts_an_overload_eviction_in_the_seeds_order() -> None:
    over = {"web": {"memory": "7Gi"}, "etl": {"memory": "2Gi"}, "scratch": {"memory": "2Gi"}}
    report = audit_events(_forged("scratch", over))
    assert report["ok"], report["violations"]


def test_audit_reports_an_eviction_past_the_point_where_the_node_fits_again() -> None:
    over = {"web": {"memory": "7Gi"}, "etl": {"memory": "2Gi"}, "scratch": {"memory": "2Gi"}}
    events = [e for _pos, e in _forged("scratch", over)]
    for name in ("etl", "web"):  # etl is needed (9Gi > 8Gi); web is not (7Gi fits)
        events.append(
            ev(
                f"forged-{name}",
                POD_EVICTED,
                {
                    "pod": f"t/{name}",
                    "node": "n1",
                    "reason": "Overloaded",
                    "resource": "memory",
                },
            )
        )
    report = audit_events(list(enumerate(events, 1)))
    assert report["by_kind"] == {"overload_unneeded": 1}
    assert "t/web" in report["violations"][0]["detail"]


async def test_nothing_is_evicted_with_reclamation_off(tmp_path: Path) -> None:
    use_reclamation(ReclamationConfig())  # the default: kube parity
    es, d, task = await _start(tmp_path, MEMORY_NODE)
    try:
        await _append(
            es, _usage("u1", 10, {"web": {"memory": "7Gi"}, "scratch": {"memory": "2Gi"}})
        )
        await eventually(lambda: d.idle() and d.position >= 5, 5)
        assert await _of_type(es, POD_EVICTED) == []
        assert d.totals.overload_evictions == 0
    finally:
        await _stop(d, task)
        await es.close()


CPU_NODE = [
    node("n1", "8", memory="8Gi"),
    _running("api", cpu="4", priority=2000),
    _running("crunch", cpu="4", priority=100),
]
CPU_LOAD = {"api": {"cpu": "5"}, "crunch": {"cpu": "4"}}  # 9 cpu on 8


async def test_cpu_overload_episode_begins_at_the_first_report_of_a_batch(tmp_path: Path) -> None:
    es, d, task = await _start(tmp_path, CPU_NODE)
    try:
        # Three reports in one append (one batch of the dispatcher's fold): the
        # overload began with the first, so at the third it has lasted 60 s.
        await _append(
            es, _usage("c0", 0, CPU_LOAD), _usage("c30", 30, CPU_LOAD), _usage("c60", 60, CPU_LOAD)
        )
        await eventually(lambda: d.totals.overload_evictions == 1, 5)
        (evicted,) = await _of_type(es, POD_EVICTED)
        assert evicted["data"]["pod"] == "t/crunch"
        assert evicted["data"]["since"] == "2026-11-22T00:00:00Z"
        assert evicted["data"]["report"] == "c60"
        assert (await audit_store(es))["ok"]
    finally:
        await _stop(d, task)
        await es.close()


async def test_a_new_dispatcher_leader_continues_the_cpu_overload_episode(
    tmp_path: Path,
) -> None:
    es = await _open(tmp_path, CPU_NODE)
    d1, task1 = await _lead(es)
    try:
        await _append(es, _usage("c0", 0, CPU_LOAD))
        await eventually(lambda: d1.totals.overload_throttles == 1, 5)
    finally:
        await _stop(d1, task1)
    # No leader for a while; the overload goes on.
    await _append(es, _usage("c30", 30, CPU_LOAD))
    d2, task2 = await _lead(es)
    try:
        # The new leader took the episode over from the throttle's since (0 s): at
        # 60 s it evicts, as the first leader would have.
        await _append(es, _usage("c60", 60, CPU_LOAD))
        await eventually(lambda: d2.totals.overload_evictions == 1, 5)
        (evicted,) = await _of_type(es, POD_EVICTED)
        assert evicted["data"]["pod"] == "t/crunch"
        assert evicted["data"]["since"] == "2026-11-22T00:00:00Z"
        # Its plan throttled crunch in the same episode: the same id, stored once.
        assert len(await _of_type(es, POD_THROTTLED)) == 1
        assert (await audit_store(es))["ok"]
    finally:
        await _stop(d2, task2)
        await es.close()


async def test_a_new_leader_does_not_resume_an_episode_that_ended(tmp_path: Path) -> None:
    es = await _open(tmp_path, CPU_NODE)
    d1, task1 = await _lead(es)
    try:
        await _append(es, _usage("c0", 0, CPU_LOAD))
        await eventually(lambda: d1.totals.overload_throttles == 1, 5)
        # The overload ends (6 cpu on 8) before the failover.
        await _append(es, _usage("c20", 20, {"api": {"cpu": "4"}, "crunch": {"cpu": "2"}}))
        await eventually(lambda: d1.idle() and d1.position >= 6, 5)  # c20 folded
    finally:
        await _stop(d1, task1)
    d2, task2 = await _lead(es)
    try:
        # A new episode begins at 60 s: nothing is evicted at 60 s nor at 90 s.
        await _append(es, _usage("c60", 60, CPU_LOAD))
        await _append(es, _usage("c90", 90, CPU_LOAD))
        # c60, its throttle, c90 (positions 7 to 9) folded.
        await eventually(lambda: d2.idle() and d2.position >= 9, 5)
        assert await _of_type(es, POD_EVICTED) == []
        sinces = {e["data"]["since"] for e in await _of_type(es, POD_THROTTLED)}
        assert sinces == {"2026-11-22T00:00:00Z", "2026-11-22T00:01:00Z"}
    finally:
        await _stop(d2, task2)
        await es.close()


class _Intruder:
    """The store, where another writer appends ``event`` just before the dispatcher's
    first head-checked append of evictions: the log head moves between the plan and
    its append. Everything else passes through."""

    def __init__(self, store: Any, event: dict) -> None:
        self.store = store
        self.event: dict | None = event
        self.conflicts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def append(
        self, events: Sequence[NewEvent], *, expected_head: int | None = None
    ) -> AppendResult:
        if (
            self.event is not None
            and expected_head is not None
            and any(e.type == POD_EVICTED for e in events)
        ):
            intruder, self.event = self.event, None
            await _append(self.store, intruder)
        try:
            return await self.store.append(events, expected_head=expected_head)
        except HeadConflictError:
            self.conflicts += 1
            raise


async def test_overload_plan_is_planned_again_when_the_log_head_moved(tmp_path: Path) -> None:
    es = await _open(tmp_path, MEMORY_NODE)
    # Between the plan (scratch, then etl) and its append, scratch is deleted.
    deleted = ev("del-scratch", POD_DELETED, {"metadata": {"name": "scratch", "namespace": "t"}})
    store = _Intruder(es, deleted)
    d, task = await _lead(cast(EventStore, store))
    try:
        await _append(
            es,
            _usage(
                "u1",
                10,
                {"web": {"memory": "7Gi"}, "etl": {"memory": "2Gi"}, "scratch": {"memory": "2Gi"}},
            ),
        )
        await eventually(lambda: d.totals.overload_evictions == 1, 5)
        assert store.conflicts == 1 and store.event is None
        # Planned again on the fold with the deletion: only etl (web 7Gi + etl 2Gi
        # on 8Gi), after the deletion; no eviction of the deleted pod.
        rows = await es.read(0, 100)
        types = [(r.type, orjson.loads(r.payload)["data"].get("pod")) for r in rows]
        assert types[-2:] == [(POD_DELETED, None), (POD_EVICTED, "t/etl")]
        assert d.state.anomalies == {}
        assert (await audit_store(es))["ok"]
    finally:
        await _stop(d, task)
        await es.close()
