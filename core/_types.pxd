# The core's fixed-width types, in one place (see tests/core/test_types.py).
#
# Quantities are integer base units (milli-CPU, bytes, device counts) and never
# exceed 2**62 (schemas.quantity.MAX_BASE_UNITS), so sums over a node fit int64
# without overflow checks in the hot loops.
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint64_t

ctypedef int64_t units_t    # a quantity in base units
ctypedef int32_t index_t    # a row in a node/pod/gang/queue/class table; -1 = none
ctypedef uint64_t word_t    # one 64-bit word of a bitset (labels, taints)
ctypedef int64_t score_t    # a plugin score, 0..MAX_NODE_SCORE, or a weighted sum
ctypedef uint8_t flag_t     # node flags (NODE_ALIVE, NODE_UNSCHEDULABLE)
ctypedef int8_t phase_t     # pod phase (PHASE_*)

cdef enum:
    NODE_ALIVE = 1
    NODE_UNSCHEDULABLE = 2

cdef enum:
    PHASE_FREE = -1         # an empty pod slot (deleted pod), reusable
    PHASE_PENDING = 0
    PHASE_RUNNING = 1
    PHASE_SUCCEEDED = 2
    PHASE_FAILED = 3
