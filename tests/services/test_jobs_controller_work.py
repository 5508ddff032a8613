"""The job controller's work per event: what it folds back of its own appends
(:func:`esched.services.jobs.fold_rows` with the envelopes it appended) decides
what a fold of the log decodes would."""

from __future__ import annotations

import types
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from esched.core.jobs import JobBook
from esched.schemas import events as ev
from esched.schemas.events import stream_of
from esched.schemas.manifests import events_from_documents, volcano_task_pod
from esched.services import jobs as jobs_service
from esched.services.jobs import JobController, fold_job_log, fold_rows
from esched.services.store import open_store
from esched.services.store.base import EventStore, StoredEvent
from support.events import append_events, one_pod_job

_JOB = one_pod_job()


class _CountingLoads:
    """``orjson`` as :mod:`esched.services.jobs` sees it, counting the rows it decodes."""

    def __init__(self) -> None:
        self.decoded: list[str] = []

    def loads(self, raw: bytes) -> Any:
        out = orjson.loads(raw)
        self.decoded.append(out["type"])
        return out


async def _store(tmp_path: Path) -> EventStore:
    es = open_store(f"sqlite:///{tmp_path / 'log.sqlite'}")
    await es.connect()
    await es.migrate()
    return es


async def test_its_own_pod_is_folded_back_from_the_envelope_it_appended(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The Job's row is decoded; the pod the controller appended comes back as the
    same bytes and is folded from its envelope, not decoded again; the book is the
    one a fold of the log decoding every row builds."""
    counting = _CountingLoads()
    monkeypatch.setattr(jobs_service, "orjson", types.SimpleNamespace(loads=counting.loads))
    es = await _store(tmp_path)
    try:
        await append_events(es, *events_from_documents([_JOB], source="test", id_prefix="j"))
        controller = JobController(es)
        assert controller.follow(await es.read(0, 100))
        await controller.act()
        assert controller.totals.submitted == 1
        assert not controller.follow(await es.read(controller.position, 100))
        assert counting.decoded == [ev.JOB_SUBMITTED]
        monkeypatch.undo()
        assert controller.book.summaries() == (await fold_job_log(es)).summaries()
        assert controller.book.jobs["t/one"].status_of("t/one-w-0") == "Pending"
        assert not controller._own  # taken out as read back
    finally:
        await es.close()


def test_a_row_of_other_bytes_under_an_appended_id_is_decoded() -> None:
    """Another leader's copy of an event (same id, its own bytes: another time) is
    folded as the log holds it, not as the controller built it."""
    (job,) = events_from_documents([_JOB], source="test", id_prefix="j")
    pod = volcano_task_pod(job["data"], job["data"]["spec"]["tasks"][0], 0)
    mine = ev.envelope(ev.POD_SUBMITTED, "esched/jobs", pod, id="p", time="2030-01-01T00:00:00Z")
    theirs = dict(mine, time="2030-01-01T00:00:09Z")

    def row(position: int, env: dict[str, Any]) -> StoredEvent:
        return StoredEvent(
            position, env["id"], env["type"], stream_of(env), 1, None, None, orjson.dumps(env)
        )  # type: ignore[arg-type]

    book = JobBook()
    own = {"p": (orjson.dumps(mine), mine)}
    assert fold_rows(book, [row(1, job), row(2, theirs)], own) == 2
    assert book.clock == datetime(2030, 1, 1, 0, 0, 9, tzinfo=UTC).timestamp()  # theirs
    assert not own


def test_the_controller_bench_runs_one_pod_jobs_to_running() -> None:
    """``python -m esched.services.bench_jobs controller``: every Job's pod submitted
    once and bound, the Jobs Running, nothing else appended."""
    from esched.services.bench_jobs import bench_controller

    out = bench_controller(jobs=30, batch=8)
    assert out["events"] == 90  # the Job, its pod, its placement
    assert out["totals"]["submitted"] == 30
    assert out["phases"] == {"Running": 30}
