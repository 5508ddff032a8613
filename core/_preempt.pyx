"""Preemption planning: which running pods to evict so that a pending pod fits.

Borg's rules (``esched.core.bands``): a pod may evict only pods of a strictly lower
band, and prod never evicts prod, so only batch and best-effort pods are victims.
A gang member is a candidate only if every running member of its gang is (evicting
one can take the whole gang down), and a gang whose running members would drop
below ``minMember`` is evicted whole (its other members are *collateral* victims).

Per candidate node (one where the pod passes every constraint except resources),
as kube-scheduler's DefaultPreemption does: remove every candidate victim; if the
pod still does not fit, the node cannot help. Otherwise *reprieve* victims one by
one, most important first (highest band, then highest priority, then, as kube's
``MoreImportantPod``, the earliest started: ``ClusterState.pod_starts``, the log
position of the pod's binding), putting each back if the pod still fits without
it; the ones left are the node's victims. So the least important go first and no
victim is evicted that the pod does not need gone.

Among nodes, the plan minimises, lexicographically (``COST_*``)::

    cost(node) = (highest band among its victims and collateral,
                  highest priority among the direct victims,
                  sum of the direct victims' priorities, each + 2^31,
                  number of victims + collateral gang members,
                  minus the earliest start among the direct victims of that priority,
                  node slot)

i.e. Borg's rule first (disturb the lowest band possible), then kube's
``pickOneNodeForPreemption`` in its order (the lowest highest priority, the
smallest sum, the fewest pods, the latest start among the highest-priority
victims); the node slot, where kube takes the first node it lists, makes it
deterministic. (kube's first criterion, the fewest PodDisruptionBudget
violations, has no counterpart: esched has no disruption budgets.)

The per-node work is :func:`_node_victims`, ``noexcept nogil`` over raw arrays (a
CSR list of candidate victims per node, sorted highest-first); the numpy
preparation and the gang bookkeeping around it are Python, once per call.

Over a :class:`~esched.core._placer.Placer`'s view: :func:`plan_preemption` (one pod:
the candidate nodes by the placer's feasibility, then :func:`select_victims`),
:func:`plan_gang_preempting` (a gang whose members may preempt, all or nothing) and
:func:`class_bands` (each class's band). The :class:`Placer` methods of the same
names delegate here.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

import numpy as np

from esched.core._classview cimport ClassView
from esched.core._feasibility cimport (
    REASON_EXISTING_ANTI_AFFINITY,
    REASON_NODE_PORTS,
    REASON_NON_RESOURCE,
    REASON_POD_ANTI_AFFINITY,
    REASON_SPREAD,
    reason_bits,
)
from esched.core._placer cimport Placer
from esched.core._reserve cimport gang_of, hide_reserved
from esched.core._state cimport ClusterState
from esched.core._types cimport PHASE_RUNNING, units_t

from esched.core.bands import DEFAULT_BANDS, Band

__all__ = [
    "class_bands",
    "interpod_victims",
    "plan_gang_preempting",
    "plan_preemption",
    "select_victims",
]

cdef int _PRODUCTION = Band.PRODUCTION


# The node cost's fields, compared in this order (lower is better), then the node
# slot; COST_PRIORITY is reported, not compared (COST_ADJUSTED orders by it).
cdef enum:
    COST_BAND = 0        # highest band among victims and collateral (Borg: lowest first)
    COST_TOP = 1         # highest priority among the direct victims
    COST_ADJUSTED = 2    # sum of the direct victims' priorities, each + 2^31
    COST_PODS = 3        # victims + collateral gang members
    COST_START = 4       # minus the earliest start among the direct victims of COST_TOP
    COST_PRIORITY = 5    # sum of the direct victims' priorities
    COST_FIELDS = 6
    COST_COMPARED = 5

# kube's pickOneNodeForPreemption adds MaxInt32 + 1 to each victim's priority before
# summing, so that a node with few pods of negative priority is not picked over one
# with fewer pods of the same priority.
cdef int64_t _PRIORITY_OFFSET = 2147483648


cdef void _cost(Py_ssize_t lo, Py_ssize_t hi, const int32_t* vic, const uint8_t* chosen,
                const uint8_t* pband, const int64_t* pprio, const int64_t* pstart,
                const int32_t* pgang, const int64_t* grun, const int64_t* gmin,
                const uint8_t* gband, int64_t* gscratch, int64_t* cost) noexcept nogil:
    """The cost (``COST_*``) of evicting the chosen ``vic[lo:hi]``: Borg's band first,
    then kube's DefaultPreemption order (pickOneNodeForPreemption), the gangs they
    push below minMember evicted whole (their other running members counted)."""
    cdef Py_ssize_t k, p, g
    cdef int64_t count = 0, prio = 0, adjusted = 0, top = 0, start = 0, left
    cdef int band = -1
    for k in range(lo, hi):
        if not chosen[k]:
            continue
        p = vic[k]
        count += 1
        prio += pprio[p]
        adjusted += pprio[p] + _PRIORITY_OFFSET
        if count == 1 or pprio[p] > top:
            top = pprio[p]
            start = pstart[p]
        elif pprio[p] == top and pstart[p] < start:
            start = pstart[p]
        if pband[p] > band:
            band = pband[p]
        g = pgang[p]
        if g >= 0:
            gscratch[g] += 1
    # Gangs pushed below minMember go whole: their other running members count too.
    for k in range(lo, hi):
        g = pgang[vic[k]]
        if chosen[k] and g >= 0 and gscratch[g] > 0:
            left = grun[g] - gscratch[g]
            if left < gmin[g]:
                count += left
                if gband[g] > band:
                    band = gband[g]
            gscratch[g] = 0
    cost[COST_BAND] = band
    cost[COST_TOP] = top
    cost[COST_ADJUSTED] = adjusted
    cost[COST_PODS] = count
    cost[COST_START] = -start  # the latest start is preferred
    cost[COST_PRIORITY] = prio


cdef bint _node_victims(Py_ssize_t n, Py_ssize_t R, const units_t* alloc, const units_t* used,
                        const units_t* req, const int64_t* off, const int32_t* vic,
                        const units_t* palloc, Py_ssize_t pstride, const uint8_t* pband,
                        const int64_t* pprio, const int64_t* pstart, const int32_t* pgang,
                        const int64_t* grun, const int64_t* gmin, const uint8_t* gband,
                        int64_t* gscratch, units_t* free, uint8_t* chosen, int64_t* cost,
                        const uint8_t* must) noexcept nogil:
    """Victims of node ``n`` (``chosen[k]`` = 1 for vic[k]) and their cost; False if
    evicting every candidate there still leaves no room for the pod. ``must[p]``: pod
    p holds a host port the pod needs, so it is never reprieved (kube's reprieve
    runs every filter, NodePorts included)."""
    cdef Py_ssize_t r, k, p
    cdef bint fits
    for r in range(R):
        free[r] = alloc[n * R + r] - used[n * R + r]
    for k in range(off[n], off[n + 1]):
        p = vic[k]
        for r in range(R):
            free[r] += palloc[p * pstride + r]
    for r in range(R):
        if req[r] > 0 and free[r] < req[r]:
            return False
    # Reprieve, most important first (vic is sorted that way within the node).
    for k in range(off[n], off[n + 1]):
        p = vic[k]
        fits = not must[p]
        for r in range(R):
            if not fits:
                break
            if req[r] > 0 and free[r] - palloc[p * pstride + r] < req[r]:
                fits = False
                break
        if fits:
            for r in range(R):
                free[r] -= palloc[p * pstride + r]
            chosen[k] = 0
        else:
            chosen[k] = 1
    _cost(off[n], off[n + 1], vic, chosen, pband, pprio, pstart, pgang, grun, gmin, gband,
          gscratch, cost)
    return True


cdef inline bint _better(const int64_t* a, const int64_t* b) noexcept nogil:
    cdef int i
    for i in range(COST_COMPARED):
        if a[i] != b[i]:
            return a[i] < b[i]
    return False


cdef Py_ssize_t _scan(Py_ssize_t N, Py_ssize_t R, const units_t* alloc, const units_t* used,
                      const units_t* req, const uint8_t* ok, const int64_t* off,
                      const int32_t* vic, const units_t* palloc, Py_ssize_t pstride,
                      const uint8_t* pband, const int64_t* pprio, const int64_t* pstart,
                      const int32_t* pgang, const int64_t* grun, const int64_t* gmin,
                      const uint8_t* gband, int64_t* gscratch, units_t* free,
                      uint8_t* chosen, int64_t* best_cost, const uint8_t* must) noexcept nogil:
    """The cheapest node (or -1) over nodes with ``ok`` and at least one candidate."""
    cdef Py_ssize_t n, best = -1, i
    cdef int64_t cost[COST_FIELDS]
    for n in range(N):
        if not ok[n] or off[n + 1] == off[n]:
            continue
        if not _node_victims(n, R, alloc, used, req, off, vic, palloc, pstride, pband, pprio,
                             pstart, pgang, grun, gmin, gband, gscratch, free, chosen, cost,
                             must):
            continue
        if best < 0 or _better(cost, best_cost):
            best = n
            for i in range(COST_FIELDS):
                best_cost[i] = cost[i]
    return best


def select_victims(state, used, alloc, ok, Py_ssize_t cid, class_band, evicted,
                   Py_ssize_t exclude_gang=-1, dict cache=None, must=None):
    """The cheapest preemption for class ``cid`` (see the module docstring), or None.

    :param state: the :class:`~esched.core.ClusterState` (read only).
    :param used: ``[node, res]`` allocation as the placer sees it (assumptions included).
    :param alloc: ``[node, res]`` allocatable, same shape.
    :param ok: ``uint8[node]``, 1 where the pod passes every non-resource constraint.
    :param class_band: ``uint8[class]`` band of each equivalence class.
    :param evicted: ``bool[pod]`` pods already planned as victims (not candidates again).
    :param exclude_gang: the preemptor's own gang (its members are never victims).
    :param cache: a dict kept by the caller across calls: the running pods sorted
        (node, band desc, priority desc, start) are reused while the state's position is
        the same, so a pass of many plans sorts once.
    :param must: ``bool[pod]`` pods holding a host port the pod needs (kube's
        NodePorts): their node is a candidate only if every one of them may be
        evicted, and they are victims there (never reprieved).
    :returns: ``(node slot, victim pod slots, collateral pod slots, cost)``, the cost a
        tuple of the ``COST_*`` fields (its first ``COST_COMPARED`` compared).
    """
    cdef Py_ssize_t N = used.shape[0], R = used.shape[1], P = state.n_pods
    if N == 0 or P == 0:
        return None
    (legal, order_all, pnode, pgang, pband, pprio, pstart, grun, gmin, gband, in_gang,
     running) = _legal(state, N, cid, class_band, evicted, exclude_gang, cache)
    G = state.n_gangs
    must_p = np.zeros(P, dtype=np.uint8)

    if must is not None:
        must_p[:] = must[:P]
        must_p &= running  # a pod already evicted holds nothing
        # A node whose port holders may not all be evicted cannot help.
        held = np.flatnonzero(must_p.astype(bool) & ~legal)
        if held.size:
            ok = np.array(ok, dtype=np.uint8)
            ok[pnode[held]] = 0
    # Already in (node, band desc, priority desc, start, slot) order: no sort per call.
    vic = np.ascontiguousarray(order_all[legal[order_all]], dtype=np.int32)
    if vic.size == 0:
        return None
    off = np.searchsorted(pnode[vic], np.arange(N + 1)).astype(np.int64)
    # The state's own table (rows res_cap wide): no copy of every pod's allocation.
    palloc = state.pod_alloc_np
    if palloc.dtype != np.int64 or not palloc.flags.c_contiguous:
        palloc = np.ascontiguousarray(palloc, dtype=np.int64)
    req = np.ascontiguousarray(state.class_req_np[cid, :R], dtype=np.int64)
    used_c = np.ascontiguousarray(used, dtype=np.int64)
    alloc_c = np.ascontiguousarray(alloc, dtype=np.int64)
    ok_c = np.ascontiguousarray(ok, dtype=np.uint8)
    gscratch = np.zeros(max(G, 1), dtype=np.int64)
    free = np.zeros(max(R, 1), dtype=np.int64)
    chosen = np.zeros(max(vic.shape[0], 1), dtype=np.uint8)
    cost = np.zeros(COST_FIELDS, dtype=np.int64)

    cdef const units_t[:, ::1] a_v = alloc_c
    cdef const units_t[:, ::1] u_v = used_c
    cdef const units_t[::1] q_v = req
    cdef const uint8_t[::1] ok_v = ok_c
    cdef const int64_t[::1] off_v = off
    cdef const int32_t[::1] vic_v = vic
    cdef const units_t[:, ::1] pa_v = palloc
    cdef const uint8_t[::1] pb_v = pband
    cdef const int64_t[::1] pp_v = pprio
    cdef const int64_t[::1] ps_v = pstart
    cdef const int32_t[::1] pg_v = pgang
    cdef const int64_t[::1] gr_v = grun if G else np.zeros(1, dtype=np.int64)
    cdef const int64_t[::1] gm_v = gmin if G else np.zeros(1, dtype=np.int64)
    cdef const uint8_t[::1] gb_v = gband
    cdef int64_t[::1] gs_v = gscratch
    cdef units_t[::1] f_v = free
    cdef uint8_t[::1] ch_v = chosen
    cdef int64_t[::1] c_v = cost
    cdef const uint8_t[::1] m_v = must_p
    cdef Py_ssize_t best, pstride = palloc.shape[1]
    with nogil:
        best = _scan(N, R, &a_v[0, 0], &u_v[0, 0], &q_v[0], &ok_v[0], &off_v[0], &vic_v[0],
                     &pa_v[0, 0], pstride, &pb_v[0], &pp_v[0], &ps_v[0], &pg_v[0], &gr_v[0],
                     &gm_v[0], &gb_v[0], &gs_v[0], &f_v[0], &ch_v[0], &c_v[0], &m_v[0])
        if best >= 0:  # again on the winner, to leave its choice in ``chosen``
            _node_victims(best, R, &a_v[0, 0], &u_v[0, 0], &q_v[0], &off_v[0], &vic_v[0],
                          &pa_v[0, 0], pstride, &pb_v[0], &pp_v[0], &ps_v[0], &pg_v[0],
                          &gr_v[0], &gm_v[0], &gb_v[0], &gs_v[0], &f_v[0], &ch_v[0], &c_v[0],
                          &m_v[0])
    if best < 0:
        return None
    lo, hi = int(off[best]), int(off[best + 1])
    victims = [int(vic[k]) for k in range(lo, hi) if chosen[k]]
    return best, victims, _collateral(victims, pgang, grun, gmin, in_gang), tuple(
        [int(x) for x in cost])


def _legal(state, Py_ssize_t N, Py_ssize_t cid, class_band, evicted, Py_ssize_t exclude_gang,
           dict cache):
    """The candidate victims of class ``cid`` (see :func:`select_victims`): ``(legal
    bool[pod], running pods in (node, band desc, priority desc, start, slot) order
    (kube's MoreImportantPod within a band: of equal priority, the earlier started is the
    more important), pod node, gang, band, priority, start, per gang its running members, minMember and highest band,
    running gang members, running)``."""
    cdef Py_ssize_t P = state.n_pods
    my_band = int(class_band[cid])
    phase = state.pod_phase_np[:P]
    pnode = state.pod_node_np[:P]
    pgang = np.ascontiguousarray(state.pod_gang_np[:P], dtype=np.int32)
    pclass = state.pod_class_np[:P]
    running = (phase == PHASE_RUNNING) & (pnode >= 0) & (pnode < N)
    pband = np.zeros(P, dtype=np.uint8)
    pband[running] = class_band[pclass[running]]
    pprio = np.ascontiguousarray(state.pod_prio_np[:P], dtype=np.int64)
    pstart = np.ascontiguousarray(state.pod_start_np[:P], dtype=np.int64)
    key = (state.position, P, N, id(class_band), class_band.shape[0])
    hit = cache.get("order") if cache is not None else None
    if hit is not None and hit[0] == key:
        order_all = hit[1]
    else:
        run = np.flatnonzero(running)
        order_all = run[np.lexsort((run, pstart[run], -pprio[run],
                                    -pband[run].astype(np.int64), pnode[run]))]
        if cache is not None:
            cache["order"] = (key, order_all)
    if evicted is not None:
        running &= ~evicted[:P]
    # may_preempt, vectorised: strictly lower and never prod.
    legal = running & (pband < my_band) & (pband < _PRODUCTION)
    G = state.n_gangs
    in_gang = running & (pgang >= 0)
    grun = np.bincount(pgang[in_gang], minlength=G).astype(np.int64)
    gmin = np.ascontiguousarray(state.gang_min_np[:G], dtype=np.int64)
    gband = np.zeros(max(G, 1), dtype=np.uint8)
    if G:
        np.maximum.at(gband, pgang[in_gang], pband[in_gang])
        bad = np.zeros(G, dtype=bool)
        bad[pgang[in_gang & ~legal]] = True  # a gang with any protected member is off
        if exclude_gang >= 0:
            bad[exclude_gang] = True
        legal &= ~((pgang >= 0) & bad[np.clip(pgang, 0, None)])
    return (legal, order_all, pnode, pgang, pband, pprio, pstart, grun, gmin, gband,
            in_gang, running)


def _collateral(list victims, pgang, grun, gmin, in_gang) -> list:
    """The other running members of gangs the victims push below minMember."""
    collateral = []
    taken = {}
    for p in victims:
        g = int(pgang[p])
        if g >= 0:
            taken[g] = taken.get(g, 0) + 1
    chosen_set = set(victims)
    for g, k in sorted(taken.items()):
        if grun[g] - k < gmin[g]:
            for p in np.flatnonzero(in_gang & (pgang == g)):
                if int(p) not in chosen_set:
                    collateral.append(int(p))
    return collateral


def interpod_victims(placer, state, pod, nodes, got, Py_ssize_t cid, class_band, evicted,
                     Py_ssize_t exclude_gang=-1, dict cache=None):
    """Preemption on nodes where ``pod`` fails only by rules its victims can lift: its
    required pod anti-affinity, bound pods' anti-affinity, topology spread skew (and
    host ports or resources besides). kube's DefaultPreemption ``selectVictimsOnNode``:
    take every candidate victim of the node out of the placer's view, run every
    filter (:meth:`~esched.core.Placer.fits`, so the inter-pod counts and the spread
    skew are recounted without them); if the pod still does not fit the node cannot
    help; else reprieve candidates one by one, highest band and priority first,
    keeping out only those without which it does not fit. Returns the cheaper of
    ``got`` (:func:`select_victims`' plan over the other nodes, or None) and the best
    of these nodes, by the same cost and then node slot; the view is left as found.

    :param placer: the :class:`~esched.core.Placer` whose view is used (assumed
        evictions are taken back before returning), over ``state``.
    :param nodes: node slots where the pod's only non-resource reasons are those.
    """
    cdef Py_ssize_t N = placer.used_array().shape[0]
    if N == 0 or state.n_pods == 0:
        return got
    (legal, order_all, pnode, pgang, pband, pprio, pstart, grun, gmin, gband, in_gang,
     _running) = _legal(state, N, cid, class_band, evicted, exclude_gang, cache)
    vic = order_all[legal[order_all]]
    best = None
    if got is not None:
        best = (got[3][:COST_COMPARED], got[0], got)
    for n in nodes:
        cands = [int(p) for p in vic[pnode[vic] == n]]
        if not cands:
            continue
        name = state.node_names[n]
        for p in cands:
            placer.assume_evicted(p)
        victims = []
        if placer.fits(pod, name):
            for p in cands:  # it does not fit even with them all gone
                placer.assume_evicted(p, -1)
            continue
        for p in cands:
            placer.assume_evicted(p, -1)  # reprieved, unless the pod needs it gone
            if placer.fits(pod, name):
                placer.assume_evicted(p)
                victims.append(p)
        for p in victims:
            placer.assume_evicted(p, -1)
        if not victims:
            continue
        cost = _cost_of(victims, pband, pprio, pstart, pgang, grun, gmin, gband)
        if best is None or (cost[:COST_COMPARED], n) < best[:2]:
            best = (cost[:COST_COMPARED], n,
                    (n, victims, _collateral(victims, pgang, grun, gmin, in_gang), cost))
    return None if best is None else best[2]


cdef tuple _cost_of(list victims, pband, pprio, pstart, pgang, grun, gmin, gband):
    # _cost of these victims (all chosen), for the paths that choose them in Python.
    vic = np.asarray(victims, dtype=np.int32)
    chosen = np.ones(vic.shape[0], dtype=np.uint8)
    gscratch = np.zeros(max(grun.shape[0], 1), dtype=np.int64)
    cost = np.zeros(COST_FIELDS, dtype=np.int64)
    G = grun.shape[0]
    cdef const int32_t[::1] vic_v = vic
    cdef const uint8_t[::1] ch_v = chosen
    cdef const uint8_t[::1] pb_v = pband
    cdef const int64_t[::1] pp_v = pprio
    cdef const int64_t[::1] ps_v = pstart
    cdef const int32_t[::1] pg_v = pgang
    cdef const int64_t[::1] gr_v = grun if G else np.zeros(1, dtype=np.int64)
    cdef const int64_t[::1] gm_v = gmin if G else np.zeros(1, dtype=np.int64)
    cdef const uint8_t[::1] gb_v = gband
    cdef int64_t[::1] gs_v = gscratch
    cdef int64_t[::1] c_v = cost
    _cost(0, vic.shape[0], &vic_v[0], &ch_v[0], &pb_v[0], &pp_v[0], &ps_v[0], &pg_v[0],
          &gr_v[0], &gm_v[0], &gb_v[0], &gs_v[0], &c_v[0])
    return tuple([int(x) for x in cost])


# ---------------------------------------------------------------------- over a Placer

def class_bands(Placer pl, bands=None) -> np.ndarray:
    """``uint8[class]``: the Borg band of every equivalence class under ``bands``
    (a :class:`~esched.core.bands.BandConfig`; default thresholds if None), kept
    in ``pl`` for the next call with the same config."""
    cdef ClusterState st = pl.state
    cfg = bands if bands is not None else DEFAULT_BANDS
    if cfg is not pl.band_cfg:
        pl.band_cfg = cfg
        pl.band_np = np.zeros(0, dtype=np.uint8)
    if pl.classes.stale():
        pl._forget_classes()  # (ids reused since: their bands are resolved again)
    have = pl.band_np.shape[0]
    if have < st.n_classes:
        grown = np.zeros(max(st.n_classes, 2 * have, 64), dtype=np.uint8)
        grown[:have] = pl.band_np[:have]
        for c in range(have, st.n_classes):
            spec = st.class_specs[c]
            # (a released id: 0 until a new class takes it; see Placer._forget_classes)
            grown[c] = (cfg.band_of(spec["priority"], spec.get("priorityClassName"))
                        if spec is not None else 0)
        # Slots past n_classes are filled when their classes appear.
        pl.band_np = grown[: st.n_classes]
    return pl.band_np


def plan_preemption(Placer pl, pod, bands=None, bint assume=True) -> dict | None:
    """Where ``pod`` fits in ``pl``'s view by evicting pods of lower bands, and whom
    (or None).

    Victims are chosen by :func:`select_victims` (Borg's band first, then kube's
    DefaultPreemption order; gangs pushed below minMember go whole). Returns
    ``{"node", "victims": [pod keys on that node], "collateral": [gang members
    elsewhere], "cost": {"band", "pods", "priority"}}``; None for a pod whose
    ``preemptionPolicy`` is ``Never``. With ``assume`` the
    evictions and the placement join the placer's view (until its ``sync()``), and
    the victims are not offered again.
    """
    cdef ClusterState st = pl.state
    cdef Py_ssize_t cid = pl._class_of(pod), n, N
    cdef uint64_t reasons
    if not st.class_preempts(cid):
        return None  # preemptionPolicy: Never
    pl._ensure_synced()
    cdef ClassView v
    pl._view(cid, &v, pl._lset_of(pod))
    N = pl.n_nodes
    ok = np.zeros(N, dtype=np.uint8)
    cdef uint8_t[::1] ok_v = ok
    port_nodes = []
    ip_nodes = []
    for n in range(N):
        reasons = reason_bits(&v, n, True)
        # Constraints must hold; only resources may be missing, or host ports that
        # evicting their holders frees (kube's preemption runs NodePorts too), or
        # anti-affinity and spread skew that evicting pods there may lift
        # (interpod_victims).
        reasons &= <uint64_t>REASON_NON_RESOURCE
        ok_v[n] = reasons == 0
        if reasons == <uint64_t>REASON_NODE_PORTS:
            port_nodes.append(n)
        elif reasons and not reasons & ~<uint64_t>(
                REASON_POD_ANTI_AFFINITY | REASON_EXISTING_ANTI_AFFINITY | REASON_SPREAD
                | REASON_NODE_PORTS):
            ip_nodes.append(n)
    must = _port_holders(pl, cid, port_nodes, ok) if port_nodes else None
    exclude = -1
    if isinstance(pod, str):
        exclude = int(st.pod_gang_np[st.pod_index[pod]])
    if pl.evicted_np is not None and pl.evicted_np.shape[0] < st.n_pods:
        grown = np.zeros(st.n_pods, dtype=bool)
        grown[: pl.evicted_np.shape[0]] = pl.evicted_np
        pl.evicted_np = grown
    class_band = class_bands(pl, bands)
    got = select_victims(st, pl.used_np, pl.alloc_np, ok, cid, class_band,
                         pl.evicted_np, exclude, pl.preempt_cache, must)
    if ip_nodes:
        got = interpod_victims(pl, st, pod, ip_nodes, got, cid, class_band, pl.evicted_np,
                               exclude, pl.preempt_cache)
    if got is None:
        return None
    node, victims, collateral, cost = got
    if assume:
        if pl.evicted_np is None:
            pl.evicted_np = np.zeros(st.n_pods, dtype=bool)
        for p in victims + collateral:
            pl._unassume_pod(p)
            pl.evicted_np[p] = True
        pl._assume(cid, node, 1, pl._lset_of(pod))
        pl.placed += 1
    keys = st.pod_keys
    return {"node": st.node_names[node],
            "victims": [keys[p] for p in victims],
            "collateral": [keys[p] for p in collateral],
            "cost": {"band": cost[COST_BAND], "pods": cost[COST_PODS],
                     "priority": cost[COST_PRIORITY]}}


cdef object _port_holders(Placer pl, Py_ssize_t cid, list nodes, ok):
    # bool[pod]: the running pods on ``nodes`` whose host ports conflict with class
    # cid's; each node whose conflict they explain becomes a candidate in ``ok``.
    # A node where a port is held by a claim the view assumed (not yet a running
    # pod) stays out: no eviction frees it.
    cdef ClusterState st = pl.state
    conflict = set(st.class_ports[cid][1])
    P = st.n_pods
    must = np.zeros(P, dtype=bool)
    pnode = st.pod_node_np[:P]
    running = st.pod_phase_np[:P] == PHASE_RUNNING
    for n in nodes:
        delta = pl.port_delta.get(n) or {}
        if any(k > 0 and b in conflict for b, k in delta.items()):
            continue
        for p in np.flatnonzero(running & (pnode == n)):
            held = st.class_ports[st.pod_class_np[p]]
            if held is not None and conflict.intersection(held[0]):
                must[p] = True
        ok[n] = 1
    return must


def plan_gang_preempting(Placer pl, pods, min_member: int | None = None, bands=None
                         ) -> dict | None:
    """A gang plan (:func:`esched.core._gang_plan.plan_gang`) letting members that do
    not fit preempt (all or nothing).

    Members are placed in order; one that fits nowhere tries
    :func:`plan_preemption` on the view so far. If fewer than ``min_member``
    (default: all) are placed, every placement *and every eviction* planned here
    is undone and None is returned. Otherwise ``{"nodes": [name or None per
    member], "victims": [{"pod", "node"}, ...]}`` stays assumed.
    """
    keys = list(pods)
    pl._ensure_synced()
    gang = gang_of(pl, keys)
    if gang is not None:
        hide_reserved(pl, gang)
    try:
        return _plan_gang_preempting(pl, keys, min_member, bands)
    finally:
        if gang is not None:
            hide_reserved(pl, None)


cdef object _plan_gang_preempting(Placer pl, list keys, min_member, bands):
    cdef ClusterState st = pl.state
    need = len(keys) if min_member is None else min_member
    nodes = []
    placed = []          # (cid, node slot, lset)
    evicted = []         # pod slots
    victims = []
    for key in keys:
        got = pl.place(key)
        if got is not None:
            nodes.append(got[0])
            placed.append((pl._class_of(key), st.node_index[got[0]], pl._lset_of(key)))
            continue
        before = [] if pl.evicted_np is None else list(np.flatnonzero(pl.evicted_np))
        plan = plan_preemption(pl, key, bands)
        if plan is None:
            nodes.append(None)
            continue
        nodes.append(plan["node"])
        placed.append((pl._class_of(key), st.node_index[plan["node"]],
                       pl._lset_of(key)))
        now = set(np.flatnonzero(pl.evicted_np)) - set(before)
        evicted.extend(sorted(now))
        for p in sorted(now):
            victims.append({"pod": st.pod_keys[p], "node": st.node_names[st.pod_node[p]]})
    if len(placed) < need:
        for cid, n, lset in reversed(placed):
            pl._assume(cid, n, -1, lset)
        for p in evicted:
            pl._pod_view(p, 1)
            pl.evicted_np[p] = False
        pl.placed -= len(placed)
        pl.unschedulable += 1
        return None
    return {"nodes": nodes, "victims": victims}
