"""The placer: feasibility, relaxed randomization, scoring and the equivalence-class cache.

A :class:`Placer` works on its own copy of a :class:`ClusterState`'s allocation
(``sync()``), so it can *assume* placements (a batch, a gang plan) without touching
the fold's state; the replica proposes what it assumed, the commit service decides,
and the next fold + ``sync()`` makes it true or drops it.

Per pod (by equivalence class):

1. **Feasibility** (``_feasibility.pxd``, the one home of the rule): alive,
   schedulable (unless the pod tolerates ``node.kubernetes.io/unschedulable``),
   every resource dimension (``pods`` is the pod-count limit), taints with
   NoSchedule/NoExecute, ``nodeSelector`` and required node affinity (In, NotIn,
   Exists, DoesNotExist, Gt, Lt). Label and taint constraints are compiled once per
   class into bit masks over the state's interned labels/taints, so a node check is
   a few word ANDs. Failures are reason bits (``REASON_*``, plus one bit per
   insufficient resource), turned into strings only by :meth:`Placer.explain`.
2. **Relaxed randomization** (``_place``): visit nodes from a rotating start
   (kube's ``nextStartNodeIndex``, first start drawn from the seed), stop when
   ``num_feasible_nodes_to_find`` feasible nodes were seen.
3. **Scoring**: the profile's plugins, resolved once into a C table of
   ``PluginSpec``, each with its kernel's function (``esched.core.scoring._table``):
   scoring a node is one indirect call per plugin, the formulas live only in the
   kernels. Total = sum of weight * score. Among the visited nodes with the best
   total, one draw from the seeded xorshift RNG picks uniformly (the r-th in visit order): the
   distribution of kube's ``selectHost`` reservoir sampling, one draw per pod.
   **Fused profile**: NodeResourcesFit (LeastAllocated or MostAllocated) and/or
   BalancedAllocation, each on exactly (cpu, memory) -- kube's default. ``_scan``
   scores it a block step at a time with the vectorized kernel of ``_fused_block.h``
   (structure-of-arrays double columns, AVX2/AVX-512 chosen at import; the scalar
   ``_score_block``, the plugin table's kernels, where capacities exceed its exact
   range): no per-plugin dispatch, no Python, no per-node branch. Divisions by capacity use per-node
   reciprocals with an exact integer correction (Fit) or the true quotients near
   integer results (BalancedAllocation): the integer scores are kube's, bit for bit
   (tests/core/test_placer.py checks the fused scan against the plugin table, every
   kernel body, cache on and off). Once a walk without the cache holds a best score,
   a block step reads compact float rows (``cb``, kept by ``_compact_node``: free
   amounts rounded down, fractions, reciprocals) for a fit pre-check and an upper
   bound of each node's total (with the default-sized weights, the floored totals
   from a little below and above the float estimate: where they agree, the node's
   exact total), and checks and scores exactly, from the double columns, only the
   nodes that may fit and whose bound reaches the best without an exact total
   (``esched_fbound``): the others can neither win nor tie, so the decision is the
   same (tests/core/test_placer_pruning.py).
4. **Cache**: per recent class, a dense row of (score, stamp) per node, valid while
   the node's placer version is unchanged, plus a summary per block (best, how many
   have it, feasible, visited) valid while no node of the block changed; a burst of
   identical pods takes unchanged blocks from their summaries, O(1) per 128 nodes.
   A class whose row's visits keep missing gives the row up and walks uncached for a
   pause that doubles each time it fails again (``_judge_row``). A stamp is the
   node's version with the row's epoch above it (bumped when the row changes class,
   ``_new_epoch``); every ``2**EPOCH_BITS`` changes the row is emptied, so a count
   that comes round never revives an older class's entry.
"""

cimport cython
from libc.stdint cimport INT32_MAX, INT32_MIN, int8_t, int32_t, int64_t, uint8_t, uint64_t
from libc.math cimport INFINITY, nextafterf
from libc.stdlib cimport free, malloc, realloc

import numpy as np

from esched.core import _constraints
from esched.core import reasons as _reasons
from esched.core._constraints import compile_class, intern_stamp

from esched.core._classview cimport (
    MAX_NEED,
    SRC_NZ_CPU,
    SRC_NZ_MEM,
    SRC_SKIP,
    SRC_USED,
    IP_AFFINITY,
    IP_AFFINITY_FIRST,
    ClassView,
)
from esched.core._feasibility cimport (
    EXPR_ANY,
    EXPR_FALSE,
    EXPR_NODE_IN,
    EXPR_NODE_NOT_IN,
    EXPR_NONE,
    MAX_REASON_RESOURCES,
    REASON_NODE_NAME,
    REASON_EXISTING_ANTI_AFFINITY,
    REASON_NODE_PORTS,
    REASON_NON_RESOURCE,
    REASON_POD_AFFINITY,
    REASON_POD_ANTI_AFFINITY,
    REASON_NOT_ALIVE,
    REASON_RESOURCE_BASE,
    REASON_SELECTOR,
    REASON_SPREAD,
    REASON_SPREAD_LABEL,
    REASON_USAGE,
    REASON_TAINT,
    REASON_UNSCHEDULABLE,
    constraints_ok,
    fits,
    interpod_bits,
    spread_bits,
    ports_ok,
    selector_ok,
    taints_ok,
    reason_bits,
)
from esched.core._fused_block cimport (
    ESCHED_FB_BLOCK,
    ESCHED_FB_DEAD,
    ESCHED_FB_FLOOR_WEIGHT,
    ESCHED_FB_INFEASIBLE,
    ESCHED_FB_MAX_NEED,
    ESCHED_FB_SPECIAL,
    esched_cut,
    esched_fblock,
    esched_fbound,
    esched_fblock_init,
    esched_fblock_isa,
    esched_fblock_score,
    esched_fbsum,
    esched_nth_equal,
    esched_stale,
    esched_summarize,
    esched_tcheck,
    esched_topology,
)
from esched.core._rng cimport below, xorshift64
from esched.core._state cimport CLASS_HOST_PORTS, CLASS_INTERPOD, ClassMemo, ClusterState
from esched.core._topology_views cimport (
    soft_spread_weigh,
    topology_assume,
    topology_free,
    topology_init,
    topology_reset,
    topology_view,
)
from esched.core._reservations cimport RES_RECLAIM
from esched.core._types cimport (
    NODE_ALIVE,
    NODE_UNSCHEDULABLE,
    PHASE_RUNNING,
    flag_t,
    score_t,
    units_t,
    word_t,
)
from esched.core.scoring._plugin cimport (
    MAX_CUSTOM_PRIORITY_SCORE,
    MAX_NODE_SCORE,
    MAX_PLUGINS,
    PLUGIN_BALANCED_ALLOCATION,
    PLUGIN_EPVM,
    PLUGIN_INTER_POD_AFFINITY,
    PLUGIN_LEAST_ALLOCATED,
    PLUGIN_MIXED,
    PLUGIN_MOST_ALLOCATED,
    PLUGIN_NODE_AFFINITY,
    PLUGIN_NODE_GROUP_AFFINITY,
    PLUGIN_PAPER_BEST_FIT,
    PLUGIN_POD_TOPOLOGY_SPREAD,
    PLUGIN_PYTHON,
    PLUGIN_REQUESTED_TO_CAPACITY_RATIO,
    PLUGIN_TAINT_TOLERATION,
    PLUGIN_USAGE,
    PluginSpec,
)
from esched.core.scoring._gather cimport (
    kernel_total,
    kernel_total_inv,
    plugin_kernel,
    plugin_kernel_gathered,
    plugin_raw,
)
from esched.core.scoring._table cimport folds, kernel_of, normalized, normalized_score

from esched.core.profile import DEFAULT_PROFILE, Profile, python_plugin
from esched.schemas.events import DEFAULT_NAMESPACE
from esched.schemas.objects import spread_default_labels

__all__ = ["EPOCH_BITS", "EXTERNAL_PLUGIN_KINDS", "Placer", "num_feasible_nodes_to_find", "REASONS",
           "SIMD"]

# esched.core._gang_plan.plan_gang, imported on first use (that module cimports this).
cdef object _plan_gang = None

#: Profile plugin kinds the placer does not score itself (see Placer.place's ``extra``).
EXTERNAL_PLUGIN_KINDS = frozenset({"FGD"})

# kube-scheduler's sampling constants (schedule_one.go): below 100 nodes score all;
# the adaptive percentage is 50 - nodes/125, at least 5%; never fewer than 100 nodes.
cdef enum:
    MIN_FEASIBLE_NODES_TO_FIND = 100
    MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5

#: Bit index of resource column 0 in reason bits (``bits >> RESOURCE_REASON_SHIFT``: the
#: resource bits; columns past the 55th share the last one).
RESOURCE_REASON_SHIFT = REASON_RESOURCE_BASE

cdef extern from *:
    """
    /* Out of line and cold: the emptying of a cache row whose epoch comes round
       (Placer._new_epoch) adds no register saves to _slot_for, run every placement. */
    static __attribute__((noinline, cold)) void
    esched_fill_cold(int64_t *p, Py_ssize_t n, int64_t value) {
        for (Py_ssize_t i = 0; i < n; i++)
            p[i] = value;
    }
    """
    void esched_fill_cold(int64_t* p, Py_ssize_t n, int64_t value) noexcept


#: Bits of a cache row's epoch in its entries' stamps: every ``2**EPOCH_BITS`` changes
#: of class the row is emptied, so no count of changes revives an older class's entry.
EPOCH_BITS = 63 - EPOCH_SHIFT

#: Reason bit -> kube-scheduler's message (esched.core.reasons' table).
REASONS = _reasons.TEXTS

if (EXPR_ANY, EXPR_NONE, EXPR_FALSE, EXPR_NODE_IN, EXPR_NODE_NOT_IN) != (
        _constraints.ANY, _constraints.NONE, _constraints.FALSE, _constraints.NODE_IN,
        _constraints.NODE_NOT_IN):
    raise ImportError("esched.core._placer: _feasibility.pxd's EXPR_* differ from "
                      "esched.core._constraints")
if (REASON_NOT_ALIVE, REASON_UNSCHEDULABLE, REASON_SELECTOR, REASON_TAINT, REASON_NODE_NAME,
        REASON_NODE_PORTS, REASON_POD_AFFINITY, REASON_POD_ANTI_AFFINITY,
        REASON_EXISTING_ANTI_AFFINITY, REASON_SPREAD, REASON_SPREAD_LABEL, REASON_USAGE,
        REASON_RESOURCE_BASE, MAX_REASON_RESOURCES,
        REASON_NON_RESOURCE) != (
        _reasons.NOT_ALIVE, _reasons.UNSCHEDULABLE, _reasons.SELECTOR, _reasons.TAINT,
        _reasons.NODE_NAME, _reasons.NODE_PORTS, _reasons.POD_AFFINITY,
        _reasons.POD_ANTI_AFFINITY, _reasons.EXISTING_ANTI_AFFINITY, _reasons.SPREAD,
        _reasons.SPREAD_LABEL, _reasons.USAGE,
        _reasons.RESOURCE_SHIFT, _reasons.RESOURCE_BITS,
        (1 << _reasons.RESOURCE_SHIFT) - 1):
    raise ImportError("esched.core._placer: _feasibility.pxd's bits differ from esched.core.reasons")



cpdef long long num_feasible_nodes_to_find(long long n_all, long long percentage=0):
    """kube-scheduler's numFeasibleNodesToFind: how many feasible nodes to look for.

    ``percentage`` 0 means the adaptive rule ``max(5, 50 - n_all/125)``.
    """
    if n_all < MIN_FEASIBLE_NODES_TO_FIND:
        return n_all
    cdef long long pct = percentage
    if pct == 0:
        pct = 50 - n_all // 125
        if pct < MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND:
            pct = MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND
    cdef long long n = n_all * pct // 100
    if n < MIN_FEASIBLE_NODES_TO_FIND:
        return MIN_FEASIBLE_NODES_TO_FIND
    return n


def _py_set_simd(cap: str = "") -> str:
    """Run the block kernel with the widest body this CPU has, at most ``cap``.

    ``cap``: ``""`` (the widest), ``"avx512"``, ``"avx2"`` or ``"baseline"``; returns the
    body chosen. Import calls it with ``ESCHED_SIMD``; tests call it to compare bodies.
    """
    global SIMD
    esched_fblock_init(cap.encode())
    SIMD = esched_fblock_isa.decode()
    return SIMD


if (1 << BLOCK_SHIFT) != ESCHED_FB_BLOCK:
    raise ImportError("esched.core._placer: BLOCK_SHIFT does not match ESCHED_FB_BLOCK")

#: The instruction set the vectorized block kernel runs with (``baseline``, ``avx2``, ``avx512``).
SIMD = "baseline"
_py_set_simd(__import__("os").environ.get("ESCHED_SIMD", ""))


cdef enum:
    # Placer.soa rows after the 2 * n_res used/allocatable rows (offsets from 2 * n_res).
    ROW_Z0 = 0          # non-zero used cpu
    ROW_Z1 = 1          # non-zero used memory
    ROW_I0 = 2          # 1 / allocatable cpu (0 when 0)
    ROW_I1 = 3          # 1 / allocatable memory
    ROW_PEN = 4         # 0 schedulable, 1 cordoned, 2 dead
    SOA_EXTRA = 5
    # Placer.cb rows after the 2 * n_res free rows (offsets from 2 * n_res).
    CROW_G0 = 0         # free non-zero fraction of cpu, (allocatable - non-zero used) / allocatable
    CROW_G1 = 1         # of memory
    CROW_H0 = 2         # used fraction of cpu (requests / allocatable)
    CROW_H1 = 3         # of memory
    CROW_I0 = 4         # 1 / allocatable cpu
    CROW_I1 = 5         # 1 / allocatable memory
    CROW_PEN = 6        # as ROW_PEN
    CB_EXTRA = 7
    CAP_ZERO = 1        # capflag: cpu or memory capacity 0 (scored per node)
    CAP_BIG = 2         # capflag: a capacity >= FB_EXACT_LIMIT (no vectorized kernel)

# Vectorized block scoring is exact while capacities and requests stay below this
# (see _fused_block.h): 64 TiB of memory, 2**46 milli-CPU.
cdef long long FB_EXACT_LIMIT = 1LL << 46


cdef inline float _float_down(double x) noexcept nogil:
    # The largest float <= x (a compact free amount, a request's lower float; its upper
    # is -_float_down(-x)): the fit pre-check never refuses a node that fits, see
    # esched_fbound_body.
    cdef float f = <float>x
    if <double>f > x:
        f = nextafterf(f, -INFINITY)
    return f


# ---------------------------------------------------------------------- nogil block scoring
# A step of the scan, as module-level ``nogil`` functions over a ClassView: no ``self``,
# no Python objects, no memoryview reloads in the node loop. Feasibility is
# _feasibility.pxd's, scores are scoring/_gather.pxd's (the profile's kernel table).


cdef inline Py_ssize_t _block_run(Py_ssize_t n0, Py_ssize_t N, Py_ssize_t left) noexcept nogil:
    # The nodes from n0 a block step covers: to the end of n0's block, of the nodes,
    # and of the ``left`` nodes the walk still has to visit.
    cdef Py_ssize_t m = ESCHED_FB_BLOCK - (n0 & (ESCHED_FB_BLOCK - 1))
    if m > N - n0:
        m = N - n0
    if m > left:
        m = left
    return m


cdef void _score_block(const PluginSpec* specs, int n_specs, const ClassView* v, Py_ssize_t n0,
                       Py_ssize_t m, int32_t* buf) noexcept nogil:
    """buf[i] = total of node n0 + i, -1 if infeasible, -2 if not alive: the scalar
    form of the vectorized kernel (capacities beyond its exact range, single nodes)."""
    cdef Py_ssize_t i, n
    for i in range(m):
        n = n0 + i
        if not (v.flags[n] & NODE_ALIVE):
            buf[i] = ESCHED_FB_DEAD
        elif not fits(v, n):
            buf[i] = ESCHED_FB_INFEASIBLE
        else:
            buf[i] = <int32_t>kernel_total(specs, n_specs, v, n)


cdef inline int32_t _score_one_inv(const PluginSpec* specs, int n_specs, const ClassView* v,
                                   Py_ssize_t n, const double* inv) noexcept nogil:
    """_score_block of the single node n for the fused profile, ``inv`` its reciprocal
    capacities (cpu, memory): the kernels' reciprocal variants, no division in the
    common case, the same scores (the cache's few-stale rescoring)."""
    if not (v.flags[n] & NODE_ALIVE):
        return ESCHED_FB_DEAD
    if not fits(v, n):
        return ESCHED_FB_INFEASIBLE
    return <int32_t>kernel_total_inv(specs, n_specs, v, n, inv)


cdef enum:
    # A step where at most 1 / FEW_PASS_DIV of the nodes pass the topology filters is
    # scored node by node (_score_block_fb).
    FEW_PASS_DIV = 8


cdef void _score_block_fb(const PluginSpec* specs, int n_specs, const ClassView* v,
                          Py_ssize_t n0, Py_ssize_t m, int32_t* buf,
                          esched_fbsum* sm, const double* inv) noexcept nogil:
    """_score_block through the vectorized kernel (v.use_fb), same results, plus the
    block's summary for the walk.

    The kernel checks resources and cordons and scores; label and taint constraints
    and nodes with a zero cpu or memory capacity are finished here, per node.
    """
    cdef Py_ssize_t i, j, n
    cdef int32_t sc, o
    cdef int32_t ok[ESCHED_FB_BLOCK]
    cdef int32_t pick[ESCHED_FB_BLOCK]
    cdef Py_ssize_t n_pick
    cdef bint topo = (v.n_ip or v.n_spread) and m <= ESCHED_FB_BLOCK
    cdef Py_ssize_t passed = m
    cdef int32_t alive
    cdef const flag_t* flags
    if topo:
        passed = 0 if _spread_refuses_block(v, n0) else _topology_pass(v, n0, m, ok)
    if passed == 0:
        # No node of the step passes the inter-pod or spread filters: each dead or
        # infeasible, the summary counted on the way (nothing feasible).
        alive = 0
        flags = v.flags + n0
        for i in range(m):
            o = (flags[i] & NODE_ALIVE) != 0
            buf[i] = ESCHED_FB_DEAD + o
            alive += o
        sm.max = -1
        sm.n_max = 0
        sm.n_feasible = 0
        sm.n_visited = alive
        return
    if passed * FEW_PASS_DIV <= m:
        # Few nodes of the step pass the inter-pod or spread filters (a spread's
        # full domains, an anti-affinity's taken ones): those few one by one (the
        # scalar pass, the same scores: _score_one_inv), the rest not scored at all.
        # (Without a branch per node: dead or infeasible first, then the passing
        # nodes listed and scored.)
        for i in range(m):
            buf[i] = ESCHED_FB_INFEASIBLE - <int32_t>((v.flags[n0 + i] & NODE_ALIVE) == 0)
        n_pick = 0
        for i in range(m):
            pick[n_pick] = <int32_t>i
            n_pick += ok[i]
        for j in range(n_pick):
            n = n0 + pick[j]
            buf[pick[j]] = _score_one_inv(specs, n_specs, v, n, inv + 2 * n)
        esched_summarize(buf, m, sm)
        return
    esched_fblock_score(&v.fb, n0, m, buf, sm)
    if topo:
        for i in range(m):
            # a scored node the filters refuse is infeasible (dead ones stay dead);
            # by masks, so that the loop vectorizes
            sc = buf[i]
            o = -(ok[i] | (sc == ESCHED_FB_DEAD))
            buf[i] = (sc & o) | (ESCHED_FB_INFEASIBLE & ~o)
    elif v.n_ip or v.n_spread:
        for i in range(m):
            sc = buf[i]
            if (sc >= 0 or sc == ESCHED_FB_SPECIAL) and (
                    (v.n_spread and spread_bits(v, n0 + i))
                    or (v.n_ip and interpod_bits(v, n0 + i))):
                buf[i] = ESCHED_FB_INFEASIBLE
    if not (v.has_taints or v.has_labels or v.pinned or v.has_ports or v.fb_special):
        if v.n_ip or v.n_spread:
            esched_summarize(buf, m, sm)
        return
    for i in range(m):
        sc = buf[i]
        if sc == ESCHED_FB_DEAD or sc == ESCHED_FB_INFEASIBLE:
            continue
        n = n0 + i
        # constraints_ok without the topology checks made above
        if ((v.pinned and n != v.pin) or (v.has_ports and not ports_ok(v, n))
                or (v.has_taints and not taints_ok(v, n))
                or (v.has_labels and not selector_ok(v, n))):
            buf[i] = ESCHED_FB_INFEASIBLE
        elif sc == ESCHED_FB_SPECIAL:
            buf[i] = <int32_t>kernel_total(specs, n_specs, v, n)
    esched_summarize(buf, m, sm)


cdef enum:
    TOPO_CHUNK = 8      # topology checks handed to esched_topology at once


cdef inline bint _spread_refuses_block(const ClassView* v, Py_ssize_t n0) noexcept nogil:
    # Whether a DoNotSchedule spread check refuses every node of n0's block: its
    # least domain count there is above the limit (SpreadCheck.bmin, kept by the
    # topology views). Then no node of the step passes, without a look at each (on a
    # spread at its minimum, most blocks: the full domains, the taken hosts).
    cdef int j
    cdef Py_ssize_t b = n0 >> BLOCK_SHIFT
    for j in range(v.n_spread):
        if v.spread[j].bmin != NULL and v.spread[j].bmin[b] > v.spread[j].limit:
            return True
    return False


cdef Py_ssize_t _topology_pass(const ClassView* v, Py_ssize_t n0, Py_ssize_t m,
                               int32_t* ok) noexcept nogil:
    """ok[i] = node n0 + i passes the inter-pod and topology spread filters
    (interpod_bits, spread_bits); returns how many pass. Check by check over the
    step (esched_topology, _fused_block.h: a check's arrays and bounds read once per
    step, no branch per node, vectorized); the filters are ANDed, so their order
    changes no verdict (reasons are explain's)."""
    cdef esched_tcheck tc[TOPO_CHUNK]
    cdef Py_ssize_t i, passed = 0
    cdef int j, c = 0, kind
    cdef long long limit
    for i in range(m):
        ok[i] = 1
    for j in range(v.n_spread):
        # the domain's count at most maxSkew + minimum - self match; the key required
        limit = v.spread[j].limit
        if v.spread[j].bmax != NULL and v.spread[j].bmax[n0 >> BLOCK_SHIFT] <= limit:
            continue     # every node of the block passes it
        tc[c].dom = v.spread[j].dom
        tc[c].cnt = v.spread[j].cnt
        tc[c].lo = INT32_MIN
        tc[c].hi = <int32_t>(INT32_MAX if limit > INT32_MAX
                             else INT32_MIN if limit < INT32_MIN else limit)
        tc[c].key_optional = 0
        c += 1
        if c == TOPO_CHUNK:
            esched_topology(tc, c, n0, m, ok)
            c = 0
    for j in range(v.n_ip):
        kind = v.ip[j].kind
        tc[c].dom = v.ip[j].dom
        tc[c].cnt = v.ip[j].cnt
        tc[c].lo = INT32_MIN
        tc[c].hi = INT32_MAX
        tc[c].key_optional = 0
        if kind == IP_AFFINITY:
            tc[c].lo = 1             # a matching pod in the domain
        elif kind != IP_AFFINITY_FIRST:
            tc[c].hi = 0             # anti-affinity: none in the domain, or no key
            tc[c].key_optional = 1
        c += 1
        if c == TOPO_CHUNK:
            esched_topology(tc, c, n0, m, ok)
            c = 0
    if c:
        esched_topology(tc, c, n0, m, ok)
    cdef int32_t n_ok = 0    # (an int32 sum: vectorized)
    for i in range(m):
        n_ok += ok[i]
    passed = n_ok
    return passed


cdef Py_ssize_t _walk_fb(const ClassView* v, Py_ssize_t N, const uint8_t* ext_mask,
                         Py_ssize_t start, long long target, int32_t* feas, int32_t* out,
                         long long* n_feas, long long* visited) noexcept nogil:
    """_normalize's walk (the same nodes, in the same order) by blocks: the
    vectorized kernel's resource and cordon check and resource scores (into
    ``out``, by node), the topology filters check by check over the block, then
    the rest of ``fits`` node by node for what passed (v.use_fb, no Usage hot
    check: the caller's condition)."""
    cdef Py_ssize_t k = 0, n0, m, i, n
    cdef long long found = 0, seen = 0
    cdef int32_t o
    cdef esched_fbsum sm
    cdef int32_t ok[ESCHED_FB_BLOCK]
    cdef bint topo = v.n_ip > 0 or v.n_spread > 0
    cdef bint rest = v.pinned or v.has_ports or v.has_taints or v.has_labels
    while k < N:
        n0 = start + k
        if n0 >= N:
            n0 -= N
        m = _block_run(n0, N, N - k)
        esched_fblock_score(&v.fb, n0, m, out + n0, &sm)
        if not (topo or rest or ext_mask != NULL):
            # resources only: no branch per node (the node is listed, and kept when
            # it fits), the same nodes and counts
            for i in range(m):
                o = out[n0 + i]
                seen += o != ESCHED_FB_DEAD
                feas[found] = <int32_t>(n0 + i)
                found += o >= 0
                if found >= target:
                    n_feas[0] = found
                    visited[0] = seen
                    return k + i + 1
            k += m
            continue
        if topo:
            _topology_pass(v, n0, m, ok)
        for i in range(m):
            n = n0 + i
            if out[n] == ESCHED_FB_DEAD:
                continue
            if ext_mask != NULL and not ext_mask[n]:
                continue
            seen += 1
            if out[n] < 0 or (topo and not ok[i]):
                continue
            if rest and ((v.pinned and n != v.pin) or (v.has_ports and not ports_ok(v, n))
                         or (v.has_taints and not taints_ok(v, n))
                         or (v.has_labels and not selector_ok(v, n))):
                continue
            feas[found] = <int32_t>n
            found += 1
            if found >= target:
                n_feas[0] = found
                visited[0] = seen
                return k + i + 1
        k += m
    n_feas[0] = found
    visited[0] = seen
    return k


# The normalization walk's raw scores, [scored node in visit order][plugin], for the
# scoring walk over the same nodes (_scan_external): grown, never shrunk.
cdef int64_t* _raws = NULL
cdef Py_ssize_t _raws_cap = 0


cdef int64_t* _raws_for(Py_ssize_t n) noexcept nogil:
    # Room for n scored nodes' raw scores, or NULL (the scoring walk then recomputes).
    global _raws, _raws_cap
    cdef int64_t* grown
    if n > _raws_cap:
        grown = <int64_t*>realloc(_raws, n * MAX_PLUGINS * sizeof(int64_t))
        if grown == NULL:
            return NULL
        _raws = grown
        _raws_cap = n
    return _raws


cdef void _norm_raw(const PluginSpec* specs, ClassView* v, const int32_t* feas,
                    long long found, int64_t* raws=NULL) noexcept nogil:
    """NormalizeScore's inputs over the scored nodes ``feas[:found]``: soft topology
    spread's weights (its domains among them), then each normalized plugin's
    largest and smallest raw score; with ``raws``, every raw score (raws[i *
    MAX_PLUGINS + plugin]), which scoring the same nodes reads back."""
    cdef long long i, raw, mx, mn
    cdef int j, p, kind
    soft_spread_weigh(specs, v, feas, found)
    for j in range(v.n_norm):
        # plugin by plugin, so its kind and extremes stay in registers over the nodes
        p = v.norm[j]
        kind = specs[p].kind
        # (InterPodAffinity's raw scores may be negative)
        mx = -9223372036854775807
        mn = 9223372036854775807
        for i in range(found):
            raw = plugin_raw(kind, v, feas[i])
            if raws != NULL:
                raws[i * MAX_PLUGINS + p] = raw
            if raw < 0 and kind == PLUGIN_POD_TOPOLOGY_SPREAD:
                continue  # an ignored node: out of the min and max
            if raw > mx:
                mx = raw
            if raw < mn:
                mn = raw
        v.raw_max[p] = mx
        v.raw_min[p] = mn
    if found == 0:
        for j in range(v.n_norm):
            v.raw_max[v.norm[j]] = 0
            v.raw_min[v.norm[j]] = 0


cdef inline bint _profile_only(dict cons) except -1:
    # Whether constraints set nothing but their schedulerName (the rest None or empty):
    # nothing compile_class reads.
    for k, v in cons.items():
        if v and k != "schedulerName":
            return False
    return True


@cython.final
cdef class Placer:
    """Place pods on a :class:`ClusterState` with a profile, seed and optional cache.

    :param state: the folded state (read; never mutated except interning classes).
    :param profile: a :class:`~esched.core.profile.Profile` (default: kube's resource
        scoring, NodeResourcesFit LeastAllocated + BalancedAllocation).
    :param seed: RNG seed: same seed, same state, same calls -> same decisions.
    :param cache: use the equivalence-class cache.
    :param sample: use relaxed randomization; False scores every feasible node.
    :param prune: score exactly only the nodes whose bound can reach the best score the
        walk holds (``esched_fbound``); the decisions are the same either way (off: to
        check that).
    """

    def __cinit__(self):
        self.specs = NULL
        self.n_profiles = 0
        for i in range(MAX_PROFILES):
            self.pspecs[i] = NULL
        self.cconst = NULL
        self.cconst_cap = 0
        topology_init(self)
        self.ext_mask = NULL
        self.ext_score = NULL
        self.ext_rank = NULL

    def __dealloc__(self):
        for i in range(MAX_PROFILES):
            if self.pspecs[i] != NULL:
                free(self.pspecs[i])
        if self.cconst != NULL:
            free(self.cconst)
        topology_free(self)

    def __init__(self, ClusterState state, profile: Profile | None = None, seed: int = 0,
                 cache: bool = True, sample: bool = True, hide_reserved: bool = True,
                 bands=None, prune: bool = True) -> None:
        self.state = state
        # The bands that decide who is production (placed against limits; the others
        # against reservations): the same the validator and the scheduling pass use.
        self.fit_bands_cfg = bands
        self.fband_np = np.zeros(64, dtype=np.uint8)
        self.fband = self.fband_np
        self.fband_n = 0
        self.hide_reserved = hide_reserved
        self.profile = profile or DEFAULT_PROFILE
        self.use_cache = cache
        self.sample = sample
        self.prune = prune
        self.seed = seed
        self.rng = (<uint64_t>seed * <uint64_t>0x9E3779B97F4A7C15ULL) ^ <uint64_t>0xD1B54A32D192ED03ULL
        if self.rng == 0:
            self.rng = 1
        self.compiled = {}
        self.compiled_by_cons = {}
        self.hits = self.misses = self.placed = self.visited = self.unschedulable = 0
        self.python_plugin_errors = 0
        self.calls = 0
        self.walked = 0
        self.gang_failure = None
        self.evicted_np = None
        self.hidden = {}
        self.preempt_cache = {}
        self.band_cfg = None
        self.band_np = np.zeros(0, dtype=np.uint8)
        self.class_last_np = np.zeros(0, dtype=np.int64)
        self.class_run_np = np.zeros(0, dtype=np.int64)
        self.class_miss_np = np.zeros(0, dtype=np.int64)
        self.class_off_np = np.zeros(0, dtype=np.int64)
        self.class_pause_np = np.zeros(0, dtype=np.int64)
        self.steps_aside = self.returns = 0
        self._grow_class_stats(64)
        self._resolve_plugins()
        for i in range(CACHE_SLOTS):
            self.slot_owner[i] = -1
            self.slot_used[i] = 0
            self.slot_epoch[i] = 0
        self.tick = 0
        self.sver_np = np.full(0, -1, dtype=np.int64)
        self.synced_position = -1
        self.classes = ClassMemo(state)  # (nothing kept per class yet)
        self.sync()
        self.next_start = <Py_ssize_t>(xorshift64(&self.rng) % <uint64_t>max(self.n_nodes, 1))

    def _resolve_plugins(self) -> None:
        # Every profile of the configuration (the profile and its siblings), resolved
        # once; a class's pods' schedulerName selects one (_view, _select).
        profiles = self.profile.profiles
        if len(profiles) > MAX_PROFILES:
            raise ValueError(f"at most {MAX_PROFILES} profiles")
        self.ptables = []
        self.pusage = []
        self.any_usage = False
        self.profile_of_name = {}
        cdef Fused on
        on.on = False
        for pi, prof in enumerate(profiles):
            self.profile_of_name.setdefault(prof.name, pi)
            self._resolve_profile(prof)
            # the profile's Usage filter (a column once, at its lowest threshold)
            hot = {}
            for col, pct in self.pusage[pi]:
                hot[col] = min(pct, hot.get(col, pct))
            self.phot_n[pi] = min(len(hot), MAX_PLUGIN_RES)
            for j, (col, pct) in enumerate(sorted(hot.items())[:MAX_PLUGIN_RES]):
                self.phot_col[pi][j] = col
                self.phot_pct[pi][j] = pct
            self.pspecs[pi] = self.specs
            self.pn_specs[pi] = self.n_specs
            self.pfused[pi] = self.fused
            # PodTopologySpread's default constraints: the ScheduleAnyway ones only
            # when the profile scores the plugin (else they change nothing).
            scores_spread = any(p.kind == "PodTopologySpread" for p in prof.plugins)
            defaults = tuple(d for d in prof.spread_defaults
                             if d[2] == "DoNotSchedule" or scores_spread)
            self.ptables.append((self.plugin_names, self.py_plugins, self.has_python,
                                 self.has_node_group,
                                 prof.percentage_of_nodes_to_score or 0,
                                 prof.added_affinity, defaults, prof.spread_system))
            self.n_profiles = pi + 1
            if self.fused.on and not on.on:
                on = self.fused
        # The block kernel's columns are kept while any profile scores fused (sync).
        self.fused = on
        self.cur_profile = -1
        self._select(0)

    cdef int _select(self, int pi) except -1:
        """Make profile ``pi`` the one scoring: its plugin table, weights, sampling."""
        if pi == self.cur_profile:
            return 0
        self.specs = self.pspecs[pi]
        self.n_specs = self.pn_specs[pi]
        self.pf = &self.pfused[pi]
        (self.plugin_names, self.py_plugins, self.has_python, self.has_node_group,
         self.percentage, self.added, self.spread_defaults,
         self.spread_system) = self.ptables[pi]
        self.cur_profile = pi
        return 0

    def _resolve_profile(self, profile) -> None:
        # Dispatch is resolved here, once: the hot loop switches on a small int per plugin.
        kinds = {
            "LeastAllocated": PLUGIN_LEAST_ALLOCATED,
            "MostAllocated": PLUGIN_MOST_ALLOCATED,
            "RequestedToCapacityRatio": PLUGIN_REQUESTED_TO_CAPACITY_RATIO,
            "BalancedAllocation": PLUGIN_BALANCED_ALLOCATION,
            "EPVM": PLUGIN_EPVM,
            "Mixed": PLUGIN_MIXED,
            "Python": PLUGIN_PYTHON,
            "NodeGroupAffinity": PLUGIN_NODE_GROUP_AFFINITY,
            "PaperBestFit": PLUGIN_PAPER_BEST_FIT,
            "NodeAffinity": PLUGIN_NODE_AFFINITY,
            "TaintToleration": PLUGIN_TAINT_TOLERATION,
            "InterPodAffinity": PLUGIN_INTER_POD_AFFINITY,
            "PodTopologySpread": PLUGIN_POD_TOPOLOGY_SPREAD,
            "Usage": PLUGIN_USAGE,
        }
        # External plugins (FGD) need per-device state the placer does not hold: their
        # caller scores them (esched.core._devices) and passes the scores to place().
        plugins = [p for p in profile.plugins if p.kind not in EXTERNAL_PLUGIN_KINDS]
        if len(plugins) > MAX_PLUGINS:
            raise ValueError(f"at most {MAX_PLUGINS} score plugins per profile")
        self.specs = <PluginSpec*>malloc(max(len(plugins), 1) * sizeof(PluginSpec))
        if self.specs == NULL:
            raise MemoryError()
        self.n_specs = len(plugins)
        self.plugin_names = [p.name for p in plugins]
        self.py_plugins = []
        self.has_python = False
        self.has_node_group = False
        cdef PluginSpec* s
        filters = []
        self.pusage.append(filters)
        for i, p in enumerate(plugins):
            s = &self.specs[i]
            s.kind = kinds[p.kind]
            s.fn = kernel_of(s.kind)
            s.weight = p.weight
            s.n_res = len(p.resources)
            for j, (rname, rweight) in enumerate(p.resources):
                s.col[j] = self.state._resource(rname)
                s.res_weight[j] = rweight
                # Fit strategies score cpu/memory with kube's non-zero defaults;
                # BalancedAllocation and E-PVM use the requests as they are.
                uses_nz = p.kind in ("LeastAllocated", "MostAllocated",
                                     "RequestedToCapacityRatio", "Mixed")
                s.nz[j] = (0 if rname == "cpu" else 1 if rname == "memory" else -1) if uses_nz else -1
                # PaperBestFit keeps every term for every pod (the artifact's formula).
                s.scalar[j] = (rname not in ("cpu", "memory", "ephemeral-storage")
                               and p.kind != "PaperBestFit")
                s.max_spec[j] = p.max_spec[j] if j < len(p.max_spec) else 0
                if p.kind == "Usage":
                    # measured usage of every listed resource, whatever the pod requests
                    s.nz[j] = -1
                    s.scalar[j] = False
            s.n_shape = len(p.shape)
            for j, (u, sc) in enumerate(p.shape):
                s.shape_util[j] = u
                s.shape_score[j] = sc * (MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE)
            s.epvm_base = p.epvm_base
            s.prod_priority = p.prod_priority
            s.exhaust_permille = p.exhaust_permille
            s.strand_permille = p.strand_permille
            s.hard_weight = p.hard_pod_affinity_weight
            s.ignore_existing = p.ignore_preferred_terms_of_existing_pods
            if p.kind == "NodeGroupAffinity":
                self.has_node_group = True
            if p.kind == "Usage":
                self.any_usage = True
                if p.usage_filter:
                    filters.extend((s.col[j], pct) for j, pct in enumerate(p.thresholds)
                                   if pct >= 0)
            if p.kind == "Python":
                self.has_python = True
                self.py_plugins.append(python_plugin(p.name))
            else:
                self.py_plugins.append(None)
        self._resolve_fused(plugins)

    def _resolve_fused(self, plugins) -> None:
        # The fused path: NodeResourcesFit (LeastAllocated/MostAllocated) and/or
        # BalancedAllocation, at most one of each, each on exactly (cpu, memory).
        cdef Fused* F = &self.fused
        F.on = False
        F.has_fit = F.has_bal = False
        F.fit_least = True
        F.w_fit = F.w_bal = 0
        F.rw0 = F.rw1 = F.ws_both = 0
        F.c0 = F.c1 = 0
        if not plugins:
            return
        for p in plugins:
            if p.kind in ("NodeGroupAffinity", "NodeAffinity", "TaintToleration",
                          "InterPodAffinity", "PodTopologySpread"):
                # Scored only for classes with something to prefer (preferred groups,
                # preferred terms, PreferNoSchedule taints not tolerated): the rest
                # scan fused.
                continue
            names = tuple(r for r, _ in p.resources)
            if names != ("cpu", "memory"):
                return
            if p.kind in ("LeastAllocated", "MostAllocated"):
                if F.has_fit:
                    return
                F.has_fit = True
                F.fit_least = p.kind == "LeastAllocated"
                F.w_fit = p.weight
                F.rw0 = p.resources[0][1]
                F.rw1 = p.resources[1][1]
                F.ws_both = F.rw0 + F.rw1
            elif p.kind == "BalancedAllocation":
                if F.has_bal:
                    return
                F.has_bal = True
                F.w_bal = p.weight
            else:
                return
        F.c0 = self.state._resource("cpu")
        F.c1 = self.state._resource("memory")
        F.on = True

    @property
    def fused_path(self) -> bool:
        """Whether the profile runs on the fused scan (vectorized steps) rather than the table."""
        return bool(self.pf.on)

    # ------------------------------------------------------------------ state sync

    def sync(self) -> None:
        """Start again from the state: its allocation, no assumptions.

        Incremental: only rows of nodes whose state version moved, or that carry an
        assumption of this placer, are copied (a C loop over versions), so a replica
        can fold one event and re-sync cheaply. Those nodes get a new placer version,
        so their cache entries die; the others keep theirs.
        """
        cdef ClusterState st = self.state
        cdef Py_ssize_t n, r, old_n = self.sver_np.shape[0]
        cdef units_t c0, c1
        cdef bint reshaped = (self.used_np is None or st.n_nodes != self.n_nodes
                              or st.n_res != self.n_res)
        self.n_nodes = st.n_nodes
        self.n_res = st.n_res
        if reshaped:
            # Copies: assumptions must never write into the fold's arrays.
            self.used_np = np.array(st.allocated_np[: self.n_nodes, : self.n_res], order="C",
                                    copy=True)
            self.nzu_np = np.array(st.nz_np[: self.n_nodes], order="C", copy=True)
            self.used = self.used_np
            self.nzu = self.nzu_np
            self.inv_np = np.zeros((self.n_nodes, 2), dtype=np.float64)
            self.inv = self.inv_np
            # allocatable's rows are res_cap wide (a cache line at 8 columns); the scan
            # reads n_res of them, so it streams this compact copy instead.
            self.alloc_np = np.array(st.allocatable_np[: self.n_nodes, : self.n_res], order="C",
                                     copy=True)
            self.alloc = self.alloc_np
            self.flim_np = np.array(st.node_lim_np[: self.n_nodes, : self.n_res], order="C",
                                    copy=True)
            self.frsv_np = np.array(st.node_resv_np[: self.n_nodes, : self.n_res], order="C",
                                    copy=True)
            self.fburst_np = np.zeros((self.n_nodes, self.n_res), dtype=np.int64)
            self.fnp_np = self.flim_np.copy()
            self.flim = self.flim_np
            self.frsv = self.frsv_np
            self.fburst = self.fburst_np
            self.fnp = self.fnp_np
            if self.fused.on and self.n_nodes > 0:
                # Every node's reciprocals (the loop below renews only changed nodes).
                for j, c in enumerate((self.fused.c0, self.fused.c1)):
                    cap = self.alloc_np[:, c].astype(np.float64)
                    np.divide(1.0, cap, out=self.inv_np[:, j], where=cap != 0)
            ver = np.zeros(self.n_nodes, dtype=np.int64)
            sver = np.full(self.n_nodes, -1, dtype=np.int64)
            if self.ver_np is not None:
                k = min(old_n, self.n_nodes)
                ver[:k] = self.ver_np[:k]
                sver[:k] = self.sver_np[:k]
            self.ver_np, self.sver_np = ver, sver
            self.ver = self.ver_np
            self.sver = self.sver_np
            self._fill_soa()
            self._reset_cache()
        if reshaped or self.ports_np is None or self.ports_np.shape[1] != st.port_words:
            self.ports_np = np.array(st.port_bits_np[: self.n_nodes], order="C", copy=True)
            self.ports = self.ports_np
        self.port_delta = {}
        topology_reset(self)
        cdef Py_ssize_t w, W = self.ports.shape[1]
        cdef long long[::1] sv = st.version_np
        self.reclaim_on = st.rc_on
        cdef double burst = st.rc_burst
        for n in range(self.n_nodes):
            # A node touched by an assumption (sver == -2) or changed in the state is new.
            if self.sver[n] != sv[n]:
                for r in range(self.n_res):
                    self.used[n, r] = st.allocated[n, r]
                    self.alloc[n, r] = st.allocatable[n, r]
                    self.flim[n, r] = st.node_lim[n, r]
                    self.frsv[n, r] = st.node_resv[n, r]
                    # as ClusterState.node_burst: a share of each reclaimed resource
                    self.fburst[n, r] = (<units_t>(<double>st.allocatable[n, r] * burst)
                                         if st.res_rflags[r] & RES_RECLAIM else 0)
                self._fit_node(n)
                self.nzu[n, 0] = st.nz[n, 0]
                self.nzu[n, 1] = st.nz[n, 1]
                for w in range(W):
                    self.ports[n, w] = st.port_bits[n, w]
                if self.fused.on:
                    # Reciprocal capacities for the vectorized kernel (exact, see
                    # _fused_block.h).
                    c0 = st.allocatable[n, self.fused.c0]
                    c1 = st.allocatable[n, self.fused.c1]
                    self.inv[n, 0] = 1.0 / <double>c0 if c0 != 0 else 0.0
                    self.inv[n, 1] = 1.0 / <double>c1 if c1 != 0 else 0.0
                    self._soa_node(n, st.flags[n])
                self._touch(n)
                self.sver[n] = sv[n]
        if self.any_usage:
            self._sync_usage(reshaped)
        if self.classes.stale():
            self._forget_classes()
        self.synced_position = st.position
        self.evicted_np = None  # assumed evictions die with the other assumptions
        self._hide_reserved(None)

    cdef int _sync_usage(self, bint reshaped) except -1:
        # The state's fresh usage reports (ClusterState.usage_rows), renewed when the
        # fold changed them or the tables reshaped; a node whose measured row changed
        # gets a new placer version, so its cache entries die (its Usage score and
        # filter moved), as for a changed allocation.
        cdef ClusterState st = self.state
        cdef uint8_t[::1] mv
        cdef units_t[:, ::1] uv
        cdef Py_ssize_t n
        if not reshaped and self.usage_seen == st.usage_gen and self.usage_np is not None:
            return 0
        measured, usage = st.usage_rows()
        old_m, old_u = self.measured_np, self.usage_np
        if (reshaped or old_m is None or old_m.shape[0] != measured.shape[0]
                or old_u.shape[1] != usage.shape[1]):
            changed = range(self.n_nodes)
        else:
            changed = np.flatnonzero((old_m != measured) | (old_u != usage).any(axis=1))
        for n in changed:
            self._touch(n)
        if measured.shape[0] == 0 or usage.shape[1] == 0:
            # (nothing to point into: a state without nodes or resources)
            measured = np.zeros(1, dtype=np.uint8)
            usage = np.zeros((1, max(self.n_res, 1)), dtype=np.int64)
        self.measured_np, self.usage_np = measured, usage
        mv = measured
        uv = usage
        self.measured_ptr = &mv[0]
        self.usage_ptr = &uv[0, 0]
        self.usage_seen = st.usage_gen
        return 0

    def _hide_reserved(self, gang) -> None:
        # Nodes reserved for a gang other than ``gang`` become infeasible in this view
        # (esched.core._reserve.hide_reserved); nothing to do, the common case, without
        # the call.
        if not self.hide_reserved or (not self.state.reserved_nodes and not self.hidden):
            return
        from esched.core._reserve import hide_reserved

        hide_reserved(self, gang)

    def _reset_cache(self) -> None:
        # After a reshape: empty cache rows for the new node count.
        cdef Py_ssize_t N = max(self.n_nodes, 1), i
        self.n_blocks = (N + ESCHED_FB_BLOCK - 1) >> BLOCK_SHIFT
        # (rows CACHE_SLOTS and CACHE_SLOTS + 1: the uncached scans' scratch)
        self.sc_np = np.full((CACHE_SLOTS + 2, N), -2, dtype=np.int32)
        self.se_np = np.full((CACHE_SLOTS, N), -1, dtype=np.int64)
        self.sbs_np = np.zeros((CACHE_SLOTS, self.n_blocks, 4), dtype=np.int32)
        self.sbt_np = np.full((CACHE_SLOTS, self.n_blocks), -1, dtype=np.int64)
        self.bv_np = np.zeros(self.n_blocks, dtype=np.int64)
        self.seg_np = np.zeros((self.n_blocks + 4, 3), dtype=np.int64)
        self.sc = self.sc_np
        self.se = self.se_np
        self.sbs = self.sbs_np
        self.sbt = self.sbt_np
        self.bv = self.bv_np
        self.seg = self.seg_np
        for i in range(CACHE_SLOTS):
            self.slot_owner[i] = -1
        if self.n_nodes > 0:
            # every block as recently changed as its newest node
            for n in range(self.n_nodes):
                if self.ver[n] > self.bv[n >> BLOCK_SHIFT]:
                    self.bv[n >> BLOCK_SHIFT] = self.ver[n]

    def _fill_soa(self) -> None:
        # After a reshape: every node's soa columns and cap flags from the copies.
        cdef Py_ssize_t R = self.n_res, N = self.n_nodes
        soa = np.zeros((4 * R + SOA_EXTRA, max(N, 1)), dtype=np.float64)
        capflag = np.zeros(max(N, 1), dtype=np.int8)
        self.n_zero_cap = self.n_big_cap = 0
        if self.fused.on and N > 0:
            soa[:R, :N] = self.used_np.T
            soa[R:2 * R, :N] = self.alloc_np.T
            soa[2 * R + ROW_Z0, :N] = self.nzu_np[:, 0]
            soa[2 * R + ROW_Z1, :N] = self.nzu_np[:, 1]
            soa[2 * R + SOA_EXTRA:3 * R + SOA_EXTRA, :N] = self.flim_np.T
            soa[3 * R + SOA_EXTRA:4 * R + SOA_EXTRA, :N] = self.fnp_np.T
            soa[2 * R + ROW_I0, :N] = self.inv_np[:, 0]
            soa[2 * R + ROW_I1, :N] = self.inv_np[:, 1]
            flags = self.state.flags_np[:N]
            soa[2 * R + ROW_PEN, :N] = np.where(
                flags & NODE_ALIVE, np.where(flags & NODE_UNSCHEDULABLE, 1.0, 0.0), 2.0)
            a = self.alloc_np
            zero = (a[:, self.fused.c0] == 0) | (a[:, self.fused.c1] == 0)
            big = (a >= FB_EXACT_LIMIT).any(axis=1) if R else np.zeros(N, dtype=bool)
            capflag[:N] = zero * CAP_ZERO + big * CAP_BIG
            self.n_zero_cap = int(zero.sum())
            self.n_big_cap = int(big.sum())
        self.soa_np = soa
        self.soa = soa
        self.capflag_np = capflag
        self.capflag = capflag
        self.cb_np = np.zeros((2 * R + CB_EXTRA, max(N, 1)), dtype=np.float32)
        self.cb = self.cb_np
        cdef Py_ssize_t n
        if self.fused.on:
            for n in range(N):
                self._compact_node(n)

    cdef void _soa_node(self, Py_ssize_t n, flag_t fl) noexcept:
        # Node n's soa columns and cap flag from the placer's integer copies.
        cdef Py_ssize_t R = self.n_res, r
        cdef int8_t old = self.capflag[n], new = 0
        for r in range(R):
            self.soa[r, n] = <double>self.used[n, r]
            self.soa[R + r, n] = <double>self.alloc[n, r]
            self.soa[2 * R + SOA_EXTRA + r, n] = <double>self.flim[n, r]
            self.soa[3 * R + SOA_EXTRA + r, n] = <double>self.fnp[n, r]
            if self.alloc[n, r] >= FB_EXACT_LIMIT:
                new |= CAP_BIG
        if self.alloc[n, self.fused.c0] == 0 or self.alloc[n, self.fused.c1] == 0:
            new |= CAP_ZERO
        self.soa[2 * R + ROW_Z0, n] = <double>self.nzu[n, 0]
        self.soa[2 * R + ROW_Z1, n] = <double>self.nzu[n, 1]
        self.soa[2 * R + ROW_I0, n] = self.inv[n, 0]
        self.soa[2 * R + ROW_I1, n] = self.inv[n, 1]
        self.soa[2 * R + ROW_PEN, n] = (
            2.0 if not (fl & NODE_ALIVE) else 1.0 if fl & NODE_UNSCHEDULABLE else 0.0)
        self.n_zero_cap += ((new & CAP_ZERO) != 0) - ((old & CAP_ZERO) != 0)
        self.n_big_cap += ((new & CAP_BIG) != 0) - ((old & CAP_BIG) != 0)
        self.capflag[n] = new
        self._compact_node(n)

    cdef void _compact_node(self, Py_ssize_t n) noexcept:
        # Node n's compact rows from its soa columns (every writer of soa ends here):
        # free amounts rounded down, fractions and reciprocals to the nearest float.
        cdef Py_ssize_t R = self.n_res, r, lim = 2 * R + SOA_EXTRA, X = 2 * R
        cdef Py_ssize_t c0 = self.fused.c0, c1 = self.fused.c1
        cdef double i0 = self.soa[X + ROW_I0, n], i1 = self.soa[X + ROW_I1, n]
        for r in range(R):
            self.cb[r, n] = _float_down(self.soa[R + r, n] - self.soa[lim + r, n])
            self.cb[R + r, n] = _float_down(self.soa[R + r, n] - self.soa[lim + R + r, n])
        self.cb[X + CROW_G0, n] = <float>((self.soa[R + c0, n] - self.soa[X + ROW_Z0, n]) * i0)
        self.cb[X + CROW_G1, n] = <float>((self.soa[R + c1, n] - self.soa[X + ROW_Z1, n]) * i1)
        self.cb[X + CROW_H0, n] = <float>(self.soa[c0, n] * i0)
        self.cb[X + CROW_H1, n] = <float>(self.soa[c1, n] * i1)
        self.cb[X + CROW_I0, n] = <float>i0
        self.cb[X + CROW_I1, n] = <float>i1
        self.cb[X + CROW_PEN, n] = <float>self.soa[X + ROW_PEN, n]

    cdef inline void _touch(self, Py_ssize_t n) noexcept:
        # Node n changed in this placer's view: a new version; its block's summaries die.
        self.tick += 1
        self.ver[n] = self.tick
        self.bv[n >> BLOCK_SHIFT] = self.tick

    cdef inline void _soa_used(self, Py_ssize_t n) noexcept:
        # Node n's used and non-zero columns in soa after self.used / self.nzu changed
        # (every writer of those two calls this: the vectorized kernel reads soa).
        cdef Py_ssize_t r, R = self.n_res
        if not self.fused.on:
            return
        for r in range(R):
            self.soa[r, n] = <double>self.used[n, r]
            self.soa[2 * R + SOA_EXTRA + r, n] = <double>self.flim[n, r]
            self.soa[3 * R + SOA_EXTRA + r, n] = <double>self.fnp[n, r]
        self.soa[2 * R + ROW_Z0, n] = <double>self.nzu[n, 0]
        self.soa[2 * R + ROW_Z1, n] = <double>self.nzu[n, 1]
        self._compact_node(n)

    cdef inline void _fit_node(self, Py_ssize_t n) noexcept:
        # Node n's accounting by reservations after flim / frsv changed (the caller
        # renews soa): min(limits, reservations + burst), as ClusterState.node_reserved.
        cdef Py_ssize_t r
        cdef units_t a
        for r in range(self.n_res):
            a = self.frsv[n, r] + self.fburst[n, r]
            self.fnp[n, r] = a if a < self.flim[n, r] else self.flim[n, r]

    cdef bint _by_limits(self, Py_ssize_t cid) except -1:
        # Whether class cid is judged by limits: production (and monitoring) pods, or
        # every pod when reclamation is off.
        cdef ClusterState st = self.state
        if not self.reclaim_on:
            return True
        if cid >= self.fband_n:
            # classes new since the last look (rare: a band lookup per class, once)
            from esched.core.bands import DEFAULT_BANDS, Band

            cfg = self.fit_bands_cfg if self.fit_bands_cfg is not None else DEFAULT_BANDS
            have = self.fband_n
            if st.n_classes > self.fband_np.shape[0]:
                grown = np.zeros(max(st.n_classes, 2 * have, 64), dtype=np.uint8)
                grown[:have] = self.fband_np[:have]
                self.fband_np = grown
                self.fband = grown
            for c in range(have, st.n_classes):
                spec = st.class_specs[c]
                # (a released id: 0 until a new class takes it)
                self.fband[c] = spec is not None and cfg.band_of(
                    spec["priority"], spec.get("priorityClassName")) >= Band.PRODUCTION
            self.fband_n = st.n_classes
        return self.fband[cid] != 0

    cdef inline void _ensure_synced(self):
        # (reclamation switched on or off changes every limit: a new sync, see the
        # ClusterState.reclamation setter)
        if self.synced_position != self.state.position or self.state.n_nodes != self.n_nodes \
                or self.state.n_res != self.n_res or self.reclaim_on != self.state.rc_on:
            self.sync()
        elif self.classes.stale():
            # a released id given to a new class without a fold (a manifest interned)
            self._forget_classes()

    cdef int _forget_classes(self) except -1:
        # Class ids the state gave to new classes since the last look (ClassMemo):
        # what this placer keeps per id (the compiled form, the view's memo, the
        # cache's run and row, the bands) was another class's.
        cdef ClusterState st = self.state
        cdef Py_ssize_t c, i
        cdef list changed = self.classes._reused() if self.classes.stale() else None
        if not changed:
            return 0
        for c in changed:
            self.compiled.pop(c, None)
            if c < self.cconst_cap:
                self.cconst[c].s0 = -1
            if c < self.class_last.shape[0]:
                self.class_last[c] = 0
                self.class_run[c] = 0
                # (its row's record too: the new class has not stepped aside)
                self.class_miss[c] = 0
                self.class_off[c] = 0
                self.class_pause[c] = 0
            for i in range(CACHE_SLOTS):
                if self.slot_owner[i] == c:
                    self.slot_owner[i] = -1
                    self._new_epoch(i)  # its entries and summaries die
        if len(self.compiled_by_cons) > 64 + 2 * len(st.class_index):
            # Forms of constraints no class of this view holds any more (a workload
            # whose constraints name each run): only the live classes' are kept.
            for c in [cid for cid in self.compiled if st.class_specs[cid] is None]:
                del self.compiled[c]  # (a released id: its view's memo goes too)
                if c < self.cconst_cap:
                    self.cconst[c].s0 = -1
            live = {st.interpod.cons_key(cid) for cid in self.compiled
                    if st.class_specs[cid]["constraints"]}
            self.compiled_by_cons = {k: v for k, v in self.compiled_by_cons.items()
                                     if k in live}
        c = changed[0]
        # (bands are resolved for every id from the first unresolved one up)
        if c < self.fband_n:
            self.fband_n = c
        if c < self.band_np.shape[0]:
            self.band_np = self.band_np[:c]
        return 0

    # ------------------------------------------------------------------ classes

    cdef object _compile(self, Py_ssize_t cid):
        # The class's constraints as bit masks, memoized while the interned sets hold.
        comp = self.compiled.get(cid)
        stamp = intern_stamp(self.state)
        if comp is None or comp.stamp != stamp or (
                comp.node_gen >= 0 and comp.node_gen != self.state.node_gen):
            cons = self.state.class_specs[cid]["constraints"]
            if cons and not (self.cur_profile == 0 and _profile_only(cons)
                             and self.state.class_ports[cid] is None):
                # Classes with the same constraints (and so the same host ports) but
                # other requests compile alike: one result per constraints key.
                ck = self.state.interpod.cons_key(cid)
                comp = self.compiled_by_cons.get(ck)
                if comp is None or comp.stamp != stamp or (
                        comp.node_gen >= 0 and comp.node_gen != self.state.node_gen):
                    comp = self.compiled_by_cons[ck] = compile_class(self.state, cid,
                                                                      self.added)
            else:
                # Classes without constraints compile alike (a random workload has
                # thousands): one result per intern stamp, read-only in every view
                # (all of the first profile: no schedulerName). So do classes whose
                # constraints name only a scheduler of the first profile (every pod of
                # a Volcano Job names "volcano"; each one-pod Job's is a new class):
                # compile_class reads no schedulerName, and their constraints key
                # would cost a serialization per new class.
                if self.unconstrained is None or self.unconstrained.stamp != stamp:
                    self.unconstrained = compile_class(self.state, cid, self.added)
                comp = self.unconstrained
            self.compiled[cid] = comp
        return comp

    cdef int _cc_fill(self, comp, ClassConst* t) except -1:
        # The fields of a ClassConst that come from a compiled form (pointers into its
        # arrays: the form must stay referenced, as self.compiled keeps it).
        cdef word_t[:, ::1] mask
        cdef int8_t[::1] mode
        cdef int32_t[::1] off, noff, nodes
        cdef word_t[::1] intol, pconf
        cdef word_t[::1] pmask, pintol
        cdef long long[::1] pweight
        mask = comp.expr_mask
        mode = comp.expr_mode
        off = comp.term_off
        intol = comp.intolerable
        t.n_exprs = off[off.shape[0] - 1]
        t.expr_mask = &mask[0, 0]
        t.expr_mode = &mode[0]
        t.term_off = &off[0]
        t.node_gen = comp.node_gen
        t.expr_node_off = t.expr_nodes = t.port_conflict = NULL
        t.pinned = t.has_ports = False
        t.pin = -1
        if t.node_gen >= 0:
            # Only classes naming nodes or binding host ports carry these (the
            # rest skip the attribute reads: a random workload has thousands).
            noff = comp.expr_node_off
            nodes = comp.expr_nodes
            t.expr_node_off = &noff[0]
            t.expr_nodes = &nodes[0]
            t.pinned = comp.pinned
            t.pin = comp.pin
            t.has_ports = comp.has_ports
            if t.has_ports:
                pconf = comp.port_conflict
                t.port_conflict = &pconf[0]
        t.n_terms = comp.n_terms
        t.n_pref_terms = comp.n_pref_terms
        pweight = comp.pref_weight
        t.pref_weight = &pweight[0]
        pintol = comp.prefer_intolerable
        t.prefer_intolerable = &pintol[0] if pintol.shape[0] > 0 else NULL
        t.has_prefer_taints = comp.has_prefer_taints
        t.intolerable = &intol[0]
        t.tolerates_unschedulable = comp.tolerates_unschedulable
        t.has_labels = comp.has_labels
        t.has_taints = comp.has_taints
        pmask = comp.pref_mask
        t.pref_mask = &pmask[0]
        t.has_pref = comp.has_pref
        return 0

    cdef int _view(self, Py_ssize_t cid, ClassView* v, Py_ssize_t lset=-1) except -1:
        # lset: the pod's label set (core/_interpod.pyx), for inter-pod checks; -1: a
        # pod known only by its class (place_classes, place(class id)): a pod without
        # labels in namespace "default".
        cdef ClusterState st = self.state
        if cid >= self.class_last.shape[0]:
            self._grow_class_stats(cid + 1)
        cdef ClassConst* cc = &self.cconst[cid]
        cdef Py_ssize_t s0 = len(st.label_strs), s1 = len(st.taint_strs)
        cdef int profile
        if not (cc.s0 == s0 and cc.s1 == s1 and cc.s2 == st.label_words
                and cc.s3 == st.taint_words and (cc.node_gen < 0 or cc.node_gen == st.node_gen)):
            # Same stamp as _compile's; the memo saves its dict lookups and the
            # memoryview acquisitions, per pod of a new class (a random workload).
            cons = st.class_specs[cid]["constraints"]
            cc.profile = self.profile_of_name.get(cons.get("schedulerName"), 0) if cons else 0
            self._select(cc.profile)
            comp = self._compile(cid)
            if comp is not self.cc_comp:
                # Classes share compiled forms (every unconstrained class one): the
                # pointers of the last one are copied, not its arrays acquired again.
                self._cc_fill(comp, &self.cc_from)
                self.cc_comp = comp
            profile = cc.profile
            cc[0] = self.cc_from
            cc.profile = profile
            cc.priority = st.class_specs[cid]["priority"]
            cc.s0, cc.s1, cc.s2, cc.s3 = s0, s1, st.label_words, st.taint_words
        else:
            self._select(cc.profile)
        v.req = &st.class_req[cid, 0]
        v.nz_cpu = st.class_nz[cid, 0]
        v.nz_mem = st.class_nz[cid, 1]
        v.priority = cc.priority
        v.n_exprs = cc.n_exprs
        v.expr_mask = cc.expr_mask
        v.expr_mode = cc.expr_mode
        v.term_off = cc.term_off
        v.expr_node_off = cc.expr_node_off
        v.expr_nodes = cc.expr_nodes
        v.pinned = cc.pinned
        v.pin = cc.pin
        v.has_ports = cc.has_ports
        v.port_conflict = cc.port_conflict
        if v.has_ports:
            self._ports_width()
        v.port_words = self.ports.shape[1]
        v.port_bits = &self.ports[0, 0] if self.ports.shape[0] > 0 else NULL
        v.n_terms = cc.n_terms
        v.n_pref_terms = cc.n_pref_terms
        v.pref_weight = cc.pref_weight
        v.prefer_intolerable = cc.prefer_intolerable
        v.has_prefer_taints = cc.has_prefer_taints
        v.intolerable = cc.intolerable
        v.tolerates_unschedulable = cc.tolerates_unschedulable
        v.has_labels = cc.has_labels
        v.has_taints = cc.has_taints
        v.pref_mask = cc.pref_mask
        v.has_pref = cc.has_pref
        v.n_ip = 0
        v.ip = NULL
        v.n_spread = 0
        v.spread = NULL
        v.n_ips = 0
        v.ips = NULL
        v.n_soft = 0
        v.soft = NULL
        v.soft_any = False
        v.alloc = &self.alloc[0, 0] if self.n_nodes > 0 and self.n_res > 0 else NULL
        v.alloc_stride = self.n_res
        v.used = &self.used[0, 0] if self.n_nodes > 0 and self.n_res > 0 else NULL
        v.fit_req = &st.class_lim[cid, 0]
        v.by_reservations = not self._by_limits(cid)
        if self.n_nodes > 0 and self.n_res > 0:
            v.fit_used = &self.fnp[0, 0] if v.by_reservations else &self.flim[0, 0]
        else:
            v.fit_used = NULL
        v.nzu = &self.nzu[0, 0] if self.n_nodes > 0 else NULL
        v.flags = &st.flags[0]
        v.label_bits = &st.label_bits[0, 0]
        v.taint_bits = &st.taint_bits[0, 0]
        v.label_words = st.label_words
        v.taint_words = st.taint_words
        v.n_res = self.n_res
        cdef int h
        v.n_hot = 0
        if self.any_usage:
            v.usage = self.usage_ptr
            v.measured = self.measured_ptr
            v.n_hot = self.phot_n[self.cur_profile]
            for h in range(v.n_hot):
                v.hot_col[h] = self.phot_col[self.cur_profile][h]
                v.hot_pct[h] = self.phot_pct[self.cur_profile][h]
        else:
            v.usage = NULL
            v.measured = NULL
        if (st.interpod.active or st.class_flags[cid] & CLASS_INTERPOD
                or (self.spread_defaults and lset >= 0 and st.interpod.owned(lset))):
            # after the label and taint tables: topology spread's policies read them
            topology_view(self, cid, lset, v)
        cdef int k, i
        cdef PluginSpec* s
        cdef units_t pod_req
        cdef Py_ssize_t col
        v.n_need = 0
        for col in range(self.n_res):
            if v.fit_req[col] > 0:
                if v.n_need == MAX_NEED:
                    v.n_need = -1
                    break
                v.need_col[v.n_need] = col
                v.need_val[v.n_need] = v.fit_req[col]
                v.n_need += 1
        self._view_fb(v)
        for k in range(self.n_specs):
            s = &self.specs[k]
            for i in range(s.n_res):
                col = s.col[i]
                if s.nz[i] == 0:
                    pod_req = v.nz_cpu
                    v.src[k][i] = SRC_NZ_CPU
                elif s.nz[i] == 1:
                    pod_req = v.nz_mem
                    v.src[k][i] = SRC_NZ_MEM
                else:
                    pod_req = v.req[col] if col < self.n_res else 0
                    v.src[k][i] = SRC_USED
                if s.scalar[i] and pod_req == 0:
                    # kube: an extended resource the pod does not request is not scored.
                    v.src[k][i] = SRC_SKIP
                v.pod_req[k][i] = pod_req
        v.n_active = 0
        v.n_norm = 0
        for k in range(self.n_specs):
            v.raw_max[k] = 0
            v.raw_min[k] = 0
            if self.specs[k].kind != PLUGIN_PYTHON and self._plugin_applies(k, v):
                v.active[v.n_active] = k
                v.n_active += 1
                if normalized(self.specs[k].kind):
                    v.norm[v.n_norm] = k
                    v.n_norm += 1
        return 0

    cdef void _view_fb(self, ClassView* v) noexcept:
        # The vectorized kernel's inputs for this class, or v.use_fb = False.
        cdef Fused* F = self.pf
        cdef esched_fblock* k = &v.fb
        cdef Py_ssize_t R = self.n_res, j
        cdef int n_need = v.n_need
        v.use_fb = (F.on and self.n_nodes > 0 and 0 <= n_need <= ESCHED_FB_MAX_NEED
                    and self.n_big_cap == 0
                    and v.nz_cpu < FB_EXACT_LIMIT and v.nz_mem < FB_EXACT_LIMIT)
        if not v.use_fb:
            return
        for j in range(n_need):
            if v.need_val[j] >= FB_EXACT_LIMIT:
                v.use_fb = False   # fits nowhere exact anyway; leave it to the scalar path
                return
        v.fb_special = self.n_zero_cap > 0
        cdef double* base = &self.soa[0, 0]
        cdef Py_ssize_t S = self.soa.shape[1]
        k.u0 = base + F.c0 * S
        k.u1 = base + F.c1 * S
        k.a0 = base + (R + F.c0) * S
        k.a1 = base + (R + F.c1) * S
        k.z0 = base + (2 * R + ROW_Z0) * S
        k.z1 = base + (2 * R + ROW_Z1) * S
        k.i0 = base + (2 * R + ROW_I0) * S
        k.i1 = base + (2 * R + ROW_I1) * S
        k.pen = base + (2 * R + ROW_PEN) * S
        k.n_need = n_need
        # the rows of the band's accounting (flim or fnp), see _fill_soa
        cdef Py_ssize_t fit_row = (3 if v.by_reservations else 2) * R + SOA_EXTRA
        for j in range(n_need):
            k.need_used[j] = base + (fit_row + v.need_col[j]) * S
            k.need_alloc[j] = base + (R + v.need_col[j]) * S
            k.need_val[j] = <double>v.need_val[j]
        k.pen_ok = 1.0 if v.tolerates_unschedulable else 0.0
        # the compact rows of the bounded walk (the free rows of the band's accounting)
        cdef float* cbase = &self.cb[0, 0]
        cdef Py_ssize_t free_row = R if v.by_reservations else 0
        for j in range(n_need):
            k.cfree[j] = cbase + (free_row + v.need_col[j]) * S
            k.cneed_lo[j] = _float_down(k.need_val[j])
            k.cneed_hi[j] = -_float_down(-k.need_val[j])
        k.cg0 = cbase + (2 * R + CROW_G0) * S
        k.cg1 = cbase + (2 * R + CROW_G1) * S
        k.ch0 = cbase + (2 * R + CROW_H0) * S
        k.ch1 = cbase + (2 * R + CROW_H1) * S
        k.ci0 = cbase + (2 * R + CROW_I0) * S
        k.ci1 = cbase + (2 * R + CROW_I1) * S
        k.cpen = cbase + (2 * R + CROW_PEN) * S
        k.fr0 = <double>v.nz_cpu
        k.fr1 = <double>v.nz_mem
        k.br0 = <double>v.req[F.c0]
        k.br1 = <double>v.req[F.c1]
        k.rw0 = <double>F.rw0
        k.rw1 = <double>F.rw1
        k.ws = <double>F.ws_both
        k.inv_ws = 1.0 / <double>F.ws_both if F.ws_both else 0.0
        k.w_fit = <double>F.w_fit
        k.w_bal = <double>F.w_bal
        k.do_fit = F.has_fit and F.ws_both != 0
        k.least = F.fit_least
        k.do_bal = F.has_bal
        # (resource weights are 1..100, plugin weights unbounded: see esched_fbound_body)
        k.floors = (F.w_fit <= ESCHED_FB_FLOOR_WEIGHT and F.w_bal <= ESCHED_FB_FLOOR_WEIGHT
                    and F.rw0 <= 100 and F.rw1 <= 100)

    # ------------------------------------------------------------------ scoring

    cdef score_t _plugin_score(self, Py_ssize_t n, const ClassView* v, int k,
                               Py_ssize_t cid) noexcept:
        # Plugin k's score of node n (explain, scores): its kernel, or its Python callable.
        if self.specs[k].kind == PLUGIN_PYTHON:
            try:
                return int(self.py_plugins[k](self.state, n, cid))
            except Exception:
                # A broken user plugin scores 0 rather than stopping placement; counted.
                self.python_plugin_errors += 1
                return 0
        return plugin_kernel(&self.specs[k], k, v, n)

    cdef score_t _total(self, Py_ssize_t n, const ClassView* v, Py_ssize_t cid) noexcept:
        """Weighted sum of the plugins' scores: the kernel table, then any Python plugins."""
        cdef score_t total = kernel_total(self.specs, self.n_specs, v, n)
        if self.has_python:
            total += self._python_total(n, v, cid)
        return total

    cdef score_t _python_total(self, Py_ssize_t n, const ClassView* v, Py_ssize_t cid) noexcept:
        # The Python plugins' weighted scores (with the GIL; the kernel table has them as 0).
        cdef score_t total = 0
        cdef int k
        for k in range(self.n_specs):
            if self.specs[k].kind == PLUGIN_PYTHON:
                total += self.specs[k].weight * self._plugin_score(n, v, k, cid)
        return total

    cdef inline score_t _node_total(self, Py_ssize_t n, const ClassView* v,
                                    Py_ssize_t cid) noexcept:
        """Total score of node n for the class through the plugin table, -1 if infeasible."""
        if not fits(v, n):
            return -1
        return self._total(n, v, cid)

    cdef inline bint _plugin_applies(self, int k, const ClassView* v) noexcept:
        # kube's PreScore "Skip": NodeGroupAffinity has nothing to say about a class
        # without preferred node groups, NodeAffinity without preferred terms (explain
        # and scores leave them out). TaintToleration without a PreferNoSchedule taint
        # the class does not tolerate scores MAX_NODE_SCORE on every node in kube: the
        # same on all, it changes no choice, and is left out too (docs/core.md).
        cdef int kind = self.specs[k].kind
        if kind == PLUGIN_NODE_GROUP_AFFINITY:
            return v.has_pref
        if kind == PLUGIN_NODE_AFFINITY:
            return v.n_pref_terms > 0
        if kind == PLUGIN_TAINT_TOLERATION:
            return v.has_prefer_taints
        if kind == PLUGIN_INTER_POD_AFFINITY:
            # kube's PreScore Skip (no term anywhere concerns the pod): no weights
            return v.n_ips > 0
        if kind == PLUGIN_POD_TOPOLOGY_SPREAD:
            return v.n_soft > 0  # (PreScore Skip: no ScheduleAnyway constraint)
        return True

    cdef void _new_epoch(self, int slot) noexcept:
        # The row changes class (or is given up): a new epoch, and every entry and block
        # summary stamped with an older one dies. The stamps keep EPOCH_BITS of it, so
        # where the count would come round to an epoch that an older class's entries
        # may still carry (their nodes untouched all along: the same version), the row
        # is emptied instead and the count starts again. (The class-change path only:
        # the visits compare stamps as they are.)
        self.slot_epoch[slot] += 1
        if self.slot_epoch[slot] == EPOCH_LIMIT:
            self.slot_epoch[slot] = 0
            esched_fill_cold(&self.se[slot, 0], self.se.shape[1], -1)
            esched_fill_cold(&self.sbt[slot, 0], self.sbt.shape[1], -1)

    def release_cache_rows(self, changes: int = 1) -> None:
        """Free every cache row as ``changes`` changes of class each would (for tests).

        Each change gives the row a new epoch as a class taking it does (the entries of
        the classes before die; every ``2**EPOCH_BITS`` the row is emptied), and the
        rows are left to no class: the next class needing one takes row 0. The nodes
        stay as they are, so a test reaches the epoch's wrap without that many
        placements.
        """
        cdef int i
        cdef long long k, n = changes
        for i in range(CACHE_SLOTS):
            self.slot_owner[i] = -1
            self.slot_used[i] = 0
            for k in range(n):
                self._new_epoch(i)

    cdef Py_ssize_t _slot_for(self, Py_ssize_t cid) noexcept:
        """The cache row of the class (its own, else the least recently used), or -1.

        The cache pays only when a class comes back to nodes it scored while their
        entries are still valid; a class seen once in a long while (a random workload:
        thousands of shapes) would only write entries. A class's run is its placements
        each within CACHE_SLOTS placements of the one before. A class in a run keeps
        using the row it holds. It gets a row only once the walk has gone through as
        many nodes as the cluster has since its run began: the visits start where the
        last one stopped (kube's nextStartNodeIndex), so before that the class's pods
        see nodes it has not scored, and a row would cost an exact score and a stamp
        per node (instead of the uncached walk's bounds) for entries that would rarely
        be read. A burst fills its row from its second round on and hits from its
        third; a row in use is never the least recently used one. A class that gave its
        row up (``_judge_row``) takes none until the walk has gone through its pause.
        """
        cdef long long last = self.class_last[cid]
        cdef int i, lru = 0
        self.calls += 1
        self.class_last[cid] = self.calls
        if not self.use_cache:
            return -1
        if last <= 0 or self.calls - last > CACHE_SLOTS:
            self.class_run[cid] = self.walked   # a run begins
            return -1
        if self.walked < self.class_off[cid]:
            return -1   # stepped aside (and holds no row)
        for i in range(CACHE_SLOTS):
            if self.slot_owner[i] == cid:
                self.slot_used[i] = self.calls
                return i
            if self.slot_used[i] < self.slot_used[lru]:
                lru = i
        if self.walked - self.class_run[cid] < self.n_nodes:
            return -1   # the walk has not come round since the run began
        self.slot_owner[lru] = cid
        self.slot_used[lru] = self.calls
        self._new_epoch(lru)     # the previous class's entries and summaries die
        if self.class_pause[cid] > 0:
            self.returns += 1
        return lru

    cdef void _judge_row(self, Py_ssize_t cid, int slot, long long hits,
                         long long misses) noexcept:
        """After a visit through the class's row: keep it, or give it up.

        A visit whose hits are at least its misses paid: a hit costs nothing (a block
        from its summary) and a miss an exact score and a stamp, about twice what the
        uncached walk's bound spends on the node. A row that fills and is then read
        pays from the walk's next round; one whose visits keep missing (the nodes
        change under it faster than the walk comes back, e.g. a resync renewing most
        nodes each time) only costs. Once the misses since the last visit that paid
        exceed MISS_ROUNDS times the nodes, the class frees its row (its entries die
        with the slot's epoch; the row goes first to the next class that needs one)
        and takes none, its pods walking uncached, until the walk has gone through
        2**k times the nodes, k its step-asides since its row last paid (at most
        MAX_PAUSE). Then it fills a row again. The decisions are the same either way.
        """
        if hits >= misses:
            self.class_miss[cid] = 0
            self.class_pause[cid] = 0
            return
        self.class_miss[cid] += misses
        if self.class_miss[cid] <= MISS_ROUNDS * <long long>self.n_nodes:
            return
        self.slot_owner[slot] = -1
        self.slot_used[slot] = 0
        self._new_epoch(slot)
        self.class_miss[cid] = 0
        self.class_off[cid] = self.walked + (<long long>self.n_nodes << self.class_pause[cid])
        if self.class_pause[cid] < MAX_PAUSE:
            self.class_pause[cid] += 1
        self.steps_aside += 1

    cdef Py_ssize_t _place(self, Py_ssize_t cid, const ClassView* v, score_t* best_out,
                           long long* visited_out) noexcept:
        """Best node for the class (or -1): sampled visit, max total, seeded tie-break."""
        cdef ClusterState st = self.state
        cdef Py_ssize_t N = self.n_nodes, best, start = self.next_start, processed = 0
        cdef long long alive = len(st.node_index)
        cdef long long target = alive, hits0, misses0
        cdef int slot
        if N > 0 and (self.ext_mask != NULL or self.ext_score != NULL
                      or self.ext_rank != NULL or v.n_norm > 0):
            if self.sample:
                target = max(num_feasible_nodes_to_find(alive, self.percentage), 1)
            if start >= N:
                start = 0
            best = self._scan_external(cid, v, start, target, best_out, visited_out,
                                       &processed)
            self.next_start = (start + processed) % N
            self.walked += processed
            return best
        # Inter-pod checks read counts that change without a node changing: such a
        # pod neither reads nor writes the class's cache row.
        slot = self._slot_for(cid) if v.n_ip == 0 and v.n_spread == 0 else -1
        if N == 0:
            best_out[0] = -1
            visited_out[0] = 0
            return -1
        if self.sample:
            target = num_feasible_nodes_to_find(alive, self.percentage)
        if target < 1:
            target = 1   # no alive node: nothing is feasible, the visit goes round once
        if start >= N:
            start = 0
        hits0 = self.hits
        misses0 = self.misses
        best = self._scan(cid, v, start, target, slot, best_out, visited_out, &processed)
        # kube: nextStartNodeIndex = (start + processed) % allNodes
        self.next_start = (start + processed) % N
        self.walked += processed
        if slot >= 0:
            self._judge_row(cid, slot, self.hits - hits0, self.misses - misses0)
        return best

    cdef Py_ssize_t _scan_external(self, Py_ssize_t cid, const ClassView* v, Py_ssize_t start,
                                   long long target, score_t* best_out, long long* visited_out,
                                   Py_ssize_t* processed_out) noexcept:
        """The visit of ``_scan`` with an external filter and score (``place(mask=,
        extra=)``) or with normalized plugins (NodeAffinity, TaintToleration): node by
        node through the plugin table, no cache (neither the external score nor a
        normalized one is a node's own: they depend on the other nodes scored),
        reservoir sampling over equal totals. Normalized plugins first walk the same
        nodes for their largest raw scores (_normalize), as kube normalizes over the
        nodes it scored."""
        cdef Py_ssize_t N = self.n_nodes, k = 0, n, best = -1, i = 0
        cdef int p
        cdef long long found = 0, visited = 0, ties = 0, n_feas = -1
        cdef score_t s, best_score = -1
        cdef int32_t* feas = &self.sc[CACHE_SLOTS, 0]
        cdef int32_t* fused = &self.sc[CACHE_SLOTS + 1, 0]
        cdef bint use_fused = False
        cdef Py_ssize_t j, n0, m
        cdef esched_fbsum sm
        cdef int64_t* raws = NULL
        # the active plugins the scoring walk adds to the kernel's scores, sorted once
        # per pod: normalized from the maxima walk's raw scores, or gathered per node
        cdef int n_nrm = 0, n_gat = 0, q
        cdef int nrm[MAX_PLUGINS]
        cdef int gat[MAX_PLUGINS]
        # each normalized plugin's last raw score and its weighted score: the scored
        # nodes share few raw scores (a domain's), and the score is a division
        cdef long long raw
        cdef long long last_raw[MAX_PLUGINS]
        cdef score_t last_sc[MAX_PLUGINS]
        if v.n_norm > 0:
            # The fused profile's resource scores by the vectorized kernel, as _scan
            # takes them (the same scores as the plugin table's); the normalized
            # plugins are added per node below.
            use_fused = (self.pf.on and v.use_fb and not v.fb_special and v.n_need >= 0
                         and not (v.has_pref and self.has_node_group))
            # (the maxima live in the view, which _place's callers own) The walk for
            # the maxima is this one: it leaves the feasible nodes in visit order, the
            # nodes scored below, and how far it went.
            if use_fused and v.n_hot == 0:
                # by blocks: the kernel's resource check leaves the scores too
                k = _walk_fb(v, N, self.ext_mask, start, target, feas, fused, &n_feas,
                             &visited)
                raws = _raws_for(n_feas)
                _norm_raw(self.specs, <ClassView*>v, feas, n_feas, raws)
                j = k
            else:
                k = self._normalize(<ClassView*>v, start, target, feas, &n_feas, &visited)
                j = 0
            use_fused = use_fused and n_feas > 0
            if use_fused:
                for q in range(v.n_active):
                    p = v.active[q]
                    if raws != NULL and normalized(self.specs[p].kind):
                        nrm[n_nrm] = p
                        last_raw[n_nrm] = 0
                        last_sc[n_nrm] = self.specs[p].weight * normalized_score(
                            self.specs[p].kind, 0, v.raw_min[p], v.raw_max[p])
                        n_nrm += 1
                    elif not folds(self.specs[p].kind):
                        gat[n_gat] = p
                        n_gat += 1
            while use_fused and j < k:
                n0 = start + j
                if n0 >= N:
                    n0 -= N
                m = _block_run(n0, N, k - j)
                esched_fblock_score(&v.fb, n0, m, fused + n0, &sm)
                j += m
        while True:
            if n_feas >= 0:
                if i == n_feas:
                    break
                n = feas[i]
                i += 1
                if use_fused:
                    s = fused[n]
                    for j in range(n_nrm):
                        # the raw score the maxima walk computed (what gather reads)
                        p = nrm[j]
                        raw = raws[(i - 1) * MAX_PLUGINS + p]
                        if raw != last_raw[j]:
                            last_raw[j] = raw
                            last_sc[j] = self.specs[p].weight * normalized_score(
                                self.specs[p].kind, raw, v.raw_min[p], v.raw_max[p])
                        s += last_sc[j]
                    for j in range(n_gat):
                        p = gat[j]
                        s += self.specs[p].weight * plugin_kernel_gathered(
                            &self.specs[p], p, v, n)
            else:
                if k >= N:
                    break
                n = start + k
                if n >= N:
                    n -= N
                k += 1
                if not (v.flags[n] & NODE_ALIVE):
                    continue
                if self.ext_mask != NULL and not self.ext_mask[n]:
                    continue
                visited += 1
                # _node_total, written out so the kernel table inlines into this loop
                if not fits(v, n):
                    continue
            if not use_fused:  # (use_fused: only over the walk's feasible nodes)
                s = kernel_total(self.specs, self.n_specs, v, n)
            if self.has_python:
                s += self._python_total(n, v, cid)
            if self.ext_score != NULL:
                s += self.ext_score[n]
            found += 1
            if s > best_score:
                best_score = s
                best = n
                ties = 1
            elif s == best_score:
                if self.ext_rank != NULL:
                    # The smallest rank decides (a fixed node order: the FGD artifact's
                    # smallest node name; or a secondary key); equal ranks draw.
                    if self.ext_rank[n] < self.ext_rank[best]:
                        best = n
                        ties = 1
                    elif self.ext_rank[n] == self.ext_rank[best]:
                        ties += 1
                        if below(&self.rng, <uint64_t>ties) == 0:
                            best = n
                else:
                    ties += 1
                    if below(&self.rng, <uint64_t>ties) == 0:
                        best = n
            if found >= target:
                break
        best_out[0] = best_score
        visited_out[0] = visited
        processed_out[0] = k
        return best

    cdef Py_ssize_t _normalize(self, ClassView* v, Py_ssize_t start,
                               long long target, int32_t* feas=NULL,
                               long long* n_feas=NULL, long long* visited=NULL) noexcept:
        """kube's NormalizeScore over the nodes being scored: walk from ``start`` as the
        scan does (alive, the external filter, feasible) until ``target`` feasible
        nodes, and set each normalized plugin's ``v.raw_max`` to the largest raw score
        among them (_norm_raw). Returns how many nodes the walk went through; with
        ``feas``, the feasible nodes it found go there in visit order (``n_feas`` of
        them) and ``visited`` counts the nodes it looked at (alive, through the
        external filter).

        esched scores a sample (relaxed randomization) as kube scores the feasible nodes
        it found (percentageOfNodesToScore): the sample is the normalization set.
        """
        cdef Py_ssize_t N = self.n_nodes, k = 0, n
        cdef long long found = 0, seen = 0
        if feas == NULL:
            feas = &self.sc[CACHE_SLOTS, 0]
        while k < N:
            n = start + k
            if n >= N:
                n -= N
            k += 1
            if not (v.flags[n] & NODE_ALIVE):
                continue
            if self.ext_mask != NULL and not self.ext_mask[n]:
                continue
            seen += 1
            if not fits(v, n):
                continue
            feas[found] = <int32_t>n
            found += 1
            if found >= target:
                break
        _norm_raw(self.specs, v, feas, found)
        if n_feas != NULL:
            n_feas[0] = found
            visited[0] = seen
        return k

    cdef inline void _fused_block(self, const ClassView* v, Py_ssize_t n0, Py_ssize_t m,
                                  int32_t* out, esched_fbsum* sm) noexcept:
        # Scores of nodes n0..n0+m-1 for the fused profile into out (kernel or scalar),
        # and their summary.
        if v.use_fb:
            _score_block_fb(self.specs, self.n_specs, v, n0, m, out, sm, &self.inv[0, 0])
        else:
            _score_block(self.specs, self.n_specs, v, n0, m, out)
            esched_summarize(out, m, sm)

    cdef Py_ssize_t _scan(self, Py_ssize_t cid, const ClassView* v, Py_ssize_t start,
                          long long target, int slot, score_t* best_out,
                          long long* visited_out, Py_ssize_t* processed_out) noexcept:
        """Visit nodes from ``start`` until ``target`` are feasible; the best, or -1.

        Nodes go in steps that end at block boundaries (ESCHED_FB_BLOCK, aligned), so a
        step is a whole block or part of one. A step's scores land in the class's cache
        row (``slot``) or the scratch row, and it is reduced to a summary (best, how many
        have it, feasible, visited): the walk keeps the best score and the steps holding
        it. Then one seeded draw picks uniformly among all visited nodes with the best
        score, the r-th in visit order -- the distribution of kube's selectHost
        reservoir sampling, with one draw instead of one per tie.

        Fused profile: a step is scored by the vectorized kernel; with the cache, a whole
        block whose summary is still valid (no node in it changed: ``bv``) is taken
        from the summary in O(1), and its nodes count as hits. Plugin table: node by
        node, each through its cache entry (valid while the node's version holds).
        Both count hits and misses per visited node alike, and decide alike.
        """
        cdef Py_ssize_t N = self.n_nodes, k = 0, n0, m, i, n, b, j, nseg = 0, best = -1
        # (a queue's preferred node groups add a per-node score the vectorized kernel does
        # not have: the plugin table then)
        cdef bint fused = (self.pf.on and v.n_need >= 0
                           and not (v.has_pref and self.has_node_group))
        cdef bint cached = slot >= 0
        # Uncached, resources only (what _score_block_fb leaves to the kernel alone):
        # once a best score is held, a step scores exactly only the nodes that may
        # reach it (esched_fbound); the rest count as feasible, below the best.
        cdef bint bound = (self.prune and fused and not cached and v.use_fb
                           and not (v.fb_special or v.n_ip or v.n_spread or v.has_taints
                                    or v.has_labels or v.pinned or v.has_ports))
        cdef bint whole, stop = False
        cdef int bound_misses = 0
        cdef int32_t* S = &self.sc[slot if cached else CACHE_SLOTS, 0]
        cdef int64_t* E = &self.se[slot, 0] if cached else NULL
        cdef int64_t epoch = (<int64_t>self.slot_epoch[slot] << EPOCH_SHIFT) if cached else 0
        cdef const long long* ver = &self.ver[0]
        cdef int64_t* seg = &self.seg[0, 0]
        cdef esched_fbsum sm
        cdef long long found = 0, visited = 0, hits = 0, misses = 0, ties = 0, need
        cdef long long step_misses
        cdef Py_ssize_t n_stale, n_few, m_step
        cdef Py_ssize_t few[FEW_STALE]
        cdef int32_t best_score = -1
        cdef uint64_t r
        while k < N and not stop:
            n0 = start + k
            if n0 >= N:
                n0 -= N
            m = _block_run(n0, N, N - k)  # to the end of n0's block, the nodes, the round
            b = n0 >> BLOCK_SHIFT
            whole = (n0 & (ESCHED_FB_BLOCK - 1)) == 0 and (m == ESCHED_FB_BLOCK or n0 + m == N)
            if fused and cached and whole and self.sbt[slot, b] == (self.bv[b] | epoch):
                sm = (<esched_fbsum*>&self.sbs[slot, b, 0])[0]
                if found + sm.n_feasible >= target:
                    m = esched_cut(S + n0, m, target - found)
                    esched_summarize(S + n0, m, &sm)
                    stop = True
                hits += sm.n_visited
            elif fused and cached:
                # Redo only what is stale: a few nodes one by one, else the whole step.
                n_stale = esched_stale(E + n0, ver + n0, epoch, m)
                n_few = 0
                m_step = m
                if 0 < n_stale <= FEW_STALE:
                    for i in range(m):
                        n = n0 + i
                        if E[n] != (ver[n] | epoch):
                            few[n_few] = n
                            n_few += 1
                            # one node: the scalar pass (same scores) is cheaper,
                            # through the reciprocals the vectorized kernel keeps
                            S[n] = _score_one_inv(self.specs, self.n_specs, v, n,
                                                  &self.inv[n, 0])
                            if n_few == n_stale:
                                break
                elif n_stale > FEW_STALE:
                    self._fused_block(v, n0, m, S + n0, &sm)
                esched_summarize(S + n0, m, &sm)
                if whole:
                    # every entry of the block is current now, visited or not
                    (<esched_fbsum*>&self.sbs[slot, b, 0])[0] = sm
                    self.sbt[slot, b] = self.bv[b] | epoch
                if found + sm.n_feasible >= target:
                    m = esched_cut(S + n0, m, target - found)
                    esched_summarize(S + n0, m, &sm)
                    stop = True
                # hits and misses of the visited (alive) nodes, by the stamps before
                step_misses = 0
                if n_stale > FEW_STALE:
                    for i in range(m):
                        n = n0 + i
                        step_misses += ((S[n] >= ESCHED_FB_INFEASIBLE)
                                        & (E[n] != (ver[n] | epoch)))
                else:
                    for i in range(n_few):
                        step_misses += few[i] < n0 + m and S[few[i]] >= ESCHED_FB_INFEASIBLE
                misses += step_misses
                hits += sm.n_visited - step_misses
                # the stamps of the whole step (its scores are all current)
                if n_stale > FEW_STALE:
                    for i in range(m_step):
                        E[n0 + i] = ver[n0 + i] | epoch
                else:
                    for i in range(n_few):
                        E[few[i]] = ver[few[i]] | epoch
            elif fused:
                if bound and best_score >= 0:
                    # Nearly every node reaching the best (an emptyish cluster's ties)
                    # makes the bound extra work: after two such steps, the kernel.
                    if esched_fbound(&v.fb, n0, m, S + n0, &sm, best_score) == m:
                        bound_misses += 1
                        bound = bound_misses < 2
                else:
                    self._fused_block(v, n0, m, S + n0, &sm)
                if found + sm.n_feasible >= target:
                    m = esched_cut(S + n0, m, target - found)
                    esched_summarize(S + n0, m, &sm)
                    stop = True
            else:
                need = target - found
                for i in range(m):
                    n = n0 + i
                    if not (v.flags[n] & NODE_ALIVE):
                        S[n] = ESCHED_FB_DEAD
                        continue
                    if cached and E[n] == (ver[n] | epoch):
                        hits += 1
                    else:
                        S[n] = <int32_t>self._node_total(n, v, cid)
                        if cached:
                            misses += 1
                            E[n] = ver[n] | epoch
                    if S[n] >= 0:
                        need -= 1
                        if need == 0:
                            m = i + 1
                            stop = True
                            break
                esched_summarize(S + n0, m, &sm)
            visited += sm.n_visited
            found += sm.n_feasible
            if sm.max >= 0 and sm.max >= best_score:
                if sm.max > best_score:
                    best_score = sm.max
                    nseg = 0
                    ties = 0
                seg[3 * nseg] = n0
                seg[3 * nseg + 1] = m
                seg[3 * nseg + 2] = sm.n_max
                nseg += 1
                ties += sm.n_max
            k += m
        if nseg > 0:
            r = below(&self.rng, <uint64_t>ties) if ties > 1 else 0
            for j in range(nseg):
                if r < <uint64_t>seg[3 * j + 2]:
                    n0 = seg[3 * j]
                    best = n0 + esched_nth_equal(S + n0, seg[3 * j + 1], best_score,
                                                 <Py_ssize_t>r)
                    break
                r -= seg[3 * j + 2]
        self.hits += hits
        self.misses += misses
        best_out[0] = best_score
        visited_out[0] = visited
        processed_out[0] = k
        return best

    cdef int _grow_class_stats(self, Py_ssize_t n) except -1:
        cap = max(n, 2 * self.class_last.shape[0], 64)
        for name in ("class_last", "class_run", "class_miss", "class_off", "class_pause"):
            old = getattr(self, name + "_np")
            new = np.zeros(cap, dtype=np.int64)
            new[: old.shape[0]] = old
            setattr(self, name + "_np", new)
        self.class_last = self.class_last_np
        self.class_run = self.class_run_np
        self.class_miss = self.class_miss_np
        self.class_off = self.class_off_np
        self.class_pause = self.class_pause_np
        cdef ClassConst* grown = <ClassConst*>realloc(self.cconst, cap * sizeof(ClassConst))
        if grown == NULL:
            raise MemoryError()
        self.cconst = grown
        cdef Py_ssize_t i
        for i in range(self.cconst_cap, cap):
            self.cconst[i].s0 = -1
        self.cconst_cap = cap
        return 0

    cdef void _assume(self, Py_ssize_t cid, Py_ssize_t n, int sign,
                      Py_ssize_t lset=-1) noexcept:
        cdef ClusterState st = self.state
        cdef Py_ssize_t r
        if st.interpod.active or st.class_flags[cid] & CLASS_INTERPOD:
            topology_assume(self, cid, n, sign, lset)
        for r in range(self.n_res):
            self.used[n, r] += sign * st.class_req[cid, r]
            # an assumed pod's reservation is its limit (as at binding)
            self.flim[n, r] += sign * st.class_lim[cid, r]
            self.frsv[n, r] += sign * st.class_lim[cid, r]
        self._fit_node(n)
        self.nzu[n, 0] += sign * st.class_nz[cid, 0]
        self.nzu[n, 1] += sign * st.class_nz[cid, 1]
        if st.class_flags[cid] & CLASS_HOST_PORTS:
            self._ports_assume(n, cid, sign)
        self._soa_used(n)
        self._touch(n)
        self.sver[n] = -2  # differs from any state version: the next sync renews it

    cdef int _ports_width(self) except -1:
        # The state's port words may widen without a fold step (a class interned by
        # place(manifest)): widen this view's copy alike (new keys are bound nowhere).
        cdef ClusterState st = self.state
        if self.ports_np.shape[1] < st.port_words:
            grown = np.zeros((self.ports_np.shape[0], st.port_words), dtype=np.uint64)
            grown[:, : self.ports_np.shape[1]] = self.ports_np
            self.ports_np = grown
            self.ports = grown
        return 0

    cdef int _ports_assume(self, Py_ssize_t n, Py_ssize_t c, int sign) except -1:
        # Host ports of a pod of class c assumed bound (1) or gone (-1) on node n: the
        # row is the state's counts plus this view's, exact both ways (gang plans undo).
        cdef ClusterState st = self.state
        cdef Py_ssize_t w
        self._ports_width()
        delta = self.port_delta.get(n)
        if delta is None:
            delta = self.port_delta[n] = {}
        for b in st.class_ports[c][0]:
            delta[b] = delta.get(b, 0) + sign
        counts = dict(st.node_ports.get(n, {}))
        for b, k in delta.items():
            counts[b] = counts.get(b, 0) + k
        for w in range(self.ports.shape[1]):
            self.ports[n, w] = 0
        for b, k in counts.items():
            if k > 0:
                self.ports[n, b >> 6] |= (<word_t>1) << (b & 63)
        return 0

    # ------------------------------------------------------------------ inter-pod
    # (the views and assumptions of inter-pod affinity and topology spread are
    # core/_topology_views.pyx's: topology_view, topology_assume)

    cdef Py_ssize_t _lset_of(self, pod) except -2:
        # The label set of a pod (a key in the state, a manifest); -1 for a class id.
        cdef ClusterState st = self.state
        if isinstance(pod, str):
            return st.interpod.pod_lset_of(st.pod_index[pod])
        if isinstance(pod, dict):
            meta = pod.get("metadata") or {}
            return st.interpod.lset(meta.get("namespace") or DEFAULT_NAMESPACE, meta.get("labels"),
                                    spread_default_labels(meta) is not None)
        return -1

    # ------------------------------------------------------------------ Python API

    cdef Py_ssize_t _class_of(self, pod) except -1:
        if isinstance(pod, str):
            return self.state.pod_class_id(pod)
        if isinstance(pod, int):
            return pod
        return self.state.intern_class(pod)

    def place(self, pod, bint assume=True, const uint8_t[::1] mask=None,
              const int64_t[::1] extra=None,
              const int64_t[::1] rank=None) -> tuple[str, int] | None:
        """Choose a node for one pod (a manifest, a pod key in the state, or a class id).

        Returns ``(node name, total score)`` or None if no node is feasible. With
        ``assume`` the placement is added to this placer's view (not to the state).

        ``mask`` (uint8 per node slot, 0 = infeasible) and ``extra`` (int64 per node
        slot, added to the total) are an external filter and score for this call, e.g.
        :class:`esched.core._devices.DeviceTable`'s exact GPU-device fit and FGD score.
        They take a node-by-node visit without the cache (``_scan_external``).

        ``rank`` (int64 per node slot) decides among equal totals before the seeded
        draw: the node with the smallest rank wins, the draw only among equal ranks (a
        fixed node order: the FGD paper's artifact breaks ties by the smallest node name
        over seeded-random name prefixes; or a secondary key such as free GPU).
        """
        cdef Py_ssize_t cid = self._class_of(pod), n
        self._ensure_synced()
        cdef Py_ssize_t lset = self._lset_of(pod)
        cdef ClassView v
        cdef score_t best
        cdef long long visited
        self._view(cid, &v, lset)
        if mask is not None:
            if mask.shape[0] < self.n_nodes:
                raise ValueError(f"mask has {mask.shape[0]} entries for {self.n_nodes} nodes")
            self.ext_mask = &mask[0] if mask.shape[0] > 0 else NULL
        if extra is not None:
            if extra.shape[0] < self.n_nodes:
                raise ValueError(f"extra has {extra.shape[0]} entries for {self.n_nodes} nodes")
            self.ext_score = &extra[0] if extra.shape[0] > 0 else NULL
        if rank is not None:
            if rank.shape[0] < self.n_nodes:
                raise ValueError(f"rank has {rank.shape[0]} entries for {self.n_nodes} nodes")
            self.ext_rank = &rank[0] if rank.shape[0] > 0 else NULL
        try:
            n = self._place(cid, &v, &best, &visited)
        finally:
            self.ext_mask = NULL
            self.ext_score = NULL
            self.ext_rank = NULL
        self.visited += visited
        if n < 0:
            self.unschedulable += 1
            return None
        self.placed += 1
        if assume:
            self._assume(cid, n, 1, lset)
        return self.state.node_names[n], int(best)

    def place_classes(self, class_ids) -> np.ndarray:
        """Place a batch of class ids in order, assuming each; node slot per pod or -1.

        The fast path for batches and benchmarks: one Python call, a C loop.
        """
        self._ensure_synced()
        cdef int32_t[::1] cids = np.ascontiguousarray(class_ids, dtype=np.int32)
        out_np = np.full(cids.shape[0], -1, dtype=np.int32)
        cdef int32_t[::1] out = out_np
        cdef Py_ssize_t i, n, cid, last = -1
        cdef ClassView v
        cdef score_t best
        cdef long long visited
        for i in range(cids.shape[0]):
            cid = cids[i]
            if cid != last:
                self._view(cid, &v)
                last = cid
            n = self._place(cid, &v, &best, &visited)
            self.visited += visited
            if n < 0:
                self.unschedulable += 1
                continue
            self.placed += 1
            self._assume(cid, n, 1)
            out[i] = <int32_t>n
        return out_np

    def assume_claims(self, pods, nodes, victims=None) -> int:
        """Add claims not yet in the state to this view (kube-scheduler's assume cache).

        ``pods[i]`` (pod slots) is assumed bound to ``nodes[i]`` (node slots) with its
        class's requests; each of ``victims`` (pod slots) still running is assumed
        evicted and is not offered as a victim again. A replica calls this after
        :meth:`sync` with the claims of its proposals still undecided, so the next
        batch is placed as if they were committed. Until the next :meth:`sync`.
        Returns the number of bindings assumed (slots out of range are skipped).
        """
        cdef ClusterState st = self.state
        self._ensure_synced()
        cdef int64_t[::1] ps = np.ascontiguousarray(pods, dtype=np.int64)
        cdef int64_t[::1] ns = np.ascontiguousarray(nodes, dtype=np.int64)
        if ps.shape[0] != ns.shape[0]:
            raise ValueError("pods and nodes differ in length")
        cdef Py_ssize_t i, p, n, done = 0
        for i in range(ps.shape[0]):
            p = ps[i]
            n = ns[i]
            if p < 0 or p >= st.n_pods or n < 0 or n >= self.n_nodes:
                continue
            self._assume(st.pod_class[p], n, 1, st.interpod.pod_lset_of(p))
            done += 1
        cdef int64_t[::1] vs
        if victims is not None and len(victims):
            vs = np.ascontiguousarray(victims, dtype=np.int64)
            if self.evicted_np is None or self.evicted_np.shape[0] < st.n_pods:
                grown = np.zeros(st.n_pods, dtype=bool)
                if self.evicted_np is not None:
                    grown[: self.evicted_np.shape[0]] = self.evicted_np
                self.evicted_np = grown
            for i in range(vs.shape[0]):
                p = vs[i]
                if p < 0 or p >= st.n_pods or self.evicted_np[p] \
                        or st.pod_phase[p] != PHASE_RUNNING:
                    continue
                self._unassume_pod(p)
                self.evicted_np[p] = True
        return done

    # ------------------------------------------------------------------ validation

    def binding_reasons(self, Py_ssize_t p, Py_ssize_t n) -> int:
        """Reason bits (0: it fits) of pod slot ``p``'s class on node slot ``n`` in this
        view, every reason (resources and constraints). The commit service's validator
        checks a binding with it on its overlay (state + the batch's accepted bindings,
        assumed with :meth:`assume_binding`); :meth:`reason_texts` words the bits."""
        cdef ClusterState st = self.state
        self._ensure_synced()
        if p < 0 or p >= st.n_pods or n < 0 or n >= self.n_nodes:
            raise IndexError("pod or node slot out of range")
        cdef ClassView v
        self._view(st.pod_class[p], &v, st.interpod.pod_lset_of(p))
        return reason_bits(&v, n, True)

    def reason_texts(self, Py_ssize_t p, Py_ssize_t n, uint64_t reasons) -> list[str]:
        """kube-style texts of :meth:`binding_reasons`' bits, as :meth:`fits` gives
        (:func:`esched.core._explain.reason_texts`)."""
        from esched.core._explain import reason_texts

        return reason_texts(self, p, n, reasons)

    def assume_binding(self, Py_ssize_t p, Py_ssize_t n, int sign=1) -> None:
        """Add (``sign`` 1) or take back (-1) pod slot ``p``'s class requests on node
        slot ``n`` in this view (until the next :meth:`sync`)."""
        cdef ClusterState st = self.state
        if p < 0 or p >= st.n_pods or n < 0 or n >= self.n_nodes:
            raise IndexError("pod or node slot out of range")
        self._assume(st.pod_class[p], n, sign, st.interpod.pod_lset_of(p))

    def assume_evicted(self, Py_ssize_t p, int sign=1) -> None:
        """Take running pod slot ``p``'s allocation out of this view (``sign`` 1: an
        assumed eviction) or put it back (-1)."""
        if p < 0 or p >= self.state.n_pods:
            raise IndexError("pod slot out of range")
        self._pod_view(p, -sign)

    def place_batch(self, pods) -> list[tuple[str, int] | None]:
        """Place many pods in order, each seeing the ones before it (assumed)."""
        return [self.place(p) for p in pods]

    # The gang, preemption and reservation planners work on this view; they live in
    # their own modules (which cimport Placer): these methods delegate.

    def plan_gang(self, pods, min_member: int | None = None,
                  devices=None) -> list[str] | None:
        """All-or-nothing plan for a gang on this view
        (:func:`esched.core._gang_plan.plan_gang`); a failure's report is left in
        :attr:`gang_failure`."""
        global _plan_gang
        if _plan_gang is None:  # imported once: a one-pod gang is planned per pod
            from esched.core._gang_plan import plan_gang
            _plan_gang = plan_gang
        return _plan_gang(self, pods, min_member, devices)

    def gang_message(self, report: dict | None = None) -> str:
        """The operator's one-line reason of the last failed :meth:`plan_gang` (or of
        ``report``): ``7/10 members fit; short of nvidia.com/gpu: 3``."""
        from esched.core._gang_plan import gang_message

        return gang_message(report if report is not None else self.gang_failure)

    def class_bands(self, bands=None) -> np.ndarray:
        """``uint8[class]``: the Borg band of every equivalence class under ``bands``
        (:func:`esched.core._preempt.class_bands`)."""
        from esched.core._preempt import class_bands

        return class_bands(self, bands)

    def plan_preemption(self, pod, bands=None, bint assume=True) -> dict | None:
        """Where ``pod`` fits by evicting pods of lower bands, and whom, or None
        (:func:`esched.core._preempt.plan_preemption`)."""
        from esched.core._preempt import plan_preemption

        return plan_preemption(self, pod, bands, assume)

    def plan_gang_preempting(self, pods, min_member: int | None = None, bands=None
                             ) -> dict | None:
        """:meth:`plan_gang`, letting members that do not fit preempt, all or nothing
        (:func:`esched.core._preempt.plan_gang_preempting`)."""
        from esched.core._preempt import plan_gang_preempting

        return plan_gang_preempting(self, pods, min_member, bands)

    def reservation_nodes(self, pods, long long need) -> list[str]:
        """Nodes to reserve for a gang that does not fit now
        (:func:`esched.core._reserve.reservation_nodes`)."""
        from esched.core._reserve import reservation_nodes

        return reservation_nodes(self, pods, need)

    cdef void _unassume_pod(self, Py_ssize_t p) noexcept:
        # A running pod leaves this placer's view (an assumed eviction).
        self._pod_view(p, -1)

    cdef void _pod_view(self, Py_ssize_t p, int sign) noexcept:
        # Add (sign 1) or remove (-1) a running pod's allocation in this placer's view.
        cdef ClusterState st = self.state
        cdef Py_ssize_t r, n = st.pod_node[p], c = st.pod_class[p]
        if n < 0 or n >= self.n_nodes:
            return
        for r in range(self.n_res):
            self.used[n, r] += sign * st.pod_alloc[p, r]
            self.flim[n, r] += sign * st.class_lim[c, r]
            self.frsv[n, r] += sign * st.pod_resv[p, r]
        self._fit_node(n)
        self.nzu[n, 0] += sign * st.class_nz[c, 0]
        self.nzu[n, 1] += sign * st.class_nz[c, 1]
        if st.class_flags[c] & CLASS_HOST_PORTS:
            self._ports_assume(n, c, sign)
        if st.interpod.active or st.class_flags[c] & CLASS_INTERPOD:
            topology_assume(self, c, n, sign, st.interpod.pod_lset_of(p))
        self._soa_used(n)
        self._touch(n)
        self.sver[n] = -2

    def explain(self, pod) -> dict:
        """Every alive node: feasible or not with reasons, each plugin's score, total
        (:func:`esched.core._explain.explain`)."""
        from esched.core._explain import explain

        return explain(self, pod)

    def scores(self, pod, node: str) -> dict[str, int]:
        """Each plugin's score of ``pod`` on ``node``, feasible or not
        (:func:`esched.core._explain.scores`)."""
        from esched.core._explain import scores

        return scores(self, pod, node)

    def fits(self, pod, node: str) -> list[str]:
        """Reasons ``pod`` does not fit ``node`` now, empty if it fits
        (:func:`esched.core._explain.fits`)."""
        from esched.core._explain import fits

        return fits(self, pod, node)

    def stats(self) -> dict:
        """Counters: placed, unschedulable, nodes visited, cache hits/misses and hit rate,
        rows given up and taken again (:func:`esched.core._explain.stats`)."""
        from esched.core._explain import stats

        return stats(self)

    def used_array(self):
        """This placer's view of allocation (state + assumptions), [node, resource]."""
        return self.used_np
