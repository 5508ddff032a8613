"""A Volcano Job implies its PodGroup: the cluster fold derives it from the Job's
``esched.job.submitted`` with :func:`esched.schemas.manifests.volcano_podgroup` (what
Volcano's job controller creates on a Job's submission: ``syncJob`` ->
``createOrUpdatePodGroup`` in ``pkg/controllers/job/job_controller_actions.go`` of
volcano-sh/volcano), on the dict path and the bytes path alike. A log written when the
job controller recorded that PodGroup folds to the same state; a Job published again
implies nothing; a PodGroup of pods without a Job folds as before."""

from __future__ import annotations

from typing import Any

import orjson

from esched.core import ClusterState
from esched.schemas import events as ev
from esched.schemas.manifests import volcano_job_objects, volcano_podgroup
from esched.schemas.volcano_jobs import default_job
from support.fold import EV, envelope, node, pod

from .test_snapshot import observe


def _job(name: str = "j", replicas: int = 2, cpu: str = "1", **spec: Any) -> dict[str, Any]:
    template = {"spec": pod("x", cpu=cpu)["spec"]}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"tasks": [{"name": "w", "replicas": replicas, "template": template}], **spec},
    }


def _old_and_new(*jobs: dict[str, Any]) -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes]]]:
    """Each Job's log as the job controller wrote it with its PodGroup recorded (old)
    and as it writes it now (new: the PodGroup implied); the new log keeps the old
    one's positions (skipping the PodGroup's), so the two folds' states compare."""
    old: list[tuple[int, bytes]] = [(1, orjson.dumps(envelope(EV.NODE_ADDED, node("n1"))))]
    for job in jobs:
        for etype, obj in volcano_job_objects(job):
            old.append((len(old) + 1, orjson.dumps(envelope(etype, obj))))
    new = [(p, b) for p, b in old if b'"esched.podgroup.submitted"' not in b]
    return old, new


def _by_dict(rows: list[tuple[int, bytes]]) -> ClusterState:
    st = ClusterState()
    st.apply_many([(p, orjson.loads(b)) for p, b in rows])
    return st


def _by_bytes(rows: list[tuple[int, bytes]]) -> ClusterState:
    st = ClusterState()
    assert st.apply_payloads(rows) == len(rows)
    return st


def _gangs(st: ClusterState) -> dict[str, tuple[int, dict[str, Any]]]:
    return {key: (st.gang_min_member(key), st.gang_meta[g]) for key, g in st.gang_index.items()}


def _state_of(st: ClusterState) -> dict[str, Any]:
    """Everything observable but the per-type event counts (a recorded PodGroup is one
    more event) and the gangs' tables."""
    seen = observe(st)
    del seen["events"]
    return {**seen, "gangs": _gangs(st)}


def test_a_jobs_submission_implies_its_podgroup_on_both_paths() -> None:
    """No PodGroup in the log: the Job's gang has the PodGroup's minMember (the
    webhook's default, the tasks' minAvailable), queue, minResources and
    minTaskMember, as if ``volcano_podgroup``'s PodGroup had been folded."""
    job = default_job(_job(replicas=2, cpu="2"))
    rows = [
        (1, orjson.dumps(envelope(EV.NODE_ADDED, node("n1")))),
        (2, orjson.dumps(envelope(ev.JOB_SUBMITTED, job))),
    ]
    recorded = ClusterState()
    recorded.apply_many(
        [(1, orjson.loads(rows[0][1])), (2, envelope(EV.PODGROUP_SUBMITTED, volcano_podgroup(job)))]
    )
    for st in (_by_dict(rows), _by_bytes(rows)):
        assert st.gang_min_member("ns/j") == 2
        assert _gangs(st) == _gangs(recorded)
        meta = st.gang_meta[st.gang_index["ns/j"]]
        assert meta["podGroup"] and meta["minTaskMember"] == {"w": 2}
        assert meta["minResources"] == recorded.gang_meta[0]["minResources"]
        assert st.summary()["gangs"]["ns/j"]["minMember"] == 2
        assert st.event_counts == {EV.NODE_ADDED: 1, ev.JOB_SUBMITTED: 1}


def test_a_log_with_the_recorded_podgroup_folds_to_the_same_state() -> None:
    """Jobs of one shape (the bytes path's memo shared), one of another and a gang of
    one pod: the log with each PodGroup recorded after its Job and the log without
    fold to the same state, the counts of events aside, on both paths."""
    jobs = [_job("a"), _job("b"), _job("c", replicas=3, cpu="500m"), _job("d", replicas=1)]
    old, new = _old_and_new(*(default_job(j) for j in jobs))
    assert len(old) == len(new) + 4
    want = _state_of(_by_dict(old))
    assert want["gangs"]["ns/c"][0] == 3
    for fold in (_by_dict, _by_bytes):
        assert _state_of(fold(new)) == want
        assert _state_of(fold(old)) == want
    assert _by_bytes(new).to_bytes() == _by_dict(new).to_bytes()


def test_a_job_published_again_implies_nothing() -> None:
    """The same Job again, or changed (an update, accepted or refused: the job fold's
    to judge): the gang keeps the PodGroup it has; an accepted update's PodGroup is
    the job controller's record, folded as any PodGroup."""
    job = default_job(_job(replicas=2))
    bigger = default_job(_job(replicas=4))
    rows = [
        (1, orjson.dumps(envelope(EV.NODE_ADDED, node("n1")))),
        (2, orjson.dumps(envelope(ev.JOB_SUBMITTED, job))),
        (3, orjson.dumps(envelope(ev.JOB_SUBMITTED, job))),
        (4, orjson.dumps(envelope(ev.JOB_SUBMITTED, bigger))),
    ]
    for fold in (_by_dict, _by_bytes):
        st = fold(rows)
        assert st.gang_min_member("ns/j") == 2
        st.apply(envelope(EV.PODGROUP_SUBMITTED, volcano_podgroup(bigger)), 5)
        assert st.gang_min_member("ns/j") == 4


def test_a_podgroup_declared_before_the_job_stands() -> None:
    """A PodGroup of the Job's name already in the log (published by a user) is the
    gang's: the Job implies no other over it."""
    group = {
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"minMember": 5, "queue": "default"},
    }
    rows = [
        (1, orjson.dumps(envelope(EV.PODGROUP_SUBMITTED, group))),
        (2, orjson.dumps(envelope(ev.JOB_SUBMITTED, default_job(_job(replicas=2))))),
    ]
    for fold in (_by_dict, _by_bytes):
        st = fold(rows)
        assert st.gang_min_member("ns/j") == 5
        assert st.gang_meta[0]["minTaskMember"] == {}


def test_pods_naming_a_gang_before_the_job_get_its_podgroup() -> None:
    """Pods that name the gang without a PodGroup (minMember 1 until one comes): the
    Job's submission then implies the PodGroup for them, as a recorded one would."""
    member = pod("m", gang="j")
    rows = [
        (1, orjson.dumps(envelope(EV.NODE_ADDED, node("n1")))),
        (2, orjson.dumps(envelope(EV.POD_SUBMITTED, member))),
        (3, orjson.dumps(envelope(ev.JOB_SUBMITTED, default_job(_job(replicas=3))))),
    ]
    for fold in (_by_dict, _by_bytes):
        st = fold(rows[:2])
        assert st.gang_min_member("ns/j") == 1
        st = fold(rows)
        assert st.gang_min_member("ns/j") == 3


def test_a_job_the_builder_cannot_read_is_malformed_on_both_paths() -> None:
    """A Job without the webhook's defaults (ingest never lets one in): no PodGroup,
    one ``malformed`` anomaly, the same on the bytes path as on the dict path."""
    rows = [(1, orjson.dumps(envelope(ev.JOB_SUBMITTED, _job())))]  # no minAvailable
    for fold in (_by_dict, _by_bytes):
        st = fold(rows)
        assert st.n_gangs == 0
        assert st.anomalies == {"malformed": 1}
    assert _by_bytes(rows).to_bytes() == _by_dict(rows).to_bytes()
