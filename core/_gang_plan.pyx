"""Gang plans over a :class:`~esched.core._placer.Placer`'s view: all or nothing.

:func:`plan_gang` places a gang's members in order, each seeing the ones before it
(assumed), through the placer's own feasibility and scan; if fewer than
``minMember`` fit, it undoes every assumption and records why
(:func:`gang_shortfall`, worded by :func:`gang_message`). ``Placer.plan_gang`` and
``Placer.gang_message`` delegate here; a gang that may preempt is planned by
:func:`esched.core._preempt.plan_gang_preempting`.
"""

from libc.stdint cimport uint8_t

import numpy as np

from esched.core._classview cimport ClassView
from esched.core._placer cimport Placer
from esched.core._reserve cimport gang_of, hide_reserved
from esched.core._state cimport ClusterState
from esched.core._types cimport NODE_ALIVE, NODE_UNSCHEDULABLE, score_t

__all__ = ["gang_message", "gang_shortfall", "plan_gang"]


def plan_gang(Placer pl, pods, min_member: int | None = None,
              devices=None) -> list[str] | None:
    """All-or-nothing plan for a gang on ``pl``'s view (a scratch overlay).

    Places members in order, assuming each; if fewer than ``min_member`` (default:
    all) fit, every assumption made here is undone and None is returned, leaving
    the placer exactly as before (apart from the RNG and rotation). On success the
    plan stays assumed and the node name per member is returned (None for members
    beyond ``min_member`` that did not fit).

    ``devices`` is an exact per-member filter for what the state only sums, e.g.
    GPU devices (:class:`esched.core._devices.GangDevices`). Before member ``i``,
    ``devices.mask(i)`` returns a uint8 mask per node slot (0 = does not fit, given
    the members planned so far) or None; once ``i`` is planned on slot ``n``,
    ``devices.take(i, n)``; if the gang fails, ``devices.undo()``. Without it a
    member's fractional GPU would be checked only against the node's sum of free
    GPU milli, which four devices at 250 free each pass for a 500 share.
    """
    cids = [pl._class_of(p) for p in pods]
    pl._ensure_synced()
    lsets = [pl._lset_of(p) for p in pods]
    gang = gang_of(pl, pods)
    if gang is not None:
        hide_reserved(pl, gang)  # the gang sees the nodes reserved for it
    try:
        return _place_members(pl, cids, min_member, devices, lsets)
    finally:
        if gang is not None:
            hide_reserved(pl, None)


cdef object _place_members(Placer pl, list cids, min_member, devices, list lsets):
    need = len(cids) if min_member is None else min_member
    done = []
    names = []
    cdef Py_ssize_t cid, n, i = 0, lset
    cdef ClassView v
    cdef score_t best
    cdef long long visited
    cdef const uint8_t[::1] mask
    for i, cid in enumerate(cids):
        # members placed earlier in the plan are assumed: their counts are seen
        lset = lsets[i]
        pl._view(cid, &v, lset)
        m = devices.mask(i) if devices is not None else None
        if m is not None:
            mask = m  # held for the call: ext_mask points into it
            if mask.shape[0] < pl.n_nodes:
                raise ValueError(f"mask has {mask.shape[0]} entries for "
                                 f"{pl.n_nodes} nodes")
            pl.ext_mask = &mask[0] if mask.shape[0] > 0 else NULL
        try:
            n = pl._place(cid, &v, &best, &visited)
        finally:
            pl.ext_mask = NULL
        pl.visited += visited
        if n < 0:
            names.append(None)
            continue
        pl._assume(cid, n, 1, lset)
        if devices is not None:
            devices.take(i, n)
        done.append((cid, n, lset))
        names.append(pl.state.node_names[n])
    if len(done) < need:
        if devices is not None:
            devices.undo()
        # The report is taken on the view with the members that did fit assumed.
        pl.gang_failure = gang_shortfall(
            pl, [c for c, name in zip(cids, names) if name is None][: need - len(done)],
            len(done), need, len(cids))
        for cid, n, lset in reversed(done):
            pl._assume(cid, n, -1, lset)
        pl.unschedulable += 1
        return None
    pl.gang_failure = None
    pl.placed += len(done)
    return names


def gang_shortfall(Placer pl, list missing, long long fit, long long need,
                   long long members) -> dict:
    """Why a gang did not fit: how many of ``need`` members fit together, and per
    resource how much the next ``missing`` classes' requests exceed the free room
    of all schedulable nodes in ``pl``'s view (after the members that fit). Empty
    ``short`` means the room exists in total but no node fits the rest
    (constraints, fragmentation).
    """
    cdef ClusterState st = pl.state
    nres = pl.n_res
    want = np.zeros(nres, dtype=np.int64)
    for cid in missing:
        want += st.class_req_np[cid, :nres]
    flags = st.flags_np[: pl.n_nodes]
    ok = ((flags & NODE_ALIVE) != 0) & ((flags & NODE_UNSCHEDULABLE) == 0)
    free = np.clip(pl.alloc_np[ok] - pl.used_np[ok], 0, None).sum(axis=0)
    short = {st.res_names[r]: int(want[r] - free[r])
             for r in range(nres) if want[r] > free[r]}
    return {"fit": int(fit), "need": int(need), "members": int(members), "short": short}


def gang_message(report: dict | None) -> str:
    """The operator's one-line reason of a failed gang plan's ``report`` (the
    placer's ``gang_failure``): ``7/10 members fit; short of nvidia.com/gpu: 3``."""
    from esched.schemas.quantity import format_units

    if not report:
        return ""
    head = f"{report['fit']}/{report['need']} members fit"
    if report["short"]:
        return head + "; short of " + ", ".join(
            f"{name}: {format_units(name, units)}"
            for name, units in sorted(report["short"].items()))
    return head + "; the cluster has the room in total but no node fits the rest " \
                  "(constraints or fragmentation)"
