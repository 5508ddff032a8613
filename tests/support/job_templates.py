"""Volcano Jobs as decoded from the log, for the tests of the job controller's pods:
Volcano's example Jobs (defaulted) and generated ones with templates of every shape
the pod builder meets."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson

from esched.schemas.manifests import load_documents
from esched.schemas.volcano_jobs import default_job

__all__ = ["example_jobs", "generated_jobs"]

UPSTREAM = Path(__file__).parent.parent / "schemas" / "volcano_examples" / "upstream"


def example_jobs() -> list[dict[str, Any]]:
    """Volcano's example Jobs (``tests/schemas/volcano_examples/upstream``), defaulted."""
    jobs = []
    for path in sorted(UPSTREAM.glob("*.yaml")):
        for doc in load_documents(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "Job":
                jobs.append(orjson.loads(orjson.dumps(default_job(doc))))
    return jobs


_NAMES = ["j", "job-7", "a.b", "Bad_Name", "x" * 70, "w" * 250, ""]
_VALUES = ["v", "", "bad value", "y" * 64, 3, None]


def generated_jobs(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Jobs as decoded from the log, templates of every shape the builder meets: its own
    annotations or labels already set, generateName, a spec with or without the
    priorityClassName and schedulerName the Job sets, bad names, label values and
    quantities, refused fields, metadata, annotations or labels that are not objects."""
    out = []
    for i in range(n):
        meta: dict[str, Any] = {}
        if rng.random() < 0.5:
            meta["labels"] = {
                rng.choice(["app", "volcano.sh/job-name", "bad key!"]): rng.choice(_VALUES)
            }
        if rng.random() < 0.5:
            meta["annotations"] = {
                rng.choice(["a", "volcano.sh/task-index", "scheduling.k8s.io/group-name", "-x"]): (
                    rng.choice(_VALUES)
                )
            }
        if rng.random() < 0.2:
            meta["generateName"] = "g-"
        if rng.random() < 0.1:
            meta[rng.choice(["annotations", "labels"])] = rng.choice([None, [], "s", {}])
        if rng.random() < 0.2:
            meta = {"name": "n", "namespace": "o", **meta}
        container: dict[str, Any] = {
            "name": rng.choice(["c", "main", "Bad"]),
            "resources": {
                "requests": {"cpu": rng.choice(["1", "500m", "x", "2"]), "memory": "1Gi"}
            },
        }
        spec: dict[str, Any] = {"containers": [container]}
        if rng.random() < 0.3:
            spec["schedulerName"] = rng.choice(["default-scheduler", ""])
        if rng.random() < 0.3:
            spec["priorityClassName"] = rng.choice(["high", ""])
        if rng.random() < 0.05:
            spec["resourceClaims"] = [{"name": "gpu"}]
        template: Any = {"spec": spec}
        if meta or rng.random() < 0.2:
            template["metadata"] = meta
        if rng.random() < 0.03:
            template = rng.choice([{}, {"metadata": {}, "spec": {}}])
        job_spec: dict[str, Any] = {
            "tasks": [
                {"name": rng.choice(["w", "ps", "Bad Task"]), "replicas": 2, "template": template}
            ],
            "queue": rng.choice(["default", "q1", "bad queue", 7]),
        }
        if rng.random() < 0.5:
            job_spec["priorityClassName"] = "pc"
        if rng.random() < 0.7:
            job_spec["schedulerName"] = "volcano"
        job = {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {
                "name": rng.choice(_NAMES) or f"j{i}",
                "namespace": rng.choice(["t", "Bad"]),
            },
            "spec": job_spec,
        }
        out.append(orjson.loads(orjson.dumps(job)))
    return out
