"""ClusterState and THE fold: the one function that turns the event log into state.

Replay, replicas, the commit service, the simulator and the audit all call
:meth:`ClusterState.apply` (or :meth:`ClusterState.apply_many`, or, with stored
envelope bytes, :meth:`ClusterState.apply_payloads`, which decodes the bulk event
types straight into the same handlers' input); nothing else mutates a state. Like eventsourcing's ``mutate``, the fold first checks that the
event's log position is after the state's, then applies, then advances.

Layout (see ``_state.pxd``): nodes, pods, equivalence classes, gangs and queues
are rows of contiguous numpy tables, with typed memoryviews for the hot loops;
names live in Python dicts that map to rows. Resources are columns, registered on
first sight (``cpu``, ``memory`` and ``pods`` always exist; ``pods`` makes the
node's pod-count limit an ordinary dimension). Quantities are integer base units.

Reading (the "read API" section below): code outside the core's Cython modules
reads a state through named accessors, per slot (:meth:`ClusterState.phase_of`,
:meth:`~ClusterState.node_of`, :meth:`~ClusterState.gang_count`, ...) or as
read-only views of whole tables (:meth:`~ClusterState.pod_phases`,
:meth:`~ClusterState.node_allocatable`, :meth:`~ClusterState.class_requests`, ...),
with the phase codes of :mod:`esched.core.phases`; the ``*_np`` tables themselves
are the fold's and the snapshots'.

The fold is total: it never raises on a stored event. Events that do not make
sense against the state (a resubmitted running pod, a binding to a dead node, an
unknown type, a malformed body, a quantity or sum outside the core's integer range,
bytes that are not a JSON object) are ignored and counted in
:attr:`ClusterState.anomalies`, with the position of each reason's first occurrence
in :attr:`ClusterState.anomaly_first`. Only a position out of order
(:class:`PositionError`) is the caller's error.
"""

from heapq import heappop, heappush

import numpy as np
import orjson

from esched.core._interpod import InterPodIndex
from esched.schemas import events as _ev
from esched.schemas.objects import (
    AGGREGATED_SPEC_FIELDS, BIND_ALL_HOST_IP,
    pod_host_ports, pod_priority, pod_queue, pod_requests,
)

from esched.core import phases as _phases
from esched.core.phases import PHASES
from esched.core.bands import never_preempts
from esched.core.reservations import (
    DEFAULT_RECLAMATION, ReclamationConfig, current_reclamation,
)
from esched.schemas.quantity import MAX_BASE_UNITS, resource_list, to_base_units

cimport cython
from libc.math cimport NAN
from cpython.object cimport PyObject

cdef extern from "Python.h":
    # A key's hash computed once for a lookup and the insertion after a miss (a
    # tuple's hash is not cached: a new class's key would be hashed twice).
    Py_hash_t PyObject_Hash(object o) except -1
    PyObject* _PyDict_GetItem_KnownHash(object mp, object key, Py_hash_t h)
    int _PyDict_SetItem_KnownHash(object mp, object key, object item, Py_hash_t h) except -1
    PyObject* PyErr_Occurred()

from esched.core._quantity cimport quantity_units
from esched.schemas._requests cimport PodSum, Quantities, pod_sum
from esched.core._reservations cimport RES_OVERCOMMIT, RES_RECLAIM
# The fold's handlers (the dict path) and its type table; that module knows this class
# through _state.pxd only, and is loaded (C level) before this module's body runs.
from esched.core._fold cimport CLAIM_BOUND, _apply, _apply_any, _pod_finish, event_counts
from esched.core._fold import _MALFORMED, GANG_SIZE_ANNOTATION
# The bytes path: stored envelopes into the same handlers.
from esched.core._fold_bytes cimport _apply_payload
# Claims: other partitions' bound pods from a compact record (core/_claims.pyx).
from esched.core._claims cimport _apply_claims
from esched.core._types cimport (
    NODE_ALIVE,
    NODE_UNSCHEDULABLE,
    PHASE_FAILED,
    PHASE_FREE,
    PHASE_PENDING,
    PHASE_RUNNING,
    PHASE_SUCCEEDED,
    index_t,
    units_t,
    word_t,
)

__all__ = ["ClassMemo", "ClusterState", "PositionError", "PHASES", "SNAPSHOT_MAGIC"]

# The Python-visible phase codes are the C enum's (esched.core.phases owns the names).
if (_phases.PHASE_FREE, _phases.PHASE_PENDING, _phases.PHASE_RUNNING, _phases.PHASE_SUCCEEDED,
        _phases.PHASE_FAILED) != (PHASE_FREE, PHASE_PENDING, PHASE_RUNNING, PHASE_SUCCEEDED,
                                  PHASE_FAILED):
    raise ImportError("esched.core.phases disagrees with PHASE_* of core/_types.pxd")
#: First bytes of a snapshot; bump the digit when the layout changes.
SNAPSHOT_MAGIC = b"ESCHEDS1"

#: Resources every state has, in this column order.
BASE_RESOURCES = ("cpu", "memory", "pods")
if BASE_RESOURCES.index("pods") != COL_PODS:
    raise ImportError("COL_PODS of core/_state.pxd disagrees with BASE_RESOURCES")
#: How old a node's usage report may be, on the log's clock, before the fold ignores it
#: (seconds): Volcano's usage plugin ignores metrics older than MetricsActiveTime (5 min).
USAGE_MAX_AGE = 300.0
# The largest base-unit total the fold keeps per pod and per class (the per-quantity
# limit of schemas.quantity): a node's allocation then stays within int64 (see
# _charge_fits), so no table sum wraps.
cdef units_t _MAX_UNITS = MAX_BASE_UNITS
# What a handler may still raise on an event it cannot apply, beyond _MALFORMED (which
# the handlers count themselves): the fold counts it and moves on rather than stop
# every follower of the log at the same event forever. Not MemoryError.
_UNAPPLICABLE = (ArithmeticError, LookupError, TypeError, ValueError, AttributeError,
                 IndexError, UnicodeError, RecursionError, AssertionError)

cdef inline int _fold_payload(ClusterState state, object payload) except -1:
    """Fold one stored payload (bytes by the bytes path, else decoded) at
    ``state._at``: an undecodable or unapplicable one is an anomaly, not an error."""
    try:
        if type(payload) is bytes:
            _apply_payload(state, payload)
        else:
            _apply_any(state, orjson.loads(payload))
    except orjson.JSONDecodeError:
        state._anomaly("undecodable")
    except _UNAPPLICABLE:
        state._anomaly("unapplicable")
    return 0


class PositionError(ValueError):
    """An event's log position is not after the state's position (out of order or replayed)."""

    def __init__(self, position: int, current: int) -> None:
        self.position = position
        self.current = current
        super().__init__(
            f"event at log position {position} cannot be folded into a state at position "
            f"{current}: positions must strictly increase"
        )


cdef object _grown(object arr, Py_ssize_t rows, Py_ssize_t cols=-1):
    """A copy of ``arr`` with at least ``rows`` rows (and ``cols`` columns), zero
    beyond ``arr``'s. Only what the copy does not write is zeroed: zeroing the whole
    first cost the fold's growth twice the bytes (the tables double as pods arrive)."""
    cdef Py_ssize_t old_rows = arr.shape[0], old_cols
    if arr.ndim == 1:
        new = np.empty(rows, dtype=arr.dtype)
        new[:old_rows] = arr
        new[old_rows:] = 0
        return new
    old_cols = arr.shape[1]
    new = np.empty((rows, max(cols, old_cols)), dtype=arr.dtype)
    new[:old_rows, :old_cols] = arr
    new[:old_rows, old_cols:] = 0
    new[old_rows:] = 0
    return new


cdef object _readonly(object view):
    """``view`` (a fresh slice of a table, never the table itself) made read-only:
    callers read tables; only the fold writes them."""
    view.flags.writeable = False
    return view


def _queue_defaults() -> dict:
    """A queue as Volcano defaults it: Open, weight 1, reclaimable, no limits."""
    return {
        "state": "Open",
        "weight": 1,
        "priority": 0,
        "reclaimable": True,
        "parent": None,
        "capability": {},
        "deserved": {},
        "guarantee": {},
        "affinity": None,
        # Named by a pod or PodGroup, never upserted: admission refuses its pods
        # (Volcano's webhook: "unable to find queue"). An upsert replaces the dict.
        "implicit": True,
    }




cdef tuple _AGGREGATED = AGGREGATED_SPEC_FIELDS


cdef class _StateQuantities(Quantities):
    # The request rule's reader of quantities: the state's memoized ones.
    cdef ClusterState state

    cdef object units(self, object name, object value, int where, Py_ssize_t index, str kind):
        return self.state._units(name, value)


cdef inline bint _aggregated(dict spec) except -1:
    # Whether the pod's requests need more than the sum over its containers.
    for field in _AGGREGATED:
        if spec.get(field):
            return True
    return False


cdef bint _in_range(object values) except -1:
    # Every value an int within the tables' per-entry range (0.._MAX_UNITS).
    for v in values:
        if not _unit_in_range(v):
            return False
    return True


cdef bint _unit_in_range(object value) except -1:
    # One value of _in_range, compared in C: a Python comparison against the C
    # constant boxed it for every value (~800 instructions a binding on the dict path).
    cdef long long units
    try:
        units = value
    except (OverflowError, TypeError):
        return False
    return 0 <= units <= _MAX_UNITS


# The pod spec fields _class_for's short path takes besides the containers: the profile
# (schedulerName, part of the class key), the PriorityClass's name (the class keeps it
# apart) and restartPolicy (no part of the class). The pods of a Volcano Job carry
# these (schemas/manifests.py volcano_task_pod); a spec with any other field takes the
# general path.
cdef frozenset _PROFILE_SPEC_FIELDS = frozenset(
    {"containers", "schedulerName", "priorityClassName", "restartPolicy"})
# Phase names -> codes (gang_members).
cdef dict _PHASE_CODES = {name: code for code, name in enumerate(PHASES)}
# _profile_key's results by scheduler name (a cluster runs a few profiles).
cdef dict _PROFILE_KEYS = {}


cdef str _profile_key(str sname):
    # The constraints key (_class_for's ``ckey``) of a spec whose only constraint is
    # its profile: "" for no schedulerName, else the general path's serialization of
    # such a spec (tests/core/test_fold_payloads.py checks the two agree).
    if not sname:
        return ""
    ckey = _PROFILE_KEYS.get(sname)
    if ckey is None:
        if len(_PROFILE_KEYS) >= 1024:
            _PROFILE_KEYS.clear()
        ckey = _PROFILE_KEYS[sname] = orjson.dumps(
            {"nodeSelector": None, "required": None, "tolerations": None,
             "schedulerName": sname}, option=orjson.OPT_SORT_KEYS).decode()
    return ckey


cdef inline bint _profile_only(dict spec) except -1:
    # A spec of _PROFILE_SPEC_FIELDS only, its schedulerName a string if set.
    for field in spec:
        if field not in _PROFILE_SPEC_FIELDS:
            return False
    sname = spec.get("schedulerName")
    return sname is None or type(sname) is str


# Classes made between two claims records' misses beyond which a claims-following
# state's class index is built again whole rather than kept up (_new_class).
cdef Py_ssize_t _CLASSES_MADE_MAX = 65536


cdef Py_ssize_t _class_of(ClusterState st, dict req, tuple nz, object prio, str ckey,
                          object pcn, dict lim=None) except -2:
    # ClusterState._class_for's last step: the class of these requests, limits above
    # them (``lim``), priority and constraints, found or made.
    # Limits above requests join the requests' part of the key as "limit:<name>".
    key = (tuple(req.items()) if lim is None
           else tuple(req.items()) + tuple([("limit:" + k, v) for k, v in lim.items()]),
           nz, prio, ckey, pcn)
    cdef Py_hash_t h = PyObject_Hash(key)
    cdef PyObject* cid = _PyDict_GetItem_KnownHash(st.class_index, key, h)
    if cid != NULL:
        return <object>cid
    if PyErr_Occurred() != NULL:
        return -2  # (the error set: this function's error value)
    # A new class: its totals must fit the tables (a known class was checked).
    if (not _in_range(req.values()) or not _in_range(nz)
            or not -_MAX_UNITS <= prio <= _MAX_UNITS
            or (lim is not None and not _in_range(
                [req.get(k, 0) + v for k, v in lim.items()]))):
        st._anomaly("overflow")
        return -1
    cdef Py_ssize_t i = st._new_class(key, req, nz, prio, ckey, pcn, lim)
    _PyDict_SetItem_KnownHash(st.class_index, key, i, h)
    return i


cdef class ClusterState:
    """The cluster as contiguous typed arrays, built only by folding events.

    ``ClusterState()`` is the empty state at position 0 (log positions start at 1).
    Public tables are numpy arrays (``allocatable_np``, ``allocated_np``, ...);
    rows of removed nodes and deleted pods are dead/free and may be reused.
    """

    def __cinit__(self, *args, **kwargs):
        self.position = 0
        self.anomalies = {}
        self.anomaly_first = {}
        self.tombstones = {}
        self.gated = {}
        self.scheduler_of = {}
        self.not_preemptable = {}
        self.claims_journal = None
        self._claims_classes = None
        self._classes_made = None
        self._at = 0
        self._unknown_counts = {}
        for i in range(32):
            self.type_counts[i] = 0
        self.res_names = []
        self.res_index = {}
        self.n_res = 0
        self.res_cap = DEF_RES
        self._units_memo = {}
        cdef _StateQuantities quantities = _StateQuantities.__new__(_StateQuantities)
        quantities.state = self
        self._quantities = quantities
        self._spec_memo = {}
        self._spec_recent = None
        self._resources_memo = {}

        self.n_nodes = 0
        self.node_cap = DEF_NODES
        self.node_names = []
        self.node_index = {}
        self.node_free = []
        self.node_labels = []
        self.node_taint_list = []
        self.label_words = 1
        self.taint_words = 1
        self.label_ids = {}
        self.label_strs = []
        self.taint_ids = {}
        self.taint_strs = []
        self.allocatable_np = np.zeros((DEF_NODES, DEF_RES), dtype=np.int64)
        self.allocated_np = np.zeros((DEF_NODES, DEF_RES), dtype=np.int64)
        self.version_np = np.zeros(DEF_NODES, dtype=np.int64)
        self.nz_np = np.zeros((DEF_NODES, 2), dtype=np.int64)
        self.flags_np = np.zeros(DEF_NODES, dtype=np.uint8)
        self.label_bits_np = np.zeros((DEF_NODES, 1), dtype=np.uint64)
        self.taint_bits_np = np.zeros((DEF_NODES, 1), dtype=np.uint64)

        self.n_pods = 0
        self.pod_cap = DEF_PODS
        self.pod_index = {}
        self.pod_keys = []
        self.pod_free = []
        self.pod_node_np = np.full(DEF_PODS, -1, dtype=np.int32)
        self.pod_class_np = np.full(DEF_PODS, -1, dtype=np.int32)
        self.pod_gang_np = np.full(DEF_PODS, -1, dtype=np.int32)
        self.pod_queue_np = np.full(DEF_PODS, -1, dtype=np.int32)
        self.pod_phase_np = np.full(DEF_PODS, PHASE_FREE, dtype=np.int8)
        self.pod_prio_np = np.zeros(DEF_PODS, dtype=np.int64)
        self.pod_alloc_np = np.zeros((DEF_PODS, DEF_RES), dtype=np.int64)
        self.pod_dev_np = np.zeros(DEF_PODS, dtype=np.int64)
        self.pod_start_np = np.zeros(DEF_PODS, dtype=np.int64)
        for i in range(4):
            self.phase_counts[i] = 0

        self.n_classes = 0
        self.class_cap = DEF_SMALL
        self.class_index = {}
        self.class_specs = []
        self.class_req_np = np.zeros((DEF_SMALL, DEF_RES), dtype=np.int64)
        self.class_nz_np = np.zeros((DEF_SMALL, 2), dtype=np.int64)
        self.class_flags_np = np.zeros(DEF_SMALL, dtype=np.uint8)
        self.class_ports = []
        self.class_refs_np = np.zeros(DEF_SMALL, dtype=np.int32)
        self.class_epoch_np = np.zeros(DEF_SMALL, dtype=np.int64)
        self.class_free = []
        self.class_keys = []
        self.class_memo_head = []
        self._cons_memo = {}
        self.class_gen = 0
        self.interpod = InterPodIndex(self, DEF_PODS)
        self.port_ids = {}
        self.port_strs = []
        self.port_words = 1
        self.port_bits_np = np.zeros((DEF_NODES, 1), dtype=np.uint64)
        self.node_ports = {}

        self.n_gangs = 0
        self.gang_cap = DEF_SMALL
        self.gang_index = {}
        self.gang_keys = []
        self.gang_meta = []
        self.gang_min_np = np.zeros(DEF_SMALL, dtype=np.int32)
        self.gang_counts_np = np.zeros((DEF_SMALL, 4), dtype=np.int64)
        self.gang_span_np = np.zeros((DEF_SMALL, 2), dtype=np.int32)

        self.n_queues = 0
        self.queue_cap = DEF_SMALL
        self.queue_index = {}
        self.queue_names = []
        self.queue_meta = []
        self.priority_classes = {}
        self.namespace_labels = {}
        self.queue_alloc_np = np.zeros((DEF_SMALL, DEF_RES), dtype=np.int64)
        self.queue_counts_np = np.zeros((DEF_SMALL, 4), dtype=np.int64)

        self._node_usage = {}
        self.clock = 0.0
        self.usage_max_age = USAGE_MAX_AGE
        self.usage_gen = 0
        self._usage_time = None
        self.pod_usage = {}
        self.reservations = {}
        self.reserved_nodes = {}
        self.class_lim_np = np.zeros((DEF_SMALL, DEF_RES), dtype=np.int64)
        self.pod_resv_np = np.zeros((DEF_PODS, DEF_RES), dtype=np.int64)
        self.pod_rtime_np = np.full((DEF_PODS, 2), np.nan, dtype=np.float64)
        self.node_lim_np = np.zeros((DEF_NODES, DEF_RES), dtype=np.int64)
        self.node_resv_np = np.zeros((DEF_NODES, DEF_RES), dtype=np.int64)
        self.res_rflags_np = np.zeros(DEF_RES, dtype=np.uint8)
        self._reclamation = DEFAULT_RECLAMATION
        self._bind_views()
        self.reclamation = current_reclamation()
        for name in BASE_RESOURCES:
            self._resource(name)

    def __init__(self, *, usage_max_age: float = USAGE_MAX_AGE) -> None:
        """An empty state at log position 0. ``usage_max_age``: seconds on the log's
        clock after which a node's usage report is ignored (:meth:`node_usage`); part
        of the fold's configuration, so every fold of one log must use the same."""
        if not usage_max_age > 0:
            raise ValueError("usage_max_age must be positive")
        self.usage_max_age = usage_max_age

    cdef void _bind_views(self):
        # Called after any table is replaced (growth, restore).
        self.allocatable = self.allocatable_np
        self.allocated = self.allocated_np
        self.version = self.version_np
        self.flags = self.flags_np
        self.label_bits = self.label_bits_np
        self.taint_bits = self.taint_bits_np
        self.pod_node = self.pod_node_np
        self.pod_class = self.pod_class_np
        self.pod_gang = self.pod_gang_np
        self.pod_queue = self.pod_queue_np
        self.pod_phase = self.pod_phase_np
        self.pod_prio = self.pod_prio_np
        self.pod_alloc = self.pod_alloc_np
        self.pod_dev = self.pod_dev_np
        self.pod_start = self.pod_start_np
        self.class_req = self.class_req_np
        self.class_nz = self.class_nz_np
        self.class_flags = self.class_flags_np
        self.class_lim = self.class_lim_np
        self.class_refs = self.class_refs_np
        self.class_epoch = self.class_epoch_np
        self.pod_resv = self.pod_resv_np
        self.pod_rtime = self.pod_rtime_np
        self.node_lim = self.node_lim_np
        self.node_resv = self.node_resv_np
        self.res_rflags = self.res_rflags_np
        self.port_bits = self.port_bits_np
        self.nz = self.nz_np
        self.gang_min = self.gang_min_np
        self.gang_counts = self.gang_counts_np
        self.gang_span = self.gang_span_np
        self.queue_alloc = self.queue_alloc_np
        self.queue_counts = self.queue_counts_np

    # ------------------------------------------------------------------ interning

    cdef Py_ssize_t _resource(self, str name) except -1:
        """Column of resource ``name``, registering it (and widening tables) if new."""
        col = self.res_index.get(name)
        if col is not None:
            return col
        cdef Py_ssize_t c = self.n_res
        if c >= self.res_cap:
            self.res_cap *= 2
            rc = self.res_cap
            self.allocatable_np = _grown(self.allocatable_np, self.node_cap, rc)
            self.allocated_np = _grown(self.allocated_np, self.node_cap, rc)
            self.pod_alloc_np = _grown(self.pod_alloc_np, self.pod_cap, rc)
            self.class_req_np = _grown(self.class_req_np, self.class_cap, rc)
            self.queue_alloc_np = _grown(self.queue_alloc_np, self.queue_cap, rc)
            self.class_lim_np = _grown(self.class_lim_np, self.class_cap, rc)
            self.pod_resv_np = _grown(self.pod_resv_np, self.pod_cap, rc)
            self.node_lim_np = _grown(self.node_lim_np, self.node_cap, rc)
            self.node_resv_np = _grown(self.node_resv_np, self.node_cap, rc)
            self.res_rflags_np = _grown(self.res_rflags_np, rc)
            self._bind_views()
        self.res_names.append(name)
        self.res_index[name] = c
        self.n_res = c + 1
        self._set_rflags(c)
        return c

    cdef void _set_rflags(self, Py_ssize_t col):
        # The reclamation switches of resource column ``col`` under this state's config.
        cfg = self._reclamation
        name = self.res_names[col]
        self.res_rflags[col] = ((RES_RECLAIM if cfg.reclaims(name) else 0)
                                | (RES_OVERCOMMIT if cfg.overcommits(name) else 0))

    @property
    def reclamation(self) -> ReclamationConfig:
        """The reservation rule's configuration (:mod:`esched.core.reservations`).

        Set it before folding: every fold of one log (replicas, the commit service,
        the audit, replay) must use the same, as with the bands.
        """
        return self._reclamation

    @reclamation.setter
    def reclamation(self, cfg: ReclamationConfig) -> None:
        cdef Py_ssize_t c, n
        switched = cfg.enabled != self._reclamation.enabled
        self._reclamation = cfg
        self.rc_on = cfg.enabled
        self.rc_hold = cfg.hold
        self.rc_tau = cfg.time_constant
        self.rc_margin = cfg.margin
        self.rc_burst = cfg.burst if cfg.enabled else 0.0
        for c in range(self.n_res):
            self._set_rflags(c)
        if switched and self.n_classes > 0:
            # Limits enter placement only with reclamation on (else limit = requests):
            # recompute them and the nodes' sums; reservations restart at the limits.
            from esched.core._snapshot import restore_limits
            restore_limits(self)
            self._bind_views()
            for n in range(self.n_nodes):
                self.version[n] += 1  # the placer's cached rows of every node are stale

    cdef units_t _units(self, str name, object value) except -1:
        """Base units of one quantity: the common spellings in C (core/_quantity.pxd:
        each usage report's values are new strings, so a memo of them misses), the
        rest by schemas.quantity, memoized (Fraction parsing is the fold's cost)."""
        cdef units_t units = quantity_units(value, name == "cpu")
        if units >= 0:
            return units
        memo = self._units_memo.get(name)
        if memo is None:
            memo = self._units_memo[name] = {}
        known = memo.get(value)
        if known is None:
            known = to_base_units(name, value)
            if len(memo) >= MEMO_LIMIT:
                memo.clear()
            memo[value] = known
        return known

    cdef dict _resource_list(self, object values, str field):
        """schemas.quantity.resource_list through :meth:`_units` (a Job's PodGroup
        repeats its tasks' quantities; usage reports are a dict a node): the same
        units, and the same error for a bad value; a list whose names or values
        :meth:`_units` does not take (not a string or an integer) the reference way."""
        if not values:
            return {}
        if type(values) is not dict:
            return resource_list(values, field)
        cdef dict out = {}
        for name, v in (<dict>values).items():
            if type(name) is not str or (type(v) is not str and type(v) is not int):
                return resource_list(values, field)
            out[name] = self._units(name, v)
        return out

    cdef Py_ssize_t _label_bit(self, str text) except -1:
        bit = self.label_ids.get(text)
        if bit is not None:
            return bit
        cdef Py_ssize_t b = len(self.label_strs)
        self.label_strs.append(text)
        self.label_ids[text] = b
        if b >= 64 * self.label_words:
            self.label_words *= 2
            self.label_bits_np = _grown(self.label_bits_np, self.node_cap, self.label_words)
            self._bind_views()
        return b

    cdef Py_ssize_t _port_bit(self, tuple key) except -1:
        bit = self.port_ids.get(key)
        if bit is not None:
            return bit
        cdef Py_ssize_t b = len(self.port_strs)
        self.port_strs.append(key)
        self.port_ids[key] = b
        if b >= 64 * self.port_words:
            self.port_words *= 2
            self.port_bits_np = _grown(self.port_bits_np, self.node_cap, self.port_words)
            self._bind_views()
            self.node_gen += 1  # compiled conflict masks are as wide as the old words
        return b

    def _intern_ports(self, Py_ssize_t c, list ports) -> None:
        # Class c binds ``ports`` ([ip, protocol, port], see objects.pod_host_ports):
        # intern every key it sets or conflicts with, so that a mask compiled for it
        # never misses a bit another class sets later.
        used, conflict = set(), set()
        for ip, proto, port in ports:
            any_key = self._port_bit(("*", proto, port))
            own = self._port_bit((ip, proto, port))
            wild = self._port_bit((BIND_ALL_HOST_IP, proto, port))
            used.add(any_key)
            used.add(own)
            if ip == BIND_ALL_HOST_IP:
                conflict.add(any_key)
            else:
                conflict.add(wild)
                conflict.add(own)
        self.class_ports[c] = (tuple(sorted(used)), tuple(sorted(conflict)))
        self.class_flags[c] |= CLASS_HOST_PORTS

    cdef int _ports_change(self, Py_ssize_t n, Py_ssize_t c, int sign) except -1:
        # A pod of class c binds (sign 1) or unbinds (-1) its host ports on node n.
        counts = self.node_ports.get(n)
        if counts is None:
            counts = self.node_ports[n] = {}
        for b in self.class_ports[c][0]:
            left = counts.get(b, 0) + sign
            if left > 0:
                counts[b] = left
            else:
                counts.pop(b, None)
        cdef Py_ssize_t w
        for w in range(self.port_words):
            self.port_bits[n, w] = 0
        for b in counts:
            self.port_bits[n, b >> 6] |= (<word_t>1) << (b & 63)
        if not counts:
            del self.node_ports[n]
        return 0

    def node_port_keys(self, Py_ssize_t n) -> dict:
        """Host-port keys bound on node slot ``n`` and how many pods bind each."""
        return {self.port_strs[b]: k for b, k in self.node_ports.get(n, {}).items()}

    cdef Py_ssize_t _taint_bit(self, tuple taint) except -1:
        bit = self.taint_ids.get(taint)
        if bit is not None:
            return bit
        cdef Py_ssize_t b = len(self.taint_strs)
        self.taint_strs.append(taint)
        self.taint_ids[taint] = b
        if b >= 64 * self.taint_words:
            self.taint_words *= 2
            self.taint_bits_np = _grown(self.taint_bits_np, self.node_cap, self.taint_words)
            self._bind_views()
        return b

    cdef Py_ssize_t _queue(self, str name) except -1:
        q = self.queue_index.get(name)
        if q is not None:
            return q
        cdef Py_ssize_t i = self.n_queues
        if i >= self.queue_cap:
            self.queue_cap *= 2
            self.queue_alloc_np = _grown(self.queue_alloc_np, self.queue_cap, self.res_cap)
            self.queue_counts_np = _grown(self.queue_counts_np, self.queue_cap, 4)
            self._bind_views()
        self.queue_names.append(name)
        self.queue_meta.append(_queue_defaults())
        self.queue_index[name] = i
        self.n_queues = i + 1
        return i

    cdef Py_ssize_t _gang(self, str key, str queue, dict meta=None) except -1:
        # ``meta``: a new gang's metadata when its PodGroup comes with it (set_podgroup),
        # rather than the placeholder below made only to be replaced; an existing
        # gang's is the caller's to set.
        g = self.gang_index.get(key)
        if g is not None:
            return g
        cdef Py_ssize_t i = self.n_gangs
        if i >= self.gang_cap:
            self.gang_cap *= 2
            self.gang_min_np = _grown(self.gang_min_np, self.gang_cap)
            self.gang_counts_np = _grown(self.gang_counts_np, self.gang_cap, 4)
            self.gang_span_np = _grown(self.gang_span_np, self.gang_cap, 2)
            self._bind_views()
        # Pods may name a gang before its PodGroup arrives: minMember 1 until it does.
        self.gang_keys.append(key)
        if meta is None:
            meta = {"queue": queue, "priorityClassName": None, "minResources": {}}
        self.gang_meta.append(meta)
        self.gang_index[key] = i
        self.gang_min[i] = 1
        self.n_gangs = i + 1
        return i

    cdef Py_ssize_t _class_for(self, dict pod, object node_group=None, bint pin=True) except -2:
        """Equivalence class of a pod: same requests, priority and constraints.

        ``node_group``: its queue's node-group affinity (``queue_meta[q]["affinity"]``),
        a constraint like the pod's own. ``pin``: ``spec.nodeName`` is a constraint
        (kube's NodeName filter); the fold passes False for a pod it binds at submission
        (already running there), so that those do not make a class per node. Returns -1
        (and counts an anomaly) when a quantity is invalid.
        """
        # Typed locals: dict methods and str compares compile to C calls, and a
        # wrongly-typed body raises TypeError, which the fold counts as malformed.
        cdef dict spec = pod.get("spec") or {}
        cdef dict req
        cdef dict lim                       # limits above requests (the pod's limit - requests)
        cdef bint has_ports, plain
        cdef PodSum total
        try:
            # The rule (schemas/_requests.pyx), with this state's memoized quantities.
            # A spec of containers only (the bulk of a log) also gets Borg's limits
            # above its requests and says whether a container lists ports; any other
            # shape lets pod_host_ports look.
            plain = not _aggregated(spec)
            total = pod_sum(spec, "requests", self._quantities, plain)
            if plain and not total.nonzero_within(_MAX_UNITS):
                raise OverflowError("scoring requests beyond the core's range")
            req = total.fit
            nz = (total.cpu, total.mem)
            lim = total.lim
            has_ports = total.ports or not plain
            prio = spec.get("priority")
            if prio is None:
                # kube's Priority admission: the class's value (a PriorityClass of the
                # log, else built-in), else the globalDefault class's, else 0.
                if spec.get("priorityClassName") or self.priority_classes:
                    prio = pod_priority(pod, self.priority_classes)
                else:
                    prio = 0
            else:
                prio = int(prio)
        except _MALFORMED:
            self._anomaly("invalid_pod")
            return -1
        if not has_ports and not node_group and _profile_only(spec):
            # Containers, perhaps with a profile, PriorityClass or restartPolicy (the
            # bulk of a log, a Volcano Job's pods included): no other constraint, so the
            # class key is the requests' with the profile's key (what the reads below
            # give for such a spec, without a dozen lookups of absent keys).
            return _class_of(self, req, nz, prio, _profile_key(spec.get("schedulerName")),
                             spec.get("priorityClassName") or None, lim)
        node_selector = spec.get("nodeSelector")
        tolerations = spec.get("tolerations")
        affinity = spec.get("affinity")
        required = preferred = None
        if affinity:
            required = ((affinity.get("nodeAffinity") or {})
                        .get("requiredDuringSchedulingIgnoredDuringExecution"))
            # scored (NodeAffinity), so part of the class like the required terms
            preferred = ((affinity.get("nodeAffinity") or {})
                         .get("preferredDuringSchedulingIgnoredDuringExecution"))
        # The profile that schedules the pod (a KubeSchedulerConfiguration's profiles
        # score differently): part of the class.
        sname = spec.get("schedulerName")
        node_name = spec.get("nodeName") if pin else None
        # The default (PreemptLowerPriority) stays out of the key: only Never changes
        # what the class may do.
        never = spec.get("preemptionPolicy") == "Never"
        # Inter-pod terms: required (kube's InterPodAffinity filter) and preferred (its
        # score, with the required affinity terms of bound pods: hardPodAffinityWeight).
        pod_aff = pod_anti = pref_aff = pref_anti = None
        if affinity:
            pa = affinity.get("podAffinity") or {}
            pn = affinity.get("podAntiAffinity") or {}
            pod_aff = pa.get("requiredDuringSchedulingIgnoredDuringExecution")
            pod_anti = pn.get("requiredDuringSchedulingIgnoredDuringExecution")
            pref_aff = pa.get("preferredDuringSchedulingIgnoredDuringExecution")
            pref_anti = pn.get("preferredDuringSchedulingIgnoredDuringExecution")
        # kube's PodTopologySpread filter: the DoNotSchedule constraints
        spread = [c for c in spec.get("topologySpreadConstraints") or ()
                  if isinstance(c, dict) and c.get("whenUnsatisfiable") == "DoNotSchedule"]
        # ... and its score: the ScheduleAnyway ones
        soft_spread = [c for c in spec.get("topologySpreadConstraints") or ()
                       if isinstance(c, dict) and c.get("whenUnsatisfiable") == "ScheduleAnyway"]
        try:
            ports = pod_host_ports(spec) if has_ports else None
        except _MALFORMED:
            self._anomaly("invalid_pod")
            return -1
        cdef str ckey = ""
        if (node_selector or tolerations or required or node_group or node_name or ports or never
                or preferred or sname or pod_aff or pod_anti or spread or pref_aff
                or pref_anti or soft_spread):
            cons = {"nodeSelector": node_selector or None, "required": required or None,
                    "tolerations": tolerations or None}
            if node_group:
                cons["nodeGroup"] = node_group
            if node_name:
                cons["nodeName"] = node_name
            if ports:
                cons["hostPorts"] = ports
            if never:
                cons["preemptionPolicy"] = "Never"
            if preferred:
                cons["preferred"] = preferred
            if sname:
                cons["schedulerName"] = sname
            if pod_aff:
                cons["podAffinity"] = pod_aff
            if pod_anti:
                cons["podAntiAffinity"] = pod_anti
            if spread:
                cons["topologySpread"] = spread
            if pref_aff:
                cons["podAffinityPreferred"] = pref_aff
            if pref_anti:
                cons["podAntiAffinityPreferred"] = pref_anti
            if soft_spread:
                cons["topologySpreadSoft"] = soft_spread
            ckey = orjson.dumps(cons, option=orjson.OPT_SORT_KEYS).decode()
        # Insertion order, not sorted: sorting cost more than the rest of the fold, and
        # the same manifest always lists resources in the same order.
        # priorityClassName is part of the class: the band config may map it to a band.
        pcn = spec.get("priorityClassName") or None
        return _class_of(self, req, nz, prio, ckey, pcn, lim)

    cdef Py_ssize_t _new_class(self, tuple key, dict req, tuple nz, long long prio, str ckey,
                               object pcn, dict lim) except -1:
        # The class of key ``key`` (not in class_index), made: _class_of's miss, which
        # enters it in class_index.
        cdef Py_ssize_t i
        cols = [self._resource(name) for name in req]
        lim_cols = [self._resource(name) for name in lim] if lim else []
        if self.class_free:
            # A released id (its rows zeroed by _release_class): readers that keep
            # something per class id drop it when they see the epoch move.
            i = heappop(self.class_free)
            self.class_gen += 1
            self.class_epoch[i] = self.class_gen
        else:
            i = self.n_classes
            if i >= self.class_cap:
                self.class_cap *= 2
                self.class_req_np = _grown(self.class_req_np, self.class_cap, self.res_cap)
                self.class_nz_np = _grown(self.class_nz_np, self.class_cap, 2)
                self.class_flags_np = _grown(self.class_flags_np, self.class_cap)
                self.class_lim_np = _grown(self.class_lim_np, self.class_cap, self.res_cap)
                self.class_refs_np = _grown(self.class_refs_np, self.class_cap)
                self.class_epoch_np = _grown(self.class_epoch_np, self.class_cap)
                self._bind_views()
            self.n_classes = i + 1
            self.class_specs.append(None)
            self.class_ports.append(None)
            self.class_keys.append(None)
            self.class_memo_head.append(None)
        made = self._classes_made
        if made is not None:
            # (a claims-following state's index of classes by fingerprint: kept up)
            if len(<list>made) < _CLASSES_MADE_MAX:
                (<list>made).append(i)
            else:
                self._classes_made = None  # (indexed again whole at the claims' next miss)
        self.class_nz[i, 0] = nz[0]
        self.class_nz[i, 1] = nz[1]
        cdef Py_ssize_t k = 0, col
        # (a dict's values walked in C beside the list: no zip object per class)
        for units in req.values():
            col = <Py_ssize_t>cols[k]
            k += 1
            self.class_req[i, col] = units
            self.class_lim[i, col] = units
        if lim and self._reclamation.enabled:
            # Reclamation off (the default): the limit is the requests, as kube's
            # NodeResourcesFit, which places by requests only.
            for col, extra in zip(lim_cols, lim.values()):
                self.class_lim[i, col] += extra
        spec = interpod = None
        if ckey:
            # Classes of one constraints key (one profile: every class of a Volcano
            # Job's pods) share its decoding, read only as every reader does, while
            # one of them lives (_release_class).
            known = self._cons_memo.get(ckey)
            if known is None:
                spec = orjson.loads(ckey)
                interpod = bool(spec and (
                    spec.get("podAffinity") or spec.get("podAntiAffinity")
                    or spec.get("topologySpread") or spec.get("podAffinityPreferred")
                    or spec.get("podAntiAffinityPreferred") or spec.get("topologySpreadSoft")))
                known = self._cons_memo[ckey] = [spec, interpod, 0]
            (<list>known)[2] += 1
            spec, interpod = (<list>known)[0], (<list>known)[1]
        class_spec = {"requests": dict(req)}
        if lim:
            # The spec keeps the limits either way: a later switch recomputes from it.
            # (Listed after the requests: the snapshot keeps this key order.)
            class_spec["limits"] = {
                name: int(req.get(name, 0) + extra) for name, extra in lim.items()}
        class_spec["nonzero"] = list(nz)
        class_spec["priority"] = prio
        class_spec["priorityClassName"] = pcn
        class_spec["constraints"] = spec
        self.class_specs[i] = class_spec
        self.class_keys[i] = key
        self.class_flags[i] = 0
        if type(spec) is dict and (<dict>spec).get("hostPorts"):
            self._intern_ports(i, spec["hostPorts"])
        if interpod:
            self.class_flags[i] |= CLASS_INTERPOD
        return i

    cdef int _hold_class(self, Py_ssize_t p, Py_ssize_t c, Py_ssize_t old) except -1:
        # Pod slot p holds class c now, and no longer ``old`` (-1: none; a replaced
        # pod's class), which is released when no slot holds it any more.
        self.pod_class[p] = <index_t>c
        self.class_refs[c] += 1  # (first: old == c is not released)
        if old >= 0:
            self.class_refs[old] -= 1
            if self.class_refs[old] == 0:
                self._release_class(old)
        return 0

    cdef int _release_class(self, Py_ssize_t c) except -1:
        # Class c is held by no pod slot: out of class_index, its rows zeroed, the spec
        # memo entries naming it dropped, the inter-pod index's memos of it forgotten;
        # its id is free for the next new class.
        cdef Py_ssize_t r
        key = <tuple>self.class_keys[c]
        ckey = key[3]
        known = self._cons_memo.get(ckey) if ckey else None
        last = False
        if known is not None:
            (<list>known)[2] -= 1
            if (<list>known)[2] == 0:
                del self._cons_memo[ckey]
                last = True
        self.interpod.forget_class(c, last)
        del self.class_index[key]
        self.class_keys[c] = None
        self.class_specs[c] = None
        self.class_ports[c] = None
        self.class_flags[c] = 0
        self.class_nz[c, 0] = 0
        self.class_nz[c, 1] = 0
        for r in range(self.res_cap):
            self.class_req[c, r] = 0
            self.class_lim[c, r] = 0
        m = self.class_memo_head[c]
        if m is not None:
            self.class_memo_head[c] = None
            while m is not None:
                nxt = (<list>m)[4]
                (<list>m)[4] = None
                (<list>m)[0] = -1
                (<list>m)[1] = -1
                got = self._spec_memo.get((<list>m)[3])
                if got is not None and (<tuple>got)[1] is m:
                    del self._spec_memo[(<list>m)[3]]
                m = nxt
            self._spec_recent = None  # (it may hold the entries dropped)
        heappush(self.class_free, c)
        return 0

    cdef int _memo_class(self, list memo, object q, Py_ssize_t c) except -1:
        # Spec memo list ``memo`` ([queue, class, priority, its _spec_memo key, the
        # next list naming the same class]) names class c for queue q now: linked into
        # c's chain (class_memo_head), which _release_class walks to drop the entries.
        # A list naming a class already keeps it (the same spec in another queue is
        # classed each time): linked again, it would cut the other class's chain.
        if memo[1] >= 0:
            return 0
        memo[0] = q
        memo[1] = c
        memo[2] = self.class_specs[c]["priority"]
        memo[4] = self.class_memo_head[c]
        self.class_memo_head[c] = memo
        return 0

    cdef int _clear_spec_memo(self) except -1:
        # The spec memo emptied (full, or its classes stale): so are the lists its
        # entries' classes know them by, and the recent entries.
        self._spec_memo.clear()
        self._spec_recent = None
        self.class_memo_head = [None] * len(self.class_memo_head)
        return 0

    # ------------------------------------------------------------------ accounting

    cdef void _bind(self, Py_ssize_t p, Py_ssize_t n) noexcept:
        # pod_alloc[p] already holds what the binding allocates.
        cdef Py_ssize_t r, q = self.pod_queue[p]
        cdef units_t v
        for r in range(self.n_res):
            v = self.pod_alloc[p, r]
            self.allocated[n, r] += v
            self.queue_alloc[q, r] += v
        cdef Py_ssize_t c = self.pod_class[p]
        # Reclamation: the limit counts on the node; the reservation starts equal to it.
        for r in range(self.n_res):
            v = self.class_lim[c, r]
            self.node_lim[n, r] += v
            self.node_resv[n, r] += v
            self.pod_resv[p, r] = v
        self.pod_rtime[p, 0] = NAN
        self.pod_rtime[p, 1] = NAN
        self.nz[n, 0] += self.class_nz[c, 0]
        self.nz[n, 1] += self.class_nz[c, 1]
        self.pod_node[p] = <index_t>n
        # Its start, as kube's preemption orders victims by it: the binding's place
        # in the log, the same in every state that folds it (a claims record carries it).
        self.pod_start[p] = self._at
        self.version[n] += 1
        if self.class_flags[c] & CLASS_HOST_PORTS:
            self._ports_change(n, c, 1)
        if self.interpod.active or self.class_flags[c] & CLASS_INTERPOD:
            self.interpod.move(p, n, c if self.class_flags[c] & CLASS_INTERPOD else -1, 1)

    cdef void _release(self, Py_ssize_t p) noexcept:
        cdef Py_ssize_t r, n = self.pod_node[p], q = self.pod_queue[p]
        cdef units_t v
        if n < 0:
            return
        for r in range(self.n_res):
            v = self.pod_alloc[p, r]
            self.allocated[n, r] -= v
            self.queue_alloc[q, r] -= v
            self.pod_alloc[p, r] = 0
        cdef Py_ssize_t c = self.pod_class[p]
        for r in range(self.n_res):
            self.node_lim[n, r] -= self.class_lim[c, r]
            self.node_resv[n, r] -= self.pod_resv[p, r]
            self.pod_resv[p, r] = 0
        self.pod_dev[p] = 0
        self.pod_start[p] = 0
        if self.interpod.active or self.class_flags[c] & CLASS_INTERPOD:
            self.interpod.move(p, n, c if self.class_flags[c] & CLASS_INTERPOD else -1, -1)
        self.nz[n, 0] -= self.class_nz[c, 0]
        self.nz[n, 1] -= self.class_nz[c, 1]
        self.pod_node[p] = -1
        self.version[n] += 1
        if self.class_flags[c] & CLASS_HOST_PORTS:
            self._ports_change(n, c, -1)

    cdef void _set_phase(self, Py_ssize_t p, int phase) noexcept:
        cdef int old = self.pod_phase[p]
        cdef Py_ssize_t g = self.pod_gang[p], q = self.pod_queue[p]
        if old >= 0:
            self.phase_counts[old] -= 1
            self.queue_counts[q, old] -= 1
            if g >= 0:
                self.gang_counts[g, old] -= 1
        if phase >= 0:
            self.phase_counts[phase] += 1
            self.queue_counts[q, phase] += 1
            if g >= 0:
                self.gang_counts[g, phase] += 1
        self.pod_phase[p] = phase

    cdef void _set_gang(self, Py_ssize_t p, Py_ssize_t g) noexcept:
        # The one place a pod slot joins a gang, so the gang's span holds the slot.
        self.pod_gang[p] = <index_t>g
        if g < 0:
            return
        if self.gang_span[g, 1] == 0:
            self.gang_span[g, 0] = <index_t>p
            self.gang_span[g, 1] = <index_t>(p + 1)
        elif p < self.gang_span[g, 0]:
            self.gang_span[g, 0] = <index_t>p
        elif p >= self.gang_span[g, 1]:
            self.gang_span[g, 1] = <index_t>(p + 1)

    cdef void _index_gang_spans(self) noexcept:
        # After a restore: the spans from the pods' gangs (tight, as if folded anew).
        cdef Py_ssize_t p, g
        self.gang_span[:, :] = 0
        for p in range(self.n_pods):
            g = self.pod_gang[p]
            if g >= 0:
                self._set_gang(p, g)

    cdef void _anomaly(self, str reason):
        count = self.anomalies.get(reason, 0)
        if not count:
            self.anomaly_first[reason] = self._at
        self.anomalies[reason] = count + 1

    cdef bint _charge_fits(self, Py_ssize_t p, Py_ssize_t n) noexcept:
        # Whether binding pod p to node n keeps the node's and the queue's allocation
        # within the core's range (a pod bound by spec.nodeName is charged without a
        # fit check, so many of them could otherwise wrap a node's int64 total).
        # Totals stay below _MAX_UNITS, so total + any one request (<= _MAX_UNITS, as
        # the feasibility check adds them) is still an int64.
        cdef Py_ssize_t r, q = self.pod_queue[p]
        cdef units_t v
        for r in range(self.n_res):
            v = self.pod_alloc[p, r]
            if v < 0 or v > _MAX_UNITS - 1:
                return False
            if self.allocated[n, r] > _MAX_UNITS - 1 - v or self.queue_alloc[q, r] > _MAX_UNITS - 1 - v:
                return False
        return True

    cdef Py_ssize_t _new_pod_slot(self, str key) except -1:
        cdef Py_ssize_t p
        if self.pod_free:
            p = self.pod_free.pop()
            self.pod_keys[p] = key
        else:
            p = self.n_pods
            if p >= self.pod_cap:
                self.pod_cap *= 2
                cap = self.pod_cap
                self.pod_node_np = _grown(self.pod_node_np, cap)
                self.pod_node_np[p:] = -1
                self.pod_class_np = _grown(self.pod_class_np, cap)
                self.pod_gang_np = _grown(self.pod_gang_np, cap)
                self.pod_queue_np = _grown(self.pod_queue_np, cap)
                self.pod_phase_np = _grown(self.pod_phase_np, cap)
                self.pod_phase_np[p:] = PHASE_FREE
                self.pod_prio_np = _grown(self.pod_prio_np, cap)
                self.pod_alloc_np = _grown(self.pod_alloc_np, cap, self.res_cap)
                self.pod_dev_np = _grown(self.pod_dev_np, cap)
                self.pod_start_np = _grown(self.pod_start_np, cap)
                self.pod_resv_np = _grown(self.pod_resv_np, cap, self.res_cap)
                rt = np.full((cap, 2), np.nan, dtype=np.float64)
                rt[:p] = self.pod_rtime_np[:p]
                self.pod_rtime_np = rt
                self._bind_views()
            self.n_pods = p + 1
            self.pod_keys.append(key)
        self.pod_index[key] = p
        return p

    cdef Py_ssize_t _new_node_slot(self, str name) except -1:
        cdef Py_ssize_t n
        if self.node_free:
            n = self.node_free.pop()
            self.node_names[n] = name
            self.node_labels[n] = {}
            self.node_taint_list[n] = []
        else:
            n = self.n_nodes
            if n >= self.node_cap:
                self.node_cap *= 2
                cap = self.node_cap
                self.allocatable_np = _grown(self.allocatable_np, cap, self.res_cap)
                self.allocated_np = _grown(self.allocated_np, cap, self.res_cap)
                self.version_np = _grown(self.version_np, cap)
                self.nz_np = _grown(self.nz_np, cap, 2)
                self.flags_np = _grown(self.flags_np, cap)
                self.label_bits_np = _grown(self.label_bits_np, cap, self.label_words)
                self.taint_bits_np = _grown(self.taint_bits_np, cap, self.taint_words)
                self.port_bits_np = _grown(self.port_bits_np, cap, self.port_words)
                self.node_lim_np = _grown(self.node_lim_np, cap, self.res_cap)
                self.node_resv_np = _grown(self.node_resv_np, cap, self.res_cap)
                self._bind_views()
            self.n_nodes = n + 1
            self.node_names.append(name)
            self.node_labels.append({})
            self.node_taint_list.append([])
        self.node_index[name] = n
        self.node_gen += 1
        return n

    def apply_payloads(self, rows) -> int:
        """Fold ``(position, payload)`` pairs, payloads being stored envelope bytes.

        The same fold as :meth:`apply_many` over ``orjson.loads(payload)``, with the
        same errors; it decodes the bulk event types (pod submitted and finished,
        placements committed) into just the fields their handlers read, without a
        dict per JSON object. Returns how many were folded.
        """
        cdef long long count = 0, position
        for position, payload in rows:
            if position <= self.position:
                raise PositionError(position, self.position)
            self._at = position
            _fold_payload(self, payload)
            self.position = position
            count += 1
        return count

    def apply_claims(self, bytes record, own=None, list released=None) -> int:
        """Apply a claims record (:func:`esched.core._claims.claims_record` of a fold
        that saw every event): each pod it binds enters bound, as the fold of its
        submission and committed placement would leave it; each it releases leaves
        the state. ``own``: a bitmap (bit i of byte i // 8) of the work partitions
        whose pods this state folds from their events, whose operations are skipped.
        Returns how many operations changed the state. See ``core/_claims.pyx`` for
        what such a state does not hold and the order records must keep with the
        events folded beside them. ``released``: a list that gets the key of every pod
        the record releases, whether the state held it or not (a Pending pod of
        another partition, withdrawn before it was bound, is released too).

        A pod the record binds that the state holds Pending (entered from its
        submission by :meth:`enter_payloads`) is bound in place: its slot, class,
        queue, gang and labels are the record's, as the fold would leave them.
        """
        return _apply_claims(self, record, own, released)

    def enter_payloads(self, rows) -> int:
        """Fold ``(position, payload)`` pairs of pod submissions and updates out of
        log order, without moving :attr:`position`: a state that follows the log by
        claims records (:meth:`apply_claims`) enters the Pending pods it is to place
        from their submissions when their work comes, whatever position it has reached.

        Each event is folded as :meth:`apply_payloads` folds it (at its own position,
        for its anomalies' and tombstones' positions): a submission of a pod the state
        holds bound is refused (``resubmitted_running_pod``), one of a Pending pod
        replaces it. A submission whose ``spec.nodeName`` names a node the state has
        now would be bound by name, though the fold at its position may have left it
        Pending (the node unknown then): such a pod is not entered (it leaves the
        state; ``entered_bound_by_name``), only a claim binds it. The caller passes only
        ``esched.pod.submitted`` and ``esched.pod.updated`` payloads. Returns how many
        were folded.
        """
        cdef long long count = 0, position, at = self.position
        journal = self.claims_journal
        self.claims_journal = []
        try:
            for position, payload in rows:
                self._at = position
                _fold_payload(self, payload)
                if self.claims_journal:
                    for kind, key in self.claims_journal:
                        if kind == CLAIM_BOUND:
                            self._anomaly("entered_bound_by_name")
                            _pod_finish(self, key, PHASE_FREE)
                    self.claims_journal = []
                count += 1
        finally:
            self.position = at
            self.claims_journal = journal
        return count

    cpdef apply(self, dict event, long long position):
        """Fold one stored event envelope at log ``position`` into this state.

        Raises :class:`PositionError` if ``position`` is not after :attr:`position`;
        otherwise never raises for a dict envelope (odd events count as anomalies).
        """
        if position <= self.position:
            raise PositionError(position, self.position)
        self._at = position
        try:
            _apply(self, event)
        except _UNAPPLICABLE:
            self._anomaly("unapplicable")
        self.position = position

    def apply_many(self, events) -> int:
        """Fold ``(position, event)`` pairs in order; returns how many were folded."""
        cdef long long count = 0, position
        for position, event in events:
            if position <= self.position:
                raise PositionError(position, self.position)
            self._at = position
            try:
                _apply_any(self, event)
            except _UNAPPLICABLE:
                self._anomaly("unapplicable")
            self.position = position
            count += 1
        return count

    # ------------------------------------------------------------------ reading

    @property
    def event_counts(self) -> dict[str, int]:
        """Events folded per type (unknown types included)."""
        return event_counts(self)

    # (the larger reports: core/_state_views.pyx)

    def summary(self) -> dict:
        """The stable JSON view: position, node totals, pods per phase, gangs, queues,
        reservations."""
        from esched.core._state_views import summary
        return summary(self)

    def reclamation_view(self) -> dict:
        """Borg's reclamation per alive node and resource the node's pods limit:
        ``limit`` (what production pods are placed against), ``reservation`` (the
        pods' reservations), ``reserved`` (min(limit, reservation + burst): what the
        others are placed against), ``usage`` (the pods' last reported usage),
        ``reclaimed`` (limit - reserved); and the same summed over the cluster.
        With reclamation off (the default) every pod is judged by its requests:
        ``accounting`` says ``requests`` and limit = reserved = the requests."""
        from esched.core._state_views import reclamation_view
        return reclamation_view(self)

    def pod(self, key: str) -> dict | None:
        """One pod's record (phase, node, class, gang, queue, priority, allocation,
        the scheduling gates it still waits for) or None."""
        idx = self.pod_index.get(key)
        if idx is None:
            return None
        cdef Py_ssize_t p = idx, r
        n = self.pod_node[p]
        g = self.pod_gang[p]
        return {
            "key": key,
            "phase": PHASES[self.pod_phase[p]],
            "node": self.node_names[n] if n >= 0 else None,
            "class": int(self.pod_class[p]),
            "gang": self.gang_keys[g] if g >= 0 else None,
            "queue": self.queue_names[self.pod_queue[p]],
            "priority": int(self.pod_prio[p]),
            "allocated": {self.res_names[r]: int(self.pod_alloc[p, r])
                          for r in range(self.n_res) if self.pod_alloc[p, r] != 0},
            "schedulingGates": list(self.gated.get(key, ())),
        }

    def node(self, name: str) -> dict | None:
        """One node's record (allocatable, allocated, labels, taints, flags, version) or None."""
        idx = self.node_index.get(name)
        if idx is None:
            return None
        cdef Py_ssize_t n = idx, r
        return {
            "name": name,
            "allocatable": {self.res_names[r]: int(self.allocatable[n, r])
                            for r in range(self.n_res)},
            "allocated": {self.res_names[r]: int(self.allocated[n, r])
                          for r in range(self.n_res)},
            "labels": dict(self.node_labels[n]),
            "taints": [list(t) for t in self.node_taint_list[n]],
            "unschedulable": bool(self.flags[n] & NODE_UNSCHEDULABLE),
            "version": int(self.version[n]),
        }

    def intern_class(self, dict pod) -> int:
        """Equivalence class id of a pod manifest, creating the class if new.

        Classes are a side table (like the quantity memo): interning one changes no
        fold-visible state. Raises QuantityError for invalid quantities.
        """
        pod_requests(pod)  # raises with the field at fault, before any side effect
        q = self.queue_index.get(pod_queue(pod))
        return self._class_for(pod, self.queue_meta[<Py_ssize_t>q].get("affinity")
                               if q is not None else None)

    def pod_class_id(self, key: str) -> int:
        """Equivalence class id of a pod in the table (KeyError if unknown)."""
        return int(self.pod_class[<Py_ssize_t>self.pod_index[key]])

    def gang_members(self, key: str, phase: str | None = None) -> list[str]:
        """Pod keys of a gang (optionally only those in ``phase``), in slot order."""
        got = self.gang_index.get(key)
        if got is None:
            return []
        cdef Py_ssize_t g = got, p, left = -1
        cdef int ph = PHASE_FREE
        cdef list keys = self.pod_keys, out = []
        if phase is not None:
            # The names' codes looked up in a dict, not through phase_code's call (a
            # one-pod gang's pass asks twice); any other value gets phase_code's error.
            got_ph = _PHASE_CODES.get(phase) if type(phase) is str else None
            ph = got_ph if got_ph is not None else _phases.phase_code(phase)
            left = self.gang_counts[g, ph]  # members in that phase: stop once all found
        # Only the gang's span of slots (a one-pod gang's: one slot), not every pod.
        for p in range(self.gang_span[g, 0], self.gang_span[g, 1]):
            if left == 0:
                break
            if self.pod_gang[p] == g and (phase is None or self.pod_phase[p] == ph):
                out.append(keys[p])
                left -= 1
        return out

    def gang_min_member(self, key: str) -> int:
        """minMember of a gang (1 until its PodGroup says otherwise); KeyError if unknown."""
        return int(self.gang_min[<Py_ssize_t>self.gang_index[key]])

    def pending_pods(self) -> list[str]:
        """Keys of Pending pods, in slot order."""
        idx = np.flatnonzero(self.pod_phase_np[: self.n_pods] == PHASE_PENDING)
        keys = self.pod_keys
        return [keys[i] for i in idx]

    # ------------------------------------------------------------------ read API
    #
    # What the services and the Python core modules read, by name. Rows are slots
    # (``pod_index`` / ``node_index`` / ``gang_index`` / ``queue_index`` map names to
    # them); resource columns follow ``res_names[:n_res]``. Scalar accessors take one
    # slot (IndexError outside the rows in use); table accessors return read-only
    # numpy views of the rows in use, valid until the next fold (a fold may grow and
    # replace a table): copy what has to outlive it.

    cdef int _check_pod(self, Py_ssize_t p) except -1:
        if p < 0 or p >= self.n_pods:
            raise IndexError(f"pod slot {p} outside 0..{self.n_pods - 1}")
        return 0

    cdef int _check_node(self, Py_ssize_t n) except -1:
        if n < 0 or n >= self.n_nodes:
            raise IndexError(f"node slot {n} outside 0..{self.n_nodes - 1}")
        return 0

    cdef int _check_gang(self, Py_ssize_t g) except -1:
        if g < 0 or g >= self.n_gangs:
            raise IndexError(f"gang {g} outside 0..{self.n_gangs - 1}")
        return 0

    def phase_of(self, Py_ssize_t p) -> int:
        """Phase code (``esched.core.PHASE_*``) of the pod in slot ``p``
        (``PHASE_FREE`` for an empty slot)."""
        self._check_pod(p)
        return self.pod_phase[p]

    def node_of(self, Py_ssize_t p) -> int:
        """Node slot the pod in slot ``p`` is bound to, or -1."""
        self._check_pod(p)
        return self.pod_node[p]

    def queue_of(self, Py_ssize_t p) -> int:
        """Queue row (see ``queue_names``) of the pod in slot ``p``."""
        self._check_pod(p)
        return self.pod_queue[p]

    def gang_of(self, Py_ssize_t p) -> int:
        """Gang row (see ``gang_keys``) of the pod in slot ``p``, or -1."""
        self._check_pod(p)
        return self.pod_gang[p]

    def class_preempts(self, Py_ssize_t cid) -> bool:
        """Whether pods of class ``cid`` may evict others to fit (kube's
        ``preemptionPolicy``: ``Never``, the pods' own or their PriorityClass's, keeps
        them waiting instead: :func:`esched.core.bands.never_preempts`); the one question
        the scheduling pass, gang plans, reclaim and the commit service ask."""
        return not never_preempts(self.class_specs[cid], self.priority_classes)

    def class_of(self, Py_ssize_t p) -> int:
        """Equivalence class (see ``class_specs``) of the pod in slot ``p``."""
        self._check_pod(p)
        return self.pod_class[p]

    def priority_of(self, Py_ssize_t p) -> int:
        """Priority of the pod in slot ``p``."""
        self._check_pod(p)
        return self.pod_prio[p]

    def allocation_of(self, Py_ssize_t p):
        """What the pod in slot ``p``'s binding allocated, per resource (zeros when
        unbound): a read-only int64 view of ``n_res`` columns."""
        self._check_pod(p)
        return _readonly(self.pod_alloc_np[p, : self.n_res])

    def pod_phases(self):
        """Phase code per pod slot (``PHASE_FREE`` for empty slots); read-only int8."""
        return _readonly(self.pod_phase_np[: self.n_pods])

    def pod_nodes(self):
        """Bound node slot per pod slot (-1 unbound); read-only int32."""
        return _readonly(self.pod_node_np[: self.n_pods])

    def pod_queues(self):
        """Queue row per pod slot; read-only int32."""
        return _readonly(self.pod_queue_np[: self.n_pods])

    def pod_gangs(self):
        """Gang row per pod slot (-1 none); read-only int32."""
        return _readonly(self.pod_gang_np[: self.n_pods])

    def pod_classes(self):
        """Equivalence class per pod slot; read-only int32."""
        return _readonly(self.pod_class_np[: self.n_pods])

    def pod_priorities(self):
        """Priority per pod slot; read-only int64."""
        return _readonly(self.pod_prio_np[: self.n_pods])

    def pod_starts(self):
        """Per pod slot, the log position of the binding that started it (0: not
        bound); read-only int64. Preemption orders victims of equal priority by it, as
        kube does by ``status.startTime``."""
        return _readonly(self.pod_start_np[: self.n_pods])

    def pod_allocations(self):
        """[pod slot, resource] what each binding allocated; read-only int64."""
        return _readonly(self.pod_alloc_np[: self.n_pods, : self.n_res])

    def phase_count(self, int phase) -> int:
        """How many pods are in ``phase`` (a ``PHASE_*`` code other than ``PHASE_FREE``)."""
        if phase < PHASE_PENDING or phase > PHASE_FAILED:
            raise ValueError(f"not a pod phase code: {phase}")
        return self.phase_counts[phase]

    def pods_in_phase(self, int phase):
        """Slots of the pods in ``phase``, ascending (an int64 array)."""
        return np.flatnonzero(self.pod_phase_np[: self.n_pods] == phase)

    def pods_on_node(self, Py_ssize_t n) -> list[str]:
        """Keys of the pods bound to node slot ``n``, in slot order."""
        self._check_node(n)
        keys = self.pod_keys
        return [keys[p] for p in np.flatnonzero(self.pod_node_np[: self.n_pods] == n)]

    def gang_count(self, Py_ssize_t g, int phase) -> int:
        """Members of gang ``g`` in ``phase`` (a ``PHASE_*`` code)."""
        self._check_gang(g)
        if phase < PHASE_PENDING or phase > PHASE_FAILED:
            raise ValueError(f"not a pod phase code: {phase}")
        return self.gang_counts[g, phase]

    def gang_min_of(self, Py_ssize_t g) -> int:
        """minMember of gang ``g`` (1 until its PodGroup says otherwise)."""
        self._check_gang(g)
        return self.gang_min[g]

    def gang_shortfall(self, Py_ssize_t g) -> int:
        """Members gang ``g`` still needs Running to reach minMember (0 when it has them)."""
        self._check_gang(g)
        return max(0, self.gang_min[g] - self.gang_counts[g, PHASE_RUNNING])

    def node_allocatable(self):
        """[node slot, resource] what the scheduler may allocate (dead slots included,
        see :meth:`node_alive`); read-only int64."""
        return _readonly(self.allocatable_np[: self.n_nodes, : self.n_res])

    def node_allocated(self):
        """[node slot, resource] the sum of the bound pods' allocations; read-only int64."""
        return _readonly(self.allocated_np[: self.n_nodes, : self.n_res])

    # --- reclamation (Borg 5.5): limits, reservations, what is reclaimed ---

    def class_limits(self):
        """[class, resource] the limits (Kubernetes ``limits``, else requests); read-only."""
        return _readonly(self.class_lim_np[: self.n_classes, : self.n_res])

    def pod_limit(self, Py_ssize_t p):
        """Pod slot ``p``'s limits per resource (its class's); read-only int64."""
        self._check_pod(p)
        return _readonly(self.class_lim_np[self.pod_class[p], : self.n_res])

    def pod_reservation(self, Py_ssize_t p):
        """Pod slot ``p``'s reservation per resource (0 while unbound); read-only int64."""
        self._check_pod(p)
        return _readonly(self.pod_resv_np[p, : self.n_res])

    def pod_reservations(self):
        """[pod slot, resource] the reservations of bound pods (0 unbound); read-only."""
        return _readonly(self.pod_resv_np[: self.n_pods, : self.n_res])

    def node_limits(self):
        """[node slot, resource] the sum of the bound pods' limits: what production
        pods are placed against; read-only int64."""
        return _readonly(self.node_lim_np[: self.n_nodes, : self.n_res])

    def node_reservations(self):
        """[node slot, resource] the sum of the bound pods' reservations; read-only."""
        return _readonly(self.node_resv_np[: self.n_nodes, : self.n_res])

    def node_burst(self):
        """[node slot, resource] the capacity kept back for bursts: ``burst`` x
        allocatable of each reclaimed resource, 0 for the others."""
        cdef Py_ssize_t N = self.n_nodes, R = self.n_res
        share = np.where(self.res_rflags_np[:R] & RES_RECLAIM, self.rc_burst, 0.0)
        return (self.allocatable_np[:N, :R] * share).astype(np.int64)

    def node_reserved(self):
        """[node slot, resource] the accounting by reservations, what non-production
        pods are placed against: min(limits, reservations + burst)."""
        return np.minimum(self.node_lim_np[: self.n_nodes, : self.n_res],
                          self.node_resv_np[: self.n_nodes, : self.n_res] + self.node_burst())

    def node_reclaimed(self):
        """[node slot, resource] what reclamation frees for non-production pods:
        limits - the accounting by reservations (>= 0)."""
        return self.node_lim_np[: self.n_nodes, : self.n_res] - self.node_reserved()

    def node_alive(self):
        """Per node slot, whether the node exists (a removed node's slot is dead)."""
        return (self.flags_np[: self.n_nodes] & NODE_ALIVE) != 0

    def is_alive(self, Py_ssize_t n) -> bool:
        """Whether node slot ``n`` holds a node (not a removed one's slot)."""
        self._check_node(n)
        return bool(self.flags[n] & NODE_ALIVE)

    def class_requests(self):
        """[class, resource] each equivalence class's requests; read-only int64."""
        return _readonly(self.class_req_np[: self.n_classes, : self.n_res])

    def queue_allocations(self):
        """[queue row, resource] what each queue's bound pods hold; read-only int64."""
        return _readonly(self.queue_alloc_np[: self.n_queues, : self.n_res])

    def label_words_of(self, Py_ssize_t n):
        """Node slot ``n``'s interned label bitset (bit ``label_ids[text]``); read-only
        uint64 words."""
        self._check_node(n)
        return _readonly(self.label_bits_np[n, : self.label_words])

    def taint_words_of(self, Py_ssize_t n):
        """Node slot ``n``'s interned taint bitset (bit ``taint_ids[taint]``); read-only
        uint64 words."""
        self._check_node(n)
        return _readonly(self.taint_bits_np[n, : self.taint_words])

    # ------------------------------------------------------------------ measured load

    def node_usage(self, str name) -> dict | None:
        """Node ``name``'s last reported usage (``{resource: base units}``, from the
        ``nodes[]`` of ``esched.usage.reported``), or None when it has none or the
        report is stale: older than :attr:`usage_max_age` seconds on the log's clock
        (:attr:`clock`, the newest report time folded; never the wall clock, so
        a replay sees what the live fold saw)."""
        entry = self._node_usage.get(name)
        if entry is None or entry[0] < self.clock - self.usage_max_age:
            return None
        return dict(entry[1])

    def usage_rows(self):
        """The fresh reported usage of every node slot, for the placer: ``(measured,
        usage)``, a uint8 array over slots (1: a fresh report, see :meth:`node_usage`)
        and an int64 array ``[slot, column]`` of base units (0 where not measured or
        not a registered resource). New arrays, the caller's to keep."""
        measured = np.zeros(self.n_nodes, dtype=np.uint8)
        usage = np.zeros((self.n_nodes, self.n_res), dtype=np.int64)
        cutoff = self.clock - self.usage_max_age
        for name, (at, values) in self._node_usage.items():
            idx = self.node_index.get(name)
            if idx is None or at < cutoff:
                continue
            measured[idx] = 1
            for rname, units in values.items():
                col = self.res_index.get(rname)
                if col is not None:
                    usage[idx, col] = units
        return measured, usage

    # ------------------------------------------------------------------ snapshots
    # (core/_snapshot.pyx)

    def tables(self) -> dict:
        """The raw tables by name (rows in use), read-only, as snapshots serialize them:
        for layout checks and debugging; scheduling code reads the accessors above."""
        from esched.core._snapshot import tables
        return tables(self)

    def to_bytes(self) -> bytes:
        """Snapshot: magic, 8-byte header length, orjson header, raw little-endian tables."""
        from esched.core._snapshot import to_bytes
        return to_bytes(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> "ClusterState":
        """Restore a state written by :meth:`to_bytes`."""
        from esched.core._snapshot import from_bytes
        return from_bytes(cls, data)

    def __reduce__(self):
        return (ClusterState.from_bytes, (self.to_bytes(),))

    def copy(self) -> "ClusterState":
        """An independent deep copy (via a snapshot)."""
        return ClusterState.from_bytes(self.to_bytes())


# ---------------------------------------------------------------------- class memos

@cython.final
@cython.auto_pickle(False)  # derived: kept beside a live state, never saved
cdef class ClassMemo:
    """Values derived from a state's equivalence classes, kept by class id.

    A class is released with its last pod and its id given to a later new class
    (the smallest released id first): a value derived from class ``c`` is valid only
    while ``c`` names the class it was derived from. The state moves
    :attr:`ClusterState.class_gen` whenever it gives a released id to a new class and
    records the id's ``class_epoch_np`` then; this memo is the one place that compares
    them. Each look (:meth:`values`, :meth:`get`, :meth:`put`, :meth:`reused`) first
    drops the values of the ids reused since the last look, so a keeper never sees
    another class's value under an id and never compares generations itself.

    A keeper of Python values uses the memo as a dict (:meth:`get` / :meth:`put`, or
    :meth:`values` once per pass); a keeper of per-class C arrays (the placer) asks
    :meth:`reused` once per pass and forgets those ids' rows itself. A memo keys one
    state's classes: :meth:`on` gives a keeper whose state may change one for the
    state it reads now.
    """

    def __init__(self, ClusterState state=None):
        self.state = state
        self.gen = state.class_gen if state is not None else 0
        self.vals = {}

    def on(self, ClusterState state):
        """This memo if it keys ``state``'s classes, else a new empty one that does."""
        return self if state is self.state else ClassMemo(state)

    cdef list _reused(self):
        # The ids given to new classes since gen (ascending), their values dropped;
        # gen is now the state's.
        cdef ClusterState st = self.state
        cdef long long gen = self.gen
        cdef long long[::1] epoch = st.class_epoch
        cdef Py_ssize_t c
        cdef list out = []
        for c in range(st.n_classes):
            if epoch[c] > gen:
                out.append(c)
        self.gen = st.class_gen
        if self.vals:
            for c in out:
                self.vals.pop(c, None)
        return out

    def reused(self) -> list | None:
        """The class ids the state gave to new classes since the last look, ascending
        (their values dropped), or None when it gave none: a keeper of per-class rows
        forgets these ids' rows."""
        if not self.stale():
            return None
        return self._reused()

    def values(self) -> dict:
        """The values by class id, each still its class's: the dict itself, valid (to
        read and fill) until the state next gives a released id to a new class (a fold,
        or a class interned for a manifest)."""
        if self.stale():
            self._reused()
        return self.vals

    def get(self, Py_ssize_t cid, default=None):
        """The value kept for class ``cid`` (``default``: none, or made for the class
        that had the id before)."""
        if self.stale():
            self._reused()
        return self.vals.get(cid, default)

    def put(self, Py_ssize_t cid, value) -> None:
        """Keep ``value``, derived from class ``cid`` as the state has it now."""
        if self.stale():
            self._reused()
        self.vals[cid] = value

    def clear(self) -> None:
        """Forget every value (what they were derived from changed for every class)."""
        self.vals.clear()
