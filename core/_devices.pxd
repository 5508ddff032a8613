# DeviceTable's contract: its C-level state and methods, for modules that cimport it
# (Python callers use the methods documented in _devices.pyx).
from libc.stdint cimport int32_t, int64_t

from esched.core.scoring._fgd cimport FragTypes


cdef class DeviceTable:
    cdef public Py_ssize_t n_nodes
    cdef public object free_np, ndev_np, model_np, cpu_free_np, ver_np, frag_np
    cdef int32_t[:, ::1] free          # [node, device] free milli-GPU
    cdef int32_t[::1] ndev             # [node] devices (0: no GPU, or no node)
    cdef int32_t[::1] model            # [node] GPU model id, -1 none
    cdef int64_t[::1] cpu_free         # [node] free CPU, milli
    cdef int64_t[::1] ver              # [node] bumped on every change
    cdef double[::1] frag              # [node] F_n for the current target workload
    cdef public double frag_total      # sum of frag
    cdef public dict models            # GPU model name -> id
    cdef public list model_names
    # target workload (FGD)
    cdef FragTypes T
    cdef object t_cpu_np, t_gpu_np, t_num_np, t_models_np, t_p_np
    cdef public bint has_target
    # FGD memo: (request milli, cpu milli) -> row of per-node (version, delta)
    cdef dict memo_rows
    cdef object memo_ver_np, memo_delta_np
    cdef int64_t[:, ::1] memo_ver
    cdef double[:, ::1] memo_delta
    cdef public long long memo_hits, memo_misses

    cdef void _touch(self, Py_ssize_t n) noexcept
    cdef double _delta_on(self, Py_ssize_t n, long long g, long long cpu, int dev) noexcept nogil
    cdef double _best_delta(self, Py_ssize_t n, long long g, long long cpu, int* dev) noexcept nogil
