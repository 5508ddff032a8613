# The fold's dict path (core/_fold.pyx): its handlers as functions of the state, for
# the class's entry points (ClusterState.apply, apply_many) and the bytes path.
from esched.core._state cimport ClusterState

cdef enum:
    # What the fold notes in a state's claims journal (ClusterState.claims_journal)
    CLAIM_RELEASED = 0                  # the pod left its node or the state (or was refused)
    CLAIM_BOUND = 1                     # the pod was bound to a node

cdef int type_slot(str name) except -1
cdef dict noop_slots()
cdef dict event_counts(ClusterState self)
cdef int restore_event_counts(ClusterState self, dict counts) except -1
cdef int _pod_submitted(ClusterState self, dict pod, list class_memo=*) except -1
cdef Py_ssize_t _pod_submit(ClusterState self, str key, dict pod, dict meta, dict spec,
                            list class_memo, tuple plain=*, tuple keys=*) except -2
cdef Py_ssize_t _pod_enter(ClusterState self, str key, object idx, Py_ssize_t c, Py_ssize_t q,
                           Py_ssize_t g, long long prio, object labels, bint owned) except -1
cdef int _pod_finish(ClusterState self, str key, int phase) except -1
cdef int _podgroup(ClusterState self, dict pg) except -1
cdef tuple podgroup_entry(ClusterState self, dict spec, dict min_resources=*)
cdef int set_podgroup(ClusterState self, str key, tuple entry) except -1
cdef bint job_implies_podgroup(ClusterState self, str key)
cdef int _resolve_binding(ClusterState self, object pod, object node, object resources, list memo,
                          list resolved, object devices=*) except -1
cdef int _bind_resolved(ClusterState self, list resolved) except -1
cdef int _bind_allocated(ClusterState self, Py_ssize_t p, Py_ssize_t n, bint has_pods,
                         long long dev) except -1
cdef int _apply(ClusterState self, dict event) except -1
cdef int _apply_any(ClusterState self, object event) except -1
