# FGD: fragmentation gradient descent (Weng et al., "Beware of Fragmentation: Scheduling
# GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC '23).
#
# The definitions follow the authors' simulator (hkust-adsl/kubernetes-scheduler-simulator,
# pkg/utils/frag.go and pkg/simulator/plugin/fgd_score.go), as summarised in
# shared/traces/alibaba-gpu-v2023-openb/FGD-ANCHOR.md:
#
#   target workload   pod types m = (cpu_m, gpu_milli_m per GPU, num_gpu_m, allowed models)
#                     with popularity p_m (sum 1)
#   F_n(m)            sum_i f_i (every idle milli of the node) when type m cannot run on
#                     node n at all: m is CPU-only, the node's GPU model is not allowed
#                     (a node without a model label allows only types open to any model),
#                     free CPU < cpu_m, or fewer than num_gpu_m GPUs have f_i >= gpu_milli_m;
#                     otherwise sum of f_i over the GPUs with f_i < gpu_milli_m (the GPU
#                     capacity type m cannot use)
#   F_n               sum_m p_m F_n(m)
#   score             floor(100 * sigmoid(-(F_n(after) - F_n(before)) / 1000))
#
# f_i is the free milli-GPU of device i (1000 = a whole idle GPU). Memory is not part of
# the model (as in the paper). The kernels below are pure and nogil; the device table
# (esched.core._devices) owns the per-device state and the per-node memo.
from libc.math cimport exp, floor
from libc.stdint cimport int32_t, int64_t, uint64_t

cdef enum:
    GPU_MILLI = 1000            # one whole GPU in milli-GPU
    MAX_DEVICES = 16            # devices per node the table tracks (openb has at most 8)


ctypedef struct FragTypes:
    int n                       # pod types
    const int64_t* cpu          # [type] CPU request, milli
    const int32_t* gpu          # [type] milli-GPU per GPU (0 for CPU-only types)
    const int32_t* num          # [type] GPUs per pod (0 for CPU-only types)
    const uint64_t* models      # [type] allowed GPU model ids as a bitmask (all ones: any)
    const double* p             # [type] popularity, sums to 1


cdef inline double node_frag(const int32_t* free, int ndev, int64_t cpu_free, int model,
                             const FragTypes* T) noexcept nogil:
    """F_n: the expected idle GPU capacity (milli) that a pod drawn from T cannot use."""
    cdef int i, m, fits
    cdef int64_t total = 0, part
    cdef double F = 0.0
    cdef int32_t g
    for i in range(ndev):
        total += free[i]
    if total == 0:
        return 0.0
    for m in range(T.n):
        g = T.gpu[m]
        # A node with no model label (model < 0) runs only the types that accept any
        # model (its mask is all ones); the traces without models (Philly, ITP, DLRM) are so.
        if T.num[m] == 0 or cpu_free < T.cpu[m] or model >= 64 \
                or (model < 0 and ~T.models[m] != 0) \
                or (model >= 0 and not ((T.models[m] >> model) & 1)):
            F += T.p[m] * <double>total
            continue
        fits = 0
        part = 0
        for i in range(ndev):
            if free[i] >= g:
                fits += 1
            else:
                part += free[i]
        if fits < T.num[m]:
            F += T.p[m] * <double>total
        else:
            F += T.p[m] * <double>part
    return F


cdef inline long long fgd_score(double delta) noexcept nogil:
    """floor(100 * sigmoid(-delta / 1000)): 50 for no change, higher for less fragmentation."""
    return <long long>floor(100.0 / (1.0 + exp(delta / 1000.0)))
