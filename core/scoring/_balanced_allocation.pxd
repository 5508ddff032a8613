# BalancedAllocation (NodeResourcesBalancedAllocation): favours nodes whose resource
# fractions stay equal. kube-scheduler v1.30 balanced_allocation.go: the standard
# deviation of the requested/allocatable fractions (capped at 1); two resources use
# |f1 - f2| / 2; score = int64((1 - std) * MaxNodeScore). Uses *requested* (not the
# non-zero defaults) since kube 1.26 (useRequested: true).
from libc.math cimport fabs, sqrt

from esched.core._types cimport score_t, units_t
from esched.core.scoring._plugin cimport MAX_NODE_SCORE, MAX_PLUGIN_RES


ctypedef struct Fractions:
    # BalancedAllocation under way: the requested/allocatable fractions so far.
    double f[MAX_PLUGIN_RES]
    double total
    int k


cdef inline void fractions_start(Fractions* a) noexcept nogil:
    a.total = 0.0
    a.k = 0


cdef inline void balanced_allocation_add(Fractions* a, units_t requested,
                                         units_t allocatable) noexcept nogil:
    """One resource of balanced_allocation (allocatable 0 skips): the form that callers
    reading a node's row directly use (_gather.pxd plugin_fold)."""
    cdef double f
    if allocatable == 0:
        return
    f = <double>requested / <double>allocatable
    if f > 1.0:
        f = 1.0
    a.total += f
    a.f[a.k] = f
    a.k += 1


cdef inline score_t balanced_allocation_end(const Fractions* a) noexcept nogil:
    """The score of the fractions added: int64((1 - std) * MaxNodeScore)."""
    cdef double mean, acc, std = 0.0
    cdef int i, k = a.k
    if k == 2:
        std = fabs((a.f[0] - a.f[1]) / 2.0)
    elif k > 2:
        mean = a.total / k
        acc = 0.0
        for i in range(k):
            acc = acc + (a.f[i] - mean) * (a.f[i] - mean)
        std = sqrt(acc / k)
    return <score_t>((1.0 - std) * <double>MAX_NODE_SCORE)


cdef inline score_t balanced_allocation(const units_t* requested, const units_t* allocatable,
                                        int n) noexcept nogil:
    cdef Fractions a
    cdef int i
    fractions_start(&a)
    for i in range(n):
        balanced_allocation_add(&a, requested[i], allocatable[i])
    return balanced_allocation_end(&a)


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
