"""The fold's dict path: one decoded event envelope into a :class:`ClusterState`.

:meth:`ClusterState.apply` and :meth:`~ClusterState.apply_many` check the position
and call :func:`_apply` here; the bytes path (``_fold_bytes``) calls the same
handlers (their keyed forms: :func:`_pod_submit`, :func:`_pod_finish`,
:func:`_resolve_binding` + :func:`_bind_resolved`). The handlers are the methods they
were, as functions of the state (``self``) over its ``_state.pxd`` contract; the
tables, interning and accounting (``_bind``, ``_release``, ``_set_phase``,
``_class_for``, ...) stay the class's.

This module knows the class only through ``_state.pxd`` (a C-level type import):
``_state.pyx`` cimports the fold while it loads, so nothing here imports from it in
Python.
"""

import numpy as np
import orjson

from esched.schemas import events as _ev
from esched.schemas.objects import (
    BUILTIN_PRIORITY_CLASSES, DEFAULT_QUEUE, GANG_ANNOTATIONS, PREEMPTABLE_KEY, QUEUE_ANNOTATIONS,
    _GO_BOOLS, node_allocatable, spread_default_labels,
)
from esched.core.queues import node_group_terms
from esched.schemas.manifests import volcano_first_pods, volcano_podgroup
from esched.schemas.quantity import QuantityError, resource_list
from esched.schemas.validator.timewindow import event_seconds

from cpython.dict cimport PyDict_Copy

cdef extern from "Python.h":
    dict _PyDict_NewPresized(Py_ssize_t minused)

from esched.core._fold_usage cimport _usage_nodes, _usage_pods
from esched.core._state cimport COL_PODS, ClusterState, _class_of, _profile_key, _unit_in_range
from esched.core._types cimport (
    NODE_ALIVE,
    NODE_UNSCHEDULABLE,
    PHASE_FAILED,
    PHASE_FREE,
    PHASE_PENDING,
    PHASE_RUNNING,
    PHASE_SUCCEEDED,
    index_t,
    word_t,
)

__all__ = ["GANG_SIZE_ANNOTATION", "MAX_POD_DEVICES", "device_bits"]

# Dispatch codes: the type string is looked up once per event.
cdef enum:
    EV_UNKNOWN = 0
    EV_NODE_UPSERT
    EV_NODE_REMOVED
    EV_POD_SUBMITTED
    EV_POD_DELETED
    EV_POD_UPDATED
    EV_POD_SUCCEEDED
    EV_POD_FAILED
    EV_PODGROUP
    EV_QUEUE
    EV_USAGE
    EV_COMMITTED
    EV_EVICTED
    EV_REJECTED
    EV_GANG_RESERVED
    EV_PRIORITYCLASS
    EV_NAMESPACE
    EV_NAMESPACE_DELETED
    EV_JOB
    EV_NOOP

cdef dict _TYPE_CODES_BY_NAME = {
    _ev.NODE_ADDED: EV_NODE_UPSERT,
    _ev.NODE_UPDATED: EV_NODE_UPSERT,
    _ev.NODE_REMOVED: EV_NODE_REMOVED,
    _ev.POD_SUBMITTED: EV_POD_SUBMITTED,
    _ev.POD_DELETED: EV_POD_DELETED,
    _ev.POD_UPDATED: EV_POD_UPDATED,
    _ev.POD_SUCCEEDED: EV_POD_SUCCEEDED,
    _ev.POD_FAILED: EV_POD_FAILED,
    _ev.PODGROUP_SUBMITTED: EV_PODGROUP,
    _ev.QUEUE_UPSERTED: EV_QUEUE,
    _ev.USAGE_REPORTED: EV_USAGE,
    _ev.PLACEMENT_COMMITTED: EV_COMMITTED,
    _ev.POD_EVICTED: EV_EVICTED,
    # Overload throttling (core/overload.py) is for the node's agent: no state change.
    _ev.POD_THROTTLED: EV_NOOP,
    _ev.PLACEMENT_PROPOSED: EV_NOOP,
    _ev.PLACEMENT_REJECTED: EV_NOOP,
    _ev.POD_UNSCHEDULABLE: EV_NOOP,
    _ev.POD_REJECTED: EV_REJECTED,
    _ev.GANG_RESERVED: EV_GANG_RESERVED,
    _ev.PRIORITYCLASS_UPSERTED: EV_PRIORITYCLASS,
    _ev.NAMESPACE_UPSERTED: EV_NAMESPACE,
    _ev.NAMESPACE_DELETED: EV_NAMESPACE_DELETED,
    # A Volcano Job implies its PodGroup and, marked by ingest, its first pods
    # (_job_submitted); the Job lifecycle's own
    # records are core/jobs.py's to fold (pods are pod events).
    _ev.JOB_SUBMITTED: EV_JOB,
    _ev.JOB_UPDATED: EV_NOOP,
    _ev.JOB_TIMER: EV_NOOP,
}
# One dict lookup per event gives a slot; slot -> dispatch code and per-type counter.
cdef tuple _TYPE_NAMES = tuple(_TYPE_CODES_BY_NAME)
cdef dict _TYPE_SLOT = {name: i for i, name in enumerate(_TYPE_NAMES)}
cdef int _SLOT_CODE[32]
for _i, _name in enumerate(_TYPE_NAMES):
    _SLOT_CODE[_i] = _TYPE_CODES_BY_NAME[_name]

#: Pod annotation giving a gang's size when no PodGroup does (with a group-name one).
GANG_SIZE_ANNOTATION = "scheduling.k8s.io/group-pod-num"

# Bodies that fail inside a handler (wrong JSON types where objects were expected).
# OverflowError: a number beyond int64 where the tables hold one.
_MALFORMED = (QuantityError, TypeError, ValueError, AttributeError, KeyError, OverflowError)

#: GPU devices per node a binding may name (bits of ``pod_dev``).
MAX_POD_DEVICES = 63


def device_bits(devices) -> int:
    """The ``pod_dev`` bits of a binding's ``devices`` (distinct indices of the node's
    GPU devices, 0..62); ValueError (a malformed binding) otherwise."""
    bits = 0
    for d in devices:
        if type(d) is not int or not 0 <= d < MAX_POD_DEVICES or bits >> d & 1:
            raise ValueError(f"bad device index {d!r} in a binding")
        bits |= 1 << d
    return bits


def _gate_names(gates) -> tuple:
    """The names of a pod's ``spec.schedulingGates`` (``[{"name": ...}]``), in order;
    TypeError (a malformed body) when an entry is not a named object."""
    if not gates:
        return ()
    if not isinstance(gates, list):
        raise TypeError("spec.schedulingGates is not a list")
    names = []
    for g in gates:
        if not isinstance(g, dict) or not isinstance(g.get("name"), str):
            raise TypeError("a scheduling gate without a name")
        names.append(g["name"])
    return tuple(names)


# The pod key rule (schemas.events.namespaced_key), inlined in the fold's hot paths
# on the same constant; tests/core/test_fold.py checks all three builders agree.
cdef str _DEFAULT_NS = _ev.DEFAULT_NAMESPACE
cdef str _DEFAULT_QUEUE = DEFAULT_QUEUE


cdef inline str _meta_key(dict meta):
    # schemas.events.metadata_key without the call.
    return f"{meta.get('namespace') or _DEFAULT_NS}/{meta.get('name', '')}"


def _gang_priority_class(dict pod, str name, dict classes=None):
    """``pod`` as its gang's member: the PodGroup's ``priorityClassName`` is the job's
    (Volcano), so it replaces the pod's own; a PriorityClass folded from the log
    (``classes``) or a built-in class also sets the priority, else the pod keeps its
    own ``spec.priority`` (the class may still act through ``bands.classes``)."""
    spec = dict(pod.get("spec") or {})
    known = classes is not None and name in classes
    if (spec.get("priorityClassName") == name and name not in BUILTIN_PRIORITY_CLASSES
            and not known):
        return pod
    spec["priorityClassName"] = name
    if known:
        spec["priority"] = int(classes[name]["value"])
    elif name in BUILTIN_PRIORITY_CLASSES:
        spec["priority"] = BUILTIN_PRIORITY_CLASSES[name]
    out = dict(pod)
    out["spec"] = spec
    return out


cdef int type_slot(str name) except -1:
    # The per-type counter slot of event type ``name`` (a known type).
    return _TYPE_SLOT[name]


cdef dict noop_slots():
    # The counter slots of the types the fold only counts, by their names' bytes (the
    # bytes path skips their data: a Volcano Job's is its whole spec, templates
    # included).
    return {name.encode(): slot for name, slot in _TYPE_SLOT.items()
            if _TYPE_CODES_BY_NAME[name] == EV_NOOP}


cdef dict event_counts(ClusterState self):
    # ClusterState.event_counts: events folded per type, unknown types included.
    out = {name: self.type_counts[i] for i, name in enumerate(_TYPE_NAMES)
           if self.type_counts[i]}
    out.update(self._unknown_counts)
    return out


cdef int restore_event_counts(ClusterState self, dict counts) except -1:
    # The counters of a snapshot's ``event_counts`` (see event_counts).
    for name, count in counts.items():
        slot = _TYPE_SLOT.get(name)
        if slot is None:
            self._unknown_counts[name] = count
        else:
            self.type_counts[<int>slot] = count
    return 0


cdef int _node_upsert(ClusterState self, dict node) except -1:
    meta = node.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        self._anomaly("malformed")
        return 0
    allocatable = node_allocatable(node)  # validate before touching the state
    labels = dict(meta.get("labels") or {})
    spec = node.get("spec") or {}
    taints = [
        (t.get("key") or "", t.get("value") or "", t.get("effect") or "")
        for t in (spec.get("taints") or ())
    ]
    cols = [(self._resource(rname), u) for rname, u in allocatable.items()]
    label_bits = []
    for k, v in labels.items():
        label_bits.append(self._label_bit(f"{k}={v}"))
        label_bits.append(self._label_bit(k))
    taint_bits = [self._taint_bit(t) for t in taints]

    cdef Py_ssize_t n, r, b
    idx = self.node_index.get(name)
    n = self._new_node_slot(name) if idx is None else idx
    # Allocated is kept: an update changes capacity and constraints, not bindings.
    for r in range(self.n_res):
        self.allocatable[n, r] = 0
    for r, units in cols:
        self.allocatable[n, r] = units
    for r in range(self.label_words):
        self.label_bits[n, r] = 0
    for r in range(self.taint_words):
        self.taint_bits[n, r] = 0
    for b in label_bits:
        self.label_bits[n, b >> 6] |= (<word_t>1) << (b & 63)
    for b in taint_bits:
        self.taint_bits[n, b >> 6] |= (<word_t>1) << (b & 63)
    self.node_labels[n] = labels
    self.node_taint_list[n] = taints
    self.flags[n] = NODE_ALIVE | (NODE_UNSCHEDULABLE if spec.get("unschedulable") else 0)
    self.version[n] += 1
    if self.interpod.key_names:
        self.interpod.node_changed(n)
    return 0

cdef int _node_removed(ClusterState self, dict data) except -1:
    name = (data.get("metadata") or {}).get("name")
    idx = self.node_index.get(name)
    if idx is None:
        self._anomaly("unknown_node")
        return 0
    cdef Py_ssize_t n = idx, p, r
    # Pods bound there go back to Pending, unbound, their allocation released (and
    # noted as released: a claims follower drops its copy, their work comes again).
    for p in np.flatnonzero(self.pod_node_np[: self.n_pods] == n):
        self._release(p)
        self._set_phase(p, PHASE_PENDING)
        if self.claims_journal is not None:
            _journal(self, CLAIM_RELEASED, self.pod_keys[p])
    for r in range(self.n_res):
        self.allocatable[n, r] = 0
        self.allocated[n, r] = 0
    self.nz[n, 0] = 0
    self.nz[n, 1] = 0
    for r in range(self.label_words):
        self.label_bits[n, r] = 0
    for r in range(self.taint_words):
        self.taint_bits[n, r] = 0
    self.flags[n] = 0
    self.version[n] += 1  # never reset: caches keyed on version stay sound on reuse
    del self.node_index[name]
    self.node_gen += 1
    gang = self.reserved_nodes.pop(name, None)
    if gang is not None:
        self.reservations[gang].remove(name)
        if not self.reservations[gang]:
            del self.reservations[gang]
    self.node_names[n] = None
    self.node_labels[n] = {}
    self.node_taint_list[n] = []
    self.node_free.append(n)
    if self._node_usage.pop(name, None) is not None:
        self.usage_gen += 1
    if self.interpod.key_names:
        self.interpod.node_changed(n)
    return 0

cdef int _pod_submitted(ClusterState self, dict pod, list class_memo=None) except -1:
    cdef dict meta = pod.get("metadata") or {}
    key = _meta_key(meta)
    _pod_submit(self, key, pod, meta, None, class_memo)
    return 0

cdef Py_ssize_t _pod_submit(ClusterState self, str key, dict pod, dict meta, dict spec,
                            list class_memo, tuple plain=None, tuple keys=None) except -2:
    # The handler proper, on a pod's key. ``pod`` None: the bytes path's pod with
    # no labels or annotations (no metadata the handler reads besides the key), of
    # which it passes just ``spec`` (None if absent). class_memo: [queue, class, the
    # class's priority, ...] cached for this exact spec by apply_payloads (whose decoder keys it on the
    # spec's bytes); the class is a function of the spec and the queue's
    # node-group affinity only, and _queue_upsert drops the cache (the class's
    # release, the entry: ClusterState._memo_class). ``plain``: the
    # bytes path's pod whose spec is containers and perhaps a schedulerName (``spec``
    # then None, ``pod`` None or its metadata only), as (requests, nonzero,
    # schedulerName or None, the spec's bytes): the requests _class_for would compute
    # from it. Its class is _class_for's short path's when no PriorityClass is folded,
    # the pod's queue has no node-group affinity (the caller passes a pod without
    # metadata, in the default queue, only while that queue has none) and its gang no
    # PriorityClass; otherwise the spec is decoded from its bytes and _class_for decides.
    # ``keys``: (queue, gang key) of a pod whose metadata (``pod`` its metadata only)
    # holds its labels but not the annotations naming them, as _volcano_keys would read
    # them off those annotations (a Job's implied pod: its Job's queue and key), none
    # of them making it not preemptable nor sizing its gang.
    # Returns the slot the submission gave the pod, or -1 when it gave none.
    idx = self.pod_index.get(key)
    cdef Py_ssize_t p, c, r, n
    if idx is not None and self.pod_phase[<Py_ssize_t>idx] == PHASE_RUNNING:
        # A running pod's requests are what its node is charged: a resubmit cannot
        # change them (kube: resources of a bound pod are immutable).
        self._anomaly("resubmitted_running_pod")
        return -1
    if self.tombstones and self.tombstones.pop(key, None) is not None:
        # Deleted before it was submitted (the delete overtook it): the pod is gone.
        self._anomaly("submit_after_delete")
        return -1
    annotations = meta.get("annotations") if pod is not None else None
    keep_running = False
    sname = plain[2] if plain is not None else None
    if keys is not None:
        queue, gkey = keys
    elif pod is not None and (annotations or meta.get("labels")):
        queue, gkey, keep_running = _volcano_keys(meta, annotations)
    else:
        queue = _DEFAULT_QUEUE
        gkey = None
    if gkey is not None:
        # A gang's pods are in its PodGroup's queue (Volcano), when it names one.
        gi = self.gang_index.get(gkey)
        if gi is not None:
            # (typed: its reads are dict lookups, not method calls; every gang's is a dict)
            gmeta = <dict>self.gang_meta[<Py_ssize_t>gi]
            if (<dict>gmeta).get("queue_set"):
                queue = (<dict>gmeta)["queue"]
            if (<dict>gmeta).get("priorityClassName"):
                if plain is not None:
                    pod["spec"] = orjson.loads(<bytes>plain[3])
                    plain = None
                pod = _gang_priority_class(
                    pod, gmeta["priorityClassName"], self.priority_classes)
                class_memo = None  # the spec is no longer the one it caches
    q = self._queue(queue)
    # spec.nodeName: a pod bound from the outside (running there) when the node is
    # known; else Pending, and it fits only that node (kube's NodeName filter).
    pspec_obj = pod.get("spec") if pod is not None else spec
    # Typed: the three reads below are dict lookups, not method calls.
    cdef dict pspec = pspec_obj if isinstance(pspec_obj, dict) else None
    node_name = pspec.get("nodeName") if pspec is not None else None
    pinned = bool(node_name) and node_name not in self.node_index
    if pinned:
        class_memo = None  # the class depends on the node's presence, not the spec only
    prio = None
    if class_memo is not None and class_memo[0] == q:
        c = class_memo[1]
        prio = class_memo[2]
    elif plain is not None and not self.priority_classes and (
            pod is None or not (<dict>self.queue_meta[<Py_ssize_t>q]).get("affinity")):
        # (A pod without metadata is in the default queue, which had no affinity when
        # the memo took its spec as plain: an affinity set since has cleared the memo.)
        # _class_for's short return for a spec of containers and a profile, without
        # the spec as dicts.
        c = _class_of(self, <dict>plain[0], <tuple>plain[1], 0, _profile_key(sname), None)
        if c < 0:
            return -1
        if class_memo is not None:
            self._memo_class(class_memo, q, c)
    else:
        if plain is not None:
            spec = orjson.loads(<bytes>plain[3])
            if pod is not None:
                pod["spec"] = spec
        if pod is None:
            # What the reference aggregations read of a pod is its spec.
            pod = {"spec": spec} if spec is not None else {}
        c = self._class_for(pod, self.queue_meta[q].get("affinity"), pinned)
        if c < 0:
            return -1
        if class_memo is not None:
            self._memo_class(class_memo, q, c)
    g = self._gang(gkey, queue) if gkey is not None else -1
    if g >= 0 and annotations and GANG_SIZE_ANNOTATION in annotations:
        _gang_size_annotation(self, g, annotations[GANG_SIZE_ANNOTATION])
    if keep_running:
        self.not_preemptable[key] = True
    elif self.not_preemptable:
        self.not_preemptable.pop(key, None)
    labels = None
    owned = False
    if meta is not None:
        labels = meta.get("labels")
        # (the call only for a pod with owners: the fold's bulk has none)
        owned = (labels is not None and "ownerReferences" in meta
                 and spread_default_labels(meta) is not None)
    # (the class's priority, as the memo keeps it)
    p = _pod_enter(self, key, idx, c, q, g,
                   self.class_specs[c]["priority"] if prio is None else prio, labels, owned)
    # kube's SchedulingGates (PreEnqueue): a gated pod is Pending and never
    # attempted until an esched.pod.updated removes its last gate. The API server
    # refuses nodeName with gates (so does ingest): a bound pod is never gated.
    gates = pspec.get("schedulingGates") if pspec is not None else None
    if gates and not node_name:
        self.gated[key] = _gate_names(gates)
    elif self.gated:
        self.gated.pop(key, None)
    # Which profile the pod asks for: the scheduling pass leaves pods naming a
    # scheduler esched does not run Pending (kube leaves them to that scheduler).
    if pspec is not None:
        sname = pspec.get("schedulerName")
    if sname:
        self.scheduler_of[key] = sname
    elif self.scheduler_of:
        self.scheduler_of.pop(key, None)
    if node_name:
        nidx = self.node_index.get(node_name)
        if nidx is None:
            # Naming a node we do not know: Pending, placeable only there (its class).
            self._anomaly("pod_on_unknown_node")
            return p
        n = nidx
        for r in range(self.n_res):
            self.pod_alloc[p, r] = self.class_req[c, r]
        if not self._charge_fits(p, n):
            for r in range(self.n_res):
                self.pod_alloc[p, r] = 0
            self._anomaly("overflow")
            return p
        self._bind(p, n)
        self._set_phase(p, PHASE_RUNNING)
        if self.claims_journal is not None:
            _journal(self, CLAIM_BOUND, key)
    return p

cdef Py_ssize_t _pod_enter(ClusterState self, str key, object idx, Py_ssize_t c, Py_ssize_t q,
                           Py_ssize_t g, long long prio, object labels, bint owned) except -1:
    # Pod ``key`` enters the state Pending, unbound, of class c (found or made by the
    # caller), queue q, gang g (-1: none), priority ``prio``, with ``labels``
    # (``owned``: InterPodIndex.set_pod's). ``idx``: the slot of a pod of that key
    # already there (None: a new slot), which it replaces. _pod_submit's tail, and
    # the claims' bind (core/_claims.pyx), which then binds it. Returns the slot.
    cdef Py_ssize_t p
    if idx is not None:
        # A terminal pod of the same name is replaced by the new one; a Pending
        # one is updated (its requests, constraints, queue and gang are the new
        # submit's), as kube lets a pod be changed until it is bound.
        p = idx
        self._set_phase(p, PHASE_FREE)
    else:
        p = self._new_pod_slot(key)
    self._hold_class(p, c, self.pod_class[p] if idx is not None else -1)
    self.pod_queue[p] = <index_t>q
    self.interpod.set_pod(p, key, labels, owned)
    self._set_gang(p, g)
    self.pod_prio[p] = prio
    self.pod_node[p] = -1
    self.pod_phase[p] = PHASE_FREE
    self._set_phase(p, PHASE_PENDING)
    return p


cdef int _journal(ClusterState self, int kind, str key) except -1:
    # A pod bound (CLAIM_BOUND) or released (CLAIM_RELEASED) by the event being
    # folded, noted for the claims' builder (core/_claims.pyx) when the state keeps
    # a journal (``claims_journal``; None, the default: nothing noted).
    self.claims_journal.append((kind, key))
    return 0


# The keys read from a pod's annotations and labels, as the helpers of schemas.objects
# (pod_queue, gang_key, pod_preemptable) read them, in one pass over the two dicts
# (a Volcano Job's pods all have them: the fold's per-pod cost with jobs present).
cdef str _QUEUE_KEY_0 = QUEUE_ANNOTATIONS[0]
cdef str _QUEUE_KEY_1 = QUEUE_ANNOTATIONS[1]
cdef str _GANG_KEY_0 = GANG_ANNOTATIONS[0]
cdef str _GANG_KEY_1 = GANG_ANNOTATIONS[1]
cdef str _PREEMPTABLE = PREEMPTABLE_KEY
cdef dict _PARSE_BOOL = _GO_BOOLS
assert len(QUEUE_ANNOTATIONS) == 2 and len(GANG_ANNOTATIONS) == 2


cdef inline object _get(object where, object key):
    # where.get(key), without a method call when ``where`` is a dict (as decoded).
    return (<dict>where).get(key) if type(where) is dict else where.get(key)


cdef tuple _volcano_keys(dict meta, object annotations):
    # (queue, gang key or None, not preemptable) of a pod with annotations or labels:
    # pod_queue's queue, gang_key's key, not pod_preemptable(pod).
    labels = meta.get("labels")
    queue = None
    gkey = None
    keep = None
    for where in (annotations, labels):
        if not where:
            continue
        if queue is None:
            if _get(where, _QUEUE_KEY_0):
                queue = str(where[_QUEUE_KEY_0])
            elif _get(where, _QUEUE_KEY_1):
                queue = str(where[_QUEUE_KEY_1])
        if keep is None and _PREEMPTABLE in where:
            keep = not _PARSE_BOOL.get(str(where[_PREEMPTABLE]), False)
    if annotations:
        name = _get(annotations, _GANG_KEY_0) or _get(annotations, _GANG_KEY_1)
        if name:
            gkey = f"{meta.get('namespace') or _DEFAULT_NS}/{name}"
    return (DEFAULT_QUEUE if queue is None else queue), gkey, keep is True


cdef int _gang_size_annotation(ClusterState self, Py_ssize_t g, object value) except -1:
    # The annotation pair group-name + group-pod-num makes a gang without a
    # PodGroup (the delayed-binding article's form); a PodGroup's minMember wins.
    if self.gang_meta[g].get("podGroup"):
        return 0
    try:
        size = int(value)
    except (TypeError, ValueError):
        size = 0
    if size < 1:
        self._anomaly("invalid_group_pod_num")
        return 0
    self.gang_min[g] = size
    return 0

cdef Py_ssize_t _pod_in_phase(ClusterState self, object key, int phase,
                               str wrong_phase) except -2:
    # The slot of pod ``key`` when it is in ``phase``, else -1 and one anomaly:
    # "unknown_pod" (never submitted, or deleted) or ``wrong_phase``. The lifecycle
    # handlers' common start (a commit's bindings check their node in between).
    idx = self.pod_index.get(key)
    if idx is None:
        self._anomaly("unknown_pod")
        return -1
    cdef Py_ssize_t p = idx
    if self.pod_phase[p] != phase:
        self._anomaly(wrong_phase)
        return -1
    return p

cdef int _pod_finished(ClusterState self, dict data, int phase) except -1:
    cdef dict meta = data.get("metadata") or {}
    return _pod_finish(self, _meta_key(meta), phase)

cdef int _pod_finish(ClusterState self, str key, int phase) except -1:
    # The handler proper, on the pod's key.
    # phase: PHASE_SUCCEEDED, PHASE_FAILED, or PHASE_FREE for deleted.
    idx = self.pod_index.get(key)
    if idx is None:
        self._anomaly("unknown_pod")
        if phase == PHASE_FREE:
            # Kept, so the submit this delete overtook does not run a deleted pod.
            self.tombstones[key] = self._at
        return 0
    cdef Py_ssize_t p = idx
    if self.claims_journal is not None:
        _journal(self, CLAIM_RELEASED, key)
    if self.gated:
        self.gated.pop(key, None)
    if self.scheduler_of:
        self.scheduler_of.pop(key, None)
    if self.not_preemptable:
        self.not_preemptable.pop(key, None)
    self._release(p)
    self._set_phase(p, phase)
    _release_if_idle(self, self.pod_gang[p])
    if phase == PHASE_FREE:
        del self.pod_index[key]
        self.pod_keys[p] = None
        self.pod_free.append(p)
        self.interpod.release_pod(p)
        self.pod_usage.pop(key, None)
        # (the slot's pod_class stays, as its other columns do, until it is reused)
        self.class_refs[self.pod_class[p]] -= 1
        if self.class_refs[self.pod_class[p]] == 0:
            self._release_class(self.pod_class[p])
    return 0

cdef int _pod_updated(ClusterState self, dict data) except -1:
    # esched.pod.updated: the new value of the fields kube lets change on a
    # Pending pod that esched reads; today spec.schedulingGates, which may only
    # lose gates (kube's pod update validation refuses adding one). An absent or
    # empty list removes every gate: the pod becomes schedulable work.
    key = _meta_key(data.get("metadata") or {})
    if _pod_in_phase(self, key, PHASE_PENDING, "update_not_pending") < 0:
        return 0
    spec = data.get("spec") or {}
    new = _gate_names(spec.get("schedulingGates"))
    old = self.gated.get(key, ())
    if not set(new) <= set(old):
        self._anomaly("scheduling_gate_added")
        return 0
    if new:
        self.gated[key] = new
    else:
        self.gated.pop(key, None)
    return 0

cdef int _podgroup(ClusterState self, dict pg) except -1:
    # The bytes path (_fold_bytes._payload_podgroup) decodes only what this reads:
    # metadata name and namespace, spec queue, minResources, minMember,
    # priorityClassName and minTaskMember; a new read goes there too. ``spec`` may be
    # shared by PodGroups of the same spec bytes (that path's memo): only read here.
    # (Typed: a body that is not an object is malformed here as in _meta_key.)
    cdef dict meta = pg.get("metadata") or {}
    cdef dict spec = pg.get("spec") or {}
    key = _meta_key(meta)
    return set_podgroup(self, key, podgroup_entry(self, spec))

cdef tuple podgroup_entry(ClusterState self, dict spec, dict min_resources=None):
    # What a PodGroup's spec sets on its gang, apart from the key: (queue, whether
    # it was set, minMember, priorityClassName, minResources in units, minTaskMember,
    # the gang metadata of all of them or None). Read only by set_podgroup, so the
    # bytes path keeps one per Job spec (_payload_job) and a Job of a known spec
    # parses nothing and makes no dict.
    # ``min_resources``: spec.minResources in units where the caller has them.
    queue_set = bool(spec.get("queue"))
    queue = spec.get("queue") or _DEFAULT_QUEUE
    if min_resources is None:
        min_resources = self._resource_list(spec.get("minResources"), "spec.minResources")
    # 0 is kept: Volcano's JobInfo.SetPodGroup takes spec.minMember as it is, and a job
    # of minAvailable 0 is ready with none of its pods (no gang; per-task minimums not
    # checked, being above it). Absent (refused at ingest): 1, as for a gang without a
    # PodGroup.
    min_member = spec.get("minMember")
    min_member = 1 if min_member is None else int(min_member)
    tasks = spec.get("minTaskMember") or {}
    pcn = spec.get("priorityClassName")
    # The gang metadata, made once per entry: every gang of this PodGroup spec holds
    # the same dict (read only, as every reader of gang_meta takes it: a one-pod
    # Job's gang makes no dict of its own). Its minTaskMember is a copy of the spec's
    # (which the caller may keep); one that is not an object is left to set_podgroup,
    # whose dict() refuses it after the gang's minimum is set, as before.
    meta = (_podgroup_meta(queue, queue_set, pcn, min_resources, PyDict_Copy(tasks))
            if type(tasks) is dict else None)
    return (queue, queue_set, min_member, pcn, min_resources, tasks, meta)

cdef int set_podgroup(ClusterState self, str key, tuple entry) except -1:
    # The gang ``key`` as the PodGroup of podgroup_entry ``entry`` declares it.
    queue = entry[0]
    self._queue(queue)
    cdef dict meta = <dict>entry[6]
    # (a new gang is created with its metadata: no placeholder made and dropped)
    cdef Py_ssize_t g = self._gang(key, queue, meta)
    self.gang_min[g] = entry[2]
    if meta is None:
        # (after the gang and its minimum: a minTaskMember dict() refuses leaves them set)
        meta = _podgroup_meta(queue, entry[1], entry[3], entry[4], dict(entry[5]))
    self.gang_meta[g] = meta
    return 0

cdef inline dict _podgroup_meta(object queue, object queue_set, object pcn,
                                dict min_resources, dict tasks):
    # A PodGroup's gang metadata (podgroup_entry's parts), ``tasks`` its
    # minTaskMember (Volcano's per-task minimum, task name -> members, checked when
    # planning).
    # (sized for its six members: no resize on the sixth)
    cdef dict meta = _PyDict_NewPresized(6)
    meta["queue"] = queue
    meta["queue_set"] = queue_set
    meta["priorityClassName"] = pcn
    meta["minResources"] = min_resources
    meta["podGroup"] = True
    meta["minTaskMember"] = tasks
    return meta

cdef bint job_implies_podgroup(ClusterState self, str key):
    # Whether the Job ``key`` folded now implies its PodGroup and, marked by ingest,
    # its first pods (volcano_first_pods): unless a PodGroup declared its gang already (the Job's
    # first submission implied it, or a PodGroup was recorded; the job fold,
    # JobBook, keeps the same rule). A Job published again implies nothing:
    # unchanged or a refused update changes no PodGroup, and whether an accepted
    # update re-creates it depends on the job's phase, which only the job fold knows
    # (the job controller records that PodGroup, and every pod but the first ones).
    g = self.gang_index.get(key)
    return g is None or not (<dict>self.gang_meta[<Py_ssize_t>g]).get("podGroup")

cdef int _job_submitted(ClusterState self, dict job, bint pods) except -1:
    # A Volcano Job's PodGroup and, ``pods`` (ingest marked the Job:
    # _ev.implies_pods), its first pods, as Volcano's controller creates them on the
    # Job's submission (volcano_podgroup, volcano_first_pods: the one builders):
    # folded here rather than recorded. A Job not marked (stored before ingest
    # marked Jobs) implies no pod: the job controller recorded them. In a log
    # written when the controller recorded the PodGroup, a recorded one equal to it
    # sets the gang to what it is already, and so does a recorded pod equal to one
    # implied (a Pending pod submitted again with the same content). The pods are
    # built before anything is set: a Job they cannot be built of changes nothing.
    if job_implies_podgroup(self, _meta_key(job.get("metadata") or {})):
        first = volcano_first_pods(job) if pods else ()
        _podgroup(self, volcano_podgroup(job))
        for _task, _i, pod, _bare in first:
            _pod_submitted(self, <dict>pod)
    return 0

cdef int _priority_class(ClusterState self, dict pc) except -1:
    # As kube's Priority admission: a class applies to pods submitted after it
    # (a pod's priority is fixed when it is submitted, by its equivalence class).
    name = (pc.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        self._anomaly("malformed")
        return 0
    self.priority_classes[name] = {
        "value": int(pc.get("value", 0)),
        "globalDefault": bool(pc.get("globalDefault", False)),
        "preemptionPolicy": pc.get("preemptionPolicy") or "PreemptLowerPriority",
    }
    self._clear_spec_memo()  # classes cached per pod spec carry the old priority
    return 0

cdef int _namespace(ClusterState self, dict ns, bint deleted) except -1:
    # A Namespace's labels, read by pod (anti-)affinity terms' namespaceSelector.
    name = (ns.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        self._anomaly("malformed")
        return 0
    labels = {} if deleted else (ns.get("metadata") or {}).get("labels") or {}
    labels = {str(k): str(v) for k, v in labels.items()}
    if labels == self.namespace_labels.get(name, {}):
        return 0  # nothing a selector reads changed
    if labels:
        self.namespace_labels[name] = labels
    else:
        self.namespace_labels.pop(name, None)
    self.interpod.namespace_changed(name)
    return 0

cdef int _queue_upsert(ClusterState self, dict queue) except -1:
    name = (queue.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        self._anomaly("malformed")
        return 0
    spec = queue.get("spec") or {}
    meta = {
        "state": (queue.get("status") or {}).get("state") or "Open",
        "weight": int(spec.get("weight", 1)),
        "priority": int(spec.get("priority", 0)),
        "reclaimable": bool(spec.get("reclaimable", True)),
        "parent": spec.get("parent"),
        "capability": resource_list(spec.get("capability"), "spec.capability"),
        "deserved": resource_list(spec.get("deserved"), "spec.deserved"),
        "guarantee": resource_list(
            (spec.get("guarantee") or {}).get("resource"), "spec.guarantee.resource"
        ),
        # {"required", "preferred", "anti"}: node groups (label volcano.sh/nodegroup-name)
        "affinity": node_group_terms(spec.get("affinity")),
    }
    # Volcano's hdrf annotations, read only under --queue-hierarchy annotations
    # (core/queues.py hierarchy_specs); kept as written.
    notes = (queue.get("metadata") or {}).get("annotations") or {}
    for key, field in (
        ("volcano.sh/hierarchy", "hierarchy"),
        ("volcano.sh/hierarchy-weights", "hierarchy_weights"),
    ):
        if isinstance(notes.get(key), str):
            meta[field] = notes[key]
    self.queue_meta[self._queue(name)] = meta
    self._clear_spec_memo()  # classes cached per queue may depend on its affinity
    return 0

cdef int _committed(ClusterState self, dict data) except -1:
    # Resolve every binding before changing anything, so a malformed body has no effect.
    resolved = []
    cdef dict b
    for binding in data.get("bindings") or ():
        b = binding
        _resolve_binding(self, b["pod"], b["node"], b.get("resources"), None, resolved,
                              b.get("devices"))
    return _bind_resolved(self, resolved)

cdef int _resolve_binding(ClusterState self, object pod, object node, object resources, list memo,
                          list resolved, object devices=None) except -1:
    # One binding of a commit, checked against the state and appended to
    # ``resolved`` as (pod slot, node slot, [(column, units)], has pods, GPU
    # device bits: the binding's "devices" indices, 0 without), or
    # counted as an anomaly. memo: the bytes path's cache of these columns for
    # one resources object's bytes ([columns, has pods], filled on first use,
    # when the dict path would register the same resources).
    pidx = self.pod_index.get(pod)
    nidx = self.node_index.get(node)
    if pidx is None:
        self._anomaly("commit_unknown_pod")
        return 0
    if nidx is None:
        self._anomaly("commit_unknown_node")
        return 0
    if self.pod_phase[<Py_ssize_t>pidx] != PHASE_PENDING:
        self._anomaly("commit_pod_not_pending")
        return 0
    dev = device_bits(devices) if devices is not None else 0
    if memo is not None and memo[0] is not None:
        resolved.append((pidx, nidx, memo[0], memo[1], dev))
        return 0
    cdef dict res = resources or {}
    cdef list cols = []
    cdef bint in_range = True
    for rname, u in res.items():
        # Every name is registered, as before the check moved into this loop.
        column = self._resource(rname)
        units = int(u)
        in_range &= _unit_in_range(units)
        cols.append((column, units))
    if not in_range:
        self._anomaly("commit_bad_resources")
        return 0
    has_pods = "pods" in res
    if memo is not None:
        memo[0] = cols
        memo[1] = has_pods
    resolved.append((pidx, nidx, cols, has_pods, dev))
    return 0

cdef int _bind_resolved(ClusterState self, list resolved) except -1:
    # The bindings _resolve_binding accepted, in order.
    cdef Py_ssize_t p, n, r
    for pidx, nidx, cols, has_pods, dev in resolved:
        p = pidx
        n = nidx
        if self.pod_phase[p] != PHASE_PENDING:
            # The same pod twice in one commit: the first binding wins.
            self._anomaly("commit_pod_not_pending")
            continue
        for r in range(self.n_res):
            self.pod_alloc[p, r] = 0
        for r, units in cols:
            self.pod_alloc[p, r] = units
        _bind_allocated(self, p, n, has_pods, dev)
    return 0

cdef int _bind_allocated(ClusterState self, Py_ssize_t p, Py_ssize_t n, bint has_pods,
                         long long dev) except -1:
    # One accepted binding of Pending pod p to node n, whose resources are already
    # in pod_alloc[p] (zero elsewhere): _bind_resolved's and _commit_one's tail.
    cdef Py_ssize_t r
    if not has_pods:
        # A bound pod always takes one of the node's pod slots.
        self.pod_alloc[p, COL_PODS] = 1
    if not self._charge_fits(p, n):
        for r in range(self.n_res):
            self.pod_alloc[p, r] = 0
        self._anomaly("overflow")
        return 0
    self._bind(p, n)
    self.pod_dev[p] = dev
    self._set_phase(p, PHASE_RUNNING)
    if self.claims_journal is not None:
        _journal(self, CLAIM_BOUND, self.pod_keys[p])
    if self.reservations and self.pod_gang[p] >= 0:
        # A reserved gang that got placed gives its nodes back.
        gkey = self.gang_keys[self.pod_gang[p]]
        if gkey in self.reservations:
            _release_reservation(self, gkey)
    return 0

cdef int _evicted(ClusterState self, dict data) except -1:
    cdef Py_ssize_t p = _pod_in_phase(self, data.get("pod"), PHASE_RUNNING, "evict_not_running")
    if p < 0:
        return 0
    self._release(p)
    self._set_phase(p, PHASE_PENDING)
    if self.claims_journal is not None:
        _journal(self, CLAIM_RELEASED, self.pod_keys[p])
    return 0

cdef int _rejected(ClusterState self, dict data) except -1:
    # Refused at admission (quota, closed queue): a Pending pod becomes Failed.
    cdef Py_ssize_t p = _pod_in_phase(self, data.get("pod"), PHASE_PENDING, "reject_not_pending")
    if p < 0:
        return 0
    self._set_phase(p, PHASE_FAILED)
    _release_if_idle(self, self.pod_gang[p])
    if self.claims_journal is not None:
        _journal(self, CLAIM_RELEASED, self.pod_keys[p])
    return 0

cdef int _gang_reserved(ClusterState self, dict data) except -1:
    # Nodes held for a starving gang: only its members may be bound there until it
    # is placed (see _committed) or has no pending member left (_pod_finished).
    gang = data.get("gang")
    g = self.gang_index.get(gang)
    if g is None:
        self._anomaly("reserve_unknown_gang")
        return 0
    if self.gang_counts[<Py_ssize_t>g, PHASE_PENDING] == 0:
        self._anomaly("reserve_nothing_pending")
        return 0
    if self.reservations and gang not in self.reservations:
        # One gang at a time: replicas racing to reserve are ordered by the log.
        self._anomaly("reserve_busy")
        return 0
    held = self.reservations.setdefault(gang, [])
    cdef Py_ssize_t n
    for name in data.get("nodes") or ():
        idx = self.node_index.get(name)
        if idx is None or name in self.reserved_nodes:
            self._anomaly("reserve_node_unavailable")
            continue
        n = idx
        held.append(name)
        self.reserved_nodes[name] = gang
        self.version[n] += 1
    if not held:
        del self.reservations[gang]
    return 0

cdef void _release_reservation(ClusterState self, str gang):
    for name in self.reservations.pop(gang, ()):
        self.reserved_nodes.pop(name, None)
        idx = self.node_index.get(name)
        if idx is not None:
            self.version[<Py_ssize_t>idx] += 1

cdef void _release_if_idle(ClusterState self, Py_ssize_t g):
    # Nothing of a reserved gang waits any more: its reservation would idle nodes.
    if self.reservations and g >= 0 and self.gang_counts[g, PHASE_PENDING] == 0:
        _release_reservation(self, self.gang_keys[g])

# ------------------------------------------------------------------ the fold

cdef int _apply(ClusterState self, dict event) except -1:
    etype = event.get("type")
    slot = _TYPE_SLOT.get(etype)
    if slot is None:
        if type(etype) is not str:
            # (no type, or not a string: counted by its JSON text, so the counts stay
            # a snapshot's string keys)
            etype = orjson.dumps(etype).decode()
        self._unknown_counts[etype] = self._unknown_counts.get(etype, 0) + 1
        self._anomaly("unknown_type")
        return 0
    self.type_counts[<int>slot] += 1
    cdef int code = _SLOT_CODE[<int>slot]
    if code == EV_USAGE:
        self._usage_time = event.get("time")  # the log's clock (_usage_nodes)
    # (a Job's marker, the envelope's: _job_submitted)
    _apply_data(self, code, event.get("data"), code == EV_JOB and _ev.implies_pods(event))
    if code == EV_USAGE:
        # The pods[] part (reservations), on the log's clock: the event's time.
        data = event.get("data")
        if isinstance(data, dict) and data.get("pods"):
            try:
                now = event_seconds(event.get("time"))
                _usage_pods(self, data["pods"], self.clock if now is None else now)
            except _MALFORMED:
                self._anomaly("malformed")
    return 0

cdef int _apply_data(ClusterState self, int code, object data, bint pods) except -1:
    # The dispatch on the event's code, for the dict path (_apply); the bytes
    # path's _payload_* call the same handlers (their keyed forms: _pod_submit,
    # _pod_finish, _resolve_binding + _bind_resolved). ``pods``: a Job that implies
    # its first pods (_job_submitted).
    if code == EV_NOOP:
        return 0
    if not isinstance(data, dict):
        self._anomaly("malformed")
        return 0
    try:
        if code == EV_POD_SUBMITTED:
            _pod_submitted(self, data)
        elif code == EV_COMMITTED:
            _committed(self, data)
        elif code == EV_POD_SUCCEEDED:
            _pod_finished(self, data, PHASE_SUCCEEDED)
        elif code == EV_POD_FAILED:
            _pod_finished(self, data, PHASE_FAILED)
        elif code == EV_POD_DELETED:
            _pod_finished(self, data, PHASE_FREE)
        elif code == EV_POD_UPDATED:
            _pod_updated(self, data)
        elif code == EV_NODE_UPSERT:
            _node_upsert(self, data)
        elif code == EV_NODE_REMOVED:
            _node_removed(self, data)
        elif code == EV_REJECTED:
            _rejected(self, data)
        elif code == EV_EVICTED:
            _evicted(self, data)
        elif code == EV_GANG_RESERVED:
            _gang_reserved(self, data)
        elif code == EV_USAGE:
            _usage_nodes(self, data.get("nodes"))  # pods[]: _usage_pods, from _apply
        elif code == EV_PODGROUP:
            _podgroup(self, data)
        elif code == EV_JOB:
            _job_submitted(self, data, pods)
        elif code == EV_QUEUE:
            _queue_upsert(self, data)
        elif code == EV_PRIORITYCLASS:
            _priority_class(self, data)
        elif code == EV_NAMESPACE or code == EV_NAMESPACE_DELETED:
            _namespace(self, data, code == EV_NAMESPACE_DELETED)
    except _MALFORMED:
        self._anomaly("malformed")
    return 0

cdef int _apply_any(ClusterState self, object event) except -1:
    # An envelope that is not a JSON object is an event the fold cannot apply.
    if type(event) is not dict:
        self._anomaly("undecodable")
        return 0
    return _apply(self, <dict>event)
