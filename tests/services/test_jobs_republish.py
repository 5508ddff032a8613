"""A Volcano Job published again, as ``kubectl apply`` of its manifest again: through
the publish path (``esched ingest --input`` reads files as ``esched publish`` does)
into a real store while ``esched up`` runs. As with Volcano's job controller, the
Job's pods are the controller's: the same Job again changes nothing, a changed one
is ``JobUpdated`` (``validateJobUpdate``'s rules), and a pod that succeeded never
runs again."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import orjson
import yaml

from esched.schemas import events as ev
from esched.schemas.events import stream_of
from esched.services.bus.base import TopicNames
from esched.services.event_files import read_records
from esched.services.jobs import fold_job_log
from esched.services.procs import run_esched
from esched.services.store import NewEvent, open_store
from esched.services.store.snapshots import fold_log
from esched.services.up import Up, UpConfig
from support.aio import eventually

_NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1"},
    "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}},
}


def _job(replicas: int, image: str = "x") -> dict[str, Any]:
    container = {"name": "c", "image": image, "resources": {"requests": {"cpu": "1"}}}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "t"},
        "spec": {
            "minAvailable": 1,
            "tasks": [
                {
                    "name": "w",
                    "replicas": replicas,
                    "template": {"spec": {"containers": [container]}},
                }
            ],
        },
    }


def _publish(path: Path, store: str, *docs: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump_all(docs))
    dead = str(path.with_suffix(".dead"))
    args = ["ingest", "--store", store, "--input", str(path), "--deadletter-file", dead]
    run_esched(args, dict(os.environ))


async def _submits(es, pod: str) -> int:
    rows = await es.read(0, 100_000)
    return sum(
        1
        for r in rows
        if r.type == ev.POD_SUBMITTED
        and ev.metadata_key(orjson.loads(r.payload)["data"]["metadata"]) == pod
    )


async def test_a_job_published_again_never_reruns_a_pod_that_succeeded(
    store_url: str, tmp_path: Path
) -> None:
    first = tmp_path / "job.yaml"
    first.write_text(yaml.safe_dump_all([_NODE, _job(2)]))
    records = list(read_records([str(first)], TopicNames()))
    assert [orjson.loads(r.value)["type"] for r in records] == [
        ev.NODE_ADDED,
        ev.JOB_SUBMITTED,
    ]  # the Job alone: its PodGroup and pods are the controller's
    runner = Up(UpConfig(store=store_url, progress_every=0), records)
    task = asyncio.create_task(runner.run())
    es = open_store(store_url)
    await es.connect()
    await es.migrate()

    async def phase(pod: str) -> str | None:
        rec = (await fold_log(es)).pod(pod)
        return rec["phase"] if rec else None

    async def is_(pod: str, want: str) -> bool:
        return await phase(pod) == want

    try:
        await eventually(lambda: is_("t/j-w-0", "Running"), within=30)
        await eventually(lambda: is_("t/j-w-1", "Running"), within=30)
        done = ev.envelope(
            ev.POD_SUCCEEDED, "test", {"metadata": {"name": "j-w-0", "namespace": "t"}}, id="done"
        )
        await es.append([NewEvent(done["id"], done["type"], stream_of(done), orjson.dumps(done))])
        await eventually(lambda: is_("t/j-w-0", "Succeeded"), within=30)

        # The same manifest again: nothing changes.
        await asyncio.to_thread(_publish, tmp_path / "same.yaml", store_url, _NODE, _job(2))
        # A changed one Volcano accepts (scale up): JobUpdated, the new pod only.
        await asyncio.to_thread(_publish, tmp_path / "more.yaml", store_url, _job(3))
        await eventually(lambda: is_("t/j-w-2", "Running"), within=30)
        assert await phase("t/j-w-0") == "Succeeded"
        assert await phase("t/j-w-1") == "Running"
        # (the first two implied by the Job's first submission, not recorded)
        assert [await _submits(es, f"t/j-w-{i}") for i in range(3)] == [0, 0, 1]
        job = (await fold_job_log(es)).jobs["t/j"]
        assert (job.updates, job.total, job.retry) == (1, 3, 0)
        assert job.status_of("t/j-w-0") == "Succeeded"

        # A change Volcano's webhook refuses (the pod template): refused with its
        # reason, no pod submitted again.
        await asyncio.to_thread(_publish, tmp_path / "image.yaml", store_url, _job(3, "y"))

        async def refused() -> bool:
            j = (await fold_job_log(es)).jobs["t/j"]
            return j.update_refused is not None

        await eventually(refused, within=30)
        # (the first two implied by the Job's first submission, not recorded)
        assert [await _submits(es, f"t/j-w-{i}") for i in range(3)] == [0, 0, 1]
        assert await phase("t/j-w-0") == "Succeeded"
    finally:
        await es.close()
        await runner.stop()
        await asyncio.wait_for(task, 30)
