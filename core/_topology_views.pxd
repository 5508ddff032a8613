# Inter-pod affinity and topology spread over a Placer's view (core/_topology_views.pyx):
# the class view's checks and score inputs from the state's topology index, for the
# placer that cimports them (one call per pod; the scan reads what they fill).
from libc.stdint cimport int32_t

from esched.core._classview cimport ClassView
from esched.core._placer cimport Placer
from esched.core.scoring._plugin cimport PluginSpec

cdef int topology_init(Placer pl) except -1
cdef int topology_reset(Placer pl) except -1
cdef void topology_free(Placer pl) noexcept
cdef int topology_view(Placer pl, Py_ssize_t cid, Py_ssize_t lset, ClassView* v) except -1
cdef int topology_assume(Placer pl, Py_ssize_t cid, Py_ssize_t n, int sign,
                         Py_ssize_t lset) except -1
cdef void soft_spread_weigh(const PluginSpec* specs, ClassView* v, const int32_t* feas,
                            long long found) noexcept nogil
