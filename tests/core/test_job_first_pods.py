"""A Volcano Job's first submission implies its first pods (attempt 0 of each replica
of the tasks without ``dependsOn``: :func:`esched.schemas.manifests.volcano_first_pods`,
what Volcano's job controller creates on a Job's submission, ``syncJob`` ->
``createJobIOIfNotExist`` / ``createPod`` in ``pkg/controllers/job/job_controller_actions.go``
of volcano-sh/volcano): the cluster fold derives them on the dict path and the bytes
path alike, the job fold (:class:`esched.core.jobs.JobBook`) too; a log written when
the job controller recorded them folds to the same state. Only a Job ingest marked
(:data:`esched.schemas.events.IMPLIES`, after checking its pods) implies them: a Job
of a log written before (no marker) folds as it always did."""

from __future__ import annotations

import copy
import random
from typing import Any

import orjson
import pytest

from esched.core import ClusterState
from esched.core._fold_bytes import _py_job_first_pods, _py_job_group_spec, job_fold_parts
from esched.core.jobs import (
    P_PENDING,
    P_RUNNING,
    R_ATTEMPT,
    R_DELETES,
    R_EPOCH,
    R_IMPLIED,
    R_NODE,
    R_STATUS,
    R_SUBMITS,
    R_TASK,
    R_TIMER,
    fold_jobs,
)
from esched.schemas import events as ev
from esched.schemas.manifests import (
    events_from_documents,
    volcano_first_pods,
    volcano_job_objects,
    volcano_pod_metadata,
    volcano_podgroup,
)
from esched.schemas.volcano_jobs import default_job, task_dependencies
from support.fold import EV, envelope, node
from support.job_templates import example_jobs, generated_jobs

from .test_fold_payloads import assert_same_as_decoded
from .test_job_podgroup import by_bytes, by_dict, cuts_and_mutants, generated_gang_jobs, state_of


def _accepted_jobs() -> list[dict[str, Any]]:
    """Volcano's examples and generated Jobs that ingest accepts now (their pods
    checked), defaulted, one per key."""
    out: dict[str, dict[str, Any]] = {}
    sources = example_jobs() + generated_jobs(random.Random(7), 300) + generated_gang_jobs(300)
    for i, job in enumerate(sources):
        name = job["metadata"].get("name")
        if type(name) is not str or not name:
            continue
        job = dict(job, metadata=dict(job["metadata"], name=f"{name[:40]}-{i}"))
        try:
            (published,) = events_from_documents([job], source="t", id_prefix="j")
        except (ValueError, TypeError, AttributeError, KeyError):
            continue
        data = published["data"]
        out.setdefault(ev.metadata_key(data["metadata"]), data)
    return list(out.values())


def _marked(env: dict[str, Any]) -> bytes:
    """``env`` as ingest stores it (a Job marked: ev.stored_form)."""
    return ev.stored_form(env, orjson.dumps(env))[1]


_API = "batch.volcano.sh/v1alpha1"


def _job(*tasks: dict[str, Any]) -> dict[str, Any]:
    """Volcano's defaults of the Job ``ns/j`` of ``tasks``."""
    return default_job(
        {
            "apiVersion": _API,
            "kind": "Job",
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {"tasks": list(tasks)},
        }
    )


def _logs(
    job: dict[str, Any],
) -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes]], list[tuple[int, bytes]]]:
    """The Job's log as written before ingest marked Jobs (old: the Job unmarked, its
    PodGroup and first pods recorded by the job controller), as it is written now
    (new: the Job marked, alone), and a marked Job with its pods recorded too (an
    older controller following a newer ingest)."""
    old = [(1, orjson.dumps(envelope(EV.NODE_ADDED, node("n1"))))]
    mixed = list(old)
    for etype, obj in volcano_job_objects(job):
        env = envelope(etype, obj)
        old.append((len(old) + 1, orjson.dumps(env)))
        mixed.append((len(mixed) + 1, _marked(env)))
    return old, mixed[:2], mixed


def _without_position(st: Any) -> dict[str, Any]:
    seen = state_of(st)
    seen["summary"].pop("position")
    return seen


def test_a_jobs_first_pods_are_pending_at_its_position_on_both_paths() -> None:
    job = _job(
        {"name": "a", "replicas": 2, "template": {"spec": _spec("1")}},
        {
            "name": "b",
            "replicas": 1,
            "dependsOn": {"name": ["a"]},
            "template": {"spec": _spec("2")},
        },
    )
    old, new, _mixed = _logs(job)
    for st in (by_bytes(new), by_dict(new)):
        assert sorted(st.pending_pods()) == ["ns/j-a-0", "ns/j-a-1"]  # b waits for a
        assert st.gang_members("ns/j") == ["ns/j-a-0", "ns/j-a-1"]
    assert state_of(by_bytes(new)) == state_of(by_dict(new))
    # The same Job unmarked (a log written before ingest marked Jobs) implies none.
    for st in (by_bytes(old[:2]), by_dict(old[:2])):
        assert st.pending_pods() == [] and st.gang_members("ns/j") == []
        assert st.gang_min_member("ns/j") == 3  # (its PodGroup, implied as ever)
    assert state_of(by_bytes(old[:2])) == state_of(by_dict(old[:2]))


def _spec(cpu: str) -> dict[str, Any]:
    return {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}


def test_old_logs_with_the_recorded_pods_fold_to_the_same_state_on_both_paths() -> None:
    jobs = _accepted_jobs()
    assert len(jobs) > 250
    for job in jobs:
        logs = _logs(job)
        states = [_without_position(f(rows)) for rows in logs for f in (by_bytes, by_dict)]
        assert all(s == states[0] for s in states), job["metadata"]["name"]


def test_the_job_fold_of_an_old_log_is_the_job_fold_of_the_new_one() -> None:
    old: list[dict[str, Any]] = []
    new: list[dict[str, Any]] = []
    for j, job in enumerate(_accepted_jobs()):
        for i, (etype, obj) in enumerate(volcano_job_objects(job)):
            env = ev.envelope(etype, "t", obj, id=f"{j}.{i}", time="2030-01-01T00:00:00Z")
            old.append(env)
            if etype == ev.JOB_SUBMITTED:
                new.append(orjson.loads(_marked(env)))
    a, b = fold_jobs(old), fold_jobs(new)
    assert a.summaries() == b.summaries()
    for key, job in a.jobs.items():
        # (status, attempt, submits, deletes, epoch): the controller's next ids alike
        assert {p: r[R_STATUS : R_EPOCH + 1] for p, r in job.pods.items()} == {
            p: r[R_STATUS : R_EPOCH + 1] for p, r in b.jobs[key].pods.items()
        }
        assert job.history == b.jobs[key].history
    assert sum(len(j.pods) for j in b.jobs.values()) > 500


def test_a_podgroup_declared_before_the_job_means_no_implied_pods_in_either_fold() -> None:
    job = _job({"name": "w", "replicas": 1, "template": {"spec": _spec("1")}})
    _job_object, (_, group), _pod = volcano_job_objects(job)
    rows = [
        (1, orjson.dumps(envelope(EV.NODE_ADDED, node("n1")))),
        (2, orjson.dumps(envelope(ev.PODGROUP_SUBMITTED, group))),
        (3, _marked(envelope(ev.JOB_SUBMITTED, job))),
    ]
    assert by_bytes(rows).pending_pods() == by_dict(rows).pending_pods() == []
    book = fold_jobs([orjson.loads(b) for _p, b in rows])
    assert book.missing(book.jobs["ns/j"])  # the controller submits it


def _one_pod_job() -> dict[str, Any]:
    return _job({"name": "w", "replicas": 1, "template": {"spec": _spec("1")}})


def test_only_a_job_ingest_marked_implies_its_pods_in_the_job_fold() -> None:
    job = _one_pod_job()
    env = ev.envelope(ev.JOB_SUBMITTED, "t", job, id="j", time="2030-01-01T00:00:00Z")
    unmarked = fold_jobs([env])
    assert unmarked.jobs["ns/j"].pods == {}
    assert unmarked.missing(unmarked.jobs["ns/j"])  # the controller submits it, as before
    marked = fold_jobs([orjson.loads(_marked(env))])
    assert marked.jobs["ns/j"].status_of("ns/j-w-0") == "Pending"
    assert not marked.missing(marked.jobs["ns/j"])  # implied: nothing to submit


def test_a_marker_of_another_value_or_on_another_type_implies_nothing() -> None:
    job = _one_pod_job()
    for value in ("pod", "PODS", 1, ["pods"]):
        env = {**envelope(ev.JOB_SUBMITTED, job), ev.IMPLIES: value}
        rows = [(1, orjson.dumps(env))]
        for st in (by_bytes(rows), by_dict(rows)):
            assert st.pending_pods() == [], value
        assert fold_jobs([env]).jobs["ns/j"].pods == {}, value


def test_a_marker_written_with_escapes_is_read_alike_on_both_paths() -> None:
    """The bytes path leaves an envelope whose keys or marker hold an escape to the dict
    path: both read the marker as JSON says it."""
    job = _one_pod_job()
    plain = orjson.dumps(envelope(ev.JOB_SUBMITTED, job))
    cases = {
        b'"eschedimplie\\u0073":"pods",': True,
        b'"eschedimplies":"p\\u006fds",': True,
        b'"eschedimplies":"pods","eschedimplies":"no",': False,  # (the last one counts)
        b'"eschedimplies":"no","eschedimplies":"pods",': True,
        b'"eschedimplies":"pods ",': False,
    }
    for member, implied in cases.items():
        payload = plain[:1] + member + plain[1:]
        rows = [(1, payload)]
        want = ["ns/j-w-0"] if implied else []
        assert by_bytes(rows).pending_pods() == by_dict(rows).pending_pods() == want, member
        assert state_of(by_bytes(rows)) == state_of(by_dict(rows))
        assert bool(fold_jobs([orjson.loads(payload)]).jobs["ns/j"].pods) == implied
        parts = job_fold_parts(payload)
        assert parts is None or parts[2][2] == implied, member


def test_cut_and_mutated_marked_jobs_fold_as_decoded() -> None:
    """Every cut of a marked Job's envelope from its marker on (as it is, closed by
    "}}" or "}}}") and every byte from there changed to a JSON token's or a stray one,
    each folded after a node: the bytes path's state and anomalies are those of the
    payload decoded whole (a Job of a known spec too: a first one folded before)."""
    node_row = orjson.dumps(envelope(EV.NODE_ADDED, node("n1")))
    known = default_job(dict(_one_pod_job(), metadata={"name": "k", "namespace": "ns"}))
    whole = _marked(envelope(ev.JOB_SUBMITTED, _one_pod_job()))
    assert b'"eschedimplies":"pods"' in whole
    implied = 0
    for before in ([node_row], [node_row, _marked(envelope(ev.JOB_SUBMITTED, known))]):
        for payload in cuts_and_mutants(whole, whole.index(b'"eschedimplies"')):
            implied += "ns/j-w-0" in assert_same_as_decoded([*before, payload]).pod_index
    assert implied > 100


def test_a_restored_state_has_the_implied_pods() -> None:
    rows = [
        (1, orjson.dumps(envelope(EV.NODE_ADDED, node("n1")))),
        (2, _marked(envelope(ev.JOB_SUBMITTED, _one_pod_job()))),
    ]
    for st in (by_bytes(rows), by_dict(rows)):
        restored = ClusterState.from_bytes(st.to_bytes())
        assert restored.pending_pods() == ["ns/j-w-0"]
        assert restored.gang_members("ns/j") == ["ns/j-w-0"]
        assert restored.to_bytes() == st.to_bytes()


@pytest.mark.parametrize(
    "depends_on",
    [
        None,
        {},
        {"name": []},
        {"name": None},
        {"iteration": "any"},
        {"name": ["a"]},
        {"name": ["a"], "iteration": "any"},
    ],
    ids=["absent", "empty", "no-names", "null-names", "iteration-only", "one", "any"],
)
def test_the_implied_pods_are_the_released_tasks_pods_in_every_fold(depends_on) -> None:
    """One rule (``task_dependencies``) says which tasks start with the Job: the pods
    a marked Job's submission implies (``volcano_first_pods``, both cluster fold
    paths) are exactly attempt 0 of the tasks the job fold has released, whatever
    shape ``dependsOn`` takes, and the job controller has none of them to submit."""
    task_b: dict[str, Any] = {"name": "b", "replicas": 2, "template": {"spec": _spec("1")}}
    if depends_on is not None:
        task_b["dependsOn"] = depends_on
    job = _job({"name": "a", "replicas": 1, "template": {"spec": _spec("1")}}, task_b)
    waits = bool(task_dependencies(task_b))
    first = [f"ns/{p['metadata']['name']}" for _t, _i, p, _b in volcano_first_pods(job)]
    assert first == (["ns/j-a-0"] if waits else ["ns/j-a-0", "ns/j-b-0", "ns/j-b-1"])
    env = envelope(ev.JOB_SUBMITTED, job)
    rows = [(1, _marked(env))]
    assert by_bytes(rows).pending_pods() == by_dict(rows).pending_pods() == first
    book = fold_jobs([orjson.loads(_marked(env))])
    state = book.jobs["ns/j"]
    released = [t.name for t in state.tasks if t.released]
    assert released == (["a"] if waits else ["a", "b"])
    assert sorted(state.pods) == first
    assert all(state.pods[p][R_TASK] == state.task_index[p.split("-")[1]].index for p in first)
    assert book.missing(state) == []


def test_a_job_whose_first_pods_are_implied_is_handed_to_the_controller_when_it_asks() -> None:
    """A marked Job implies its first pods: the job fold hands it to the controller
    (``JobBook.changed``) only once it asks something (here its second task's pod,
    released when the first task completed); an unmarked Job at once (its pods to
    submit)."""
    task_b = {
        "name": "b",
        "replicas": 1,
        "template": {"spec": _spec("1")},
        "dependsOn": {"name": ["a"]},
    }
    job = _job({"name": "a", "replicas": 1, "template": {"spec": _spec("1")}}, task_b)
    env = envelope(ev.JOB_SUBMITTED, job)
    unmarked = fold_jobs([env])
    assert list(unmarked.changed) == ["ns/j"] and unmarked.missing(unmarked.jobs["ns/j"])
    marked = fold_jobs([orjson.loads(_marked(env))])
    assert not marked.changed
    marked.apply(ev.PLACEMENT_COMMITTED, {"bindings": [{"pod": "ns/j-a-0", "node": "n1"}]})
    assert not marked.changed  # (its start is implied)
    marked.apply(ev.POD_SUCCEEDED, {"pod": "ns/j-a-0"})
    assert list(marked.changed) == ["ns/j"]
    assert [(t.name, i) for t, i in marked.missing(marked.jobs["ns/j"])] == [("b", 0)]


def _expanded(
    job: dict[str, Any], read: tuple[str, tuple[tuple[str, int, bytes], ...]]
) -> list[tuple[str, dict[str, Any], bytes]]:
    """The pods the bytes path's reading ``read`` of ``job`` makes: (key, metadata,
    spec bytes), as the fold builds them (``_first_pods``)."""
    name = job["metadata"]["name"]
    ns = job["metadata"].get("namespace") or ev.DEFAULT_NAMESPACE
    queue, tasks = read
    return [
        (f"{ns}/{name}-{task}-{i}", volcano_pod_metadata(name, ns, queue, task, i, 0), spec)
        for task, replicas, spec in tasks
        for i in range(replicas)
    ]


def test_the_bytes_paths_first_pods_are_volcano_first_pods() -> None:
    """Of a Job of the common shape the bytes path reads its first pods off the Job's
    bytes, in the same walk as its PodGroup (``_job_spec_parts``): the pods
    ``volcano_first_pods`` builds, the one definition (metadata and spec bytes), over
    Volcano's example Jobs and generated ones; any other shape it leaves to it."""
    st = ClusterState()
    read = 0
    for job in _accepted_jobs():
        got = _py_job_first_pods(st, orjson.dumps(envelope(ev.JOB_SUBMITTED, job)))
        if got is None:
            continue
        read += 1
        want = [
            (ev.metadata_key(p["metadata"]), p["metadata"], orjson.dumps(p["spec"]))
            for _t, _i, p, _b in volcano_first_pods(job)
        ]
        assert _expanded(job, got) == want, job["metadata"]["name"]
    assert read >= 100  # the common shapes are read, not left to the builder


def test_the_one_walk_leaves_each_part_to_its_builder_alone() -> None:
    """The walk reads the PodGroup and the first pods together; a shape one part
    leaves to its builder leaves the other read off the bytes, and the marked Job's
    fold is the dict path's either way."""
    base = _job(
        {"name": "a", "replicas": 2, "template": {"spec": _spec("1")}},
        {"name": "b", "replicas": 1, "template": {"spec": _spec("2")}},
    )
    depends = copy.deepcopy(base)
    depends["spec"]["tasks"][1]["dependsOn"] = {"name": ["a"]}
    labelled = copy.deepcopy(base)
    labelled["spec"]["tasks"][1]["template"]["metadata"] = {"labels": {"x": "y"}}
    payload = orjson.dumps(envelope(ev.JOB_SUBMITTED, base))
    # (the Job's minAvailable, its spec's last member, given twice)
    twice = payload.replace(b',"minAvailable":3}}', b',"minAvailable":1,"minAvailable":3}}', 1)
    assert twice != payload
    cases = {  # payload -> (PodGroup read off the bytes, pods read off the bytes)
        payload: (True, True),
        twice: (False, True),  # minAvailable given twice: only the PodGroup reads it
        orjson.dumps(envelope(ev.JOB_SUBMITTED, depends)): (True, False),
        orjson.dumps(envelope(ev.JOB_SUBMITTED, labelled)): (True, False),
    }
    for raw, (group, pods) in cases.items():
        job = orjson.loads(raw)["data"]
        got_group = _py_job_group_spec(ClusterState(), raw)
        got_pods = _py_job_first_pods(ClusterState(), raw)
        assert (got_group is not None, got_pods is not None) == (group, pods), raw
        if group:
            assert got_group == volcano_podgroup(job)["spec"]
        if pods:
            assert [k for k, _m, _s in _expanded(job, got_pods)] == [
                "ns/j-a-0",
                "ns/j-a-1",
                "ns/j-b-0",
            ]
        marked = _marked(orjson.loads(raw))
        assert state_of(by_bytes([(1, marked)])) == state_of(by_dict([(1, marked)]))


def test_a_pods_record_in_the_job_fold_is_read_by_its_fields_names() -> None:
    """``JobState.pods``: each field of a pod's record at its named index, the
    implied pod's as its Job's submission left it, then bound."""
    env = orjson.loads(_marked(envelope(ev.JOB_SUBMITTED, _one_pod_job())))
    book = fold_jobs([env])
    rec = book.jobs["ns/j"].pods["ns/j-w-0"]
    fields = (R_TASK, R_STATUS, R_ATTEMPT, R_SUBMITS, R_DELETES, R_EPOCH, R_TIMER, R_NODE)
    assert [rec[f] for f in fields] == [0, P_PENDING, 0, 1, 0, 1, -1, None]
    assert rec[R_IMPLIED] is True and len(rec) == R_IMPLIED + 1
    book.apply(ev.PLACEMENT_COMMITTED, {"bindings": [{"pod": "ns/j-w-0", "node": "n1"}]})
    assert (rec[R_STATUS], rec[R_NODE]) == (P_RUNNING, "n1")


def test_a_jobs_implied_pods_carry_the_builders_labels_queue_and_gang() -> None:
    """The bytes path hands a Job's first pods to the handler with their labels and
    the queue and gang their annotations name, not the builder's metadata
    (volcano_pod_metadata): each pod's label set, queue and gang are those of the
    builder's metadata, for tasks of one to a dozen replicas (indexes of two digits),
    a queue named or defaulted, and a namespace given or not."""
    rows = [
        (1, orjson.dumps(envelope(EV.NODE_ADDED, node("n1")))),
        (2, orjson.dumps(envelope(ev.QUEUE_UPSERTED, {"metadata": {"name": "q1"}}))),
    ]
    jobs = []
    for j, (replicas, queue, namespace) in enumerate(
        [(1, None, "ns"), (12, "q1", "ns"), (3, None, None), (2, "q1", None)]
    ):
        spec: dict[str, Any] = {
            "tasks": [
                {"name": "w", "replicas": replicas, "template": {"spec": _spec("1")}},
                {"name": "ps", "replicas": 1, "template": {"spec": _spec("2")}},
            ]
        }
        if queue:
            spec["queue"] = queue
        meta = {"name": f"job{j}", **({"namespace": namespace} if namespace else {})}
        job = default_job({"apiVersion": _API, "kind": "Job", "metadata": meta, "spec": spec})
        jobs.append(job)
        rows.append((len(rows) + 1, _marked(envelope(ev.JOB_SUBMITTED, job))))
    st = by_bytes(rows)
    label_sets = st.interpod.held_label_sets()[0]
    seen = 0
    for job in jobs:
        for _task, _i, pod, _bare in volcano_first_pods(job):
            meta = pod["metadata"]
            p = st.pod_index[f"{meta['namespace']}/{meta['name']}"]
            assert label_sets[st.interpod.pod_lset_of(p)] == (meta["namespace"], meta["labels"])
            assert st.queue_names[st.queue_of(p)] == meta["annotations"]["volcano.sh/queue-name"]
            group = meta["annotations"]["scheduling.k8s.io/group-name"]
            assert st.gang_keys[st.gang_of(p)] == f"{meta['namespace']}/{group}"
            seen += 1
    assert seen == 1 + 12 + 3 + 2 + 4
    assert state_of(st) == state_of(by_dict(rows))


@pytest.mark.parametrize("namespace", ["", None, "ns"])
def test_a_jobs_implied_pods_are_keyed_by_its_key_in_the_default_namespace_when_none(
    namespace: str | None,
) -> None:
    """The bytes path keys a Job's first pods and their gang by the Job's own key
    (``namespace/name``, the default namespace for an empty or null one), as the
    builder names them: each pod at ``<ns>/<job>-<task>-<index>``, in the gang
    ``<ns>/<job>``, labelled with the Job's name; the state the dict path's."""
    job = _job(
        {"name": "w", "replicas": 2, "template": {"spec": _spec("1")}},
        {"name": "ps", "replicas": 1, "template": {"spec": _spec("2")}},
    )
    env = envelope(ev.JOB_SUBMITTED, job)
    env["data"]["metadata"]["namespace"] = namespace  # (after defaulting: as written)
    rows = [(1, orjson.dumps(envelope(EV.NODE_ADDED, node("n1")))), (2, _marked(env))]
    st = by_bytes(rows)
    ns = namespace or ev.DEFAULT_NAMESPACE
    label_sets = st.interpod.held_label_sets()[0]
    for pod in ("w-0", "w-1", "ps-0"):
        p = st.pod_index[f"{ns}/j-{pod}"]
        assert st.gang_keys[st.gang_of(p)] == f"{ns}/j"
        assert label_sets[st.interpod.pod_lset_of(p)][1]["volcano.sh/job-name"] == "j"
    assert state_of(st) == state_of(by_dict(rows))
