# Claims (core/_claims.pyx): a record of committed bindings and releases applied to
# a state, for ClusterState.apply_claims.
from esched.core._state cimport ClusterState

cdef long long _apply_claims(ClusterState self, bytes record, object own_bits,
                             list released) except -1
