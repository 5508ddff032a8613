"""The rule for a pod's requests, in one place: kube's ``resource.PodRequests``.

Every reader of a pod's requests sums them here: :func:`esched.schemas.objects.
pod_resource_requests` (ingest's validator, manifests, the explain tool) through
:func:`pod_totals`, and the fold's equivalence classes through the C contract in
``_requests.pxd`` (``pod_sum`` for a decoded spec, ``core/_state.pyx`` ``_class_for``;
``PodSum`` container by container for a spec read from its bytes,
``core/_fold_bytes.pyx`` ``_plain_requests``). Totals are Python ints, exact beyond
int64: the validator reports a total past the core's range by its value, and the
fold checks the range before a class takes it.
"""

__all__ = [
    "AGGREGATED_SPEC_FIELDS",
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "HUGEPAGES_PREFIX",
    "POD_LEVEL_RESOURCES",
    "pod_level_resource",
    "pod_totals",
]

#: kube-scheduler's schedutil.DefaultMilliCPURequest: what a container without a cpu
#: request counts as requesting when *scoring* (never when fitting).
DEFAULT_MILLI_CPU_REQUEST = DEFAULT_MILLI_CPU
#: kube-scheduler's schedutil.DefaultMemoryRequest (200 MiB), likewise for memory.
DEFAULT_MEMORY_REQUEST = DEFAULT_MEMORY

#: Pod spec fields besides ``containers`` that the rule takes into account (init and
#: sidecar containers, overhead, pod-level resources). A pod with none of them set is
#: a plain sum over its containers, which the fold reads from a spec's bytes
#: (``core/_fold_bytes.pyx``) and charges Borg's limits for.
AGGREGATED_SPEC_FIELDS = ("initContainers", "overhead", "resources")

#: Resources ``spec.resources`` (pod-level resources) may set, as kube's
#: IsSupportedPodLevelResource: cpu, memory and ``hugepages-<size>``; others there are
#: ignored (the containers' sum stands).
POD_LEVEL_RESOURCES = ("cpu", "memory")
HUGEPAGES_PREFIX = "hugepages-"

cimport cython
from cpython.long cimport PyLong_AsLongLongAndOverflow

# The defaults as Python ints made once (a container's begin() would box them).
cdef object _CPU0 = DEFAULT_MILLI_CPU
cdef object _MEM0 = DEFAULT_MEMORY


def pod_level_resource(name: str) -> bool:
    """Whether ``spec.resources`` may set ``name`` (kube's IsSupportedPodLevelResource)."""
    return name in POD_LEVEL_RESOURCES or name.startswith(HUGEPAGES_PREFIX)


cdef class Quantities:
    """How the rule reads one quantity: its base units (an exact int), or it raises.
    ``where``, ``index`` and ``kind`` locate the field, for an error."""

    cdef object units(self, object name, object value, int where, Py_ssize_t index, str kind):
        raise NotImplementedError


cdef str _field(object name, int where, Py_ssize_t index, str kind):
    # The field of a quantity, as a reader's error names it.
    if where == IN_CONTAINERS:
        return f"spec.containers[{index}].resources.{kind}.{name}"
    if where == IN_INIT_CONTAINERS:
        return f"spec.initContainers[{index}].resources.{kind}.{name}"
    if where == IN_POD_RESOURCES:
        return f"spec.resources.{kind}.{name}"
    return f"spec.overhead.{name}"


cdef class _Callable(Quantities):
    # A ``units(resource, value, field) -> base units`` callable as the rule's reader.
    cdef object fn

    cdef object units(self, object name, object value, int where, Py_ssize_t index, str kind):
        return self.fn(name, value, _field(name, where, index, kind))


# One per pod (per distinct spec on the bytes path): recycled, and never part of a
# cycle (it holds a dict of ints and ints), so the collector need not track it.
@cython.freelist(8)
@cython.no_gc
cdef class PodSum:
    """One pod's sum over the containers that run side by side."""

    cdef void begin(self) noexcept:
        self.c_cpu = _CPU0
        self.c_mem = _MEM0

    cdef int add(self, object name, object units) except -1:
        # One quantity the container asks: summed; cpu and memory replace its
        # scoring defaults (an explicit 0 stays 0).
        self.fit[name] = self.fit.get(name, 0) + units
        if name == "cpu":
            self.c_cpu = units
        elif name == "memory":
            self.c_mem = units
        return 0

    cdef int end(self) except -1:
        self.cpu = self.cpu + self.c_cpu
        self.mem = self.mem + self.c_mem
        return 0

    cdef bint nonzero_within(self, long long most) except -1:
        # Whether the scoring cpu and memory are within 0..most, compared in C.
        cdef int over = 0
        cdef long long cpu = PyLong_AsLongLongAndOverflow(self.cpu, &over)
        if over or not 0 <= cpu <= most:
            return False
        cdef long long mem = PyLong_AsLongLongAndOverflow(self.mem, &over)
        return not over and 0 <= mem <= most

    cdef int pod(self) except -1:
        # ``pods: 1``: the node's pod-count limit is an ordinary resource dimension.
        self.fit["pods"] = 1
        return 0

    cdef tuple requests(self):
        # (fit with ``pods: 1``, (cpu, mem)).
        self.pod()
        return self.fit, (self.cpu, self.mem)


cdef PodSum new_sum():
    cdef PodSum s = PodSum.__new__(PodSum)
    s.fit = {}
    s.cpu = 0
    s.mem = 0
    s.lim = None
    s.ports = False
    return s


cdef int _container(PodSum s, dict c, int where, Py_ssize_t index, str kind, Quantities q,
                    bint limits_above) except -1:
    # One container into ``s``. A resource with a limit and no request is requested at
    # its limit (API defaulting). ``limits_above``: Borg's limit, each limit above its
    # request, the excess summed into ``s.lim`` (core/reservations.py).
    cdef dict res, values
    s.begin()
    res = c.get("resources")
    if res:
        values = res.get(kind) or {}
        if kind == "requests":
            limits = res.get("limits")
            if limits:
                for name, value in limits.items():
                    if name not in values:
                        s.add(name, q.units(name, value, where, index, kind))
                    elif limits_above:
                        u = (q.units(name, value, where, index, "limits")
                             - q.units(name, values[name], where, index, kind))
                        if u > 0:
                            if s.lim is None:
                                s.lim = {}
                            s.lim[name] = s.lim.get(name, 0) + u
        for name, value in values.items():
            s.add(name, q.units(name, value, where, index, kind))
    s.end()
    return 0


cdef int _sum_into(dict into, dict one) except -1:
    for name, u in one.items():
        into[name] = into.get(name, 0) + u
    return 0


cdef int _max_into(dict into, dict one) except -1:
    for name, u in one.items():
        if u > into.get(name, 0):
            into[name] = u
    return 0


cdef PodSum pod_sum(dict spec, str kind, Quantities q, bint plain):
    """The one aggregation (component-helpers ``resource.PodRequests`` / ``PodLimits``)
    of ``kind`` ("requests" or "limits"): the sum over containers and sidecars (init
    containers with ``restartPolicy: Always``, which run beside them), max with each
    init container plus the sidecars started before it (they run one at a time, in
    order); pod-level resources (``spec.resources``) replace the result for the
    resources they set; plus ``spec.overhead``; plus ``pods: 1`` for requests. The
    scoring cpu and memory (kube's ``GetNonzeroRequests``) follow the same sums with
    per-container defaults; with pod-level requests they are the requests themselves
    (kube's PodInfo: no defaults).

    ``plain``: the caller (the fold) knows the spec sets none of
    :data:`AGGREGATED_SPEC_FIELDS`; the walk then also sums Borg's limit above the
    requests (``lim``) and notes whether a container lists ports (``ports``).
    """
    cdef PodSum s = new_sum()
    cdef Py_ssize_t i = 0
    cdef dict c
    for one in spec.get("containers") or ():
        c = one
        if plain and "ports" in c:
            s.ports = True
        _container(s, c, IN_CONTAINERS, i, kind, q, plain)
        i += 1
    if not plain:
        _aggregate(s, spec, kind, q)
    if kind == "requests":
        s.pod()
    return s


cdef int _aggregate(PodSum s, dict spec, str kind, Quantities q) except -1:
    # The fields beyond the containers' sum, onto ``s``.
    cdef PodSum one
    cdef Py_ssize_t i = 0
    init = spec.get("initContainers")
    if init:
        init_max = {}
        sidecars = {}
        side_cpu = side_mem = init_cpu = init_mem = 0
        for c in init:
            one = new_sum()
            _container(one, c, IN_INIT_CONTAINERS, i, kind, q, False)
            i += 1
            if c.get("restartPolicy") == "Always":
                _sum_into(s.fit, one.fit)
                s.cpu = s.cpu + one.cpu
                s.mem = s.mem + one.mem
                _sum_into(sidecars, one.fit)
                side_cpu = side_cpu + one.cpu
                side_mem = side_mem + one.mem
                _max_into(init_max, sidecars)
                init_cpu = max(init_cpu, side_cpu)
                init_mem = max(init_mem, side_mem)
            else:
                running = dict(one.fit)
                _sum_into(running, sidecars)
                _max_into(init_max, running)
                init_cpu = max(init_cpu, one.cpu + side_cpu)
                init_mem = max(init_mem, one.mem + side_mem)
        _max_into(s.fit, init_max)
        s.cpu = max(s.cpu, init_cpu)
        s.mem = max(s.mem, init_mem)
    pod_level = spec.get("resources")
    if pod_level:
        level = {}
        for name, value in (pod_level.get(kind) or {}).items():
            if pod_level_resource(name):
                level[name] = q.units(name, value, IN_POD_RESOURCES, 0, kind)
        limits = (pod_level.get("limits") or {}) if kind == "requests" else {}
        defaulted = False
        for name, value in limits.items():
            # API defaulting (defaultPodRequests): with pod-level limits, pod-level
            # requests default to the containers' sum, else to the limit.
            if pod_level_resource(name):
                defaulted = True
                if name not in level and name not in s.fit:
                    level[name] = q.units(name, value, IN_POD_RESOURCES, 0, "limits")
        s.fit.update(level)
        if kind == "requests" and (level or defaulted):
            s.cpu = s.fit.get("cpu", 0)
            s.mem = s.fit.get("memory", 0)
    for name, value in (spec.get("overhead") or {}).items():
        u = q.units(name, value, IN_OVERHEAD, 0, kind)
        s.fit[name] = s.fit.get(name, 0) + u
        if name == "cpu":
            s.cpu = s.cpu + u
        elif name == "memory":
            s.mem = s.mem + u
    return 0


def pod_totals(spec: dict, kind: str, units) -> tuple:
    """``(totals, cpu, memory)`` of a pod spec's ``kind`` ("requests", with ``pods:
    1``, or "limits"), read through ``units(resource, value, field)`` (the field named
    as ``spec.containers[0].resources.requests.cpu``): the rule of :func:`pod_sum`,
    cpu and memory being the scoring ones."""
    cdef _Callable q = _Callable.__new__(_Callable)
    q.fn = units
    cdef PodSum s = pod_sum(spec, kind, q, False)
    return s.fit, s.cpu, s.mem
