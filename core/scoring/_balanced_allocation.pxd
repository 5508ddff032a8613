# BalancedAllocation (NodeResourcesBalancedAllocation): favours nodes whose resource
# fractions stay equal. kube-scheduler v1.30 balanced_allocation.go: the standard
# deviation of the requested/allocatable fractions (capped at 1); two resources use
# |f1 - f2| / 2; score = int64((1 - std) * MaxNodeScore). Uses *requested* (not the
# non-zero defaults) since kube 1.26 (useRequested: true).
from libc.math cimport fabs, sqrt

from esched.core._types cimport score_t, units_t
from esched.core.scoring._plugin cimport MAX_NODE_SCORE, MAX_PLUGIN_RES


cdef inline score_t balanced_allocation(const units_t* requested, const units_t* allocatable,
                                        int n) noexcept nogil:
    cdef double fractions[MAX_PLUGIN_RES]
    cdef double total = 0.0, f, mean, acc, std = 0.0
    cdef int i, k = 0
    for i in range(n):
        if allocatable[i] == 0:
            continue
        f = <double>requested[i] / <double>allocatable[i]
        if f > 1.0:
            f = 1.0
        total += f
        fractions[k] = f
        k += 1
    if k == 2:
        std = fabs((fractions[0] - fractions[1]) / 2.0)
    elif k > 2:
        mean = total / k
        acc = 0.0
        for i in range(k):
            acc = acc + (fractions[i] - mean) * (fractions[i] - mean)
        std = sqrt(acc / k)
    return <score_t>((1.0 - std) * <double>MAX_NODE_SCORE)
