# Inter-pod affinity and topology spread over a Placer's view (core/_topology_views.pyx):
# the class view's checks and score inputs from the state's topology index, for the
# placer that cimports them (one call per pod; the scan reads what they fill).
from libc.stdint cimport int32_t

from esched.core._classview cimport ClassView
from esched.core._placer cimport Placer
from esched.core.scoring._plugin cimport PLUGIN_POD_TOPOLOGY_SPREAD, PluginSpec
from esched.core.scoring._pod_topology_spread cimport spread_see, spread_start, spread_weigh

cdef int topology_init(Placer pl) except -1
cdef int topology_reset(Placer pl) except -1
cdef void topology_free(Placer pl) noexcept
cdef int topology_view(Placer pl, Py_ssize_t cid, Py_ssize_t lset, ClassView* v) except -1
cdef int topology_assume(Placer pl, Py_ssize_t cid, Py_ssize_t n, int sign,
                         Py_ssize_t lset) except -1


cdef inline void soft_spread_weigh(const PluginSpec* specs, ClassView* v, const int32_t* feas,
                                   long long found) noexcept nogil:
    # PodTopologySpread weighs each ScheduleAnyway constraint by its domains among the
    # scored nodes feas[:found]: all known before any raw score (_norm_raw's first
    # step), when the class's normalized plugins include it. Inline: compiled into
    # the placer's walk, as one function with it.
    cdef long long i
    cdef int j
    cdef bint spread = False
    for j in range(v.n_norm):
        spread |= specs[v.norm[j]].kind == PLUGIN_POD_TOPOLOGY_SPREAD
    if spread:
        spread_start(v)
        for i in range(found):
            spread_see(v, feas[i])
        spread_weigh(v)
