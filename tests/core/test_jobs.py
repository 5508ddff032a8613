"""The Volcano Job lifecycle fold (core/jobs.py), case by case after Volcano's job
controller: ``pkg/controllers/job/job_state_test.go`` (each state's ``Execute``),
``pkg/controllers/job/state/{pending,running,restarting,aborting,completing,
terminating,finished}.go``, ``pkg/controllers/job/job_controller_util.go``
(``applyPolicies``) and ``job_controller_actions.go`` (``killPods``' last-retry rule,
``waitDependsOnTaskMeetCondition``) of volcano-sh/volcano, and the seed's examples
(the Volcano Job section: policies, maxRetry, minSuccess, dependsOn)."""

from __future__ import annotations

from typing import Any

import pytest

from esched.core.jobs import JobBook, parse_duration
from esched.schemas import events as ev
from esched.schemas.manifests import volcano_job_objects, volcano_task_pod


def _job(name: str = "j", tasks: list[dict[str, Any]] | None = None, **spec: Any) -> dict:
    tasks = tasks or [{"name": "worker", "replicas": 2}]
    for t in tasks:
        t.setdefault("template", {"spec": {"containers": [{"name": "c", "image": "x"}]}})
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"tasks": tasks, **spec},
    }


class Run:
    """A job's log, folded as it grows; ``controller()`` appends what the job
    controller would (deletes of withdrawn pods, submits of missing ones)."""

    def __init__(self, job: dict) -> None:
        self.book = JobBook()
        self.t = 1000.0
        self.key = "ns/" + job["metadata"]["name"]
        for etype, obj in volcano_job_objects(job):
            self.fold(etype, obj)

    def fold(self, etype: str, data: dict, dt: float = 1.0) -> None:
        self.t += dt
        self.book.apply(etype, data, self.t)

    @property
    def job(self):
        return self.book.jobs[self.key]

    def pod(self, name: str) -> str:
        return f"{self.key}-{name}"

    def bind(self, *names: str) -> None:
        for n in names:
            self.fold(ev.PLACEMENT_COMMITTED, {"bindings": [{"pod": self.pod(n), "node": "n1"}]})

    def succeed(self, *names: str) -> None:
        for n in names:
            self.fold(
                ev.POD_SUCCEEDED, {"metadata": {"namespace": "ns", "name": self.key[3:] + "-" + n}}
            )

    def fail(self, name: str, exit_code: int | None = None) -> None:
        data: dict[str, Any] = {"metadata": {"namespace": "ns", "name": self.key[3:] + "-" + name}}
        if exit_code is not None:
            data["status"] = {
                "containerStatuses": [{"state": {"terminated": {"exitCode": exit_code}}}]
            }
        self.fold(ev.POD_FAILED, data)

    def evict(self, name: str) -> None:
        self.fold(ev.POD_EVICTED, {"pod": self.pod(name), "node": "n1", "reason": "Preempted"})

    def delete(self, name: str) -> None:
        self.fold(
            ev.POD_DELETED, {"metadata": {"namespace": "ns", "name": self.key[3:] + "-" + name}}
        )

    def unschedulable(self, name: str, dt: float = 1.0) -> None:
        self.fold(ev.POD_UNSCHEDULABLE, {"pod": self.pod(name), "reasons": {}, "message": ""}, dt)

    def controller(self) -> tuple[list[str], list[str]]:
        """Fold the controller's deletes and submits; the pods deleted and submitted."""
        job = self.job
        deleted = [p for p, _ in self.book.withdraw(job)]
        for p in deleted:
            self.fold(ev.POD_DELETED, {"metadata": {"namespace": "ns", "name": p[3:]}})
        specs = {t["name"]: t for t in job.job["spec"]["tasks"]}
        submitted = []
        for task, i in self.book.missing(job):
            pod = volcano_task_pod(job.job, specs[task.name], i, attempt=job.retry)
            submitted.append(ev.metadata_key(pod["metadata"]))
            self.fold(ev.POD_SUBMITTED, pod)
        return deleted, submitted

    def phases(self) -> list[str]:
        return [t.phase for t in self.job.history]


def test_pending_until_min_available_bound_then_running():
    """pending.go default action: Running once running+succeeded+failed >= minAvailable;
    before that esched shows Inqueue once a pod is bound (job_state_test.go
    TestPendingState_Execute "Default case With Min Available equal to running pods")."""
    r = Run(_job(tasks=[{"name": "worker", "replicas": 3}], minAvailable=2))
    assert r.job.phase == "Pending"
    r.bind("worker-0")
    assert r.job.phase == "Inqueue"
    r.bind("worker-1")
    assert r.job.phase == "Running"
    assert r.phases() == ["Pending", "Inqueue", "Running"]


def test_running_completes_when_every_pod_succeeded():
    """running.go: all replicas finished and succeeded >= minAvailable: Completed."""
    r = Run(_job())
    r.bind("worker-0", "worker-1")
    r.succeed("worker-0")
    assert r.job.phase == "Running"
    r.succeed("worker-1")
    assert r.job.phase == "Completed"


def test_running_fails_when_a_task_ends_below_its_min_available():
    """running.go: with minAvailable >= the tasks' sum, a task whose succeeded pods are
    fewer than its minAvailable fails the job once every pod finished."""
    r = Run(_job())
    r.bind("worker-0", "worker-1")
    r.succeed("worker-0")
    r.fail("worker-1")
    assert r.job.phase == "Failed"
    assert r.job.history[-1].reason == "TaskMinAvailable"


def test_min_success_completes_early_and_withdraws_the_rest():
    """running.go: succeeded >= minSuccess completes the job at once; finished.go then
    kills the pods still alive (PodRetainPhaseSoft keeps the finished ones)."""
    r = Run(_job(tasks=[{"name": "worker", "replicas": 3}], minAvailable=1, minSuccess=2))
    r.bind("worker-0", "worker-1", "worker-2")
    r.succeed("worker-0", "worker-1")
    assert r.job.phase == "Completed"
    deleted, submitted = r.controller()
    assert deleted == [r.pod("worker-2")]
    assert submitted == []


def test_min_success_not_reached_fails_the_job():
    """running.go: every pod finished with fewer than minSuccess succeeded: Failed."""
    r = Run(_job(tasks=[{"name": "worker", "replicas": 3}], minAvailable=1, minSuccess=3))
    r.bind("worker-0", "worker-1", "worker-2")
    r.succeed("worker-0", "worker-1")
    r.fail("worker-2")
    assert r.job.phase == "Failed"
    assert r.job.history[-1].reason == "MinSuccess"


def test_running_goes_back_to_pending_when_too_many_pods_wait():
    """running.go: pending > replicas - minAvailable: Pending (an evicted pod waits)."""
    r = Run(_job())
    r.bind("worker-0", "worker-1")
    r.evict("worker-0")
    assert r.job.phase == "Pending"


def test_pod_failed_restart_job_resubmits_every_pod_with_the_next_attempt():
    """The seed's "basic retry": PodFailed -> RestartJob. running.go: Restarting,
    retryCount+1, every pod killed (PodRetainPhaseNone); restarting.go: Pending once
    they are gone; SyncJob recreates them at the new version."""
    r = Run(_job(policies=[{"event": "PodFailed", "action": "RestartJob"}], maxRetry=5))
    r.bind("worker-0", "worker-1")
    r.succeed("worker-1")
    r.fail("worker-0")
    assert r.job.phase == "Restarting"
    assert r.job.retry == 1
    deleted, submitted = r.controller()
    assert sorted(deleted) == [r.pod("worker-0"), r.pod("worker-1")]
    assert r.job.phase == "Pending"
    assert sorted(submitted) == [r.pod("worker-0"), r.pod("worker-1")]
    assert {r.job.attempt_of(p) for p in submitted} == {1}
    assert r.phases() == ["Pending", "Inqueue", "Running", "Restarting", "Pending"]


def test_restarts_stop_at_max_retry_and_the_job_fails():
    """restarting.go: retryCount >= maxRetry -> Failed, nothing resubmitted
    (job_state_test.go TestRestartingState_Execute "RetryCount is equal to or greater
    than MaxRetry"); killPods keeps finished pods at the last retry."""
    r = Run(_job(policies=[{"event": "PodFailed", "action": "RestartJob"}], maxRetry=2))
    attempts = []
    for _ in range(2):
        r.bind("worker-0", "worker-1")
        r.fail("worker-0")
        attempts.append(r.job.retry)
        _deleted, submitted = r.controller()
        if r.job.phase == "Failed":
            assert submitted == []
    assert attempts == [1, 2]
    assert r.job.phase == "Failed"
    assert r.job.history[-1].reason == "MaxRetryExceeded"
    assert max(t.attempt for t in r.job.history) == 2


def test_restart_task_kills_only_that_task():
    """The seed's task-level retry: a worker's PodFailed -> RestartTask kills the
    worker task's pods only (KillTarget), Restarting with retryCount+1, then Pending."""
    r = Run(
        _job(
            tasks=[
                {
                    "name": "master",
                    "replicas": 1,
                    "policies": [{"event": "PodFailed", "action": "RestartJob"}],
                },
                {
                    "name": "worker",
                    "replicas": 2,
                    "policies": [{"event": "PodFailed", "action": "RestartTask"}],
                },
            ],
        )
    )
    r.bind("master-0", "worker-0", "worker-1")
    r.fail("worker-1")
    assert (r.job.phase, r.job.retry) == ("Restarting", 1)
    deleted, submitted = r.controller()
    assert sorted(deleted) == [r.pod("worker-0"), r.pod("worker-1")]
    assert sorted(submitted) == [r.pod("worker-0"), r.pod("worker-1")]
    assert r.job.status_of(r.pod("master-0")) == "Running"


def test_restart_pod_kills_only_that_pod():
    """RestartPod: KillTarget of one pod, Restarting, retryCount+1; SyncJob recreates it."""
    r = Run(_job(policies=[{"event": "PodEvicted", "action": "RestartPod"}]))
    r.bind("worker-0", "worker-1")
    r.evict("worker-1")
    deleted, submitted = r.controller()
    assert deleted == [r.pod("worker-1")]
    assert submitted == [r.pod("worker-1")]
    assert r.job.attempt_of(r.pod("worker-1")) == 1
    assert r.job.attempt_of(r.pod("worker-0")) == 0


def test_task_policy_is_chosen_before_the_job_policy():
    """applyPolicies: the task's policies first, then the job's."""
    r = Run(
        _job(
            tasks=[
                {
                    "name": "worker",
                    "replicas": 2,
                    "policies": [{"event": "PodFailed", "action": "AbortJob"}],
                }
            ],
            policies=[{"event": "PodFailed", "action": "RestartJob"}],
        )
    )
    r.bind("worker-0", "worker-1")
    r.fail("worker-0")
    assert r.job.phase == "Aborting"
    assert r.job.retry == 0


def test_abort_keeps_finished_pods_and_ends_aborted():
    """pending.go / running.go AbortJob: KillJob with PodRetainPhaseSoft, Aborting;
    aborting.go: Aborted once no pod is alive (TestAbortingState_Execute)."""
    r = Run(_job(tasks=[{"name": "worker", "replicas": 3}], minAvailable=1,
                 policies=[{"event": "PodFailed", "action": "AbortJob"}]))  # fmt: skip
    r.bind("worker-0", "worker-1", "worker-2")
    r.succeed("worker-0")
    r.fail("worker-1")
    assert r.job.phase == "Aborting"
    deleted, _ = r.controller()
    assert deleted == [r.pod("worker-2")]
    assert r.job.phase == "Aborted"
    assert r.job.status_of(r.pod("worker-0")) == "Succeeded"


def test_task_completed_complete_job():
    """The seed's example: the ps task's TaskCompleted -> CompleteJob: Completing, the
    workers killed, then Completed (completing.go, TestCompletingState_Execute)."""
    r = Run(
        _job(
            tasks=[
                {
                    "name": "ps",
                    "replicas": 1,
                    "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}],
                },
                {"name": "worker", "replicas": 2},
            ],
        )
    )
    r.bind("ps-0", "worker-0", "worker-1")
    r.succeed("ps-0")
    assert r.job.phase == "Completing"
    deleted, _ = r.controller()
    assert sorted(deleted) == [r.pod("worker-0"), r.pod("worker-1")]
    assert r.job.phase == "Completed"


def test_pod_evicted_terminate_job():
    """TerminateJob: Terminating, then Terminated (terminating.go)."""
    r = Run(_job(policies=[{"event": "PodEvicted", "action": "TerminateJob"}]))
    r.bind("worker-0", "worker-1")
    r.evict("worker-0")
    assert r.job.phase == "Terminating"
    r.controller()
    assert r.job.phase == "Terminated"


def test_a_pod_deleted_from_outside_is_pod_evicted():
    """Volcano's deletePod handler raises PodEvicted for a job's pod deleted by
    someone else; the controller's own deletes raise nothing."""
    r = Run(_job(policies=[{"event": "PodEvicted", "action": "AbortJob"}]))
    r.bind("worker-0", "worker-1")
    r.delete("worker-0")
    assert r.job.phase == "Aborting"


def test_any_event_policy_matches_every_event():
    """``*`` (AnyEvent) matches PodFailed too."""
    r = Run(_job(policies=[{"event": "*", "action": "TerminateJob"}]))
    r.bind("worker-0", "worker-1")
    r.fail("worker-1")
    assert r.job.phase == "Terminating"


def test_exit_code_policy():
    """applyPolicies: a policy on exitCode matches the failed pod's first container's
    terminated exit code."""
    r = Run(_job(policies=[{"exitCode": 3, "action": "RestartJob"}]))
    r.bind("worker-0", "worker-1")
    r.fail("worker-0", exit_code=3)
    assert r.job.phase == "Restarting"


def test_pod_pending_timeout_fires_on_the_logs_clock():
    """The seed's "timeout retry": PodPending with timeout 1h -> AbortJob. The timeout
    counts from the pod's first unschedulable report, on event time: nothing at
    59 min, the action when an event at or past 1 h is folded."""
    r = Run(_job(policies=[{"event": "PodPending", "action": "AbortJob", "timeout": "1h"}]))
    r.unschedulable("worker-0")
    r.unschedulable("worker-0", dt=3540)  # a second report does not restart the clock
    assert r.job.phase == "Pending"
    r.fold(ev.JOB_TIMER, {"job": r.key, "due": ""}, dt=59)
    assert r.job.phase == "Pending"
    r.fold(ev.JOB_TIMER, {"job": r.key, "due": ""}, dt=1)
    assert r.job.phase == "Aborting"
    assert r.job.history[-1].reason == "PodPending"


def test_pod_pending_timeout_is_cancelled_by_a_binding():
    """PodRunning cancels the delayed PodPending action."""
    r = Run(_job(policies=[{"event": "PodPending", "action": "AbortJob", "timeout": "10m"}]))
    r.unschedulable("worker-0")
    r.bind("worker-0", "worker-1")
    r.fold(ev.JOB_TIMER, {"job": r.key, "due": ""}, dt=3600)
    assert r.job.phase == "Running"


def test_pod_pending_without_timeout_is_no_policy():
    """applyPolicies: PodPending needs a timeout (shouldConfigureTimeout)."""
    r = Run(_job(policies=[{"event": "PodPending", "action": "AbortJob"}]))
    r.unschedulable("worker-0")
    r.fold(ev.JOB_TIMER, {"job": r.key, "due": ""}, dt=10**6)
    assert r.job.phase == "Pending"


def test_depends_on_releases_a_task_after_its_dependencies_complete():
    """The seed's dependsOn: task-B after task-A, task-C after A and B. Only A's pods
    are published with the Job; B's are submitted once A completed, C's once B did."""
    job = _job(
        "pipe",
        tasks=[
            {"name": "a", "replicas": 1},
            {"name": "b", "replicas": 2, "dependsOn": {"name": ["a"]}},
            {"name": "c", "replicas": 1, "dependsOn": {"name": ["a", "b"]}},
        ],
        minAvailable=1,
    )
    published = [
        obj["metadata"]["name"] for t, obj in volcano_job_objects(job) if t == ev.POD_SUBMITTED
    ]
    assert published == ["pipe-a-0"]
    r = Run(job)
    assert r.controller() == ([], [])
    r.bind("a-0")
    assert r.controller() == ([], [])
    r.succeed("a-0")
    assert r.controller()[1] == [r.pod("b-0"), r.pod("b-1")]
    r.bind("b-0", "b-1")
    r.succeed("b-0")
    assert r.controller()[1] == []
    r.succeed("b-1")
    assert r.controller()[1] == [r.pod("c-0")]
    r.bind("c-0")
    r.succeed("c-0")
    assert r.job.phase == "Completed"


def test_a_failed_dependency_stops_its_dependants_and_fails_the_job():
    """The seed: when a task fails, the tasks depending on it do not start. esched
    then fails the job (Volcano would leave it Running with nothing to run)."""
    r = Run(
        _job(
            "pipe",
            tasks=[
                {"name": "a", "replicas": 1},
                {"name": "b", "replicas": 1, "dependsOn": {"name": ["a"]}},
            ],
            minAvailable=1,
        )
    )
    r.bind("a-0")
    r.fail("a-0")
    assert r.controller()[1] == []
    assert r.job.tasks[1].blocked
    assert r.job.phase == "Failed"
    assert r.job.history[-1].reason == "DependencyFailed"


def test_depends_on_iteration_any_starts_after_one_dependency():
    """waitDependsOnTaskMeetCondition: with ``iteration: any`` and more than one name,
    one completed dependency is enough."""
    r = Run(
        _job(
            "pipe",
            tasks=[
                {"name": "a", "replicas": 1},
                {"name": "b", "replicas": 1},
                {"name": "c", "replicas": 1, "dependsOn": {"name": ["a", "b"], "iteration": "any"}},
            ],
            minAvailable=1,
        )
    )
    r.bind("a-0", "b-0")
    r.succeed("b-0")
    assert r.controller()[1] == [r.pod("c-0")]


def test_restart_job_holds_dependants_back_again():
    """After RestartJob every task with dependsOn waits for its dependencies anew."""
    r = Run(
        _job(
            "pipe",
            tasks=[
                {"name": "a", "replicas": 1},
                {"name": "b", "replicas": 1, "dependsOn": {"name": ["a"]}},
            ],
            minAvailable=1,
            policies=[{"event": "PodFailed", "action": "RestartJob"}],
        )
    )
    r.bind("a-0")
    r.succeed("a-0")
    assert r.controller()[1] == [r.pod("b-0")]
    r.bind("b-0")
    r.fail("b-0")
    deleted, submitted = r.controller()
    assert sorted(deleted) == [r.pod("a-0"), r.pod("b-0")]
    assert submitted == [r.pod("a-0")]


def test_ttl_after_finished_withdraws_the_finished_pods():
    """ttlSecondsAfterFinished: the job's pods (finished ones too) are deleted once the
    log's clock passes finish + ttl."""
    r = Run(_job(ttlSecondsAfterFinished=60))
    r.bind("worker-0", "worker-1")
    r.succeed("worker-0", "worker-1")
    assert r.job.phase == "Completed"
    assert r.controller() == ([], [])
    r.fold(ev.JOB_TIMER, {"job": r.key, "due": ""}, dt=60)
    deleted, _ = r.controller()
    assert sorted(deleted) == [r.pod("worker-0"), r.pod("worker-1")]
    assert r.job.expired


def test_the_same_log_gives_the_same_jobs():
    """The fold is a function of the log: folding its events again (as replay does)
    gives the same transitions, attempts and times."""
    r = Run(_job(policies=[{"event": "PodFailed", "action": "RestartJob"}]))
    log: list[tuple[str, dict, float]] = []
    r.book = JobBook()
    original = r.book.apply

    def record(etype: str, data: Any, time: Any = None) -> None:
        log.append((etype, data, time))
        original(etype, data, time)

    r.book.apply = record  # type: ignore[method-assign]
    for etype, obj in volcano_job_objects(
        _job(policies=[{"event": "PodFailed", "action": "RestartJob"}])
    ):
        r.fold(etype, obj)
    r.bind("worker-0", "worker-1")
    r.fail("worker-0")
    r.controller()
    again = JobBook()
    for etype, data, t in log:
        again.apply(etype, data, t)
    assert again.jobs[r.key].history == r.job.history
    assert again.jobs[r.key].summary() == r.job.summary()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1h", 3600.0), ("90s", 90.0), ("1m30s", 90.0), ("500ms", 0.5), ("x", None)],
)
def test_policy_timeouts_parse_as_go_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("evicted", "succeeded", "failed", "phase"),
    [
        # "running back to pending When pods status pending>(total-minAvailable)":
        # pending 3, running 2 of 5 with minAvailable 3.
        (3, 0, 0, "Pending"),
        # "running back to pending When pending equal to total": all 5 pending.
        (5, 0, 0, "Pending"),
        # "keep running When pods status pending<=(total-minAvailable)": pending 2,
        # running 1, succeeded 1, failed 1.
        (2, 1, 1, "Running"),
    ],
)
def test_running_default_action_cases_of_volcanos_state_test(evicted, succeeded, failed, phase):
    """job_state_test.go TestRunningState_Execute, the Default (SyncJob) cases with
    five replicas and minAvailable 3, the counts reached through pod events."""
    r = Run(_job(tasks=[{"name": "w", "replicas": 5, "minAvailable": 1}], minAvailable=3))
    r.bind(*(f"w-{i}" for i in range(5)))
    assert r.job.phase == "Running"
    for i in range(succeeded):
        r.succeed(f"w-{i}")
    for i in range(succeeded, succeeded + failed):
        r.fail(f"w-{i}")
    for i in range(5 - evicted, 5):
        r.evict(f"w-{i}")
    assert (r.job.pending, r.job.succeeded, r.job.failed) == (evicted, succeeded, failed)
    assert r.job.phase == phase


# ---------------------------------------------------------------------- Unknown


def _gang_job(**spec: Any) -> dict:
    spec.pop("tasks", None)
    return _job(tasks=[{"name": "worker", "replicas": 3}], minAvailable=2, **spec)


def test_running_pods_and_an_unschedulable_one_raise_unknown():
    """session.go getPodGroupPhase ("running and unschedulable is Unknown",
    session_test.go): pods running while another of the job is unschedulable is the
    PodGroup's Unknown phase, and job_controller_handler.go updatePodGroup turns that
    change into the job policy event Unknown (JobUnknownEvent)."""
    r = Run(_gang_job(policies=[{"event": "Unknown", "action": "RestartJob"}]))
    r.bind("worker-0", "worker-1")
    assert r.job.phase == "Running"
    r.unschedulable("worker-2")
    assert r.job.phase == "Restarting"
    assert r.job.history[-1].reason == "Unknown"
    assert r.job.retry == 1
    deleted, _ = r.controller()
    assert sorted(deleted) == [r.pod(f"worker-{i}") for i in range(3)]


def test_unknown_needs_a_running_pod():
    """No pod running: an unschedulable pod leaves the PodGroup Pending, not Unknown
    (session_test.go: Unknown only with running tasks)."""
    r = Run(_gang_job(policies=[{"event": "Unknown", "action": "AbortJob"}]))
    r.unschedulable("worker-0")
    assert r.job.phase == "Pending"
    assert not r.job.unknown


def test_unknown_is_raised_once_per_entry_into_the_state():
    """updatePodGroup acts on a change of the PodGroup's phase only: a second
    unschedulable report while still Unknown raises nothing; once the pending pod is
    placed the state is left, and a later report raises it again. (No policy: a raise
    shows only as the job handed to its controller, ``JobBook.changed``.)"""
    r = Run(_gang_job(tasks=None))
    r.bind("worker-0", "worker-1")
    r.book.changed.clear()
    r.unschedulable("worker-2")
    assert list(r.book.changed) == [r.key] and r.job.unknown
    r.book.changed.clear()
    r.unschedulable("worker-2", dt=30)
    assert not r.book.changed and r.job.unknown
    r.bind("worker-2")
    assert not r.job.unknown and r.job.phase == "Running"
    r.evict("worker-2")
    r.book.changed.clear()
    r.unschedulable("worker-2")
    assert list(r.book.changed) == [r.key] and r.job.unknown


def test_unknown_without_a_policy_only_marks_the_job():
    """No Unknown policy: SyncJob (the job keeps running); replay shows it Unknown."""
    r = Run(_gang_job())
    r.bind("worker-0", "worker-1")
    r.unschedulable("worker-2")
    assert r.job.phase == "Running"
    assert r.job.summary()["unknown"] is True


def test_unknown_is_matched_by_the_any_event_policy_but_not_task_policies():
    """The Unknown request names no task (updatePodGroup): only job-level policies
    apply (applyPolicies), ``*`` among them."""
    tasks = [
        {
            "name": "worker",
            "replicas": 3,
            "policies": [{"event": "Unknown", "action": "TerminateJob"}],
        }
    ]
    r = Run(_job(tasks=tasks, minAvailable=2))
    r.bind("worker-0", "worker-1")
    r.unschedulable("worker-2")
    assert r.job.phase == "Running"
    r2 = Run(_gang_job(policies=[{"event": "*", "action": "AbortJob"}]))
    r2.bind("worker-0", "worker-1")
    r2.unschedulable("worker-2")
    assert r2.job.phase == "Aborting"


def test_a_removed_node_loses_its_pods_as_pod_evicted():
    """A node removed while a job's pods run there: the cluster fold has them Pending
    again; for Volcano they were deleted from outside (the node lifecycle
    controller's eviction), which deletePod reports as PodEvicted."""
    r = Run(_gang_job(policies=[{"event": "PodEvicted", "action": "RestartJob"}]))
    r.bind("worker-0", "worker-1")
    r.fold(ev.NODE_REMOVED, {"metadata": {"name": "other"}})
    assert r.job.phase == "Running"
    r.fold(ev.NODE_REMOVED, {"metadata": {"name": "n1"}})
    assert r.job.phase == "Restarting"
    assert r.job.history[-1].reason == "PodEvicted"


def test_a_removed_node_then_no_room_is_unknown():
    """The lost node's pods cannot be placed again while the others run: Unknown."""
    r = Run(_gang_job(policies=[{"event": "Unknown", "action": "AbortJob"}]))
    r.fold(ev.PLACEMENT_COMMITTED, {"bindings": [{"pod": r.pod("worker-0"), "node": "a"}]})
    r.fold(ev.PLACEMENT_COMMITTED, {"bindings": [{"pod": r.pod("worker-1"), "node": "b"}]})
    r.fold(ev.NODE_REMOVED, {"metadata": {"name": "b"}})
    assert r.job.status_of(r.pod("worker-1")) == "Pending"
    assert r.job.status_of(r.pod("worker-0")) == "Running"
    r.unschedulable("worker-1")
    assert r.job.phase == "Aborting"


# ---------------------------------------------------------------------- JobUpdated


def _republish(r: Run, job: dict) -> None:
    for etype, obj in volcano_job_objects(job):
        if etype == ev.JOB_SUBMITTED:
            r.fold(etype, obj)


def test_scale_up_submits_the_new_pods():
    """A Job published again with more replicas (validateJobUpdate's "scale up"):
    syncJob creates the pods of the new indices."""
    r = Run(_job(tasks=[{"name": "worker", "replicas": 2}]))
    r.bind("worker-0", "worker-1")
    _republish(r, _job(tasks=[{"name": "worker", "replicas": 4}], minAvailable=2))
    assert r.job.total == 4 and r.job.min_available == 2
    assert r.job.updates == 1
    _, submitted = r.controller()
    assert submitted == [r.pod("worker-2"), r.pod("worker-3")]
    assert r.job.phase == "Running"


def test_scale_down_withdraws_the_pods_beyond_the_replicas():
    """syncJob deletes the pods "exceeding desired replicas", whatever their phase."""
    r = Run(_job(tasks=[{"name": "worker", "replicas": 4, "minAvailable": 2}]))
    r.bind("worker-0", "worker-1", "worker-2", "worker-3")
    r.succeed("worker-3")
    _republish(r, _job(tasks=[{"name": "worker", "replicas": 2, "minAvailable": 2}]))
    deleted, submitted = r.controller()
    assert sorted(deleted) == [r.pod("worker-2"), r.pod("worker-3")]
    assert submitted == []
    assert (r.job.running, r.job.succeeded, r.job.total) == (2, 0, 2)
    r.succeed("worker-0", "worker-1")
    assert r.job.phase == "Completed"


def test_job_updated_policy_acts_on_an_update():
    """The seed's JobUpdated event ("Job updated: scale up/down") with a policy:
    its action runs (Volcano accepts the policy; esched raises the event the seed
    describes)."""
    r = Run(_job(policies=[{"event": "JobUpdated", "action": "RestartJob"}]))
    r.bind("worker-0", "worker-1")
    _republish(
        r,
        _job(
            tasks=[{"name": "worker", "replicas": 3}],
            minAvailable=2,
            policies=[{"event": "JobUpdated", "action": "RestartJob"}],
        ),
    )
    assert r.job.phase == "Restarting"
    assert r.job.history[-1].reason == "JobUpdated"
    deleted, submitted = r.controller()
    assert sorted(deleted) == [r.pod("worker-0"), r.pod("worker-1")]
    assert r.job.phase == "Pending"
    assert sorted(submitted) == [r.pod(f"worker-{i}") for i in range(3)]
    assert {r.job.attempt_of(p) for p in submitted} == {1}


def test_an_update_changing_other_fields_is_refused_with_volcanos_reason():
    """validateJobUpdate ("invalid mutate job's spec other than minAvailable"): the
    job keeps its spec; the refusal is recorded, not silent."""
    r = Run(_job())
    r.bind("worker-0", "worker-1")
    _republish(r, _job(queue="other"))
    assert r.job.total == 2 and r.job.updates == 0
    assert "may not change fields other than" in r.job.summary()["updateRefused"]
    assert r.book.anomalies["job_update_refused"] == 1
    assert r.job.phase == "Running"


def test_the_same_job_published_again_is_no_update():
    r = Run(_job())
    _republish(r, _job())
    assert r.job.updates == 0
    assert r.book.anomalies == {"job_resubmitted_active": 1}


def test_a_finished_job_published_again_changed_runs_nothing_again():
    """A Completed job applied again with more replicas: validateJobUpdate accepts
    the change, and the finished state acts on nothing (state/finished.go's
    Execute), so no pod of it runs again; the same spec again is no update."""
    r = Run(_job(tasks=[{"name": "worker", "replicas": 2}]))
    r.bind("worker-0", "worker-1")
    r.succeed("worker-0", "worker-1")
    assert r.job.phase == "Completed"
    _republish(r, _job(tasks=[{"name": "worker", "replicas": 3}]))
    assert r.job.updates == 1 and r.job.phase == "Completed"
    assert r.controller() == ([], [])
    assert r.job.status_of(r.pod("worker-0")) == "Succeeded"
    _republish(r, _job(tasks=[{"name": "worker", "replicas": 3}]))
    assert r.job.updates == 1


def _record(r: Run, seq: int) -> None:
    """Fold the controller's ``esched.job.updated`` of transition ``seq``."""
    r.fold(ev.JOB_UPDATED, r.job.history[seq].data())


def test_a_jobs_start_is_implied_and_the_rest_is_to_record():
    """Pending on submission, Inqueue on a binding short of minAvailable and Running at
    minAvailable are implied by the events that caused them: nothing to record; the
    policy's Restarting and the Pending it returns to are."""
    r = Run(
        _job(
            tasks=[{"name": "worker", "replicas": 2}],
            minAvailable=2,
            policies=[{"event": "PodFailed", "action": "RestartJob"}],
        )
    )
    r.controller()
    r.bind("worker-0")
    r.bind("worker-1")
    assert r.phases() == ["Pending", "Inqueue", "Running"]
    assert r.job.unrecorded() == []
    r.fail("worker-0")
    r.controller()
    assert r.phases()[3:] == ["Restarting", "Pending"]
    assert [t.seq for t in r.job.unrecorded()] == [3, 4]
    _record(r, 3)
    _record(r, 4)
    assert r.job.recorded == 5 and r.job.unrecorded() == []


def test_a_log_that_recorded_the_start_folds_with_its_seq_numbers_in_line():
    """A log written when every transition was recorded (Pending, Running too): each
    record moves ``recorded`` to its seq + 1, so the Completed that follows is still
    to record, with its own seq; a record of no decided transition moves nothing."""
    r = Run(_job(tasks=[{"name": "worker", "replicas": 1}]))
    _record(r, 0)
    r.controller()
    r.bind("worker-0")
    _record(r, 1)
    assert r.job.recorded == 2
    r.fold(ev.JOB_UPDATED, {**r.job.history[1].data(), "seq": 7})  # forged: no such seq
    assert r.job.recorded == 2
    r.succeed("worker-0")
    assert [(t.seq, t.phase) for t in r.job.unrecorded()] == [(2, "Completed")]
    _record(r, 2)
    assert r.job.recorded == 3 and r.job.unrecorded() == []
