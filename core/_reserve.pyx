"""Reservations in a :class:`~esched.core._placer.Placer`'s view (starvation guard).

A gang that waits too long gets nodes reserved for it (``ClusterState.reservations``,
``reserved_nodes``): :func:`reservation_nodes` chooses them, :func:`hide_reserved`
keeps everyone else off them in a placer's view, and :func:`gang_of` tells whether
pods belong to a reserved gang (whose plans see its own reserved nodes). The
:class:`Placer` methods of the same names delegate here.
"""

from libc.stdint cimport uint64_t

import numpy as np

from esched.core._classview cimport ClassView
from esched.core._feasibility cimport REASON_NON_RESOURCE, reason_bits
from esched.core._placer cimport Placer
from esched.core._state cimport COL_PODS, ClusterState

__all__ = ["hide_reserved", "reservation_nodes"]


cdef object gang_of(Placer pl, pods):
    # The reserved gang the members belong to (None: no reservation for them).
    cdef ClusterState st = pl.state
    if not st.reservations or not pods or not isinstance(pods[0], str):
        return None
    g = int(st.pod_gang_np[st.pod_index[pods[0]]])
    key = st.gang_keys[g] if g >= 0 else None
    return key if key in st.reservations else None


cpdef hide_reserved(Placer pl, gang):
    """Make nodes reserved for a gang other than ``gang`` infeasible in ``pl``'s view.

    A reserved node shows no free pod slot (its ``pods`` capacity reads 0), so no
    placement, preemption or gang plan of anyone else lands there; ``gang``'s own
    reserved nodes show their real capacity. Only the few reserved nodes are
    touched, and a changed row gets a new placer version (its cache entries die).
    """
    cdef ClusterState st = pl.state
    cdef Py_ssize_t n, col
    if not pl.hide_reserved or (not st.reserved_nodes and not pl.hidden):
        return None
    col = COL_PODS
    hidden = {}
    for name, owner in st.reserved_nodes.items():
        if owner != gang:
            hidden[name] = st.node_index[name]
    for name, idx in list(pl.hidden.items()) + list(hidden.items()):
        n = idx
        if n >= pl.n_nodes:
            continue
        want = 0 if name in hidden and st.node_index.get(name) == idx else st.allocatable[n, col]
        if pl.alloc[n, col] != want:
            pl.alloc[n, col] = want
            if pl.fused.on:
                pl._soa_node(n, st.flags[n])  # the vectorized kernel reads soa
            pl._touch(n)  # new version; the block's cache summaries die too
    pl.hidden = hidden
    return None


def reservation_nodes(Placer pl, pods, long long need) -> list[str]:
    """Nodes to reserve for a gang that does not fit now (starvation guard).

    Sizes the gang by its largest member (per resource), keeps the nodes where a
    member passes every constraint and that no other gang holds, and takes them
    by capacity (members they hold when empty), then by how many fit right now
    (the ones closest to free), until their *capacity* holds ``need`` members.
    Empty if the gang could not fit even on an empty cluster (reserving would only
    idle nodes).
    """
    cdef ClusterState st = pl.state
    cdef Py_ssize_t n, N
    cdef uint64_t reasons
    cdef ClassView v
    keys = list(pods)
    if not keys or need <= 0:
        return []
    pl._ensure_synced()
    cids = [pl._class_of(p) for p in keys]
    N, R = pl.n_nodes, pl.n_res
    req = st.class_req_np[cids, :R].max(axis=0).astype(np.int64)
    ok = np.zeros(N, dtype=bool)
    pl._view(cids[0], &v, pl._lset_of(keys[0]))
    for n in range(N):
        reasons = reason_bits(&v, n, True)
        ok[n] = (reasons & <uint64_t>REASON_NON_RESOURCE) == 0
    cols = np.flatnonzero(req > 0)
    cap = pl.alloc_np[:, cols] // req[cols]
    free = np.clip(pl.alloc_np[:, cols] - pl.used_np[:, cols], 0, None) // req[cols]
    slots = np.where(ok, cap.min(axis=1), 0)
    now = np.where(ok, free.min(axis=1), 0)
    order = np.lexsort((np.arange(N), -now, -slots))
    chosen, total = [], 0
    for n in order:
        if slots[n] <= 0 or total >= need:
            break
        chosen.append(st.node_names[n])
        total += int(slots[n])
    return chosen if total >= need else []
