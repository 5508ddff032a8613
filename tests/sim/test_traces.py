"""Trace loaders on tiny files written here, plus the real openb trace when present."""

from __future__ import annotations

from pathlib import Path

import pytest

from esched.services.sim.traces import (
    GIB,
    MIB,
    TraceError,
    load_trace,
    parse_nodes,
    synthetic,
)

OPENB = Path("/work/shared/traces/alibaba-gpu-v2023-openb")
PHILLY = Path("/work/shared/traces/philly-2017")


def write(path: Path, text: str) -> Path:
    path.write_text(text.lstrip("\n"), encoding="utf-8")
    return path


@pytest.fixture
def openb_dir(tmp_path: Path) -> Path:
    write(
        tmp_path / "openb_node_list_all_node.csv",
        """
sn,cpu_milli,memory_mib,gpu,model
openb-node-0000,32000,262144,0,
openb-node-0001,64000,262144,2,P100
""",
    )
    write(
        tmp_path / "openb_pod_list_default.csv",
        """
name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
openb-pod-0000,12000,16384,1,1000,,LS,Running,0,100,0
openb-pod-0001,6000,12288,1,460,,BE,Running,10,70,20
openb-pod-0002,1000,1024,2,1000,P100|V100M16,Burstable,Succeeded,5,50,5
openb-pod-0003,1000,1024,0,0,,LS,Pending,30,90,
openb-pod-0004,1000,1024,2,500,,LS,Running,1,9,1
openb-pod-0005,1000,1024,1,0,,LS,Running,1,9,1
openb-pod-0006,1000,1024,1,100,,Weird,Running,40,50,40
openb-pod-0008,1000,1024,1,100,,LS,Running,40,40,40
openb-pod-0007,oops,1024,1,100,,LS,Running,1,9,1
""",
    )
    return tmp_path


def test_openb_units_times_and_quirks(openb_dir: Path):
    tr = load_trace(f"openb:{openb_dir}")
    assert [n.gpus for n in tr.nodes] == [0, 2]
    assert tr.nodes[1].memory_bytes == 262144 * MIB and tr.nodes[1].model == "P100"
    by = {j.name: j for j in tr.jobs}
    assert set(by) == {
        "openb-pod-0000",
        "openb-pod-0001",
        "openb-pod-0002",
        "openb-pod-0003",
        "openb-pod-0006",
    }
    assert by["openb-pod-0006"].priority == 0
    p1 = by["openb-pod-0001"]
    # run time = deletion - scheduled; arrival = creation; a share of one GPU
    assert (p1.arrival, p1.duration, p1.gpu_milli, p1.priority) == (10, 50, 460, 0)
    assert p1.memory_bytes == 12288 * MIB and p1.deadline == 70
    p2 = by["openb-pod-0002"]
    assert p2.gpu_milli == 2000 and p2.gpu_models == ("P100", "V100M16") and p2.priority == 100
    p3 = by["openb-pod-0003"]  # never scheduled: run time from creation
    assert (p3.duration, p3.gpu_milli, p3.priority) == (60, 0, 1000)
    assert dict(tr.quirks) == {
        "never_scheduled_in_trace": 1,
        "multi_gpu_share_dropped": 1,
        "gpu_milli_out_of_range_dropped": 1,
        "nonpositive_run_time_dropped": 1,
        "unknown_qos_as_best_effort": 1,
        "pod_row_unreadable": 1,
    }
    assert [j.arrival for j in tr.jobs] == sorted(j.arrival for j in tr.jobs)
    # FGD's target workload: types by count, popularity sums to 1
    types = tr.frag_types(coverage=1.0)
    assert sum(t[4] for t in types) == pytest.approx(1.0)
    assert (12000, 1000, 1, None, 0.2) in types


def test_philly_gangs_and_machines(tmp_path: Path):
    write(
        tmp_path / "philly.csv",
        """
timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,16,2951.0,6214e9
2017-10-09 06:13:04,10.0,12,10.0,6214e9
2017-10-09 06:13:05,0.0,1,0.0,6214e9
bad,1,1,1,x
,,,,

""",
    )
    write(
        tmp_path / "revised_machine_list.csv",
        """
,machineId,number of GPUs
0,m0,8
1,m1,4
2,m2,0
""",
    )
    tr = load_trace(f"philly:{tmp_path}")
    assert [(n.name, n.gpus) for n in tr.nodes] == [("m0", 8), ("m1", 4)]
    gang16, gang12, one = tr.jobs  # by submission time; time zero = first submission
    assert gang16.arrival == 0 and gang16.tasks == 2 and gang16.gpu_milli == 8000
    assert (gang12.arrival, gang12.tasks, gang12.gpu_milli) == (1, 2, 6000)  # 12 = 2 x 6
    assert one.arrival == 48 * 60 + 52 and one.group == "11cb48" and one.tasks == 1
    assert tr.quirks["zero_duration_dropped"] == 1
    assert tr.quirks["row_unreadable"] == 1
    assert tr.quirks["blank_row"] == 1
    assert tr.quirks["gang_uneven_split"] == 1
    assert tr.quirks["machine_without_gpus_skipped"] == 1


def test_itp_needs_nodes(tmp_path: Path):
    f = write(
        tmp_path / "cluster01.csv",
        """
job_id,submission_time,duration,num_gpu
aaa,100,600,64
bbb,50,700,1
""",
    )
    with pytest.raises(TraceError, match="pass --nodes"):
        load_trace(f"itp:{f}")
    tr = load_trace(f"itp:{f}", "2x8:cpu=32:mem=64,1x4")
    assert [n.gpus for n in tr.nodes] == [8, 8, 4]
    assert tr.nodes[0].cpu_milli == 32_000 and tr.nodes[0].memory_bytes == 64 * GIB
    assert [(j.arrival, j.tasks, j.gpu_milli) for j in tr.jobs] == [(0, 1, 1000), (50, 8, 8000)]


DLRM_HEADER = (
    "instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,"
    "rdma_request,rdma_limit,memory_request,memory_limit,disk_request,disk_limit,"
    "max_instance_per_node,creation_time,scheduled_time,deletion_time\n"
)


def test_dlrm_units_roles_times_and_quirks(tmp_path: Path):
    d = write(
        tmp_path / "dlrm.csv",
        DLRM_HEADER
        + """
instance_0,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,
instance_1,CN,app_1,4,4,0,0,0,0,937.5,937.5,0,0,-1,475.00000000000006,480.0000000001,1000
instance_2,CN,app_1,4,4,0,0,1,1,8.0,8.0,0,0,-1,600,660,2044444.0000000002
instance_3,CN,app_1,4,4,0,0,1,1,8.0,8.0,0,0,-1,700,700,700
instance_4,CN,app_1,4,4,1,1,1,1,8.0,8.0,0,0,-1,700,700,900
instance_5,CN,app_1,4.0001,4,0,0,1,1,8.0,8.0,0,0,-1,700,700,900
instance_6,XN,app_1,4,4,0,0,1,1,8.0,8.0,0,0,-1,700,700,900
instance_7,CN,app_2,256,256,0,0,1,1,8.0,8.0,0,0,-1,800,800,
""",
    )
    with pytest.raises(TraceError, match="no node table"):
        load_trace(f"dlrm:{d}")
    with pytest.raises(TraceError, match="CN instances run on nodes without GPUs"):
        load_trace(f"dlrm:{d}", "1x8:cpu=96")
    tr = load_trace(f"dlrm:{d}", "1x8:cpu=96,2x0:cpu=192:mem=1024")
    by = {j.name: j for j in tr.jobs}
    assert set(by) == {"instance-0", "instance-1", "instance-2", "instance-7"}
    i0, i1, i2 = by["instance-0"], by["instance-1"], by["instance-2"]
    # vCPUs -> milli, GiB -> bytes (937.5 GiB is exact), whole GPUs -> milli
    assert (i0.cpu_milli, i0.memory_bytes, i0.gpu_milli, i0.node_kind) == (
        12_000,
        120 * GIB,
        1000,
        "gpu",
    )
    assert (i1.memory_bytes, i1.gpu_milli, i1.node_kind) == (937 * GIB + GIB // 2, 0, "cpu")
    # created before the trace: arrives at 0, alive to the trace's last time (2,044,444)
    assert (i0.arrival, i0.duration, i0.deadline) == (0, 2_044_444, 2_044_444)
    # arrival = creation, run time = deletion - scheduled, withdrawn at deletion
    assert (i1.arrival, i1.duration, i1.deadline) == (475, 520, 1000)
    assert (i2.arrival, i2.duration) == (600, 2_044_444 - 660)
    assert i1.priority == 1000 and i1.group == "app_1"
    assert dict(tr.quirks) == {
        "created_before_trace": 1,
        "alive_at_trace_end": 2,
        "time_rounded": 3,
        "nonpositive_run_time_dropped": 1,  # instance_3: deleted when scheduled
        "role_contradicts_gpu_request_dropped": 1,  # instance_4: a CN asking for a GPU
        "row_unreadable": 1,  # instance_5: 4.0001 vCPU
        "unknown_role_dropped": 1,  # instance_6
        "rdma_request_not_simulated": 4,  # rows read with RDMA (0, 2, 3, 7)
        "disk_request_not_simulated": 1,
        "max_instance_per_node_not_simulated": 1,
        "larger_than_any_node": 1,  # instance_7: 256 vCPUs
    }
    # The roles become node constraints: CN on nodes without GPUs, HN on GPU nodes.
    from esched.services.sim.engine import simulate

    from .test_engine import BEST_FIT

    r = simulate(tr, BEST_FIT, record=True)
    nodes = {
        b["pod"]: b["node"]
        for e in r.events
        if e["type"] == "esched.placement.committed"
        for b in e["data"]["bindings"]
    }
    assert nodes["sim/instance-0"] == "node-00000"
    assert nodes["sim/instance-1"] in ("node-00001", "node-00002")
    assert "sim/instance-7" not in nodes and r.withdrawn == 1  # pending until deleted


DLRM = Path("/work/shared/traces/alibaba-dlrm-v2025")


@pytest.mark.skipif(not DLRM.exists(), reason="DLRM trace not present")
def test_real_dlrm_excerpt(tmp_path: Path):
    # An excerpt of the real file, built here (the data stays where it is): its first
    # 300 rows and every 100th row after, so both roles, rows without times, noisy
    # floats and deletions all occur.
    lines = (DLRM / "disaggregated_DLRM_trace.csv").read_text(encoding="utf-8").splitlines()
    rows = lines[1:301] + lines[301::100]
    f = write(tmp_path / "excerpt.csv", "\n".join([lines[0], *rows]) + "\n")
    tr = load_trace(f"dlrm:{f}", "40x0:cpu=192:mem=1024,20x8:cpu=96:mem=768")
    q = tr.quirks
    assert len(tr.jobs) + q["nonpositive_run_time_dropped"] == len(rows)
    assert "row_unreadable" not in q and "role_contradicts_gpu_request_dropped" not in q
    assert q["rdma_request_not_simulated"] == len(rows)
    assert q["created_before_trace"] > 0 and q["alive_at_trace_end"] > 0
    assert q["time_rounded"] > 0 and "larger_than_any_node" not in q
    assert {j.node_kind for j in tr.jobs} == {"cpu", "gpu"}
    assert all((j.gpu_milli == 1000) == (j.node_kind == "gpu") for j in tr.jobs)
    assert all(j.arrival == int(j.arrival) and j.duration > 0 for j in tr.jobs)


def test_bad_specs():
    with pytest.raises(TraceError, match="KIND:PATH"):
        load_trace("nope:/x")
    with pytest.raises(TraceError, match="does not exist"):
        load_trace("openb:/does/not/exist")
    with pytest.raises(TraceError, match="unknown parameter"):
        load_trace("synthetic:size=3")
    with pytest.raises(TraceError, match="neither a file"):
        parse_nodes("lots")


def test_synthetic_is_seeded():
    a, b, c = synthetic(8, 200, seed=1), synthetic(8, 200, seed=1), synthetic(8, 200, seed=2)
    assert [j.shape for j in a.jobs] == [j.shape for j in b.jobs]
    assert [j.arrival for j in a.jobs] != [j.arrival for j in c.jobs]
    assert all(j.gpu_milli <= 1000 or j.gpu_milli % 1000 == 0 for j in a.jobs)
    assert sum(n.gpus == 0 for n in a.nodes) == 2


@pytest.mark.skipif(not OPENB.exists(), reason="openb trace not present")
def test_real_openb_trace():
    tr = load_trace(f"openb:{OPENB}")
    assert len(tr.nodes) == 1523 and sum(n.gpus for n in tr.nodes) == 6212
    assert len(tr.jobs) + tr.quirks["nonpositive_run_time_dropped"] == 8152
    assert tr.quirks["never_scheduled_in_trace"] == 897
    assert sum(j.phase == "Running" for j in tr.jobs) == 5193
    assert len(tr.frag_types()) >= 20
