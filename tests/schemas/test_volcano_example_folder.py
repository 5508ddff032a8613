"""Every Job and Queue manifest of Volcano's own ``example/`` folder, unchanged.

The files under ``volcano_examples/upstream/`` are volcano-sh/volcano's ``example/``
manifests of kind Job or Queue (each names its source path and commit in its first
line; ``/`` in the path is ``__`` in the file name). Volcano accepts all of them, so
esched must too: converted by ``esched publish`` without a refusal, every event valid
for ingest, a Job becoming its Job event, its PodGroup and the pods of the tasks that
depend on no other task (the job controller submits the rest). The ones Volcano's
webhook refuses (``example/invalid_jobs/``) are in ``test_volcano_jobs.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from esched.schemas.manifests import events_from_documents, load_documents
from esched.schemas.validator import validate_event

UPSTREAM = Path(__file__).parent / "volcano_examples" / "upstream"
FILES = sorted(p.name for p in UPSTREAM.glob("*.yaml"))


def _convert(name: str) -> tuple[list[dict], list[dict]]:
    docs = load_documents((UPSTREAM / name).read_text())
    return docs, list(events_from_documents(docs, id_prefix="upstream", job_pods=True))


def test_the_folder_holds_volcanos_job_and_queue_examples() -> None:
    # 20 files at the commit named in each; a guard against an empty glob.
    assert len(FILES) == 20
    for name in FILES:
        first = (UPSTREAM / name).read_text().splitlines()[0]
        assert first.startswith("# volcano-sh/volcano example/")


@pytest.mark.parametrize("name", FILES)
def test_volcanos_example_is_accepted_unchanged(name: str) -> None:
    docs, events = _convert(name)
    for event in events:
        validate_event(event)  # raises InvalidEvent: ingest would dead-letter it
    jobs = [d for d in docs if d.get("kind") == "Job"]
    queues = [d for d in docs if d.get("kind") == "Queue"]
    types = [e["type"] for e in events]
    assert types.count("esched.job.submitted") == len(jobs)
    assert types.count("esched.podgroup.submitted") == len(jobs)
    assert types.count("esched.queue.upserted") == len(queues)
    # The pods of every task without dependsOn, one per replica (every example task
    # sets replicas).
    expected_pods = sum(
        t["replicas"] for job in jobs for t in job["spec"]["tasks"] if not t.get("dependsOn")
    )
    assert types.count("esched.pod.submitted") == expected_pods


@pytest.mark.parametrize("name", [n for n in FILES if "queue" in n])
def test_volcanos_example_queues_keep_their_weight_and_parent(name: str) -> None:
    docs, events = _convert(name)
    upserted = [e["data"] for e in events if e["type"] == "esched.queue.upserted"]
    for doc, data in zip([d for d in docs if d.get("kind") == "Queue"], upserted, strict=True):
        assert data["metadata"]["name"] == doc["metadata"]["name"]
        assert data["spec"].get("weight") == doc["spec"].get("weight")
        assert data["spec"].get("parent") == doc["spec"].get("parent")
