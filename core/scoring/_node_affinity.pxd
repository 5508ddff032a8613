# NodeAffinity (score): the pod's preferred node affinity terms, and the profile's
# addedAffinity preferred terms. kube-scheduler's nodeaffinity/node_affinity.go: a
# node's raw score is the sum of the weights of the terms it matches; NormalizeScore is
# helper.DefaultNormalizeScore(MaxNodeScore, reverse=false) over the scored nodes.
from esched.core._classview cimport ClassView
from esched.core._feasibility cimport expr_ok
from esched.core._types cimport score_t
from esched.core.scoring._plugin cimport default_normalize


cdef inline long long preferred_weight(const ClassView* v, Py_ssize_t n) noexcept nogil:
    """Sum of the weights of the class's preferred terms node n matches (a term: its
    expressions ANDed; compiled after the required terms, _constraints.compile_class)."""
    cdef long long total = 0
    cdef int t, e
    cdef bint ok
    for t in range(v.n_pref_terms):
        ok = True
        for e in range(v.term_off[v.n_terms + t], v.term_off[v.n_terms + t + 1]):
            if not expr_ok(v, n, e):
                ok = False
                break
        if ok:
            total += v.pref_weight[t]
    return total


cdef inline score_t node_affinity(long long raw, long long raw_max) noexcept nogil:
    """The normalized score of a node whose raw score (preferred_weight) is ``raw``."""
    return default_normalize(raw, raw_max, False)
