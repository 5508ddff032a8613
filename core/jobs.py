"""The Volcano Job lifecycle as a fold of the log: :class:`JobBook`.

A Job enters the log as ``esched.job.submitted`` (the Job object, defaulted and
validated as Volcano's webhooks do); its pods' outcomes (``esched.pod.*``,
``esched.placement.committed``) are folded into the Job's phase with the
transitions of Volcano's job controller (``pkg/controllers/job/state/*.go`` of
volcano-sh/volcano): each state is a pure decision over the job's pod counts and
one action (a policy's, or ``SyncJob``); what it does to pods is not done here but
recorded in the state: pods to withdraw (:attr:`JobState.killing`), pods to submit
(:meth:`JobBook.missing`). The job controller service turns them into events; when
those come back through the log they are folded like any other pod event, so the
same log always gives the same jobs.

Time is the log's: the clock is the newest event ``time`` folded, and a policy
timeout (``PodPending`` with ``timeout``) or ``ttlSecondsAfterFinished`` fires when
an event at or past its deadline is folded (:meth:`JobBook.advance`), so a replay
decides what the live controller decided, at the same point of the log.

**Which transitions the log records.** The fold decides every transition; the job
controller records some as ``esched.job.updated`` (``seq``: the transition's index
in :attr:`JobState.history`) and ``esched audit`` checks each record against the
fold. A job's start (again after a restart too) is not recorded
(:attr:`Transition.implied`): Pending on its submission, Inqueue when a pod binds
short of ``minAvailable``, Running when ``minAvailable`` of its pods run (reasons
``Submitted``, ``Bound``, ``MinAvailable``). Each follows by SyncJob's rule from
the one event that caused it (the Job, a placement), so a record would only
repeat that event: for a one-pod Job, two of its six events. Every other
transition is recorded: those a policy's action drives (Restarting, Aborting,
Completing, Terminating, a timeout's), the Pending a restart or pending pods
bring a job back to, the end of a draining, and how a job finishes (Completed,
Failed). ``esched replay`` shows every transition, implied or not, from the fold.
A log written when every transition was recorded folds and audits the same: a
record only moves :attr:`JobState.recorded` to its ``seq`` + 1.

No I/O here; this module knows event type names and the Job object's fields only.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import orjson

from esched.core.overload import log_seconds
from esched.schemas import events as ev
from esched.schemas.volcano_jobs import task_dependencies, validate_job_update

__all__ = [
    "ACTIVE",
    "ATTEMPT_ANNOTATION",
    "FINISHED",
    "FIRST_TYPES",
    "FOLDED_TYPES",
    "IMPLIED_REASONS",
    "JOB_PHASES",
    "R_ATTEMPT",
    "R_DELETES",
    "R_EPOCH",
    "R_IMPLIED",
    "R_NODE",
    "R_STATUS",
    "R_SUBMITS",
    "R_TASK",
    "R_TIMER",
    "JobBook",
    "JobShape",
    "JobState",
    "TaskShape",
    "TaskState",
    "Transition",
    "fold_jobs",
    "job_key_of_pod",
    "job_shape",
    "parse_duration",
]

PENDING = "Pending"
INQUEUE = "Inqueue"
RUNNING = "Running"
RESTARTING = "Restarting"
COMPLETING = "Completing"
COMPLETED = "Completed"
ABORTING = "Aborting"
ABORTED = "Aborted"
TERMINATING = "Terminating"
TERMINATED = "Terminated"
FAILED = "Failed"
#: Every Job phase (Volcano's ``batch/v1alpha1`` JobPhase values).
JOB_PHASES = (
    PENDING,
    INQUEUE,
    RUNNING,
    RESTARTING,
    COMPLETING,
    COMPLETED,
    ABORTING,
    ABORTED,
    TERMINATING,
    TERMINATED,
    FAILED,
)
#: Phases in which the job's pods are kept in step with its spec (Volcano's SyncJob).
ACTIVE = frozenset({PENDING, INQUEUE, RUNNING})
#: Phases nothing leaves (Volcano's ``finishedState``).
FINISHED = frozenset({COMPLETED, TERMINATED, FAILED})
# Phases that wait for the pods they withdrew to be gone.
_DRAINING = {ABORTING: ABORTED, COMPLETING: COMPLETED, TERMINATING: TERMINATED}

# Actions (Volcano's bus/v1alpha1 Action); SYNC is no policy's action, the default.
SYNC = "SyncJob"
RESTART_JOB = "RestartJob"
RESTART_TASK = "RestartTask"
RESTART_POD = "RestartPod"
ABORT_JOB = "AbortJob"
COMPLETE_JOB = "CompleteJob"
TERMINATE_JOB = "TerminateJob"
RESUME_JOB = "ResumeJob"

#: The pod annotation of the job's attempt (retry count) a pod was submitted at; the
#: name of Volcano's ``volcano.sh/job-version`` annotation, whose role it plays.
ATTEMPT_ANNOTATION = "volcano.sh/job-version"
_JOB_NAME = "volcano.sh/job-name"
_TASK_SPEC = "volcano.sh/task-spec"

# Pod statuses inside a job (not the cluster fold's phases: GONE is a deleted pod).
P_PENDING, P_RUNNING, P_SUCCEEDED, P_FAILED, P_GONE = range(5)
#: The fields of a pod's record in :attr:`JobState.pods`, by index: its task's index
#: in :attr:`JobState.tasks`; its status (``P_PENDING`` ... ``P_GONE``); the attempt it
#: was last submitted at; its submissions and deletions so far (the controller's next
#: event ids); its epoch, its turns at Pending; the epoch its PodPending timer is set
#: for (-1: none); the node it runs on; implied: the Job's submission implied it
#: (:meth:`JobBook._first_pods`) and nothing happened to it since. (A list: the fold
#: makes one per pod and reads it on every event of the pod, and a list literal
#: costs a fraction of an object's ``__init__``.)
R_TASK, R_STATUS, R_ATTEMPT, R_SUBMITS, R_DELETES, R_EPOCH, R_TIMER, R_NODE, R_IMPLIED = range(9)
_STATUS_NAMES = ("Pending", "Running", "Succeeded", "Failed", "Deleted")

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: Any) -> float | None:
    """A Go ``time.Duration`` string (``1h``, ``90s``, ``1m30s``; a policy's
    ``timeout``) in seconds; None when absent or not a duration."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str) or not text:
        return None
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    return total if pos == len(text) else None


def job_key_of_pod(meta: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(job key, task name)`` of a pod's metadata, from Volcano's
    ``volcano.sh/job-name`` and ``volcano.sh/task-spec`` annotations; None for a pod
    of no Volcano Job."""
    ann = meta.get("annotations")
    if not ann:
        return None
    job = ann.get(_JOB_NAME)
    task = ann.get(_TASK_SPEC)
    if not job or not task:
        return None
    return f"{meta.get('namespace') or ev.DEFAULT_NAMESPACE}/{job}", task


#: Reasons of the transitions no ``esched.job.updated`` records (a job's start:
#: Pending on submission, Inqueue on a binding short of minAvailable, Running at
#: minAvailable); see the module's docstring.
IMPLIED_REASONS = frozenset({"Submitted", "Bound", "MinAvailable"})


class Transition(NamedTuple):
    """One change of a job's phase: its sequence number within the job, the phases,
    the retry count after it, why (the policy event or the rule) and the action.
    (A named tuple: the fold makes two per one-pod Job, at about a quarter of a frozen
    dataclass's cost.)"""

    job: str
    seq: int
    phase: str
    previous: str
    attempt: int
    reason: str
    action: str
    time: float

    def data(self) -> dict[str, Any]:
        """The ``data`` of this transition's ``esched.job.updated`` event."""
        return {
            "job": self.job,
            "seq": self.seq,
            "phase": self.phase,
            "previous": self.previous,
            "attempt": self.attempt,
            "reason": self.reason,
            "action": self.action,
        }

    @property
    def implied(self) -> bool:
        """A job's start, which the event that caused it implies: the log holds
        no ``esched.job.updated`` for it (:data:`IMPLIED_REASONS`)."""
        return self.reason in IMPLIED_REASONS


_new_tuple = tuple.__new__
_loads = orjson.loads

# The tables of no policies (read only, shared): most tasks and many Jobs have none.
_NO_POLICIES: tuple[dict[str, tuple[str, float | None]], dict[int, str]] = ({}, {})


def _policies(raw: Any) -> tuple[dict[str, tuple[str, float | None]], dict[int, str]]:
    """A policy list as event -> (action, timeout s) and exit code -> action."""
    if not raw:
        return _NO_POLICIES
    by_event: dict[str, tuple[str, float | None]] = {}
    by_code: dict[int, str] = {}
    for p in raw or ():
        action = p.get("action")
        if not action:
            continue
        timeout = parse_duration(p.get("timeout"))
        events = list(p.get("events") or ())
        if p.get("event"):
            events.append(p["event"])
        for e in events:
            by_event.setdefault(e, (action, timeout))
        code = p.get("exitCode")
        if isinstance(code, int) and not isinstance(code, bool):
            by_code.setdefault(code, action)
    return by_event, by_code


#: A task as :class:`TaskState` is built of it: name, replicas, minAvailable (the
#: replicas when unset), its raw policy list, the tasks it depends on, whether one
#: of them is enough.
TaskShape = tuple[str, int, int, Any, tuple[str, ...], bool]
#: A Job's spec as :class:`JobState` is built of it (:func:`job_shape`): its tasks,
#: minAvailable (None: unset or 0, the tasks' sum), minSuccess, maxRetry (3 when
#: unset or 0), ttlSecondsAfterFinished, its raw policy list.
JobShape = tuple[tuple[TaskShape, ...], int | None, int | None, int, int | None, Any]


def _task_shape(spec: Mapping[str, Any]) -> TaskShape:
    replicas = int(spec.get("replicas") or 0)
    ma = spec.get("minAvailable")
    depends_on = spec.get("dependsOn")
    if depends_on:
        depends = task_dependencies(spec)
        # dependsOn.iteration "any": one completed dependency is enough (Volcano's
        # waitDependsOnTaskMeetCondition, with more than one name).
        any_ = depends_on.get("iteration") == "any" and len(depends) > 1
    else:
        # (task_dependencies' answer, its call spared: most tasks, a Job each in a
        # flow of one-pod Jobs, have no dependsOn)
        depends, any_ = (), False
    return (
        spec["name"],
        replicas,
        replicas if ma is None else int(ma),
        spec.get("policies"),
        depends,
        any_,
    )


def _min_available(ma: Any) -> int | None:
    # A Job spec's minAvailable: unset or 0 means the sum of its tasks'.
    return None if ma in (None, 0) else int(ma)


def job_shape(job: Mapping[str, Any]) -> JobShape:
    """What the job fold reads of a Job (its ``data``) to build its
    :class:`JobState`: a pure function of the Job's ``spec``. The bytes reader
    (``core/_job_row.pyx``, through :func:`esched.core._fold_bytes.job_fold_parts`)
    gives the same of a stored Job's bytes, or declines to."""
    spec = job.get("spec") or {}
    tasks = tuple([_task_shape(t) for t in spec.get("tasks") or ()])
    ms = spec.get("minSuccess")
    ttl = spec.get("ttlSecondsAfterFinished")
    return (
        tasks,
        _min_available(spec.get("minAvailable")),
        None if ms is None else int(ms),
        int(spec.get("maxRetry") or 3),
        None if ttl is None else int(ttl),
        spec.get("policies"),
    )


class TaskState:
    """One task of a job: its spec and its pods' counts in the current attempt."""

    __slots__ = (
        "blocked",
        "by_code",
        "depends",
        "depends_any",
        "index",
        "min_available",
        "n",
        "name",
        "policies",
        "released",
        "replicas",
    )

    def __init__(self, index: int, shape: TaskShape) -> None:
        self.index = index
        self.name, self.replicas, self.min_available, policies, depends, any_ = shape
        # (_policies' answer for none, its call spared: most tasks have none)
        self.policies, self.by_code = _policies(policies) if policies else _NO_POLICIES
        self.depends = depends
        self.depends_any = any_
        # Its pods may exist: from the start when it names no dependency (the one rule,
        # task_dependencies: the first pods a marked Job implies are those tasks').
        self.released = not self.depends
        self.blocked = False  # a dependency failed: never released
        self.n = [0, 0, 0, 0]  # pods pending, running, succeeded, failed

    pending = property(lambda self: self.n[P_PENDING], doc="Pods pending.")
    running = property(lambda self: self.n[P_RUNNING], doc="Pods running.")
    succeeded = property(lambda self: self.n[P_SUCCEEDED], doc="Pods succeeded.")
    failed = property(lambda self: self.n[P_FAILED], doc="Pods failed.")

    def complete(self) -> bool:
        """Its dependants may start: at least ``minAvailable`` pods succeeded."""
        done = self.n[P_SUCCEEDED]
        return (done >= self.min_available and done > 0) or self.replicas == 0

    def failed_for_good(self) -> bool:
        """Too many pods failed for ``minAvailable`` to succeed (esched's TaskFailed)."""
        return self.n[P_FAILED] > self.replicas - self.min_available


class JobState:
    """One Volcano Job in the fold: spec, phase, retry count, pods, pending work."""

    __slots__ = (
        "_job",
        "blocked",
        "by_code",
        "deps",
        "expired",
        "finished_at",
        "history",
        "key",
        "killing",
        "max_retry",
        "min_available",
        "min_success",
        "n",
        "phase",
        "pods",
        "policies",
        "ran",
        "recorded",
        "retry",
        "task_index",
        "task_min_sum",
        "tasks",
        "total",
        "ttl",
        "unknown",
        "update_refused",
        "updates",
        "version",
    )

    def __init__(self, key: str, job: Any, shape: JobShape | None = None) -> None:
        """``job``: the Job (its ``data``), or the stored envelope's bytes, decoded only
        when :attr:`job` is read (``shape`` then given: :func:`job_shape`'s of it)."""
        if shape is None:
            shape = job_shape(job)
        task_shapes, min_available, self.min_success, self.max_retry, self.ttl, policies = shape
        self.key = key
        self._job = job
        # One loop for the tasks, their index and whether any depends on another.
        self.tasks: list[TaskState] = []
        self.task_index: dict[str, TaskState] = {}
        deps = False
        for i, task_shape in enumerate(task_shapes):
            task = TaskState(i, task_shape)
            self.tasks.append(task)
            self.task_index[task.name] = task
            if task.depends:
                deps = True
        self.resize(min_available)
        self.policies, self.by_code = _policies(policies) if policies else _NO_POLICIES
        self.phase = PENDING
        self.ran = False  # Running at least once in this attempt
        self.retry = 0
        self.version = 0  # kills issued (Volcano's status.version)
        # pod key -> its record: [task, status, attempt, submits, deletes, epoch, timer
        # epoch, node, implied], by the indexes R_TASK ... R_IMPLIED
        self.pods: dict[str, list[Any]] = {}
        self.killing: dict[str, None] = {}
        self.n = [0, 0, 0, 0]  # pods pending, running, succeeded, failed
        self.blocked = False  # some task's dependency failed
        self.deps = deps
        self.history: list[Transition] = []
        # History index past the newest esched.job.updated folded (its seq + 1).
        self.recorded = 0
        self.finished_at: float | None = None
        self.expired = False
        # Its PodGroup is Unknown (pods running, another unschedulable): the policy
        # event Unknown is raised once per entry into that state.
        self.unknown = False
        self.updates = 0  # spec updates accepted (JobUpdated)
        self.update_refused: str | None = None  # the last refused update's reason

    def resize(self, min_available: int | None) -> None:
        """Set the replica totals and minAvailable (the spec's, None: unset or 0, the
        tasks' sum), at submission and on update; its tasks' replicas already set."""
        total = mins = 0
        for t in self.tasks:
            total += t.replicas
            mins += t.min_available
        self.total = total
        self.min_available = mins if min_available is None else min_available
        self.task_min_sum = mins

    @property
    def job(self) -> dict[str, Any]:
        """The Job (the ``data`` of its ``esched.job.submitted``, the last accepted
        update's); a Job folded off its stored bytes is decoded on the first read."""
        job = self._job
        if type(job) is bytes:
            job = self._job = _loads(job)["data"]
        return job

    @job.setter
    def job(self, value: dict[str, Any]) -> None:
        self._job = value

    pending = property(lambda self: self.n[P_PENDING], doc="Pods pending.")
    running = property(lambda self: self.n[P_RUNNING], doc="Pods running.")
    succeeded = property(lambda self: self.n[P_SUCCEEDED], doc="Pods succeeded.")
    failed = property(lambda self: self.n[P_FAILED], doc="Pods failed.")

    def pod_name(self, task: TaskState, index: int) -> str:
        """``<ns>/<job>-<task>-<i>``: the key of a task's pod (Volcano's MakePodName)."""
        return f"{self.key}-{task.name}-{index}"

    def status_of(self, pod: str) -> str | None:
        """A pod's status within the job (``Pending`` ... ``Deleted``); None if unknown."""
        rec = self.pods.get(pod)
        return None if rec is None else _STATUS_NAMES[rec[R_STATUS]]

    def attempt_of(self, pod: str) -> int | None:
        """The attempt a pod was last submitted at."""
        rec = self.pods.get(pod)
        return None if rec is None else rec[R_ATTEMPT]

    def unrecorded(self) -> list[Transition]:
        """The transitions the log should record and has no ``esched.job.updated``
        for yet (implied ones never have one)."""
        # (Transition.implied's test inline: a property is a frame per transition.)
        return [t for t in self.history[self.recorded :] if t.reason not in IMPLIED_REASONS]

    def summary(self) -> dict[str, Any]:
        """Phase, attempt and per-task counts, as ``esched replay`` shows them."""
        return {
            "job": self.key,
            "phase": self.phase,
            "attempt": self.retry,
            "maxRetry": self.max_retry,
            "tasks": {
                t.name: {
                    "replicas": t.replicas,
                    "pending": t.pending,
                    "running": t.running,
                    "succeeded": t.succeeded,
                    "failed": t.failed,
                    "released": t.released,
                    **({"blocked": True} if t.blocked else {}),
                }
                for t in self.tasks
            },
            "transitions": len(self.history),
            **({"unknown": True} if self.unknown else {}),
            **({"updates": self.updates} if self.updates else {}),
            **({"updateRefused": self.update_refused} if self.update_refused else {}),
        }


_SUCCEEDED = ev.POD_SUCCEEDED
_PODGROUP = ev.PODGROUP_SUBMITTED
_FAILED = ev.POD_FAILED
_DEFAULT_NS = ev.DEFAULT_NAMESPACE

#: The event types the job fold reads (and, but a PodGroup's, whose ``time`` moves its
#: clock); every reader of the log (the controller, replay, audit, the bench) folds
#: exactly these.
FOLDED_TYPES = frozenset(
    {
        ev.JOB_SUBMITTED,
        ev.JOB_UPDATED,
        ev.JOB_TIMER,
        ev.POD_SUBMITTED,
        ev.PLACEMENT_COMMITTED,
        ev.POD_SUCCEEDED,
        ev.POD_FAILED,
        ev.POD_EVICTED,
        ev.POD_DELETED,
        ev.POD_UNSCHEDULABLE,
        ev.POD_REJECTED,
        ev.NODE_REMOVED,
        ev.PODGROUP_SUBMITTED,
    }
)
#: Of :data:`FOLDED_TYPES`, those the job fold reads before it has a job (the rest
#: concern a job's pods): a Job, and a PodGroup, whose name a Job may take after it.
FIRST_TYPES = frozenset({ev.JOB_SUBMITTED, ev.PODGROUP_SUBMITTED})


def _time(text: Any, _memo: dict[str, float] = {}) -> float | None:  # noqa: B006
    # Events of one batch share their time: parse each distinct string once.
    if not isinstance(text, str):
        return None
    got = _memo.get(text)
    if got is None:
        got = log_seconds(text)
        if got is None:
            return None
        if len(_memo) > 4096:
            _memo.clear()
        _memo[text] = got
    return got


class JobBook:
    """Every Volcano Job of the log and its lifecycle: the fold.

    :meth:`apply` folds one event (type, data, time) of :data:`FOLDED_TYPES` (an
    ``esched.job.timer`` only moves the clock); :attr:`changed` collects the
    keys of jobs whose transitions to record, pods to withdraw or pods to submit may
    have changed since the caller last cleared it (a transition not implied, a kill,
    a task released, a pod deleted, a Job submitted whose first pods it does not
    imply, a Job updated); each job's
    :attr:`JobState.history` holds its transitions.
    """

    def __init__(self) -> None:
        self.jobs: dict[str, JobState] = {}
        self.pod_job: dict[str, JobState] = {}
        # pod -> (its record in its job, the job, the task): one lookup on the hot path
        self._recs: dict[str, tuple[list[Any], JobState, TaskState]] = {}
        self.clock = 0.0
        self.changed: dict[str, None] = {}
        # (deadline, seq, kind, job, pod, epoch); kind "pending" or "ttl"
        self._timers: list[tuple[float, int, str, str, str, int]] = []
        self._seq = 0
        self._last_time: Any = None
        self.anomalies: dict[str, int] = {}
        # node -> pods of jobs bound there (a pod may be listed after it left: checked
        # when the node is removed)
        self._node_pods: dict[str, list[str]] = {}
        # PodGroups declared before a Job of their name: that Job implies no pods
        # (the cluster fold's rule, _fold.job_implies_podgroup).
        self._groups: set[str] = set()

    # ------------------------------------------------------------------ folding

    def apply_event(self, event: Mapping[str, Any]) -> None:
        """Fold one decoded envelope (of any type: those not in :data:`FOLDED_TYPES`
        are skipped, clock included)."""
        etype = event.get("type", "")
        if etype in FOLDED_TYPES:
            self.apply(etype, event.get("data"), event.get("time"), ev.implies_pods(event))

    def apply(self, etype: str, data: Any, time: Any = None, pods: bool = False) -> None:
        """Fold one event: the clock first (firing what falls due), then the event. A
        PodGroup only notes its key, the clock unmoved (it was not folded before its
        Job's pods were implied: a log written then decides the same). ``pods``: the
        event is a Job ingest marked (:func:`esched.schemas.events.implies_pods`), whose
        first submission implies its first pods."""
        if etype == _PODGROUP:
            if type(data) is dict:
                key = ev.metadata_key(data.get("metadata"))
                if key not in self.jobs:
                    self._groups.add(key)
            return
        if time is not None and time != self._last_time:
            self._tick(time)
        if type(data) is not dict:
            return
        if etype == _SUCCEEDED:
            self._outcome(data, P_SUCCEEDED)
        elif etype == _FAILED:
            self._outcome(data, P_FAILED)
        elif etype == ev.PLACEMENT_COMMITTED:
            for b in data.get("bindings") or ():
                self._bound(b.get("pod"), b.get("node"))
        elif etype == ev.POD_SUBMITTED:
            self._submitted(data)
        elif etype == ev.POD_EVICTED:
            self._evicted(data.get("pod"))
        elif etype == ev.POD_DELETED:
            self._deleted(ev.metadata_key(data.get("metadata")))
        elif etype == ev.POD_UNSCHEDULABLE:
            self._unschedulable(data.get("pod"))
        elif etype == ev.POD_REJECTED:
            self._outcome({"pod": data.get("pod")}, P_FAILED)
        elif etype == ev.JOB_SUBMITTED:
            self._job_submitted(ev.metadata_key(data.get("metadata")), data, None, pods)
        elif etype == ev.NODE_REMOVED:
            self._node_removed((data.get("metadata") or {}).get("name"))
        elif etype == ev.JOB_UPDATED:  # the controller's record of a transition
            job = self.jobs.get(str(data.get("job")))
            seq = data.get("seq")
            # A record of a transition the fold has not decided (forged, or out of
            # order) moves nothing; the audit flags it.
            if job is not None and type(seq) is int and job.recorded <= seq < len(job.history):
                job.recorded = seq + 1

    def _tick(self, time: Any) -> None:
        # Events of a batch share their time: each distinct one is looked at once.
        self._last_time = time
        t = time if isinstance(time, float) else _time(time)
        if t is not None and t > self.clock:
            self.advance(t)

    def apply_bindings(self, bindings: Iterable[tuple[str, str | None]], time: Any) -> None:
        """Fold an ``esched.placement.committed`` as :meth:`apply` does, given the
        ``(pod, node)`` of its bindings whose pod is a string (``node`` None unless a
        string): what :func:`esched.core._fold_bytes.job_fold_parts` reads of its
        bytes."""
        if time is not None and time != self._last_time:
            self._tick(time)
        for pod, node in bindings:
            self._bound(pod, node)

    def advance(self, t: float) -> None:
        """Move the log's clock to ``t``, firing the timers due by then."""
        self.clock = t
        timers = self._timers
        while timers and timers[0][0] <= t:
            _due, _s, kind, key, pod, epoch = heapq.heappop(timers)
            job = self.jobs.get(key)
            if job is None:
                continue
            if kind == "ttl":
                if job.phase in FINISHED and not job.expired:
                    job.expired = True
                    self._kill(job, retain_finished=False)
                    self.changed[key] = None
                continue
            rec = job.pods.get(pod)
            if (
                rec is None
                or rec[R_STATUS] != P_PENDING
                or rec[R_EPOCH] != epoch
                or job.phase not in ACTIVE
            ):
                continue
            task = job.tasks[rec[R_TASK]]
            action = self._policy(job, task, "PodPending", timed=True)
            if action is not None:
                self._execute(job, action[0], task, pod, "PodPending")

    def next_timer(self) -> tuple[float, str] | None:
        """(log time, job) of the next timer to fire; None when none is set."""
        return (self._timers[0][0], self._timers[0][3]) if self._timers else None

    def _timer(self, at: float, kind: str, key: str, pod: str, epoch: int) -> None:
        self._seq += 1
        heapq.heappush(self._timers, (at, self._seq, kind, key, pod, epoch))

    def apply_job(
        self, key: str, shape: JobShape, payload: bytes, time: Any, pods: bool = False
    ) -> None:
        """Fold an ``esched.job.submitted`` as :meth:`apply` does, given its stored
        envelope's bytes and what :func:`esched.core._fold_bytes.job_fold_parts` reads
        of them: the Job's key and :func:`job_shape`, and whether ingest marked it
        (``pods``). The Job itself is decoded only when read (:attr:`JobState.job`)."""
        if time is not None and time != self._last_time:
            self._tick(time)
        self._job_submitted(key, payload, shape, pods)

    def _job_submitted(self, key: str, data: Any, shape: JobShape | None, pods: bool) -> None:
        # ``data``: the Job, or its envelope's bytes with its shape (apply_job).
        old = self.jobs.get(key)
        if old is not None:
            if type(data) is bytes:
                data = _loads(data)["data"]
            # The Job applied again, as Volcano sees it: unchanged, nothing; changed,
            # an update (a finished job too: it runs nothing again, as in Volcano,
            # where running a Job again takes deleting it first).
            if (data.get("spec") or {}) == (old.job.get("spec") or {}):
                self._anomaly("job_resubmitted_active")
            else:
                self._job_update(old, data)
            return
        job = JobState(key, data, shape)
        self.jobs[key] = job
        self._transition(job, PENDING, "Submitted", "")
        if pods and key not in self._groups:
            # Its first pods implied: nothing for the controller to submit (a task
            # released later, a transition not implied mark the job then), so not
            # handed to it (a flow of one-pod Jobs asks nothing of it).
            self._first_pods(job)
        else:
            self.changed[key] = None

    def _first_pods(self, job: JobState) -> None:
        """The pods the first submission of a Job ingest marked implies (attempt 0 of
        each replica of the tasks released at submission, as
        :func:`~esched.schemas.manifests.volcano_first_pods` builds them), Pending as
        if submitted, each its first submission (the controller's next one of it is
        ``submit.1``). Not when a PodGroup of its name came first: the cluster fold's
        rule (it implies neither the PodGroup nor the pods then; the controller
        submits them)."""
        pods = job.pods
        recs = self._recs
        pod_job = self.pod_job
        n = job.n
        for task in job.tasks:
            if not task.released or task.replicas <= 0:
                continue
            for i in range(task.replicas):
                key = job.pod_name(task, i)
                # [task, status, attempt, submits, deletes, epoch, timer epoch, node,
                # implied]: R_TASK ... R_IMPLIED
                rec = [task.index, P_PENDING, 0, 1, 0, 1, -1, None, True]
                pods[key] = rec
                pod_job[key] = job
                recs[key] = (rec, job, task)
            task.n[P_PENDING] += task.replicas
            n[P_PENDING] += task.replicas
        self._sync(job)

    def _anomaly(self, what: str) -> None:
        self.anomalies[what] = self.anomalies.get(what, 0) + 1

    def _job_update(self, job: JobState, data: dict[str, Any]) -> None:
        """A Job published again with a changed spec: Volcano's update. Refused
        unless only ``minAvailable``, ``priorityClassName`` and the tasks'
        ``replicas`` / ``minAvailable`` changed (``validateJobUpdate``); accepted, a
        finished job only keeps the new spec (Volcano's finished states act on
        nothing); an active one is resized (a scale up or down) and the policy event
        ``JobUpdated`` raised: its policy's action, else SyncJob (pods beyond a
        task's new replicas withdrawn, new ones submitted)."""
        problems = validate_job_update(job.job, data)
        if problems:
            self._anomaly("job_update_refused")
            job.update_refused = problems[0].message
            self.changed[job.key] = None
            return
        job.update_refused = None
        job.updates += 1
        job.job = data
        if job.phase in FINISHED:
            return
        spec = data.get("spec") or {}
        for t, tspec in zip(job.tasks, spec.get("tasks") or (), strict=False):
            # (a task's replicas and minAvailable as at submission: _task_shape)
            _name, t.replicas, t.min_available, *_ = _task_shape(tspec)
        job.resize(_min_available(spec.get("minAvailable")))
        # Pods of an index the task no longer has: withdrawn whatever their phase
        # (syncJob's "pods exceeding desired replicas").
        limits = {t.index: t.replicas for t in job.tasks}
        prefix = len(job.key) + 1
        for pod, rec in job.pods.items():
            if rec[R_STATUS] == P_GONE:
                continue
            task = job.tasks[rec[R_TASK]]
            index = pod[prefix + len(task.name) + 1 :]
            if index.isdigit() and int(index) >= limits[rec[R_TASK]]:
                job.killing[pod] = None
        self.changed[job.key] = None
        self._job_event(job, "JobUpdated")

    def _job_event(self, job: JobState, event: str) -> None:
        """A policy event of the job as a whole (no task, no pod: Volcano's
        ``Unknown`` from the PodGroup, ``JobUpdated``): the job's policies only."""
        got = None
        if job.phase in ACTIVE:
            got = job.policies.get(event) or job.policies.get("*")
        if got is None:
            self._sync(job)
        else:
            self._execute(job, got[0], None, "", event)

    def _node_removed(self, node: Any) -> None:
        """A node gone: its pods are lost (the cluster fold has them Pending again).
        For Volcano the node's pods are deleted from outside (the node lifecycle
        controller's eviction), which raises PodEvicted."""
        pods = self._node_pods.pop(node, None) if isinstance(node, str) else None
        for pod in pods or ():
            got = self._recs.get(pod)
            if got is None:
                continue
            rec, job, task = got
            if rec[R_STATUS] != P_RUNNING or rec[R_NODE] != node:
                continue
            self._move(job, rec, P_PENDING)
            rec[R_EPOCH] += 1
            rec[R_NODE] = None
            self._event(job, task, pod, "PodEvicted")

    def _pod(self, pod: Any) -> tuple[JobState, list[Any]] | None:
        job = self.pod_job.get(pod) if isinstance(pod, str) else None
        if job is None:
            return None
        return job, job.pods[pod]

    def _move(self, job: JobState, rec: list[Any], status: int) -> None:
        old = rec[R_STATUS]
        if old == status:
            return
        tn = job.tasks[rec[R_TASK]].n
        jn = job.n
        if old < P_GONE:
            tn[old] -= 1
            jn[old] -= 1
        if status < P_GONE:
            tn[status] += 1
            jn[status] += 1
        rec[R_STATUS] = status

    def _submitted(self, data: dict[str, Any]) -> None:
        meta = data.get("metadata") or {}
        got = job_key_of_pod(meta)
        if got is None:
            return
        job = self.jobs.get(got[0])
        if job is None:
            return
        task = job.task_index.get(got[1])
        if task is None:
            return
        key = ev.metadata_key(meta)
        try:
            attempt = int((meta.get("annotations") or {}).get(ATTEMPT_ANNOTATION) or 0)
        except ValueError:
            attempt = 0
        rec = job.pods.get(key)
        if rec is None:
            rec = [task.index, P_GONE, attempt, 0, 0, 0, -1, None, False]
            job.pods[key] = rec
            self.pod_job[key] = job
            self._recs[key] = (rec, job, task)
        elif rec[R_STATUS] == P_RUNNING:
            return  # the cluster fold ignores a running pod's resubmit too
        elif (
            rec[R_IMPLIED]
            and rec[R_SUBMITS] == 1
            and rec[R_EPOCH] == 1
            and rec[R_STATUS] == P_PENDING
            and attempt == 0
        ):
            # A pod the Job implied, submitted before anything else happened to it: in
            # a log written when the job controller recorded the first pods, its
            # record of this one (the cluster fold sets the same pod again).
            rec[R_IMPLIED] = False
            return
        rec[R_ATTEMPT] = attempt
        rec[R_SUBMITS] += 1
        rec[R_EPOCH] += 1
        self._move(job, rec, P_PENDING)
        self._sync(job)

    def _bound(self, pod: Any, node: Any = None) -> None:
        got = self._recs.get(pod) if type(pod) is str else None
        if got is None:
            return
        rec, job, _task = got
        if rec[R_STATUS] != P_PENDING:
            return
        self._move(job, rec, P_RUNNING)
        if isinstance(node, str):
            rec[R_NODE] = node
            nodes = self._node_pods.get(node)
            if nodes is None:
                self._node_pods[node] = [pod]
            else:
                nodes.append(pod)
        if job.unknown and job.n[P_PENDING] == 0:
            job.unknown = False  # nothing left unschedulable: the PodGroup is Running
        self._sync(job)

    def _outcome(self, data: dict[str, Any], status: int) -> None:
        pod = data.get("pod")
        if pod is None:
            meta = data.get("metadata")
            if type(meta) is not dict:
                return
            pod = f"{meta.get('namespace') or _DEFAULT_NS}/{meta.get('name', '')}"
        got = self._recs.get(pod) if type(pod) is str else None
        if got is None:
            return
        rec, job, task = got
        old = rec[R_STATUS]
        if old >= P_SUCCEEDED:
            return
        # _move inlined: this is the fold's hottest path.
        tn, jn = task.n, job.n
        tn[old] -= 1
        jn[old] -= 1
        tn[status] += 1
        jn[status] += 1
        rec[R_STATUS] = status
        phase = job.phase
        if status == P_SUCCEEDED and phase is RUNNING and not job.deps:
            # The bulk of a log: a pod of a running job succeeded. Nothing to decide
            # unless the job may be done (running.go) or the task just completed.
            done = jn[P_SUCCEEDED]
            ms = job.min_success
            if (
                done + jn[P_FAILED] < job.total
                and (ms is None or done < ms)
                and tn[P_SUCCEEDED] < task.replicas
            ):
                return
        elif phase not in ACTIVE:
            self._sync(job)
            return
        action: tuple[str, float | None] | None = None
        reason = ""
        if status == P_FAILED:
            code = _exit_code(data)
            if code is not None:
                name = task.by_code.get(code) or job.by_code.get(code)
                if name is not None:
                    action, reason = (name, None), f"ExitCode {code}"
            if action is None:
                action, reason = self._policy(job, task, "PodFailed"), "PodFailed"
            if action is None and task.failed_for_good():
                action, reason = self._policy(job, task, "TaskFailed"), "TaskFailed"
        elif tn[P_SUCCEEDED] >= task.replicas:
            action, reason = self._policy(job, task, "TaskCompleted"), "TaskCompleted"
        if action is not None:
            self._execute(job, action[0], task, str(pod), reason)
        else:
            if job.deps:
                self._release(job)
            self._sync_active(job)

    def _evicted(self, pod: Any) -> None:
        got = self._pod(pod)
        if got is None or got[1][R_STATUS] != P_RUNNING:
            return
        job, rec = got
        self._move(job, rec, P_PENDING)
        rec[R_EPOCH] += 1
        self._event(job, job.tasks[rec[R_TASK]], str(pod), "PodEvicted")

    def _deleted(self, pod: str) -> None:
        got = self._pod(pod)
        if got is None:
            return
        job, rec = got
        was = rec[R_STATUS]
        rec[R_DELETES] += 1
        self._move(job, rec, P_GONE)
        self.changed[job.key] = None  # a pod of an active job gone: submitted again
        if pod in job.killing:  # withdrawn by the controller
            del job.killing[pod]
            self._sync(job)
        elif was <= P_RUNNING:
            # Deleted from outside while alive: Volcano's deletePod raises PodEvicted.
            self._event(job, job.tasks[rec[R_TASK]], pod, "PodEvicted")
        else:
            self._sync(job)

    def _unschedulable(self, pod: Any) -> None:
        got = self._pod(pod)
        if got is None or got[1][R_STATUS] != P_PENDING:
            return
        job, rec = got
        if job.n[P_RUNNING] == 0:
            job.unknown = False
        elif not job.unknown and job.phase in ACTIVE:
            # Volcano's getPodGroupPhase: pods running and the job unschedulable is
            # the PodGroup's Unknown phase; its change raises JobUnknownEvent.
            job.unknown = True
            self.changed[job.key] = None
            self._job_event(job, "Unknown")
            if job.phase not in ACTIVE:
                return  # the policy's action restarted or ended the job
        if rec[R_TIMER] == rec[R_EPOCH]:  # its timer for this turn at Pending runs already
            return
        policy = self._policy(job, job.tasks[rec[R_TASK]], "PodPending", timed=True)
        if policy is None or policy[1] is None:
            return
        rec[R_TIMER] = rec[R_EPOCH]
        self._timer(self.clock + policy[1], "pending", job.key, pod, rec[R_EPOCH])

    def _event(self, job: JobState, task: TaskState, pod: str, event: str) -> None:
        action = self._policy(job, task, event) if job.phase in ACTIVE else None
        if action is None:
            self._sync(job)
        else:
            self._execute(job, action[0], task, pod, event)

    @staticmethod
    def _policy(
        job: JobState, task: TaskState, event: str, timed: bool = False
    ) -> tuple[str, float | None] | None:
        """Volcano's applyPolicies: the task's policies, then the job's; ``*`` matches
        any event; PodPending only with a timeout."""
        for table in (task.policies, job.policies):
            if not table:
                continue
            got = table.get(event) or table.get("*")
            if got is None:
                continue
            if event == "PodPending" and got[1] is None:
                continue
            return got
        return None

    # ------------------------------------------------------------------ the states

    def _transition(self, job: JobState, phase: str, reason: str, action: str) -> None:
        if phase == job.phase and job.history:
            return
        # tuple.__new__ of its fields in order: the named tuple's own __new__ is a
        # Python function (a frame per transition, two per one-pod Job).
        t: Transition = _new_tuple(Transition, (
            job.key, len(job.history), phase, job.phase if job.history else "", job.retry,
            reason, action, self.clock,
        ))  # fmt: skip
        job.history.append(t)
        job.phase = phase
        job.unknown = False
        if phase == RUNNING:
            job.ran = True
        elif phase == RESTARTING:
            job.ran = False
        if reason not in IMPLIED_REASONS:
            # A transition to record. An implied one between active phases changes
            # no pod to submit or withdraw either: nothing for the controller to do.
            self.changed[job.key] = None
        if phase in FINISHED:
            job.finished_at = self.clock
            self._kill(job, retain_finished=True)
            if job.ttl is not None:
                self._timer(self.clock + job.ttl, "ttl", job.key, "", 0)

    def _kill(self, job: JobState, retain_finished: bool, task: TaskState | None = None) -> None:
        """Volcano's KillJob / KillTarget: mark the job's (or task's) pods to withdraw;
        ``retain_finished`` keeps succeeded and failed ones (PodRetainPhaseSoft)."""
        job.version += 1
        limit = P_SUCCEEDED if retain_finished else P_GONE
        for pod, rec in job.pods.items():
            if rec[R_STATUS] < limit and (task is None or rec[R_TASK] == task.index):
                job.killing[pod] = None
        self.changed[job.key] = None

    def _execute(
        self, job: JobState, action: str, task: TaskState | None, pod: str, reason: str
    ) -> None:
        """One action in the job's current state (state/<phase>.go ``Execute``); a job
        event's (no ``task``) RestartTask withdraws nothing, as Volcano's KillTarget
        of an empty task name."""
        phase = job.phase
        if phase in ACTIVE:
            if action == RESTART_JOB:
                # killPods: only the last retry keeps finished pods.
                self._kill(job, retain_finished=job.retry >= job.max_retry - 1)
                job.retry += 1
                for t in job.tasks:
                    t.released = not t.depends  # (as at submission: task_dependencies)
                    t.blocked = False
                job.blocked = False
                self._transition(job, RESTARTING, reason, action)
            elif action in (RESTART_TASK, RESTART_POD):
                if action == RESTART_TASK and task is not None:
                    self._kill(job, retain_finished=False, task=task)
                elif action == RESTART_TASK:
                    job.version += 1
                else:
                    job.version += 1
                    if pod in job.pods and job.pods[pod][R_STATUS] < P_GONE:
                        job.killing[pod] = None
                        self.changed[job.key] = None
                job.retry += 1
                self._transition(job, RESTARTING, reason, action)
            elif action in (ABORT_JOB, COMPLETE_JOB, TERMINATE_JOB):
                self._kill(job, retain_finished=True)
                target = {ABORT_JOB: ABORTING, COMPLETE_JOB: COMPLETING}.get(action, TERMINATING)
                self._transition(job, target, reason, action)
        elif phase in (ABORTING, ABORTED) and action == RESUME_JOB:
            self._kill(job, retain_finished=True)
            job.retry += 1
            self._transition(job, RESTARTING, reason, action)
        elif phase == RESTARTING and action == RESTART_JOB:
            self._kill(job, retain_finished=False)
        self._sync(job)

    def _sync(self, job: JobState) -> None:
        """The default action (SyncJob) of the job's state: phase from its counts."""
        phase = job.phase
        if phase in ACTIVE:
            if job.deps:  # (_release's own test, spared a call)
                self._release(job)
            self._sync_active(job)
        elif phase == RESTARTING:
            if job.retry >= job.max_retry:
                self._transition(job, FAILED, "MaxRetryExceeded", "")
            elif not job.killing:
                self._transition(job, PENDING, "Restarted", "")
                self._release(job)
                self._sync_active(job)
        elif phase in _DRAINING:
            if not job.killing and job.n[P_PENDING] == 0 and job.n[P_RUNNING] == 0:
                self._transition(job, _DRAINING[phase], "PodsGone", "")

    def _release(self, job: JobState) -> None:
        """dependsOn: a task's pods may be submitted once its dependencies completed;
        a dependency that failed for good blocks its dependants."""
        if not job.deps:
            return
        for t in job.tasks:
            if t.released or t.blocked:
                continue
            complete = failed = 0
            for name in t.depends:
                dep = job.task_index.get(name)
                if dep is None or dep.blocked or dep.failed_for_good():
                    failed += 1
                elif dep.released and dep.complete():
                    complete += 1
            if failed and (not t.depends_any or failed == len(t.depends)):
                t.blocked = job.blocked = True
            elif complete == len(t.depends) or (t.depends_any and complete):
                t.released = True
                self.changed[job.key] = None

    def _sync_active(self, job: JobState) -> None:
        pending, running, succeeded, failed = job.n
        if job.blocked and pending == 0 and running == 0:
            # esched's choice: Volcano would leave such a job Running with nothing left
            # to run; a failed dependency fails the job once its other pods are done.
            self._transition(job, FAILED, "DependencyFailed", "")
            return
        if job.phase != RUNNING:
            if job.min_available <= running + succeeded + failed:
                self._transition(job, RUNNING, "MinAvailable", "")
            elif job.phase == PENDING and not job.ran and running + succeeded + failed > 0:
                # Admitted (a pod bound) but short of minAvailable; a job back from
                # Running waits as Pending, as Volcano's running.go sets it.
                self._transition(job, INQUEUE, "Bound", "")
            if job.phase != RUNNING:
                return
        # running.go, the default action.
        total = job.total
        if total == 0:
            return
        min_success = job.min_success
        if min_success is not None and succeeded >= min_success:
            self._transition(job, COMPLETED, "MinSuccess", "")
            return
        if succeeded + failed == total:
            if job.min_available >= job.task_min_sum:
                for t in job.tasks:
                    if t.n[P_SUCCEEDED] < t.min_available:
                        self._transition(job, FAILED, "TaskMinAvailable", "")
                        return
            if min_success is not None and succeeded < min_success:
                self._transition(job, FAILED, "MinSuccess", "")
            elif succeeded >= job.min_available:
                self._transition(job, COMPLETED, "Succeeded", "")
            else:
                self._transition(job, FAILED, "Failed", "")
            return
        if pending > total - job.min_available:
            self._transition(job, PENDING, "PodsPending", "")

    # ------------------------------------------------------------------ what to do

    def missing(self, job: JobState) -> list[tuple[TaskState, int]]:
        """The pods the job should have and has not, as (task, index): of released
        tasks, in an active phase (never submitted, or gone). Every pod of a Job is
        the controller's to create, as in Volcano: a publisher sends the Job only."""
        if job.phase not in ACTIVE or job.expired:
            return []
        out: list[tuple[TaskState, int]] = []
        pods = job.pods
        for t in job.tasks:
            n = t.n
            if not t.released or n[0] + n[1] + n[2] + n[3] >= t.replicas:
                continue  # every pod of it is there
            if not pods:  # none submitted yet (a new Job): every index
                out.extend([(t, i) for i in range(t.replicas)])
                continue
            for i in range(t.replicas):
                rec = job.pods.get(job.pod_name(t, i))
                if rec is None or rec[R_STATUS] == P_GONE:
                    out.append((t, i))
        return out

    def withdraw(self, job: JobState) -> list[tuple[str, int]]:
        """The pods to delete now, with how many deletes of each the log has (the
        controller's idempotency key)."""
        return [(pod, job.pods[pod][R_DELETES]) for pod in job.killing]

    def submits_of(self, job: JobState, pod: str) -> int:
        """How many submits of ``pod`` the log has (the controller's idempotency key)."""
        rec = job.pods.get(pod)
        return 0 if rec is None else rec[R_SUBMITS]

    def summaries(self) -> list[dict[str, Any]]:
        """Every job's :meth:`JobState.summary`, by key."""
        return [self.jobs[k].summary() for k in sorted(self.jobs)]


def _exit_code(data: Mapping[str, Any]) -> int | None:
    """The first container's terminated exit code of a failed pod's status (as
    Volcano's updatePod reads it), if the event carries one."""
    status = data.get("status")
    if not isinstance(status, dict):
        return None
    for cs in status.get("containerStatuses") or ():
        term = ((cs or {}).get("state") or {}).get("terminated") or {}
        code = term.get("exitCode")
        if isinstance(code, int) and not isinstance(code, bool):
            return code
        break
    return None


def fold_jobs(events: Iterable[Mapping[str, Any]]) -> JobBook:
    """A :class:`JobBook` of decoded envelopes, in order."""
    book = JobBook()
    for e in events:
        book.apply_event(e)
    return book
