# One node's score through the profile's kernel table: each plugin's kube (requested,
# allocatable) pairs read from the placer's tables (a ClassView) -- straight into the
# kernel's per-resource form for the hot kinds (plugin_fold), else gathered into vectors
# for its kernel (PluginSpec.fn, _table.pxd) -- summed with the weights. Every scalar
# score of the placer (scan, block fallback, explain, scores) is this.
from esched.core._classview cimport SRC_SKIP, SRC_USED, ClassView
from esched.core._types cimport score_t, units_t
from esched.core.scoring._balanced_allocation cimport (
    Fractions,
    balanced_allocation_add,
    balanced_allocation_end,
    fractions_start,
)
from esched.core.scoring._inter_pod_affinity cimport ip_weight
from esched.core.scoring._least_allocated cimport least_allocated_add
from esched.core.scoring._most_allocated cimport most_allocated_add
from esched.core.scoring._node_affinity cimport preferred_weight
from esched.core.scoring._pod_topology_spread cimport spread_raw
from esched.core.scoring._plugin cimport (
    MAX_PLUGIN_RES,
    PLUGIN_BALANCED_ALLOCATION,
    PLUGIN_INTER_POD_AFFINITY,
    PLUGIN_MOST_ALLOCATED,
    PLUGIN_NODE_AFFINITY,
    PLUGIN_POD_TOPOLOGY_SPREAD,
    PLUGIN_TAINT_TOLERATION,
    PLUGIN_USAGE,
    PluginSpec,
    ScoreInput,
    WeightedSum,
    weighted_mean,
    weighted_sum_start,
)
from esched.core.scoring._table cimport folds, normalized, score, score_inv
from esched.core.scoring._taint_toleration cimport intolerable_prefer


cdef inline long long plugin_raw(int kind, const ClassView* v, Py_ssize_t n) noexcept nogil:
    """A normalized plugin's raw score of node n (kube's Score, before NormalizeScore):
    the weight of the preferred terms it matches, its intolerable PreferNoSchedule taints,
    its domains' inter-pod weights, its soft spread counts."""
    if kind == PLUGIN_NODE_AFFINITY:
        return preferred_weight(v, n)
    if kind == PLUGIN_TAINT_TOLERATION:
        return intolerable_prefer(v, n)
    if kind == PLUGIN_INTER_POD_AFFINITY:
        return ip_weight(v, n)
    if kind == PLUGIN_POD_TOPOLOGY_SPREAD:
        return spread_raw(v, n)  # -1: a node lacking a key (scores 0)
    return 0


cdef inline units_t gather_one(const PluginSpec* s, int k, const ClassView* v, Py_ssize_t n,
                               int i, units_t* used) noexcept nogil:
    """Resource i of plugin k on node n: its allocatable (0: not scored) and, in
    ``used``, the node's side before the pod (0 when not scored)."""
    cdef int src = v.src[k][i]
    cdef Py_ssize_t col
    if src == SRC_SKIP:
        used[0] = 0
        return 0
    col = s.col[i]
    if src == SRC_USED:
        used[0] = v.used[n * v.n_res + col]
    else:
        used[0] = v.nzu[n * 2 + src - 1]
    return v.alloc[n * v.alloc_stride + col]


cdef inline void gather(const PluginSpec* s, int k, const ClassView* v, Py_ssize_t n,
                        ScoreInput* x, units_t* requested, units_t* allocatable,
                        units_t* used) noexcept nogil:
    """Fill ``x`` for plugin k on node n: kube's (requested, allocatable) vectors over
    the plugin's resources from the placer's tables (into the caller's arrays of
    MAX_PLUGIN_RES), the pod's side, its priority and the node's labels."""
    cdef int i
    for i in range(s.n_res):
        allocatable[i] = gather_one(s, k, v, n, i, &used[i])
        requested[i] = used[i] + v.pod_req[k][i] if v.src[k][i] != SRC_SKIP else 0
    x.used = used
    x.pod = v.pod_req[k]
    x.requested = requested
    x.allocatable = allocatable
    x.priority = v.priority
    x.labels = v.label_bits + n * v.label_words
    x.pref = v.pref_mask if v.has_pref else NULL
    x.label_words = v.label_words
    x.inv = NULL
    x.usage = NULL
    if s.kind == PLUGIN_USAGE and v.measured != NULL and v.measured[n]:
        x.usage = v.usage + n * v.n_res
    if normalized(s.kind):
        x.raw = plugin_raw(s.kind, v, n)
        x.raw_max = v.raw_max[k]
        x.raw_min = v.raw_min[k]


cdef inline score_t plugin_kernel_gathered(const PluginSpec* s, int k, const ClassView* v,
                                           Py_ssize_t n) noexcept nogil:
    """Plugin k's score of node n: its vectors gathered from the placer's tables, then
    its kernel (_table.pxd score)."""
    cdef units_t requested[MAX_PLUGIN_RES]
    cdef units_t allocatable[MAX_PLUGIN_RES]
    cdef units_t used[MAX_PLUGIN_RES]
    cdef ScoreInput x
    gather(s, k, v, n, &x, requested, allocatable, used)
    return score(s, &x)


cdef inline score_t plugin_fold(const PluginSpec* s, int k, const ClassView* v,
                                Py_ssize_t n) noexcept nogil:
    """Plugin k's score of node n for a kind with the per-resource form (_table.pxd
    folds): the node's row read resource by resource into its kernel's *_add (which
    skip allocatable 0: resources not scored), no vectors; one loop per kind."""
    cdef WeightedSum w
    cdef Fractions f
    cdef units_t used, allocatable
    cdef int i
    if s.kind == PLUGIN_BALANCED_ALLOCATION:
        fractions_start(&f)
        for i in range(s.n_res):
            allocatable = gather_one(s, k, v, n, i, &used)
            balanced_allocation_add(&f, used + v.pod_req[k][i], allocatable)
        return balanced_allocation_end(&f)
    weighted_sum_start(&w)
    if s.kind == PLUGIN_MOST_ALLOCATED:
        for i in range(s.n_res):
            allocatable = gather_one(s, k, v, n, i, &used)
            most_allocated_add(&w, used + v.pod_req[k][i], allocatable, s.res_weight[i])
    else:
        for i in range(s.n_res):
            allocatable = gather_one(s, k, v, n, i, &used)
            least_allocated_add(&w, used + v.pod_req[k][i], allocatable, s.res_weight[i])
    return weighted_mean(&w)


cdef inline score_t plugin_kernel(const PluginSpec* s, int k, const ClassView* v,
                                  Py_ssize_t n) noexcept nogil:
    """Plugin k's score of node n: plugin_fold where the kind has the per-resource form,
    else its vectors gathered and its kernel (plugin_kernel_gathered)."""
    if folds(s.kind):
        return plugin_fold(s, k, v, n)
    return plugin_kernel_gathered(s, k, v, n)


cdef inline score_t plugin_kernel_inv(const PluginSpec* s, int k, const ClassView* v,
                                      Py_ssize_t n, const double* inv) noexcept nogil:
    """plugin_kernel through the kernel's reciprocal variant (_table.pxd score_inv),
    ``inv`` the 1.0 / allocatable of each of the plugin's resources (0 where it is 0):
    the same score."""
    cdef units_t requested[MAX_PLUGIN_RES]
    cdef units_t allocatable[MAX_PLUGIN_RES]
    cdef units_t used[MAX_PLUGIN_RES]
    cdef ScoreInput x
    gather(s, k, v, n, &x, requested, allocatable, used)
    x.inv = inv
    return score_inv(s, &x)


cdef inline score_t kernel_total(const PluginSpec* specs, int n_specs, const ClassView* v,
                                 Py_ssize_t n) noexcept nogil:
    """Weighted sum of the profile's kernel scores of node n (Python plugins excluded)."""
    cdef score_t total = 0
    cdef int j, k
    for j in range(v.n_active):
        k = v.active[j]
        # (plugin_kernel written out: the hot kinds' loop inlines into the caller's)
        if folds(specs[k].kind):
            total += specs[k].weight * plugin_fold(&specs[k], k, v, n)
        else:
            total += specs[k].weight * plugin_kernel_gathered(&specs[k], k, v, n)
    return total


cdef inline score_t kernel_total_inv(const PluginSpec* specs, int n_specs, const ClassView* v,
                                     Py_ssize_t n, const double* inv) noexcept nogil:
    """kernel_total through the kernels' reciprocal variants, for profiles whose every
    active plugin scores the same resources (the fused profile: cpu, memory), ``inv``
    their 1.0 / allocatable on node n (0 where it is 0). Same total, fewer divisions."""
    cdef score_t total = 0
    cdef int j, k
    for j in range(v.n_active):
        k = v.active[j]
        total += specs[k].weight * plugin_kernel_inv(&specs[k], k, v, n, inv)
    return total
