"""`esched bench scale`: the cgroup CPU caps (on fake cgroup trees: the file formats of
cgroup v1 and v2), the efficiency arithmetic, the plot, and the real benchmark on a
small cluster (behind the scale mark).

The file formats follow the kernel's documentation: Documentation/admin-guide/cgroup-v2.rst
(``cpu.max``: "$MAX $PERIOD", ``cgroup.subtree_control``: "+cpu") and
Documentation/scheduler/sched-bwc.rst (v1: ``cpu.cfs_quota_us``, ``cpu.cfs_period_us``,
a quota of at least 1 ms).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from esched.services.bench_e2e.cgroups import (
    CgroupError,
    cap_period_us,
    find_cpu_controller,
    quota_us,
)
from esched.services.bench_e2e.scale import (
    efficiencies,
    plot_scaling,
    run_order,
    runs_shortfall,
    scaling,
)


def test_a_cap_is_a_quota_of_the_default_period_and_never_under_the_kernels_minimum():
    assert (quota_us(0.02), cap_period_us(0.02)) == (2_000, 100_000)
    assert (quota_us(1.5), cap_period_us(1.5)) == (150_000, 100_000)
    # 0.005 CPU would be 500 µs per 100 ms, under the 1 ms minimum: a longer period.
    assert cap_period_us(0.005) == 200_000 and quota_us(0.005, 200_000) == 1_000
    with pytest.raises(ValueError):
        quota_us(0)


def _v1_tree(root: Path) -> Path:
    cpu = root / "cpu"
    cpu.mkdir()
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    return cpu


def test_a_v1_cpu_controller_caps_a_group_with_period_and_quota(tmp_path):
    cpu = _v1_tree(tmp_path)
    controller = find_cpu_controller((("v1", cpu),), group="bench")
    assert controller.version == "v1" and controller.root == cpu / "bench"
    cap = controller.create("r1", 0.02)
    assert (cap.path / "cpu.cfs_period_us").read_text() == "100000\n"
    assert (cap.path / "cpu.cfs_quota_us").read_text() == "2000\n"
    cap.add(4242)
    assert (cap.path / "cgroup.procs").read_text() == "4242\n"
    (cap.path / "cpu.stat").write_text(
        "nr_periods 50\nnr_throttled 40\nthrottled_time 2500000000\n"
    )
    assert cap.throttled() == {"periods": 50, "throttled_periods": 40, "throttled_s": 2.5}


def test_a_v2_hierarchy_enables_the_cpu_controller_and_writes_cpu_max(tmp_path):
    root = tmp_path / "unified"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory\n")
    (root / "cgroup.subtree_control").write_text("\n")
    controller = find_cpu_controller((("v2", root), ("v1", _v1_tree(tmp_path))), group="bench")
    assert controller.version == "v2"
    assert (root / "cgroup.subtree_control").read_text() == "+cpu\n"
    assert (controller.root / "cgroup.subtree_control").read_text() == "+cpu\n"
    cap = controller.create("r1", 0.25)
    assert (cap.path / "cpu.max").read_text() == "25000 100000\n"
    (cap.path / "cpu.stat").write_text("nr_periods 3\nnr_throttled 1\nthrottled_usec 500000\n")
    assert cap.throttled()["throttled_s"] == 0.5


def test_a_v2_hierarchy_without_the_cpu_controller_falls_back_to_v1(tmp_path):
    root = tmp_path / "unified"
    root.mkdir()
    (root / "cgroup.controllers").write_text("\n")  # cpu bound to v1, as on hybrid hosts
    controller = find_cpu_controller((("v2", root), ("v1", _v1_tree(tmp_path))), group="b")
    assert controller.version == "v1"


def test_no_writable_controller_is_a_clear_error_naming_what_was_tried(tmp_path):
    with pytest.raises(CgroupError, match=r"no writable cgroup CPU controller.*missing"):
        find_cpu_controller((("v2", tmp_path / "missing"), ("v1", tmp_path / "missing-v1")))


def test_efficiency_is_the_rate_per_replica_against_one_replicas():
    assert efficiencies({1: 100.0, 2: 180.0, 3: 240.0, 6: 420.0}) == {
        1: 1.0,
        2: 0.9,
        3: 0.8,
        6: 0.7,
    }
    # Without a 1-replica run: against the smallest count's rate per replica.
    assert efficiencies({2: 200.0, 4: 300.0}) == {2: 1.0, 4: 0.75}


def test_repeated_rounds_alternate_their_order_so_drift_weighs_on_every_count():
    assert run_order([1, 2, 3], 1) == [1, 2, 3]
    assert run_order([1, 2, 3], 3) == [1, 2, 3, 3, 2, 1, 1, 2, 3]


def test_a_counts_rate_is_the_median_of_its_runs_and_efficiency_uses_the_medians():
    def run(r: int, rate: float, cpu: float) -> dict:
        return {"replicas": r, "store_pods_per_s": rate, "cpu_us_per_pod": {"replica-r1": cpu}}

    runs = [run(1, 600.0, 30.0), run(2, 500.0, 60.0), run(2, 1200.0, 20.0)]
    runs += [run(1, 1000.0, 20.0), run(1, 700.0, 25.0), run(2, 1000.0, 22.0)]
    rows = scaling([1, 2], runs)
    assert [row["pods_per_s"] for row in rows] == [700.0, 1000.0]
    assert [row["efficiency"] for row in rows] == [1.0, round(1000 / (2 * 700), 3)]
    assert rows[1]["runs_pods_per_s"] == [500.0, 1200.0, 1000.0]
    assert [row["replica_cpu_us_per_pod"] for row in rows] == [25.0, 22.0]


def test_the_plot_is_written_with_the_ideal_line(tmp_path):
    pytest.importorskip("matplotlib")
    path = plot_scaling({1: 100.0, 2: 190.0, 3: 260.0}, 0.02, tmp_path / "scale.png")
    assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = plot_scaling({1: 100.0, 2: 190.0}, 0.02, tmp_path / "scale.svg")
    assert svg is not None and b"<svg" in svg.read_bytes()[:500]


def test_runs_that_would_not_fit_the_preloaded_cluster_are_refused():
    # 1,000 nodes of ~30 cores filled to 20%: ~24,000 cores free; pods ask ~2.05.
    assert runs_shortfall(1000, 0.2, 5000, [1, 2, 3, 6]) is None
    short = runs_shortfall(1000, 0.2, 30000, [6])
    assert short is not None and "30300 pods" in short and "24,000" in short
    # the warm-up wave of the largest count is counted too
    assert runs_shortfall(10, 0.0, 90, [1]) is None
    assert runs_shortfall(10, 0.0, 90, [2]) is not None


def test_bench_scale_refuses_more_pods_than_the_cluster_has_room_for():
    from click.testing import CliRunner

    from esched.services.cli import cli

    result = CliRunner().invoke(cli, ["bench", "scale", "--replicas", "6", "--pods", "30000"])
    assert result.exit_code == 2 and "--pods" in result.output and "free on 1000" in result.output


def test_bench_scale_refuses_bad_replica_counts():
    result = subprocess.run(
        [str(Path(sys.executable).with_name("esched")), "bench", "scale", "--replicas", "0,2"],
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 2 and b"--replicas" in result.stderr


@pytest.mark.scale
@pytest.mark.kafka
@pytest.mark.postgres
def test_bench_scale_reports_throughput_and_efficiency_per_replica_count(
    pg_server: str, dev_broker, tmp_path
) -> None:
    try:
        find_cpu_controller(group="esched-bench-probe").root.rmdir()
    except CgroupError as exc:
        pytest.skip(str(exc))
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("esched")),
            "bench",
            "scale",
            "--kafka",
            dev_broker.bootstrap,
            "--pg",
            pg_server,
            "--nodes",
            "200",
            "--pods",
            "400",
            "--replicas",
            "1,2",
            "--cpu-per-replica",
            "0.1",
            "--repeat",
            "2",
            "--plot",
            str(tmp_path / "scale.svg"),
            "--logdir",
            str(tmp_path / "logs"),
        ],
        capture_output=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    data = orjson.loads(result.stdout)
    assert [s["replicas"] for s in data["scaling"]] == [1, 2]
    assert all(s["pods_per_s"] > 0 for s in data["scaling"])
    assert data["scaling"][0]["efficiency"] == 1.0
    # Two rounds, the second reversed: each count's rate is the median of its two.
    assert [run["replicas"] for run in data["runs"]] == [1, 2, 2, 1]
    assert all(len(s["runs_pods_per_s"]) == 2 for s in data["scaling"])
    # Each run its own database and topics: a repeat that read the decisions of the run
    # of its count before would end before it began.
    assert all(run["elapsed_s"] > 0 and run["pods_per_s"] > 0 for run in data["runs"])
    for run in data["runs"]:
        assert run["missing"] == 0
        assert len(run["throttled"]) == run["replicas"]  # each replica in a group of its own
    assert (tmp_path / "scale.svg").exists()
