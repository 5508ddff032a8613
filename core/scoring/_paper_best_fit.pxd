# BestFit as the FGD paper's artifact scores it (hkust-adsl/kubernetes-scheduler-simulator,
# pkg/simulator/plugin/best_fit_score.go getBestFitScore): the absolute leftover of each
# resource after the pod, over a fixed normaliser ("max spec"), weighted; lower leftover
# scores higher:
#
#   s     = sum_i (w_i / sum w) * (allocatable_i - requested_i) / max_spec_i
#   score = int64((1 - s) * MAX_NODE_SCORE)
#
# Unlike kube's MostAllocated it is not relative to the node's size, and the artifact
# keeps the GPU term for pods that ask no GPU (so a CPU pod goes where fewer GPUs are
# free); the placer gathers every resource for this kind (PluginSpec.scalar 0).
from esched.core._types cimport score_t, units_t
from esched.core.scoring._plugin cimport MAX_NODE_SCORE


cdef inline score_t paper_best_fit(const units_t* requested, const units_t* allocatable,
                                   const units_t* weight, const long long* max_spec,
                                   int n) noexcept nogil:
    """``requested`` includes the pod; a resource with max_spec 0 is not scored."""
    cdef double s = 0.0, wsum = 0.0, v
    cdef int i
    for i in range(n):
        if max_spec[i] > 0:
            wsum += weight[i]
    if wsum == 0.0:
        return 0
    for i in range(n):
        if max_spec[i] <= 0:
            continue
        # Go's order of operations: (free - req) / maxSpec * weight.
        s += <double>(allocatable[i] - requested[i]) / <double>max_spec[i] * (weight[i] / wsum)
    v = (1.0 - s) * MAX_NODE_SCORE
    if v < 0.0:
        return 0
    if v > MAX_NODE_SCORE:
        return MAX_NODE_SCORE
    return <score_t>v
