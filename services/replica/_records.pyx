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


cdef bytes _record(tuple parts, bytes pid, bytes gang, bytes pod, bytes node, bytes res):
    """parts[0] pid parts[1] pid parts[2] pod parts[3] node parts[4] res parts[5];
    with ``gang`` (seven parts): parts[0] pid parts[1] pid parts[2] gang parts[3] pod
    parts[4] node parts[5] res parts[6]."""
    cdef Py_ssize_t k, n = (
        2 * PyBytes_GET_SIZE(pid) + PyBytes_GET_SIZE(pod) + PyBytes_GET_SIZE(node)
        + PyBytes_GET_SIZE(res)
    )
    cdef bytes part
    for part in parts:
        n += PyBytes_GET_SIZE(part)
    if gang is not None:
        n += PyBytes_GET_SIZE(gang)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, n)
    cdef char* p = PyBytes_AS_STRING(out)
    k = 0
    p = _put(p, <bytes>parts[k]); k += 1
    p = _put(p, pid)
    p = _put(p, <bytes>parts[k]); k += 1
    p = _put(p, pid)
    p = _put(p, <bytes>parts[k]); k += 1
    if gang is not None:
        p = _put(p, gang)
        p = _put(p, <bytes>parts[k]); k += 1
    p = _put(p, pod)
    p = _put(p, <bytes>parts[k]); k += 1
    p = _put(p, node)
    p = _put(p, <bytes>parts[k]); k += 1
    p = _put(p, res)
    _put(p, <bytes>parts[k])
    return out


def proposal_records(
    object parts,
    object gang_template,
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
    ``placements``). A one-pod proposal (one binding, no victims, no GPU devices) is
    joined from ``parts`` (None: never), or when it has a gang from the pieces
    ``gang_template()`` returns (called once, at the first such proposal; None:
    never) with its gang's key as JSON (keyed by its gang, as every proposal of a
    gang is), with its id (its UTF-8 text with
    ``plain_ids``, else its JSON-escaped text), its pod's and node's JSON and its
    class's requests as JSON (``class_of(pod)`` the class id, ``resources`` the JSON
    by class id, filled from ``requests_json(cid)``; ``nodes`` by node, filled);
    ``other(i)`` writes any other."""
    cdef list out = []
    cdef object i, pl, bindings, b, pod, node, devices, cid, res, nj, pid, gang, template
    cdef bytes pid_b, gang_b
    cdef object gang_parts = None
    cdef bint gang_made = False
    for i in which:
        pl = placements[i]
        bindings = pl.bindings
        gang = pl.gang
        if gang is None:
            template = parts
        else:
            if not gang_made:  # a batch without gangs never writes their template
                gang_parts = gang_template()
                gang_made = True
            template = gang_parts
        if (
            template is None
            or pl.victims
            or len(bindings) != 1
            or (gang is not None and type(gang) is not str)
        ):
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
        if gang is None:
            out.append(
                (PyUnicode_AsUTF8String(pod), _record(template, pid_b, None, _dumps(pod), nj, res))
            )
        else:
            gang_b = _dumps(gang)
            out.append(
                (PyUnicode_AsUTF8String(gang),
                 _record(template, pid_b, gang_b, _dumps(pod), nj, res))
            )
    return out
