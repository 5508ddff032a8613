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


cdef inline score_t balanced_allocation_inv(const units_t* requested, const units_t* allocatable,
                                            const double* inv, int n) noexcept nogil:
    """balanced_allocation from the reciprocals ``inv`` (1.0 / allocatable): the same
    integers, bit for bit.

    kube's fractions are the IEEE quotients x / a; x * (1 / a) may differ in the last
    bit, which moves the score only when (1 - std) * 100 lies within ~1e-13 of an
    integer. So: two scored resources (|f1 - f2| / 2, linear in the error) from the
    products, and the exact quotients when the result is within 1e-9 of an integer
    (std 0, nice ratios); anything else (a zero capacity, or more resources: a square
    root amplifies the error) the exact kernel.
    """
    cdef double f0, f1, y
    cdef score_t t
    if n != 2 or allocatable[0] == 0 or allocatable[1] == 0:
        return balanced_allocation(requested, allocatable, n)
    f0 = <double>requested[0] * inv[0]
    f1 = <double>requested[1] * inv[1]
    if f0 > 1.0:
        f0 = 1.0
    if f1 > 1.0:
        f1 = 1.0
    y = (1.0 - fabs((f0 - f1) / 2.0)) * <double>MAX_NODE_SCORE
    t = <score_t>y
    if y - <double>t < 1e-9 or y - <double>t > 1.0 - 1e-9:
        return balanced_allocation(requested, allocatable, n)
    return t
