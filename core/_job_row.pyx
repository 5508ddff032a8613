"""The job fold's reader of a Volcano Job's spec off the bytes of a stored envelope.

:func:`job_spec_shape` gives what :func:`esched.core.jobs.job_shape` reads of a Job's
``spec`` (the fields :class:`esched.core.jobs.JobState` is built of), straight from
the bytes of an envelope the scanner (``_envelope.pxd``) accepted, without decoding
the rest (the tasks' templates are most of a Job's bytes). It declines (None) on
anything but the plain forms, for the dict path to read as ever: numbers other than
integers, a task without a string ``name``, ``dependsOn``, members of another type
than the dict path expects. Policy lists, rare and small, are decoded by orjson from
their own bytes, the value decoding the whole envelope puts there.
"""

import orjson

from cpython.bytes cimport PyBytes_FromStringAndSize
from esched.core._envelope cimport Span, next_element, next_member, span_is

cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void* PyUnicode_DATA(object text)

from libc.string cimport memcpy

cdef object _loads = orjson.loads

# What _int reads a value as.
cdef enum:
    DECLINE = -1  # not an integer, nor null: the dict path's to read
    NONE = 0      # absent or null
    INT = 1


cdef int _int(const unsigned char* b, Span v, long long* out) noexcept:
    # An accepted value (start -1: absent) as an integer: -?[0-9]+ (the scanner took
    # at most 18 characters, so it fits), null, or anything else (a decimal point, a
    # bool, a string: DECLINE).
    cdef Py_ssize_t i = v.start
    cdef long long u = 0
    cdef bint negative
    if v.start < 0 or b[v.start] == 0x6e:  # absent, null
        return NONE
    negative = b[i] == 0x2d
    if negative:
        i += 1
    if i >= v.end:
        return DECLINE
    while i < v.end:
        if not 0x30 <= b[i] <= 0x39:
            return DECLINE
        u = u * 10 + (b[i] - 0x30)
        i += 1
    out[0] = -u if negative else u
    return INT


cdef object _policies(const unsigned char* b, Span v, bint* ok):
    # A ``policies`` member: None when absent or null, its list (orjson's, of its own
    # bytes) when a list; anything else declined (``ok`` cleared).
    if v.start < 0 or b[v.start] == 0x6e:
        return None
    if b[v.start] != 0x5b:
        ok[0] = False
        return None
    return _loads(PyBytes_FromStringAndSize(<const char*>b + v.start, v.end - v.start))


cdef str _string(const unsigned char* b, Span s):
    # An accepted string's value (ASCII without escapes: its bytes between the quotes).
    cdef Py_ssize_t length = s.end - s.start - 2
    text = PyUnicode_New(length, 127)
    memcpy(PyUnicode_DATA(text), b + s.start + 1, length)
    return text


cdef object _task_shape(const unsigned char* b, Py_ssize_t n, Span task):
    # One task object as job_shape's _task_shape reads it, or None (declined).
    cdef Span k, v, name, replicas, ma, policies
    cdef Py_ssize_t i = task.start
    cdef long long r = 0, m = 0
    cdef int got
    cdef bint ok = True
    name.start = replicas.start = ma.start = policies.start = -1
    name.end = replicas.end = ma.end = policies.end = -1
    while True:
        i = next_member(b, i, n, &k, &v)
        if i < 0:
            break
        # (the last of each, as orjson keeps)
        if span_is(b, k, b"name", 4):
            name = v
        elif span_is(b, k, b"replicas", 8):
            replicas = v
        elif span_is(b, k, b"minAvailable", 12):
            ma = v
        elif span_is(b, k, b"policies", 8):
            policies = v
        elif span_is(b, k, b"dependsOn", 9):
            if b[v.start] != 0x6e:  # (null: none)
                return None
    if name.start < 0 or b[name.start] != 0x22:
        return None
    got = _int(b, replicas, &r)
    if got == DECLINE:
        return None
    got = _int(b, ma, &m)
    if got == DECLINE:
        return None
    if got == NONE:
        m = r
    pol = _policies(b, policies, &ok)
    if not ok:
        return None
    return (_string(b, name), r, m, pol, (), False)


cdef object job_spec_shape(const unsigned char* b, Py_ssize_t n, Span spec):
    """What :func:`esched.core.jobs.job_shape` gives of a Job whose ``spec`` object
    is at ``spec`` in the accepted envelope ``b``, or None: the dict path's to read."""
    cdef Span k, v, e, tasks, ma, ms, retry, ttl, policies
    cdef Py_ssize_t i = spec.start
    cdef long long ma_v = 0, ms_v = 0, retry_v = 0, ttl_v = 0
    cdef int ma_got, ms_got, retry_got, ttl_got
    cdef bint ok = True
    tasks.start = ma.start = ms.start = retry.start = ttl.start = policies.start = -1
    tasks.end = ma.end = ms.end = retry.end = ttl.end = policies.end = -1
    while True:
        i = next_member(b, i, n, &k, &v)
        if i < 0:
            break
        if span_is(b, k, b"tasks", 5):
            tasks = v
        elif span_is(b, k, b"minAvailable", 12):
            ma = v
        elif span_is(b, k, b"minSuccess", 10):
            ms = v
        elif span_is(b, k, b"maxRetry", 8):
            retry = v
        elif span_is(b, k, b"ttlSecondsAfterFinished", 23):
            ttl = v
        elif span_is(b, k, b"policies", 8):
            policies = v
    out = []
    if tasks.start >= 0 and b[tasks.start] != 0x6e:  # (null: no tasks)
        if b[tasks.start] != 0x5b:
            return None
        i = tasks.start
        while True:
            i = next_element(b, i, n, &e)
            if i < 0:
                break
            if b[e.start] != 0x7b:
                return None
            task = _task_shape(b, n, e)
            if task is None:
                return None
            out.append(task)
    ma_got = _int(b, ma, &ma_v)
    ms_got = _int(b, ms, &ms_v)
    retry_got = _int(b, retry, &retry_v)
    ttl_got = _int(b, ttl, &ttl_v)
    if ma_got == DECLINE or ms_got == DECLINE or retry_got == DECLINE or ttl_got == DECLINE:
        return None
    pol = _policies(b, policies, &ok)
    if not ok:
        return None
    return (
        tuple(out),
        ma_v if ma_got == INT and ma_v != 0 else None,
        ms_v if ms_got == INT else None,
        retry_v if retry_got == INT and retry_v != 0 else 3,
        ttl_v if ttl_got == INT else None,
        pol,
    )
