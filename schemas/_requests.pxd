# The rule for a pod's requests (schemas/_requests.pyx): its C contract, cimported by
# the fold (core/_state.pyx _class_for, core/_fold_bytes.pyx _plain_requests).

#: kube-scheduler's schedutil.DefaultMilliCPURequest / DefaultMemoryRequest (200 MiB):
#: what a container without a cpu (memory) request counts as requesting when scoring.
cdef enum:
    DEFAULT_MILLI_CPU = 100
    DEFAULT_MEMORY = 209715200

#: Where a quantity is read from: its field, spelled out only for an error.
cdef enum:
    IN_CONTAINERS = 0
    IN_INIT_CONTAINERS = 1
    IN_POD_RESOURCES = 2
    IN_OVERHEAD = 3


cdef class Quantities:
    """How the rule reads one quantity: its base units (an exact int), or it raises."""
    cdef object units(self, object name, object value, int where, Py_ssize_t index, str kind)


cdef class PodSum:
    """One pod's sum over the containers that run side by side, container by
    container: ``begin``, ``add`` each quantity of it, ``end``."""
    cdef dict fit             # requests by resource, in order of first sight
    cdef object cpu, mem      # the scoring (non-zero) cpu and memory, exact ints
    cdef object c_cpu, c_mem  # the container being added: its scoring cpu and memory
    cdef dict lim             # pod_sum of a plain spec: Borg's limit above the requests, or None
    cdef bint ports           # pod_sum of a plain spec: a container lists ports
    cdef void begin(self) noexcept
    cdef int add(self, object name, object units) except -1
    cdef int end(self) except -1
    cdef int pod(self) except -1
    cdef bint nonzero_within(self, long long most) except -1
    cdef tuple requests(self)


cdef PodSum new_sum()
cdef PodSum pod_sum(dict spec, str kind, Quantities q, bint plain)
