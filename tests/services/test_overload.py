"""Overload handling through the real path: usage reports in a SQLite store, the
dispatcher appending evictions (memory) and throttles then evictions (sustained cpu)
in Borg's order, and the audit of those evictions (core/overload.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from esched.core import PHASE_PENDING, PHASE_RUNNING
from esched.core.reservations import (
    ReclamationConfig,
    current_reclamation,
    use_reclamation,
)
from esched.schemas.events import POD_EVICTED, POD_THROTTLED, USAGE_REPORTED, stream_of
from esched.schemas.validator import validate_event
from esched.services.audit import audit_events, audit_store
from esched.services.bus.memory import MemoryBus
from esched.services.dispatch import DispatchConfig, Dispatcher
from esched.services.store import NewEvent, open_store
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


async def _start(tmp_path: Path, events: list[dict]) -> tuple[Any, Dispatcher, asyncio.Task]:
    es = open_store(f"sqlite:///{tmp_path / 'o.sqlite'}")
    await es.connect()
    await es.migrate()
    await _append(es, *events)
    d = Dispatcher(es, MemoryBus(), config=DispatchConfig(tick=0.02))
    await d.start()
    task = asyncio.create_task(d.run())
    await eventually(lambda: d.leading, 5, interval=0.01)
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
        assert st.phase_of(st.pod_index["t/scratch"]) == PHASE_PENDING
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
