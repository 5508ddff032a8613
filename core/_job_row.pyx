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
from esched.core._envelope cimport Span, next_key, skip_accepted, skip_ws, span_is

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


cdef Py_ssize_t _object_end(const unsigned char* b, Py_ssize_t n, Py_ssize_t start,
                            Py_ssize_t i) noexcept:
    # The index after an accepted object opening at b[start], given ``i``, the index
    # its member walk (next_key) ended at: its "}", or its "{" when it has none.
    if i == start:
        i = skip_ws(b, start + 1, n)
    return i + 1


cdef Py_ssize_t _task_shape(const unsigned char* b, Py_ssize_t n, Py_ssize_t start,
                            list out):
    # The task object at b[start] as job_shape's _task_shape reads it, appended to
    # ``out``; the index after it, or -1 (declined). One walk: its template skipped
    # once, not again as an array element.
    cdef Span k, v, name, replicas, ma, policies
    cdef Py_ssize_t i = start, j
    cdef long long r = 0, m = 0
    cdef int got
    cdef bint ok = True
    name.start = replicas.start = ma.start = policies.start = -1
    name.end = replicas.end = ma.end = policies.end = -1
    while True:
        j = next_key(b, i, n, &k)
        if j < 0:
            break
        v.start = j
        v.end = skip_accepted(b, j, n)
        i = skip_ws(b, v.end, n)
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
                return -1
    if name.start < 0 or b[name.start] != 0x22:
        return -1
    got = _int(b, replicas, &r)
    if got == DECLINE:
        return -1
    got = _int(b, ma, &m)
    if got == DECLINE:
        return -1
    if got == NONE:
        m = r
    pol = _policies(b, policies, &ok)
    if not ok:
        return -1
    out.append((_string(b, name), r, m, pol, (), False))
    return _object_end(b, n, start, i)


cdef Py_ssize_t _tasks(const unsigned char* b, Py_ssize_t n, Py_ssize_t i, list out):
    # The task objects of the accepted array at b[i] appended to ``out``; the index
    # after the array, or -1 (declined: an element not an object, or a task declined).
    while True:
        i = skip_ws(b, i + 1, n)  # past "[" or ","
        if b[i] == 0x5d:  # (an empty array)
            return i + 1
        if b[i] != 0x7b:
            return -1
        i = _task_shape(b, n, i, out)
        if i < 0:
            return -1
        i = skip_ws(b, i, n)
        if b[i] == 0x5d:
            return i + 1


cdef object job_spec_shape(const unsigned char* b, Py_ssize_t n, Span spec):
    """What :func:`esched.core.jobs.job_shape` gives of a Job whose ``spec`` object
    is at ``spec`` in the accepted envelope ``b``, or None: the dict path's to read."""
    cdef Span k, v, ma, ms, retry, ttl, policies
    cdef Py_ssize_t i = spec.start, j
    cdef long long ma_v = 0, ms_v = 0, retry_v = 0, ttl_v = 0
    cdef int ma_got, ms_got, retry_got, ttl_got
    cdef bint ok = True
    cdef list out = []
    ma.start = ms.start = retry.start = ttl.start = policies.start = -1
    ma.end = ms.end = retry.end = ttl.end = policies.end = -1
    while True:
        j = next_key(b, i, n, &k)
        if j < 0:
            break
        v.start = j
        if span_is(b, k, b"tasks", 5):
            # Read as walked (the last ``tasks`` counts: each starts the list again).
            out = []
            if b[j] == 0x5b:
                v.end = _tasks(b, n, j, out)
                if v.end < 0:
                    return None
            elif b[j] == 0x6e:  # null: no tasks
                v.end = j + 4
            else:
                return None
        else:
            v.end = skip_accepted(b, j, n)
            if span_is(b, k, b"minAvailable", 12):
                ma = v
            elif span_is(b, k, b"minSuccess", 10):
                ms = v
            elif span_is(b, k, b"maxRetry", 8):
                retry = v
            elif span_is(b, k, b"ttlSecondsAfterFinished", 23):
                ttl = v
            elif span_is(b, k, b"policies", 8):
                policies = v
        i = skip_ws(b, v.end, n)
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
