"""`esched bench e2e` end to end on a small cluster: the figures are all there and sane."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from esched.services.devbroker import DevBroker

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


def _bench(command: str, bootstrap: str, pg_server: str, logdir: Path, *args: str) -> dict:
    """The output of ``esched bench <command> args`` on the broker and server given."""
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("esched")),
            "bench",
            command,
            "--kafka",
            bootstrap,
            "--pg",
            pg_server,
            *args,
            "--logdir",
            str(logdir),
        ],
        capture_output=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return orjson.loads(result.stdout)


def _check_two_replica_run(run: dict) -> None:
    """What every 2-replica run with the latency phase reports."""
    assert run["replicas"] == 2 and run["missing"] == 0
    assert run["pods_per_s"] > 0
    assert set(run["commits_by_replica"]) == {"r1", "r2"}
    assert run["conflict_fraction"] >= 0
    lat = run["latency"]
    assert lat["missing"] == 0 and 0 < lat["p50_ms"] <= lat["p99_ms"]
    assert "sent->stored" in lat["stages"]
    assert {"commit", "dispatch", "ingest", "replica-r1"} <= set(run["cpu_us_per_pod"])
    # PostgreSQL: the run's database's backends apart from the server's own processes
    assert {"postgresql", "postgresql_server"} <= set(run["cpu_us_per_pod"])
    # each replica's CPU by part of its work, per pod it placed
    for name in ("replica-r1", "replica-r2"):
        parts = run["replica_cpu_us"][name]["per_placed_pod"]
        assert parts["plan"] > 0 and parts["work"] > 0 and parts["follow"] > 0, parts
        assert parts["total"] >= parts["plan"] + parts["work"] + parts["follow"], parts
    # Idle, no service spins: each waits for work at a small fraction of a core (the
    # replicas pause their fetches, the others' fetch waits grow). (The broker is the
    # test's own here, not a process the benchmark started and measures.)
    idle = run["idle"]
    assert idle["seconds"] >= 2
    shares = idle["cpu_share"]
    assert {"commit", "dispatch", "ingest", "replica-r1", "replica-r2"} <= set(shares)
    assert all(
        0 <= shares[k] < 0.1
        for k in shares
        if k not in ("bench", "postgresql", "postgresql_server")
    ), shares


# Each bench run is ~30 s of process starts and group joins (tansu holds each join):
# the default suite runs one, with Volcano Jobs, two replicas and the latency phase
# (test_bench_e2e_with_volcano_jobs_runs_the_job_controller, which asserts all of
# this but the plain-pod throughput phase's commit count).
@pytest.mark.scale
def test_bench_e2e_reports_throughput_latency_and_conflicts(
    pg_server: str, dev_broker: DevBroker, tmp_path
) -> None:
    out = _bench(
        "e2e",
        dev_broker.bootstrap,
        pg_server,
        tmp_path,
        *("--nodes", "200", "--pods", "400", "--replicas", "2", "--latency-for", "2"),
        *("--rate", "200", "--latency-seconds", "1", "--idle-seconds", "2"),
    )
    assert out["mode"] == "processes"
    assert 0.6 < out["preload"]["cpu_utilization"] < 0.8
    (run,) = out["runs"]
    _check_two_replica_run(run)
    assert run["commits"] >= 400


@pytest.mark.scale
def test_bench_restart_reports_the_restart_and_its_baseline(
    pg_server: str, dev_broker: DevBroker, tmp_path
) -> None:
    out = _bench(
        "restart", dev_broker.bootstrap, pg_server, tmp_path, "--nodes", "300", "--pending", "50"
    )
    assert out["running_pods"] > 0 and out["nodes"] == 300
    for key in (
        "first_start_s",
        "restart_after_sigterm_s",
        "restart_after_sigkill_s",
        "baseline_fold_from_zero_s",
        "fold_from_snapshot_s",
    ):
        assert out[key] > 0, key


def test_bench_e2e_with_volcano_jobs_runs_the_job_controller(
    pg_server: str, dev_broker: DevBroker, tmp_path
) -> None:
    """``--volcano-jobs 10``: the pods come as Volcano Jobs (gangs) and the job
    controller runs as one more process; every pod is committed, by both replicas,
    and the latency phase (plain pods) reports its figures."""
    out = _bench(
        "e2e",
        dev_broker.bootstrap,
        pg_server,
        tmp_path,
        *(
            "--nodes",
            "200",
            "--fill",
            "0.4",
            "--pods",
            "300",
            "--replicas",
            "2",
            "--latency-for",
            "2",
        ),
        *("--rate", "200", "--latency-seconds", "1", "--volcano-jobs", "10"),
        *("--idle-seconds", "2"),
    )
    assert out["mode"] == "processes"
    assert 0.3 < out["preload"]["cpu_utilization"] < 0.5
    (run,) = out["runs"]
    _check_two_replica_run(run)
    assert run["job_size"] == 10
    assert run["commits"] >= 30 and "jobs" in run["cpu_us_per_pod"]
    # The implied pods' submissions are their Jobs' rows on the store's clock.
    assert run["store_pods_per_s"] > 0 and "stored" in run["timeline_s"]


def test_job_payloads_are_the_jobs_alone_keyed_by_the_job():
    from esched.services.bench_e2e.preload import job_payloads

    # The job controller creates the PodGroups and pods: the bench sends the Jobs.
    records, pods = job_payloads(25, "tput", seed=1, size=10)
    assert len(pods) == 25 and pods[:2] == ["tput/job-0-w-0", "tput/job-0-w-1"]
    assert [orjson.loads(v)["type"] for _k, v in records] == ["esched.job.submitted"] * 3
    assert [k for k, _v in records] == ["tput/job-0", "tput/job-10", "tput/job-20"]


def test_the_replica_cpu_breakdown_divides_each_part_by_placed_and_flow_pods() -> None:
    from esched.services.bench_e2e.throughput import replica_cpu_breakdown

    stats = {
        "replica-r1": {
            "placed_pods": 100,
            "cpu_s": {"work": 0.001, "plan": 0.002},
            "follow_cpu_s": 0.003,
            "cpu_after_start_s": 0.010,
            "loop_cpu_after_start_s": 0.008,
        },
        "replica-r2": {"placed_pods": 300, "cpu_after_start_s": None},
    }
    # the throughput phase's CPU: 50 us a pod of the flow, of which 15 counted
    out = replica_cpu_breakdown(stats, {"replica-r1": 50.0}, 400)
    assert list(out) == ["replica-r1"]  # r2 reported no CPU
    assert out["replica-r1"]["per_flow_pod"]["window_rest"] == 35.0
    del out["replica-r1"]["per_placed_pod"]["window_rest"]
    assert out["replica-r1"]["per_placed_pod"] == {
        "work": 10.0,
        "plan": 20.0,
        "follow": 30.0,
        "loop_rest": 20.0,
        "other_threads": 20.0,
        "total": 100.0,
    }
    # the flow: 400 pods placed by both
    assert out["replica-r1"]["per_flow_pod"]["total"] == 25.0
