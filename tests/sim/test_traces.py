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
    write(tmp_path / "openb_node_list_all_node.csv", """
sn,cpu_milli,memory_mib,gpu,model
openb-node-0000,32000,262144,0,
openb-node-0001,64000,262144,2,P100
""")
    write(tmp_path / "openb_pod_list_default.csv", """
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
""")
    return tmp_path


def test_openb_units_times_and_quirks(openb_dir: Path):
    tr = load_trace(f"openb:{openb_dir}")
    assert [n.gpus for n in tr.nodes] == [0, 2]
    assert tr.nodes[1].memory_bytes == 262144 * MIB and tr.nodes[1].model == "P100"
    by = {j.name: j for j in tr.jobs}
    assert set(by) == {"openb-pod-0000", "openb-pod-0001", "openb-pod-0002", "openb-pod-0003",
                       "openb-pod-0006"}
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
    write(tmp_path / "philly.csv", """
timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,16,2951.0,6214e9
2017-10-09 06:13:04,10.0,12,10.0,6214e9
2017-10-09 06:13:05,0.0,1,0.0,6214e9
bad,1,1,1,x
,,,,

""")
    write(tmp_path / "revised_machine_list.csv", """
,machineId,number of GPUs
0,m0,8
1,m1,4
2,m2,0
""")
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


def test_itp_needs_nodes_and_dlrm_needs_nodes(tmp_path: Path):
    f = write(tmp_path / "cluster01.csv", """
job_id,submission_time,duration,num_gpu
aaa,100,600,64
bbb,50,700,1
""")
    with pytest.raises(TraceError, match="pass --nodes"):
        load_trace(f"itp:{f}")
    tr = load_trace(f"itp:{f}", "2x8:cpu=32:mem=64,1x4")
    assert [n.gpus for n in tr.nodes] == [8, 8, 4]
    assert tr.nodes[0].cpu_milli == 32_000 and tr.nodes[0].memory_bytes == 64 * GIB
    assert [(j.arrival, j.tasks, j.gpu_milli) for j in tr.jobs] == [(0, 1, 1000), (50, 8, 8000)]
    d = write(tmp_path / "dlrm.csv", """
instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,rdma_limit,memory_request,memory_limit,disk_request,disk_limit,max_instance_per_node,creation_time,scheduled_time,deletion_time
instance_0,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,
instance_1,CN,app_1,4,4,0,0,0,0,8.0,8.0,0,0,-1,475.0000000001,480,1000
""")
    with pytest.raises(TraceError, match="no node table"):
        load_trace(f"dlrm:{d}")
    tr = load_trace(f"dlrm:{d}", "1x8:cpu=96")
    j0, j1 = tr.jobs
    assert (j0.arrival, j0.duration, j0.gpu_milli, j0.cpu_milli) == (0, 1000, 1000, 12000)
    assert (j1.arrival, j1.duration, j1.memory_bytes) == (475, 525, 8 * GIB)
    assert tr.quirks["created_before_trace"] == 1 and tr.quirks["alive_at_trace_end"] == 1
    assert tr.quirks["rdma_request_not_simulated"] == 1
    assert tr.quirks["max_instance_per_node_not_simulated"] == 1


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
