# InterPodAffinity (score): kube-scheduler's interpodaffinity/scoring.go. PreScore sums,
# per topology domain, the weights of the incoming pod's preferred terms matched by the
# domain's pods (anti-affinity negative), and of the bound pods' preferred terms and
# required affinity terms (hardPodAffinityWeight) that the incoming pod matches; the
# placer turns the index's per-domain arrays into the view's IpScore list
# (_topology_views._ip_score_view). A node's raw score sums its domains'; NormalizeScore maps
# [min, max] over the scored nodes to [0, MAX_NODE_SCORE].
from esched.core._classview cimport ClassView
from esched.core._types cimport score_t
from esched.core.scoring._plugin cimport MAX_NODE_SCORE


cdef inline long long ip_weight(const ClassView* v, Py_ssize_t n) noexcept nogil:
    """Node n's raw score: the sum of its domains' weights, one per topology key."""
    cdef long long total = 0
    cdef int j
    cdef int d
    for j in range(v.n_ips):
        d = v.ips[j].dom[n]
        if d >= 0:
            total += v.ips[j].val[1 + d]
    return total


cdef inline score_t inter_pod_affinity(long long raw, long long raw_min,
                                       long long raw_max) noexcept nogil:
    """kube's NormalizeScore: int64(MaxNodeScore * float64(raw - min) / float64(max - min))
    in float64 as kube computes it (the same truncations), 0 when max == min."""
    if raw_max <= raw_min:
        return 0
    if raw > raw_max:
        raw = raw_max  # a node outside the scored set (scores of an infeasible node)
    if raw < raw_min:
        raw = raw_min
    return <score_t>(<double>MAX_NODE_SCORE * (<double>(raw - raw_min) / <double>(raw_max - raw_min)))
