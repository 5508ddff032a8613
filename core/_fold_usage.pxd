# The fold of usage reports (core/_fold_usage.pyx): esched.usage.reported's nodes[]
# (measured node load) and pods[] (Borg's reservations), for the dict path's _apply.
from esched.core._state cimport ClusterState

cdef int _usage_nodes(ClusterState self, object nodes) except -1
cdef int _usage_pods(ClusterState self, list pods, double now) except -1
