# InterPodIndex: pods' labels by topology domain, for kube's InterPodAffinity filter.
# Owned by ClusterState (``interpod``), updated by its fold on every bind and release;
# read by the Placer, which builds a class view's inter-pod checks from its arrays.
cdef class InterPodIndex:
    cdef public bint active              # some count or owner array exists: binds update it
    cdef public object state
    cdef public object pod_lset_np       # int32[pod] the pod's label set (namespace, labels)
    cdef int[::1] pod_lset               # (-1: a free slot, holding no label set)
    cdef public list lsets               # id -> (namespace, {label: value}); None: released
    cdef public object lset_refs_np      # int32[id] pod slots holding the label set
    cdef int[::1] lset_refs
    cdef list lset_free                  # released ids, a heap: the smallest is reused first
    cdef list lset_keys                  # id -> its lset_index key (None: released)
    cdef list lset_fast_keys             # id -> the lset_fast keys naming it, or None
    cdef list lset_uses                  # id -> set of the matchers its terms hold, or None
    cdef public dict lset_index          # (namespace, sorted label items) -> id
    cdef dict lset_fast                  # (namespace, label items as given) -> id
    cdef str bare_ns                     # the last namespace of an unlabeled, unowned pod
    cdef int bare_ns_lset                # ... and its label set (what lset_fast has for it)
    cdef str last_ns                     # the last namespace of a labelled pod (its str reused)
    cdef list lset_match                 # id -> set of matcher ids it matches
    cdef dict lset_by_label              # (label, value) -> {id of a label set with it: None},
                                         # for the label keys in by_label_keys only
    cdef set by_label_keys               # label keys some matcher's selector led with
    cdef public list lset_owned          # id -> its pods get default spread constraints
    cdef dict default_memo               # lset -> {profile defaults: (spread, soft)}
    cdef public dict key_index           # topology key -> id
    cdef public list key_names
    cdef public list dom_np              # key id -> int32[node slot] domain id, -1: no such label
    cdef public list dom_vals            # key id -> {label value: domain id}
    cdef public list dom_cap             # key id -> domains the count arrays of the key hold
    cdef public dict matcher_index       # matcher (parts) -> id
    cdef public list matchers            # id -> tuple of (namespaces or None: all, selector); None: released
    cdef list m_refs                     # matcher id -> label sets whose terms hold it
    cdef list m_free                     # released matcher ids, a heap
    cdef list m_keys                     # matcher id -> key ids with a count array
    cdef public dict counts              # (matcher, key) -> int32[1 + domains]: [0] total
    cdef public dict owner_keys          # matcher -> [key id] with an owners array
    cdef public dict owners              # (matcher, key) -> int32[1 + domains] of bound owners
    cdef public dict scored              # (SCORED_*, matcher, key) -> int32[1 + domains]
    cdef public dict scored_keys         # (SCORED_*, matcher) -> [key id] with a scored array
    cdef dict terms_memo                 # lset -> {class: resolved terms}
    cdef dict terms_by_cons              # lset -> {constraints key: resolved terms}
    cdef dict cons_keys                  # class -> its constraints key (see cons_key)
    cdef list ns_matchers                # matcher ids with a namespaceSelector part
    cpdef int set_pod(self, Py_ssize_t p, str key, object labels, bint owned=*) except -1
    cpdef int release_pod(self, Py_ssize_t p) except -1
    cdef int _release_lset(self, Py_ssize_t i) except -1
    cdef int _release_matcher(self, Py_ssize_t m) except -1
    cdef int _hold_matchers(self, Py_ssize_t lset, object ms) except -1
    cpdef int move(self, Py_ssize_t p, Py_ssize_t n, Py_ssize_t c, int sign) except -1
    # (C calls for the placer's per-pod views, core/_topology_views.pyx)
    cpdef bint owned(self, Py_ssize_t lset) except -1
    cpdef tuple matched(self, Py_ssize_t lset)
    cpdef tuple terms(self, Py_ssize_t c, Py_ssize_t lset)
    cpdef bytes cons_key(self, Py_ssize_t c)
    cpdef int forget_class(self, Py_ssize_t c, bint last=*) except -1
    cpdef list count_keys(self, Py_ssize_t m)
    cpdef Py_ssize_t key(self, str name) except -1
    cdef Py_ssize_t _domain_of(self, Py_ssize_t k, Py_ssize_t n) except -2
    cdef Py_ssize_t _domain_in(self, Py_ssize_t k, Py_ssize_t n, list names, list labels,
                               str name, bint host) except -2
    cdef int _grow_domains(self, Py_ssize_t k, Py_ssize_t cap) except -1
    cdef object _candidates(self, tuple parts)
