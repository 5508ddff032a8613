"""`bench scale`'s timeline of a throughput phase: the longest stretch without a
commit (a stall) and the stage the pods decided after it waited in."""

from __future__ import annotations

from esched.services.bench_e2e.timeline import StageMarks, commit_gaps, stall_stages


def test_the_longest_gap_between_commits_is_found_with_its_start_and_the_pods_after_it():
    # Commits every 0.1 s, then 4 s with none, then the last two.
    decided = [10.1, 10.2, 10.3, 14.3, 14.4]
    gaps = commit_gaps(decided, start=10.0)
    assert gaps == {"longest_s": 4.0, "at_s": 0.3, "after_share": 0.4}


def test_the_wait_before_the_first_commit_counts_as_a_gap():
    assert commit_gaps([13.0, 13.1], start=10.0)["longest_s"] == 3.0
    assert commit_gaps([], start=10.0)["longest_s"] is None


def test_pods_decided_after_a_stall_are_counted_by_the_stage_they_waited_in_during_it():
    marks = {
        "stored": {"a": 0.0, "b": 0.0, "c": 0.0, "d": 0.0},
        "work": {"a": 0.1, "b": 0.2, "c": 3.5, "d": 0.1},  # c: released late
        "proposed": {"a": 0.3, "b": 3.9, "c": 3.9, "d": 1.5},  # b: its pass was late
        "decided": {"a": 4.1, "b": 4.1, "c": 4.2, "d": 4.1},  # a, d: their commit
    }
    waited = stall_stages((1.0, 4.0), marks, ["a", "b", "c", "d"])
    assert waited == {"decided": 2, "proposed": 1, "work": 1}
    assert stall_stages((1.0, 4.0), {"stored": {"e": 0.0}}, ["e"]) == {"none": 1}


def test_stage_marks_keep_each_pods_first_record_and_count_the_others():
    marks = StageMarks()
    marks.add("p", 2.0, "r2")
    marks.add("p", 1.0, "r1")
    marks.add("p", 3.0, "r3")
    assert (marks.first["p"], marks.by["p"], marks.count["p"]) == (1.0, "r1", 3)


def test_marks_name_a_work_items_pods_a_gangs_included_and_a_proposals_replica() -> None:
    # The latency marks' rules (observe.work_pods / proposal_pods), plus a gang's pods.
    from esched.services.bench_e2e.timeline import _record

    work, proposed = StageMarks(), StageMarks()
    _record(work, b'{"pod": "t/a"}', 1.0, proposals=False)
    _record(work, b'{"pods": ["t/b", "t/c"]}', 2.0, proposals=False)
    _record(work, b"not json", 3.0, proposals=False)
    _record(
        proposed, b'{"data": {"replica": "r1", "bindings": [{"pod": "t/a"}]}}', 4.0, proposals=True
    )
    assert work.first == {"t/a": 1.0, "t/b": 2.0, "t/c": 2.0}
    assert proposed.first == {"t/a": 4.0} and proposed.by == {"t/a": "r1"}
