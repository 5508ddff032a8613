# Usage (esched's; Volcano's ``usage`` plugin, pkg/scheduler/plugins/usage/usage.go):
# scores a node by its measured load, not its requests. Volcano's nodeOrderFn is the
# weighted mean of (100 - usage%) over cpu and memory (CalcNodeScore in estimator.go),
# i.e. LeastAllocated with the node's reported usage in place of its requests; its
# predicateFn filters a node whose usage% of a resource is above that resource's
# threshold (``>``: at the threshold the node still passes). A node without a fresh
# report (ClusterState.node_usage: none, or older than the fold's usage_max_age) scores 0
# and is never filtered, as Volcano treats metrics older than MetricsActiveTime.
from esched.core._types cimport score_t, units_t
from esched.core.scoring._least_allocated cimport least_requested_score
from esched.core.scoring._plugin cimport WeightedSum, weighted_mean, weighted_sum_start


cdef inline score_t usage_score(const units_t* usage, const Py_ssize_t* col,
                                const units_t* allocatable, const units_t* weight,
                                int n) noexcept nogil:
    """Weighted mean of (allocatable - usage) * 100 / allocatable over the plugin's
    resources; ``usage`` the node's reported row (state columns ``col``), NULL when it
    has no fresh report (0). Allocatable 0 skips a resource, as in least_allocated."""
    cdef WeightedSum a
    cdef int i
    if usage == NULL:
        return 0
    weighted_sum_start(&a)
    for i in range(n):
        if allocatable[i] == 0:
            continue
        a.node_score += least_requested_score(usage[col[i]], allocatable[i]) * weight[i]
        a.weight_sum += weight[i]
    return weighted_mean(&a)


cdef inline bint usage_over(units_t usage, units_t allocatable, long long percent) noexcept nogil:
    """Usage is above ``percent`` of allocatable (Volcano: usage% > threshold), exactly
    in integers; percent < 0: no threshold on this resource."""
    if percent < 0:
        return False
    return usage * 100 > allocatable * percent
