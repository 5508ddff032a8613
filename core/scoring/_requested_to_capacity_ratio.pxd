# RequestedToCapacityRatio (NodeResourcesFit strategy): a piecewise-linear shape of
# utilization. kube-scheduler v1.30 requested_to_capacity_ratio.go and
# helper.BuildBrokenLinearFunction, integer arithmetic and final math.Round as there.
from libc.math cimport round as c_round

from esched.core._types cimport score_t, units_t
from esched.core.scoring._plugin cimport MAX_UTILIZATION, floor_div


cdef inline score_t broken_linear(long long p, const long long* util, const long long* score,
                                  int n) noexcept nogil:
    cdef int i
    for i in range(n):
        if p <= util[i]:
            if i == 0:
                return score[0]
            return score[i - 1] + (score[i] - score[i - 1]) * (p - util[i - 1]) // (
                util[i] - util[i - 1])
    return score[n - 1]


cdef inline score_t requested_to_capacity_ratio(
        const units_t* requested, const units_t* allocatable, const units_t* weight, int n,
        const long long* util, const long long* shape_score, int n_shape) noexcept nogil:
    """Weighted mean (rounded) of shape(requested * 100 / capacity) over resources scoring > 0."""
    cdef score_t node_score = 0, weight_sum = 0, s
    cdef int i
    for i in range(n):
        if allocatable[i] == 0:
            continue
        if requested[i] > allocatable[i]:
            s = broken_linear(MAX_UTILIZATION, util, shape_score, n_shape)
        else:
            s = broken_linear(floor_div(requested[i] * MAX_UTILIZATION, allocatable[i]), util,
                              shape_score, n_shape)
        if s > 0:
            node_score += s * weight[i]
            weight_sum += weight[i]
    if weight_sum == 0:
        return 0
    return <score_t>c_round(<double>node_score / <double>weight_sum)
