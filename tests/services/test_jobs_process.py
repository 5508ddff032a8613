"""``esched jobs``: the Volcano Job lifecycle controller as its own OS process, against
a store that another command filled (no ``esched up``)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import orjson
import yaml

from esched.schemas import events as ev
from esched.schemas.events import stream_of
from esched.services.jobs import fold_job_log
from esched.services.procs import ServiceProcess, run_esched
from esched.services.store import NewEvent, open_store
from esched.services.store.snapshots import fold_log
from support.aio import eventually

_TEMPLATE = {
    "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}
}

_PIPELINE: dict[str, Any] = {
    "apiVersion": "batch.volcano.sh/v1alpha1",
    "kind": "Job",
    "metadata": {"name": "pipe", "namespace": "t"},
    "spec": {
        "minAvailable": 1,
        "tasks": [
            {"name": "prep", "replicas": 1, "template": _TEMPLATE},
            {
                "name": "train",
                "replicas": 2,
                "dependsOn": {"name": ["prep"]},
                "template": _TEMPLATE,
            },
        ],
    },
}


async def test_esched_jobs_process_submits_a_jobs_pods_then_its_dependants(
    tmp_path: Path,
) -> None:
    """A Job with ``dependsOn`` ingested into a SQLite store; ``esched jobs`` started
    on it submits the first task's pod; once that pod succeeded it submits the
    dependent task's pods; SIGTERM ends it with its JSON summary. The job's Pending
    and Running are its start, which no ``esched.job.updated`` records: the
    fold derives them."""
    url = f"sqlite:///{tmp_path / 'jobs.sqlite'}"
    env = {**os.environ, "ESCHED_STORE": url, "ESCHED_LOG_LEVEL": "info"}
    manifest = tmp_path / "pipe.yaml"
    manifest.write_text(yaml.safe_dump(_PIPELINE))
    run_esched(["ingest", "--input", str(manifest), "--deadletter-file", str(tmp_path / "dl")], env)

    proc = ServiceProcess("jobs", ["jobs", "--tick", "0.05"], env, tmp_path)
    es = open_store(url)
    await es.connect()
    try:

        async def first_submitted() -> bool:
            proc.check_alive()
            return (await fold_log(es)).pod("t/pipe-prep-0") is not None

        await eventually(first_submitted, within=30)
        assert (await fold_log(es)).pod("t/pipe-train-0") is None
        done = ev.envelope(
            ev.POD_SUCCEEDED,
            "test",
            {"metadata": {"name": "pipe-prep-0", "namespace": "t"}},
            id="ok",
        )
        await es.append([NewEvent(done["id"], done["type"], stream_of(done), orjson.dumps(done))])

        async def dependants_submitted() -> bool:
            state = await fold_log(es)
            proc.check_alive()
            return all(state.pod(f"t/pipe-train-{i}") is not None for i in (0, 1))

        await eventually(dependants_submitted, within=30)
        job = (await fold_job_log(es)).jobs["t/pipe"]
        assert [t.phase for t in job.history] == ["Pending", "Running"]
    finally:
        await es.close()
        code = await asyncio.to_thread(proc.stop)
    assert code == 0, proc.log.read_text()
    summary = proc.summary()
    assert summary is not None and summary["submitted"] == 2  # train x2 (prep: implied)
    assert summary["transitions"] == 0  # Pending and Running: implied, not recorded
