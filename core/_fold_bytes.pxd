# The fold's bytes path (core/_fold_bytes.pyx), for ClusterState.apply_payloads.
from libc.stdint cimport uint64_t
from libc.string cimport memcpy

from esched.core._state cimport ClusterState

cdef int _apply_payload(ClusterState self, bytes payload) except -1
# A node's slot by its name's ASCII bytes, through the commit path's cache (the claims'
# nodes, core/_claims.pyx).
cdef Py_ssize_t node_slot(ClusterState self, const unsigned char* name,
                          Py_ssize_t length) except -2


cdef inline uint64_t bytes_hash(const unsigned char* p, Py_ssize_t length) noexcept nogil:
    # A 64-bit hash of ``length`` bytes at ``p``: the fold's memo and cache keys and
    # the claims' class fingerprints (core/_claims.pyx), whose entries compare the
    # bytes. Eight bytes a step, each mixed in by a multiply and a shift (the bytes
    # are stored JSON, not chosen to collide; a collision costs a miss). Inline here
    # so both modules' loops call no function.
    cdef uint64_t h = <uint64_t>length * 0x9E3779B97F4A7C15ULL, w
    cdef Py_ssize_t i = 0
    while i + 8 <= length:
        memcpy(&w, p + i, 8)
        h = (h ^ w) * 0xBF58476D1CE4E5B9ULL
        h ^= h >> 29
        i += 8
    w = 0
    memcpy(&w, p + i, length - i)
    h = (h ^ w) * 0x94D049BB133111EBULL
    return h ^ (h >> 32)
