# The placer's seeded random draws (Marsaglia xorshift64, Lemire's multiply-shift), one
# home for the scan's tie draw and explain's (esched.core._explain), which must agree.
from libc.stdint cimport uint64_t

cdef extern from *:
    """
    static inline uint64_t esched_mulhi(uint64_t a, uint64_t b) {
        return (uint64_t)(((unsigned __int128)a * b) >> 64);
    }
    """
    uint64_t esched_mulhi(uint64_t a, uint64_t b) nogil


cdef inline uint64_t xorshift64(uint64_t* state) noexcept nogil:
    # Marsaglia xorshift64; state never 0.
    cdef uint64_t x = state[0]
    x ^= x << 13
    x ^= x >> 7
    x ^= x << 17
    state[0] = x
    return x


cdef inline uint64_t below(uint64_t* state, uint64_t bound) noexcept nogil:
    # A draw in [0, bound) by multiply-shift (Lemire), not a 64-bit modulo: no idiv.
    return esched_mulhi(xorshift64(state), bound)
