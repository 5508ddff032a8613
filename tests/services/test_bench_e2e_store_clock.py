"""`esched bench e2e`'s store clock (``store_pods_per_s``, the timeline's ``stored``
marks) with Volcano Jobs: a pod a Job implies has no row of its own, so it is
recorded when its Job's row was (``--volcano-jobs N``). Against a real PostgreSQL
store, without the services: the rows are appended as ingest and the commit service
append them."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from esched.schemas import events as ev_types
from esched.services.bench_e2e.observe import store_pods_per_s, stored_at
from esched.services.bench_e2e.preload import job_payloads
from esched.services.store import EventStore
from support.events import append_events, ev, placement, pod

pytestmark = pytest.mark.postgres


def _decision(eid: str, pods: list[str]) -> dict:
    data = placement(eid, [])
    data["bindings"] = [{"pod": p, "node": "n1", "resources": {"cpu": 1000}} for p in pods]
    return ev(eid, ev_types.PLACEMENT_COMMITTED, data)


async def test_pods_a_job_implies_are_stored_when_its_row_was(
    pg_store: EventStore, pg_url: str
) -> None:
    records, pods = job_payloads(4, "tput", seed=1, size=2)
    jobs = [orjson.loads(v) for _k, v in records]
    assert pods == ["tput/job-0-w-0", "tput/job-0-w-1", "tput/job-2-w-0", "tput/job-2-w-1"]
    await append_events(pg_store, jobs[0])  # marked as ingest marks it: implies its pods
    await asyncio.sleep(0.01)  # (the store's clock moves between the two appends)
    await append_events(pg_store, jobs[1], pod("other"))  # (a pod of another namespace)
    await append_events(pg_store, _decision("d1", pods[:2]), _decision("d2", pods[2:]))
    stored, decided = await stored_at(pg_url, "tput")
    assert sorted(stored) == sorted(decided) == pods
    # Each Job's pods at its row's time: the first pod recorded is the first Job row.
    assert stored[pods[0]] == stored[pods[1]] < stored[pods[2]] == stored[pods[3]]
    span = max(decided.values()) - stored[pods[0]]
    assert span > 0
    assert store_pods_per_s(stored, decided) == round(4 / span, 1)


async def test_a_job_published_again_keeps_its_pods_first_time(
    pg_store: EventStore, pg_url: str
) -> None:
    records, pods = job_payloads(1, "tput", seed=1, size=1)
    job = orjson.loads(records[0][1])
    await append_events(pg_store, job)
    await asyncio.sleep(0.01)
    await append_events(pg_store, {**job, "id": "again"}, _decision("d1", pods))
    stored, _decided = await stored_at(pg_url, "tput")
    rows = await pg_store.read(0, 10)
    first = next(r for r in rows if r.type == ev_types.JOB_SUBMITTED)
    assert stored == {pods[0]: first.recorded_at.timestamp()}


def test_no_store_figure_without_both_marks() -> None:
    assert store_pods_per_s({}, {"t/a": 1.0}) is None
    assert store_pods_per_s({"t/a": 1.0}, {}) is None
    assert store_pods_per_s({"t/a": 1.0}, {"t/a": 1.0}) == 0.0
