"""`esched bench e2e` end to end on a small cluster: the figures are all there and sane."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from esched.services.devbroker import DevBroker

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


def test_bench_e2e_reports_throughput_latency_and_conflicts(
    pg_server: str, dev_broker: DevBroker, tmp_path
) -> None:
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("esched")),
            "bench",
            "e2e",
            "--kafka",
            dev_broker.bootstrap,
            "--pg",
            pg_server,
            "--nodes",
            "200",
            "--pods",
            "400",
            "--replicas",
            "2",
            "--latency-for",
            "2",
            "--rate",
            "200",
            "--latency-seconds",
            "1",
            "--idle-seconds",
            "2",
            "--logdir",
            str(tmp_path),
        ],
        capture_output=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    out = orjson.loads(result.stdout)
    assert out["mode"] == "processes"
    assert 0.6 < out["preload"]["cpu_utilization"] < 0.8
    (run,) = out["runs"]
    assert run["replicas"] == 2 and run["missing"] == 0
    assert run["pods_per_s"] > 0 and run["commits"] >= 400
    assert set(run["commits_by_replica"]) == {"r1", "r2"}
    assert run["conflict_fraction"] >= 0
    lat = run["latency"]
    assert lat["missing"] == 0 and 0 < lat["p50_ms"] <= lat["p99_ms"]
    assert "sent->stored" in lat["stages"]
    assert {"commit", "dispatch", "ingest", "replica-r1"} <= set(run["cpu_us_per_pod"])
    # Idle, no service spins: each waits for work at a small fraction of a core (the
    # replicas pause their fetches, the others' fetch waits grow). (The broker is the
    # test's own here, not a process the benchmark started and measures.)
    idle = run["idle"]
    assert idle["seconds"] >= 2
    shares = idle["cpu_share"]
    assert {"commit", "dispatch", "ingest", "replica-r1", "replica-r2"} <= set(shares)
    assert all(0 <= shares[k] < 0.1 for k in shares if k not in ("bench", "postgresql")), shares


@pytest.mark.scale
def test_bench_restart_reports_the_restart_and_its_baseline(
    pg_server: str, dev_broker: DevBroker, tmp_path
) -> None:
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("esched")),
            "bench",
            "restart",
            "--kafka",
            dev_broker.bootstrap,
            "--pg",
            pg_server,
            "--nodes",
            "300",
            "--pending",
            "50",
            "--logdir",
            str(tmp_path),
        ],
        capture_output=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    out = orjson.loads(result.stdout)
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
    controller runs as one more process; every pod is committed."""
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("esched")),
            "bench",
            "e2e",
            "--kafka",
            dev_broker.bootstrap,
            "--pg",
            pg_server,
            "--nodes",
            "200",
            "--fill",
            "0.4",
            "--pods",
            "300",
            "--replicas",
            "1",
            "--latency-for",
            "9",
            "--volcano-jobs",
            "10",
            "--logdir",
            str(tmp_path),
        ],
        capture_output=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    (run,) = orjson.loads(result.stdout)["runs"]
    assert run["job_size"] == 10 and run["missing"] == 0
    assert run["commits"] >= 30 and "jobs" in run["cpu_us_per_pod"]


def test_job_payloads_are_the_jobs_alone_keyed_by_the_job():
    from esched.services.bench_e2e.preload import job_payloads

    # The job controller creates the PodGroups and pods: the bench sends the Jobs.
    records, pods = job_payloads(25, "tput", seed=1, size=10)
    assert len(pods) == 25 and pods[:2] == ["tput/job-0-w-0", "tput/job-0-w-1"]
    assert [orjson.loads(v)["type"] for _k, v in records] == ["esched.job.submitted"] * 3
    assert [k for k, _v in records] == ["tput/job-0", "tput/job-10", "tput/job-20"]
