# The kernel table: plugin kind -> the function that scores it, one signature for all
# (score_fn over a ScoreInput). The placer resolves each profile plugin here once
# (PluginSpec.fn; score_inv: the kernel's reciprocal variant where it has one, for
# callers that keep 1 / allocatable per node); the formulas live only in the kernels'
# own files.
from esched.core._types cimport score_t, units_t
from esched.core.scoring._balanced_allocation cimport (
    Fractions,
    balanced_allocation,
    balanced_allocation_add,
    balanced_allocation_end,
    balanced_allocation_inv,
    fractions_start,
)
from esched.core.scoring._epvm cimport epvm
from esched.core.scoring._least_allocated cimport (
    least_allocated,
    least_allocated_add,
    least_allocated_inv,
)
from esched.core.scoring._mixed cimport mixed
from esched.core.scoring._most_allocated cimport (
    most_allocated,
    most_allocated_add,
    most_allocated_inv,
)
from esched.core.scoring._node_group_affinity cimport node_group_affinity
from esched.core.scoring._plugin cimport (
    PLUGIN_BALANCED_ALLOCATION,
    PLUGIN_EPVM,
    PLUGIN_LEAST_ALLOCATED,
    PLUGIN_MIXED,
    PLUGIN_MOST_ALLOCATED,
    PLUGIN_NODE_GROUP_AFFINITY,
    PLUGIN_REQUESTED_TO_CAPACITY_RATIO,
    PluginSpec,
    ScoreInput,
    WeightedSum,
    score_fn,
    weighted_mean,
    weighted_sum_start,
)
from esched.core.scoring._requested_to_capacity_ratio cimport requested_to_capacity_ratio


cdef inline score_t _least_allocated(const PluginSpec* s, const ScoreInput* x) noexcept nogil:
    return least_allocated(x.requested, x.allocatable, s.res_weight, s.n_res)


cdef inline score_t _most_allocated(const PluginSpec* s, const ScoreInput* x) noexcept nogil:
    return most_allocated(x.requested, x.allocatable, s.res_weight, s.n_res)


cdef inline score_t _requested_to_capacity_ratio(const PluginSpec* s,
                                                 const ScoreInput* x) noexcept nogil:
    return requested_to_capacity_ratio(x.requested, x.allocatable, s.res_weight, s.n_res,
                                       s.shape_util, s.shape_score, s.n_shape)


cdef inline score_t _balanced_allocation(const PluginSpec* s, const ScoreInput* x) noexcept nogil:
    return balanced_allocation(x.requested, x.allocatable, s.n_res)


cdef inline score_t _epvm(const PluginSpec* s, const ScoreInput* x) noexcept nogil:
    return epvm(x.used, x.pod, x.allocatable, s.res_weight, s.n_res, s.epvm_base)


cdef inline score_t _mixed(const PluginSpec* s, const ScoreInput* x) noexcept nogil:
    return mixed(x.requested, x.allocatable, s.res_weight, s.n_res,
                 x.priority >= s.prod_priority, s.exhaust_permille, s.strand_permille)


cdef inline score_t _node_group_affinity(const PluginSpec* s, const ScoreInput* x) noexcept nogil:
    return node_group_affinity(x.labels, x.pref, x.label_words)


cdef inline score_t score_nothing(const PluginSpec* s, const ScoreInput* x) noexcept nogil:
    # Plugins scored outside the C table (Python plugins, with the GIL): 0 here.
    return 0


cdef inline score_fn kernel_of(int kind) noexcept nogil:
    """The scoring function of a plugin kind (score_nothing for the others)."""
    if kind == PLUGIN_LEAST_ALLOCATED:
        return _least_allocated
    if kind == PLUGIN_MOST_ALLOCATED:
        return _most_allocated
    if kind == PLUGIN_REQUESTED_TO_CAPACITY_RATIO:
        return _requested_to_capacity_ratio
    if kind == PLUGIN_BALANCED_ALLOCATION:
        return _balanced_allocation
    if kind == PLUGIN_EPVM:
        return _epvm
    if kind == PLUGIN_MIXED:
        return _mixed
    if kind == PLUGIN_NODE_GROUP_AFFINITY:
        return _node_group_affinity
    return score_nothing


cdef inline score_t score(const PluginSpec* s, const ScoreInput* x) noexcept nogil:
    """Plugin s's score from gathered vectors: its kernel (s.fn). The hot kinds are
    usually scored through their per-resource form instead (fold_add below)."""
    return s.fn(s, x)


cdef inline score_t score_inv(const PluginSpec* s, const ScoreInput* x) noexcept nogil:
    """Plugin s's score from ScoreInput.inv: its kernel's reciprocal variant where it has
    one (the same scores, no division in the common case), else its kernel (s.fn).

    A branch on the kind rather than a pointer, so the variants inline into the caller
    (the cache's few-stale rescoring: one node at a time, where a call costs)."""
    if s.kind == PLUGIN_LEAST_ALLOCATED:
        return least_allocated_inv(x.requested, x.allocatable, x.inv, s.res_weight, s.n_res)
    if s.kind == PLUGIN_BALANCED_ALLOCATION:
        return balanced_allocation_inv(x.requested, x.allocatable, x.inv, s.n_res)
    if s.kind == PLUGIN_MOST_ALLOCATED:
        return most_allocated_inv(x.requested, x.allocatable, x.inv, s.res_weight, s.n_res)
    return s.fn(s, x)


# The per-resource form: for the kinds whose kernels fold one resource at a time (the
# hot ones), a caller reading a node's row adds each scored resource as it reads it
# (fold_add) and takes the score at the end (fold_end): no argument vectors, no call.
# The formulas stay in the kernels' files (*_add, weighted_mean, balanced_allocation_end).
ctypedef struct KernelAcc:
    WeightedSum w        # LeastAllocated, MostAllocated
    Fractions f          # BalancedAllocation


cdef inline bint folds(int kind) noexcept nogil:
    """Kind has the per-resource form (fold_add / fold_end)."""
    return (kind == PLUGIN_MOST_ALLOCATED or kind == PLUGIN_LEAST_ALLOCATED
            or kind == PLUGIN_BALANCED_ALLOCATION)


cdef inline void fold_start(const PluginSpec* s, KernelAcc* a) noexcept nogil:
    if s.kind == PLUGIN_BALANCED_ALLOCATION:
        fractions_start(&a.f)
    else:
        weighted_sum_start(&a.w)


cdef inline void fold_add(const PluginSpec* s, KernelAcc* a, int i, units_t requested,
                          units_t allocatable) noexcept nogil:
    """Resource i of plugin s (a folds() kind) on one node; allocatable 0 skips."""
    if s.kind == PLUGIN_MOST_ALLOCATED:
        most_allocated_add(&a.w, requested, allocatable, s.res_weight[i])
    elif s.kind == PLUGIN_LEAST_ALLOCATED:
        least_allocated_add(&a.w, requested, allocatable, s.res_weight[i])
    else:
        balanced_allocation_add(&a.f, requested, allocatable)


cdef inline score_t fold_end(const PluginSpec* s, const KernelAcc* a) noexcept nogil:
    """Plugin s's score of the resources added: its kernel's, bit for bit."""
    if s.kind == PLUGIN_BALANCED_ALLOCATION:
        return balanced_allocation_end(&a.f)
    return weighted_mean(&a.w)
