"""What of a Volcano Job the log records (:mod:`esched.core.jobs`): a one-pod Job's
admission (Pending, Running) is implied by its Job and its placement, so its life
brings no ``esched.job.updated`` until it finishes, and its PodGroup by its Job, so
the job controller appends only its pod; ``esched replay`` still shows each phase
and the gang, from the fold."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from esched.core.validation import Verdict
from esched.schemas import events as ev
from esched.schemas.manifests import events_from_documents
from esched.services.cli import cli
from esched.services.commit.decisions import decision_event
from esched.services.jobs import JobController, fold_job_log
from esched.services.replica.proposals import binding
from esched.services.store import open_store
from esched.services.store.base import EventStore
from support import events
from support.aio import eventually

_JOB = events.one_pod_job()
_POD = "t/one-w-0"


def _placement() -> dict[str, Any]:
    """The commit service's decision binding the Job's pod to n1."""
    proposal = {
        "proposal": "p1",
        "replica": "r0",
        "position": 0,
        "gang": None,
        "bindings": [binding(_POD, "n1", {"cpu": 1000, "pods": 1}, ())],
    }
    return decision_event(proposal, Verdict(True))


def _succeeded() -> dict[str, Any]:
    return ev.envelope(
        ev.POD_SUCCEEDED, "test", {"metadata": {"name": "one-w-0", "namespace": "t"}}, id="done"
    )


async def _settled(es: EventStore, controller: JobController) -> bool:
    """The controller folded the whole log and has nothing left to append."""
    return controller.idle() and controller.position == await es.head()


async def test_a_one_pod_jobs_life_records_only_how_it_finished(tmp_path: Path) -> None:
    """Job, placement, success: the controller appends nothing for the job's PodGroup
    and pod (the Job implies them), Pending and Running, and one
    ``esched.job.updated`` for its Completed (transition 2): two events of the
    controller's and the commit service's for the Job's one."""
    es = open_store(f"sqlite:///{tmp_path / 'one.sqlite'}")
    await es.connect()
    await es.migrate()
    await events.append_events(es, *events_from_documents([_JOB], source="test", id_prefix="j"))
    controller = JobController(es)
    task = asyncio.create_task(controller.run())
    try:
        await eventually(lambda: _settled(es, controller), within=20)
        await events.append_events(es, _placement())
        await eventually(lambda: _settled(es, controller), within=20)
        job = (await fold_job_log(es)).jobs["t/one"]
        assert [t.phase for t in job.history] == ["Pending", "Running"]
        await events.append_events(es, _succeeded())

        async def completed() -> bool:
            j = (await fold_job_log(es)).jobs["t/one"]
            return j.phase == "Completed" and not j.unrecorded() and await _settled(es, controller)

        await eventually(completed, within=20)
        rows = await es.read(0, 100)
    finally:
        await controller.stop()
        await asyncio.wait_for(task, 10)
        await es.close()
    assert [r.type for r in rows] == [
        ev.JOB_SUBMITTED,
        ev.PLACEMENT_COMMITTED,
        ev.POD_SUCCEEDED,
        ev.JOB_UPDATED,
    ]
    record = orjson.loads(rows[-1].payload)["data"]
    assert (record["seq"], record["phase"], record["previous"]) == (2, "Completed", "Running")
    assert controller.totals.as_dict() == {
        "transitions": 1,
        "deleted": 0,
        "podgroups": 0,
        "submitted": 0,
        "timers": 0,
        "duplicates": 0,
        "invalid_pods": 0,
        "takeovers": 1,
    }


@pytest.mark.parametrize("recorded", [False, True], ids=["implied", "recorded"])
def test_replay_shows_a_one_pod_jobs_pending_then_running_with_no_record(
    tmp_path: Path, recorded: bool
) -> None:
    """With no ``esched.job.updated`` nor PodGroup in the log, ``esched replay`` shows
    the Job Pending once its pod is submitted and Running once the pod is placed (its
    transitions counted from the fold) and its gang of one (the PodGroup the Job
    implies); ``esched audit`` finds the log clean. A log with the PodGroup recorded
    (as the controller wrote it before) replays and audits the same."""
    store = f"sqlite:///{tmp_path / 'replay.sqlite'}"
    runner = CliRunner()

    async def append(*envs: dict[str, Any]) -> None:
        es = open_store(store)
        await es.connect()
        await es.migrate()
        try:
            await events.append_events(es, *envs)
        finally:
            await es.close()

    def replayed() -> tuple[dict[str, Any], str]:
        out = runner.invoke(cli, ["replay", "--store", store, "--format", "json"])
        assert out.exit_code == 0, out.output
        table = runner.invoke(cli, ["replay", "--store", store, "--format", "table"]).stdout
        [job] = orjson.loads(out.stdout)["jobs"]
        jobs_table = table.split("\njobs ", 1)[1]
        return job, next(line for line in jobs_table.splitlines() if "t/one" in line)

    node = events.node("n1", "8")
    created = [
        e
        for e in events_from_documents([_JOB], source="test", id_prefix="j", job_pods=True)
        if recorded or e["type"] != ev.PODGROUP_SUBMITTED
    ]
    assert [e["type"] for e in created][1] == (
        ev.PODGROUP_SUBMITTED if recorded else ev.POD_SUBMITTED
    )
    asyncio.run(append(ev.envelope(ev.NODE_ADDED, "test", node["data"], id="n1"), *created))
    job, line = replayed()
    assert (job["phase"], job["transitions"]) == ("Pending", 1)
    assert line.split()[1:3] == ["Pending", "0"]
    asyncio.run(append(_placement()))
    job, line = replayed()
    assert (job["phase"], job["transitions"], job["tasks"]["w"]["running"]) == ("Running", 2, 1)
    assert line.split()[1:4] == ["Running", "0", "w=0/1/0/0"]
    out = runner.invoke(cli, ["replay", "--store", store, "--format", "json"])
    gangs = orjson.loads(out.stdout)["gangs"]
    gang = gangs["t/one"]
    assert (gang["minMember"], gang["queue"], gang["Pending"], gang["Running"]) == (
        1,
        "default",
        0,
        1,
    )
    table = runner.invoke(cli, ["replay", "--store", store, "--format", "table"]).stdout
    assert "t/one" in table.split("\ngangs ", 1)[1].split("\nqueues ", 1)[0]
    out = runner.invoke(cli, ["audit", "--store", store, "--format", "json"])
    assert out.exit_code == 0, out.output
    assert orjson.loads(out.stdout)["ok"]
