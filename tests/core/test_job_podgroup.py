"""A Volcano Job implies its PodGroup: the cluster fold derives it from the Job's
``esched.job.submitted`` with :func:`esched.schemas.manifests.volcano_podgroup` (what
Volcano's job controller creates on a Job's submission: ``syncJob`` ->
``createOrUpdatePodGroup`` in ``pkg/controllers/job/job_controller_actions.go`` of
volcano-sh/volcano), on the dict path and the bytes path alike. A log written when the
job controller recorded that PodGroup folds to the same state; a Job published again
implies nothing; a PodGroup of pods without a Job folds as before."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import orjson

from esched.core import ClusterState
from esched.core._fold_bytes import (
    _py_job_group_spec,
    _py_scanner_accepts,
    _py_spec_memo_holds,
)
from esched.schemas import events as ev
from esched.schemas.manifests import load_documents, volcano_job_objects, volcano_podgroup
from esched.schemas.volcano_jobs import default_job
from support.fold import EV, envelope, node, pod

from .test_fold_payloads import assert_same_as_decoded
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


def by_dict(rows: list[tuple[int, bytes]]) -> ClusterState:
    """``rows`` folded as decoded envelopes (the dict path)."""
    st = ClusterState()
    st.apply_many([(p, orjson.loads(b)) for p, b in rows])
    return st


def by_bytes(rows: list[tuple[int, bytes]]) -> ClusterState:
    """``rows`` folded from their bytes (every row applied)."""
    st = ClusterState()
    assert st.apply_payloads(rows) == len(rows)
    return st


def _gangs(st: ClusterState) -> dict[str, tuple[int, dict[str, Any]]]:
    return {key: (st.gang_min_member(key), st.gang_meta[g]) for key, g in st.gang_index.items()}


def state_of(st: ClusterState) -> dict[str, Any]:
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
    for st in (by_dict(rows), by_bytes(rows)):
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
    want = state_of(by_dict(old))
    assert want["gangs"]["ns/c"][0] == 3
    for fold in (by_dict, by_bytes):
        assert state_of(fold(new)) == want
        assert state_of(fold(old)) == want
    assert by_bytes(new).to_bytes() == by_dict(new).to_bytes()


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
    for fold in (by_dict, by_bytes):
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
    for fold in (by_dict, by_bytes):
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
    for fold in (by_dict, by_bytes):
        st = fold(rows[:2])
        assert st.gang_min_member("ns/j") == 1
        st = fold(rows)
        assert st.gang_min_member("ns/j") == 3


def test_a_job_the_builder_cannot_read_is_malformed_on_both_paths() -> None:
    """A Job without the webhook's defaults (ingest never lets one in): no PodGroup,
    one ``malformed`` anomaly, the same on the bytes path as on the dict path."""
    rows = [(1, orjson.dumps(envelope(ev.JOB_SUBMITTED, _job())))]  # no minAvailable
    for fold in (by_dict, by_bytes):
        st = fold(rows)
        assert st.n_gangs == 0
        assert st.anomalies == {"malformed": 1}
    assert by_bytes(rows).to_bytes() == by_dict(rows).to_bytes()


# ------------------------------------ the bytes path's own reading of a Job's spec

EXAMPLES = Path(__file__).parent.parent / "schemas" / "volcano_examples"


def example_manifest_jobs() -> list[dict[str, Any]]:
    """The Jobs of Volcano's example manifests (volcano-sh/volcano ``example/``, as
    tests/schemas keeps them), defaulted as ingest records them."""
    jobs = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        if "deny" in path.name:
            continue  # refused by the webhook: never in a log
        for doc in load_documents(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "Job":
                jobs.append(default_job(doc))
    return jobs


def generated_gang_jobs(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """Jobs of the shapes the builder must match: one to three tasks of 0 to 4
    replicas, minAvailable below, at or above a task's replicas (so a task counts
    towards minResources whole, in part or not at all), quantities in several
    spellings and resources, a priorityClassName set, empty or absent, a template
    with a schedulerName, a restartPolicy or another member (left to the builder)."""
    rng = random.Random(seed)
    cpus = ["1", "500m", "2.5", "0.1", "1200m", "3"]
    mems = ["1Gi", "512Mi", "1G", "100M", "1536Mi", "64Ki"]
    jobs = []
    for j in range(n):
        tasks = []
        for t in range(rng.randint(1, 3)):
            requests: dict[str, Any] = {"cpu": rng.choice(cpus)}
            if rng.random() < 0.8:
                requests["memory"] = rng.choice(mems)
            if rng.random() < 0.2:
                requests["nvidia.com/gpu"] = str(rng.randint(1, 4))
            containers = [{"name": "c", "image": "x", "resources": {"requests": requests}}]
            if rng.random() < 0.3:
                containers.append({"name": "d", "resources": {"requests": {"cpu": "250m"}}})
            spec: dict[str, Any] = {"containers": containers}
            extra = rng.random()
            if extra < 0.2:
                spec["schedulerName"] = "volcano"
            elif extra < 0.4:
                spec["restartPolicy"] = "OnFailure"
            elif extra < 0.5:
                spec["nodeSelector"] = {"zone": "a"}
            tasks.append(
                {"name": f"t{t}", "replicas": rng.randint(0, 4), "template": {"spec": spec}}
            )
        if not any(t["replicas"] for t in tasks):
            tasks[0]["replicas"] = 1
        job_spec: dict[str, Any] = {"tasks": tasks, "queue": rng.choice(["default", "q1"])}
        if rng.random() < 0.5:
            job_spec["minAvailable"] = rng.randint(0, sum(t["replicas"] for t in tasks))
        pcn = rng.random()
        if pcn < 0.2:
            job_spec["priorityClassName"] = "high"
        elif pcn < 0.3:
            job_spec["priorityClassName"] = ""
        jobs.append(
            default_job(
                {
                    "apiVersion": "batch.volcano.sh/v1alpha1",
                    "kind": "Job",
                    "metadata": {"name": f"g{j}", "namespace": "ns"},
                    "spec": job_spec,
                }
            )
        )
    return jobs


def test_the_bytes_paths_podgroup_spec_is_volcano_podgroups() -> None:
    """Of a Job of the common shape the bytes path derives the PodGroup's spec from
    the Job's bytes itself (no ``volcano_podgroup`` call, see ``_job_spec_parts`` in
    core/_fold_bytes.pyx): equal to ``volcano_podgroup``'s, the one definition, over
    Volcano's example Jobs and generated ones; any other shape it leaves to the
    builder. Each Job's fold on the bytes path gives the dict path's state."""
    jobs = example_manifest_jobs() + generated_gang_jobs(400)
    st = ClusterState()
    derived = 0
    for job in jobs:
        payload = orjson.dumps(envelope(ev.JOB_SUBMITTED, job))
        got = _py_job_group_spec(st, payload)
        if got is not None:
            derived += 1
            assert got == volcano_podgroup(job)["spec"], job
            assert list(got) == list(volcano_podgroup(job)["spec"])
    assert derived >= 300  # the common shapes are read, not left to the builder
    rows = [(i + 1, orjson.dumps(envelope(ev.JOB_SUBMITTED, job))) for i, job in enumerate(jobs)]
    assert state_of(by_bytes(rows)) == state_of(by_dict(rows))


def test_the_bytes_path_leaves_other_job_shapes_to_the_builder() -> None:
    """Shapes the bytes path does not read itself (a minAvailable that is not a
    plain integer, a counted task's template of limits, a member given twice, no
    template): None from its reader, and the fold is the dict path's."""
    base = default_job(_job(replicas=2, cpu="2"))
    payload = orjson.dumps(envelope(ev.JOB_SUBMITTED, base))
    assert _py_job_group_spec(ClusterState(), payload) == volcano_podgroup(base)["spec"]
    limits = copy.deepcopy(base)
    limits["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]["limits"] = {
        "cpu": "3"
    }
    no_template = copy.deepcopy(base)
    del no_template["spec"]["tasks"][0]["template"]
    flag = copy.deepcopy(base)
    flag["spec"]["minAvailable"] = True
    twice = orjson.dumps(envelope(ev.JOB_SUBMITTED, base)).replace(
        b'"minAvailable":2,', b'"minAvailable":1,"minAvailable":2,', 1
    )
    assert twice != payload
    others = [orjson.dumps(envelope(ev.JOB_SUBMITTED, j)) for j in (limits, no_template, flag)]
    for raw in [*others, twice]:
        assert _py_job_group_spec(ClusterState(), raw) is None
        rows = [(1, raw)]
        assert state_of(by_bytes(rows)) == state_of(by_dict(rows))


def job_log(jobs: list[dict[str, Any]]) -> list[tuple[int, bytes]]:
    """Each Job and its pods as the job controller appends them (the PodGroup
    implied, not recorded), one node before them."""
    rows = [(1, orjson.dumps(envelope(EV.NODE_ADDED, node("n1", cpu="64", memory="256Gi"))))]
    for job in jobs:
        for etype, obj in volcano_job_objects(job):
            if etype != EV.PODGROUP_SUBMITTED:
                rows.append((len(rows) + 1, orjson.dumps(envelope(etype, obj))))
    return rows


def test_jobs_and_their_pods_fold_to_the_same_snapshot_on_both_paths() -> None:
    """Volcano's example Jobs and generated ones, each spec twice (a second Job of a
    known spec takes the bytes path's memo of its PodGroup), with their pods: the
    bytes path's snapshot and summary are the dict path's, byte for byte, in a state
    that fills the memo and in one that finds it full."""
    jobs = example_manifest_jobs() + generated_gang_jobs(200, seed=11)
    again = []
    for job in jobs:
        twin = copy.deepcopy(job)
        twin["metadata"]["name"] += "-again"
        again.append(twin)
    rows = job_log(jobs + again)
    want = by_dict(rows)
    for _ in range(2):
        got = by_bytes(rows)
        assert got.to_bytes() == want.to_bytes()
        assert orjson.dumps(got.summary()) == orjson.dumps(want.summary())
    metas = [got.gang_meta[g] for g in got.gang_index.values()]
    assert sum(1 for m in metas if m.get("podGroup")) >= len(jobs)


def test_gangs_of_one_job_spec_share_their_metadata() -> None:
    """Jobs of one spec (a one-pod Job's flow repeats its shapes) declare gangs that
    hold one metadata dict, the memoized PodGroup's (read only: no gang makes a dict
    of its own), equal to the dict path's for each gang; another spec has its own."""
    # (requests no other test's Jobs ask: the module's memo of Job specs is shared,
    # and a test of a spec's first fold must find its spec new)
    first = default_job(_job("a", replicas=1, cpu="13"))
    twin = copy.deepcopy(first)
    twin["metadata"]["name"] = "b"
    other = default_job(_job("c", replicas=1, cpu="17"))
    rows = job_log([first, twin, other])
    got = by_bytes(rows)
    want = by_dict(rows)
    meta = {key: got.gang_meta[g] for key, g in got.gang_index.items()}
    assert meta["ns/a"] is meta["ns/b"]
    assert meta["ns/c"] is not meta["ns/a"]
    for key, g in want.gang_index.items():
        assert meta[key] == want.gang_meta[g]
    assert got.to_bytes() == want.to_bytes()


def test_large_minresources_fold_alike_on_both_paths() -> None:
    """minResources sums at and beyond 10**17 base units (where the bytes path parses
    its own texts back instead of keeping the sums): the dict path's gangs."""
    jobs = [
        default_job(_job(f"big{i}", replicas=r, cpu=cpu))
        for i, (r, cpu) in enumerate([(1, "99999999999999"), (3, "50000000000000"), (2, "4")])
    ]
    for job in jobs:
        job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]["requests"][
            "memory"
        ] = "60P"
    rows = job_log(jobs)
    want = by_dict(rows)
    got = by_bytes(rows)
    assert got.to_bytes() == want.to_bytes()
    assert _gangs(got) == _gangs(want)
    assert _gangs(got)["ns/big1"][1]["minResources"]["memory"] == 3 * 60 * 10**15


def _pods(job: dict[str, Any]) -> list[bytes]:
    """The pods' envelopes the job controller appends for ``job``."""
    return [
        orjson.dumps(envelope(t, o)) for t, o in volcano_job_objects(job) if t == EV.POD_SUBMITTED
    ]


def _spec_of(payload: bytes) -> bytes:
    # (the envelope's own bytes of its spec: orjson writes a dict as it lists it)
    spec = orjson.dumps(orjson.loads(payload)["data"]["spec"])
    assert spec in payload
    return spec


def test_a_jobs_fold_enters_its_pods_spec_in_the_memo() -> None:
    """The bytes path's fold of a Job enters in the spec memo the spec the job
    controller writes for the pods of each task it reads the requests of (the
    template's with the Job's schedulerName appended, ``_expect_pod_spec`` in
    core/_fold_bytes.pyx), so a pod's span is proven by the memo and its requests are
    not read again; not where the pods' spec is another (a Job naming a
    PriorityClass, a template naming its scheduler) or once a PriorityClass is folded
    (the memo is dropped). Every spec so entered is one the scanner accepts in a pod's
    envelope, and the pods fold to the dict path's state (the Jobs of Volcano's
    examples and generated ones, below and in the snapshot test above)."""
    plain = default_job(_job("a", replicas=2, cpu="2"))
    named = default_job(_job("b", replicas=1, cpu="3", priorityClassName="high"))
    own = default_job(_job("c", replicas=1, cpu="5"))
    own["spec"]["tasks"][0]["template"]["spec"]["schedulerName"] = "volcano"
    st = by_bytes(job_log([plain, named, own])[:4])  # the node and the three Jobs
    assert all(_py_spec_memo_holds(st, _spec_of(p)) for p in _pods(plain))
    assert not _py_spec_memo_holds(st, _spec_of(_pods(named)[0]))
    assert not _py_spec_memo_holds(st, _spec_of(_pods(own)[0]))
    high = {"metadata": {"name": "high"}, "value": 9}
    st.apply_payloads([(5, orjson.dumps(envelope(EV.PRIORITYCLASS_UPSERTED, high)))])
    assert not _py_spec_memo_holds(st, _spec_of(_pods(plain)[0]))
    # Over many Jobs: each Job folded alone, then its pods; what is held is accepted.
    foreseen = 0
    for job in example_manifest_jobs() + generated_gang_jobs(200, seed=5):
        rows = job_log([job])
        st = by_bytes(rows[:2])
        for _, payload in rows[2:]:
            if _py_spec_memo_holds(st, _spec_of(payload)):
                foreseen += 1
                assert _py_scanner_accepts(payload)
        # (this state: a second fold of the Job finds its spec in the module's memo of
        # Job specs, and enters no pod spec)
        assert st.apply_payloads(rows[2:]) == len(rows) - 2
        assert st.to_bytes() == by_dict(rows).to_bytes()
    assert foreseen >= 200


def cuts_and_mutants(whole: bytes, data: int) -> list[bytes]:
    """Every cut of ``whole`` past its data's start (as it is, closed by "}}" and by
    "}}}"), and every byte from there changed to a JSON token's or a stray one."""
    out = []
    for cut in range(data, len(whole)):
        out += [whole[:cut], whole[:cut] + b"}}", whole[:cut] + b"}}}"]
    for i in range(data, len(whole)):
        for byte in b'{}[]",: \\0a\x00\x80':
            mutant = bytearray(whole)
            mutant[i] = byte
            out.append(bytes(mutant))
    return out


def test_cut_and_mutated_pods_of_a_foreseen_spec_fold_as_decoded() -> None:
    """Every cut of a Job's pod whose spec the Job entered in the memo (closed by the
    "}}" the scan looks for or not), and every byte of its data changed to a JSON token's,
    the first pods of that spec: the bytes path's state and anomalies are those of
    the payloads decoded whole (the memo proves only the bytes it holds)."""
    job = default_job(_job("a", replicas=1, cpu="2"))
    rows = job_log([job])
    whole = rows[2][1]
    assert _py_spec_memo_holds(by_bytes(rows[:2]), _spec_of(whole))
    payloads = [p for _, p in rows[:2]]
    data = whole.index(b'"data":') + 7  # (an envelope of no type is not snapshotted)
    payloads += cuts_and_mutants(whole, data)
    payloads.append(whole)
    decoded = assert_same_as_decoded(payloads)
    assert decoded.anomalies["undecodable"] > 500


def test_a_template_written_with_spaces_foresees_its_pods_spec_with_them() -> None:
    """A Job's bytes with whitespace in a template spec (not orjson's, but JSON): the
    spec entered for its pods keeps it, and a pod of exactly those bytes, proven by
    the memo, folds as decoded; the controller's compact pod misses and is scanned."""
    job = default_job(_job("a", replicas=1, cpu="2"))
    compact = orjson.dumps(job["spec"]["tasks"][0]["template"]["spec"])
    spaced = compact[:-1] + b" }"
    raw_job = orjson.dumps(envelope(ev.JOB_SUBMITTED, job)).replace(compact, spaced, 1)
    assert spaced in raw_job
    rows = job_log([job])
    pod_row = rows[2][1]
    pod_spec = _spec_of(pod_row)
    spaced_spec = spaced[:-1] + pod_spec[len(compact) - 1 :]
    spaced_pod = pod_row.replace(pod_spec, spaced_spec, 1)
    assert spaced_pod != pod_row and b' ,"schedulerName"' in spaced_pod
    st = by_bytes([rows[0], (2, raw_job)])
    assert _py_spec_memo_holds(st, spaced_spec)
    assert not _py_spec_memo_holds(st, pod_spec)
    payloads = [rows[0][1], raw_job, spaced_pod, pod_row]
    assert_same_as_decoded(payloads)


def test_cut_and_mutated_jobs_of_a_known_spec_fold_as_decoded() -> None:
    """A Job's spec taken unchecked by the scan is proven by the memo of Job specs
    when it holds those bytes (its keys are specs the scanner accepted): every cut of
    a Job of a known spec (closed by "}}" or not) and every byte of its data changed
    to a JSON token's fold to the state, and anomalies, of the payloads decoded
    whole."""
    first = default_job(_job("a", replicas=1, cpu="2"))
    second = default_job(_job("b", replicas=1, cpu="2"))
    rows = job_log([first])
    whole = orjson.dumps(envelope(ev.JOB_SUBMITTED, second))
    payloads = [p for _, p in rows[:2]]
    data = whole.index(b'"data":') + 7
    payloads += cuts_and_mutants(whole, data)
    payloads.append(whole)
    decoded = assert_same_as_decoded(payloads)
    assert decoded.anomalies["undecodable"] > 500
