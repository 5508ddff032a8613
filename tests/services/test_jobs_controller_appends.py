"""What the job controller appends for a log of Jobs, byte for byte, against the
slow path it stands for: each pod built by :func:`esched.schemas.manifests.volcano_task_pod`
from a copy of its template, checked whole by ``validate_data``, in its envelope
(id, time, stream) encoded by orjson; a pod so refused not appended. The Jobs are
Volcano's examples and generated ones (templates of every shape the builder meets,
many refused), written to the log as an older ingest did (not checked), each twice
(the same spec under another name: a template seen again), then folded back with
their placements, and the job states compared with a fold of the whole log."""

from __future__ import annotations

import gzip
import random
from pathlib import Path
from typing import Any

import orjson

from esched.core.jobs import JobBook
from esched.schemas import events as ev
from esched.schemas.manifests import volcano_task_pod
from esched.schemas.objects import decoded_json_copy
from esched.schemas.validator import InvalidEvent, validate_data
from esched.schemas.volcano_jobs import default_job
from esched.services.bench_jobs import MemoryLog, run_unsuspended
from esched.services.jobs import SOURCE, JobController, fold_rows
from esched.services.store.base import NewEvent
from support.job_templates import example_jobs, generated_jobs


def _jobs() -> list[dict[str, Any]]:
    jobs = []
    for i, job in enumerate(example_jobs() + generated_jobs(random.Random(7), 300)):
        if type(job["metadata"].get("name")) is not str or not job["metadata"]["name"]:
            continue
        job = orjson.loads(orjson.dumps(default_job(job)))
        job["metadata"]["name"] = f"{job['metadata']['name'][:200]}-{i}"
        try:
            _expected(job, "")
        except (AttributeError, TypeError):
            continue  # a template no builder builds a pod from (the controller fails alike)
        twin = orjson.loads(orjson.dumps(job))
        twin["metadata"]["name"] += "-twin"
        jobs += [job, twin]
    return jobs


def _expected(job: dict[str, Any], time: str) -> list[tuple[str, str, bytes] | None]:
    """The slow path's pods of a Job (None for one refused): (id, stream, bytes)."""
    out: list[tuple[str, str, bytes] | None] = []
    for task in job["spec"]["tasks"]:
        if task.get("dependsOn"):
            continue
        for i in range(task.get("replicas") or 0):
            pod = volcano_task_pod(job, task, i, 0, copy=decoded_json_copy)
            try:
                validate_data(ev.POD_SUBMITTED, pod)
            except InvalidEvent:
                out.append(None)
                continue
            key = ev.metadata_key(pod["metadata"])
            env = ev.envelope(ev.POD_SUBMITTED, SOURCE, pod, id=f"jobs.{key}.submit.0", time=time)
            out.append((env["id"], ev.stream_name(ev.POD, key), orjson.dumps(env)))
    return out


def run_controller(jobs: list[dict[str, Any]]) -> tuple[JobController, MemoryLog, list[Any]]:
    """The controller over an in-memory log of ``jobs`` (40 at a time), its pods
    folded back with their placements: the controller, the log, and what it appended
    as (id, stream, payload with its time as ``TIME``) with the expected slow-path rows
    (None for a pod refused)."""
    store = MemoryLog()
    controller = JobController(store)  # type: ignore[arg-type]
    controller.leading = True
    got: list[tuple[str, str, bytes]] = []
    expected: list[tuple[str, str, bytes] | None] = []
    for start in range(0, len(jobs), 40):
        chunk = jobs[start : start + 40]
        envs = [
            ev.envelope(ev.JOB_SUBMITTED, "old-ingest", j, id=f"job-{start + k}", time=_T0)
            for k, j in enumerate(chunk)
        ]
        rows = store.add(
            [NewEvent(e["id"], e["type"], ev.stream_of(e), orjson.dumps(e)) for e in envs]
        )
        controller.follow(rows)
        run_unsuspended(controller.act())
        own = store.rows[rows[-1].position :]
        time = orjson.loads(own[0].payload)["time"] if own else ""
        stamp = f'"time":"{time}"'.encode()
        got += [(r.id, r.stream, r.payload.replace(stamp, _STAMP)) for r in own]
        for job in chunk:
            expected += [
                None if e is None else (e[0], e[1], e[2].replace(stamp, _STAMP))
                for e in _expected(job, time)
            ]
        bindings = [
            {"pod": ev.stream_key(r.stream, ev.POD), "node": "n1"}
            for r in own
            if r.type == ev.POD_SUBMITTED
        ]
        placed = ev.envelope(
            ev.PLACEMENT_COMMITTED, "commit", {"bindings": bindings}, id=f"p{start}", time=_T1
        )
        rows = store.add(
            [NewEvent(placed["id"], placed["type"], "decisions", orjson.dumps(placed))]
        )
        controller.follow(own + rows)
        run_unsuspended(controller.act())
    return controller, store, [got, expected]


#: The rows the controller appended for :func:`_jobs` before its pods were built
#: with fewer steps, as JSON lines (id, stream, payload), gzipped: what it appends
#: now must be these bytes.
FIXTURE = Path(__file__).parent / "fixtures" / "job_controller_appends.jsonl.gz"
_T0, _T1 = "2030-01-01T00:00:00Z", "2030-01-01T00:00:01Z"
_STAMP = b'"time":"TIME"'


def test_the_controller_appends_the_slow_paths_pods_byte_for_byte() -> None:
    jobs = _jobs()
    assert len(jobs) > 400
    controller, store, (got, expected) = run_controller(jobs)
    want = [e for e in expected if e is not None]
    assert got == want
    # And the bytes the version before appended (the slow path shares the builder).
    fixture = [
        tuple(r)
        for r in orjson.loads(
            b"[" + b",".join(gzip.decompress(FIXTURE.read_bytes()).splitlines()) + b"]"
        )
    ]
    assert [(i, s, p.decode()) for i, s, p in got] == fixture
    refused = expected.count(None)
    assert 50 < refused < len(expected) - 50  # pods appended and pods refused both met
    assert controller.totals.invalid_pods == refused
    assert controller.totals.submitted == len(want)
    assert not controller.book.changed
    # The controller's job states are a fold of the log it wrote.
    book = JobBook()
    fold_rows(book, store.rows)
    assert controller.book.summaries() == book.summaries()
    assert "Running" in {s["phase"] for s in book.summaries()}


def write_fixture() -> None:
    """Write :data:`FIXTURE` (``python tests/services/test_jobs_controller_appends.py``)."""
    _controller, _store, (got, _expected_rows) = run_controller(_jobs())
    lines = b"\n".join(orjson.dumps([i, s, p.decode()]) for i, s, p in got)
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_bytes(gzip.compress(lines, mtime=0))


if __name__ == "__main__":
    write_fixture()
