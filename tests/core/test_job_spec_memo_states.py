"""The bytes path's memo of Volcano Job specs (``_JOB_GROUP_SPECS`` in
core/_fold_bytes.pyx) is one per process, shared by every ClusterState in it: what a
Job's PodGroup sets on its gang is a function of the Job spec's bytes alone. A state
restored from a snapshot, or a second state, that meets a Job spec another state
entered folds it to the same state as the dict path (only its pods' spec is not
foreseen in its own spec memo: their first submission reads its spec)."""

from __future__ import annotations

import orjson

from esched.core import ClusterState

from .test_job_podgroup import (
    by_bytes,
    by_dict,
    example_manifest_jobs,
    generated_gang_jobs,
    job_log,
)


def _same(got: ClusterState, want: ClusterState) -> None:
    assert got.to_bytes() == want.to_bytes()
    assert orjson.dumps(got.summary()) == orjson.dumps(want.summary())


def test_a_restored_state_folds_jobs_another_state_memoized_as_the_dict_path() -> None:
    rows = job_log(example_manifest_jobs() + generated_gang_jobs(120, seed=23))
    want = by_dict(rows)
    _same(by_bytes(rows), want)  # the first state: every Job spec entered in the memo
    for cut in (len(rows) // 3, len(rows) // 2, len(rows) - 5):
        head = by_bytes(rows[:cut])
        restored = ClusterState.from_bytes(head.to_bytes())
        assert restored.apply_payloads(rows[cut:]) == len(rows) - cut
        _same(restored, want)


def test_a_second_state_folds_jobs_the_first_memoized_as_the_dict_path() -> None:
    rows = job_log(generated_gang_jobs(120, seed=29))
    first = by_bytes(rows)
    second = by_bytes(rows)  # every Job spec found in the memo
    want = by_dict(rows)
    _same(first, want)
    _same(second, want)
