# E-PVM (Amir, Awerbuch, Barak, Borgstrom, Keren, "An opportunity cost approach for job
# assignment in a scalable computing cluster", 2000), as Borg used it: a machine's cost
# is sum_r b**u_r over its resource utilizations u_r in [0, 1]; place where the cost
# grows least. Exponential cost makes a nearly full resource expensive, so load spreads
# across resources and machines without hand-tuned weights.
#
#   delta = sum_r w_r * (b**u'_r - b**u_r) / sum_r w_r        u' = after placing the pod
#   score = floor(MAX_NODE_SCORE * (1 - delta / (b - 1)))      delta is in [0, b - 1]
from libc.math cimport pow

from esched.core._types cimport score_t, units_t
from esched.core.scoring._plugin cimport MAX_NODE_SCORE


cdef inline score_t epvm(const units_t* used, const units_t* request, const units_t* allocatable,
                         const units_t* weight, int n, double base) noexcept nogil:
    """``used`` excludes the pod, ``request`` is the pod's; allocatable 0 skips."""
    cdef double delta = 0.0, u0, u1, wsum = 0.0
    cdef int i
    for i in range(n):
        if allocatable[i] == 0:
            continue
        u0 = <double>used[i] / <double>allocatable[i]
        u1 = <double>(used[i] + request[i]) / <double>allocatable[i]
        if u0 > 1.0:
            u0 = 1.0
        if u1 > 1.0:
            u1 = 1.0
        delta += weight[i] * (pow(base, u1) - pow(base, u0))
        wsum += weight[i]
    if wsum == 0.0 or base <= 1.0:
        return 0
    delta = delta / wsum
    return <score_t>(MAX_NODE_SCORE * (1.0 - delta / (base - 1.0)))
