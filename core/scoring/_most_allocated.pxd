# MostAllocated (NodeResourcesFit strategy): best fit, packs load.
# kube-scheduler v1.30 most_allocated.go, integer arithmetic as there.
from esched.core._types cimport score_t, units_t
from esched.core.scoring._plugin cimport (
    WeightedSum,
    floor_div,
    node_share,
    node_share_inv,
    weighted_mean,
    weighted_sum_start,
)


cdef inline score_t most_requested_score(units_t requested, units_t capacity) noexcept nogil:
    if capacity == 0:
        return 0
    if requested > capacity:
        # Pods without requests get the non-zero defaults, so requested may exceed capacity.
        requested = capacity
    return node_share(requested, capacity)


cdef inline void most_allocated_add(WeightedSum* a, units_t requested, units_t allocatable,
                                    units_t weight) noexcept nogil:
    """One resource of most_allocated (allocatable 0 skips): the form that callers
    reading a node's row directly use (_gather.pxd plugin_fold), no vectors to build."""
    if allocatable == 0:
        return
    a.node_score += most_requested_score(requested, allocatable) * weight
    a.weight_sum += weight


cdef inline score_t most_allocated(const units_t* requested, const units_t* allocatable,
                                   const units_t* weight, int n) noexcept nogil:
    """Weighted mean of requested * 100 / capacity (capped); allocatable 0 skips."""
    cdef WeightedSum a
    cdef int i
    weighted_sum_start(&a)
    for i in range(n):
        most_allocated_add(&a, requested[i], allocatable[i], weight[i])
    return weighted_mean(&a)


cdef inline score_t most_allocated_inv(const units_t* requested, const units_t* allocatable,
                                       const double* inv, const units_t* weight,
                                       int n) noexcept nogil:
    """most_allocated with the per-resource divisions by capacity done through the
    reciprocals ``inv`` (1.0 / allocatable): the same integers, bit for bit."""
    cdef score_t node_score = 0, weight_sum = 0
    cdef int i
    for i in range(n):
        if allocatable[i] == 0:
            continue
        node_score += node_share_inv(requested[i] if requested[i] < allocatable[i]
                                     else allocatable[i], allocatable[i], inv[i]) * weight[i]
        weight_sum += weight[i]
    if weight_sum == 0:
        return 0
    return floor_div(node_score, weight_sum)
