"""Inter-pod affinity and topology spread over a :class:`~esched.core._placer.Placer`'s view.

kube-scheduler's InterPodAffinity and PodTopologySpread PreFilter / PreScore state,
built per pod from the state's topology index (``core/_interpod.pyx``
``InterPodIndex``) plus the pods the placer assumed since its last sync:

- :func:`topology_view` fills a class view's inter-pod checks (``IpCheck``: the pod's
  required affinity and anti-affinity, the bound pods' anti-affinity it matches), its
  DoNotSchedule spread checks (``SpreadCheck``), its InterPodAffinity score weights
  (``IpScore``) and its ScheduleAnyway spread constraints (``SoftSpread``), for
  ``Placer._view``;
- :func:`topology_assume` moves an assumed (or evicted) pod into this view's copies
  of the index's arrays and the spread counts kept between pods, for
  ``Placer._assume`` and ``Placer._pod_view``;
- ``soft_spread_weigh`` (inline, in ``_topology_views.pxd``: compiled into the
  placer's normalization walk, ``_norm_raw``) gives the ScheduleAnyway constraints
  their weights over the scored nodes.

The checks themselves run in the scan, node by node or check by check over a block
(``interpod_bits`` / ``spread_bits`` in ``core/_feasibility.pxd``, ``_topology_pass``
in ``core/_placer.pyx``), the scores in ``core/scoring/_inter_pod_affinity.pxd`` and
``_pod_topology_spread.pxd``. These are C functions of the placer (over its ``.pxd``
contract, whose ``ip_*``, ``sp_*``, ``ips_*`` and ``soft_*`` fields are their
scratch): one call per pod, never per node, and no Python entry point.
"""

cimport cython
from libc.stdint cimport INT32_MAX, INT32_MIN, int32_t, int64_t, uint8_t
from libc.stdlib cimport free, realloc
cimport numpy as cnp

import numpy as np

from esched.core._interpod import NODE_KEY, SCORED_PREFERRED, SCORED_REQUIRED

from esched.core._classview cimport (
    IP_AFFINITY,
    IP_AFFINITY_FIRST,
    IP_ANTI,
    IP_EXISTING,
    ClassView,
    IpCheck,
    IpScore,
    SoftSpread,
    SpreadCheck,
)
from esched.core._feasibility cimport selector_ok, taints_ok
from esched.core._interpod cimport InterPodIndex
from esched.core._placer cimport BLOCK_SHIFT, Placer
from esched.core._state cimport CLASS_INTERPOD, ClusterState
from esched.core._types cimport NODE_ALIVE
from esched.core.scoring._plugin cimport PLUGIN_INTER_POD_AFFINITY, PluginSpec

from esched.schemas.events import DEFAULT_NAMESPACE

__all__ = []

cnp.import_array()


# ---------------------------------------------------------------------- the scratch

cdef void* _room(void* buf, Py_ssize_t* cap, Py_ssize_t n, size_t size) except? NULL:
    # ``buf`` (``cap[0]`` entries of ``size`` bytes) with room for ``n``: the one
    # growth rule of the placer's per-pod check buffers (doubling, so a pod with more
    # terms than any before reallocates once).
    if n <= cap[0]:
        return buf
    cdef void* grown = realloc(buf, 2 * n * size)
    if grown == NULL:
        raise MemoryError()
    cap[0] = 2 * n
    return grown


cdef int topology_init(Placer pl) except -1:
    # A new placer: no check buffers yet, empty copies (Placer.__cinit__).
    pl.ip_buf = NULL
    pl.ip_cap = 0
    pl.sp_buf = NULL
    pl.sp_cap = 0
    pl.ips_buf = NULL
    pl.ips_cap = 0
    pl.soft_buf = NULL
    pl.soft_cap = 0
    pl.soft_seen = NULL
    pl.soft_seen_cap = 0
    return topology_reset(pl)


cdef int topology_reset(Placer pl) except -1:
    # The state moved (Placer.sync): the assumptions since the last sync are gone, and
    # the copies and spread counts built with them.
    pl.ip_log = {}
    pl.ip_copies = {}
    pl.ip_owner_pairs = {}
    pl.ip_scored_pairs = {}
    pl.sp_counts = {}
    pl.sp_by_matcher = {}
    pl.sp_views = {}
    return 0


cdef void topology_free(Placer pl) noexcept:
    # Placer.__dealloc__: the check buffers.
    if pl.ip_buf != NULL:
        free(pl.ip_buf)
    if pl.sp_buf != NULL:
        free(pl.sp_buf)
    if pl.ips_buf != NULL:
        free(pl.ips_buf)
    if pl.soft_buf != NULL:
        free(pl.soft_buf)
    if pl.soft_seen != NULL:
        free(pl.soft_seen)


# ---------------------------------------------------------------------- domain counts

cdef inline bint _any_domain(object acc) noexcept:
    # Whether an int64 per-domain weight array ([0]: the total) has a non-zero domain.
    cdef const int64_t* w = <const int64_t*>cnp.PyArray_DATA(<cnp.ndarray>acc)
    cdef Py_ssize_t i
    for i in range(1, cnp.PyArray_DIMS(<cnp.ndarray>acc)[0]):
        if w[i] != 0:
            return True
    return False


cdef inline int32_t* _i32(object arr) noexcept:
    # The data of an int32 C-contiguous array of the index or this placer (domains,
    # counts): a raw pointer without a memoryview's acquisition, per pod per check.
    return <int32_t*>cnp.PyArray_DATA(<cnp.ndarray>arr)


cdef void _spread_low(list entry) noexcept:
    # entry (Placer._spread_counts): its global minimum over the domains seen, and
    # how many domains hold it, from the counts.
    cdef const int32_t* dc = _i32(entry[0])
    cdef const uint8_t* seen = <uint8_t*>cnp.PyArray_DATA(<cnp.ndarray>entry[1])
    cdef Py_ssize_t d, D = (<cnp.ndarray>entry[0]).shape[0] - 1
    cdef long long low = 2147483647, n_low = 0
    for d in range(D):
        if seen[d]:
            if dc[1 + d] < low:
                low = dc[1 + d]
                n_low = 1
            elif dc[1 + d] == low:
                n_low += 1
    entry[5] = low
    entry[6] = n_low


@cython.final
cdef class _BlockRange:
    """Per block of ESCHED_FB_BLOCK nodes, the least and the greatest count among the
    domains of a kept spread count that have a node in it, and how many of those
    domains hold each: kept by each count's change (``changed``), so that the scan
    refuses a block whose least count is above the filter's limit, and skips the
    check on a block whose greatest is within it, without looking at its nodes
    (SpreadCheck.bmin, bmax). A block's domains are few (a zone: one or two; a
    hostname key: its nodes); its minimum (maximum) is recounted only when the last
    of them at it moves away."""
    cdef object _arrays                  # the numpy arrays below point into
    cdef int32_t* bmin                   # [block] least count of its domains (INT32_MAX: none)
    cdef int32_t* bmax                   # [block] greatest (INT32_MAX: a node lacks the key)
    cdef int32_t* n_min                  # [block] its domains at bmin
    cdef int32_t* n_max                  # [block] its domains at bmax
    cdef const uint8_t* keyless          # [block] a node without the key (the check fails it)
    cdef const int32_t* d_off            # domain d's blocks: d_blk[d_off[d]:d_off[d + 1]]
    cdef const int32_t* d_blk
    cdef const int32_t* b_off            # block b's domains: b_dom[b_off[b]:b_off[b + 1]]
    cdef const int32_t* b_dom
    cdef Py_ssize_t D                    # domains

    def __cinit__(self, object dom_np, object dc_np, Py_ssize_t N, Py_ssize_t D):
        cdef const int32_t* dom = _i32(dom_np)
        cdef Py_ssize_t nb = (N + (1 << BLOCK_SHIFT) - 1) >> BLOCK_SHIFT, n, b, d, i
        cdef Py_ssize_t pairs = 0
        last_np = np.full(max(D, 1), -1, dtype=np.int64)
        cdef int64_t* last = <int64_t*>cnp.PyArray_DATA(<cnp.ndarray>last_np)
        # (block, domain) pairs, each once: nodes come in block order
        for n in range(N):
            d = dom[n]
            if 0 <= d < D and last[d] != n >> BLOCK_SHIFT:
                last[d] = n >> BLOCK_SHIFT
                pairs += 1
        nb1 = max(nb, 1)
        bmin_np = np.empty(nb1, dtype=np.int32)
        bmax_np = np.empty(nb1, dtype=np.int32)
        n_min_np = np.zeros(nb1, dtype=np.int32)
        n_max_np = np.zeros(nb1, dtype=np.int32)
        keyless_np = np.zeros(nb1, dtype=np.uint8)
        d_off_np = np.zeros(D + 2, dtype=np.int32)
        b_off_np = np.zeros(nb + 1, dtype=np.int32)
        d_blk_np = np.empty(max(pairs, 1), dtype=np.int32)
        b_dom_np = np.empty(max(pairs, 1), dtype=np.int32)
        self._arrays = (bmin_np, bmax_np, n_min_np, n_max_np, keyless_np, d_off_np,
                        b_off_np, d_blk_np, b_dom_np)
        self.bmin = _i32(bmin_np)
        self.bmax = _i32(bmax_np)
        self.n_min = _i32(n_min_np)
        self.n_max = _i32(n_max_np)
        cdef uint8_t* keyless = <uint8_t*>cnp.PyArray_DATA(<cnp.ndarray>keyless_np)
        cdef int32_t* d_off = _i32(d_off_np)
        cdef int32_t* b_off = _i32(b_off_np)
        cdef int32_t* d_blk = _i32(d_blk_np)
        cdef int32_t* b_dom = _i32(b_dom_np)
        last_np.fill(-1)
        i = 0
        for n in range(N):
            d = dom[n]
            b = n >> BLOCK_SHIFT
            if not 0 <= d < D:
                keyless[b] = 1
            elif last[d] != b:
                last[d] = b
                b_dom[i] = <int32_t>d
                i += 1
                d_off[d + 2] += 1
            b_off[b + 1] = <int32_t>i
        for d in range(D):
            d_off[d + 2] += d_off[d + 1]
        for b in range(nb):
            for i in range(b_off[b], b_off[b + 1]):
                d = b_dom[i]
                d_blk[d_off[d + 1]] = <int32_t>b
                d_off[d + 1] += 1
        self.keyless = keyless
        self.d_off = d_off
        self.d_blk = d_blk
        self.b_off = b_off
        self.b_dom = b_dom
        self.D = D
        cdef const int32_t* dc = _i32(dc_np)
        for b in range(nb):
            self._recount(b, dc)

    cdef void _recount(self, Py_ssize_t b, const int32_t* dc) noexcept:
        cdef int32_t low = INT32_MAX, high = INT32_MIN, n_low = 0, n_high = 0, x
        cdef Py_ssize_t i
        for i in range(self.b_off[b], self.b_off[b + 1]):
            x = dc[1 + self.b_dom[i]]
            if x < low:
                low = x
                n_low = 1
            elif x == low:
                n_low += 1
            if x > high:
                high = x
                n_high = 1
            elif x == high:
                n_high += 1
        self.bmin[b] = low
        self.n_min[b] = n_low
        self.bmax[b] = INT32_MAX if self.keyless[b] or n_high == 0 else high
        self.n_max[b] = n_high

    cdef void changed(self, Py_ssize_t d, int32_t old, const int32_t* dc) noexcept:
        # Domain d's count went from old to dc[1 + d] (one more or one fewer).
        cdef int32_t new = dc[1 + d]
        cdef Py_ssize_t i, b
        cdef bint redo
        if not 0 <= d < self.D:
            return
        for i in range(self.d_off[d], self.d_off[d + 1]):
            b = self.d_blk[i]
            redo = False
            if new > old:
                if old == self.bmin[b]:
                    self.n_min[b] -= 1
                    redo = self.n_min[b] == 0
                if self.keyless[b]:
                    pass
                elif new > self.bmax[b]:
                    self.bmax[b] = new
                    self.n_max[b] = 1
                elif new == self.bmax[b]:
                    self.n_max[b] += 1
            else:
                if new < self.bmin[b]:
                    self.bmin[b] = new
                    self.n_min[b] = 1
                elif new == self.bmin[b]:
                    self.n_min[b] += 1
                if not self.keyless[b] and old == self.bmax[b]:
                    self.n_max[b] -= 1
                    redo = redo or self.n_max[b] == 0
            if redo:
                self._recount(b, dc)


cdef void _spread_add(list entry, Py_ssize_t d, int sign) noexcept:
    # A counted pod more (sign 1) or fewer in domain d of a kept spread count, the
    # minimum after it (recounted only when the last domain at the minimum rises),
    # and the block minima.
    cdef int32_t* dc = _i32(entry[0])
    cdef long long old = dc[1 + d], low = entry[5]
    dc[1 + d] = <int32_t>(old + sign)
    (<_BlockRange>entry[7]).changed(d, <int32_t>old, dc)
    if sign > 0:
        if old == low:
            if entry[6] == 1:
                _spread_low(entry)
            else:
                entry[6] = entry[6] - 1
    elif old - 1 < low:
        entry[5] = old - 1
        entry[6] = 1
    elif old - 1 == low:
        entry[6] = entry[6] + 1


cdef object _nodes_with_keys(list doms, Py_ssize_t N):
    """uint8 per node: 1 where the node has every constraint's topology key (kube's
    PodTopologySpread counts only on such nodes)."""
    keys = np.ones(N, dtype=np.uint8)
    for dom in doms:
        keys &= (dom[:N] >= 0)
    return keys


cdef object _domain_counts(const ClassView* v, Py_ssize_t N, const int32_t[::1] dom,
                           const int32_t[::1] per_node, const uint8_t[::1] keys_ok,
                           bint h_aff, bint h_taint, Py_ssize_t D, uint8_t[::1] seen):
    """Matching pods per topology domain (int32, index ``1 + domain``) over the nodes
    kube's PodTopologySpread counts on: alive, with every constraint's key, passing
    the constraint's node-affinity / taint policies; marks those domains in ``seen``
    when it is given. The one count both the filter and the score start from."""
    counts = np.zeros(1 + D, dtype=np.int32)
    cdef int32_t[::1] dc = counts
    cdef bint mark = seen is not None
    cdef Py_ssize_t n, d
    for n in range(N):
        if not (v.flags[n] & NODE_ALIVE) or not keys_ok[n]:
            continue
        if h_aff and v.has_labels and not selector_ok(v, n):
            continue
        if h_taint and v.has_taints and not taints_ok(v, n):
            continue
        d = dom[n]
        if d < 0:
            continue  # (system defaults: a node without the key, in kube's "" domain)
        if mark:
            seen[d] = 1
        dc[1 + d] += per_node[1 + n]
    return counts


# ---------------------------------------------------------------------- the views

cdef long long _ip_amount(InterPodIndex ip, tuple key, Py_ssize_t lset,
                          tuple terms) except? -1:
    # How much an assumed pod of label set lset adds to array key (kind, m, k) per
    # sign, on a node with the key's label: 0 (not at all), 1 (counts, owners), a
    # term's weight (scored). terms: its class's (ip.terms), None for a class
    # without inter-pod terms. (Matched read afresh: a later matcher extends it.)
    if key[0] == 0:
        return key[1] in ip.matched(lset)
    if terms is None:
        return 0
    if key[0] == 1:
        return (key[1], key[2]) in <tuple>terms[3]
    for own, amount in <tuple>terms[6]:
        if own == key:
            return amount
    return 0


cdef object _ip_arr(Placer pl, int kind, Py_ssize_t m, Py_ssize_t k):
    # Counts (kind 0) or owners (1) of (m, k) in this view: the state's, or a copy
    # with this placer's assumptions since the last sync (replayed from its log,
    # so an array the state makes later still sees them).
    cdef ClusterState st = pl.state
    cdef int32_t[::1] a, dom
    cdef Py_ssize_t n, d
    cdef long long amount
    cdef int sign
    key = (kind, m, k)
    got = pl.ip_copies.get(key)
    if got is not None:
        return got
    cdef InterPodIndex ip = st.interpod
    if kind == 0:
        src = ip.counts_for(m, k)
    elif kind == 1:
        src = ip.owners_for(m, k)
    else:
        src = ip.scored_for(kind, m, k)
    if src is None:
        src = np.zeros(1 + ip.dom_cap[k], dtype=np.int32)
    # the log by (label set, constraints): one amount per group, then its nodes
    touched = []
    for gk, group in pl.ip_log.items():
        amount = _ip_amount(ip, key, <Py_ssize_t>(<tuple>gk)[0], <tuple>(<tuple>group)[2])
        if amount:
            touched.append((amount, (<tuple>group)[1]))
    if not touched:
        return src
    arr = src.copy()
    a = arr
    dom = ip.dom_np[k]
    for amount, moves in touched:
        for n, sign in moves:
            d = dom[n]
            if d >= 0:
                a[0] += sign * amount
                a[1 + d] += sign * amount
    pl.ip_copies[key] = arr
    return arr


cdef int topology_assume(Placer pl, Py_ssize_t cid, Py_ssize_t n, int sign,
                         Py_ssize_t lset) except -1:
    # A pod of label set lset assumed bound to (or gone from) node n: the counts and
    # owners it changes, in this view's copies.
    cdef ClusterState st = pl.state
    cdef Py_ssize_t d
    cdef long long amount
    cdef InterPodIndex ip = st.interpod
    if lset < 0:
        lset = ip.lset(DEFAULT_NAMESPACE, None)
    # (classes with equal constraints add alike: _ip_amount reads only those)
    gk = (lset, ip.cons_key(cid))
    group = pl.ip_log.get(gk)
    if group is None:
        group = pl.ip_log[gk] = (cid, [], ip.terms(cid, lset)
                                 if st.class_flags[cid] & CLASS_INTERPOD else None)
    group[1].append((n, sign))
    # (array key, amount): what _ip_amount gives for this pod, known here
    todo = [((0, m, k), 1) for m in ip.matched(lset) for k in ip.count_keys(m)]
    if st.class_flags[cid] & CLASS_INTERPOD:
        terms = ip.terms(cid, lset)
        for m, k in terms[3]:
            todo.append(((1, m, k), 1))
            pl.ip_owner_pairs.setdefault(m, set()).add(k)
        for key, amount in terms[6]:
            todo.append((key, amount))
            pl.ip_scored_pairs.setdefault(key[:2], set()).add(key[2])
            # binds of the state's own must keep its scored arrays from now on
            ip.active = True
    cdef int32_t* p
    for key, amount in todo:
        arr = pl.ip_copies.get(key)
        if arr is None:
            _ip_arr(pl, key[0], key[1], key[2])  # copies and replays, this one too
            continue
        d = _i32(ip.dom_np[key[2]])[n]
        if d >= 0:
            p = _i32(arr)
            p[0] += sign * amount
            p[1 + d] += sign * amount
    if pl.sp_by_matcher:
        # the spread domain counts kept between pods (_spread_counts)
        for m in ip.matched(lset):
            for entry in pl.sp_by_matcher.get(m, ()):
                if (<uint8_t*>cnp.PyArray_DATA(<cnp.ndarray>entry[2]))[n]:
                    _spread_add(entry, _i32(ip.dom_np[entry[3]])[n], sign)
    return 0


cdef int topology_view(Placer pl, Py_ssize_t cid, Py_ssize_t lset, ClassView* v) except -1:
    # The view's inter-pod checks (kube's InterPodAffinity PreFilter state): the
    # pod's required affinity (one conjunction, a check per topology key; any node
    # with the keys when no pod matches anywhere and the pod matches itself), its
    # required anti-affinity terms, then the anti-affinity terms of bound pods that
    # match this pod.
    cdef ClusterState st = pl.state
    cdef Py_ssize_t i
    cdef InterPodIndex ip = st.interpod
    cdef bint inter = st.class_flags[cid] & CLASS_INTERPOD
    cdef bint first
    cdef tuple terms = None
    if lset < 0:
        lset = ip.lset(DEFAULT_NAMESPACE, None)
    checks = []
    if inter:
        terms = ip.terms(cid, lset)
        am = terms[0]
        if am >= 0:
            arrs = [(k, _ip_arr(pl, 0, am, k)) for k in terms[1]]
            first = terms[2]
            for _, a in arrs:
                first = first and _i32(a)[0] == 0
            for k, a in arrs:
                checks.append((IP_AFFINITY_FIRST if first else IP_AFFINITY, k, a))
        for m, k in terms[3]:
            checks.append((IP_ANTI, k, _ip_arr(pl, 0, m, k)))
    # kube's PodTopologySpread: a pod's own constraints, else the profile's
    # default ones (for a pod with a controller: buildDefaultConstraints)
    soft = ()
    system = False
    cons = st.class_specs[cid]["constraints"] or {}
    if pl.spread_defaults and ip.owned(lset) and not (
            cons.get("topologySpread") or cons.get("topologySpreadSoft")):
        spread, soft = ip.default_spread(lset, pl.spread_defaults)
        system = pl.spread_system
        if spread:
            _spread_view(pl, cid, spread, v)
    elif inter:
        spread, soft = terms[4], terms[7]
        if spread:
            _spread_view(pl, cid, spread, v)
    # bound pods' anti-affinity terms this pod matches: by the pod's matchers
    # (few), not by every term in the cluster
    own = pl.ip_owner_pairs
    for m in ip.matched(lset):
        ks = ip.owner_keys.get(m)
        mine = own.get(m) if own else None
        if mine:
            ks = sorted(set(ks or ()) | mine)
        for k in ks or ():
            a = _ip_arr(pl, 1, m, k)
            if _i32(a)[0] > 0:
                checks.append((IP_EXISTING, k, a))
    _ip_score_view(pl, cid, lset, v)
    if soft:
        _soft_spread_view(pl, cid, soft, v, system)
    if not checks:
        return 0
    pl.ip_buf = <IpCheck*>_room(pl.ip_buf, &pl.ip_cap, len(checks), sizeof(IpCheck))
    hold = []
    for i, (kind, k, a) in enumerate(checks):
        dom_np = ip.dom_np[k]
        hold.append((dom_np, a))
        pl.ip_buf[i].kind = kind
        pl.ip_buf[i].dom = _i32(dom_np)
        pl.ip_buf[i].cnt = _i32(a)
    pl.ip_hold = hold
    v.n_ip = len(checks)
    v.ip = pl.ip_buf
    return 0


cdef int _ip_score_view(Placer pl, Py_ssize_t cid, Py_ssize_t lset, ClassView* v) except -1:
    # kube's InterPodAffinity PreScore from the index: per topology key, what a node
    # in each domain scores (the pod's preferred terms times the domain's matching
    # pods; the bound pods' preferred terms, and their required affinity terms times
    # hardPodAffinityWeight, that match this pod). v.n_ips stays 0 (the plugin
    # skips the pod) when the profile does not score it or nothing concerns the pod.
    cdef ClusterState st = pl.state
    cdef const PluginSpec* s = NULL
    cdef int j
    cdef Py_ssize_t i
    for j in range(pl.n_specs):
        if pl.specs[j].kind == PLUGIN_INTER_POD_AFFINITY:
            s = &pl.specs[j]
    if s == NULL:
        return 0
    cdef InterPodIndex ip = st.interpod
    vals = {}
    cons = st.class_specs[cid]["constraints"] or {}
    has_pref = bool(cons.get("podAffinityPreferred") or cons.get("podAntiAffinityPreferred"))
    if has_pref:
        for m, k, w in ip.terms(cid, lset)[5]:
            _ip_add(vals, k, _ip_arr(pl, 0, m, k), w)
    own = pl.ip_scored_pairs
    if (ip.scored or own) and (has_pref or not s.ignore_existing):
        for kind, amount in ((SCORED_PREFERRED, 1), (SCORED_REQUIRED, s.hard_weight)):
            if amount == 0:
                continue
            for m in ip.matched(lset):
                ks = ip.scored_keys.get((kind, m))
                mine = own.get((kind, m)) if own else None
                if mine:
                    ks = sorted(set(ks or ()) | mine)
                for k in ks or ():
                    _ip_add(vals, k, _ip_arr(pl, kind, m, k), amount)
    # all-zero weights (terms whose pods left) score every node alike: as kube's
    # Skip, the pod keeps the cached scan
    vals = {k: acc for k, acc in vals.items() if _any_domain(acc)}
    if not vals:
        return 0
    pl.ips_buf = <IpScore*>_room(pl.ips_buf, &pl.ips_cap, len(vals), sizeof(IpScore))
    hold = []
    for i, (k, acc) in enumerate(sorted(vals.items())):
        dom_np = ip.dom_np[k]
        hold.append((dom_np, acc))
        pl.ips_buf[i].dom = _i32(dom_np)
        pl.ips_buf[i].val = <const long long*>cnp.PyArray_DATA(<cnp.ndarray>acc)
    pl.ips_hold = hold
    v.n_ips = len(vals)
    v.ips = pl.ips_buf
    return 0


cdef int _ip_add(dict vals, Py_ssize_t k, object arr, long long times) except -1:
    # vals[k] += times * arr (int64, grown to the longer of the two): a C loop
    # without numpy temporaries, as it runs for every pod with preferred terms.
    cdef Py_ssize_t i, n = cnp.PyArray_DIMS(<cnp.ndarray>arr)[0]
    cdef const int32_t* a = _i32(arr)
    cdef int64_t* out
    acc = vals.get(k)
    if acc is None or cnp.PyArray_DIMS(<cnp.ndarray>acc)[0] < n:
        grown = np.zeros(n if acc is None else max(n, acc.shape[0]), dtype=np.int64)
        if acc is not None:
            grown[: acc.shape[0]] = acc
        acc = vals[k] = grown
    out = <int64_t*>cnp.PyArray_DATA(<cnp.ndarray>acc)
    for i in range(n):
        out[i] += times * a[i]
    return 0


cdef list _spread_counts(Placer pl, const ClassView* v, Py_ssize_t cid, Py_ssize_t m,
                         Py_ssize_t k, tuple keys, bint h_aff, bint h_taint):
    # (domain counts, domains seen, nodes counted, key) of a topology spread
    # constraint (_domain_counts), kept between pods: they change only when a pod
    # matching m is assumed on a counted node (topology_assume adds it) or the state
    # moves (sync drops them). Keyed by what the count reads: the matcher, the
    # key, every constraint's key (a node must have them all), and the class's
    # constraints when a policy reads its selector or tolerations.
    cdef ClusterState st = pl.state
    cdef Py_ssize_t N = pl.n_nodes, n, D
    cdef uint8_t[::1] keys_ok, elig
    cdef const int32_t[::1] dom
    cdef InterPodIndex ip = st.interpod
    D = ip.dom_cap[k]
    aff = h_aff and v.has_labels
    taint = h_taint and v.has_taints
    ck = (m, k, keys, aff, taint, ip.cons_key(cid) if aff or taint else None)
    got = pl.sp_counts.get(ck)
    if got is not None and cnp.PyArray_DIMS(<cnp.ndarray>got[0])[0] == 1 + D:
        return got
    keys_ok = _nodes_with_keys([ip.dom_np[key] for key in keys], N)
    dom = ip.dom_np[k]
    seen_np = np.zeros(max(D, 1), dtype=np.uint8)
    dc_np = _domain_counts(v, N, dom, _ip_arr(pl, 0, m, ip.key(NODE_KEY)), keys_ok,
                           h_aff, h_taint, D, seen_np)
    # the nodes counted, as _domain_counts chose them
    elig_np = np.zeros(max(N, 1), dtype=np.uint8)
    elig = elig_np
    for n in range(N):
        if not (v.flags[n] & NODE_ALIVE) or not keys_ok[n]:
            continue
        if aff and not selector_ok(v, n):
            continue
        if taint and not taints_ok(v, n):
            continue
        elig[n] = 1
    # [counts, seen, counted nodes, key, domains seen, minimum, domains at it,
    #  block minima and maxima (_BlockRange), nodes]
    got = [dc_np, seen_np, elig_np, k, int(seen_np[:D].sum()), 0, 0,
           _BlockRange(ip.dom_np[k], dc_np, N, D), N]
    _spread_low(got)
    pl.sp_counts[ck] = got
    pl.sp_by_matcher.setdefault(m, []).append(got)
    return got


cdef int _soft_spread_view(Placer pl, Py_ssize_t cid, tuple soft, ClassView* v,
                           bint system=False) except -1:
    # kube's PodTopologySpread PreScore: per ScheduleAnyway constraint, the matching
    # pods per domain over the nodes that have every such constraint's key and pass
    # its node affinity / taint policies (a hostname key: the node's own pods, as
    # kube's Score counts them); the weights wait for the normalization walk.
    # ``system``: kube's system defaults (requireAllTopologies false): a node
    # lacking a key is scored, without that constraint's term, and its pods counted
    # for the other constraints.
    cdef ClusterState st = pl.state
    cdef InterPodIndex ip = st.interpod
    cdef Py_ssize_t j, J = len(soft), D, n_seen = 0
    cdef bint h_aff, h_taint, host
    cdef SoftSpread* c
    node_key = ip.key(NODE_KEY)
    pl.soft_buf = <SoftSpread*>_room(pl.soft_buf, &pl.soft_cap, J, sizeof(SoftSpread))
    # (system defaults: a node lacking a key is still counted and scored)
    keys = () if system else tuple(t[1] for t in soft)
    # The walk's scratch of domains seen, one stretch per constraint (a hostname key
    # counts nodes, not domains: spread_see marks none); spread_start clears it.
    for j in range(J):
        n_seen += 1 if soft[j][5] else max(ip.dom_cap[soft[j][1]], 1)
    pl.soft_seen = <uint8_t*>_room(pl.soft_seen, &pl.soft_seen_cap, n_seen, 1)
    n_seen = 0
    hold = []
    for j in range(J):
        m, k, max_skew, h_aff, h_taint, host = soft[j]
        dom_np = ip.dom_np[k]
        per_node = _ip_arr(pl, 0, m, node_key)
        D = ip.dom_cap[k]
        if host:
            dc_np = per_node
        else:
            # (domains seen are marked later, by the normalization walk)
            dc_np = _spread_counts(pl, v, cid, m, k, keys, h_aff, h_taint)[0]
        hold.append((dom_np, dc_np))
        c = &pl.soft_buf[j]
        c.dom = _i32(dom_np)
        c.cnt = _i32(dc_np)
        c.max_skew = max_skew
        c.host = host
        c.n_dom = 1 if host else max(D, 1)
        c.seen = pl.soft_seen + n_seen
        n_seen += c.n_dom
        c.size = 0
        c.seen_none = False
        c.weight = 0
    pl.soft_hold = hold
    v.soft_any = system
    v.n_soft = J
    v.soft = pl.soft_buf
    return 0


cdef int _spread_view(Placer pl, Py_ssize_t cid, tuple spread, ClassView* v) except -1:
    # kube's PodTopologySpread PreFilter: per constraint, the matching pods per
    # domain over the nodes that have every constraint's key and pass its node
    # affinity / taint policies (per-node counts summed in one C loop), the
    # global minimum (0 when fewer domains than minDomains), then the limit
    # maxSkew + minimum - self match that the filter compares a domain's count to.
    # The kept counts and each check's constant part are memoized per spread tuple
    # (the index's, one per constraints key and label set; with the class's
    # constraints key when a policy may read its selector or tolerations): per pod
    # only the minima are read.
    cdef ClusterState st = pl.state
    cdef InterPodIndex ip = st.interpod
    cdef Py_ssize_t j, J = len(spread)
    cdef long long low
    cdef tuple row
    cdef list entry
    cdef SpreadCheck* c
    cls = ip.cons_key(cid) if v.has_labels or v.has_taints else None
    memo = pl.sp_views.get(id(spread))
    if memo is not None and (<tuple>memo)[0] is spread and (<tuple>memo)[1] == cls:
        for row in (<tuple>memo)[2]:
            # (a key whose domains grew has its counts made afresh)
            if cnp.PyArray_DIMS(<cnp.ndarray>(<list>row[0])[0])[0] != 1 + <Py_ssize_t>ip.dom_cap[row[4]]:
                memo = None
                break
    else:
        memo = None
    if memo is None:
        keys = tuple([t[1] for t in spread])
        rows = []
        for j in range(J):
            m, k, max_skew, min_domains, h_aff, h_taint, self_match = spread[j]
            rows.append((_spread_counts(pl, v, cid, m, k, keys, h_aff, h_taint),
                         ip.dom_np[k], max_skew - (1 if self_match else 0), min_domains, k))
        memo = pl.sp_views[id(spread)] = (spread, cls, tuple(rows))
    pl.sp_buf = <SpreadCheck*>_room(pl.sp_buf, &pl.sp_cap, J, sizeof(SpreadCheck))
    for j in range(J):
        row = (<tuple>(<tuple>memo)[2])[j]
        entry = <list>row[0]
        low = entry[5]   # (kept by _spread_add, not recounted per pod)
        if entry[4] < row[3]:
            low = 0
        c = &pl.sp_buf[j]
        c.dom = _i32(row[1])
        c.cnt = _i32(entry[0])
        c.limit = <long long>row[2] + low
        if entry[8] == pl.n_nodes:
            c.bmin = (<_BlockRange>entry[7]).bmin
            c.bmax = (<_BlockRange>entry[7]).bmax
        else:
            c.bmin = c.bmax = NULL
    pl.sp_hold = memo
    v.n_spread = J
    v.spread = pl.sp_buf
    return 0
