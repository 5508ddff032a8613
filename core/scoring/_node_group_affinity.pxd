# NodeGroupAffinity: Volcano's preferred node groups of the pod's queue.
#
# kube's NodeAffinity scores preferred terms 0..MAX_NODE_SCORE (plugin weight 2 by
# default); a queue's preferred node groups are one such term: a node in one of them
# scores MAX_NODE_SCORE, any other 0.
from esched.core._types cimport score_t, word_t
from esched.core.scoring._plugin cimport MAX_NODE_SCORE


cdef inline score_t node_group_affinity(const word_t* labels, const word_t* pref,
                                        int words) noexcept nogil:
    """MAX_NODE_SCORE if the node has a label bit of ``pref`` (NULL: no preference), else 0."""
    cdef int w
    if pref == NULL:
        return 0
    for w in range(words):
        if labels[w] & pref[w]:
            return MAX_NODE_SCORE
    return 0
