"""The Volcano Job controller: the Job lifecycle's fold (:class:`~esched.core.jobs.JobBook`)
made to act.

It follows the log with its own job fold and appends what the fold decided:

* ``esched.job.updated``: each transition of a job's phase but its start
  (Pending on submission, Inqueue, Running at ``minAvailable``: the Job and its
  placement imply them; see :mod:`esched.core.jobs`); the fold decides every
  transition from the log, this records it;
* ``esched.pod.deleted``: the pods a transition withdraws (a restart, an abort, a
  finished job's pods still alive, a job past ``ttlSecondsAfterFinished``);
* ``esched.pod.submitted``: as Volcano's controller, it creates the pods of a Job
  that its submission does not imply (a publisher sends the Job alone, so a Job
  published again never reruns pods that already ran): those of a task whose
  ``dependsOn`` tasks completed, when they have, the pods of a restart again with
  the new attempt number (``volcano.sh/job-version``), and a pod gone that the job
  should have, built from the task's template as
  :func:`esched.schemas.manifests.volcano_task_pod` builds them. The first pods (of
  the tasks without ``dependsOn``, attempt 0) of a Job ingest marked
  (:func:`esched.schemas.events.implies_pods`) are not recorded: its first
  submission implies them, and every fold derives them with the same builder
  (:func:`esched.schemas.manifests.volcano_first_pods`); those of a Job of a log
  written before the marker it creates and checks (``check_task_pod``), as ever;
* ``esched.podgroup.submitted``: a Job's PodGroup again after an accepted update
  (:func:`esched.schemas.manifests.volcano_podgroup`), once the job is active, before
  its pods. Its first PodGroup is not recorded: the Job's submission implies it, and
  every fold of the cluster state derives it with the same builder (a log written
  when the controller recorded it too folds the same);
* ``esched.job.timer``: when a job's deadline (a ``PodPending`` policy's timeout,
  ``ttlSecondsAfterFinished``) passes with no other event, so the log's clock
  reaches it and every replay fires the timeout at the same point.

Every id is deterministic (the job or pod, and how many such events of it the log
has), so a retried append, or a second leader acting on the same log, dedupes.

**Its own lease** (name ``jobs``) rather than inside the dispatcher: the
dispatcher's fold is the cluster state (``ClusterState``) and its job is to wake
replicas; the job controller needs none of it, only the job fold, and what it
appends goes through the log like any producer's events. Apart, each can be
restarted or run alone (``esched jobs``), and a slow job fold never delays
dispatching.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from esched.core._fold_bytes import job_fold_parts
from esched.core.jobs import ACTIVE, FIRST_TYPES, FOLDED_TYPES, JobBook, JobState
from esched.schemas import events as ev
from esched.schemas.manifests import check_task_pod, volcano_podgroup, volcano_task_pod_shared
from esched.schemas.validator import InvalidEvent, compile_validators
from esched.services.faults import append_envelopes
from esched.services.lease import Lease, LocalLease
from esched.services.store.base import EventStore, StoredEvent
from esched.services.store.snapshots import freeze_heap, thaw_heap

__all__ = ["SERVICE", "JobController", "JobsConfig", "JobsTotals", "fold_job_log", "fold_rows"]

log = logging.getLogger(__name__)

SERVICE = "jobs"
SOURCE = "esched/jobs"


@dataclass(slots=True)
class JobsConfig:
    """Tuning of the job controller."""

    #: Seconds between passes when nothing wakes it (timers are checked each pass).
    tick: float = 0.2
    #: Events per read while following the log.
    batch: int = 2000


@dataclass(slots=True)
class JobsTotals:
    """What the controller appended."""

    transitions: int = 0
    deleted: int = 0
    podgroups: int = 0
    submitted: int = 0
    timers: int = 0
    duplicates: int = 0
    invalid_pods: int = 0
    takeovers: int = 0
    extra: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, int]:
        return {
            "transitions": self.transitions,
            "deleted": self.deleted,
            "podgroups": self.podgroups,
            "submitted": self.submitted,
            "timers": self.timers,
            "duplicates": self.duplicates,
            "invalid_pods": self.invalid_pods,
            "takeovers": self.takeovers,
        }


def fold_rows(
    book: JobBook,
    rows: list[StoredEvent],
    own: dict[str, tuple[bytes, dict[str, Any]]] | None = None,
) -> int:
    """Fold stored events into ``book`` (only :data:`FOLDED_TYPES` are read, what
    the fold needs of the common ones off their bytes: ``job_fold_parts``); the last
    position folded. ``own``: envelopes the caller appended, by id, with
    the bytes it appended (taken out as their rows come): a row holding those very
    bytes is folded from the envelope, not decoded again (the decoding of JSON
    bytes is their one value, so the fold is the same)."""
    loads = orjson.loads
    placement = ev.PLACEMENT_COMMITTED
    job = ev.JOB_SUBMITTED
    last = 0
    for r in rows:
        last = r.position
        if r.type in FOLDED_TYPES:
            if not book.jobs and r.type not in FIRST_TYPES:
                continue  # no job yet: nothing to fold, no timer to fire
            mine = own.pop(r.id, None) if own else None
            if mine is not None and mine[0] == r.payload:
                env = mine[1]  # (of FOLDED_TYPES: act keeps no other)
                book.apply(env["type"], env["data"], env["time"], ev.implies_pods(env))
                continue
            # A placement's bindings, a Job's key and shape (the Job decoded only if
            # read), a plain pod's time alone: read off the bytes; anything else (or
            # any doubt) decoded whole.
            parts = job_fold_parts(r.payload)
            if parts is None:
                book.apply_event(loads(r.payload))
            elif parts[0] == placement:
                book.apply_bindings(parts[2], parts[1])
            elif parts[0] == job:
                key, shape, marked = parts[2]
                book.apply_job(key, shape, r.payload, parts[1], marked)
            else:
                book.apply(parts[0], parts[2], parts[1])
    return last


async def fold_job_log(store: EventStore, upto: int | None = None, batch: int = 5000) -> JobBook:
    """The job fold of the log up to position ``upto`` (default: the head)."""
    book = JobBook()
    target = upto if upto is not None else await store.head()
    after = 0
    while after < target:
        rows = await store.read(after, batch, target)
        if not rows:
            break
        after = fold_rows(book, rows)
    return book


class JobController:
    """The job controller: :meth:`start`, :meth:`run`, :meth:`stop`, :meth:`idle`; one
    step at a time, :meth:`follow` and :meth:`act`.

    :param store: the event store (connected, migrated).
    :param lease: its leadership lease (``open_lease(store_url, "jobs")``); default a
        :class:`LocalLease` (one process only).
    """

    def __init__(
        self, store: EventStore, *, lease: Lease | None = None, config: JobsConfig | None = None
    ) -> None:
        self.store = store
        self.lease = lease or LocalLease(SERVICE)
        self.config = config or JobsConfig()
        self.totals = JobsTotals()
        self.book = JobBook()
        self.position = 0
        self.leading = False
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._follow_task: asyncio.Task | None = None
        self._error: BaseException | None = None
        self._sent: set[str] = set()  # ids appended while leading, not yet folded back
        self._pending = False  # something decided but not appended yet
        self._groups: dict[str, int] = {}  # job -> its updates when its PodGroup was sent
        # id -> (bytes, envelope) of what it appended, until read back (fold_rows)
        self._own: dict[str, tuple[bytes, dict[str, Any]]] = {}

    async def start(self) -> None:
        """Nothing to connect (the store is the controller's only peer); the pod
        schema is compiled now, not when the first Job's pods are built."""
        compile_validators()

    async def stop(self) -> None:
        """Stop acting and give the lease up; idempotent."""
        self._stopping.set()
        self._wake.set()

    async def run(self) -> JobsTotals:
        """Lead (wait for the lease), act until :meth:`stop` or a lost lease, then stand
        by again."""
        while not self._stopping.is_set():
            if not await self.lease.wait_unless(self._stopping):
                break
            try:
                await self._lead()
            finally:
                self.leading = False
                await self._stop_following()
                thaw_heap()
                await self.lease.release()
        return self.totals

    async def _stop_following(self) -> None:
        if self._follow_task is not None:
            task, self._follow_task = self._follow_task, None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _lead(self) -> None:
        # A new leader rebuilds the fold from the log: what it must do is a function of
        # the log alone.
        self.book = JobBook()
        self.position = 0
        self._sent.clear()
        self._groups.clear()
        self._own.clear()
        self._error = None
        head = await self.store.head()
        while self.position < head:
            rows = await self.store.read(self.position, self.config.batch)
            if not rows:
                break
            self.position = fold_rows(self.book, rows)
        self.book.changed.update(dict.fromkeys(self.book.jobs))
        # As every follower of the log: the fold built, young collections rare (the
        # book's jobs and pods live on; cyclic GC passes over them cost a one-pod
        # Job's controller work about a third more).
        freeze_heap()
        self._follow_task = asyncio.create_task(self._follow(), name="jobs-follower")
        self.totals.takeovers += 1
        self.leading = True
        log.info(
            "job controller leading at position %d; %d job(s)", self.position, len(self.book.jobs)
        )
        while not self._stopping.is_set():
            if self.lease.lost.is_set():
                log.warning("job controller lost its lease; standing by")
                return
            if self._error is not None:
                raise RuntimeError("job controller fold failed") from self._error
            await self.act()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.config.tick)

    async def _follow(self) -> None:
        try:
            async with self.store.subscribe(self.position, self.config.batch) as sub:
                async for rows in sub:
                    if self.follow(rows):
                        self._wake.set()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            log.exception("job controller follower failed")
            self._error = exc
            self._wake.set()
            raise

    def follow(self, rows: list[StoredEvent]) -> bool:
        """Fold rows read past :attr:`position` (those at or before it are skipped);
        whether the fold now asks something of the controller."""
        if not rows:
            return False
        if rows[0].position <= self.position:  # (rows come in log order)
            rows = [r for r in rows if r.position > self.position]
            if not rows:
                return False
        self.position = fold_rows(self.book, rows, self._own)
        sent = self._sent
        if sent:  # (empty unless it appended: a flow of one-pod Jobs)
            for r in rows:
                sent.discard(r.id)
        return bool(self.book.changed)

    # ------------------------------------------------------------------ acting

    def decide(self) -> list[tuple[dict[str, Any], str]]:
        """The envelopes (with their streams) the fold asks for now, not yet sent."""
        book = self.book
        now = datetime.now(UTC)
        stamp = ev.timestamp(now)
        out: list[tuple[dict[str, Any], str]] = []
        for key in list(book.changed):
            job = book.jobs.get(key)
            if job is not None:
                out.extend(self._job_envelopes(job, stamp))
        book.changed.clear()
        timer = book.next_timer()
        if timer is not None and timer[0] <= now.timestamp():
            due, key = timer
            event_id = f"jobs.{key}.timer.{due!r}"
            if event_id not in self._sent:
                # Its time must not fall short of the deadline when read back: the
                # deadline rounded up to the microsecond an envelope's time holds.
                at = max(now, datetime.fromtimestamp(math.ceil(due * 1e6) / 1e6, UTC))
                data = {"job": key, "due": ev.timestamp(datetime.fromtimestamp(due, UTC))}
                env = ev.envelope(ev.JOB_TIMER, SOURCE, data, id=event_id, time=ev.timestamp(at))
                out.append((env, ev.stream_name(ev.JOB, data["job"])))
        return [(e, s) for e, s in out if e["id"] not in self._sent]

    def _job_envelopes(self, job: JobState, stamp: str) -> list[tuple[dict[str, Any], str]]:
        book = self.book
        out: list[tuple[dict[str, Any], str]] = []
        stream = ev.stream_name(ev.JOB, job.key)
        for t in job.unrecorded():
            env = ev.envelope(
                ev.JOB_UPDATED, SOURCE, t.data(), id=f"jobs.{job.key}.t{t.seq}", time=stamp
            )
            out.append((env, stream))
        # (No list built when nothing is withdrawn: a new Job, the bulk.)
        for gone, deletes in book.withdraw(job) if job.killing else ():
            ns, name = ev.split_key(gone)
            data = {"metadata": {"name": name, "namespace": ns}}
            env = ev.envelope(
                ev.POD_DELETED, SOURCE, data, id=f"jobs.{gone}.delete.{deletes}", time=stamp
            )
            out.append((env, ev.stream_name(ev.POD, gone)))
        missing = book.missing(job)
        if job.updates and job.phase in ACTIVE and self._groups.get(job.key) != job.updates:
            # The PodGroup again after an accepted update, before the pods (the gang
            # they join). The first one is implied by the Job's submission: every fold
            # derives it (volcano_podgroup), so it is not recorded.
            group = volcano_podgroup(job.job)
            env = ev.envelope(
                ev.PODGROUP_SUBMITTED,
                SOURCE,
                group,
                id=f"jobs.{job.key}.podgroup.{job.updates}",
                time=stamp,
            )
            out.append((env, ev.stream_name(ev.PODGROUP, job.key)))
            self._groups[job.key] = job.updates
        if missing:
            specs = {t["name"]: t for t in (job.job.get("spec") or {}).get("tasks") or ()}
            for task, i in missing:
                # The template not copied: the pod is encoded and folded, never changed.
                pod, bare = volcano_task_pod_shared(job.job, specs[task.name], i, job.retry)
                key = ev.metadata_key(pod["metadata"])
                event_id = f"jobs.{key}.submit.{book.submits_of(job, key)}"
                try:
                    # The pod only (the envelope is this controller's own making), and
                    # of it what the template and the Job make (check_task_pod).
                    check_task_pod(pod, bare)
                except InvalidEvent as exc:
                    # The template Volcano's webhook let through but esched's pod
                    # schema refuses (ingest refuses such a Job now; one of a log
                    # written before): not submitted, counted and logged.
                    if event_id not in self._sent:
                        self.totals.invalid_pods += 1
                        self._sent.add(event_id)
                        log.warning("job %s: pod %s not submitted: %s", job.key, key, exc)
                    continue
                env = ev.envelope(ev.POD_SUBMITTED, SOURCE, pod, id=event_id, time=stamp)
                out.append((env, ev.stream_name(ev.POD, key)))
        return out

    async def act(self) -> None:
        """Append what the fold asks for now (:meth:`decide`), once; a leader calls it
        each pass."""
        envelopes = self.decide()
        if not envelopes:
            self._pending = False
            return
        self._pending = True
        events, res = await append_envelopes(
            self.store, envelopes, time=datetime.now(UTC), what="append job events", service=SERVICE
        )
        if not res.duplicates:
            # Read back, each is folded from its envelope (a duplicate's row may hold
            # another leader's bytes, or come before this position: none kept then).
            own = self._own
            for e, (env, _stream) in zip(events, envelopes, strict=True):
                if e.type in FOLDED_TYPES:  # those fold_rows takes out again
                    own[e.id] = (e.payload, env)
        for env, _stream in envelopes:
            self._sent.add(env["id"])
            kind = env["type"]
            if kind == ev.POD_SUBMITTED:  # (the bulk first)
                self.totals.submitted += 1
            elif kind == ev.JOB_UPDATED:
                self.totals.transitions += 1
            elif kind == ev.POD_DELETED:
                self.totals.deleted += 1
            elif kind == ev.PODGROUP_SUBMITTED:
                self.totals.podgroups += 1
            else:
                self.totals.timers += 1
        self.totals.duplicates += res.duplicates
        self._pending = False

    def idle(self) -> bool:
        """Leading, nothing decided and not yet appended, and no timer due before
        now (a later timer fires on its own; it needs no new input)."""
        if not self.leading or self._pending or self.book.changed:
            return False
        timer = self.book.next_timer()
        return timer is None or timer[0] > time.time()
