# ClusterState: the cluster as contiguous typed arrays, and the fold that builds it.
#
# Every table is a numpy array kept as an attribute (``*_np``, owns the memory and
# is what snapshots serialize) plus a typed memoryview of it (what the hot loops
# index). Growth replaces both; rows are slots, columns of the 2-D tables are
# resources in registration order (``res_names``).
cimport cython
from libc.stdint cimport uint8_t

from esched.core._interpod cimport InterPodIndex
from esched.core._types cimport flag_t, index_t, phase_t, units_t, word_t
from esched.schemas._requests cimport Quantities


cdef enum:
    # A memo of quantity strings or of pod specs is bounded: real clusters use a few
    # hundred distinct values, so overflowing this means garbage input and the memo
    # is simply reset.
    MEMO_LIMIT = 100000

cdef enum:
    # Initial table sizes; tables double when full, so these only avoid early copies.
    DEF_NODES = 64
    DEF_PODS = 1024
    DEF_SMALL = 16
    DEF_RES = 8

cdef enum:
    # The column of the pods resource: every state registers BASE_RESOURCES (cpu,
    # memory, pods) first, in that order (_state.pyx), snapshots included.
    COL_PODS = 2

cdef enum:
    CLASS_HOST_PORTS = 1                # class_flags: the class binds host ports
    CLASS_INTERPOD = 2                  # class_flags: required pod (anti-)affinity or spread


cdef class ClusterState:
    # --- log position and counters ---
    cdef public long long position      # position of the last folded event; 0 = none
    cdef public dict anomalies           # reason -> count (ignored or odd events)
    cdef dict _unknown_counts            # unknown event type -> count folded
    cdef public dict anomaly_first       # reason -> log position of its first occurrence
    cdef public dict tombstones          # pod key deleted before its submit -> position
    cdef public dict gated               # Pending pod key -> its scheduling gates (names), while any
    cdef public dict scheduler_of        # pod key -> its spec.schedulerName, when it names one
    cdef public dict not_preemptable     # pod key -> True: volcano.sh/preemptable false (never a victim)
    cdef long long _at                   # position of the event being folded
    cdef long long type_counts[32]       # folded events per known type (slot of _TYPE_SLOT)
    # None, or the pods the fold bound and released since core/_claims.pyx last took
    # them, as (CLAIM_BOUND or CLAIM_RELEASED, pod key): not fold state (see _claims)
    cdef public list claims_journal
    cdef object _claims_classes          # None, or claims' index of classes (core/_claims.pyx _ClassIndex)
    # The class ids made since _claims_classes was brought up to date (None: it holds
    # not every live class; core/_claims.pyx _index_classes)
    cdef list _classes_made

    # --- resources ---
    cdef public list res_names           # column -> resource name ("cpu", "memory", "pods", ...)
    cdef public dict res_index           # resource name -> column
    cdef public Py_ssize_t n_res         # registered resources
    cdef Py_ssize_t res_cap              # allocated columns (>= n_res)
    cdef dict _units_memo                # resource -> {quantity -> base units}
    cdef Quantities _quantities          # _units as the request rule's reader
    cdef dict _spec_memo                 # hash of pod spec bytes -> (spec dict, [queue, class, priority, key, next], plain, spec bytes) (apply_payloads)
    cdef list _spec_recent               # None, or _spec_memo's entries last found, by hash bits (see _fold_bytes)
    cdef dict _resources_memo            # binding resources bytes -> (dict, [columns, has pods])

    # --- nodes (slots; a removed node's slot is dead and reusable) ---
    cdef public Py_ssize_t n_nodes       # slots in use (alive or dead)
    cdef Py_ssize_t node_cap
    cdef public list node_names          # slot -> name, None when dead
    cdef public dict node_index          # name -> slot (alive nodes only)
    cdef list node_free                  # dead slots to reuse
    # Bumped whenever a name gets or loses a slot, or the host-port words widen (not
    # fold state: a side counter like the interned sets): what a class compiled to node
    # slots (nodeName, matchFields) or to a host-port mask depends on.
    cdef public long long node_gen
    cdef public list node_labels         # slot -> {key: value} (for explain and Gt/Lt)
    cdef public list node_taint_list     # slot -> [(key, value, effect), ...]
    cdef public object allocatable_np, allocated_np, version_np, flags_np
    cdef public object label_bits_np, taint_bits_np
    cdef units_t[:, ::1] allocatable     # [node, res] capacity the scheduler may use
    cdef units_t[:, ::1] allocated       # [node, res] sum of bound pods' allocations
    cdef long long[::1] version          # [node] bumped on every change of the node
    cdef public object nz_np
    cdef units_t[:, ::1] nz              # [node, 2] non-zero requested cpu, memory (scoring)
    cdef flag_t[::1] flags               # [node] NODE_ALIVE | NODE_UNSCHEDULABLE
    cdef word_t[:, ::1] label_bits       # [node, word] interned "key=value" and "key" ids
    cdef word_t[:, ::1] taint_bits       # [node, word] interned taint ids
    cdef public Py_ssize_t label_words, taint_words
    cdef public dict label_ids           # "key=value" or "key" -> bit
    cdef public list label_strs          # bit -> "key=value" or "key"
    cdef public dict taint_ids           # (key, value, effect) -> bit
    cdef public list taint_strs          # bit -> (key, value, effect)

    # --- pods (slots; a deleted pod's slot is reusable) ---
    cdef public Py_ssize_t n_pods
    cdef Py_ssize_t pod_cap
    cdef public dict pod_index           # "ns/name" -> slot
    cdef public list pod_keys            # slot -> "ns/name", None when free
    cdef list pod_free
    cdef public object pod_node_np, pod_class_np, pod_gang_np, pod_queue_np
    cdef public object pod_phase_np, pod_prio_np, pod_alloc_np, pod_dev_np, pod_start_np
    cdef index_t[::1] pod_node           # [pod] bound node slot or -1
    cdef index_t[::1] pod_class          # [pod] equivalence class
    cdef index_t[::1] pod_gang           # [pod] gang or -1
    cdef index_t[::1] pod_queue          # [pod] queue
    cdef phase_t[::1] pod_phase          # [pod] PHASE_*
    cdef long long[::1] pod_prio         # [pod] priority
    cdef units_t[:, ::1] pod_alloc       # [pod, res] what its binding allocated (0 unbound)
    cdef long long[::1] pod_dev          # [pod] GPU devices its binding took: bit i = device i
    cdef long long[::1] pod_start        # [pod] log position of its binding (0 unbound): its start
    cdef long long phase_counts[4]      # pods per phase (PHASE_PENDING..PHASE_FAILED)

    # --- equivalence classes: identical requests + constraints + priority ---
    cdef public Py_ssize_t n_classes
    cdef Py_ssize_t class_cap
    cdef public dict class_index         # class key -> id
    cdef public list class_specs         # id -> {"requests", "priority", "constraints"}
    cdef public object class_req_np
    cdef units_t[:, ::1] class_req       # [class, res] requests in base units
    cdef public object class_nz_np
    cdef units_t[:, ::1] class_nz        # [class, 2] cpu, memory with kube's non-zero defaults
    cdef public object class_flags_np
    cdef uint8_t[::1] class_flags        # [class] CLASS_HOST_PORTS: binds host ports
    # A class lives while a pod slot holds it (pod_class of a live slot, whatever its
    # phase); released with its last holder, its id reused by a later new class.
    # n_classes is the tables' length (the most classes live at once); a released id's
    # class_specs entry is None until reused.
    cdef public object class_refs_np
    cdef int[::1] class_refs             # [class] live pod slots holding it
    cdef list class_free                 # released ids, a heap: the smallest is reused first
    cdef list class_keys                 # id -> its class_index key (None: released)
    # id -> the last spec memo list naming it (see _memo_class), each list the next's
    cdef list class_memo_head
    cdef dict _cons_memo                 # constraints key -> [its decoding, CLASS_INTERPOD, classes of it]
    # Bumped whenever a released id is given to a new class; class_epoch_np[id]: its
    # value then (0: never reused). What a reader keeps per class id is stale for the
    # ids whose epoch is above the class_gen it last saw: read through a ClassMemo
    # (below), the one place that compares them.
    cdef public long long class_gen
    cdef public object class_epoch_np
    cdef long long[::1] class_epoch

    # --- host ports (kube's NodePorts): interned keys, per node a bitset of those bound ---
    # Keys: ("*", protocol, port): bound on some address; (ip, protocol, port): bound on
    # that address (0.0.0.0: all of them). A pod's port conflicts with a node's bit of
    # ("*", ...) if it binds 0.0.0.0, else of (0.0.0.0, ...) or its own (ip, ...).
    cdef public dict port_ids            # key -> bit
    cdef public list port_strs           # bit -> key
    cdef public Py_ssize_t port_words
    cdef public object port_bits_np
    cdef word_t[:, ::1] port_bits        # [node, port_words] keys bound on the node
    cdef public dict node_ports          # slot -> {key: pods binding it} (nodes with any)
    cdef public list class_ports         # class -> (used key bits, conflict key bits) or None

    # --- pods' labels by topology domain (kube's InterPodAffinity), see core/_interpod.pyx ---
    cdef public InterPodIndex interpod

    # --- gangs (PodGroups) ---
    cdef public Py_ssize_t n_gangs
    cdef Py_ssize_t gang_cap
    cdef public dict gang_index          # "ns/name" -> id
    cdef public list gang_keys
    cdef public list gang_meta           # id -> {"queue", "priorityClassName", "minResources"}
    cdef public object gang_min_np, gang_counts_np
    cdef index_t[::1] gang_min           # [gang] minMember
    cdef long long[:, ::1] gang_counts   # [gang, phase] member pods per phase
    # [gang] (lowest pod slot, highest + 1) ever given to the gang ((0, 0): none): every
    # slot whose pod_gang is the gang lies within, so gang_members reads only those
    # (a one-pod gang's one slot) instead of every pod. Derived: rebuilt on restore.
    cdef public object gang_span_np
    cdef index_t[:, ::1] gang_span

    # --- queues (Volcano) ---
    cdef public Py_ssize_t n_queues
    cdef Py_ssize_t queue_cap
    cdef public dict queue_index
    cdef public list queue_names
    cdef public list queue_meta          # id -> spec fields (see _queue_defaults)
    cdef public dict priority_classes    # PriorityClass name -> {value, globalDefault, preemptionPolicy}
    cdef public dict namespace_labels    # Namespace name -> its labels (only namespaces with labels)
    cdef public object queue_alloc_np, queue_counts_np
    cdef units_t[:, ::1] queue_alloc     # [queue, res] allocated to its bound pods
    cdef long long[:, ::1] queue_counts  # [queue, phase]

    # --- gang reservations (starvation guard; few, so Python dicts) ---
    cdef public dict reservations        # gang key -> [node name, ...] reserved for it
    cdef public dict reserved_nodes      # node name -> gang key

    # --- last reported usage (for reclamation; no effect on allocation) ---
    cdef public dict pod_usage           # "ns/name" -> {resource: units}

    # --- measured node load (the Usage plugin), on the log's clock: see node_usage ---
    cdef dict _node_usage                # node name -> (report time s, {column: units})
    cdef public double usage_max_age     # a report older than this on the clock: ignored
    cdef public long long usage_gen      # bumped by every fold that changes node_usage
    cdef object _usage_time              # ``time`` of the usage event being folded (_fold_usage)
    # --- reclamation (Borg 5.5): limits and reservations (core/reservations.py) ---
    cdef object _reclamation             # ReclamationConfig (see the reclamation property)
    cdef double rc_hold, rc_tau, rc_margin, rc_burst  # its numbers, for the fold's loops
    cdef bint rc_on                      # its ``enabled`` (off: limits = requests)
    cdef public double clock             # the log's clock: latest usage event time (s); 0 none
    cdef public object class_lim_np, pod_resv_np, pod_rtime_np, node_lim_np, node_resv_np
    cdef public object res_rflags_np
    cdef units_t[:, ::1] class_lim       # [class, res] limits: Kubernetes limits, else requests
    cdef units_t[:, ::1] pod_resv        # [pod, res] reservation of a bound pod (0 unbound)
    cdef double[:, ::1] pod_rtime        # [pod, 2] hold end, last report time; NaN: none yet
    cdef units_t[:, ::1] node_lim        # [node, res] sum of bound pods' limits
    cdef units_t[:, ::1] node_resv       # [node, res] sum of bound pods' reservations
    cdef uint8_t[::1] res_rflags         # [res] RES_RECLAIM | RES_OVERCOMMIT

    # --- internals shared with the other core modules ---
    cdef void _bind_views(self)
    cdef Py_ssize_t _resource(self, str name) except -1
    cdef units_t _units(self, str name, object value) except -1
    cdef dict _resource_list(self, object values, str field)
    cdef Py_ssize_t _label_bit(self, str text) except -1
    cdef Py_ssize_t _taint_bit(self, tuple taint) except -1
    cdef Py_ssize_t _queue(self, str name) except -1
    cdef Py_ssize_t _gang(self, str key, str queue, dict meta=*) except -1
    cdef int _ports_change(self, Py_ssize_t n, Py_ssize_t c, int sign) except -1
    cdef Py_ssize_t _port_bit(self, tuple key) except -1
    cdef Py_ssize_t _class_for(self, dict pod, object node_group=*, bint pin=*) except -2
    cdef Py_ssize_t _new_class(self, tuple key, dict req, tuple nz, long long prio, str ckey,
                               object pcn, dict lim) except -1
    cdef int _hold_class(self, Py_ssize_t p, Py_ssize_t c, Py_ssize_t old) except -1
    cdef int _release_class(self, Py_ssize_t c) except -1
    cdef int _memo_class(self, list memo, object q, Py_ssize_t c) except -1
    cdef int _clear_spec_memo(self) except -1
    cdef void _bind(self, Py_ssize_t p, Py_ssize_t n) noexcept
    cdef void _release(self, Py_ssize_t p) noexcept
    cdef void _set_phase(self, Py_ssize_t p, int phase) noexcept
    cdef void _set_gang(self, Py_ssize_t p, Py_ssize_t g) noexcept
    cdef void _index_gang_spans(self) noexcept
    cdef void _anomaly(self, str reason)
    cdef bint _charge_fits(self, Py_ssize_t p, Py_ssize_t n) noexcept
    cdef Py_ssize_t _new_pod_slot(self, str key) except -1
    cdef Py_ssize_t _new_node_slot(self, str name) except -1
    cdef void _set_rflags(self, Py_ssize_t col)
    cpdef apply(self, dict event, long long position)
    # --- read API bounds checks ---
    cdef int _check_pod(self, Py_ssize_t p) except -1
    cdef int _check_node(self, Py_ssize_t n) except -1
    cdef int _check_gang(self, Py_ssize_t g) except -1

@cython.final
cdef class ClassMemo:
    # Values derived from ``state``'s equivalence classes, by class id, valid only
    # while each id names the class they were derived from (_state.pyx).
    cdef readonly ClusterState state
    cdef long long gen                   # state.class_gen as of the last look
    cdef dict vals                       # class id -> its value (as of gen)
    cdef list _reused(self)

    cdef inline bint stale(self) noexcept:
        # Whether the state gave a released id to a new class since the last look
        # (a look: values(), get(), put(), reused()); inline: a keeper's per-pass
        # check is one compare in its own module.
        return self.state is not None and self.gen != self.state.class_gen


# ClassMemo's rule for a keeper that stamps each entry with its class's epoch instead
# of looking once per pass (the claims' index of classes by fingerprint, a record's
# resolved classes): the entry is valid while class_still(st, c, its stamp).
cdef inline long long class_stamp(ClusterState st, Py_ssize_t c) noexcept:
    # The stamp of an entry derived from class c now.
    return st.class_epoch[c]


cdef inline int class_still(ClusterState st, Py_ssize_t c, long long stamp) except -1:
    # Whether id c still names the class an entry stamped ``stamp`` was derived from:
    # not released, not given to a new class since. (except -1, not noexcept: its
    # error path joins the caller's, which keeps the caller's code as it was.)
    return st.class_keys[c] is not None and st.class_epoch[c] == stamp


# Shared with the fold modules (core/_fold.pyx, ...), which see the class through this
# file only: _state.pyx cimports them while it loads, so they import nothing from it
# in Python.
cdef bint _in_range(object values) except -1
cdef bint _unit_in_range(object value) except -1
cdef str _profile_key(str sname)
cdef Py_ssize_t _class_of(ClusterState st, dict req, tuple nz, object prio, str ckey,
                          object pcn, dict lim=*) except -2
cdef object _grown(object arr, Py_ssize_t rows, Py_ssize_t cols=*)
cdef object _readonly(object view)
