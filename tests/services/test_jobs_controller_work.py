"""The job controller's work per event: what it folds back of its own appends
(:func:`esched.services.jobs.fold_rows` with the envelopes it appended) decides
what a fold of the log decodes would."""

from __future__ import annotations

import random
import types
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from esched.core._fold_bytes import job_fold_parts
from esched.core.jobs import FOLDED_TYPES, JobBook
from esched.core.overload import log_seconds
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
    """``orjson`` and ``job_fold_parts`` as :mod:`esched.services.jobs` sees them,
    counting the rows it reads (decoded whole, or read off their bytes)."""

    def __init__(self) -> None:
        self.decoded: list[str] = []

    def loads(self, raw: bytes) -> Any:
        out = orjson.loads(raw)
        self.decoded.append(out["type"])
        return out

    def parts(self, raw: bytes) -> Any:
        out = job_fold_parts(raw)
        if out is not None:
            self.decoded.append(out[0])
        return out

    def patch(self, monkeypatch: Any) -> None:
        monkeypatch.setattr(jobs_service, "orjson", types.SimpleNamespace(loads=self.loads))
        monkeypatch.setattr(jobs_service, "job_fold_parts", self.parts)


async def _store(tmp_path: Path) -> EventStore:
    es = open_store(f"sqlite:///{tmp_path / 'log.sqlite'}")
    await es.connect()
    await es.migrate()
    return es


async def test_its_own_pod_is_folded_back_from_the_envelope_it_appended(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The Job's row is decoded (it implies its pod: nothing appended); its pod
    deleted from outside, the controller submits it again (its second submission),
    and that pod comes back as the same bytes and is folded from its envelope, not
    decoded again; the book is the one a fold of the log decoding every row builds."""
    counting = _CountingLoads()
    counting.patch(monkeypatch)
    es = await _store(tmp_path)
    try:
        await append_events(es, *events_from_documents([_JOB], source="test", id_prefix="j"))
        controller = JobController(es)
        # The Job implies its pod: nothing asked of the controller, nothing appended.
        assert not controller.follow(await es.read(0, 100))
        await controller.act()
        assert controller.totals.submitted == 0
        gone = {"metadata": {"name": "one-w-0", "namespace": "t"}}
        await append_events(es, ev.envelope(ev.POD_DELETED, "test", gone, id="gone"))
        assert controller.follow(await es.read(controller.position, 100))
        await controller.act()
        assert controller.totals.submitted == 1
        (row,) = await es.read(controller.position, 100)
        assert row.id == "jobs.t/one-w-0.submit.1"
        assert not controller.follow([row])
        assert counting.decoded == [ev.JOB_SUBMITTED, ev.POD_DELETED]
        monkeypatch.undo()
        assert controller.book.summaries() == (await fold_job_log(es)).summaries()
        assert controller.book.jobs["t/one"].status_of("t/one-w-0") == "Pending"
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
    """``python -m esched.services.bench_jobs controller``: every Job's pod implied by
    the Job and bound, the Jobs Running, nothing appended."""
    from esched.services.bench_jobs import bench_controller

    out = bench_controller(jobs=30, batch=8)
    assert out["events"] == 60  # the Job (implying its pod), the pod's placement
    assert out["totals"]["submitted"] == 0
    assert out["phases"] == {"Running": 30}


def test_the_ingest_part_bench_runs_each_part_of_a_jobs_check() -> None:
    """``python -m esched.services.bench_jobs ingest-part PART``: each part of ingest's
    check of a one-pod Job runs over the benchmark's Jobs (all of them accepted)."""
    from esched.services.bench_jobs import bench_ingest_part

    for part in ("check", "defaults", "webhook", "pod", "pod-check"):
        out = bench_ingest_part(part, 20)
        assert out["part"] == part and out["jobs"] == 20 and out["cpu_us_per_job"] > 0


def _row(position: int, etype: str, payload: bytes) -> StoredEvent:
    return StoredEvent(position, f"e{position}", etype, "s", 1, None, None, payload)  # type: ignore[arg-type]


def _book_state(book: JobBook) -> Any:
    """What a fold holds, to compare two books (the pods each node holds by what its
    removal does: see test_rows_read_off_their_bytes_fold_as_decoded_rows)."""
    jobs = {
        key: (j.summary(), j.pods, list(j.killing), [tuple(t) for t in j.history])
        for key, j in book.jobs.items()
    }
    return jobs, book.clock, book.anomalies, sorted(book.changed)


def _rows_of_odd_shapes() -> list[StoredEvent]:
    """A Job of three pods, its pods, plain pods and placements in every shape the
    bytes reading must leave to the decoder or read as the decoder would."""
    job = one_pod_job("tri")
    job["spec"]["tasks"][0]["replicas"] = 3
    (env,) = events_from_documents([job], source="test", id_prefix="j")
    env["time"] = "2030-01-01T00:00:00Z"
    out = [(ev.JOB_SUBMITTED, orjson.dumps(env))]

    def pod_row(pod: dict[str, Any], second: int) -> tuple[str, bytes]:
        at = f"2030-01-01T00:00:0{second}Z"
        env = ev.envelope(ev.POD_SUBMITTED, "t", pod, id=f"p{second}", time=at)
        return ev.POD_SUBMITTED, orjson.dumps(env)

    task = env["data"]["spec"]["tasks"][0]
    for i in range(3):
        out.append(pod_row(volcano_task_pod(env["data"], task, i), i + 1))
    plain = {"metadata": {"name": "p", "namespace": "t", "labels": {"a": "b"}}, "spec": {}}
    out.append(pod_row(plain, 4))
    labels = {"volcano.sh/job-name": "tri"}
    out.append(pod_row({"metadata": {"name": "q", "namespace": "t", "labels": labels}}, 5))

    def placement(
        bindings: str, time: str = '"2030-01-01T00:00:06.500000Z"', tail: str = ""
    ) -> bytes:
        head = '{"type":"esched.placement.committed","id":"d","time":' + time
        return f'{head},"data":{{"proposal":"r","bindings":{bindings}}}{tail}}}'.encode()

    P = ev.PLACEMENT_COMMITTED
    out += [
        (P, placement('[{"pod":"t/tri-w-0","node":"n1","resources":{"cpu":1}}]')),
        (P, placement('[{"pod":1,"node":"n1"},{"pod":"t/tri-w-1","node":7}]', tail=', "x" : [ ]')),
        (P, placement('[{"pod":"t/tri-w-2","node":"n2"}]', '"2030-01-01T00:00:07Z"',
                      ',"time":"2030-01-01T00:00:09Z"')),  # the last time counts
        (P, placement("null")),
        (P, placement("{}")),
        (P, placement('[{"pod":"t\\/tri-w-0","node":"n3"}]')),  # an escape: decoded
        (P, placement("[]", "12")),  # not a string time: decoded
        (ev.POD_SUBMITTED, placement('[{"pod":"t/p","node":"n4"}]', '"2030-01-01T00:00:10Z"')),
    ]  # fmt: skip
    return [_row(i + 1, t, p) for i, (t, p) in enumerate(out)]


def test_rows_read_off_their_bytes_fold_as_decoded_rows() -> None:
    """fold_rows reads a placement's bindings, a Job's data and a plain pod's time off
    the bytes (job_fold_parts); the book is the one decoding every row gives, over
    shapes it must leave to the decoder (escapes, a time not a string, bindings not a
    list, a row whose envelope is of another type) and duplicate keys."""
    rows = _rows_of_odd_shapes()
    decoded = JobBook()
    for r in rows:
        if r.type in FOLDED_TYPES and (decoded.jobs or r.type == ev.JOB_SUBMITTED):
            decoded.apply_event(orjson.loads(r.payload))
    book = JobBook()
    assert fold_rows(book, rows) == len(rows)
    assert _book_state(book) == _book_state(decoded)
    assert book.jobs["t/tri"].status_of("t/tri-w-1") == "Running"
    assert book.clock == datetime(2030, 1, 1, 0, 0, 10, tzinfo=UTC).timestamp()
    # What is read off the bytes, and what is not.
    assert job_fold_parts(rows[4].payload) == (ev.POD_SUBMITTED, "2030-01-01T00:00:04Z", None)
    assert job_fold_parts(rows[1].payload) is None  # a Job's pod: decoded
    assert job_fold_parts(rows[5].payload) is None  # its label's key in the bytes
    assert job_fold_parts(rows[7].payload) == (
        ev.PLACEMENT_COMMITTED, log_seconds("2030-01-01T00:00:06.500000Z"), [("t/tri-w-1", None)]
    )  # fmt: skip
    assert job_fold_parts(rows[8].payload)[1] == "2030-01-01T00:00:09Z"  # type: ignore[index]
    # Both books know each node's pods alike: its removal loses the same ones.
    for b in (book, decoded):
        for node in ("n1", "n2", "n3", "n4"):
            b.apply(ev.NODE_REMOVED, {"metadata": {"name": node}})
    assert _book_state(book) == _book_state(decoded)
    assert book.jobs["t/tri"].status_of("t/tri-w-0") != "Running"


def test_bindings_that_are_not_objects_raise_as_decoded() -> None:
    """A placement whose bindings hold a non-object fails the fold as decoding it
    does (left to the decoder)."""
    (job, *_rest) = _rows_of_odd_shapes()
    bad = (
        b'{"type":"esched.placement.committed","time":"2030-01-01T00:00:06Z",'
        b'"data":{"bindings":[1]}}'
    )
    assert job_fold_parts(bad) is None
    with pytest.raises(AttributeError):
        fold_rows(JobBook(), [job, _row(2, ev.PLACEMENT_COMMITTED, bad)])


def test_times_read_off_the_bytes_are_the_floats_the_fold_parses() -> None:
    """job_fold_parts gives an ev.timestamp text as the float the job fold's clock
    parses it to (``datetime.fromisoformat(...).timestamp()``), any other text (a date
    that does not exist, a second 60, years outside 1700-2200, another form) as the
    text, which the fold parses itself."""
    rng = random.Random(7)
    texts = [
        "2028-02-29T00:00:00.000000Z",
        "2100-02-29T00:00:00.000000Z",
        "2000-02-29T00:00:00.000000Z",
        "2030-04-31T00:00:00.000000Z",
        "2030-01-01T24:00:00.000000Z",
        "2030-01-01T00:00:60.000000Z",
        "1969-12-31T23:59:59.999999Z",
        "1700-01-01T00:00:00.000000Z",
        "2200-12-31T23:59:59.999999Z",
        "2030-01-01T00:00:00.00000aZ",
        "2030-01-01T00:00:00.000000+00:00",
        "2030-01-01T00:00:00Z",
    ]
    for _ in range(20_000):
        year = rng.choice([rng.randrange(1, 10_000), rng.randrange(1690, 2210)])
        texts.append(
            f"{year:04d}-{rng.randrange(0, 14):02d}-{rng.randrange(0, 33):02d}T"
            f"{rng.randrange(25):02d}:{rng.randrange(61):02d}:{rng.randrange(61):02d}."
            f"{rng.randrange(10**6):06d}Z"
        )
    floats = 0
    for text in texts:
        raw = b'{"type":"esched.pod.submitted","time":"%s","data":{}}' % text.encode()
        parts = job_fold_parts(raw)
        assert parts is not None
        time = parts[1]
        if isinstance(time, float):
            floats += 1
            assert time == log_seconds(text), text
        else:
            assert time == text
    assert floats > 5_000
