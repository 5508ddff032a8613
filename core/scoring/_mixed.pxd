# Mixed: Borg's hybrid of best and worst fit, chosen per priority band.
#
# Borg (Verma et al., EuroSys 2015, section 3.2) found worst fit spreads work so thinly
# that large tasks cannot land, and best fit packs so tightly that bursts of production
# work have no room; its hybrid "tries to reduce the amount of stranded resources". Here:
#
#   band  = production if priority >= prod_priority else batch / best-effort
#   base  = LeastAllocated(requested, allocatable)   production: spread, keep headroom
#           MostAllocated(requested, allocatable)    other bands: pack, keep whole nodes free
#   free_r = (allocatable_r - requested_r) / allocatable_r after the placement, in [0, 1]
#   strand = max_r free_r - min_r free_r   if min_r free_r < exhaust (one resource is
#            nearly used up while another is still free: what is left of the others is
#            stranded, no pod can use it), else 0
#   score = base - base * strand * strand_weight      (integers: per-mille parameters)
#
# With the defaults (exhaust 50 = 5%, strand_weight 1000 = 100%) a placement that fills
# CPU while leaving 80% of memory free loses 80% of its score.
from esched.core._types cimport score_t, units_t
from esched.core.scoring._least_allocated cimport least_allocated
from esched.core.scoring._most_allocated cimport most_allocated


cdef inline score_t mixed(const units_t* requested, const units_t* allocatable,
                          const units_t* weight, int n, bint production,
                          long long exhaust_permille, long long strand_permille) noexcept nogil:
    cdef score_t base
    cdef long long free_pm, lo = 1000, hi = 0, strand
    cdef int i, k = 0
    if production:
        base = least_allocated(requested, allocatable, weight, n)
    else:
        base = most_allocated(requested, allocatable, weight, n)
    for i in range(n):
        if allocatable[i] == 0:
            continue
        if requested[i] >= allocatable[i]:
            free_pm = 0
        else:
            free_pm = (allocatable[i] - requested[i]) * 1000 // allocatable[i]
        if free_pm < lo:
            lo = free_pm
        if free_pm > hi:
            hi = free_pm
        k += 1
    if k < 2 or lo >= exhaust_permille:
        return base
    strand = hi - lo
    return base - base * strand * strand_permille // 1000000
