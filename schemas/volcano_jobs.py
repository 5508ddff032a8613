"""Volcano Job admission: the defaults of Volcano's mutating webhook, then the checks
of its validating webhook, as ``kubectl create`` of a ``batch.volcano.sh/v1alpha1``
Job would run them.

A Job is not an event: ``esched publish`` converts it into its PodGroup and pods
(:func:`esched.schemas.manifests.volcano_job_objects`). That conversion is where
Volcano's admission webhooks sit in Kubernetes (before the object exists), so it
runs :func:`default_job` and :func:`validate_job` first, and a Job Volcano refuses
is refused there with Volcano's message (:class:`JobRejected`), instead of becoming
pods that wait forever.

References (volcano-sh/volcano):

- ``pkg/webhooks/admission/jobs/mutate/mutate_job.go``: queue ``default``,
  ``schedulerName: volcano``, ``maxRetry`` 3, task names ``default<i>``, a task's
  ``minAvailable`` = its replicas, the job's ``minAvailable`` = the sum of its tasks'
  ``minAvailable``, ``svc`` / ``ssh`` plugins added for ``tensorflow`` / ``mpi``.
- ``pkg/webhooks/admission/jobs/validate/admit_job.go`` (``validateJobCreate``) and
  ``util.go`` (``validatePolicies``, ``validateIO``, ``topoSort``).

Not checked here: the queue's existence and state (state-dependent: esched judges a
queue's state at the submission's log position in the dispatcher, ``QueueClosing`` /
``QueueClosed`` rejections; a queue not declared yet has Volcano's defaults, since
the log may carry the Queue after its pods), and the pod template as kube's API
server validates it (esched's pod schema checks what scheduling reads).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from esched.schemas.objects import DEFAULT_QUEUE, json_copy

__all__ = [
    "DEFAULT_MAX_RETRY",
    "JOB_PLUGINS",
    "POLICY_ACTIONS",
    "POLICY_EVENTS",
    "JobProblem",
    "JobRejected",
    "default_job",
    "task_dependencies",
    "validate_job",
    "validate_job_update",
]

#: mutate_job.go ``DefaultMaxRetry``.
DEFAULT_MAX_RETRY = 3
DEFAULT_SCHEDULER = "volcano"
#: ``v1alpha1.DefaultTaskSpec``: a task without a name is ``default<index>``.
DEFAULT_TASK_PREFIX = "default"

#: Policy events a user may name (util.go ``policyEventMap``, the ones allowed;
#: ``PodRunning``, ``OutOfSync`` and ``CommandIssued`` are Volcano's own).
POLICY_EVENTS = (
    "*",
    "PodFailed",
    "PodEvicted",
    "PodPending",
    "Unknown",
    "TaskCompleted",
    "TaskFailed",
    "JobUpdated",
)
#: Policy actions a user may name (util.go ``policyActionMap``, the ones allowed).
POLICY_ACTIONS = (
    "AbortJob",
    "RestartJob",
    "RestartTask",
    "RestartPod",
    "TerminateJob",
    "CompleteJob",
    "ResumeJob",
)
_VALID_POLICIES = (
    f" valid events are {list(POLICY_EVENTS)}, valid actions are {list(POLICY_ACTIONS)}"
)
#: Job plugins Volcano's job controller registers (``pkg/controllers/job/plugins``).
JOB_PLUGINS = ("ssh", "env", "svc", "tensorflow", "mpi", "pytorch", "ray", "hcclrank")

# k8s.io/apimachinery validation.IsDNS1123Label / IsQualifiedName.
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_DNS1123_LABEL_MAX = 63
_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
    "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
    "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
#: Task names found to be DNS-1123 labels (of at most 63 characters): the few names
#: of a template's tasks recur in every Job made of it (a lookup, not a match).
_TASK_LABELS: dict[str, None] = {}
_TASK_LABELS_MAX = 4096
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_QUALIFIED_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
    "'123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


class JobProblem:
    """One reason a Job is refused: the dotted ``field`` at fault and Volcano's text."""

    __slots__ = ("field", "message")

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message

    def __repr__(self) -> str:
        return f"JobProblem({self.field!r}, {self.message!r})"


class JobRejected(ValueError):
    """A Volcano Job its admission webhook refuses. ``str()`` is Volcano's message
    (the problems' texts joined as ``validateJobCreate`` joins them); ``problems``
    lists each with its field; ``field`` is the first one's."""

    def __init__(self, job: str, problems: list[JobProblem], where: str = "") -> None:
        self.job = job
        self.problems = problems
        self.field = problems[0].field if problems else None
        self.where = where
        super().__init__(
            (f"{where}: " if where else "")
            + f'admission webhook "validatejob.volcano.sh" denied Job {job}: '
            + " ".join(p.message.strip() for p in problems)
        )


def _int(value: Any, default: int = 0) -> int:
    """An int32 field's value (absent or null: Go's zero value)."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(value)
    return value


def default_job(job: Mapping[str, Any], *, shared: bool = False) -> dict[str, Any]:
    """``job`` with the defaults of Volcano's mutating webhook applied (a new object;
    ``job`` is not changed): ``spec.queue`` ``default``, ``spec.schedulerName``
    ``volcano``, ``spec.maxRetry`` 3 when 0 or absent, each task's ``name``
    (``default<i>``), ``minAvailable`` (its replicas) and ``maxRetry`` (3),
    ``spec.minAvailable`` the sum of the tasks' ``minAvailable`` when 0 or absent, and
    the ``svc`` plugin for ``tensorflow`` / ``mpi``, ``ssh`` for ``mpi``.
    Fields of the wrong type are left for :func:`validate_job` to refuse.

    With ``shared``, only the objects the defaults change are new (the Job, its spec,
    its tasks list and each task a default is set on; the plugins are copied where
    they are set), and a Job no default changes is returned itself; the rest
    (metadata, templates, policies) is ``job``'s own: a result to read, not to keep
    or change (ingest's check, :func:`validate_job` of it, which reads only)."""
    out = job if shared else json_copy(dict(job))
    spec = out.get("spec")
    if not isinstance(spec, dict):
        return dict(out)  # (shared: a new object; else the copy itself)
    # What the webhook sets on the spec, in its order; set at the end, on the copy or
    # (shared) on a new spec, so that a Job it changes nothing of is not copied.
    sets: dict[str, Any] = {}
    if not spec.get("queue"):
        sets["queue"] = DEFAULT_QUEUE
    if not spec.get("schedulerName"):
        sets["schedulerName"] = DEFAULT_SCHEDULER
    if spec.get("maxRetry") in (None, 0):
        sets["maxRetry"] = DEFAULT_MAX_RETRY
    tasks = spec.get("tasks")
    new_tasks: list[Any] | None = None  # (shared) the list, its tasks set on copied
    if isinstance(tasks, list):
        for i, task in enumerate(tasks):
            if not isinstance(task, dict):
                continue
            task_sets: dict[str, Any] = {}
            if not task.get("name"):
                task_sets["name"] = f"{DEFAULT_TASK_PREFIX}{i}"
            if task.get("minAvailable") is None:
                task_sets["minAvailable"] = task.get("replicas") or 0
            if task.get("maxRetry") in (None, 0):
                task_sets["maxRetry"] = DEFAULT_MAX_RETRY
            if not task_sets:
                continue
            if not shared:
                task.update(task_sets)
            else:
                if new_tasks is None:
                    new_tasks = list(tasks)
                new_tasks[i] = {**task, **task_sets}
        if spec.get("minAvailable") in (None, 0):
            total = 0
            for task in tasks if new_tasks is None else new_tasks:
                if not isinstance(task, dict):
                    continue
                value = task.get("minAvailable")
                if isinstance(value, int) and not isinstance(value, bool):
                    total += value
            sets["minAvailable"] = total
    plugins = spec.get("plugins")
    if isinstance(plugins, dict):
        plugins = dict(plugins)
        if ("tensorflow" in plugins or "mpi" in plugins) and "svc" not in plugins:
            plugins["svc"] = []
        if "mpi" in plugins and "ssh" not in plugins:
            plugins["ssh"] = []
        sets["plugins"] = plugins
    if not shared:
        spec.update(sets)
        return out  # type: ignore[return-value]
    if not sets and new_tasks is None:
        return job if type(job) is dict else dict(job)
    spec = {**spec, **sets}
    if new_tasks is not None:
        spec["tasks"] = new_tasks
    return {**job, "spec": spec}


def _policy_events(policy: Mapping[str, Any]) -> list[str]:
    """util.go ``getEventList``: ``events`` then ``event``, duplicates dropped."""
    out: list[str] = []
    events = policy.get("events") or []
    for e in [*events, policy["event"]] if policy.get("event") else events:
        if e not in out:
            out.append(e)
    return out


def _policy_problems(policies: Any, path: str) -> list[JobProblem]:
    """util.go ``validatePolicies``: the first problem of a policy list stops the walk,
    as Volcano's does; ``*`` excludes every other event."""
    if policies is None:
        return []
    if not isinstance(policies, list):
        return [JobProblem(path, f"{path}: must be a list")]
    problems: list[JobProblem] = []
    seen_events: set[str] = set()
    seen_codes: set[int] = set()
    for i, policy in enumerate(policies):
        where = f"{path}[{i}]"
        if not isinstance(policy, dict):
            problems.append(JobProblem(where, f"{where}: must be an object"))
            break
        has_event = bool(policy.get("event")) or bool(policy.get("events"))
        exit_code = policy.get("exitCode")
        if has_event and exit_code is not None:
            problems.append(JobProblem(where, "must not specify event and exitCode simultaneously"))
            break
        if not has_event and exit_code is None:
            problems.append(JobProblem(where, "either event and exitCode should be specified"))
            break
        if has_event:
            stop = False
            for event in _policy_events(policy):
                if event not in POLICY_EVENTS:
                    problems.append(
                        JobProblem(
                            f"{where}.event",
                            f'{path}: Invalid value: "{event}": invalid policy event',
                        )
                    )
                    stop = True
                    break
                action = policy.get("action")
                if action not in POLICY_ACTIONS:
                    problems.append(
                        JobProblem(
                            f"{where}.action",
                            f'{path}: Invalid value: "{action}": invalid policy action',
                        )
                    )
                    stop = True
                    break
                if event in seen_events:
                    problems.append(
                        JobProblem(
                            f"{where}.event", f"duplicate event {event}  across different policy"
                        )
                    )
                    stop = True
                    break
                seen_events.add(event)
            if stop:
                break
        else:
            if isinstance(exit_code, bool) or not isinstance(exit_code, int):
                problems.append(JobProblem(f"{where}.exitCode", "exitCode must be an integer"))
                break
            if exit_code == 0:
                problems.append(JobProblem(f"{where}.exitCode", "0 is not a valid error code"))
                break
            if exit_code in seen_codes:
                problems.append(JobProblem(f"{where}.exitCode", f"duplicate exitCode {exit_code}"))
                break
            seen_codes.add(exit_code)
    if "*" in seen_events and len(seen_events) > 1:
        problems.append(JobProblem(path, "if there's * here, no other policy should be here"))
    return problems


def _volume_problems(volumes: Any) -> list[JobProblem]:
    """util.go ``validateIO``: the first bad volume only."""
    if not isinstance(volumes, list):
        return []
    mounts: set[str] = set()
    for i, volume in enumerate(volumes):
        where = f"spec.volumes[{i}]"
        if not isinstance(volume, dict):
            return [JobProblem(where, f"{where}: must be an object")]
        mount = volume.get("mountPath") or ""
        if not mount:
            return [JobProblem(f"{where}.mountPath", " mountPath is required;")]
        if mount in mounts:
            return [JobProblem(f"{where}.mountPath", f" duplicated mountPath: {mount};")]
        claim, claim_name = volume.get("volumeClaim"), volume.get("volumeClaimName") or ""
        if claim is None and not claim_name:
            return [JobProblem(where, " either VolumeClaim or VolumeClaimName must be specified;")]
        if claim_name and claim is not None:
            return [
                JobProblem(
                    where,
                    "conflict: If you want to use an existing PVC, just specify "
                    "VolumeClaimName.If you want to create a new PVC, you do not need to "
                    "specify VolumeClaimName",
                )
            ]
        mounts.add(mount)
    return []


def task_dependencies(task: Mapping[str, Any]) -> tuple[str, ...]:
    """The tasks a Job's task waits for: the names its ``dependsOn`` lists, in order.

    The one rule of which tasks start with the Job: a task naming none is released at
    the Job's submission (and again at each restart), so attempt 0 of each of its
    replicas is among the pods a marked Job's first submission implies
    (:func:`esched.schemas.manifests.volcano_first_pods`) and its pods may exist from
    the start in the job fold (``TaskState.released`` of :mod:`esched.core.jobs`);
    any other is released once the tasks it names completed (Volcano's
    ``waitDependsOnTaskMeetCondition``)."""
    depends_on = task.get("dependsOn")
    return tuple(depends_on.get("name") or ()) if depends_on else ()


def _is_dag(tasks: list[dict[str, Any]]) -> bool:
    """util.go ``topoSort``: Kahn's algorithm over ``dependsOn.name``; a dependency on
    a task the job does not have never completes, so its dependants make it no DAG."""
    names = [t.get("name") for t in tasks]
    in_degree = {n: 0 for n in names}
    edges: dict[Any, list[Any]] = {}
    for t in tasks:
        for dep in (t.get("dependsOn") or {}).get("name") or []:
            edges.setdefault(dep, []).append(t.get("name"))
            in_degree[t.get("name")] = in_degree.get(t.get("name"), 0) + 1
    ready = [n for n, d in in_degree.items() if d == 0]
    done = 0
    while ready:
        n = ready.pop()
        done += 1
        for m in edges.pop(n, []):
            in_degree[m] -= 1
            if in_degree[m] == 0:
                ready.append(m)
    return done == len(names)


def _name_problems(name: str, what: str) -> list[str]:
    """validation.IsQualifiedName of a pod or job name (no prefix part): empty exactly
    when the name matches ``_QUALIFIED_NAME`` and has at most 63 characters."""
    if not _QUALIFIED_NAME.match(name):
        return [f"create {what} with name {name} validate failed [{_QUALIFIED_NAME_MSG}]"]
    if len(name) > _DNS1123_LABEL_MAX:
        return [
            f"create {what} with name {name} validate failed "
            f"[name part must be no more than {_DNS1123_LABEL_MAX} characters]"
        ]
    return []


def validate_job(job: Mapping[str, Any]) -> list[JobProblem]:
    """The problems Volcano's ``validateJobCreate`` finds in ``job`` (defaulted by
    :func:`default_job` first, as the API server runs the mutating webhook before the
    validating one), in its order; empty when Volcano admits it. The first three
    checks (``minAvailable``, ``maxRetry``, ``ttlSecondsAfterFinished``) and an empty
    task list stop at once, as Volcano's do; the rest accumulate."""
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    name = str(meta.get("name") or "")
    # (an int is _int's answer itself: the call only for anything else)
    min_available = spec.get("minAvailable")
    if type(min_available) is not int:
        try:
            min_available = _int(min_available)
        except TypeError:
            return [JobProblem("spec.minAvailable", "job 'minAvailable' must be an integer")]
    if min_available < 0:
        return [JobProblem("spec.minAvailable", "job 'minAvailable' must be >= 0.")]
    max_retry = spec.get("maxRetry")
    if type(max_retry) is not int:
        try:
            max_retry = _int(max_retry)
        except TypeError:
            return [JobProblem("spec.maxRetry", "'maxRetry' must be an integer")]
    if max_retry < 0:
        return [JobProblem("spec.maxRetry", "'maxRetry' cannot be less than zero.")]
    ttl = spec.get("ttlSecondsAfterFinished")
    if ttl is not None:
        if isinstance(ttl, bool) or not isinstance(ttl, int):
            return [
                JobProblem(
                    "spec.ttlSecondsAfterFinished", "'ttlSecondsAfterFinished' must be an integer"
                )
            ]
        if ttl < 0:
            return [
                JobProblem(
                    "spec.ttlSecondsAfterFinished",
                    "'ttlSecondsAfterFinished' cannot be less than zero.",
                )
            ]
    tasks = spec.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        return [JobProblem("spec.tasks", "No task specified in job spec")]
    problems: list[JobProblem] = []
    seen: set[str] = set()
    total = 0
    has_dependencies = False
    # A qualified job name, then "-", a DNS-1123 label (a task name that passed), "-"
    # and digits is a qualified name too: its pods' names then need only their length
    # checked (the pattern is matched for any other).
    name_qualified = _QUALIFIED_NAME.match(name) is not None
    for i, task in enumerate(tasks):
        # (the field's path, spec.tasks[i], is written only for a problem)
        if not isinstance(task, dict):
            where = f"spec.tasks[{i}]"
            problems.append(JobProblem(where, f"{where}: must be an object"))
            continue
        task_name = str(task.get("name") or "")
        if task.get("dependsOn") is not None:
            has_dependencies = True
        replicas = task.get("replicas")
        if type(replicas) is not int:
            try:
                replicas = _int(replicas)
            except TypeError:
                problems.append(
                    JobProblem(
                        f"spec.tasks[{i}].replicas",
                        f" 'replicas' must be an integer in task: {task_name};",
                    )
                )
                continue
        if replicas < 0:
            problems.append(
                JobProblem(f"spec.tasks[{i}].replicas", f" 'replicas' < 0 in task: {task_name};")
            )
        task_min = task.get("minAvailable")
        if task_min is not None:
            if isinstance(task_min, bool) or not isinstance(task_min, int):
                problems.append(
                    JobProblem(
                        f"spec.tasks[{i}].minAvailable",
                        f" 'minAvailable' must be an integer in task: {task_name};",
                    )
                )
            elif task_min > replicas:
                problems.append(
                    JobProblem(
                        f"spec.tasks[{i}].minAvailable",
                        f" 'minAvailable' is greater than 'replicas' in task: {task_name}, "
                        f"job: {name}",
                    )
                )
        total += replicas
        task_label = False
        if len(task_name) > _DNS1123_LABEL_MAX:
            problems.append(
                JobProblem(
                    f"spec.tasks[{i}].name",
                    f" [must be no more than {_DNS1123_LABEL_MAX} characters];",
                )
            )
        elif task_name in _TASK_LABELS:
            task_label = True
        elif _DNS1123_LABEL.match(task_name):
            task_label = True
            if len(_TASK_LABELS) < _TASK_LABELS_MAX:
                _TASK_LABELS[task_name] = None
        else:
            problems.append(JobProblem(f"spec.tasks[{i}].name", f" [{_DNS1123_LABEL_MSG}];"))
        if task_name in seen:
            problems.append(
                JobProblem(f"spec.tasks[{i}].name", f" duplicated task name {task_name};")
            )
            break  # as Volcano's loop does
        seen.add(task_name)
        policies = task.get("policies")
        if policies is not None:  # (None: _policy_problems finds none)
            for p in _policy_problems(policies, f"spec.tasks[{i}].policies"):
                problems.append(
                    JobProblem(
                        p.field,
                        p.message + _VALID_POLICIES,
                    )
                )
        # jobhelpers.MakePodName: <job>-<task>-<index>, a pod name.
        pod_name = f"{name}-{task_name}-{i}"
        if not (name_qualified and task_label) or len(pod_name) > _DNS1123_LABEL_MAX:
            for text in _name_problems(pod_name, "pod"):
                problems.append(JobProblem(f"spec.tasks[{i}].name", text + ";"))
    if not name_qualified or len(name) > _DNS1123_LABEL_MAX:
        for text in _name_problems(name, "job"):
            problems.append(JobProblem("metadata.name", text))
    if total < min_available:
        problems.append(
            JobProblem(
                "spec.minAvailable",
                "job 'minAvailable' should not be greater than total replicas in tasks;",
            )
        )
    policies = spec.get("policies")
    for p in _policy_problems(policies, "spec.policies") if policies is not None else ():
        problems.append(
            JobProblem(
                p.field,
                p.message + _VALID_POLICIES + ";",
            )
        )
    plugins = spec.get("plugins")
    if isinstance(plugins, dict):
        for plugin in plugins:
            if plugin not in JOB_PLUGINS:
                problems.append(
                    JobProblem(f"spec.plugins.{plugin}", f" unable to find job plugin: {plugin}")
                )
    volumes = spec.get("volumes")
    if volumes is not None:  # (None: _volume_problems finds none)
        problems += _volume_problems(volumes)
    if has_dependencies and not _is_dag([t for t in tasks if isinstance(t, dict)]):
        problems.append(
            JobProblem(
                "spec.tasks",
                "job has dependencies between tasks, but doesn't form a directed acyclic "
                "graph(DAG)",
            )
        )
    return problems


def validate_job_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[JobProblem]:
    """The problems Volcano's ``validateJobUpdate`` (``admit_job.go``) finds in an
    update of Job ``old`` to ``new`` (both defaulted); empty when Volcano admits it.
    Only ``spec.minAvailable``, ``spec.priorityClassName`` and each task's
    ``replicas`` and ``minAvailable`` may change (a scale up or down); the first
    problem stops the check, as Volcano's returns on it."""
    ospec = old.get("spec") or {}
    nspec = new.get("spec") or {}
    ntasks = nspec.get("tasks")
    if not isinstance(ntasks, list):
        return [JobProblem("spec.tasks", "No task specified in job spec")]
    total = 0
    for i, task in enumerate(ntasks):
        where = f"spec.tasks[{i}]"
        if not isinstance(task, dict):
            return [JobProblem(where, f"{where}: must be an object")]
        task_name = str(task.get("name") or "")
        try:
            replicas = _int(task.get("replicas"))
            task_min = None if task.get("minAvailable") is None else _int(task["minAvailable"])
        except TypeError:
            text = f"'replicas' and 'minAvailable' must be integers in task: {task_name}"
            return [JobProblem(where, text)]
        if replicas < 0:
            text = f"'replicas' must be >= 0 in task: {task_name}"
            return [JobProblem(f"{where}.replicas", text)]
        if task_min is not None:
            if task_min < 0:
                return [
                    JobProblem(
                        f"{where}.minAvailable", f"'minAvailable' must be >= 0 in task: {task_name}"
                    )
                ]
            if task_min > replicas:
                return [
                    JobProblem(
                        f"{where}.minAvailable",
                        f"'minAvailable' must be <= 'replicas' in task: {task_name}",
                    )
                ]
        total += replicas
    try:
        min_available = _int(nspec.get("minAvailable"))
    except TypeError:
        return [JobProblem("spec.minAvailable", "job 'minAvailable' must be an integer")]
    if min_available > total:
        return [
            JobProblem(
                "spec.minAvailable", "job 'minAvailable' must not be greater than total replicas"
            )
        ]
    if min_available < 0:
        return [JobProblem("spec.minAvailable", "job 'minAvailable' must be >= 0")]
    otasks = ospec.get("tasks") or []
    if len(otasks) != len(ntasks):
        return [JobProblem("spec.tasks", "job updates may not add or remove tasks")]
    # Every other field of the spec must be as it was.
    same_new = json_copy(dict(nspec))
    same_old = dict(ospec)
    for key in ("minAvailable", "priorityClassName"):
        same_new.pop(key, None)
        same_old.pop(key, None)
    same_new["tasks"] = [
        {k: v for k, v in t.items() if k not in ("replicas", "minAvailable")} for t in ntasks
    ]
    same_old["tasks"] = [
        {k: v for k, v in t.items() if k not in ("replicas", "minAvailable")}
        for t in otasks
        if isinstance(t, dict)
    ]
    if same_new != same_old:
        return [
            JobProblem(
                "spec",
                "job updates may not change fields other than `minAvailable`, "
                "`tasks[*].replicas under spec` and `PriorityClassName`",
            )
        ]
    return []
