"""Audit the log: replay it event by event and check every placement decision.

The audit folds the whole log from position 0 with the one fold
(:class:`~esched.core.ClusterState`), and at each decision checks:

* ``overcommit``: after a committed placement, a bound node's allocation exceeds
  its allocatable for some resource (with reclamation on, the accounting by
  reservations: ``ClusterState.node_reserved()``);
* ``double_binding``: a committed binding for a pod that is not Pending (already
  bound, or bound twice in one decision);
* ``unknown_node``: a committed binding to a node that was removed or never added;
* ``unknown_pod``: a committed binding for a pod the log does not have;
* ``gang_partial``: a committed decision leaves a gang below ``minMember`` running,
  or binds only part of the gang members it names;
* ``malformed``: a committed decision whose bindings are not objects;
* ``irreproducible``: re-validating the recorded proposal (its bindings, from the
  decision event) against the state folded up to just before the decision, with
  the commit service's own :class:`~esched.core.validation.Validator`, gives the
  other verdict (commit vs reject). A rejection recorded without its bindings
  cannot be re-validated and is counted as ``unverifiable``. A committed
  preemption is re-validated after its evictions (they precede it in the log), so
  its bindings must fit in the room the victims left;
* ``quota``: a committed binding for a pod that admission had to reject: over a
  quota of its queue or namespace (given the config's ``quota:``), or submitted to
  a Closing or Closed queue. Admission is re-done event by event with the
  dispatcher's own :class:`~esched.core.admission.Admission`;
* ``reclaim_illegal``: an eviction of a committed reclaim (``Reclaimed``) that the
  queues' rule forbids on the state just before it (:mod:`esched.core.reclaim`:
  the victim's queue reclaimable, of lower priority than the reclaiming queue or
  of equal priority with the reclaiming queue below its fair share and the
  victim's staying at or above its own, and keeping its guarantee);
* ``preemption_illegal``: a committed preemption evicted a pod whose band is not
  strictly lower than the preemptor's (the lowest band among the decision's
  pods), or a prod pod for a prod one;
* ``preemption_unrecorded``: the victims a committed decision names are not
  exactly the pods evicted for it (``esched.pod.evicted`` with its ``decision``
  id) just before it, or an eviction names a decision that never follows, or a
  pod that was not running on the node it names;
* ``gang_split``: evictions left a gang running below ``minMember`` (a victim gang
  is evicted whole or not at all);
* ``chain_broken``: the store's hash chain (:mod:`esched.services.store.chain`)
  breaks at this position: a stored event was edited, deleted or inserted behind
  the store's back (:func:`audit_store` only);
* ``preemption_unnecessary``: a committed preemption whose pods would have fit on
  their nodes with the victims still running (the validator's feasibility check:
  resources and constraints), or that evicted a pod from a node none of its pods
  is bound to;
* ``nodename_overcommit``: a pod submitted with ``spec.nodeName`` (running there,
  charged without a fit check) leaves its node over its allocatable;
* ``job_dependency``: a pod of a Volcano Job's task bound before the tasks it
  depends on (``dependsOn``) completed, in the job fold (:mod:`esched.core.jobs`)
  just before the decision;
* ``job_retry_exceeded``: a job's pod submitted at an attempt (``volcano.sh/job-version``)
  of ``maxRetry`` or more, or a recorded transition past ``maxRetry``;
* ``job_transition``: an ``esched.job.updated`` record whose phase is not the one
  the job fold of the log decides at that point;
* ``overload_order``: an overload eviction (``esched.pod.evicted``, reason
  ``Overloaded``; :mod:`esched.core.overload`) of a production pod while a
  non-production pod ran on the same node, or of a production pod within its
  limit of the resource;
* ``overload_unneeded``: an overload eviction when the node's pods did not use
  more of the resource than its allocatable on the state just before it, unless it
  continues a run of evictions for the same usage report while the node's need
  (the sum over its running pods of max(usage, reservation)) still exceeds it, or
  of a compressible resource before the overload had lasted ``evict_after``
  seconds on the log's clock, or of a pod not running on the node it names.

Over-commit is only charged to decisions: a node shrinking under running pods is
an external fact, not a scheduling error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import orjson

from esched.core import PHASE_PENDING, PHASE_RUNNING, PHASES, ClusterState
from esched.core.admission import OBSERVED, Admission, Fact, event_key
from esched.core.bands import BandConfig, may_preempt
from esched.core.devices import FoldedDevices, pod_share
from esched.core.jobs import ATTEMPT_ANNOTATION, FOLDED_TYPES, JobBook, job_key_of_pod
from esched.core.overload import log_seconds, need, node_loads
from esched.core.queues import queue_view, summary_view
from esched.core.quota import Quota
from esched.core.reclaim import victims_legal
from esched.core.validation import OVERLOADED, RECLAIMED, Validator
from esched.schemas.events import (
    JOB_SUBMITTED,
    JOB_UPDATED,
    NODE_REMOVED,
    PLACEMENT_COMMITTED,
    PLACEMENT_REJECTED,
    POD_DELETED,
    POD_EVICTED,
    POD_FAILED,
    POD_REJECTED,
    POD_SUBMITTED,
    POD_SUCCEEDED,
)
from esched.schemas.quantity import human_units
from esched.services.store.base import EventStore, StoredEvent
from esched.services.store.rows import row_fact
from esched.services.store.snapshots import PAGE, anomaly_report, format_anomalies

__all__ = ["Auditor", "Violation", "audit_store", "format_report"]

#: Events after which a pod no longer needs admission's verdict.
_ENDS = frozenset({POD_REJECTED, POD_DELETED, POD_SUCCEEDED, POD_FAILED})
#: Events the audit decodes whole (it checks more of them than admission reads).
_DECODED = frozenset({PLACEMENT_COMMITTED, PLACEMENT_REJECTED, NODE_REMOVED, POD_EVICTED})
#: Violations listed in a report; the counts stay exact beyond it.
MAX_LISTED = 1000


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant at one log position."""

    position: int
    kind: str
    detail: str


class Auditor:
    """Feed it the log in order (:meth:`feed`), then read :meth:`report`."""

    def __init__(
        self,
        quota: Quota | None = None,
        bands: BandConfig | None = None,
        queue_hierarchy: str = "parent",
    ) -> None:
        self.state = ClusterState()
        self.admission = Admission(quota, queue_hierarchy)
        #: pods admission rejects (pod -> why), until they end
        self._refused: dict[str, str] = {}
        self.validator = Validator(self.state, bands, queue_hierarchy=queue_hierarchy)
        self.violations: list[Violation] = []
        self.kinds: dict[str, int] = {}
        self.checked = {
            "events": 0,
            "decisions": 0,
            "committed": 0,
            "rejected": 0,
            "bindings": 0,
            "gang_decisions": 0,
            "reproduced": 0,
            "unverifiable": 0,
            "preemptions": 0,
            "evictions": 0,
        }
        self._removed: set[str] = set()
        #: decision id -> [(position, pod)] evicted for it, awaiting the decision
        self._evictions: dict[str, list[tuple[int, str]]] = {}
        #: (node, resource) -> the usage report whose overload the last overload
        #: eviction there answered (a run of evictions until the reservations fit)
        self._overload_runs: dict[tuple[Any, Any], Any] = {}
        #: decision id -> [(pod slot, node slot, (GPU milli, CPU milli, devices))] of
        #: the pods evicted for it
        self._victims_of: dict[str, list[tuple[int, int, tuple[int, int, tuple[int, ...]]]]] = {}
        #: the fold's GPU devices, built at the first preemption that binds devices
        self._devices: FoldedDevices | None = None
        #: the Volcano Job lifecycle, folded alongside (core/jobs.py)
        self.jobs = JobBook()

    def flag(self, position: int, kind: str, detail: str) -> None:
        """Record a violation found outside the fold (the store's hash chain)."""
        self._flag(position, kind, detail)

    def _flag(self, position: int, kind: str, detail: str) -> None:
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if len(self.violations) < MAX_LISTED:
            self.violations.append(Violation(position, kind, detail))

    def feed(self, position: int, event: dict[str, Any], *, jobs: bool = True) -> None:
        """Check (if a decision) and fold one event (``jobs`` False: the job fold has
        it already)."""
        etype: Any = event.get("type")  # any JSON value; only known types are checked
        raw = event.get("data")
        data: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if jobs and etype in FOLDED_TYPES:
            self._job_event(position, etype, event, data)
        self.checked["events"] += 1
        if etype in (PLACEMENT_COMMITTED, PLACEMENT_REJECTED):
            self._decision(position, etype, event, data)
            return
        if etype == NODE_REMOVED:
            name = (data.get("metadata") or {}).get("name")
            if isinstance(name, str):
                self._removed.add(name)
        elif etype == POD_EVICTED and isinstance(data.get("decision"), str):
            self._eviction(position, data)
        elif etype == POD_EVICTED and data.get("reason") == OVERLOADED:
            self._overload_eviction(position, event, data)
        self.state.apply(event, position)
        if etype == POD_SUBMITTED:
            self._node_name(position, data)
        self._admit((position, etype, event_key(data), data))

    def feed_row(self, row: StoredEvent) -> None:
        """:meth:`feed` of a stored event: decoded only where the audit reads more of
        it than admission's :func:`row_fact` (decisions, node removals, evictions);
        everything else is folded from its bytes."""
        if row.type in FOLDED_TYPES and (self.jobs.jobs or row.type == JOB_SUBMITTED):
            event = orjson.loads(row.payload)
            raw = event.get("data")
            self._job_event(row.position, row.type, event, raw if isinstance(raw, dict) else {})
            if row.type in _DECODED or row.type == POD_SUBMITTED:
                self.feed(row.position, event, jobs=False)
                return
        elif row.type in _DECODED or (row.type == POD_SUBMITTED and b'"nodeName"' in row.payload):
            self.feed(row.position, orjson.loads(row.payload))
            return
        self.checked["events"] += 1
        self.state.apply_payloads([(row.position, row.payload)])
        if row.type in OBSERVED:
            fact = row_fact(row)
            if fact is not None:
                self._admit(fact)

    def _job_event(
        self, position: int, etype: str, event: dict[str, Any], data: dict[str, Any]
    ) -> None:
        """Check one event of a Volcano Job's lifecycle against the job fold, then fold it:
        ``job_dependency`` (a pod of a task bound before the tasks it depends on
        completed), ``job_retry_exceeded`` (a pod or transition at an attempt past the
        job's ``maxRetry``), ``job_transition`` (a recorded transition the fold does
        not reproduce)."""
        book = self.jobs
        if etype == PLACEMENT_COMMITTED:
            for b in data.get("bindings") or ():
                pod = b.get("pod") if isinstance(b, dict) else None
                if not isinstance(pod, str) or pod not in book.pod_job:
                    continue
                job = book.pod_job[pod]
                task = job.tasks[job.pods[pod][0]]
                waiting = [
                    d
                    for d in task.depends
                    if d not in job.task_index or not job.task_index[d].complete()
                ]
                if waiting:
                    self._flag(
                        position,
                        "job_dependency",
                        f"pod {pod} of task {task.name} of job {job.key} bound before "
                        f"{', '.join(waiting)} completed",
                    )
        elif etype == POD_SUBMITTED:
            meta = data.get("metadata")
            got = job_key_of_pod(meta) if isinstance(meta, dict) else None
            owner = book.jobs.get(got[0]) if got is not None else None
            if owner is not None and isinstance(meta, dict):
                attempt = str((meta.get("annotations") or {}).get(ATTEMPT_ANNOTATION) or "0")
                if attempt.isdigit() and int(attempt) >= owner.max_retry:
                    self._flag(
                        position,
                        "job_retry_exceeded",
                        f"pod {event_key(data)} of job {owner.key} submitted at attempt "
                        f"{attempt}, maxRetry {owner.max_retry}",
                    )
        book.apply(etype, data, event.get("time"))
        if etype == JOB_UPDATED:
            recorded = book.jobs.get(str(data.get("job")))
            seq = data.get("seq")
            if recorded is None or not isinstance(seq, int):
                return
            job = recorded
            self.checked["job_transitions"] = self.checked.get("job_transitions", 0) + 1
            if seq >= len(job.history) or job.history[seq].phase != data.get("phase"):
                self._flag(
                    position,
                    "job_transition",
                    f"job {job.key}: recorded transition {seq} to {data.get('phase')} is not "
                    "what the fold of the log decides",
                )
            if isinstance(data.get("attempt"), int) and data["attempt"] > job.max_retry:
                self._flag(
                    position,
                    "job_retry_exceeded",
                    f"job {job.key} at attempt {data['attempt']}, maxRetry {job.max_retry}",
                )

    def _node_name(self, position: int, data: dict[str, Any]) -> None:
        """A pod bound by ``spec.nodeName`` is charged to its node without a fit check
        (the policy: reported, not refused); flag the node if that overcommits it."""
        spec = data.get("spec")
        node = spec.get("nodeName") if isinstance(spec, dict) else None
        if not isinstance(node, str) or not node:
            return
        st = self.state
        key = event_key(data)
        record = st.pod(key)
        nidx = st.node_index.get(node)
        if record is None or record["node"] != node or nidx is None:
            return  # not charged (an unknown node, out of range): a fold anomaly
        allocated, allocatable = st.node_allocated(), st.node_allocatable()
        over = np.flatnonzero(allocated[nidx] > allocatable[nidx])
        if over.size:
            parts = ", ".join(
                f"{st.res_names[r]} {int(allocated[nidx, r])} > {int(allocatable[nidx, r])}"
                for r in over
            )
            self._flag(
                position, "nodename_overcommit", f"pod {key} on {node} by spec.nodeName: {parts}"
            )

    def _admit(self, fact: Fact) -> None:
        for r in self.admission.observe(self.state, [fact]):
            self._refused[r.pod] = r.message
        if self._refused and fact[1] in _ENDS:
            self._refused.pop(fact[2], None)  # rejected (or gone) as it should be

    def _eviction(self, position: int, data: dict[str, Any]) -> None:
        """An eviction made for a preemption: the victim must be running where named."""
        st = self.state
        # Payload fields as stored (any JSON value; a missing pod is flagged below).
        pod: Any = data.get("pod")
        node: Any = data.get("node")
        self.checked["evictions"] += 1
        pidx = st.pod_index.get(pod)
        if (
            pidx is None
            or st.phase_of(pidx) != PHASE_RUNNING
            or st.node_of(pidx) != st.node_index.get(node, -2)
        ):
            self._flag(
                position,
                "preemption_unrecorded",
                f"pod {pod} evicted from {node} where it was not running",
            )
        elif data.get("reason") == RECLAIMED and isinstance(data.get("by"), str):
            # Checked victim by victim on the state before each eviction (the earlier
            # victims of the same reclaim are evicted already): the commit's own rule,
            # hdrf's aside (it judges every victim on the state before the first).
            h = self.admission.queue_hierarchy
            view = None if h == "parent" else queue_view(st, h)
            why = victims_legal(st, data["by"], [pod], view=view)
            if why is not None:
                self._flag(position, "reclaim_illegal", f"{pod} reclaimed for {data['by']}: {why}")
        self._evictions.setdefault(data["decision"], []).append((position, pod))
        if pidx is not None and st.phase_of(pidx) == PHASE_RUNNING:
            # Where the victim ran and what GPU share it held on which devices: the
            # preemption's necessity is judged with it still there (_necessary).
            self._victims_of.setdefault(data["decision"], []).append(
                (int(pidx), int(st.node_of(pidx)), pod_share(st, int(pidx)))
            )

    def _overload_eviction(
        self, position: int, event: dict[str, Any], data: dict[str, Any]
    ) -> None:
        """An eviction for overload: the seed's order and its need, on the state just
        before it (:mod:`esched.core.overload`)."""
        st = self.state
        self.checked["overload_evictions"] = self.checked.get("overload_evictions", 0) + 1
        pod: Any = data.get("pod")
        node: Any = data.get("node")
        resource: Any = data.get("resource")
        pidx = st.pod_index.get(pod)
        n = st.node_index.get(node)
        if (
            pidx is None
            or n is None
            or st.phase_of(pidx) != PHASE_RUNNING
            or st.node_of(pidx) != n
            or resource not in st.res_names
        ):
            self._flag(
                position,
                "overload_unneeded",
                f"pod {pod} evicted for overload of {resource} on {node}, where it was not "
                "running (or the node or resource is unknown)",
            )
            return
        r = st.res_names.index(resource)
        capacity = int(st.node_allocatable()[n, r])
        rows = node_loads(st, n, resource, self.validator.bands)
        used, needed = sum(row.usage for row in rows), need(rows)
        run = (node, resource)
        if used > capacity:
            # An overload: it starts a run of evictions for this report.
            self._overload_runs[run] = data.get("report")
        elif needed <= capacity or self._overload_runs.get(run) != data.get("report"):
            # Later evictions of one run go on while the reservations do not fit.
            self._flag(
                position,
                "overload_unneeded",
                f"{pod} evicted from {node}: its pods use {used} and need {needed} of "
                f"{resource}, capacity {capacity}",
            )
        cfg = st.reclamation
        since = log_seconds(data.get("since"))
        if resource in cfg.compressible and (since is None or st.clock - since < cfg.evict_after):
            self._flag(
                position,
                "overload_unneeded",
                f"{pod} evicted from {node} for {resource} (compressible) before the "
                f"overload lasted {cfg.evict_after:g} s",
            )
        me = next(row for row in rows if row.pod == pod)
        if me.prod:
            ran = sorted(row.pod for row in rows if not row.prod)
            if ran:
                self._flag(
                    position,
                    "overload_order",
                    f"production pod {pod} evicted from {node} for {resource} while "
                    f"non-production {', '.join(ran[:3])} ran",
                )
            elif me.usage <= me.limit:
                self._flag(
                    position,
                    "overload_order",
                    f"production pod {pod} evicted from {node} for {resource} within its "
                    f"limit ({me.usage} <= {me.limit})",
                )

    def _preemption(
        self, position: int, event: dict[str, Any], data: dict[str, Any], victims: list[Any]
    ) -> set[int]:
        """Legality of a committed preemption; returns the victims' gangs."""
        st = self.state
        self.checked["preemptions"] += 1
        decision: Any = event.get("id")
        evicted = {pod for _, pod in self._evictions.pop(decision, [])}
        named = {v.get("pod") for v in victims if isinstance(v, dict)}
        if evicted != named:
            self._flag(
                position,
                "preemption_unrecorded",
                f"decision {event.get('id')} names victims {sorted(map(str, named))}, "
                f"evicted for it: {sorted(evicted)}",
            )
        self._necessary(position, decision, data)
        pods: list[Any] = [b.get("pod") for b in data.get("bindings") or () if isinstance(b, dict)]
        known = [st.pod_index[p] for p in pods if p in st.pod_index]
        gangs: set[int] = set()
        if not known:
            return gangs
        preemptor = min(self.validator.band_of_pod(i) for i in known)
        reclaim = bool(data.get("reclaim"))  # legality checked per eviction (_eviction)
        for pod in sorted(map(str, named)):
            pidx = st.pod_index.get(pod)
            if pidx is None:
                continue
            band = self.validator.band_of_pod(pidx)
            if not reclaim and not may_preempt(preemptor, band):
                self._flag(
                    position,
                    "preemption_illegal",
                    f"{preemptor.label} pod(s) {', '.join(pods)} evicted {pod} ({band.label})",
                )
            g = st.gang_of(pidx)
            if g >= 0:
                gangs.add(g)
        return gangs

    def _necessary(self, position: int, decision: Any, data: dict[str, Any]) -> None:
        """A committed preemption evicts only where its pods did not fit: on each node
        that lost victims, the decision's bindings there must not all have fit with
        those victims still running. Checked by the one feasibility path (the
        validator's :meth:`Placer.binding_reasons` on its overlay, the victims assumed
        back on their nodes): resources, pod slots, and every constraint a victim can
        stand in the way of (inter-pod anti-affinity, topology spread, host ports).
        Bindings that name GPU devices must also fit device by device, by the placer's
        exact rule (:meth:`FoldedDevices.fits_with`, the victims back on the devices
        they held): a whole-GPU pod does not fit two half-free devices, whatever the
        node's summed GPU says. Bindings without devices are judged by the summed
        resource, as the commit service judges them."""
        held = self._victims_of.pop(decision, [])
        if not held or data.get("reclaim"):
            return  # reclaim: victims free a queue's share, not a node's room
        st = self.state
        on_node: dict[int, list[tuple[int, bool]]] = {}
        for b in data.get("bindings") or ():
            if not isinstance(b, dict) or not isinstance(b.get("node"), str):
                return  # malformed: flagged elsewhere
            if not isinstance(b.get("pod"), str):
                return
            nidx = st.node_index.get(b["node"])
            pidx = st.pod_index.get(b["pod"])
            if nidx is None or pidx is None:
                return  # unknown pod or node: flagged elsewhere
            on_node.setdefault(int(nidx), []).append((int(pidx), b.get("devices") is not None))
        victims: dict[int, list[tuple[int, tuple[int, int, tuple[int, ...]]]]] = {}
        for vidx, nidx, share in held:
            victims.setdefault(nidx, []).append((vidx, share))
        validator = self.validator
        placer = validator.placer
        for nidx, there in sorted(victims.items()):
            node = st.node_names[nidx]
            if nidx not in on_node:
                self._flag(
                    position,
                    "preemption_unnecessary",
                    f"decision {decision} evicted pods from {node}, where none of its pods go",
                )
                continue
            validator.begin()  # the overlay is the state again (victims evicted)
            try:
                # Asked first: the placer's inter-pod view starts with the first
                # question about a pod with inter-pod terms, and a pod assumed bound
                # before that (a victim without terms) would not count in it.
                for pidx, _dev in on_node[nidx]:
                    placer.binding_reasons(pidx, nidx)
                for vidx, _share in there:
                    placer.assume_binding(vidx, nidx)
                fits = True
                for pidx, _dev in on_node[nidx]:
                    if placer.binding_reasons(pidx, nidx):
                        fits = False
                        break
                    placer.assume_binding(pidx, nidx)
            finally:
                validator.begin()  # drop the assumptions
            named = [pidx for pidx, dev in on_node[nidx] if dev]
            if fits and named:
                fits = self._devices_fit(nidx, [share for _v, share in there], named)
            if fits:
                self._flag(
                    position,
                    "preemption_unnecessary",
                    f"decision {decision}: its pods fit on {node} without evicting anyone",
                )

    def _devices_fit(
        self, nidx: int, restored: list[tuple[int, int, tuple[int, ...]]], pods: list[int]
    ) -> bool:
        """Whether ``pods`` (slots) fit node slot ``nidx`` device by device with the
        victims' shares ``restored`` on their devices."""
        st = self.state
        if self._devices is None:
            self._devices = FoldedDevices(st, fgd=False)
        devices = self._devices
        wanted = [devices.request(st.class_of(p)) for p in pods]
        return devices.fits_with(nidx, restored, wanted)

    def _decision(
        self, position: int, etype: str, event: dict[str, Any], data: dict[str, Any]
    ) -> None:
        st = self.state
        committed = etype == PLACEMENT_COMMITTED
        self.checked["decisions"] += 1
        self.checked["committed" if committed else "rejected"] += 1
        bindings = data.get("bindings")
        proposal = data.get("proposal")
        victims = data.get("victims") if isinstance(data.get("victims"), list) else []
        victim_gangs: set[int] = set()
        if committed and victims:
            victim_gangs = self._preemption(position, event, data, victims)
        elif (decision := event.get("id")) in self._evictions:
            self._evictions.pop(decision)
            self._flag(
                position,
                "preemption_unrecorded",
                f"pods were evicted for {event.get('id')}, which names no victims",
            )
        # 1. Reproducibility: the same validation, on the state just before the decision
        # (for a committed preemption: after its evictions, which precede it).
        if isinstance(bindings, list) and bindings and isinstance(proposal, str):
            self.validator.begin()
            try:
                checked = (
                    {k: v for k, v in data.items() if k != "victims"}
                    if committed and victims
                    else data
                )
                verdict = self.validator.check(checked, record=False)
            except (KeyError, TypeError, AttributeError) as exc:
                verdict = None
                self._flag(position, "irreproducible", f"proposal {proposal}: malformed ({exc})")
            if verdict is not None:
                if verdict.ok == committed:
                    self.checked["reproduced"] += 1
                elif committed:
                    self._flag(
                        position,
                        "irreproducible",
                        f"proposal {proposal} was committed; re-validation rejects it: "
                        f"{verdict.reason} ({verdict.message})",
                    )
                else:
                    self._flag(
                        position,
                        "irreproducible",
                        f"proposal {proposal} was rejected ({data.get('reason')}); "
                        "re-validation accepts it",
                    )
        else:
            self.checked["unverifiable"] += 1
        if not committed or not isinstance(bindings, list):
            st.apply(event, position)
            return
        if victim_gangs:
            self._gang_split(position, victim_gangs)
        if not all(isinstance(b, dict) for b in bindings):
            self._flag(position, "malformed", f"proposal {proposal}: a binding is not an object")
            st.apply(event, position)
            return
        # 2. Per-binding facts before the fold applies the decision.
        nodes: set[int] = set()
        gangs: dict[int, int] = {}
        seen: set[str] = set()
        for b in bindings:
            pod, node = b.get("pod"), b.get("node")
            self.checked["bindings"] += 1
            if pod in self._refused:
                self._flag(position, "quota", f"pod {pod} bound though {self._refused[pod]}")
            pidx = st.pod_index.get(pod)
            nidx = st.node_index.get(node)
            if pidx is None:
                self._flag(position, "unknown_pod", f"pod {pod} bound but not in the log")
            elif st.phase_of(pidx) != PHASE_PENDING or pod in seen:
                where = st.node_of(pidx)
                on = st.node_names[where] if where >= 0 else None
                self._flag(
                    position,
                    "double_binding",
                    f"pod {pod} bound to {node} while {PHASES[st.phase_of(pidx)]}"
                    + (f" on {on}" if on else "")
                    + (" (twice in one decision)" if pod in seen else ""),
                )
            if nidx is None:
                state = "removed" if node in self._removed else "unknown"
                self._flag(position, "unknown_node", f"pod {pod} bound to {state} node {node}")
            else:
                nodes.add(int(nidx))
            if pidx is not None:
                g = st.gang_of(pidx)
                if g >= 0:
                    gangs[g] = gangs.get(g, 0) + 1
            seen.add(pod)
        running_before = {g: st.gang_count(g, PHASE_RUNNING) for g in gangs}
        st.apply(event, position)
        # 3. Over-commit on the bound nodes, after the decision, by the accounting
        # placement uses: with reclamation on, min(limits, reservations + burst) (a
        # legal decision keeps it within allocatable, while non-production pods placed
        # in reclaimed resources take the requests above it); off, the requests.
        allocatable = st.node_allocatable()
        allocated = st.node_reserved() if st.reclamation.enabled else st.node_allocated()
        for n in sorted(nodes):
            over = np.flatnonzero(allocated[n] > allocatable[n])
            if over.size:
                parts = ", ".join(
                    f"{st.res_names[r]} {int(allocated[n, r])} > {int(allocatable[n, r])}"
                    for r in over
                )
                self._flag(position, "overcommit", f"node {st.node_names[n]}: {parts}")
        # 4. Gangs: atomic and at least minMember running after the decision.
        for g, named in gangs.items():
            self.checked["gang_decisions"] += 1
            running = st.gang_count(g, PHASE_RUNNING)
            need = st.gang_min_of(g)
            bound = running - running_before[g]
            if bound != named:
                self._flag(
                    position,
                    "gang_partial",
                    f"gang {st.gang_keys[g]}: {bound} of the {named} members in the "
                    "decision were bound",
                )
            elif running < need:
                self._flag(
                    position,
                    "gang_partial",
                    f"gang {st.gang_keys[g]}: {running} running < minMember {need}",
                )

    def _gang_split(self, position: int, gangs: set[int]) -> None:
        # The evictions are folded by now: a victim gang is gone whole or kept whole.
        st = self.state
        for g in sorted(gangs):
            running = st.gang_count(g, PHASE_RUNNING)
            if 0 < running < st.gang_min_of(g):
                self._flag(
                    position,
                    "gang_split",
                    f"gang {st.gang_keys[g]}: {running} running < minMember "
                    f"{st.gang_min_of(g)} after evictions",
                )

    def report(self, *, complete: bool = True) -> dict[str, Any]:
        """``{"ok", "position", "checked", "violations", "by_kind"}``.

        ``complete`` False: the log goes on past what was fed (``--upto``), so
        evictions whose decision is not fed yet are counted in ``checked`` as
        ``evictions_awaiting_decision``, not flagged (the decision is in the same
        append, just beyond the cut).
        """
        if complete:
            for decision, evicted in sorted(self._evictions.items()):
                self._flag(
                    evicted[0][0],
                    "preemption_unrecorded",
                    f"{len(evicted)} pod(s) evicted for {decision}, which is not in the log",
                )
        elif self._evictions:
            self.checked["evictions_awaiting_decision"] = sum(
                len(v) for v in self._evictions.values()
            )
        self._evictions.clear()
        queues = {
            name: {k: q[k] for k in ("path", "state", "fairShare", "allocated", "share")}
            for name, q in summary_view(
                self.state.summary()["queues"], self.state, self.admission.queue_hierarchy
            ).items()
        }
        return {
            "ok": not self.kinds,
            "position": int(self.state.position),
            "checked": dict(self.checked),
            "by_kind": dict(sorted(self.kinds.items())),
            "violations": [asdict(v) for v in self.violations],
            "queues": queues,
            "anomalies": anomaly_report(self.state),
            "jobs": self.jobs.summaries(),
        }


def audit_events(
    events: Iterable[tuple[int, dict[str, Any]]],
    quota: Quota | None = None,
    bands: BandConfig | None = None,
    queue_hierarchy: str = "parent",
) -> dict[str, Any]:
    """Audit ``(position, envelope)`` pairs in log order; returns the report."""
    auditor = Auditor(quota, bands, queue_hierarchy)
    for position, event in events:
        auditor.feed(position, event)
    return auditor.report()


async def audit_store(
    store: EventStore,
    *,
    upto: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    quota: Quota | None = None,
    bands: BandConfig | None = None,
    queue_hierarchy: str = "parent",
) -> dict[str, Any]:
    """Audit the log in ``store`` from position 0 up to ``upto`` (default: the head);
    ``queue_hierarchy`` as the scheduler ran (``esched.core.queues.QUEUE_HIERARCHIES``)."""
    auditor = Auditor(quota, bands, queue_hierarchy)
    head = await store.head()
    target = upto if upto is not None else head
    after = 0
    while after < target:
        rows = await store.read(after, PAGE, target)
        if not rows:
            break
        for row in rows:
            auditor.feed_row(row)
        after = rows[-1].position
        if progress:
            progress(after, target)
    # The hash chain: an edited, deleted or inserted row breaks it at its position.
    chain = await store.verify(upto=None if target >= head else target)
    if not chain.ok and chain.broken_at is not None:
        auditor.flag(chain.broken_at, "chain_broken", chain.reason or "hash chain broken")
    report = auditor.report(complete=target >= head)
    report["position"] = max(report["position"], after)
    report["chain"] = {"ok": chain.ok, "checked": chain.checked, "head_hash": chain.head_hash}
    return report


def format_report(report: dict[str, Any]) -> str:
    """The audit report as a human-readable table."""
    lines = [
        f"audit     {'OK' if report['ok'] else 'VIOLATIONS'}",
        f"position  {report['position']}",
    ]
    lines.append("checked   " + "  ".join(f"{k}={v}" for k, v in report["checked"].items()))
    if report["violations"]:
        lines.append("by kind   " + "  ".join(f"{k}={v}" for k, v in report["by_kind"].items()))
        lines.append(f"  {'POSITION':>10}  {'KIND':<16}DETAIL")
        for v in report["violations"]:
            lines.append(f"  {v['position']:>10}  {v['kind']:<16}{v['detail']}")
    lines += format_anomalies(report.get("anomalies") or {})
    if report.get("queues"):
        lines.append(f"  {'QUEUE':<24}{'STATE':<10}{'SHARE':>8}  ALLOCATED/FAIR SHARE")
        for name, q in report["queues"].items():
            fair, alloc = q.get("fairShare") or {}, q.get("allocated") or {}
            res = " ".join(
                f"{r}={human_units(r, alloc.get(r, 0))}/{human_units(r, fair.get(r, 0))}"
                for r in sorted(set(fair) | set(alloc))
                if r != "pods"
            )
            lines.append(
                f"  {q.get('path', name):<24}{q.get('state', ''):<10}"
                f"{q.get('share', 0.0):>8.3f}  {res}"
            )
    return "\n".join(lines)
