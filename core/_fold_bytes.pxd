# The fold's bytes path (core/_fold_bytes.pyx), for ClusterState.apply_payloads.
from esched.core._state cimport ClusterState

cdef int _apply_payload(ClusterState self, bytes payload) except -1
