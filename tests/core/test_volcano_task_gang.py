"""Volcano's per-task minimum inside a gang (``tasks[].minAvailable``, the PodGroup's
``minTaskMember``): a gang is placed only when each task's minimum is placed, as
Volcano's gang plugin requires (volcano-sh/volcano pkg/scheduler/api/job_info.go
``CheckTaskValid`` / ``CheckTaskReady``: every task with a minimum must have that many
members, checked only when the job's ``minAvailable`` is at least the sum of the task
minimums), on top of the job's ``minAvailable``."""

from __future__ import annotations

from typing import Any

from esched.core import ClusterState, Placer
from esched.core.schedule import PassConfig, SchedulingPass, Target, member_task, task_requirements
from esched.schemas.manifests import events_from_documents
from support.fold import EV, Log, node, pod


def _task(name: str, replicas: int, cpu: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
        },
        **extra,
    }


def _job(*tasks: dict[str, Any], min_available: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"tasks": list(tasks)}
    if min_available is not None:
        spec["minAvailable"] = min_available
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "tf", "namespace": "ns"},
        "spec": spec,
    }


def _fold(job: dict[str, Any], *nodes: dict[str, Any]) -> tuple[ClusterState, Log]:
    st = ClusterState()
    log = Log(st)
    for n in nodes:
        log(EV.NODE_ADDED, n)
    for e in events_from_documents([job], id_prefix="t", job_pods=True):
        log(e["type"], e["data"])
    return st, log


def _placed(st: ClusterState) -> list[str]:
    out = SchedulingPass(st, Placer(st), PassConfig(preemption=False)).run(
        [Target("gang", "ns/tf")]
    )
    return sorted(pod for p in out.placements for pod, _n, _d in p.bindings)


def test_workers_do_not_run_while_the_master_fits_nowhere() -> None:
    # The issue's case: minAvailable 3 is met by workers alone, but the master's task
    # needs its one member: nothing is placed.
    job = _job(
        _task("master", 1, "8"),
        _task("worker", 4, "1", minAvailable=2),
        min_available=3,
    )
    st, _ = _fold(job, node("n1", cpu="4"), node("n2", cpu="4"))
    placer = Placer(st)
    before = placer.used_array().copy()
    out = SchedulingPass(st, placer, PassConfig(preemption=False)).run([Target("gang", "ns/tf")])
    assert out.placements == []
    _t, reasons, message = out.unschedulable["ns/tf-master-0"]
    assert reasons["GangUnschedulable"] == 1
    assert "task master: 0/1" in message
    # The workers the plan had assumed are taken back out of the placer's view.
    assert (placer.used_array() == before).all()


def test_no_preemption_for_workers_while_the_master_fits_nowhere() -> None:
    job = _job(
        _task("master", 1, "8"),
        _task("worker", 2, "2", minAvailable=1),
        min_available=2,
    )
    for task in job["spec"]["tasks"]:
        task["template"]["spec"]["priority"] = 1000  # a band above the victim's
    st, log = _fold(job, node("n1", cpu="4"))
    log(EV.POD_SUBMITTED, pod("low", cpu="4", node_name="n1", priority=0))
    placer = Placer(st)
    before = placer.used_array().copy()
    out = SchedulingPass(st, placer, PassConfig(preemption=True)).run([Target("gang", "ns/tf")])
    assert out.placements == []
    assert (placer.used_array() == before).all()


def test_gang_placed_when_every_task_minimum_fits() -> None:
    job = _job(
        _task("master", 1, "2"),
        _task("worker", 4, "2", minAvailable=2),
        min_available=3,
    )
    # Room for 3 members: the master and two workers (each task's minimum).
    st, _ = _fold(job, node("n1", cpu="4"), node("n2", cpu="2"))
    placed = _placed(st)
    assert "ns/tf-master-0" in placed
    assert len(placed) == 3


def test_job_min_available_above_the_task_minimums_still_counts() -> None:
    # minAvailable 4 with task minimums 1 + 1: four members, the master among them.
    job = _job(
        _task("master", 1, "1"),
        _task("worker", 4, "1", minAvailable=1),
        min_available=4,
    )
    st, _ = _fold(job, node("n1", cpu="3"))
    assert _placed(st) == []
    st, _ = _fold(job, node("n1", cpu="4"))
    placed = _placed(st)
    assert len(placed) == 4 and "ns/tf-master-0" in placed


def test_task_minimums_above_min_available_are_not_checked() -> None:
    # job_info.go CheckTaskValid: "if job minAvailable is less than sum of (task
    # minAvailable), skip this check": tasks a and b default to 2 each (4 > 1), so
    # one member of either is enough, as for any gang of minMember 1.
    job = _job(_task("a", 2, "8"), _task("b", 2, "1"), min_available=1)
    st, _ = _fold(job, node("n1", cpu="3"))
    assert _placed(st) == ["ns/tf-b-0", "ns/tf-b-1"]


def test_member_task_reads_volcanos_pod_names() -> None:
    assert member_task("ns/tf", "ns/tf-worker-3") == ("worker", 3)
    assert member_task("ns/tf", "ns/tf-data-prep-0") == ("data-prep", 0)
    assert member_task("ns/tf", "other/tf-worker-3") is None
    assert member_task("ns/tf", "ns/tf-worker") is None


def test_running_members_count_toward_their_task() -> None:
    pending = ["ns/tf-worker-1", "ns/tf-worker-2"]
    running = ["ns/tf-master-0", "ns/tf-worker-0"]
    assert task_requirements("ns/tf", pending, running, {"master": 1, "worker": 2}) == [
        "ns/tf-worker-1"
    ]
    # A task with fewer members submitted than it needs: not yet plannable.
    assert task_requirements("ns/tf", pending, [], {"master": 1, "worker": 2}) is None


def test_a_one_member_gangs_task_requirements_are_the_general_rules() -> None:
    """A one-pod Job's gang (one task, one member pending, none running) takes
    task_requirements' short path: its answer is the loops', which a running pod of
    another job (counted for no task) makes it take, over members of the task, of
    another task, of another job and misnamed, and minimums 0, 1 and 2."""
    keys = ["ns/tf-w-0", "ns/tf-w-7", "ns/tf-m-0", "ns/other-w-0", "ns/tf-w", "ns/tf-w-x"]
    for key in keys:
        for minimum in (0, 1, 2):
            for task in ("w", "m"):
                short = task_requirements("ns/tf", [key], [], {task: minimum})
                loops = task_requirements("ns/tf", [key], ["ns/else-w-0"], {task: minimum})
                assert short == loops, (key, task, minimum)
    assert task_requirements("ns/tf", ["ns/tf-w-0"], [], {"w": 1}) == ["ns/tf-w-0"]
    assert task_requirements("ns/tf", ["ns/tf-m-0"], [], {"w": 1}) is None


def test_podgroup_without_task_minimums_unchanged() -> None:
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("n1", cpu="2"))
    log(
        EV.PODGROUP_SUBMITTED,
        {"metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 2}},
    )
    for i in range(2):
        log(EV.POD_SUBMITTED, pod(f"g-{i}", cpu="1", gang="g"))
    out = SchedulingPass(st, Placer(st), PassConfig(preemption=False)).run([Target("gang", "ns/g")])
    assert len(out.placements) == 1


def _podgroup_of(min_member: int, min_task: dict[str, int]) -> tuple[ClusterState, Log]:
    # A PodGroup as written by hand (not from a Job: Volcano's webhook defaults a
    # Job's minAvailable 0 to the sum of its tasks'), a master that fits nowhere and
    # a worker that fits.
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("n1", cpu="4"))
    group = {"metadata": {"name": "tf", "namespace": "ns"}, "spec": {"minMember": min_member}}
    group["spec"]["minTaskMember"] = min_task
    log(EV.PODGROUP_SUBMITTED, group)
    log(EV.POD_SUBMITTED, pod("tf-master-0", cpu="8", gang="tf"))
    log(EV.POD_SUBMITTED, pod("tf-worker-0", cpu="1", gang="tf"))
    return st, log


def test_a_podgroup_of_min_member_0_is_no_gang_and_skips_the_task_minimums() -> None:
    # Volcano (pkg/scheduler/api/job_info.go): SetPodGroup takes MinAvailable =
    # pg.Spec.MinMember as it is, Ready() is ReadyTaskNum() >= MinAvailable (true with
    # none), and CheckTaskValid / CheckTaskReady return true when MinAvailable is
    # below the sum of the task minimums. Its allocate tests use such PodGroups
    # (pkg/scheduler/actions/allocate/allocate_test.go "one Job with two Pods on one
    # node": BuildPodGroup("pg1", "c1", "c1", 0, ...), each pod bound on its own).
    st, _ = _podgroup_of(0, {"master": 1})
    assert st.gang_min_member("ns/tf") == 0
    assert st.summary()["gangs"]["ns/tf"]["minMember"] == 0
    # The worker runs though the master fits nowhere.
    assert _placed(st) == ["ns/tf-worker-0"]
    # minMember 1 (the task minimums' sum): the master's task is enforced, nothing runs.
    st, _ = _podgroup_of(1, {"master": 1})
    assert st.gang_min_member("ns/tf") == 1
    assert _placed(st) == []
