"""The `esched` command as an operator meets it: help, embedded ingest, replay, publish."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from click.testing import CliRunner

from esched.schemas.events import stream_of
from esched.services.cli import EXIT_INVALID_INPUT, EXIT_USAGE, cli, serve
from esched.services.store import NewEvent, open_store


def ev(i: int, type_: str, data: dict) -> dict:
    return {
        "specversion": "1.0",
        "id": f"e{i}",
        "source": "test",
        "type": type_,
        "time": "2026-11-22T00:00:00Z",
        "data": data,
    }


def node(name: str, cpu: str, mem: str) -> dict:
    return {
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": mem, "pods": "110"}},
    }


def pod(name: str, cpu: str = "500m", mem: str = "1Gi") -> dict:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]
        },
    }


LOG = [
    ev(1, "esched.node.added", node("n1", "4", "8Gi")),
    ev(2, "esched.node.added", node("n2", "2", "4Gi")),
    ev(3, "esched.pod.submitted", pod("a")),
    ev(4, "esched.pod.submitted", pod("b")),
    ev(5, "esched.pod.submitted", pod("c")),
    ev(
        6,
        "esched.placement.committed",
        {
            "proposal": "p1",
            "replica": "r1",
            "position": 5,
            "gang": None,
            "bindings": [
                {
                    "pod": "ns/a",
                    "node": "n1",
                    "resources": {"cpu": 500, "memory": 2**30, "pods": 1},
                },
                {
                    "pod": "ns/b",
                    "node": "n2",
                    "resources": {"cpu": 500, "memory": 2**30, "pods": 1},
                },
            ],
        },
    ),
    ev(7, "esched.pod.succeeded", {"metadata": {"name": "b", "namespace": "ns"}}),
]


def append_internal(store_url: str, event: dict) -> None:
    """Write an internal event as the commit service would (ingest refuses them)."""

    async def main() -> None:
        store = open_store(store_url)
        await store.connect()
        await store.append(
            [
                NewEvent(
                    id=event["id"],
                    type=event["type"],
                    stream=stream_of(event),
                    payload=orjson.dumps(event),
                )
            ]
        )
        await store.close()

    asyncio.run(main())


def write_jsonl(path, events, extra: bytes = b"") -> str:
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n" + extra)
    return str(path)


@pytest.fixture
def events_file(tmp_path):
    """The external events before the placement, plus one malformed line."""
    return write_jsonl(tmp_path / "events.jsonl", LOG[:5], b"{broken\n")


def ingest_whole_log(runner, store: str, tmp_path, events_file) -> dict:
    dead = str(tmp_path / "dead.jsonl")
    summary = orjson.loads(
        invoke(
            runner, "ingest", "--store", store, "--input", events_file, "--deadletter-file", dead
        ).stdout
    )
    append_internal(store, LOG[5])
    invoke(
        runner,
        "ingest",
        "--store",
        store,
        "--input",
        write_jsonl(tmp_path / "later.jsonl", LOG[6:]),
        "--deadletter-file",
        dead,
    )
    return summary


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def invoke(runner: CliRunner, *args: str, code: int = 0):
    result = runner.invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == code, result.output + (result.stderr or "")
    return result


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["ingest"],
        ["publish"],
        ["replay"],
        ["store"],
        ["store", "migrate"],
        ["bench"],
        ["commit"],
        ["jobs"],
        ["audit"],
        ["bench", "validate"],
    ],
)
def test_every_command_documents_itself(runner, command):
    out = invoke(runner, *command, "--help").output
    assert "Usage: " in out and "--help" in out


def test_embedded_ingest_then_replay_gives_the_folded_cluster(runner, tmp_path, events_file):
    store = f"sqlite:///{tmp_path}/es.sqlite"
    summary = ingest_whole_log(runner, store, tmp_path, events_file)
    assert summary["stored"] == 5 and summary["deadlettered"] == 1
    assert summary["reasons"] == {"not_json": 1}
    dead = (tmp_path / "dead.jsonl").read_bytes().splitlines()
    assert [orjson.loads(d)["reason"] for d in dead] == ["not_json"]

    state = orjson.loads(invoke(runner, "replay", "--store", store).stdout)
    assert state["position"] == len(LOG)
    assert state["nodes"]["count"] == 2
    assert state["nodes"]["allocatable"]["cpu"] == 6000
    assert state["nodes"]["allocatable"]["memory"] == 12 * 2**30
    assert state["nodes"]["allocated"]["cpu"] == 500  # b finished and released
    assert state["pods"] == {"Pending": 1, "Running": 1, "Succeeded": 1, "Failed": 0}

    earlier = orjson.loads(invoke(runner, "replay", "--store", store, "--upto", "6").stdout)
    assert earlier["position"] == 6
    assert earlier["nodes"]["allocated"]["cpu"] == 1000

    table = invoke(runner, "replay", "--store", store, "--format", "table").stdout
    assert "position  7" in table and "Running=1" in table


def test_ingesting_the_same_file_twice_stores_nothing_new(runner, tmp_path, events_file):
    store = f"sqlite:///{tmp_path}/es.sqlite"
    dead = str(tmp_path / "dead.jsonl")
    invoke(runner, "ingest", "--store", store, "--input", events_file, "--deadletter-file", dead)
    again = orjson.loads(
        invoke(
            runner, "ingest", "--store", store, "--input", events_file, "--deadletter-file", dead
        ).stdout
    )
    assert again["stored"] == 0 and again["duplicates"] == 5
    assert again["head"] == 5


def test_snapshot_restart_gives_the_same_state(runner, tmp_path, events_file):
    store = f"sqlite:///{tmp_path}/es.sqlite"
    ingest_whole_log(runner, store, tmp_path, events_file)
    full = invoke(runner, "replay", "--store", store, "--upto", "4", "--save-snapshot").stdout
    info = orjson.loads(invoke(runner, "store", "info", "--store", store).stdout)
    assert info["snapshot"]["position"] == 4
    assert info["head"] == len(LOG)
    from_snap = orjson.loads(invoke(runner, "replay", "--store", store).stdout)
    from_zero = orjson.loads(invoke(runner, "replay", "--store", store, "--no-snapshot").stdout)
    assert from_snap == from_zero
    assert orjson.loads(full)["position"] == 4


def test_bench_validate_prints_rates(runner):
    out = orjson.loads(invoke(runner, "bench", "validate", "--events", "500").stdout)
    assert out["events"] == 500 and out["events_per_s"] > 0 and out["pod_us"] > 0


def test_migrate_is_idempotent(runner, tmp_path):
    store = f"sqlite:///{tmp_path}/es.sqlite"
    first = orjson.loads(invoke(runner, "store", "migrate", "--store", store).stdout)
    second = orjson.loads(invoke(runner, "store", "migrate", "--store", store).stdout)
    assert first["applied"] and second["applied"] == []


def test_config_file_supplies_defaults_and_flags_win(runner, tmp_path, events_file):
    store = f"sqlite:///{tmp_path}/from-config.sqlite"
    cfg = tmp_path / "esched.yaml"
    cfg.write_text(f"store: {store}\nreplay:\n  output-format: table\n")
    invoke(
        runner,
        "--config",
        str(cfg),
        "ingest",
        "--input",
        events_file,
        "--deadletter-file",
        str(tmp_path / "d"),
    )
    assert "position  5" in invoke(runner, "--config", str(cfg), "replay").stdout
    as_json = invoke(runner, "--config", str(cfg), "replay", "--format", "json").stdout
    assert orjson.loads(as_json)["position"] == 5


def test_bad_store_url_is_a_configuration_error(runner):
    result = runner.invoke(cli, ["replay", "--store", "mysql://nope"])
    assert result.exit_code == EXIT_USAGE
    assert "mysql" in result.output


def test_ingest_without_any_input_explains_what_to_give(runner, monkeypatch):
    monkeypatch.delenv("ESCHED_KAFKA", raising=False)
    result = runner.invoke(cli, ["ingest"])
    assert result.exit_code == EXIT_USAGE
    assert "--kafka" in result.output and "--input" in result.output


@pytest.mark.kafka
def test_publish_manifests_then_ingest_from_kafka(
    runner, tmp_path, kafka_bootstrap, topic_prefix, pg_url
):
    manifest = tmp_path / "cluster.yaml"
    manifest.write_text("""
apiVersion: v1
kind: Node
metadata: {name: big}
status: {allocatable: {cpu: "16", memory: 64Gi, pods: "110"}}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  containers:
  - name: app
    resources: {requests: {cpu: 250m, memory: 512Mi}}
""")
    common = ["--kafka", kafka_bootstrap, "--topic-prefix", topic_prefix]
    sent = orjson.loads(invoke(runner, "publish", *common, str(manifest)).stdout)
    assert sent["sent"] == 2
    summary = orjson.loads(
        invoke(runner, "ingest", *common, "--store", pg_url, "--exit-when-idle").stdout
    )
    assert summary["stored"] == 2
    state = orjson.loads(invoke(runner, "replay", "--store", pg_url).stdout)
    assert state["nodes"]["allocatable"]["cpu"] == 16000
    assert state["pods"]["Pending"] == 1


@pytest.mark.kafka
def test_publish_refuses_an_invalid_file_and_sends_nothing(
    runner, tmp_path, kafka_bootstrap, topic_prefix
):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(
        orjson.dumps(LOG[0])
        + b"\n"
        + orjson.dumps(ev(9, "esched.pod.submitted", pod("x", cpu="lots")))
        + b"\n"
    )
    result = runner.invoke(
        cli, ["publish", "--kafka", kafka_bootstrap, "--topic-prefix", topic_prefix, str(bad)]
    )
    assert result.exit_code == EXIT_INVALID_INPUT
    assert "bad.jsonl:2" in result.output and "cpu" in result.output


def test_replay_at_a_time_shows_the_log_as_it_was_then(runner, tmp_path, events_file):
    import time
    from datetime import UTC, datetime

    store = f"sqlite:///{tmp_path}/es.sqlite"
    invoke(
        runner,
        "ingest",
        "--store",
        store,
        "--input",
        events_file,
        "--deadletter-file",
        str(tmp_path / "d"),
    )
    time.sleep(0.05)
    between = datetime.now(UTC).isoformat()
    time.sleep(0.05)
    invoke(
        runner,
        "ingest",
        "--store",
        store,
        "--input",
        write_jsonl(tmp_path / "later.jsonl", LOG[6:]),
        "--deadletter-file",
        str(tmp_path / "d"),
    )
    then = orjson.loads(invoke(runner, "replay", "--store", store, "--at", between).stdout)
    now = orjson.loads(invoke(runner, "replay", "--store", store).stdout)
    assert then["position"] == 5 and now["position"] == 6
    naive = runner.invoke(cli, ["replay", "--store", store, "--at", "2026-01-01T00:00:00"])
    assert naive.exit_code == EXIT_USAGE and "time zone" in naive.output


def test_ingest_counts_outcomes_in_prometheus_metrics(runner, tmp_path, events_file):
    from prometheus_client import REGISTRY

    def sample(name: str, **labels) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    stored = sample("esched_ingest_events_total", outcome="stored")
    dead = sample("esched_deadletter_total", service="ingest", reason="not_json")
    invoke(
        runner,
        "ingest",
        "--store",
        f"sqlite:///{tmp_path}/m.sqlite",
        "--input",
        events_file,
        "--deadletter-file",
        str(tmp_path / "d"),
    )
    assert sample("esched_ingest_events_total", outcome="stored") - stored == 5
    assert sample("esched_deadletter_total", service="ingest", reason="not_json") - dead == 1


def _work_partitions_probe():
    """A command with the shared bus options that prints its bus's work partitions."""
    import click

    from esched.services.cli import command_bus, kafka_security_options

    @click.command()
    @kafka_security_options
    def probe() -> None:
        click.echo(command_bus("localhost:9092", "t.").work_partitions)

    return probe


def test_the_work_partition_count_comes_from_the_flag_the_environment_or_the_default():
    probe = _work_partitions_probe()
    runner = CliRunner()
    assert runner.invoke(probe, []).output.strip() == "24"
    assert runner.invoke(probe, ["--work-partitions", "48"]).output.strip() == "48"
    env = {"ESCHED_WORK_PARTITIONS": "36"}
    assert runner.invoke(probe, [], env=env).output.strip() == "36"
    refused = runner.invoke(probe, ["--work-partitions", "0"])
    assert refused.exit_code == EXIT_USAGE and "--work-partitions" in refused.output


def test_work_partitions_is_a_shared_key_of_the_config_file(tmp_path):
    from esched.services.cli import SHARED_KEYS

    assert "work_partitions" in SHARED_KEYS
    config = tmp_path / "esched.yaml"
    config.write_text("work_partitions: 12\n")
    result = CliRunner().invoke(cli, ["--config", str(config), "replica", "--help"])
    assert result.exit_code == 0 and "default: 12" in result.output.replace("\n", " ")


def test_replica_refuses_a_heartbeat_interval_not_below_its_session_timeout(runner):
    args = ["replica", "--id", "r1", "--kafka", "127.0.0.1:9", "--session-timeout", "2"]
    result = runner.invoke(cli, [*args, "--heartbeat-interval", "2"])
    assert result.exit_code == EXIT_USAGE and "--heartbeat-interval" in result.output


def test_the_replica_group_options_come_from_the_config_file(tmp_path):
    config = tmp_path / "esched.yaml"
    config.write_text("replica:\n  session-timeout: 4.5\n  static-membership: false\n")
    result = CliRunner().invoke(cli, ["--config", str(config), "replica", "--help"])
    text = " ".join(result.output.split())
    assert result.exit_code == 0 and "default: 4.5" in text
    assert "--static-membership / --no-static-membership" in text


class _Recording:
    """A service that records the CLI's calls; its run fails on demand."""

    def __init__(self, fail: bool) -> None:
        self.calls: list[str] = []
        self.fail = fail

    async def start(self) -> None:
        self.calls.append("start")

    async def stop(self) -> None:
        self.calls.append("stop")

    async def run(self) -> str:
        self.calls.append("run")
        if self.fail:
            raise RuntimeError("lost the store")
        return "totals"


async def test_a_served_service_is_stopped_whether_its_run_ends_or_fails():
    done = _Recording(fail=False)
    assert await serve(done, done.run) == "totals"
    assert done.calls == ["start", "run", "stop"]
    failed = _Recording(fail=True)
    with pytest.raises(RuntimeError, match="lost the store"):
        await serve(failed, failed.run)
    # the lease and connections are given up even when the run raised
    assert failed.calls == ["start", "run", "stop"]
