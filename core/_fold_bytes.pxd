# The fold's bytes path (core/_fold_bytes.pyx), for ClusterState.apply_payloads.
from esched.core._state cimport ClusterState

cdef int _apply_payload(ClusterState self, bytes payload) except -1
# A node's slot by its name's ASCII bytes, through the commit path's cache (the claims'
# nodes, core/_claims.pyx).
cdef Py_ssize_t node_slot(ClusterState self, const unsigned char* name,
                          Py_ssize_t length) except -2
