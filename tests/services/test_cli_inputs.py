"""Input files through ``publish``, ``ingest --input`` and ``up --input``: the same
reading, the same exit codes (0 ok; 2 usage: no --kafka for publish, a file that
cannot be read; 3 invalid input: a manifest that cannot be converted), workloads as
their pods, other kinds skipped with one warning line each, and ``publish --mode``."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from esched.services.cli import EXIT_INVALID_INPUT, EXIT_USAGE, cli

WORKLOADS = """
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: "8", memory: 16Gi, pods: "110"}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a: "1"}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: batch-high}
value: 5000
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      priorityClassName: batch-high
      containers:
      - name: app
        resources: {requests: {cpu: 500m, memory: 256Mi}}
"""
#: The second document cannot be converted (a Volcano Job without tasks).
UNCONVERTIBLE = """
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: "8", memory: 16Gi, pods: "110"}}
---
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: j}
spec: {tasks: []}
"""


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_publish_help_says_kafka_is_required(runner: CliRunner) -> None:
    text = runner.invoke(cli, ["publish", "--help"]).output
    assert "required" in text and "--mode" in text
    assert "Without it: the in-process bus" not in text


@pytest.mark.parametrize("command", ["publish", "ingest", "up"])
def test_each_input_command_documents_the_same_exit_codes(runner, command) -> None:
    text = " ".join(runner.invoke(cli, [command, "--help"]).output.split())
    assert "Exit codes: 0" in text and "3 invalid input" in text and "2 usage" in text


def test_publish_without_kafka_is_a_usage_error(runner, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("ESCHED_KAFKA", raising=False)
    result = runner.invoke(cli, ["publish", write(tmp_path, "w.yaml", WORKLOADS)])
    assert result.exit_code == EXIT_USAGE and "--kafka" in result.output


@pytest.mark.parametrize(
    "command",
    [
        ["publish", "--kafka", "127.0.0.1:1"],
        ["ingest", "--deadletter-file", "{tmp}/dead"],
        ["up", "--quiet", "--exit-when-idle"],
    ],
)
def test_an_unconvertible_manifest_exits_3_in_every_command(runner, tmp_path, command) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    store = ["--store", f"sqlite:///{tmp_path}/es.sqlite"] if command[0] != "publish" else []
    path = write(tmp_path, "bad.yaml", UNCONVERTIBLE)
    inputs = [path] if command[0] == "publish" else ["--input", path]
    result = runner.invoke(cli, [*args, *store, *inputs])
    assert result.exit_code == EXIT_INVALID_INPUT, result.output
    assert "bad.yaml" in result.output and "document 1" in result.output


@pytest.mark.parametrize("command", ["publish", "ingest", "up"])
def test_a_missing_file_is_a_usage_error_in_every_command(runner, tmp_path, command) -> None:
    missing = str(tmp_path / "nope.yaml")
    args = {
        "publish": ["publish", "--kafka", "127.0.0.1:1", missing],
        "ingest": ["ingest", "--store", f"sqlite:///{tmp_path}/a.sqlite", "--input", missing],
        "up": ["up", "--quiet", "--store", f"sqlite:///{tmp_path}/b.sqlite", "--input", missing],
    }[command]
    result = runner.invoke(cli, args)
    assert result.exit_code == EXIT_USAGE, result.output


def test_ingest_input_expands_workloads_and_warns_once_per_skipped_object(runner, tmp_path) -> None:
    store = f"sqlite:///{tmp_path}/es.sqlite"
    result = runner.invoke(
        cli,
        [
            "ingest",
            "--store",
            store,
            "--deadletter-file",
            str(tmp_path / "dead"),
            "--input",
            write(tmp_path, "w.yaml", WORKLOADS),
        ],
    )
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout)["stored"] == 4  # node, class, two pods
    warnings = [ln for ln in result.stderr.splitlines() if "warning" in ln]
    assert len(warnings) == 1 and "ConfigMap settings" in warnings[0]
    state = orjson.loads(runner.invoke(cli, ["replay", "--store", store]).stdout)
    assert state["pods"]["Pending"] == 2
    assert state["priorityClasses"]["batch-high"]["value"] == 5000


def test_up_input_places_a_deployments_pods(runner, tmp_path) -> None:
    result = runner.invoke(
        cli,
        [
            "up",
            "--quiet",
            "--exit-when-idle",
            "--store",
            f"sqlite:///{tmp_path}/es.sqlite",
            "--input",
            write(tmp_path, "w.yaml", WORKLOADS),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert summary["replay"]["pods"]["Running"] == 2


@pytest.mark.kafka
@pytest.mark.parametrize("mode", ["binary", "structured"])
def test_publish_in_either_mode_then_ingest_stores_the_same_events(
    runner, tmp_path, kafka_bootstrap, topic_prefix, pg_url, mode
) -> None:
    common = ["--kafka", kafka_bootstrap, "--topic-prefix", topic_prefix]
    path = write(tmp_path, "w.yaml", WORKLOADS)
    sent = runner.invoke(cli, ["publish", *common, "--mode", mode, path])
    assert sent.exit_code == 0, sent.output
    assert orjson.loads(sent.stdout) | {"topics": None} == {
        "sent": 4,
        "mode": mode,
        "topics": None,
    }
    ingested = runner.invoke(cli, ["ingest", *common, "--store", pg_url, "--exit-when-idle"])
    assert ingested.exit_code == 0, ingested.output
    summary = orjson.loads(ingested.stdout)
    assert (summary["stored"], summary["deadlettered"]) == (4, 0)


def test_a_job_volcanos_webhook_refuses_exits_3_with_volcanos_message(runner, tmp_path) -> None:
    # volcano-sh/volcano example/invalid_jobs/duplicatedTaskName-webhook-deny.yaml
    deny = Path(__file__).parents[1] / "schemas" / "volcano_examples"
    path = str(deny / "duplicatedTaskName-webhook-deny.yaml")
    result = runner.invoke(cli, ["publish", "--kafka", "127.0.0.1:1", path])
    assert result.exit_code == EXIT_INVALID_INPUT, result.output
    assert "duplicated task name task-1" in result.output
