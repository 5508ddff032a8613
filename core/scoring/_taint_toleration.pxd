# TaintToleration (score): PreferNoSchedule taints the pod does not tolerate.
# kube-scheduler's tainttoleration/taint_toleration.go: a node's raw score is the count
# of such taints; NormalizeScore is helper.DefaultNormalizeScore(MaxNodeScore,
# reverse=true) over the scored nodes (fewest intolerable taints: MAX_NODE_SCORE).
from esched.core._classview cimport ClassView
from esched.core._types cimport score_t, word_t
from esched.core.scoring._plugin cimport __builtin_popcountll, default_normalize


cdef inline long long intolerable_prefer(const ClassView* v, Py_ssize_t n) noexcept nogil:
    """How many PreferNoSchedule taints of node n the class does not tolerate."""
    cdef int w
    cdef long long count = 0
    cdef const word_t* taints = v.taint_bits + n * v.taint_words
    for w in range(v.taint_words):
        count += __builtin_popcountll(taints[w] & v.prefer_intolerable[w])
    return count


cdef inline score_t taint_toleration(long long raw, long long raw_max) noexcept nogil:
    """The normalized score of a node with ``raw`` intolerable PreferNoSchedule taints."""
    return default_normalize(raw, raw_max, True)
