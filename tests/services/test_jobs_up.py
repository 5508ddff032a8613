"""The Volcano Job controller end to end on ``esched up``: a job with ``dependsOn``
places its second task only after the first completed, and a RestartJob policy
resubmits the job's pods with the next attempt; ``esched audit`` finds the log
clean and replays the same job states."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from esched.schemas import events as ev
from esched.schemas.events import stream_of
from esched.schemas.manifests import events_from_documents
from esched.services.audit import audit_store
from esched.services.jobs import fold_job_log
from esched.services.store import NewEvent, open_store
from esched.services.store.snapshots import fold_log
from support import events
from support.aio import eventually
from support.up import equals, pod_phase, up_running

_TEMPLATE = {
    "spec": {
        "containers": [
            {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
        ]
    }
}


def _job(name: str, tasks: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "t"},
        "spec": {"tasks": [{**t, "template": _TEMPLATE} for t in tasks], **spec},
    }


async def _append(es, etype: str, data: dict[str, Any], ident: str) -> None:
    e = ev.envelope(etype, "test", data, id=ident)
    await es.append([NewEvent(e["id"], e["type"], stream_of(e), orjson.dumps(e))])


def _ref(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "t"}}


async def _job_state(es, key: str):
    return (await fold_job_log(es)).jobs.get(key)


async def test_depends_on_and_restart_job_end_to_end(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.sqlite'}"
    pipeline = _job(
        "pipe",
        [
            {"name": "prep", "replicas": 1},
            {"name": "train", "replicas": 2, "dependsOn": {"name": ["prep"]}},
        ],
        minAvailable=1,
    )
    retried = _job(
        "retry",
        [{"name": "worker", "replicas": 2}],
        policies=[{"event": "PodFailed", "action": "RestartJob"}],
        maxRetry=3,
    )
    docs = [events.node("n1", "8")["data"] | {"kind": "Node"}, pipeline, retried]
    inputs = events_from_documents(docs, source="test", id_prefix="t")
    async with up_running(url, inputs) as run:
        es = run.store
        # dependsOn: prep runs; train's pods do not exist yet.
        await eventually(lambda: equals(pod_phase(es, "t/pipe-prep-0"), "Running"), within=30)
        await eventually(lambda: equals(pod_phase(es, "t/retry-worker-1"), "Running"), within=30)
        assert (await fold_log(es)).pod("t/pipe-train-0") is None
        await _append(es, ev.POD_SUCCEEDED, _ref("pipe-prep-0"), "done-prep")
        # The controller submits train's pods once prep completed; they are placed.
        await eventually(lambda: equals(pod_phase(es, "t/pipe-train-0"), "Running"), within=30)
        await eventually(lambda: equals(pod_phase(es, "t/pipe-train-1"), "Running"), within=30)

        # RestartJob: a worker fails; both pods are withdrawn and resubmitted at attempt 1.
        await _append(es, ev.POD_FAILED, _ref("retry-worker-0"), "fail-worker")

        async def restarted() -> bool:
            job = await _job_state(es, "t/retry")
            return (
                job is not None
                and job.retry == 1
                and job.attempt_of("t/retry-worker-0") == 1
                and job.attempt_of("t/retry-worker-1") == 1
                and job.status_of("t/retry-worker-0") == "Running"
                and job.status_of("t/retry-worker-1") == "Running"
            )

        await eventually(restarted, within=30)
        job = await _job_state(es, "t/retry")
        assert [t.phase for t in job.history] == [
            "Pending",
            "Inqueue",
            "Running",
            "Restarting",
            "Pending",
            "Inqueue",
            "Running",
        ][: len(job.history)]
        assert "Restarting" in [t.phase for t in job.history]

        # Every transition but the starts (Pending, Inqueue, Running at
        # minAvailable) is recorded in the log, and the audit reproduces each record.
        async def recorded() -> bool:
            book = await fold_job_log(es)
            return len(book.jobs) == 2 and not any(j.unrecorded() for j in book.jobs.values())

        await eventually(recorded, within=30)
        book = await fold_job_log(es)
        report = await audit_store(es)
        assert report["ok"], report["violations"]
        records = [t.phase for j in book.jobs.values() for t in j.history if not t.implied]
        assert "Restarting" in records
        assert report["checked"]["job_transitions"] == len(records)
        jobs = {j["job"]: j for j in report["jobs"]}
        assert jobs["t/pipe"]["tasks"]["train"]["running"] == 2
        assert jobs["t/retry"]["attempt"] == 1
    summary = run.summary
    assert summary is not None
    # The controller's pods: train x2 once prep completed, then the two workers
    # again (prep and the two workers' first attempt: implied by their Jobs).
    assert summary["jobs"]["submitted"] == 4
    assert summary["jobs"]["deleted"] == 2


async def test_a_pod_pending_timeout_fires_through_a_timer_event(tmp_path: Path) -> None:
    """The seed's timeout policy (PodPending, timeout -> AbortJob) with nothing else
    happening: the controller appends ``esched.job.timer`` once the deadline passed,
    the fold fires the policy at that event, the pods are withdrawn (Aborted), and a
    replay of the log decides the same."""
    from esched.services.jobs import JobController

    es = open_store(f"sqlite:///{tmp_path / 'timer.sqlite'}")
    await es.connect()
    await es.migrate()
    job = _job(
        "stuck",
        [{"name": "worker", "replicas": 1}],
        policies=[{"event": "PodPending", "action": "AbortJob", "timeout": "1s"}],
    )
    # The log as the controller left it: the Job, its PodGroup and its pod.
    evs = list(events_from_documents([job], source="test", id_prefix="t", job_pods=True))
    await es.append([NewEvent(e["id"], e["type"], stream_of(e), orjson.dumps(e)) for e in evs])
    await _append(
        es,
        ev.POD_UNSCHEDULABLE,
        {"pod": "t/stuck-worker-0", "reasons": {"Insufficient.cpu": 1}, "message": "no"},
        "report",
    )
    controller = JobController(es)
    task = asyncio.create_task(controller.run())
    try:

        async def aborted() -> bool:
            j = await _job_state(es, "t/stuck")
            return j is not None and j.phase == "Aborted"

        await eventually(aborted, within=20)
        types = [r.type for r in await es.read(0, 1000)]
        assert ev.JOB_TIMER in types
        assert types.count(ev.POD_DELETED) == 1
        job_state = await _job_state(es, "t/stuck")
        assert [t.reason for t in job_state.history][-2:] == ["PodPending", "PodsGone"]
    finally:
        await controller.stop()
        await asyncio.wait_for(task, 10)
        await es.close()


def test_replay_and_audit_show_each_jobs_state_attempt_and_tasks(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from esched.services.cli import cli

    job = _job(
        "pipe",
        [
            {"name": "prep", "replicas": 1},
            {"name": "train", "replicas": 2, "dependsOn": {"name": ["prep"]}},
        ],
        minAvailable=1,
    )
    path = tmp_path / "job.jsonl"
    path.write_bytes(
        b"\n".join(
            orjson.dumps(e)
            for e in events_from_documents([job], source="t", id_prefix="t", job_pods=True)
        )
    )
    store = f"sqlite:///{tmp_path / 'cli.sqlite'}"
    runner = CliRunner()
    dead = str(tmp_path / "dead.jsonl")
    out = runner.invoke(
        cli, ["ingest", "--store", store, "--input", str(path), "--deadletter-file", dead]
    )
    assert out.exit_code == 0, out.output
    out = runner.invoke(cli, ["replay", "--store", store, "--format", "json"])
    assert out.exit_code == 0, out.output
    [state] = orjson.loads(out.stdout)["jobs"]
    assert (state["job"], state["phase"], state["attempt"]) == ("t/pipe", "Pending", 0)
    assert state["tasks"]["prep"]["pending"] == 1
    assert state["tasks"]["train"]["released"] is False
    table = runner.invoke(cli, ["replay", "--store", store, "--format", "table"]).stdout
    assert "t/pipe" in table and "train=0/0/0/0(waiting)" in table
    out = runner.invoke(cli, ["audit", "--store", store, "--format", "json"])
    assert out.exit_code == 0, out.output
    assert orjson.loads(out.stdout)["jobs"][0]["job"] == "t/pipe"


async def test_unknown_aborts_a_job_whose_last_pod_fits_nowhere_end_to_end(tmp_path: Path) -> None:
    """The job policy ``Unknown -> AbortJob`` on ``esched up``: of three 3-CPU pods
    (minAvailable 2) on one 8-CPU node two run and the third is reported
    unschedulable: the PodGroup's Unknown phase (running and unschedulable), so the
    job is aborted, its pods withdrawn, and the audit reproduces the transitions."""
    big = {
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "3"}}}]
        }
    }
    job = _job("big", [{"name": "worker", "replicas": 3}], minAvailable=2)
    job["spec"]["tasks"][0]["template"] = big
    job["spec"]["policies"] = [{"event": "Unknown", "action": "AbortJob"}]
    url = f"sqlite:///{tmp_path / 'unknown.sqlite'}"
    docs = [events.node("n1", "8")["data"] | {"kind": "Node"}, job]
    inputs = events_from_documents(docs, source="test", id_prefix="u")
    async with up_running(url, inputs) as run:
        es = run.store

        async def aborted() -> bool:
            j = await _job_state(es, "t/big")
            return j is not None and j.phase == "Aborted"

        await eventually(aborted, within=40)
        j = await _job_state(es, "t/big")
        assert [t.reason for t in j.history if t.phase == "Aborting"] == ["Unknown"]
        assert j.running == 0 and j.pending == 0

        async def recorded() -> bool:
            s = await _job_state(es, "t/big")
            return s is not None and not s.unrecorded()

        await eventually(recorded, within=30)
        report = await audit_store(es)
        assert report["ok"], report["violations"]


async def test_a_job_scaled_up_gets_its_new_pods_from_the_controller(tmp_path: Path) -> None:
    """A Job published again with more replicas (JobUpdated, no policy: SyncJob): the
    controller submits the pods of the new indices with the job's attempt."""
    from esched.services.jobs import JobController

    es = open_store(f"sqlite:///{tmp_path / 'scale.sqlite'}")
    await es.connect()
    await es.migrate()
    job = _job("grow", [{"name": "worker", "replicas": 1}])
    evs = list(events_from_documents([job], source="test", id_prefix="g0"))
    # (stored as ingest stores it: marked, the Job implies its first pod)
    stored = [ev.stored_form(e, orjson.dumps(e)) for e in evs]
    await es.append([NewEvent(e["id"], e["type"], stream_of(e), p) for e, p in stored])
    bigger = _job("grow", [{"name": "worker", "replicas": 3}])
    evs = [
        e
        for e in events_from_documents([bigger], source="test", id_prefix="g1")
        if e["type"] == ev.JOB_SUBMITTED
    ]
    await es.append([NewEvent(e["id"], e["type"], stream_of(e), orjson.dumps(e)) for e in evs])
    controller = JobController(es)
    task = asyncio.create_task(controller.run())
    try:

        async def grown() -> bool:
            j = await _job_state(es, "t/grow")
            return j is not None and j.status_of("t/grow-worker-2") == "Pending"

        await eventually(grown, within=20)
        j = await _job_state(es, "t/grow")
        assert j.updates == 1 and j.total == 3
        assert j.status_of("t/grow-worker-1") == "Pending"
        # The two of the new indices (the Job's first pod: implied by its submission).
        assert controller.totals.submitted == 2
        # The accepted update's PodGroup is recorded (whether an update re-creates it
        # depends on the job's phase); the first one, the Job's submission implies.
        assert controller.totals.podgroups == 1
        groups = [r for r in await es.read(0, 100) if r.type == ev.PODGROUP_SUBMITTED]
        assert [r.id for r in groups] == ["jobs.t/grow.podgroup.1"]
        assert orjson.loads(groups[0].payload)["data"]["spec"]["minMember"] == 3
    finally:
        await controller.stop()
        await asyncio.wait_for(task, 10)
        await es.close()


async def test_a_pod_esched_refuses_is_counted_not_submitted(tmp_path: Path) -> None:
    """A template Volcano's webhook lets through but esched's pod schema refuses (a
    DRA ``resourceClaims``, not implemented), in a Job of a log written before ingest
    refused such Jobs: the controller validates each pod it builds, submits none of
    this one, counts it once and carries on."""
    from esched.schemas.volcano_jobs import default_job
    from esched.services.jobs import JobController

    es = open_store(f"sqlite:///{tmp_path / 'refused.sqlite'}")
    await es.connect()
    await es.migrate()
    job = default_job(_job("claims", [{"name": "worker", "replicas": 1}]))
    job["spec"]["tasks"][0]["template"]["spec"]["resourceClaims"] = [{"name": "gpu"}]
    await _append(es, ev.JOB_SUBMITTED, job, "claims")
    controller = JobController(es)
    task = asyncio.create_task(controller.run())
    try:

        async def settled() -> bool:
            return controller.idle() and controller.position == await es.head()

        await eventually(settled, within=20)
        rows = await es.read(0, 100)
    finally:
        await controller.stop()
        await asyncio.wait_for(task, 10)
        await es.close()
    assert [r.type for r in rows] == [ev.JOB_SUBMITTED]  # its PodGroup is implied
    assert (controller.totals.invalid_pods, controller.totals.submitted) == (1, 0)
