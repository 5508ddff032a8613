# PodTopologySpread (score): kube-scheduler's podtopologyspread/scoring.go for the
# pod's ScheduleAnyway constraints. PreScore counts the matching pods per domain over
# the nodes with every constraint's key that pass its node inclusion policies
# (_topology_views._soft_spread_view); a scored node lacking a key is ignored (scores
# 0). Each constraint weighs log(domains among the scored nodes + 2) (hostname: nodes); a
# node's raw score is round(sum of count * weight + maxSkew - 1); NormalizeScore is
# MAX_NODE_SCORE * (max + min - raw) / max (MAX_NODE_SCORE when max is 0). Under
# kube's system default constraints (v.soft_any: requireAllTopologies false) no node
# is ignored: a node lacking a key counts as one more domain (kube's "" value) and
# scores without that constraint's term.
from libc.math cimport log
from libc.string cimport memset

from esched.core._classview cimport ClassView
from esched.core._types cimport score_t
from esched.core.scoring._plugin cimport MAX_NODE_SCORE


cdef inline bint spread_ignored(const ClassView* v, Py_ssize_t n) noexcept nogil:
    """Node n lacks some constraint's topology key (kube's IgnoredNodes)."""
    cdef int j
    if v.soft_any:
        return False
    for j in range(v.n_soft):
        if v.soft[j].dom[n] < 0:
            return True
    return False


cdef inline void spread_start(ClassView* v) noexcept nogil:
    """Before the normalization walk: no domain seen."""
    cdef int j
    for j in range(v.n_soft):
        v.soft[j].size = 0
        v.soft[j].seen_none = False
        memset(v.soft[j].seen, 0, v.soft[j].n_dom)


cdef inline void spread_see(ClassView* v, Py_ssize_t n) noexcept nogil:
    """A scored node: count its domains (and itself, for a hostname key) once."""
    cdef int j
    cdef int d
    if spread_ignored(v, n):
        return
    for j in range(v.n_soft):
        if v.soft[j].host:
            v.soft[j].size += 1
        else:
            d = v.soft[j].dom[n]
            if d < 0:
                if not v.soft[j].seen_none:
                    v.soft[j].seen_none = True
                    v.soft[j].size += 1
            elif not v.soft[j].seen[d]:
                v.soft[j].seen[d] = 1
                v.soft[j].size += 1


cdef inline void spread_weigh(ClassView* v) noexcept nogil:
    """After the walk: kube's topologyNormalizingWeight, log(size + 2)."""
    cdef int j
    for j in range(v.n_soft):
        v.soft[j].weight = log(<double>(v.soft[j].size + 2))


cdef inline long long round_half_away(double x) noexcept nogil:
    """C's round() (halves away from zero) as an integer, without the libm call: exact
    for |x| < 2**63, as x - trunc(x) is exact in doubles (and 0 from 2**52 up)."""
    cdef long long t = <long long>x
    cdef double f = x - <double>t
    return t + (f >= 0.5) - (f <= -0.5)


cdef inline long long spread_raw(const ClassView* v, Py_ssize_t n) noexcept nogil:
    """Node n's raw score (kube's Score), -1 for an ignored node."""
    cdef double score = 0
    cdef int j
    cdef long long cnt
    if spread_ignored(v, n):
        return -1
    for j in range(v.n_soft):
        if v.soft[j].dom[n] < 0:
            continue  # (soft_any) kube's Score: no term for a key the node lacks
        if v.soft[j].host:
            cnt = v.soft[j].cnt[1 + n]
        else:
            cnt = v.soft[j].cnt[1 + v.soft[j].dom[n]]
        score += <double>cnt * v.soft[j].weight + <double>(v.soft[j].max_skew - 1)
    return round_half_away(score)


cdef inline score_t pod_topology_spread(long long raw, long long raw_min,
                                        long long raw_max) noexcept nogil:
    """kube's NormalizeScore for one node: ignored (raw < 0): 0; else
    MAX_NODE_SCORE * (max + min - raw) / max, MAX_NODE_SCORE when max is 0."""
    if raw < 0:
        return 0
    if raw_max <= 0:
        return MAX_NODE_SCORE
    if raw > raw_max:
        raw = raw_max  # a node outside the scored set (scores of an infeasible node)
    if raw < raw_min:
        raw = raw_min
    return MAX_NODE_SCORE * (raw_max + raw_min - raw) // raw_max
