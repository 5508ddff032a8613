# The vectorized block kernel of the fused profile (_fused_block.h): what Cython sees of it.
from libc.stdint cimport int32_t, int64_t


cdef extern from "_fused_block.h" nogil:
    enum:
        ESCHED_FB_BLOCK
        ESCHED_FB_MAX_NEED
        ESCHED_FB_DEAD
        ESCHED_FB_INFEASIBLE
        ESCHED_FB_SPECIAL
        ESCHED_FB_FLOOR_WEIGHT
    ctypedef struct esched_fblock:
        const double* u0
        const double* u1
        const double* z0
        const double* z1
        const double* a0
        const double* a1
        const double* i0
        const double* i1
        const double* pen
        const double* need_used[ESCHED_FB_MAX_NEED]
        const double* need_alloc[ESCHED_FB_MAX_NEED]
        double need_val[ESCHED_FB_MAX_NEED]
        int n_need
        double pen_ok
        const float* cfree[ESCHED_FB_MAX_NEED]
        float cneed_lo[ESCHED_FB_MAX_NEED]
        float cneed_hi[ESCHED_FB_MAX_NEED]
        const float* cg0
        const float* cg1
        const float* ch0
        const float* ch1
        const float* ci0
        const float* ci1
        const float* cpen
        double fr0, fr1, br0, br1, rw0, rw1, ws, inv_ws, w_fit, w_bal
        int do_fit, least, do_bal
        int floors
    ctypedef struct esched_fbsum:
        int32_t max
        int32_t n_max
        int32_t n_feasible
        int32_t n_visited
    ctypedef struct esched_tcheck:
        const int32_t* dom
        const int32_t* cnt
        int32_t lo, hi
        int32_t key_optional
    void esched_topology(const esched_tcheck* c, int n_c, Py_ssize_t n0, Py_ssize_t m,
                         int32_t* passes) noexcept
    void esched_fblock_score(const esched_fblock* k, Py_ssize_t n0, Py_ssize_t m,
                             int32_t* out, esched_fbsum* sum) noexcept
    Py_ssize_t esched_fbound(const esched_fblock* k, Py_ssize_t n0, Py_ssize_t m,
                             int32_t* out, esched_fbsum* sum, int32_t best) noexcept
    void esched_summarize(const int32_t* s, Py_ssize_t m, esched_fbsum* sum) noexcept
    Py_ssize_t esched_stale(const int64_t* stamp, const long long* ver, int64_t epoch,
                            Py_ssize_t m) noexcept
    Py_ssize_t esched_nth_equal(const int32_t* s, Py_ssize_t m, int32_t x,
                                Py_ssize_t r) noexcept
    Py_ssize_t esched_cut(const int32_t* s, Py_ssize_t m, long long need) noexcept
    void esched_fblock_init(const char* cap) noexcept
    const char* esched_fblock_isa
