# The kernel table: plugin kind -> the function that scores it, one signature for all
# (score_fn over a ScoreInput). The placer resolves each profile plugin here once
# (PluginSpec.fn; score_inv: the kernel's reciprocal variant where it has one, for
# callers that keep 1 / allocatable per node); the formulas live only in the kernels'
# own files.
from esched.core._types cimport score_t
from esched.core.scoring._balanced_allocation cimport (
    balanced_allocation,
    balanced_allocation_inv,
)
from esched.core.scoring._epvm cimport epvm
from esched.core.scoring._inter_pod_affinity cimport inter_pod_affinity
from esched.core.scoring._least_allocated cimport (
    least_allocated,
    least_allocated_inv,
)
from esched.core.scoring._mixed cimport mixed
from esched.core.scoring._most_allocated cimport (
    most_allocated,
    most_allocated_inv,
)
from esched.core.scoring._node_affinity cimport node_affinity
from esched.core.scoring._node_group_affinity cimport node_group_affinity
from esched.core.scoring._paper_best_fit cimport paper_best_fit
from esched.core.scoring._pod_topology_spread cimport pod_topology_spread
from esched.core.scoring._plugin cimport (
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
    PLUGIN_REQUESTED_TO_CAPACITY_RATIO,
    PLUGIN_TAINT_TOLERATION,
    PLUGIN_USAGE,
    PluginSpec,
    ScoreInput,
    score_fn,
)
from esched.core.scoring._requested_to_capacity_ratio cimport requested_to_capacity_ratio
from esched.core.scoring._taint_toleration cimport taint_toleration
from esched.core.scoring._usage cimport usage_score


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


cdef inline score_t _paper_best_fit(const PluginSpec* s, const ScoreInput* x) noexcept nogil:
    return paper_best_fit(x.requested, x.allocatable, s.res_weight, s.max_spec, s.n_res)


cdef inline score_t _node_affinity(const PluginSpec* s, const ScoreInput* x) noexcept nogil:
    return node_affinity(x.raw, x.raw_max)


cdef inline score_t _taint_toleration(const PluginSpec* s, const ScoreInput* x) noexcept nogil:
    return taint_toleration(x.raw, x.raw_max)


cdef inline score_t _inter_pod_affinity(const PluginSpec* s, const ScoreInput* x) noexcept nogil:
    return inter_pod_affinity(x.raw, x.raw_min, x.raw_max)


cdef inline score_t _pod_topology_spread(const PluginSpec* s, const ScoreInput* x) noexcept nogil:
    return pod_topology_spread(x.raw, x.raw_min, x.raw_max)


cdef inline score_t _usage(const PluginSpec* s, const ScoreInput* x) noexcept nogil:
    return usage_score(x.usage, s.col, x.allocatable, s.res_weight, s.n_res)


cdef inline bint normalized(int kind) noexcept nogil:
    """Kind is normalized over the scored nodes (kube's NormalizeScore): its score of a
    node needs ScoreInput.raw_max (and raw_min), the largest (smallest) raw score of the
    nodes being scored."""
    return (kind == PLUGIN_NODE_AFFINITY or kind == PLUGIN_TAINT_TOLERATION
            or kind == PLUGIN_INTER_POD_AFFINITY or kind == PLUGIN_POD_TOPOLOGY_SPREAD)


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
    if kind == PLUGIN_PAPER_BEST_FIT:
        return _paper_best_fit
    if kind == PLUGIN_NODE_AFFINITY:
        return _node_affinity
    if kind == PLUGIN_TAINT_TOLERATION:
        return _taint_toleration
    if kind == PLUGIN_INTER_POD_AFFINITY:
        return _inter_pod_affinity
    if kind == PLUGIN_POD_TOPOLOGY_SPREAD:
        return _pod_topology_spread
    if kind == PLUGIN_USAGE:
        return _usage
    return score_nothing


cdef inline score_t score(const PluginSpec* s, const ScoreInput* x) noexcept nogil:
    """Plugin s's score from gathered vectors: its kernel (s.fn). The hot kinds are
    usually scored through their per-resource form instead (_gather.pxd plugin_fold)."""
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


cdef inline score_t normalized_score(int kind, long long raw, long long raw_min,
                                     long long raw_max) noexcept nogil:
    """A normalized kind's score of a node from its raw score and the extremes over the
    scored nodes: its kernel (the one PluginSpec.fn calls), by a branch on the kind, so
    it inlines into the caller's node loop (the normalized scan)."""
    if kind == PLUGIN_INTER_POD_AFFINITY:
        return inter_pod_affinity(raw, raw_min, raw_max)
    if kind == PLUGIN_POD_TOPOLOGY_SPREAD:
        return pod_topology_spread(raw, raw_min, raw_max)
    if kind == PLUGIN_NODE_AFFINITY:
        return node_affinity(raw, raw_max)
    if kind == PLUGIN_TAINT_TOLERATION:
        return taint_toleration(raw, raw_max)
    return 0


cdef inline bint folds(int kind) noexcept nogil:
    """Kind has a per-resource form (its kernel's *_add, then weighted_mean or
    balanced_allocation_end): a caller reading a node's row adds each scored resource
    as it reads it (_gather.pxd plugin_fold), no argument vectors and no call."""
    return (kind == PLUGIN_MOST_ALLOCATED or kind == PLUGIN_LEAST_ALLOCATED
            or kind == PLUGIN_BALANCED_ALLOCATION)
