"""A batch's proposal records in one C loop: each one-pod proposal joined from the
pieces of its template (:func:`esched.services.replica.proposals.proposal_parts`),
the others written by a callback (their envelopes). Per pod this is what the
replica pays to put a placement on the wire, so no dict and no bytecode per pod."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8String
from libc.string cimport memcpy

import orjson

cdef object _dumps = orjson.dumps


cdef inline char* _put(char* p, bytes b):
    cdef Py_ssize_t n = PyBytes_GET_SIZE(b)
    memcpy(p, PyBytes_AS_STRING(b), n)
    return p + n


cdef bytes _record(tuple parts, bytes pid, bytes pod, bytes node, bytes res):
    """parts[0] pid parts[1] pid parts[2] pod parts[3] node parts[4] res parts[5]."""
    cdef bytes p0 = parts[0], p1 = parts[1], p2 = parts[2]
    cdef bytes p3 = parts[3], p4 = parts[4], p5 = parts[5]
    cdef Py_ssize_t n = (
        PyBytes_GET_SIZE(p0) + PyBytes_GET_SIZE(p1) + PyBytes_GET_SIZE(p2)
        + PyBytes_GET_SIZE(p3) + PyBytes_GET_SIZE(p4) + PyBytes_GET_SIZE(p5)
        + 2 * PyBytes_GET_SIZE(pid) + PyBytes_GET_SIZE(pod) + PyBytes_GET_SIZE(node)
        + PyBytes_GET_SIZE(res)
    )
    cdef bytes out = PyBytes_FromStringAndSize(NULL, n)
    cdef char* p = PyBytes_AS_STRING(out)
    p = _put(p, p0)
    p = _put(p, pid)
    p = _put(p, p1)
    p = _put(p, pid)
    p = _put(p, p2)
    p = _put(p, pod)
    p = _put(p, p3)
    p = _put(p, node)
    p = _put(p, p4)
    p = _put(p, res)
    _put(p, p5)
    return out


def proposal_records(
    object parts,
    list pids not None,
    object placements,
    object which,
    object class_of,
    dict resources not None,
    dict nodes not None,
    bint plain_ids,
    object requests_json,
    object other,
):
    """``(key, value)`` records of the proposals ``which`` (indices into ``pids`` and
    ``placements``). A one-pod proposal (one binding, no gang, no victims, no GPU
    devices) is joined from ``parts`` (None: never) with its id (its UTF-8 text with
    ``plain_ids``, else its JSON-escaped text), its pod's and node's JSON and its
    class's requests as JSON (``class_of(pod)`` the class id, ``resources`` the JSON
    by class id, filled from ``requests_json(cid)``; ``nodes`` by node, filled);
    ``other(i)`` writes any other."""
    cdef list out = []
    cdef object i, pl, bindings, b, pod, node, devices, cid, res, nj, pid
    cdef bytes pid_b
    for i in which:
        pl = placements[i]
        bindings = pl.bindings
        if parts is None or pl.gang is not None or pl.victims or len(bindings) != 1:
            out.append(other(i))
            continue
        pod, node, devices = bindings[0]
        if devices or type(pod) is not str or type(node) is not str:
            out.append(other(i))
            continue
        cid = class_of(pod)
        res = resources.get(cid)
        if res is None:
            res = requests_json(cid)
            resources[cid] = res
        nj = nodes.get(node)
        if nj is None:
            nj = _dumps(node)
            nodes[node] = nj
        pid = pids[i]
        if plain_ids:
            pid_b = PyUnicode_AsUTF8String(pid)
        else:
            pid_b = _dumps(pid)
            pid_b = pid_b[1 : PyBytes_GET_SIZE(pid_b) - 1]  # the string's JSON, unquoted
        out.append(
            (PyUnicode_AsUTF8String(pod), _record(parts, pid_b, _dumps(pod), nj, res))
        )
    return out
