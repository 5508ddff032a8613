"""The job fold's reading of a stored Volcano Job off its bytes (``core/_job_row.pyx``
through ``job_fold_parts``): its key and :func:`~esched.core.jobs.job_shape` as the
decoded Job gives them, or a decline, after which the Job is decoded whole; either
way the job fold is the one decoding the row gives."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from esched.core._fold_bytes import job_fold_parts
from esched.core.jobs import JobBook, JobState, TaskState, job_shape
from esched.schemas import events as ev
from esched.services.jobs import fold_rows
from esched.services.store.base import StoredEvent

_T = '"template":{"spec":{"containers":[{"name":"c","image":"x"}]}}'
_TASK = '{"name":"w","replicas":1,' + _T + "}"
_META = '{"name":"j","namespace":"ns"}'

#: Job specs (and metadata) the bytes reader reads: each as the decoded Job gives it.
ACCEPTED: list[tuple[str, str]] = [
    ('{"tasks":[' + _TASK + "]}", _META),
    (
        '{"minAvailable":2,"minSuccess":1,"maxRetry":5,"ttlSecondsAfterFinished":60,'
        '"policies":[{"event":"PodEvicted","action":"RestartJob"},'
        '{"event":"PodPending","action":"AbortJob","timeout":"1h"}],"tasks":['
        '{"name":"a","replicas":2,"minAvailable":0,' + _T + ","
        '"policies":[{"exitCode":3,"action":"AbortJob"},{"events":["PodFailed"],'
        '"action":"RestartTask"}]},{"name":"b","replicas":3,"minAvailable":1}]}',
        _META,
    ),
    # nulls: the defaults the decoded Job's None gives
    (
        '{"minAvailable":null,"minSuccess":null,"maxRetry":null,'
        '"ttlSecondsAfterFinished":null,"policies":null,"tasks":[{"name":"w",'
        '"replicas":null,"minAvailable":null,"policies":null,"dependsOn":null}]}',
        _META,
    ),
    ('{"tasks":null}', _META),
    # zeros: maxRetry 0 is 3, minAvailable 0 the tasks' sum
    ('{"maxRetry":0,"minAvailable":0,"tasks":[{"name":"w","replicas":0}]}', _META),
    (
        '{"maxRetry":-1,"minSuccess":-2,"tasks":[{"name":"w","replicas":2,"minAvailable":-1}]}',
        _META,
    ),
    # duplicate keys: the last one, as orjson keeps
    (
        '{"maxRetry":1,"tasks":[{"name":"x"}],"maxRetry":7,"tasks":[{"name":"a","replicas":1,'
        '"name":"b","replicas":4}]}',
        '{"name":"i","namespace":"ns","name":"j"}',
    ),
    ("{}", _META),
    ('{"tasks":[],"policies":[]}', _META),
    ('{"tasks":[' + _TASK + "]}", '{"name":"j","namespace":null}'),
    ('{"tasks":[' + _TASK + "]}", '{"name":"j"}'),
    ('{"tasks":[' + _TASK + "]}", '{"name":"j","namespace":""}'),
    (' { "tasks" : [ { "name" : "w" , "replicas" : 2 } ] , "maxRetry" : 4 } ', _META),
    ('{"ttlSecondsAfterFinished":123456789012345678,"tasks":[' + _TASK + "]}", _META),
    # the tasks read as walked: the members after them, a later null list
    ('{"tasks":[{"name":"a","replicas":2} , { "name" : "b" } ] ,"maxRetry":9}', _META),
    ('{"tasks":[' + _TASK + '],"tasks":null,"maxRetry":2}', _META),
    ('{"tasks":[{"name":"x"}],"tasks":[ ],"minSuccess":1}', _META),
    ('{"tasks":[{"name":"a","template":{ },"policies":[ ]},{"name":"b","policies":[]}]}', _META),
]

#: Those it leaves to the decoder (the whole row decoded, as before).
DECLINED: list[tuple[str, str]] = [
    ('{"tasks":[{"name":"w","replicas":1.0}]}', _META),
    ('{"maxRetry":2.5,"tasks":[' + _TASK + "]}", _META),
    ('{"tasks":[{"name":"w","replicas":true}]}', _META),
    ('{"tasks":[{"name":"w","replicas":"1"}]}', _META),
    ('{"minSuccess":false,"tasks":[' + _TASK + "]}", _META),
    (
        '{"tasks":[{"name":"a","replicas":1},{"name":"b","replicas":1,'
        '"dependsOn":{"name":["a"],"iteration":"any"}}]}',
        _META,
    ),
    ('{"tasks":[{"name":"w","replicas":1,"dependsOn":{}}]}', _META),
    ('{"tasks":[{"replicas":1}]}', _META),  # no name: the decoder's KeyError
    ('{"tasks":[{ }]}', _META),
    ('{"tasks":[' + _TASK + ',{"name":"b","replicas":1.5}],"maxRetry":1}', _META),
    ('{"tasks":[{"name":7,"replicas":1}]}', _META),
    ('{"tasks":{}}', _META),
    ('{"tasks":"x"}', _META),
    ('{"tasks":[1]}', _META),
    ('{"policies":{"a":1},"tasks":[' + _TASK + "]}", _META),
    ('{"policies":"","tasks":[' + _TASK + "]}", _META),
    ('{"tasks":[{"name":"w\\u0031","replicas":1}]}', _META),  # an escape
    ('{"tasks":[{"name":"w\u00e9","replicas":1}]}', _META),  # not ASCII
    ('{"tasks":[' + _TASK + "]}", '{"name":"j\u00e9","namespace":"ns"}'),
    ("null", _META),
    ('{"tasks":[' + _TASK + "]}", "null"),
    ('{"tasks":[' + _TASK + "]}", '{"namespace":"ns"}'),
    ('{"tasks":[' + _TASK + "]}", '{"name":"j","namespace":5}'),
]


def _payload(spec: str, meta: str, marked: bool = True) -> bytes:
    head = '{"eschedimplies":"pods",' if marked else "{"
    return (
        f'{head}"type":"esched.job.submitted","id":"j","time":"2030-01-01T00:00:00.000000Z",'
        f'"data":{{"kind":"Job","metadata":{meta},"spec":{spec}}}}}'
    ).encode()


def _row(position: int, payload: bytes) -> StoredEvent:
    return StoredEvent(position, f"e{position}", ev.JOB_SUBMITTED, "s", 1, None, None, payload)  # type: ignore[arg-type]


def _fields(obj: Any, cls: type) -> dict[str, Any]:
    # Every slot of a JobState or TaskState but the Job itself, the tasks by theirs.
    out = {}
    for name in cls.__slots__:  # type: ignore[attr-defined]
        if name == "_job":
            continue
        value = getattr(obj, name)
        if name == "tasks":
            value = [_fields(t, TaskState) for t in value]
        elif name == "task_index":
            value = sorted(value)
        out[name] = value
    return out


def _book(book: JobBook) -> Any:
    jobs = {k: _fields(j, JobState) for k, j in book.jobs.items()}
    return jobs, book.clock, book.anomalies, list(book.changed), sorted(book._recs)


def _decoded(payloads: list[bytes]) -> JobBook:
    book = JobBook()
    for p in payloads:
        book.apply_event(orjson.loads(p))
    return book


@pytest.mark.parametrize(("spec", "meta"), ACCEPTED)
@pytest.mark.parametrize("marked", [True, False])
def test_a_job_read_off_its_bytes_has_the_decoded_jobs_key_and_shape(
    spec: str, meta: str, marked: bool
) -> None:
    payload = _payload(spec, meta, marked)
    env = orjson.loads(payload)
    parts = job_fold_parts(payload)
    assert parts is not None
    assert parts[0] == ev.JOB_SUBMITTED
    assert parts[2] == (
        ev.metadata_key(env["data"]["metadata"]),
        job_shape(env["data"]),
        ev.implies_pods(env),
    )
    book = JobBook()
    fold_rows(book, [_row(1, payload)])
    assert _book(book) == _book(_decoded([payload]))


@pytest.mark.parametrize(("spec", "meta"), DECLINED)
def test_a_job_the_bytes_reader_declines_is_decoded_whole(spec: str, meta: str) -> None:
    payload = _payload(spec, meta)
    assert job_fold_parts(payload) is None
    try:
        want = _book(_decoded([payload]))
    except Exception as exc:  # (the decoder's error, whatever it is)
        with pytest.raises(type(exc)):
            fold_rows(JobBook(), [_row(1, payload)])
        return
    book = JobBook()
    fold_rows(book, [_row(1, payload)])
    assert _book(book) == want


def test_the_fold_decodes_a_job_read_off_its_bytes_only_when_read() -> None:
    """The job fold keeps a Job read off its bytes as those bytes: ``JobState.job``
    decodes them on the first read, to the decoded envelope's ``data``."""
    payload = _payload(ACCEPTED[1][0], _META)
    book = JobBook()
    fold_rows(book, [_row(1, payload)])
    job = book.jobs["ns/j"]
    assert job._job is payload  # (no copy, nothing decoded)
    assert job.job == orjson.loads(payload)["data"]
    assert type(job._job) is dict  # decoded once


def test_a_job_read_off_its_bytes_is_updated_as_a_decoded_one() -> None:
    """The same Job again (nothing changes), then with more replicas (an update),
    then with another template (refused): the book of a fold of decoded rows."""
    one = _payload('{"tasks":[{"name":"w","replicas":1,' + _T + "}]}", _META)
    two = _payload('{"tasks":[{"name":"w","replicas":2,' + _T + "}]}", _META)
    other = _payload('{"tasks":[{"name":"w","replicas":2,"template":{}}]}', _META)
    payloads = [one, one, two, other]
    book = JobBook()
    fold_rows(book, [_row(i + 1, p) for i, p in enumerate(payloads)])
    assert _book(book) == _book(_decoded(payloads))
    assert book.jobs["ns/j"].total == 2
    assert book.anomalies == {"job_resubmitted_active": 1, "job_update_refused": 1}
