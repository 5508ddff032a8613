"""The fold's bytes path: stored envelope bytes straight into the fold's handlers.

:meth:`ClusterState.apply_payloads` calls :func:`_apply_payload` per payload. The
bulk event types (pod submitted and finished, placements committed) are decoded
into just the fields their handlers (``_fold``) read, without a dict per JSON
object; the common commit (one binding of a Pending pod, integer resources) is
folded by :func:`_commit_one` without a Python object per binding. Everything
else, and anything the scanner (``_envelope.pxd``) does not vouch for, takes the
dict path. The functions are the methods they were, on the state (``self``).

Like ``_fold``, this module knows the class only through ``_state.pxd``.
"""

import orjson

from esched.schemas import events as _ev
from esched.schemas.quantity import MAX_BASE_UNITS

from esched.core._fold import _MALFORMED, GANG_SIZE_ANNOTATION
from esched.schemas.objects import (
    DEFAULT_QUEUE, GANG_ANNOTATIONS, PREEMPTABLE_KEY, QUEUE_ANNOTATIONS,
)

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeASCII
from libc.stdint cimport uint64_t
from libc.string cimport memcmp, memcpy

cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void* PyUnicode_DATA(object text)
    bint PyUnicode_IS_COMPACT_ASCII(object text)
    Py_ssize_t PyUnicode_GET_LENGTH(object text)

from esched.core._envelope cimport (
    DATA_BINDINGS, DATA_METADATA, DATA_SPEC, N_DATA_MEMBERS, Span, after_quote, next_element,
    next_key, next_member, scan_envelope, skip_accepted, skip_value, skip_ws, span_is,
)
from esched.core._job_row cimport job_spec_shape
from esched.core._quantity cimport esched_quantity_units
from esched.core._fold cimport (
    _apply_any, _bind_allocated, _bind_resolved, _pod_finish, _pod_submit,
    _podgroup, _resolve_binding, job_implies_podgroup, noop_slots, podgroup_entry,
    set_podgroup, type_slot,
)
from esched.core._state cimport COL_PODS, MEMO_LIMIT, ClusterState
from esched.schemas._requests cimport PodSum, new_sum
from esched.schemas.manifests import volcano_first_pods, volcano_pod_labels, volcano_podgroup
from esched.core._types cimport PHASE_FAILED, PHASE_FREE, PHASE_PENDING, PHASE_SUCCEEDED, units_t

# ClusterState.apply_payloads is the fold's entry point; committed_proposal reads a
# stored decision for a replica with the same scanner.
__all__ = ["committed_proposal", "job_fold_parts"]

# The per-entry limit of the tables (see _state.pyx's _MAX_UNITS).
cdef units_t _MAX_UNITS = MAX_BASE_UNITS

# Resources of one binding the fold's common-commit path (_commit_one) takes; more go
# the general way.
cdef enum:
    MAX_FAST_RESOURCES = 16

cdef bytes _B_POD_SUBMITTED = _ev.POD_SUBMITTED.encode()
cdef bytes _B_PLACEMENT_COMMITTED = _ev.PLACEMENT_COMMITTED.encode()
cdef bytes _B_POD_SUCCEEDED = _ev.POD_SUCCEEDED.encode()
cdef bytes _B_POD_FAILED = _ev.POD_FAILED.encode()
cdef bytes _B_POD_DELETED = _ev.POD_DELETED.encode()
cdef bytes _B_PODGROUP_SUBMITTED = _ev.PODGROUP_SUBMITTED.encode()
cdef bytes _B_JOB_SUBMITTED = _ev.JOB_SUBMITTED.encode()
# Ingest's marker on a Job that implies its first pods, and its value as JSON.
cdef bytes _B_IMPLIES = _ev.IMPLIES.encode()
cdef bytes _B_IMPLIES_PODS = b'"' + _ev.IMPLIES_PODS.encode() + b'"'
cdef int _SLOT_POD_SUBMITTED = type_slot(_ev.POD_SUBMITTED)
cdef int _SLOT_PLACEMENT_COMMITTED = type_slot(_ev.PLACEMENT_COMMITTED)
cdef int _SLOT_POD_SUCCEEDED = type_slot(_ev.POD_SUCCEEDED)
cdef int _SLOT_POD_FAILED = type_slot(_ev.POD_FAILED)
cdef int _SLOT_POD_DELETED = type_slot(_ev.POD_DELETED)
cdef int _SLOT_PODGROUP_SUBMITTED = type_slot(_ev.PODGROUP_SUBMITTED)
cdef int _SLOT_JOB_SUBMITTED = type_slot(_ev.JOB_SUBMITTED)
# The types whose events the fold only counts (see noop_slots).
cdef dict _NOOP_SLOT = noop_slots()
# The resource names of nearly every request, as _plain_requests keys them.
cdef str _CPU = "cpu"
cdef str _MEMORY = "memory"
# (a module attribute lookup per call otherwise)
cdef object _loads = orjson.loads
# A PodGroup's spec as _payload_podgroup decodes it, by the spec object's bytes: a
# pure function of them, so one memo serves every state; Volcano Jobs of one shape
# have PodGroups of the same spec.
cdef dict _GROUP_SPECS = {}
# What the PodGroup a Volcano Job implies sets on its gang (_fold.podgroup_entry of
# volcano_podgroup's spec), by the Job spec's bytes: a function of them alone; Jobs
# of one shape share it, in every state of the process. A state that finds a spec
# another state entered (one restored from a snapshot, a second replica's) gets the
# same gang, but its own spec memo does not foresee the pods' spec
# (_expect_pod_spec): the first pod of each spec reads its spec, then the memo has
# it. Kept so: foreseeing would walk the Job's templates again, what this spares,
# and a restored state in the process folds a tail of known Jobs in fewer
# instructions than in a new process (tests/core/test_job_spec_memo_states.py).
cdef dict _JOB_GROUP_SPECS = {}
# What the first pods a Volcano Job implies (volcano_first_pods) are built of, by the
# Job spec's bytes: the spec decoded (read only: the pods share its objects) and the
# bytes of each task's pod spec by task name (the spec memo's key for their class).
cdef dict _JOB_POD_SPECS = {}
# Below this, a sum of units written as _job_spec_parts writes it parses back to
# itself (core/_quantity.pxd reads up to 18 digits exactly).
cdef object _EXACT_UNITS = 10**17


cdef inline str _ascii_string(const unsigned char* b, Span s):
    # A string value's span includes its quotes; accepted strings are ASCII without
    # escapes, so the bytes between them are the value (copied into a new ASCII str:
    # no decoder to run over them).
    cdef Py_ssize_t length = s.end - s.start - 2
    text = PyUnicode_New(length, 127)
    memcpy(PyUnicode_DATA(text), b + s.start + 1, length)
    return text


cdef inline object _value(const unsigned char* b, Span s):
    # Any other value the handlers read: orjson decodes just its bytes, which gives
    # what decoding the whole envelope would have put there.
    cdef units_t u
    if b[s.start] == 0x22:
        return _ascii_string(b, s)
    if 0x30 <= b[s.start] <= 0x39:
        u = _digits(b, s)  # a plain non-negative integer: what orjson gives, no call
        if u >= 0:
            return u
    return _loads(PyBytes_FromStringAndSize(<const char*>b + s.start, s.end - s.start))


cdef object _flat_value(const unsigned char* b, Py_ssize_t n, Span s):
    # _value of an object whose members are strings or plain non-negative integers
    # (labels, annotations, a PodGroup's minResources and minTaskMember), built
    # without a call into orjson (its cost per call is most of decoding a small
    # object); any other value is _value's. Keys and strings are ASCII without
    # escapes (the scanner vouched), so their bytes are their values; a repeated key
    # keeps its last value, as orjson does.
    cdef Span k, v
    cdef Py_ssize_t i = s.start
    cdef units_t u
    if b[s.start] != 0x7b:
        return _value(b, s)
    out = {}
    while True:
        i = next_member(b, i, n, &k, &v)
        if i < 0:
            return out
        if b[v.start] == 0x22:
            value = _ascii_string(b, v)
        else:
            u = _digits(b, v)
            if u < 0:
                return _value(b, s)
            value = u
        out[PyUnicode_DecodeASCII(<const char*>b + k.start, k.end - k.start, NULL)] = value


# The annotations the fold reads of a pod (_fold's _volcano_keys and gang size): a
# pod's other annotations (a Volcano Job's pods carry six) are never made into strs.
cdef tuple _FOLD_ANNOTATIONS = (
    *QUEUE_ANNOTATIONS, *GANG_ANNOTATIONS, PREEMPTABLE_KEY, GANG_SIZE_ANNOTATION)
cdef enum:
    N_FOLD_ANNOTATIONS = 6
assert len(_FOLD_ANNOTATIONS) == N_FOLD_ANNOTATIONS
# Their bytes, compared in C (kept alive by the tuple).
cdef tuple _FOLD_ANNOTATION_BYTES = tuple(name.encode("ascii") for name in _FOLD_ANNOTATIONS)
cdef const char* _ANNOTATION_PTR[N_FOLD_ANNOTATIONS]
cdef Py_ssize_t _ANNOTATION_LEN[N_FOLD_ANNOTATIONS]
for _j, _raw in enumerate(_FOLD_ANNOTATION_BYTES):
    _ANNOTATION_PTR[_j] = PyBytes_AS_STRING(_raw)
    _ANNOTATION_LEN[_j] = PyBytes_GET_SIZE(_raw)


cdef object _fold_annotations(const unsigned char* b, Py_ssize_t n, Span s):
    # A pod's annotations as _flat_value decodes them, with only the _FOLD_ANNOTATIONS
    # members (in member order, the last of a repeated key kept); a value that is not
    # an object is _value's, whole, for the handler to read as the dict path does.
    cdef Span k, v
    cdef Py_ssize_t i = s.start, j
    cdef units_t u
    if b[s.start] != 0x7b:
        return _value(b, s)
    out = {}
    while True:
        i = next_member(b, i, n, &k, &v)
        if i < 0:
            return out
        for j in range(N_FOLD_ANNOTATIONS):
            if span_is(b, k, _ANNOTATION_PTR[j], _ANNOTATION_LEN[j]):
                break
        else:
            continue
        name = _FOLD_ANNOTATIONS[j]
        if b[v.start] == 0x22:
            out[name] = _ascii_string(b, v)
        else:
            u = _digits(b, v)
            out[name] = u if u >= 0 else _value(b, v)


cdef object _scan_meta(const unsigned char* b, Py_ssize_t n, Span obj):
    # A pod's metadata as the handlers read it: name, namespace, labels and
    # annotations (queue and gang come from those); only the keys present.
    cdef Span k, v
    cdef Py_ssize_t i = obj.start
    meta = {}
    while True:
        i = next_member(b, i, n, &k, &v)
        if i < 0:
            break
        if span_is(b, k, b"name", 4):
            meta["name"] = _value(b, v)
        elif span_is(b, k, b"namespace", 9):
            meta["namespace"] = _value(b, v)
        elif span_is(b, k, b"labels", 6):
            meta["labels"] = _flat_value(b, n, v)
        elif span_is(b, k, b"annotations", 11):
            meta["annotations"] = _fold_annotations(b, n, v)
        elif span_is(b, k, b"ownerReferences", 15):
            # (the controller: default topology spread constraints)
            meta["ownerReferences"] = _value(b, v)
    return meta


# The pod key rule (schemas.events.namespaced_key) on the raw bytes, on the same
# constant; tests/core/test_fold.py checks all three builders agree.
cdef bytes _DEFAULT_NS_BYTES = _ev.DEFAULT_NAMESPACE.encode("ascii")


cdef str _pod_key(const unsigned char* b, Span namespace, Span name):
    # _meta_key as the handlers build a pod's key, from the raw spans of two string
    # values (start -1: absent), without a str for either: accepted strings are
    # ASCII without escapes, so the key's bytes are theirs.
    cdef const char* ns = _DEFAULT_NS_BYTES
    cdef Py_ssize_t ns_len = len(_DEFAULT_NS_BYTES), name_len = 0
    if namespace.start >= 0 and namespace.end - namespace.start > 2:
        ns = <const char*>b + namespace.start + 1
        ns_len = namespace.end - namespace.start - 2
    if name.start >= 0:
        name_len = name.end - name.start - 2
    key = PyUnicode_New(ns_len + 1 + name_len, 127)
    cdef char* out = <char*>PyUnicode_DATA(key)
    memcpy(out, ns, ns_len)
    out[ns_len] = 0x2f  # /
    if name_len:
        memcpy(out + ns_len + 1, b + name.start + 1, name_len)
    return key


cdef bint _meta_members(const unsigned char* b, Py_ssize_t n, Span obj, Span* name,
                        Span* namespace) noexcept:
    # The spans of a metadata object's name and namespace (start -1: absent, the last
    # of each as orjson keeps); whether it has labels or annotations too (which decide
    # a pod's queue and gang).
    cdef Span k, v
    cdef Py_ssize_t i = obj.start
    cdef bint extra = False
    name.start = namespace.start = -1
    while True:
        i = next_member(b, i, n, &k, &v)
        if i < 0:
            return extra
        if span_is(b, k, b"name", 4):
            name[0] = v
        elif span_is(b, k, b"namespace", 9):
            namespace[0] = v
        elif span_is(b, k, b"labels", 6) or span_is(b, k, b"annotations", 11):
            extra = True


cdef str _scan_key(const unsigned char* b, Py_ssize_t n, Span obj, bint* extra):
    # A pod's key from its metadata object, if name and namespace are strings (or
    # absent); None otherwise (the dict path builds it). ``extra``: metadata also has
    # labels or annotations (which decide a pod's queue and gang).
    cdef Span name, namespace
    extra[0] = _meta_members(b, n, obj, &name, &namespace)
    if (name.start >= 0 and b[name.start] != 0x22) or (
            namespace.start >= 0 and b[namespace.start] != 0x22):
        return None
    return _pod_key(b, namespace, name)


cdef Py_ssize_t _member(const unsigned char* b, Py_ssize_t n, Py_ssize_t i, const char* name,
                        Py_ssize_t length, Span* found) noexcept:
    # The raw span of member ``name`` of the accepted object at ``i`` (the last one,
    # as orjson keeps); returns its first byte, or -1 when absent.
    cdef Span k, v
    found.start = -1
    while True:
        i = next_member(b, i, n, &k, &v)
        if i < 0:
            return found.start
        if span_is(b, k, name, length):
            found[0] = v


cdef inline units_t _digits(const unsigned char* b, Span v) noexcept:
    # An accepted value that is a plain non-negative integer (digits only: the
    # scanner allows at most 18, so it fits), or -1 for any other value.
    cdef Py_ssize_t i
    cdef units_t u = 0
    if v.end <= v.start:
        return -1
    for i in range(v.start, v.end):
        if not 0x30 <= b[i] <= 0x39:
            return -1
        u = u * 10 + (b[i] - 0x30)
    return u


def _py_scanner_accepts(bytes payload) -> bool:
    """Test hook: does the envelope scanner (``_envelope.pxd``) accept ``payload``?"""
    cdef Span t, d
    return scan_envelope(<const unsigned char*>PyBytes_AS_STRING(payload),
                         PyBytes_GET_SIZE(payload), &t, &d)


def _py_job_group_spec(ClusterState state, bytes payload) -> object:
    """Test hook: the PodGroup spec the bytes path derives itself from the
    ``esched.job.submitted`` envelope ``payload`` (:func:`_job_spec_parts`), or None
    where it leaves the Job to ``volcano_podgroup``."""
    parts = _py_job_spec_parts(state, payload, True, False)
    return None if parts is None else parts[0]


def _py_job_first_pods(ClusterState state, bytes payload) -> object:
    """Test hook: what the bytes path reads itself of the first pods of the
    ``esched.job.submitted`` envelope ``payload`` (:func:`_job_spec_parts`): (queue,
    ((task name, replicas, the pods' spec bytes), ...)), or None where it leaves them to
    ``volcano_first_pods``."""
    parts = _py_job_spec_parts(state, payload, False, True)
    return None if parts is None else parts[1]


cdef object _py_job_spec_parts(ClusterState state, bytes payload, bint group, bint pods):
    # The test hooks' _job_spec_parts of the Job spec in the envelope ``payload``;
    # None when the envelope holds no Job spec object.
    cdef Span t, d, meta, spec
    cdef const unsigned char* b = <const unsigned char*>PyBytes_AS_STRING(payload)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(payload)
    if not scan_envelope(b, n, &t, &d) or d.start < 0 or b[d.start] != 0x7b:
        return None
    _meta_and_spec(b, n, d.start, &meta, &spec)
    if spec.start < 0 or b[spec.start] != 0x7b:
        return None
    return _job_spec_parts(state, b, n, spec, group, pods)


def _py_spec_memo_holds(ClusterState state, bytes spec) -> bool:
    """Test hook: does ``state``'s spec memo hold a pod spec of bytes ``spec`` (a
    submission of that spec would find it, and its span be proven by it)?"""
    cdef Span s
    cdef uint64_t h
    s.start = 0
    s.end = PyBytes_GET_SIZE(spec)
    return _spec_lookup(state, <const unsigned char*>PyBytes_AS_STRING(spec), s, &h) is not None


def committed_proposal(object payload) -> object:
    """The proposal id (``data.proposal``, a string) of a stored
    ``esched.placement.committed`` envelope, read off its bytes as the fold reads
    them; None for any other payload, type or shape (decode those)."""
    cdef Span t, d, v
    if type(payload) is not bytes:
        return None
    cdef const unsigned char* b = <const unsigned char*>PyBytes_AS_STRING(payload)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(payload)
    if not (scan_envelope(b, n, &t, &d) and t.start >= 0 and d.start >= 0
            and b[t.start] == 0x22 and b[d.start] == 0x7b):
        return None
    t.start += 1
    t.end -= 1
    if (not span_is(b, t, _B_PLACEMENT_COMMITTED, len(_B_PLACEMENT_COMMITTED))
            or _member(b, n, d.start, b"proposal", 8, &v) < 0 or b[v.start] != 0x22):
        return None
    return _ascii_string(b, v)


cdef bytes _B_JOB_NAME_KEY = b'"volcano.sh/job-name"'


cdef inline int _two(const unsigned char* p) noexcept:
    # Two ASCII digits as a number, or -1.
    if not (0x30 <= p[0] <= 0x39 and 0x30 <= p[1] <= 0x39):
        return -1
    return (p[0] - 0x30) * 10 + (p[1] - 0x30)


cdef object _stamp(const unsigned char* b, Span s):
    # A time string as ev.timestamp writes it, YYYY-MM-DDTHH:MM:SS.ffffffZ, as the
    # float datetime.fromisoformat(...).timestamp() gives: its microseconds since the
    # epoch divided by 10**6, taken for years 1700 to 2200 (below 2**53, where a double
    # division rounds as Python's integer division does). Any other text: as a str,
    # for the job fold to parse.
    cdef const unsigned char* p = b + s.start + 1
    cdef int year, month, day, hour, minute, second, k, c
    cdef long long y, days, era, yoe, doy, doe, micro = 0, total
    if (s.end - s.start != 29 or p[4] != 0x2d or p[7] != 0x2d or p[10] != 0x54
            or p[13] != 0x3a or p[16] != 0x3a or p[19] != 0x2e or p[26] != 0x5a):
        return _ascii_string(b, s)
    year = _two(p) * 100 + _two(p + 2) if _two(p) >= 0 and _two(p + 2) >= 0 else -1
    month = _two(p + 5)
    day = _two(p + 8)
    hour = _two(p + 11)
    minute = _two(p + 14)
    second = _two(p + 17)
    for k in range(20, 26):
        c = p[k]
        if not 0x30 <= c <= 0x39:
            return _ascii_string(b, s)
        micro = micro * 10 + (c - 0x30)
    if (year < 1700 or year > 2200 or not 1 <= month <= 12 or day < 1 or hour < 0
            or hour > 23 or minute < 0 or minute > 59 or second < 0 or second > 59):
        return _ascii_string(b, s)
    if day > (29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
              if month == 2 else 30 if month in (4, 6, 9, 11) else 31):
        return _ascii_string(b, s)
    # Days since 1970-01-01 of the civil date (H. Hinnant's days_from_civil).
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    days = era * 146097 + doe - 719468
    total = ((days * 86400 + hour * 3600 + minute * 60 + second) * 1000000 + micro)
    return <double>total / 1e6


cdef bint _implies_pods(const unsigned char* b, Py_ssize_t n, Span d) noexcept:
    # Whether the accepted envelope ``b`` (its ``data`` at ``d``, which the walk jumps
    # over) is a Job ingest marked as implying its first pods: its last _ev.IMPLIES
    # member (as orjson keeps) is _ev.IMPLIES_PODS. The bytes side's one reading of
    # the marker, as _ev.implies_pods is the dict side's (an accepted envelope holds
    # no escape: its bytes are its keys and values).
    cdef Span k
    cdef bint found = False
    cdef Py_ssize_t start
    cdef Py_ssize_t i = skip_ws(b, 0, n)
    cdef Py_ssize_t vl = PyBytes_GET_SIZE(_B_IMPLIES_PODS)
    while True:
        i = next_key(b, i, n, &k)
        if i < 0:
            break
        start = i
        i = d.end if i == d.start else skip_accepted(b, i, n)
        if span_is(b, k, _B_IMPLIES, PyBytes_GET_SIZE(_B_IMPLIES)):
            found = (i - start == vl
                     and memcmp(b + start, PyBytes_AS_STRING(_B_IMPLIES_PODS), vl) == 0)
        i = skip_ws(b, i, n)
    return found


# The type names job_fold_parts answers with, bound once (not looked up in _ev each row).
cdef str _JOB_FOLD_PLACEMENT = _ev.PLACEMENT_COMMITTED
cdef str _JOB_FOLD_JOB = _ev.JOB_SUBMITTED
cdef str _JOB_FOLD_POD = _ev.POD_SUBMITTED


def job_fold_parts(object payload) -> object:
    """What the job fold (:class:`esched.core.jobs.JobBook`) reads of a stored
    envelope, off its bytes: ``(type, time, value)`` or None (decode it whole). The
    envelope accepted by the scanner, its ``type`` and ``time`` strings and its
    ``data`` an object: ``time`` is the float the job fold's clock reads of an
    ``ev.timestamp`` text (the text itself otherwise); ``value`` is, for ``esched.placement.committed``, the
    ``(pod, node)`` of each binding whose ``pod`` is a string (``node`` None unless a
    string; None in place of the list if one binding is not an object); for
    ``esched.job.submitted``, the Job's key, its :func:`esched.core.jobs.job_shape`
    read off the bytes (``core/_job_row.pyx``; None in place of the tuple where that
    reader declines) and whether ingest marked the Job as implying its first pods
    (:func:`esched.schemas.events.implies_pods`); for ``esched.pod.submitted``
    without ``"volcano.sh/job-name"`` in its bytes (no escapes: so no pod of a Job),
    None; any other type: None in place of the tuple."""
    cdef Span t, d, tm, k, v, e, pod, node, res, dev, meta, spec, name, namespace
    cdef Span members[N_DATA_MEMBERS]
    cdef Py_ssize_t i
    if type(payload) is not bytes:
        return None
    cdef const unsigned char* b = <const unsigned char*>PyBytes_AS_STRING(payload)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(payload)
    if not (scan_envelope(b, n, &t, &d, members) and t.start >= 0 and d.start >= 0
            and b[t.start] == 0x22 and b[d.start] == 0x7b):
        return None
    # The last ``time`` member (as orjson keeps), the walk jumping over ``data``,
    # whose span the scan noted: most of the bytes.
    tm.start = -1
    i = skip_ws(b, 0, n)
    while True:
        i = next_key(b, i, n, &k)
        if i < 0:
            break
        v.start = i
        i = d.end if i == d.start else skip_accepted(b, i, n)
        if span_is(b, k, b"time", 4):
            tm.start = v.start
            tm.end = i
        i = skip_ws(b, i, n)
    if tm.start < 0 or b[tm.start] != 0x22:
        return None
    t.start += 1
    t.end -= 1
    if span_is(b, t, _B_PLACEMENT_COMMITTED, len(_B_PLACEMENT_COMMITTED)):
        e = members[DATA_BINDINGS]
        if e.start < 0 or b[e.start] != 0x5b:
            return None  # absent, null or not a list: the dict path's to read
        out = []
        i = e.start
        while True:
            i = next_element(b, i, n, &e)
            if i < 0:
                break
            if b[e.start] != 0x7b:
                return None  # the dict path raises on it
            _binding_spans(b, n, e, &pod, &node, &res, &dev)
            if pod.start >= 0 and b[pod.start] == 0x22:
                out.append((_ascii_string(b, pod),
                            _ascii_string(b, node) if node.start >= 0 and b[node.start] == 0x22
                            else None))
        return _JOB_FOLD_PLACEMENT, _stamp(b, tm), out
    if span_is(b, t, _B_JOB_SUBMITTED, len(_B_JOB_SUBMITTED)):
        # The Job's key and shape (core/_job_row.pyx) off the bytes, its templates
        # not decoded; its metadata's name a string, its namespace a string, null or
        # absent, as _payload_job reads them.
        meta = members[DATA_METADATA]
        spec = members[DATA_SPEC]
        if meta.start < 0 or b[meta.start] != 0x7b or spec.start < 0 or b[spec.start] != 0x7b:
            return None
        _meta_members(b, n, meta, &name, &namespace)
        if name.start < 0 or b[name.start] != 0x22:
            return None
        if namespace.start >= 0 and b[namespace.start] != 0x22:
            if b[namespace.start] != 0x6e:  # null: the default namespace
                return None
            namespace.start = -1
        shape = job_spec_shape(b, n, spec)
        if shape is None:
            return None
        return (_JOB_FOLD_JOB, _stamp(b, tm),
                (_pod_key(b, namespace, name), shape, _implies_pods(b, n, d)))
    if span_is(b, t, _B_POD_SUBMITTED, len(_B_POD_SUBMITTED)) and _B_JOB_NAME_KEY not in payload:
        return _JOB_FOLD_POD, _stamp(b, tm), None
    return None


cdef inline void _binding_spans(const unsigned char* b, Py_ssize_t n, Span e, Span* pod,
                                Span* node, Span* res, Span* dev) noexcept nogil:
    # The members of one binding object ``e`` that a commit reads (start -1: absent),
    # for the general commit fold and its fast path alike.
    cdef Span bk, bv
    cdef Py_ssize_t m = e.start
    pod.start = node.start = res.start = dev.start = -1
    while True:
        m = next_member(b, m, n, &bk, &bv)
        if m < 0:
            break
        if span_is(b, bk, b"pod", 3):
            pod[0] = bv
        elif span_is(b, bk, b"node", 4):
            node[0] = bv
        elif span_is(b, bk, b"resources", 9):
            res[0] = bv
        elif span_is(b, bk, b"devices", 7):
            dev[0] = bv


cdef int _apply_payload(ClusterState self, bytes payload) except -1:
    # Decode a stored envelope straight into the handlers' input, for the event
    # types that make up the bulk of a log; everything else, and anything the
    # scanner does not vouch for (see _envelope.pxd), takes the dict path.
    cdef const unsigned char* b = <const unsigned char*>PyBytes_AS_STRING(payload)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(payload)
    cdef Span t, d, unchecked
    cdef Span members[N_DATA_MEMBERS]  # data's metadata, spec and bindings
    cdef int done = 0
    cdef uint64_t h = 0
    cdef tuple entry = None
    cdef object job_spec = None, job_entry = None
    cdef bint accepted = scan_envelope(b, n, &t, &d, members, &unchecked)
    # The spec the scan took unchecked (see scan_envelope): a submission's is proven
    # by the spec memo, whose entries hold bytes the scanner accepted as a spec (the
    # lookup _payload_submitted makes anyway), a Job's by the memo of Job specs, whose
    # keys are bytes the scanner accepted as a Job's spec (the lookup _payload_job
    # makes anyway, given the bytes object and its entry), any other by skip_value;
    # one it does not prove is scanned again with the rest.
    if accepted and unchecked.start >= 0:
        if (t.start >= 0 and b[t.start] == 0x22
                and t.end - t.start == len(_B_POD_SUBMITTED) + 2
                and memcmp(b + t.start + 1, <const char*>_B_POD_SUBMITTED, t.end - t.start - 2) == 0):
            entry = _spec_lookup(self, b, unchecked, &h)
        elif (t.start >= 0 and b[t.start] == 0x22
                and t.end - t.start == len(_B_JOB_SUBMITTED) + 2
                and memcmp(b + t.start + 1, <const char*>_B_JOB_SUBMITTED, t.end - t.start - 2) == 0):
            job_spec = PyBytes_FromStringAndSize(<const char*>b + unchecked.start,
                                                 unchecked.end - unchecked.start)
            job_entry = _JOB_GROUP_SPECS.get(job_spec)
        if (entry is None and job_entry is None
                and skip_value(b, unchecked.start, n, 2) != unchecked.end):
            job_spec = None
            unchecked.start = -1
            accepted = scan_envelope(b, n, &t, &d, members)
    if (accepted and t.start >= 0 and d.start >= 0
            and b[t.start] == 0x22 and b[d.start] == 0x7b):
        t.start += 1
        t.end -= 1
        if span_is(b, t, _B_POD_SUBMITTED, len(_B_POD_SUBMITTED)):
            done = _payload_submitted(self, b, n, members[DATA_METADATA], members[DATA_SPEC],
                                      unchecked.start >= 0, entry, h)
        elif span_is(b, t, _B_PLACEMENT_COMMITTED, len(_B_PLACEMENT_COMMITTED)):
            done = _payload_committed(self, b, n, members[DATA_BINDINGS])
        elif span_is(b, t, _B_POD_SUCCEEDED, len(_B_POD_SUCCEEDED)):
            done = _payload_finished(self, b, n, members[DATA_METADATA], PHASE_SUCCEEDED, _SLOT_POD_SUCCEEDED)
        elif span_is(b, t, _B_POD_FAILED, len(_B_POD_FAILED)):
            done = _payload_finished(self, b, n, members[DATA_METADATA], PHASE_FAILED, _SLOT_POD_FAILED)
        elif span_is(b, t, _B_POD_DELETED, len(_B_POD_DELETED)):
            done = _payload_finished(self, b, n, members[DATA_METADATA], PHASE_FREE, _SLOT_POD_DELETED)
        elif span_is(b, t, _B_PODGROUP_SUBMITTED, len(_B_PODGROUP_SUBMITTED)):
            done = _payload_podgroup(self, b, n, d.start)
        elif span_is(b, t, _B_JOB_SUBMITTED, len(_B_JOB_SUBMITTED)):
            done = _payload_job(self, b, n, d, members[DATA_METADATA], members[DATA_SPEC],
                                job_spec, job_entry)
        else:
            # A type the fold only counts (a Volcano Job's records, proposals,
            # ...): counted as the dict path counts it, its data not decoded.
            slot = _NOOP_SLOT.get(
                PyBytes_FromStringAndSize(<const char*>b + t.start, t.end - t.start))
            if slot is not None:
                self.type_counts[<int>slot] += 1
                done = 1
    if not done:
        # The dict path, byte for byte what apply_many(orjson.loads(...)) does:
        # the same anomaly for bad JSON or a non-object envelope.
        return _apply_any(self, orjson.loads(payload))
    return 0

# Each _payload_* below folds one event of its type from the accepted envelope's
# ``data`` object at ``i`` with the dict path's handlers, as _apply_data would
# (type counted, a malformed body an anomaly), and returns 1; or returns 0, having
# changed nothing, for a shape it leaves to the dict path.

cdef int _payload_finished(ClusterState self, const unsigned char* b, Py_ssize_t n,
                           Span meta, int phase, int slot) except -1:
    # {"metadata": {name, namespace}}: what _pod_finished reads (``meta``: the data
    # object's, as scan_envelope noted it).
    cdef bint extra
    cdef str key
    if meta.start < 0:
        key = "default/"
    elif b[meta.start] != 0x7b:
        return 0
    else:
        key = _scan_key(b, n, meta, &extra)
        if key is None:
            return 0
    self.type_counts[slot] += 1
    try:
        _pod_finish(self, key, phase)
    except _MALFORMED:
        self._anomaly("malformed")
    return 1

cdef inline void _meta_and_spec(const unsigned char* b, Py_ssize_t n, Py_ssize_t i,
                                Span* meta, Span* spec) noexcept:
    # An object's ``metadata`` and ``spec`` members from ``i`` on (start -1: absent).
    cdef Span k, v
    meta.start = spec.start = -1
    while True:
        i = next_member(b, i, n, &k, &v)
        if i < 0:
            break
        if span_is(b, k, b"metadata", 8):
            meta[0] = v
        elif span_is(b, k, b"spec", 4):
            spec[0] = v

cdef tuple _name_and_namespace(const unsigned char* b, Py_ssize_t n, Span meta):
    # A metadata object's ``name`` and ``namespace`` values (None where absent).
    cdef Span name, namespace
    _meta_members(b, n, meta, &name, &namespace)
    return (_value(b, name) if name.start >= 0 else None,
            _value(b, namespace) if namespace.start >= 0 else None)

cdef int _payload_podgroup(ClusterState self, const unsigned char* b, Py_ssize_t n,
                           Py_ssize_t i) except -1:
    # A PodGroup (a Volcano Job brings one per job) as _podgroup reads it: its
    # metadata's name and namespace and the five spec members the fold keeps, each
    # decoded from its own bytes; its labels, annotations and the rest never are.
    cdef Span k, v, meta, spec
    _meta_and_spec(b, n, i, &meta, &spec)
    if (meta.start >= 0 and b[meta.start] != 0x7b) or (spec.start >= 0 and b[spec.start] != 0x7b):
        return 0  # null or not an object: the dict path reads it as it is
    pg = {}
    if meta.start >= 0:
        name, namespace = _name_and_namespace(b, n, meta)
        found = {}
        if name is not None:
            found["name"] = name
        if namespace is not None:
            found["namespace"] = namespace
        pg["metadata"] = found
    if spec.start >= 0:
        raw = PyBytes_FromStringAndSize(<const char*>b + spec.start, spec.end - spec.start)
        found = _GROUP_SPECS.get(raw)
        if found is None:
            found = {}
            i = spec.start
            while True:
                i = next_member(b, i, n, &k, &v)
                if i < 0:
                    break
                if span_is(b, k, b"minMember", 9):
                    found["minMember"] = _value(b, v)
                elif span_is(b, k, b"queue", 5):
                    found["queue"] = _value(b, v)
                elif span_is(b, k, b"minResources", 12):
                    found["minResources"] = _flat_value(b, n, v)
                elif span_is(b, k, b"priorityClassName", 17):
                    found["priorityClassName"] = _value(b, v)
                elif span_is(b, k, b"minTaskMember", 13):
                    found["minTaskMember"] = _flat_value(b, n, v)
            if len(_GROUP_SPECS) >= MEMO_LIMIT:
                _GROUP_SPECS.clear()
            _GROUP_SPECS[raw] = found  # _podgroup only reads it
        pg["spec"] = found
    self.type_counts[_SLOT_PODGROUP_SUBMITTED] += 1
    try:
        _podgroup(self, pg)
    except _MALFORMED:
        self._anomaly("malformed")
    return 1

cdef int _payload_job(ClusterState self, const unsigned char* b, Py_ssize_t n, Span d,
                      Span meta, Span spec, object raw, object entry) except -1:
    # A Volcano Job as _fold._job_submitted reads it: its key and ingest's marker
    # (``d``: the data's span), and only when it implies its PodGroup (and, marked,
    # its first pods: _first_pods), the PodGroup's spec and what the first pods are
    # made of, both read off the Job's spec bytes in one walk (_job_spec_parts) once
    # per distinct spec (volcano_podgroup and volcano_first_pods read nothing else of
    # the Job's spec); the Job's templates are not decoded otherwise. ``meta``,
    # ``spec``: the data object's members, as scan_envelope noted them (the last of
    # each); ``raw``: the spec's bytes where the caller made them (None: not made),
    # ``entry`` what _JOB_GROUP_SPECS held for them then.
    cdef Span name, namespace
    if meta.start < 0 or b[meta.start] != 0x7b or spec.start < 0 or b[spec.start] != 0x7b:
        return 0  # the dict path reads it as it is
    # Its name a string, its namespace a string, null or absent (_value's None: the
    # default), as _meta_key reads them: the key from their bytes, no str for either.
    _meta_members(b, n, meta, &name, &namespace)
    if name.start < 0 or b[name.start] != 0x22:
        return 0
    if namespace.start >= 0 and b[namespace.start] != 0x22:
        if b[namespace.start] != 0x6e:  # null: the default namespace
            return 0
        namespace.start = -1
    # Its first pods only if ingest marked it (_implies_pods; ``d``: the data's span).
    cdef bint pods = _implies_pods(b, n, d)
    self.type_counts[_SLOT_JOB_SUBMITTED] += 1
    key = _pod_key(b, namespace, name)
    if not job_implies_podgroup(self, key):
        return 1
    cdef list units = None
    try:
        if raw is None:
            raw = PyBytes_FromStringAndSize(<const char*>b + spec.start, spec.end - spec.start)
            entry = _JOB_GROUP_SPECS.get(raw)
        found = _JOB_POD_SPECS.get(raw) if pods else None
        group = None
        if entry is None or (pods and found is None):
            # A spec new to either memo: one walk for what both need of it.
            units = [] if entry is None else None
            parts = _job_spec_parts(self, b, n, spec, entry is None, pods and found is None,
                                    units, True)
            group = (<tuple>parts)[0]
            if pods and found is None:
                found = (<tuple>parts)[1]
                if found is None:
                    found = (None, _loads(raw), {})  # the builder's (_first_pods)
                if len(_JOB_POD_SPECS) >= MEMO_LIMIT:
                    _JOB_POD_SPECS.clear()
                _JOB_POD_SPECS[raw] = found
        # (built before anything is set, as _fold._job_submitted: a Job its pods
        # cannot be built of changes nothing)
        first = _first_pods(b, n, meta, name, key, <tuple>found) if pods else ()
        if entry is None:
            if group is None:
                job_name, job_ns = _name_and_namespace(b, n, meta)
                group = volcano_podgroup({
                    "metadata": {"name": job_name, "namespace": job_ns or _ev.DEFAULT_NAMESPACE},
                    "spec": _loads(raw)})["spec"]
            # (what _podgroup reads of it, parsed once per spec: a Job of a known spec
            # builds no PodGroup and parses no quantity; minResources as summed)
            entry = podgroup_entry(self, group, units[0] if units else None)
            if len(_JOB_GROUP_SPECS) >= MEMO_LIMIT:
                _JOB_GROUP_SPECS.clear()
            _JOB_GROUP_SPECS[raw] = entry
        set_podgroup(self, key, <tuple>entry)
        for pod_key, pod_meta, pod_spec, pod_keys in first:
            _implied_pod(self, pod_key, pod_meta, pod_spec, pod_keys)
    except _MALFORMED:
        self._anomaly("malformed")
    return 1


cdef list _first_pods(const unsigned char* b, Py_ssize_t n, Span meta, Span name, str key,
                      tuple found):
    # The first pods of the Job of metadata ``meta`` as (key, metadata, the pod spec's
    # bytes), from what _JOB_POD_SPECS holds for its spec (``found``):
    # volcano_first_pods' pods (the one builder). For the common shape
    # (_job_spec_parts' pods part) their metadata is volcano_pod_metadata's (the
    # builder's for a template without metadata) and their spec the template's bytes
    # with what the Job adds, the Job not decoded; any other, the builder's pods of
    # the Job's name, namespace and spec, which is all it reads of a Job. ``name``:
    # the span of the metadata's name (a string, _payload_job checked), ``key`` the
    # Job's key _pod_key made of it and the namespace: ``namespace/name``, the
    # builder's gang key and the head of each pod's key (no second walk of the
    # metadata, no key joined again).
    out = []
    queue = found[0]
    cdef tuple keys
    if queue is not None:
        # The queue and gang the pods' annotations name (the Job's queue, its key),
        # handed to the handler instead of the annotations it would read them from.
        keys = (queue, key)
        job_name = _ascii_string(b, name)
        for task_name, replicas, spec_bytes in <tuple>found[1]:
            for i in range(<Py_ssize_t>replicas):
                out.append((f"{key}-{task_name}-{i}",
                            {"labels": volcano_pod_labels(job_name, queue)}, spec_bytes, keys))
        return out
    job_name, job_ns = _name_and_namespace(b, n, meta)
    namespace = job_ns or _ev.DEFAULT_NAMESPACE
    job = {"metadata": {"name": job_name, "namespace": namespace}, "spec": found[1]}
    cdef dict task_specs = found[2]
    for task, _i, pod, _bare in volcano_first_pods(job):
        pod_meta = pod["metadata"]
        task_name = task["name"]
        spec_bytes = task_specs.get(task_name)
        if spec_bytes is None:
            # (a task's pods have equal specs: the template's, with what the Job adds)
            spec_bytes = task_specs[task_name] = orjson.dumps(pod["spec"])
        out.append((f"{pod_meta['namespace']}/{pod_meta['name']}", pod_meta, spec_bytes, None))
    return out


cdef int _implied_pod(ClusterState self, str key, dict meta, bytes spec, tuple keys) except -1:
    # A pod a Job implies, submitted as _payload_submitted submits one recorded with
    # this metadata and spec bytes (the spec memo's entry for them, found or made);
    # ``keys``: its (queue, gang key) when the metadata leaves out the annotations
    # naming them.
    cdef const unsigned char* b = <const unsigned char*>PyBytes_AS_STRING(spec)
    cdef Span s
    cdef uint64_t h = 0
    s.start = 0
    s.end = PyBytes_GET_SIZE(spec)
    entry = _spec_entry(self, b, s.end, s, _spec_lookup(self, b, s, &h), h)
    cdef tuple plain = None
    cdef Py_ssize_t slot
    pod = {"metadata": meta}
    if entry[0] is not None:
        pod["spec"] = entry[0]
    else:
        plain = <tuple>entry[2]
    slot = _pod_submit(self, key, pod, meta, None, <list>entry[1], plain, keys)
    if slot >= 0:
        _note_pod(key, slot)
    return 0


# The members of a Job spec, of a task and of a template that _job_spec_parts reads
# (the PodGroup's and the first pods' together).
cdef enum:
    J_MIN_AVAILABLE, J_TASKS, J_QUEUE, J_PRIORITY_CLASS, J_SCHEDULER, N_JOB_KEYS
cdef const char* _JOB_SPEC_KEYS[N_JOB_KEYS]
_JOB_SPEC_KEYS[:] = [b"minAvailable", b"tasks", b"queue", b"priorityClassName", b"schedulerName"]
cdef Py_ssize_t _JOB_SPEC_LENGTHS[N_JOB_KEYS]
_JOB_SPEC_LENGTHS[:] = [12, 5, 5, 17, 13]
cdef enum:
    T_NAME, T_MIN_AVAILABLE, T_REPLICAS, T_TEMPLATE, T_DEPENDS_ON, N_TASK_KEYS
cdef const char* _TASK_KEYS[N_TASK_KEYS]
_TASK_KEYS[:] = [b"name", b"minAvailable", b"replicas", b"template", b"dependsOn"]
cdef Py_ssize_t _TASK_LENGTHS[N_TASK_KEYS]
_TASK_LENGTHS[:] = [4, 12, 8, 8, 9]
cdef const char* _TEMPLATE_KEYS[2]
_TEMPLATE_KEYS[:] = [b"metadata", b"spec"]
cdef Py_ssize_t _TEMPLATE_LENGTHS[2]
_TEMPLATE_LENGTHS[:] = [8, 4]
cdef const char* _SCHEDULER_KEY[1]
_SCHEDULER_KEY[:] = [b"schedulerName"]
cdef Py_ssize_t _SCHEDULER_LENGTH[1]
_SCHEDULER_LENGTH[:] = [13]
# The members each part reads, as bits of the keys above: a member it reads given
# twice leaves that part to its builder (which of the values counts is the JSON
# decoder's), the other part unaffected.
cdef int _GROUP_JOB_KEYS = ((1 << J_MIN_AVAILABLE) | (1 << J_TASKS) | (1 << J_QUEUE)
                            | (1 << J_PRIORITY_CLASS) | (1 << J_SCHEDULER))
cdef int _PODS_JOB_KEYS = (1 << J_TASKS) | (1 << J_QUEUE) | (1 << J_PRIORITY_CLASS) | (1 << J_SCHEDULER)
cdef int _GROUP_TASK_KEYS = ((1 << T_NAME) | (1 << T_MIN_AVAILABLE) | (1 << T_REPLICAS)
                             | (1 << T_TEMPLATE))
cdef int _PODS_TASK_KEYS = (1 << T_NAME) | (1 << T_REPLICAS) | (1 << T_TEMPLATE) | (1 << T_DEPENDS_ON)


cdef int _members_last(const unsigned char* b, Py_ssize_t n, Py_ssize_t i,
                       const char** names, const Py_ssize_t* lengths, int count,
                       Span* found) noexcept:
    # The raw spans of members ``names`` of the accepted object at ``i`` into
    # ``found`` (the last of each, as orjson keeps; start -1 where absent); returns
    # the bits (1 << m) of the names given more than once.
    cdef Span k, v
    cdef int m, twice = 0
    for m in range(count):
        found[m].start = -1
    while True:
        i = next_member(b, i, n, &k, &v)
        if i < 0:
            return twice
        for m in range(count):
            if span_is(b, k, names[m], lengths[m]):
                if found[m].start >= 0:
                    twice |= 1 << m
                found[m] = v
                break


cdef tuple _job_spec_parts(ClusterState self, const unsigned char* b, Py_ssize_t n, Span spec,
                           bint want_group, bint want_pods, list units=None,
                           bint expect_pods=False):
    # What a Job of the spec at ``spec`` implies, read off its bytes in one walk over
    # its members, its tasks and their templates: (the PodGroup's spec, the first
    # pods' makings), each None where not wanted or for a shape this leaves to the
    # builder (volcano_podgroup, volcano_first_pods: the one definitions; tests
    # compare each part with its builder over many Jobs). A member either part reads
    # given twice is its builder's to decide.
    #
    # The PodGroup's spec (``want_group``): volcano_podgroup's, for minAvailable a
    # plain non-negative integer, a queue, tasks an array of objects each with a
    # string name, a minAvailable, replicas absent, null or a plain integer, and the
    # template spec of each task that counts towards minResources one _plain_requests
    # reads (containers with string requests: the request rule's sum, the same
    # memoized quantities). No orjson call and no Python frame per Job of a new spec.
    # ``units``: gets the spec's minResources in base units (what _resource_list
    # parses the texts back to, exact below 10**17), the spec then without them, or
    # None where a sum is larger. ``expect_pods``: enter the spec of each such task's
    # pods in the spec memo (_expect_pod_spec).
    #
    # The first pods' makings (``want_pods``): (queue, ((task name, replicas, the pod
    # spec's bytes), ...)) for the tasks volcano_first_pods builds pods of (those released
    # at submission; a task with a dependsOn is the builder's), for the common shape:
    # no priorityClassName; queue a string or absent; schedulerName a string or
    # absent; each task an object with a string name, replicas absent, null or a
    # plain integer, no dependsOn, a template of a non-empty spec object and no
    # metadata, the spec without a schedulerName of its own when the Job has one (the
    # pod's spec is then the template's bytes with that member appended, as the
    # builder appends it).
    cdef Span job[N_JOB_KEYS]
    cdef Span of_task[N_TASK_KEYS]
    cdef Span of_template[2]
    cdef Span own_sname[1]
    cdef Span task, tspec, name, reps, tmpl
    cdef Py_ssize_t j, i, tl, sl = 0
    cdef units_t min_member = 0, left = 0, take, replicas
    cdef char* out
    cdef Py_ssize_t ml = PyBytes_GET_SIZE(_B_SCHEDULER_MEMBER)
    cdef int twice = _members_last(b, n, spec.start, _JOB_SPEC_KEYS, _JOB_SPEC_LENGTHS,
                                   N_JOB_KEYS, job)
    cdef Span avail = job[J_MIN_AVAILABLE], tasks = job[J_TASKS], queue = job[J_QUEUE]
    cdef Span pcn = job[J_PRIORITY_CLASS], sname = job[J_SCHEDULER]
    cdef bint group = want_group and not twice & _GROUP_JOB_KEYS
    cdef bint pods = want_pods and not twice & _PODS_JOB_KEYS
    cdef int tmpl_twice = 0
    cdef bint tmpl_ok, scanned
    task_minimum = total = pod_tasks = None
    pod_queue = DEFAULT_QUEUE
    if tasks.start < 0 or b[tasks.start] != 0x5b:
        return (None, None)
    if group:
        if avail.start < 0 or queue.start < 0:
            group = False
        else:
            min_member = _digits(b, avail)
            group = min_member >= 0
    if group:
        # (the pods' spec is foreseen only where the job controller adds the Job's
        # schedulerName alone to a template's, and while the memo takes specs as plain)
        expect_pods = (expect_pods and pcn.start < 0 and sname.start >= 0
                       and b[sname.start] == 0x22 and _plain_fits(self))
        left = min_member
        task_minimum = {}
        total = {}
    if pods:
        if pcn.start >= 0:
            pods = False
        elif queue.start >= 0:
            if b[queue.start] != 0x22:
                pods = False
            elif queue.end - queue.start > 2:  # (an empty one is the default)
                pod_queue = _value(b, queue)
        if sname.start >= 0 and (b[sname.start] != 0x22 or sname.end - sname.start <= 2):
            pods = False  # (not a string, or the empty one the builder leaves out)
        sl = sname.end - sname.start
        pod_tasks = []
    j = tasks.start
    while group or pods:
        j = next_element(b, j, n, &task)
        if j < 0:
            break
        if b[task.start] != 0x7b:
            return (None, None)
        twice = _members_last(b, n, task.start, _TASK_KEYS, _TASK_LENGTHS, N_TASK_KEYS,
                              of_task)
        name = of_task[T_NAME]
        reps = of_task[T_REPLICAS]
        tmpl = of_task[T_TEMPLATE]
        if name.start < 0 or b[name.start] != 0x22:
            return (None, None)
        task_name = None
        plain = None  # (what _plain_requests read of this task's template spec, if it did)
        tmpl_ok = tmpl.start >= 0 and b[tmpl.start] == 0x7b
        scanned = False  # (the template's members: read once for both parts)
        # Replicas absent or null: none; else a plain integer.
        replicas = 0
        if reps.start >= 0 and b[reps.start] != 0x6e:  # not null
            replicas = _digits(b, reps)
        if group and (twice & _GROUP_TASK_KEYS or of_task[T_MIN_AVAILABLE].start < 0
                      or replicas < 0):
            group = False
        if group:
            task_name = _ascii_string(b, name)
            task_minimum[task_name] = _value(b, of_task[T_MIN_AVAILABLE])
            take = replicas
            if take > left:
                take = left
            if take > 0:
                left -= take
                if not tmpl_ok:
                    group = False
                else:
                    tmpl_twice = _members_last(b, n, tmpl.start, _TEMPLATE_KEYS,
                                               _TEMPLATE_LENGTHS, 2, of_template)
                    scanned = True
                    tspec = of_template[1]  # (the last spec, as orjson keeps)
                    if tspec.start < 0 or b[tspec.start] != 0x7b:
                        group = False
                    else:
                        plain = _plain_requests(self, b, n, tspec, None)
                        if plain is None:
                            group = False
                        else:
                            if expect_pods and plain[2] is None:
                                _expect_pod_spec(self, b, tspec, sname, <tuple>plain)
                            for res, amount in (<dict>plain[0]).items():
                                if res != "pods":
                                    total[res] = total.get(res, 0) + amount * take
        if pods and (twice & _PODS_TASK_KEYS or of_task[T_DEPENDS_ON].start >= 0
                     or replicas < 0 or not tmpl_ok):
            pods = False
        if pods:
            if not scanned:
                tmpl_twice = _members_last(b, n, tmpl.start, _TEMPLATE_KEYS, _TEMPLATE_LENGTHS,
                                           2, of_template)
            if tmpl_twice or of_template[0].start >= 0:
                pods = False
                continue
            tspec = of_template[1]
            if tspec.start < 0 or b[tspec.start] != 0x7b:
                pods = False
                continue
            i = tspec.start + 1
            while b[i] <= 0x20:  # (whitespace: the object's first member, or its end)
                i += 1
            if b[i] == 0x7d:
                pods = False  # an empty template spec
                continue
            tl = tspec.end - tspec.start
            if sname.start < 0:
                spec_bytes = PyBytes_FromStringAndSize(<const char*>b + tspec.start, tl)
            else:
                if plain is not None:
                    # (_plain_requests walked this spec's members: it has a
                    # schedulerName exactly when that read one, a string)
                    own_sname[0].start = -1 if (<tuple>plain)[2] is None else 0
                else:
                    _members_last(b, n, tspec.start, _SCHEDULER_KEY, _SCHEDULER_LENGTH, 1,
                                  own_sname)
                if own_sname[0].start >= 0:
                    pods = False  # its own schedulerName: the builder's
                    continue
                spec_bytes = PyBytes_FromStringAndSize(NULL, tl + ml + sl)
                out = PyBytes_AS_STRING(spec_bytes)
                memcpy(out, b + tspec.start, tl - 1)
                memcpy(out + tl - 1, PyBytes_AS_STRING(_B_SCHEDULER_MEMBER), ml)
                memcpy(out + tl - 1 + ml, b + sname.start, sl)
                out[tl + ml + sl - 1] = 0x7d  # }
            if replicas > 0:
                (<list>pod_tasks).append(
                    (task_name if task_name is not None else _ascii_string(b, name),
                     replicas, spec_bytes))
    return (_group_spec(b, min_member, queue, pcn, task_minimum, total, units) if group
            else None,
            # (the tasks a tuple: the memo's entry then holds no list, and the cyclic
            # GC stops tracking it, as it does its strings, integers and bytes)
            (pod_queue, tuple(pod_tasks)) if pods else None)


cdef dict _group_spec(const unsigned char* b, units_t min_member, Span queue, Span pcn,
                      dict task_minimum, dict total, list units):
    # The PodGroup spec _job_spec_parts read (see there for ``units``).
    group_spec = {"minMember": min_member, "queue": _value(b, queue),
                  "minTaskMember": task_minimum}
    if pcn.start >= 0:
        pc = _value(b, pcn)
        if pc:
            group_spec["priorityClassName"] = pc
    cdef bint exact = True
    if units is not None:
        for amount in total.values():
            if amount >= _EXACT_UNITS:
                exact = False
        if exact:
            # (the caller reads the sums, not the texts: none written)
            units.append(total)
            return group_spec
        units.append(None)
    if total:
        texts = {}
        for res, amount in total.items():
            texts[res] = f"{amount}m" if res == "cpu" else str(amount)
        group_spec["minResources"] = texts
    return group_spec


cdef bytes _B_SCHEDULER_MEMBER = b',"schedulerName":'


cdef int _expect_pod_spec(ClusterState self, const unsigned char* b, Span tspec, Span sname,
                          tuple plain) except -1:
    # Enter in the spec memo the spec the job controller writes for a pod of the task
    # template spec ``tspec`` (no schedulerName of its own; ``plain``: what
    # _plain_requests read of it) of a Job whose schedulerName is the string at
    # ``sname``: the template's bytes with that member appended
    # (volcano_task_pod_shared), the pod's ``plain`` the template's with that
    # schedulerName. Its submission then finds its spec in the memo, which proves the
    # span (see _apply_payload) and spares the read of its requests. Sound as a proof:
    # the template spec is an object the scanner accepted (deeper than a pod's spec),
    # and appending a member of a key and an accepted string keeps it one that the
    # scanner accepts at depth 2; its requests are the template's, the member adding
    # only the profile. A pod whose spec is other bytes misses, as without it.
    cdef Py_ssize_t tl = tspec.end - tspec.start, sl = sname.end - sname.start
    cdef Py_ssize_t ml = PyBytes_GET_SIZE(_B_SCHEDULER_MEMBER)
    cdef Py_ssize_t total = tl + ml + sl
    cdef Py_ssize_t i = tspec.start + 1
    cdef uint64_t h
    while b[i] <= 0x20:  # (whitespace: the object's first member, or its end)
        i += 1
    if b[i] == 0x7d:
        return 0  # an empty template spec: no requests, no pod of it expected
    raw = PyBytes_FromStringAndSize(NULL, total)
    cdef char* out = PyBytes_AS_STRING(raw)
    memcpy(out, b + tspec.start, tl - 1)
    memcpy(out + tl - 1, PyBytes_AS_STRING(_B_SCHEDULER_MEMBER), ml)
    memcpy(out + tl - 1 + ml, b + sname.start, sl)
    out[total - 1] = 0x7d  # }
    h = bytes_hash(<const unsigned char*>out, total)
    recent = self._spec_recent
    if recent is None:
        recent = self._spec_recent = [None] * SPEC_RECENT
    known = self._spec_memo.get(<long long>(h >> 2))
    if known is not None and <bytes>(<tuple>known)[3] == raw:
        return 0
    if len(self._spec_memo) >= MEMO_LIMIT:
        self._clear_spec_memo()
        recent = self._spec_recent = [None] * SPEC_RECENT
    entry = self._spec_memo[<long long>(h >> 2)] = (
        None, [-1, -1, 0, <long long>(h >> 2), None],
        (plain[0], plain[1], _ascii_string(b, sname), raw), raw)
    (<list>recent)[h & (SPEC_RECENT - 1)] = entry
    return 0


cdef int _payload_submitted(ClusterState self, const unsigned char* b, Py_ssize_t n,
                            Span meta, Span spec, bint looked_up, tuple entry,
                            uint64_t h) except -1:
    # A pod's metadata and spec (the data object's members, as scan_envelope noted
    # them) as _pod_submit reads them; the spec is decoded once per distinct spec
    # bytes, and the pod's class cached with it. ``looked_up``: the caller has looked
    # the spec up (_spec_lookup: its ``entry``, None for a miss, and hash ``h``).
    cdef bint extra = False
    cdef str key = "default/"
    cdef Py_ssize_t slot = -1
    if (meta.start >= 0 and b[meta.start] != 0x7b) or (spec.start >= 0 and b[spec.start] != 0x7b):
        return 0
    if meta.start >= 0:
        key = _scan_key(b, n, meta, &extra)
        if key is None:
            return 0
    spec_dict = None
    class_memo = None
    plain = None
    if spec.start >= 0:
        if not looked_up:
            entry = _spec_lookup(self, b, spec, &h)
        entry = _spec_entry(self, b, n, spec, entry, h)
        spec_dict = entry[0]
        class_memo = entry[1]
        if spec_dict is None:
            plain = entry[2]
    self.type_counts[_SLOT_POD_SUBMITTED] += 1
    try:
        if extra:
            # Labels or annotations: the queue and gang come from those, so the
            # handler gets the metadata it reads as the dict path has it (a Volcano
            # Job's pods), and the spec as dicts unless it is ``plain``.
            meta_dict = _scan_meta(b, n, meta)
            pod = {"metadata": meta_dict}
            if spec_dict is not None:
                pod["spec"] = spec_dict
            slot = _pod_submit(self, key, pod, meta_dict, None, class_memo, plain)
        else:
            slot = _pod_submit(self, key, None, None, spec_dict, class_memo, plain)
    except _MALFORMED:
        self._anomaly("malformed")
    if slot >= 0:
        _note_pod(key, slot)
    return 1

cdef tuple _spec_entry(ClusterState self, const unsigned char* b, Py_ssize_t n, Span spec,
                       tuple entry, uint64_t h):
    # The spec memo's entry for the spec ``b[spec]``: ``entry`` when _spec_lookup found
    # one (its hash ``h``), else a new one: (spec dict or None, [queue, class,
    # priority, key, next: _memo_class], plain or None, the spec's bytes); a spec of
    # containers and a profile is decoded only when a pod needs it as dicts
    # (_pod_submit decodes it then).
    if entry is not None:
        return entry
    if len(self._spec_memo) >= MEMO_LIMIT:
        self._clear_spec_memo()
        self._spec_recent = [None] * SPEC_RECENT
    raw = PyBytes_FromStringAndSize(<const char*>b + spec.start, spec.end - spec.start)
    plain = None
    if _plain_fits(self):
        plain = _plain_requests(self, b, n, spec, raw)
    entry = self._spec_memo[<long long>(h >> 2)] = (
        None if plain is not None else orjson.loads(raw),
        [-1, -1, 0, <long long>(h >> 2), None], plain, raw)
    (<list>self._spec_recent)[h & (SPEC_RECENT - 1)] = entry
    return entry


cdef tuple _spec_lookup(ClusterState self, const unsigned char* b, Span spec, uint64_t* h):
    # The spec memo's entry for the spec's bytes ``b[spec]``, or None (a miss leaves
    # ``_spec_recent`` made, for the new entry); ``h``: their hash. Keyed by a hash of
    # the bytes, which the entry keeps to compare: no bytes object made and SipHashed
    # per pod (a spec whose hash another one's entry holds replaces it: a cache). The
    # entries last found are first looked for in a list by the hash's low bits
    # (_spec_recent: no int made and no dict probed per pod; dropped with the memo when
    # its classes go stale).
    cdef tuple entry
    h[0] = bytes_hash(b + spec.start, spec.end - spec.start)
    recent = self._spec_recent
    if recent is None:
        recent = self._spec_recent = [None] * SPEC_RECENT
    entry = <tuple>recent[h[0] & (SPEC_RECENT - 1)]
    if entry is not None and _span_equals(b, spec, <bytes>entry[3]):
        return entry
    entry = self._spec_memo.get(<long long>(h[0] >> 2))
    if entry is not None and _span_equals(b, spec, <bytes>entry[3]):
        recent[h[0] & (SPEC_RECENT - 1)] = entry
        return entry
    return None


# The spec memo's entries last found (ClusterState._spec_recent), by hash bits.
cdef enum:
    SPEC_RECENT = 4096


cdef inline bint _span_equals(const unsigned char* b, Span s, bytes raw) noexcept:
    return (PyBytes_GET_SIZE(raw) == s.end - s.start
            and memcmp(PyBytes_AS_STRING(raw), b + s.start, s.end - s.start) == 0)


cdef bint _plain_fits(ClusterState self) except -1:
    # Whether the spec memo keeps a spec of containers and a profile as ``plain``
    # rather than as dicts: while no PriorityClass is folded (a globalDefault one sets
    # its priority) and the default queue has no node-group affinity (part of its
    # pods' classes), as _pod_submit needs to take it so (for a pod of another queue,
    # it checks that queue and decodes the spec when it must).
    if self.priority_classes:
        return False
    q = self.queue_index.get(DEFAULT_QUEUE)
    return q is None or not (<dict>self.queue_meta[<Py_ssize_t>q]).get("affinity")


cdef object _plain_requests(ClusterState self, const unsigned char* b, Py_ssize_t n, Span spec,
                            bytes raw):
    # A spec that is containers, each with requests given as strings and no limits or
    # ports (the bulk of a log), perhaps with a string schedulerName and restartPolicy
    # (a Volcano Job's pods), as _pod_submit's ``plain``: (requests, nonzero,
    # schedulerName or None, ``raw``: the spec's bytes). The requests are the request
    # rule's container sum (schemas/_requests.pyx PodSum, what _class_for's pod_sum adds
    # up from the decoded dicts), in the same resource order, with the same memoized
    # quantities. None for any other shape, a repeated name, or a quantity _class_for
    # would count as invalid: the caller then decodes the spec and the dict path decides.
    cdef Span k, v, containers, cont, res, requests
    cdef Span names_seen[MAX_FAST_RESOURCES]
    cdef Py_ssize_t i = spec.start, j, m, r, seen
    cdef long long u
    cdef PodSum total = new_sum()
    cdef str name
    cdef bint is_cpu
    sname = None
    containers.start = -1
    while True:
        i = next_member(b, i, n, &k, &v)
        if i < 0:
            break
        if span_is(b, k, b"containers", 10):
            containers = v
        elif span_is(b, k, b"schedulerName", 13) and b[v.start] == 0x22:
            sname = _ascii_string(b, v)  # (the profile: part of the class)
        elif not (span_is(b, k, b"restartPolicy", 13) and b[v.start] == 0x22):
            return None  # (restartPolicy: no part of the class)
    if containers.start < 0 or b[containers.start] != 0x5b:
        return None
    j = containers.start
    while True:
        j = next_element(b, j, n, &cont)
        if j < 0:
            break
        if b[cont.start] != 0x7b:
            return None
        res.start = -1
        m = cont.start
        while True:
            m = next_member(b, m, n, &k, &v)
            if m < 0:
                break
            if span_is(b, k, b"ports", 5):
                return None
            if span_is(b, k, b"resources", 9):
                res = v
        requests.start = -1
        if res.start >= 0 and b[res.start] != 0x6e:  # not null
            if b[res.start] != 0x7b:
                return None
            m = res.start
            while True:
                m = next_member(b, m, n, &k, &v)
                if m < 0:
                    break
                if span_is(b, k, b"limits", 6):
                    return None
                if span_is(b, k, b"requests", 8):
                    requests = v
        total.begin()
        if requests.start >= 0 and b[requests.start] != 0x6e:  # not null
            if b[requests.start] != 0x7b:
                return None
            seen = 0
            m = requests.start
            while True:
                m = next_member(b, m, n, &k, &v)
                if m < 0:
                    break
                if b[v.start] != 0x22 or seen == MAX_FAST_RESOURCES:
                    return None
                # A repeated name (equal bytes: no escapes) is the dict path's to decide.
                for r in range(seen):
                    if span_is(b, names_seen[r], <const char*>b + k.start, k.end - k.start):
                        return None
                names_seen[seen] = k
                seen += 1
                # The common names as constants (no str to make and hash) and the
                # common spellings parsed off the bytes: what _units does with them.
                is_cpu = span_is(b, k, b"cpu", 3)
                if is_cpu:
                    name = _CPU
                elif span_is(b, k, b"memory", 6):
                    name = _MEMORY
                else:
                    name = PyUnicode_DecodeASCII(<const char*>b + k.start, k.end - k.start, NULL)
                u = esched_quantity_units(b + v.start + 1, v.end - v.start - 2, is_cpu)
                if u < 0:
                    try:
                        total.add(name, self._units(name, _ascii_string(b, v)))
                    except _MALFORMED:
                        return None
                else:
                    total.add(name, u)
        total.end()
    if not total.nonzero_within(_MAX_UNITS):
        return None
    total.pod()  # (what total.requests() gives, without a tuple to unpack)
    return (total.fit, (total.cpu, total.mem), sname, raw)


cdef int _payload_committed(ClusterState self, const unsigned char* b, Py_ssize_t n,
                            Span bindings) except -1:
    # {"bindings": [{"pod", "node", "resources", "devices"?}, ...]}: what _committed reads
    # (``bindings``: the data object's last, as scan_envelope noted it).
    cdef Span e, pod, node, res, dev
    cdef Py_ssize_t j
    cdef list items
    if bindings.start >= 0 and _commit_one(self, b, n, bindings.start):
        return 1
    if bindings.start >= 0 and b[bindings.start] != 0x5b:
        return 0
    items = []
    if bindings.start >= 0:
        j = bindings.start
        while True:
            j = next_element(b, j, n, &e)
            if j < 0:
                break
            if b[e.start] != 0x7b:
                return 0
            _binding_spans(b, n, e, &pod, &node, &res, &dev)
            if (pod.start < 0 or b[pod.start] != 0x22 or node.start < 0
                    or b[node.start] != 0x22 or (res.start >= 0 and b[res.start] != 0x7b)):
                return 0
            resources = memo = None
            if res.start >= 0:
                raw = PyBytes_FromStringAndSize(<const char*>b + res.start, res.end - res.start)
                entry = self._resources_memo.get(raw)
                if entry is None:
                    if len(self._resources_memo) >= MEMO_LIMIT:
                        self._resources_memo.clear()
                    # (resources, [columns, has pods]) (see _resolve_binding)
                    entry = self._resources_memo[raw] = (orjson.loads(raw), [None, None])
                resources = entry[0]
                memo = entry[1]
            devices = None
            if dev.start >= 0:  # rare (GPU devices): decoded as the dict path does
                devices = orjson.loads(
                    PyBytes_FromStringAndSize(<const char*>b + dev.start, dev.end - dev.start))
            items.append((_ascii_string(b, pod), _ascii_string(b, node), resources, memo,
                          devices))
    self.type_counts[_SLOT_PLACEMENT_COMMITTED] += 1
    resolved = []
    try:
        for pod_key, node_name, resources, memo, devices in items:
            _resolve_binding(self, pod_key, node_name, resources, memo, resolved, devices)
        _bind_resolved(self, resolved)
    except _MALFORMED:
        self._anomaly("malformed")
    return 1

cdef int _commit_one(ClusterState self, const unsigned char* b, Py_ssize_t n,
                     Py_ssize_t i) except -1:
    # The common commit, folded without a Python object per binding or resource:
    # one binding of a known Pending pod to a known node, its resources integers
    # in range under registered names, no GPU devices. Returns 1 when folded
    # (what _resolve_binding + _bind_resolved would have done), or 0, having
    # changed nothing, for anything else (anomalies included): _payload_committed
    # then folds it the general way. ``i``: the data object's "bindings" value (the
    # last, as orjson keeps it, found by scan_envelope: no walk over the data here).
    cdef Span pod, node
    cdef Py_ssize_t c, j, p, nd, k_res = 0
    cdef Py_ssize_t cols[MAX_FAST_RESOURCES]
    cdef units_t units[MAX_FAST_RESOURCES]
    cdef bint has_pods = False
    if _one_binding(self, b, n, i, &pod, &node, cols, units, &k_res) < 0:
        return 0
    p = _slot_of(_POD_SLOTS, POD_SLOTS - 1, self.pod_keys, self.pod_index, b, pod)
    if p < 0 or self.pod_phase[p] != PHASE_PENDING:
        return 0
    nd = _slot_of(_NODE_SLOTS, NODE_SLOTS - 1, self.node_names, self.node_index, b, node)
    if nd < 0:
        return 0
    self.type_counts[_SLOT_PLACEMENT_COMMITTED] += 1
    for c in range(self.n_res):
        self.pod_alloc[p, c] = 0
    # In member order, so a repeated name's last value stays (as orjson keeps it).
    for j in range(k_res):
        self.pod_alloc[p, cols[j]] = units[j]
        if cols[j] == COL_PODS:
            has_pods = True
    _bind_allocated(self, p, nd, has_pods, 0)
    return 1

# The commit's pod and node found by name without a str made and SipHashed per
# binding: a direct-mapped cache from _bytes_hash of the name to the slot it was
# found at, which a hit checks against the slot's name (pod_keys, node_names). The
# fold keeps a name at slot s exactly while the index maps the name to s (it clears
# both together), so a name found at the cached slot is the index's answer, in any
# state: one cache serves every state, a stale entry is a miss. A submission on the
# bytes path enters its pod (_note_pod), so its commit finds it there; a node is
# entered by its first commit.
cdef enum:
    POD_SLOTS = 4096
    NODE_SLOTS = 16384
cdef Py_ssize_t _POD_SLOTS[POD_SLOTS]
cdef Py_ssize_t _NODE_SLOTS[NODE_SLOTS]
for _j in range(POD_SLOTS):
    _POD_SLOTS[_j] = -1
for _j in range(NODE_SLOTS):
    _NODE_SLOTS[_j] = -1


cdef inline bint _named_at(list names, Py_ssize_t slot, const unsigned char* p,
                           Py_ssize_t length):
    # Whether ``names[slot]`` is the ASCII string of ``length`` bytes at ``p``.
    if slot < 0 or slot >= len(names):
        return False
    name = names[slot]
    return (type(name) is str and PyUnicode_IS_COMPACT_ASCII(name)
            and PyUnicode_GET_LENGTH(name) == length
            and memcmp(PyUnicode_DATA(name), p, length) == 0)


cdef Py_ssize_t _slot_of(Py_ssize_t* cache, Py_ssize_t mask, list names, dict index,
                         const unsigned char* b, Span s) except -2:
    # The slot ``index`` gives the name that string value ``s`` (quotes included)
    # holds, or -1 when absent: through ``cache`` (see above), else the index.
    cdef const unsigned char* p = b + s.start + 1
    cdef Py_ssize_t length = s.end - s.start - 2
    cdef Py_ssize_t h = <Py_ssize_t>(bytes_hash(p, length) & <uint64_t>mask)
    if _named_at(names, cache[h], p, length):
        return cache[h]
    found = index.get(_ascii_string(b, s))
    if found is None:
        return -1
    cache[h] = found
    return cache[h]


cdef Py_ssize_t node_slot(ClusterState self, const unsigned char* name,
                          Py_ssize_t length) except -2:
    # The slot of the alive node named by the ``length`` ASCII bytes at ``name``, or
    # -1: the commit's cache above, for the claims' nodes (core/_claims.pyx).
    cdef Span s
    s.start = -1
    s.end = length + 1
    return _slot_of(_NODE_SLOTS, NODE_SLOTS - 1, self.node_names, self.node_index, name, s)


cdef inline void _note_pod(str key, Py_ssize_t slot) noexcept:
    # A pod the bytes path submitted into slot ``slot``, into the commit's pod cache.
    if PyUnicode_IS_COMPACT_ASCII(key):
        _POD_SLOTS[bytes_hash(<const unsigned char*>PyUnicode_DATA(key),
                               PyUnicode_GET_LENGTH(key)) & (POD_SLOTS - 1)] = slot


cdef Py_ssize_t _one_binding(ClusterState self, const unsigned char* b, Py_ssize_t n,
                             Py_ssize_t i, Span* pod, Span* node, Py_ssize_t* cols,
                             units_t* units, Py_ssize_t* k_res) except -2:
    # _commit_one's "bindings" value at ``i``, read in the walk that skips it: exactly
    # one object whose pod and node are strings (spans with their quotes) and whose
    # resources (required) are plain integers in range under registered names, at
    # most MAX_FAST_RESOURCES, in member order; no devices. Returns the index after
    # the array, or -1 for any other shape.
    cdef Span k
    cdef Py_ssize_t v, c, j
    cdef units_t u
    cdef bint has_res = False
    if b[i] != 0x5b:
        return -1
    i = skip_ws(b, i + 1, n)
    if b[i] != 0x7b:
        return -1
    pod.start = node.start = -1
    while True:
        v = next_key(b, i, n, &k)
        if v < 0:
            break
        if span_is(b, k, b"pod", 3) or span_is(b, k, b"node", 4):
            if b[v] != 0x22:
                return -1
            i = after_quote(b, v, n)
            if k.end - k.start == 3:
                pod.start = v
                pod.end = i
            else:
                node.start = v
                node.end = i
        elif span_is(b, k, b"resources", 9):
            if b[v] != 0x7b:
                return -1
            has_res = True
            k_res[0] = 0
            i = v
            while True:
                v = next_key(b, i, n, &k)
                if v < 0:
                    break
                if k_res[0] == MAX_FAST_RESOURCES:
                    return -1
                c = _column_of(self, b, k)
                if c < 0:
                    return -1
                # A plain integer: digits up to a delimiter (the scanner allows at
                # most 18, so it fits, and no exponent); a sign or a fraction is not
                # one. Read here in the walk: _digits over a span that skip_accepted
                # walks first cost the fold 1.3% more instructions.
                u = 0
                j = v
                while 0x30 <= b[j] <= 0x39:
                    u = u * 10 + (b[j] - 0x30)
                    j += 1
                if j == v or b[j] == 0x2e or u > _MAX_UNITS:
                    return -1
                cols[k_res[0]] = c
                units[k_res[0]] = u
                k_res[0] += 1
                i = skip_ws(b, j, n)
            i = _past_object(b, i, n)
        elif span_is(b, k, b"devices", 7):
            return -1
        else:
            i = skip_accepted(b, v, n)
        i = skip_ws(b, i, n)
    if pod.start < 0 or node.start < 0 or not has_res:
        return -1
    i = skip_ws(b, _past_object(b, i, n), n)
    if b[i] != 0x5d:  # more than one binding
        return -1
    return i + 1

cdef inline Py_ssize_t _past_object(const unsigned char* b, Py_ssize_t i, Py_ssize_t n) noexcept:
    # After next_key returned -1 for the object walked from ``i`` (at its closing
    # brace, or at its opening one when it is empty): the index after the object.
    if b[i] != 0x7d:
        i = skip_ws(b, i + 1, n)
    return i + 1

cdef Py_ssize_t _column_of(ClusterState self, const unsigned char* b, Span key) except -2:
    # The column of a registered resource named by an object key's span (its
    # content), or -1: unregistered (the general path registers it).
    cdef Py_ssize_t c, length = key.end - key.start
    for c in range(self.n_res):
        name = self.res_names[c]
        if (PyUnicode_IS_COMPACT_ASCII(name) and PyUnicode_GET_LENGTH(name) == length
                and memcmp(PyUnicode_DATA(name), b + key.start, length) == 0):
            return c
    return -1
