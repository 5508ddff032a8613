"""The slots of a replica's claims in one C loop (see
:class:`esched.services.replica.claims._Claims`).

Every renewal of the placer's view assumes every claim still in flight again, and
the fold has moved between two renewals, so each one needs the claims' pod and
node slots as the state has them now. Looking each name up in the state's indexes
(a dict of every pod, ~100,000 in a large cluster) costs cache misses, ~0.5 µs a
name, per name per renewal; a slot kept with its claim holds while the state still
names the binding's pod (node) there, which one list read and a compare confirm.
"""

cimport cython
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from libc.stdint cimport int64_t

import numpy as np


cdef inline Py_ssize_t _slot(object name, Py_ssize_t slot, list names, dict index):
    """``slot`` if ``names`` still has ``name`` there, else ``index``'s slot (-1: none)."""
    cdef object there
    if 0 <= slot < PyList_GET_SIZE(names):
        there = <object>PyList_GET_ITEM(names, slot)
        if there is name or there == name:
            return slot
    return index.get(name, -1)


@cython.boundscheck(False)
@cython.wraparound(False)
def claimed_slots(
    claims, list pod_keys, list node_names, dict pod_index, dict node_index
) -> tuple:
    """``(pods, nodes, victims)``: the pod and node slots of every binding of
    ``claims`` (``(bindings, victims, slots)``) whose pod and node the state has
    now, as ``pod_index.get`` and ``node_index.get`` of their names would give
    them (int64 arrays, as :meth:`Placer.assume_claims` takes them: no int object
    per slot), and the slots of the claims' victims the state has (a list).

    ``slots`` is the claim's list of ``(pod slot, node slot, ...)``, flat, -1 for
    a name not in the state: empty until the claim's first renewal fills it, then
    kept, and a slot whose name the state no longer has there (a pod removed, its
    slot reused) is looked up again and replaced."""
    cdef Py_ssize_t total = 0
    for claim in claims:
        total += len(claim[0])
    pods_np = np.empty(total, dtype=np.int64)
    nodes_np = np.empty(total, dtype=np.int64)
    cdef int64_t[::1] pods = pods_np
    cdef int64_t[::1] nodes = nodes_np
    cdef list victims = [], slots
    cdef Py_ssize_t i, k = 0, p, n, kept_p, kept_n
    cdef bint first
    for claim in claims:
        slots = claim[2]
        # Two per binding once filled (anything else: a fill cut short, done again).
        first = PyList_GET_SIZE(slots) != 2 * len(claim[0])
        if first:
            del slots[:]
        i = 0
        for b in claim[0]:
            if first:
                p = pod_index.get(b[0], -1)
                n = node_index.get(b[1], -1)
                slots.append(p)
                slots.append(n)
            else:
                kept_p = <Py_ssize_t>slots[i]
                kept_n = <Py_ssize_t>slots[i + 1]
                p = _slot(b[0], kept_p, pod_keys, pod_index)
                n = _slot(b[1], kept_n, node_names, node_index)
                if p != kept_p:
                    slots[i] = p
                if n != kept_n:
                    slots[i + 1] = n
            i += 2
            if p >= 0 and n >= 0 and k < total:
                pods[k] = p
                nodes[k] = n
                k += 1
        for pod in claim[1]:  # victims are rare: looked up
            v = pod_index.get(pod)
            if v is not None:
                victims.append(v)
    return pods_np[:k], nodes_np[:k], victims
