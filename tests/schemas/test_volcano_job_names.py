"""Volcano's name checks of a Job (``validateJobCreate``: the job's name and each
pod's ``<job>-<task>-<index>`` a qualified name of at most 63 characters, each task's
name a DNS-1123 label) give the same problems whichever way :func:`validate_job`
reaches them: the pattern matched, or (a qualified job name and a task name that is
a label) only the length checked, and a task name found a label before looked up."""

from __future__ import annotations

import random
from typing import Any

import pytest

from esched.schemas.volcano_jobs import (
    _DNS1123_LABEL,
    _DNS1123_LABEL_MAX,
    _DNS1123_LABEL_MSG,
    _name_problems,
    default_job,
    validate_job,
)

#: Characters the patterns treat differently: label ones, qualified-name separators,
#: upper case, and some neither allows.
_ALPHABET = "ab09-_.Z/ é"


def _name(rng: random.Random) -> str:
    n = rng.choice([0, 1, 2, 3, 5, 8, 30, 55, 60, 61, 62, 63, 64, 70])
    if rng.random() < 0.5:  # mostly labels: the case the length-only path takes
        body = "".join(rng.choice("abz09-") for _ in range(n))
        return body.strip("-") or "a"
    return "".join(rng.choice(_ALPHABET) for _ in range(n))


def _job(rng: random.Random) -> dict[str, Any]:
    tasks = [
        {
            "name": _name(rng),
            "replicas": 1,
            "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}},
        }
        for _ in range(rng.choice([1, 1, 2, 3, 12]))
    ]
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": _name(rng), "namespace": "ns"},
        "spec": {"tasks": tasks},
    }


def _expected(job: dict[str, Any]) -> list[tuple[str, str]]:
    """The name problems by the rules themselves, in validate_job's order (each task's
    label problem, then its pod's; a duplicate task name ends the tasks; then the
    job's)."""
    name = job["metadata"]["name"]
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i, task in enumerate(job["spec"]["tasks"]):
        t = task["name"]
        field = f"spec.tasks[{i}].name"
        if len(t) > _DNS1123_LABEL_MAX:
            out.append((field, f" [must be no more than {_DNS1123_LABEL_MAX} characters];"))
        elif not _DNS1123_LABEL.match(t):
            out.append((field, f" [{_DNS1123_LABEL_MSG}];"))
        if t in seen:
            out.append((field, f" duplicated task name {t};"))
            break
        seen.add(t)
        out += [(field, text + ";") for text in _name_problems(f"{name}-{t}-{i}", "pod")]
    out += [("metadata.name", text) for text in _name_problems(name, "job")]
    return out


def _name_problems_of(job: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (p.field, p.message)
        for p in validate_job(job)
        if p.field == "metadata.name" or p.field.endswith("].name")
    ]


@pytest.mark.parametrize("seed", range(8))
def test_job_name_checks_equal_the_rules_over_random_names(seed: int) -> None:
    rng = random.Random(seed)
    refused = 0
    for _ in range(400):
        job = default_job(_job(rng))
        want = _expected(job)
        refused += bool(want)
        # twice: the second time the task names found labels are looked up
        assert _name_problems_of(job) == want, job
        assert _name_problems_of(job) == want, job
    assert 0 < refused < 400  # both admitted and refused names were met


def test_a_pod_name_over_63_characters_is_refused_when_job_and_task_names_are_labels() -> None:
    job = {
        "metadata": {"name": "j" * 58},
        "spec": {"tasks": [{"name": "abc", "replicas": 1, "template": {}}]},
    }
    assert _name_problems_of(job) == [
        (
            "spec.tasks[0].name",
            f"create pod with name {'j' * 58}-abc-0 validate failed "
            "[name part must be no more than 63 characters];",
        )
    ]
