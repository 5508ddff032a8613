"""Claims: the committed bindings and releases of a fold, as one compact binary record.

A replica whose state need not be the whole log's fold can follow the pods of other
replicas' work partitions by their claims alone: where a pod is bound (its node, its
allocation, its class, labels, queue, gang and GPU devices) and when it leaves its
node, rather than by folding each pod's submission and decision events. The fold
that sees every event (the commit service's) keeps a journal of the pods it binds
and releases (``ClusterState.claims_journal``, a list: None, the default, keeps
none); :func:`claims_record` turns the journal into a record and empties it;
:meth:`ClusterState.apply_claims` applies a record to another state through the
fold's own handlers (``_pod_enter``, ``_bind_allocated``, ``_pod_finish`` in
``core/_fold.pyx``), so a bound pod ends exactly as the fold of its events leaves it:
its node's and queue's accounting, its label set in the inter-pod index, its class
(requests, limits, constraints, priority), its priority and GPU devices.

What a claims-following state does not hold: the pods of other partitions while
they are Pending (a claim brings a pod in bound; a release takes it out entirely,
whatever the phase its events gave it: Succeeded, Failed, Pending again after an
eviction, deleted), their ``scheduler_of`` entries and their gang-size annotations.

Order: a record applies its operations in the order the fold made them, as one
step; the events the following state folds itself (nodes, queues, PodGroups,
PriorityClasses, its own partitions' pods) must not fall between the first and
the last event a record covers, or the record applies out of order (a pod bound to
a node the state has since removed). The writer cuts records there.

Layout (little endian): ``ECL5``, then six tables, each a u32 count of entries:
resource names, node names and queue names and gang keys (u16 length + UTF-8; a
node's followed by its u32 slot in the writer's state, which a follower that folded
the same node events has it at: checked by name, else the name is looked up), class
definitions (a 64-bit fingerprint of the definition, the fold's ``bytes_hash``
(``core/_fold_bytes.pxd``), then u32
length + the class's key, ``_definition``), label sets (u8
owned + u32 length + the labels as a JSON object, empty for none); then a u32 count
of operations, each a u8 kind (1: bound, 0: released), a u16 partition
(``NO_PARTITION``: none), the pod's key (u16 length + UTF-8), and for a bound pod:
u32 node, class, label set, queue and gang (``NONE``: none) indexes into the
tables, a u8 of flags (``NOT_PREEMPTABLE``), an i64 of GPU device bits, the i64 log
position of the binding (the pod's start, ``ClusterState.pod_starts``) and a u8
count of (u8 resource index, i64 units) pairs, the binding's allocation.
"""

import orjson

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy
from cpython.mem cimport PyMem_Free, PyMem_Malloc

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object o, Py_ssize_t* size) except NULL
    bint PyUnicode_IS_ASCII(object o)
    bint PyUnicode_IS_COMPACT_ASCII(object o)
    bint PyUnicode_CheckExact(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    str PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void* PyUnicode_DATA(object o)

from esched.core._fold cimport (
    CLAIM_BOUND, CLAIM_RELEASED, _bind_allocated, _pod_enter, _pod_finish,
)
from esched.core._fold_bytes cimport bytes_hash, node_slot
from esched.core._state cimport ClusterState, _class_of, class_stamp, class_still
from esched.core._types cimport PHASE_FREE, PHASE_RUNNING

__all__ = ["MAGIC", "NONE", "NOT_PREEMPTABLE", "NO_PARTITION", "ClaimsError", "claims_record"]

#: First bytes of a claims record; bump the digit when the layout changes.
MAGIC = b"ECL5"
# (C values, read in the loop over a record's operations without a Python object)
cdef uint32_t _NONE = 0xFFFFFFFF
cdef int _NOT_PREEMPTABLE = 1
#: A table index for "none" (no label set, no gang).
NONE = _NONE
#: The partition of a pod outside every work partition.
NO_PARTITION = 0xFFFF
#: Flag of a bound pod: volcano.sh/preemptable false (ClusterState.not_preemptable).
NOT_PREEMPTABLE = _NOT_PREEMPTABLE


class ClaimsError(ValueError):
    """A claims record that is not one (truncated, or another layout)."""


cdef class _Table:
    # Distinct values of one table of a record being built, in first-use order.
    cdef dict index
    cdef list items

    def __cinit__(self):
        self.index = {}
        self.items = []

    cdef uint32_t of(self, object value) except? 0xFFFFFFFF:
        got = self.index.get(value)
        if got is None:
            got = self.index[value] = len(self.items)
            self.items.append(value)
        return got


def _text(str s) -> bytes:
    raw = s.encode()
    if len(raw) > 0xFFFF:
        raise ClaimsError(f"a name of {len(raw)} bytes")
    return len(raw).to_bytes(2, "little") + raw


cdef int _name_utf8_other(object name, const char** b, Py_ssize_t* n) except -1:
    # _name_utf8 of a name that is not an ASCII str of at most 0xFFFF characters.
    if type(name) is not str:
        raise ClaimsError(f"a name of type {type(name).__name__}")
    b[0] = PyUnicode_AsUTF8AndSize(name, n)  # (cached in the str by Python)
    if n[0] > 0xFFFF:
        raise ClaimsError(f"a name of {n[0]} bytes")
    return 0


cdef inline int _name_utf8(object name, const char** b, Py_ssize_t* n) except -1:
    # A name's UTF-8: an ASCII str's own characters, without a call.
    if PyUnicode_CheckExact(name) and PyUnicode_IS_ASCII(name):
        n[0] = PyUnicode_GET_LENGTH(name)
        if n[0] <= 0xFFFF:
            b[0] = <const char*>PyUnicode_DATA(name)
            return 0
    return _name_utf8_other(name, b, n)


cdef inline char* _put_i64(char* w, int64_t v) noexcept:
    memcpy(w, &v, 8)
    return w + 8


cdef inline char* _put_text(char* w, const char* b, Py_ssize_t n) noexcept:
    cdef uint16_t k = <uint16_t>n
    memcpy(w, &k, 2)
    memcpy(w + 2, b, n)
    return w + 2 + n


cdef bytes _definition(tuple key):
    # A class's definition in a record: its class_index key (see _class_of in
    # core/_state.pyx: requests then limits above them as "limit:<name>" items, the
    # non-zero cpu and memory, priority, constraints key, priorityClassName), as
    # u8 count + (name, i64 units) for the requests, the same for the limits, three
    # i64 (non-zero cpu, memory, priority), u32 length + the constraints key, u16
    # length + the priorityClassName (0xFFFF: none). Written in C, sized first: every
    # class of a state is written once when a claims-following state indexes its
    # classes (_index_classes).
    items = <tuple>key[0]
    nz = <tuple>key[1]
    ckey = <str>key[3]
    pcn = key[4]
    cdef Py_ssize_t n_items = len(items), i, n, n_lim = 0, size = 2 + 24 + 4 + 2
    cdef Py_ssize_t n_ckey, n_pcn = 0
    cdef const char* b
    cdef const char* b_ckey = PyUnicode_AsUTF8AndSize(ckey, &n_ckey)
    cdef const char* b_pcn = NULL
    if pcn is not None:
        _name_utf8(pcn, &b_pcn, &n_pcn)
        size += n_pcn
    if n_ckey > 0xFFFFFFFF:
        raise ClaimsError("a constraints key beyond 4 GiB")
    size += n_ckey
    for i in range(n_items):
        _name_utf8((<tuple>items[i])[0], &b, &n)
        if n >= 6 and memcmp(b, b"limit:", 6) == 0:
            n_lim += 1
            n -= 6
        size += 2 + n + 8
    if n_items - n_lim > 255 or n_lim > 255:
        raise ClaimsError("a class of more than 255 resources")
    out = PyBytes_FromStringAndSize(NULL, size)
    cdef char* w = PyBytes_AS_STRING(out)
    cdef bint lim
    cdef int half
    for half in range(2):
        lim = half == 1
        w[0] = <char>(n_lim if lim else n_items - n_lim)
        w += 1
        for i in range(n_items):
            item = <tuple>items[i]
            _name_utf8(item[0], &b, &n)
            if (n >= 6 and memcmp(b, b"limit:", 6) == 0) != lim:
                continue
            w = _put_text(w, b + 6, n - 6) if lim else _put_text(w, b, n)
            w = _put_i64(w, item[1])
    w = _put_i64(w, nz[0])
    w = _put_i64(w, nz[1])
    w = _put_i64(w, key[2])
    cdef uint32_t k = <uint32_t>n_ckey
    memcpy(w, &k, 4)
    memcpy(w + 4, b_ckey, n_ckey)
    w += 4 + n_ckey
    if pcn is None:
        memcpy(w, b"\xff\xff", 2)
    else:
        _put_text(w, b_pcn, n_pcn)
    return out


def claims_record(ClusterState state, partition_of=None) -> bytes:
    """The claims of ``state``'s journal (``state.claims_journal``), which it empties.

    ``partition_of``: pod key -> its work partition (an int below ``NO_PARTITION``),
    written with each operation so that a follower skips its own partitions' pods
    (it folds their events itself); None: every pod ``NO_PARTITION``. A bound pod is
    written as the state holds it now (a pod bound and released again within the
    journal is written bound, then released: applied in order, the record leaves the
    state the journal's end left it); a pod bound in the journal that is not bound
    now is written only by its releases.
    """
    journal = state.claims_journal
    if journal is None:
        raise ValueError("the state keeps no claims journal (claims_journal is None)")
    state.claims_journal = []
    cdef _Table res = _Table(), nodes = _Table(), queues = _Table(), gangs = _Table()
    cdef _Table classes = _Table(), lsets = _Table()
    cdef Py_ssize_t p, r, lid, n_ops = 0
    cdef object interpod = state.interpod
    ops = []
    res_names = state.res_names
    for kind, key in journal:
        part = NO_PARTITION if partition_of is None else int(partition_of(key))
        if not 0 <= part <= NO_PARTITION:
            raise ClaimsError(f"partition {part} of {key!r}")
        if kind == CLAIM_RELEASED:
            ops.append(b"\x00" + part.to_bytes(2, "little") + _text(key))
            n_ops += 1
            continue
        idx = state.pod_index.get(key)
        if idx is None:
            continue
        p = idx
        if state.pod_phase[p] != PHASE_RUNNING:
            continue
        node = nodes.of(int(state.pod_node[p]))  # (by slot: its name written below)
        cls = classes.of(_definition(state.class_keys[state.pod_class[p]]))
        lid = interpod.pod_lset_np[p] if p < interpod.pod_lset_np.shape[0] else -1
        if lid >= 0:
            labels = interpod.lsets[lid][1]
            lset = lsets.of((bool(interpod.lset_owned[lid]),
                             orjson.dumps(labels) if labels else b""))
        else:
            lset = NONE
        queue = queues.of(state.queue_names[state.pod_queue[p]])
        g = state.pod_gang[p]
        gang = gangs.of(state.gang_keys[g]) if g >= 0 else NONE
        flags = NOT_PREEMPTABLE if key in state.not_preemptable else 0
        alloc = [(res.of(res_names[r]), int(state.pod_alloc[p, r]))
                 for r in range(state.n_res) if state.pod_alloc[p, r] != 0]
        ops.append(b"".join([
            b"\x01", part.to_bytes(2, "little"), _text(key),
            node.to_bytes(4, "little"), cls.to_bytes(4, "little"),
            lset.to_bytes(4, "little"), queue.to_bytes(4, "little"),
            gang.to_bytes(4, "little"), flags.to_bytes(1, "little"),
            int(state.pod_dev[p]).to_bytes(8, "little", signed=True),
            int(state.pod_start[p]).to_bytes(8, "little", signed=True),
            len(alloc).to_bytes(1, "little"),
            b"".join([i.to_bytes(1, "little") + u.to_bytes(8, "little", signed=True)
                      for i, u in alloc]),
        ]))
        n_ops += 1
    out = [MAGIC]
    for table in (res, nodes, queues, gangs):
        out.append(len(table.items).to_bytes(4, "little"))
        if table is nodes:
            out += [_text(state.node_names[n]) + n.to_bytes(4, "little") for n in nodes.items]
        else:
            out += [_text(s) for s in table.items]
    out.append(len(classes.items).to_bytes(4, "little"))
    for d in classes.items:
        fp = bytes_hash(<const unsigned char*>PyBytes_AS_STRING(d), PyBytes_GET_SIZE(d))
        out += [fp.to_bytes(8, "little"), len(d).to_bytes(4, "little"), d]
    out.append(len(lsets.items).to_bytes(4, "little"))
    for owned, raw in lsets.items:
        out += [b"\x01" if owned else b"\x00", len(raw).to_bytes(4, "little"), raw]
    out.append(n_ops.to_bytes(4, "little"))
    out += ops
    return b"".join(out)


# ------------------------------------------------------------------ applying a record

cdef struct _Reader:
    const unsigned char* b
    Py_ssize_t i
    Py_ssize_t n


cdef inline int _need(_Reader* rd, Py_ssize_t k) except -1:
    if rd.i + k > rd.n:
        raise ClaimsError("truncated claims record")
    return 0


cdef inline uint32_t _r_u32(_Reader* rd) except? 0xFFFFFFFF:
    cdef uint32_t v
    _need(rd, 4)
    memcpy(&v, rd.b + rd.i, 4)
    rd.i += 4
    return v


cdef inline uint16_t _r_u16(_Reader* rd) except? 0xFFFF:
    cdef uint16_t v
    _need(rd, 2)
    memcpy(&v, rd.b + rd.i, 2)
    rd.i += 2
    return v


cdef inline int64_t _r_i64(_Reader* rd) except? -1:
    cdef int64_t v
    _need(rd, 8)
    memcpy(&v, rd.b + rd.i, 8)
    rd.i += 8
    return v


cdef inline str _r_text(_Reader* rd):
    cdef Py_ssize_t k = _r_u16(rd)
    _need(rd, k)
    s = PyUnicode_DecodeUTF8(<const char*>(rd.b + rd.i), k, NULL)
    rd.i += k
    return s


cdef inline bint _ascii(const unsigned char* b, Py_ssize_t n) noexcept:
    # (eight bytes at a time: every pod's key is checked)
    cdef Py_ssize_t i = 0
    cdef uint64_t w, bits = 0
    while i + 8 <= n:
        memcpy(&w, b + i, 8)
        bits |= w
        i += 8
    while i < n:
        bits |= b[i]
        i += 1
    return (bits & 0x8080808080808080ULL) == 0


cdef inline str _r_key(_Reader* rd):
    # A pod's key: an ASCII key copied into a new str without a decoder run over it
    # (Kubernetes names are ASCII), any other decoded as UTF-8.
    cdef Py_ssize_t k = _r_u16(rd)
    _need(rd, k)
    cdef const unsigned char* b = rd.b + rd.i
    rd.i += k
    if not _ascii(b, k):
        return PyUnicode_DecodeUTF8(<const char*>b, k, NULL)
    text = PyUnicode_New(k, 127)
    memcpy(PyUnicode_DATA(text), b, k)
    return text


cdef Py_ssize_t _node_of(ClusterState self, _Reader* rd, Py_ssize_t at) except -2:
    # The slot of the record's node at offset ``at`` (u16 length + UTF-8 + the
    # writer's u32 slot), or -1: the writer's slot when this state has the name there
    # (the fold keeps a name at a slot exactly while node_index maps it there), which
    # spares hashing the name (~190 instructions a pod), else found by name.
    cdef uint16_t k
    cdef uint32_t hint
    memcpy(&k, rd.b + at, 2)
    memcpy(&hint, rd.b + at + 2 + k, 4)
    cdef list names = self.node_names
    if hint < <uint32_t>len(names):
        there = names[hint]
        if (type(there) is str and PyUnicode_IS_COMPACT_ASCII(there)
                and PyUnicode_GET_LENGTH(there) == k
                and memcmp(PyUnicode_DATA(there), rd.b + at + 2, k) == 0):
            return hint
    if _ascii(rd.b + at + 2, k):
        return node_slot(self, rd.b + at + 2, k)
    return self.node_index.get(PyUnicode_DecodeUTF8(<const char*>(rd.b + at + 2), k, NULL), -1)


cdef list _r_texts(_Reader* rd):
    cdef uint32_t k = _r_u32(rd), j
    return [_r_text(rd) for j in range(k)]


cdef str _r_name(ClusterState self, _Reader* rd):
    # A resource name of a definition: the state's own str of a resource it has (its
    # hash kept: the class key is hashed at once), else decoded.
    cdef Py_ssize_t k = _r_u16(rd), r, n
    _need(rd, k)
    cdef const unsigned char* b = rd.b + rd.i
    cdef const char* known
    rd.i += k
    for r in range(self.n_res):
        name = self.res_names[r]
        known = PyUnicode_AsUTF8AndSize(name, &n)
        if n == k and memcmp(known, b, k) == 0:
            return <str>name
    return PyUnicode_DecodeUTF8(<const char*>b, k, NULL)


cdef dict _r_units(ClusterState self, _Reader* rd):
    # A definition's u8 count of (name, i64 units), as the dict _class_of takes.
    _need(rd, 1)
    cdef Py_ssize_t k = rd.b[rd.i], j
    rd.i += 1
    out = {}
    for j in range(k):
        name = _r_name(self, rd)
        out[name] = _r_i64(rd)
    return out


# Entries of a state's class index (ClusterState._claims_classes) beyond twice its live
# classes and this, at which it is built again from them (its stale entries, of
# released classes, dropped).
cdef Py_ssize_t _INDEX_SLACK = 4096
cdef class _ClassIndex:
    # A state's classes by definition fingerprint (ClusterState._claims_classes, see
    # _index_classes): open addressing over C arrays (a lookup makes no Python int),
    # the definitions in a list beside them. Entries are overwritten, never removed:
    # one is checked at each use (_indexed).
    cdef uint64_t* fps
    cdef Py_ssize_t* ids                 # class id; -1: an empty slot
    cdef long long* epochs               # the class's epoch when entered
    cdef list defs                       # the class's definition
    cdef Py_ssize_t cap, n               # slots (a power of two, or 0), entries

    def __cinit__(self):
        self.fps = NULL
        self.ids = NULL
        self.epochs = NULL
        self.defs = []
        self.cap = 0
        self.n = 0

    def __dealloc__(self):
        PyMem_Free(self.fps)
        PyMem_Free(self.ids)
        PyMem_Free(self.epochs)

    cdef inline Py_ssize_t slot(self, uint64_t fp) noexcept:
        # The slot of ``fp``, or the empty slot where it would go (cap > 0).
        cdef Py_ssize_t m = self.cap - 1, i = <Py_ssize_t>(fp & <uint64_t>m)
        while self.ids[i] != -1 and self.fps[i] != fp:
            i = (i + 1) & m
        return i

    cdef int reset(self, Py_ssize_t cap) except -1:
        # Emptied, with ``cap`` slots.
        PyMem_Free(self.fps)
        PyMem_Free(self.ids)
        PyMem_Free(self.epochs)
        self.fps = <uint64_t*>PyMem_Malloc(cap * sizeof(uint64_t))
        self.ids = <Py_ssize_t*>PyMem_Malloc(cap * sizeof(Py_ssize_t))
        self.epochs = <long long*>PyMem_Malloc(cap * sizeof(long long))
        if self.fps == NULL or self.ids == NULL or self.epochs == NULL:
            self.cap = 0
            raise MemoryError()
        cdef Py_ssize_t i
        for i in range(cap):
            self.ids[i] = -1
        self.defs = [None] * cap
        self.cap = cap
        self.n = 0
        return 0

    cdef int put(self, uint64_t fp, Py_ssize_t c, long long epoch, bytes d) except -1:
        cdef Py_ssize_t i, old_cap = self.cap
        cdef uint64_t* fps
        cdef Py_ssize_t* ids
        cdef long long* epochs
        if 2 * (self.n + 1) > self.cap:
            fps, ids, epochs, defs = self.fps, self.ids, self.epochs, self.defs
            self.fps = NULL  # (the old arrays kept for the copy below)
            self.ids = NULL
            self.epochs = NULL
            try:
                self.reset(max(1024, 2 * old_cap))
                for i in range(old_cap):
                    if ids[i] != -1:
                        self.put(fps[i], ids[i], epochs[i], <bytes>defs[i])
            finally:
                PyMem_Free(fps)
                PyMem_Free(ids)
                PyMem_Free(epochs)
        i = self.slot(fp)
        if self.ids[i] == -1:
            self.n += 1
        self.fps[i] = fp
        self.ids[i] = c
        self.epochs[i] = epoch
        self.defs[i] = d
        return 0


cdef inline _ClassIndex _index_of(ClusterState self):
    # The state's class index, made empty at first.
    if self._claims_classes is None:
        self._claims_classes = _ClassIndex()
    return <_ClassIndex>self._claims_classes


cdef int _index_classes(ClusterState self) except -1:
    # The state's class index by fingerprint (_ClassIndex) brought up to date: the
    # classes made since it was last (ClusterState._classes_made, which _new_class
    # appends to), or, first (_classes_made None: never built, or too many made since),
    # every live class of the state (its snapshot's, its own fold's). A class a record
    # names that the state already has is then found by its fingerprint, without its
    # definition read.
    cdef list made = self._classes_made
    cdef _ClassIndex index = _index_of(self)
    cdef Py_ssize_t cap = 1024, i, j, n
    cdef bint whole = made is None or index.n > 2 * len(self.class_index) + _INDEX_SLACK
    if whole:
        while cap < 2 * (self.n_classes + 1):  # (room for them all: put rehashes none)
            cap *= 2
        index.reset(cap)
        n = self.n_classes
    else:
        n = len(made)
    self._classes_made = []
    cdef uint64_t fp
    for j in range(n):  # (in C: every class of the state, the first time)
        i = j if whole else <Py_ssize_t>made[j]
        key = self.class_keys[i]
        if key is None:
            continue
        try:
            d = _definition(<tuple>key)
        except (ClaimsError, OverflowError, TypeError):
            continue  # (no record can name it either)
        fp = bytes_hash(<const unsigned char*>PyBytes_AS_STRING(d), PyBytes_GET_SIZE(d))
        index.put(fp, i, class_stamp(self, i), d)
    return 0


cdef inline Py_ssize_t _indexed(ClusterState self, uint64_t fp, const unsigned char* b,
                                uint32_t length) except -2:
    # The class of fingerprint ``fp`` in the state's index whose definition is the
    # ``length`` bytes at ``b``, or -1: none (a class released, or its id given to
    # another class since: its epoch moved; another definition of that fingerprint).
    cdef _ClassIndex index = _index_of(self)
    if index.cap == 0:
        return -1
    cdef Py_ssize_t i = index.slot(fp), c = index.ids[i]
    if c < 0:
        return -1
    known = <bytes>index.defs[i]
    if (class_still(self, c, index.epochs[i])
            and PyBytes_GET_SIZE(known) == length
            and memcmp(PyBytes_AS_STRING(known), b, length) == 0):
        return c
    return -1


cdef Py_ssize_t _class_from(ClusterState self, _Reader* rd, Py_ssize_t at) except -2:
    # The class of the record's definition at offset ``at`` (fingerprint, length,
    # bytes): found in the state's index of its classes by fingerprint (the index
    # brought up to date at a miss, _index_classes), else found or made as the fold
    # does (_class_of, from the same key) and indexed. A definition is read once per
    # class the state has not had, not once per pod.
    cdef Py_ssize_t c
    cdef uint32_t length
    cdef uint64_t fp
    memcpy(&fp, rd.b + at, 8)
    memcpy(&length, rd.b + at + 8, 4)
    cdef const unsigned char* b = rd.b + at + 12
    c = _indexed(self, fp, b, length)
    if c >= 0:
        return c
    if self._classes_made is None or len(self._classes_made) > 0:
        _index_classes(self)
        c = _indexed(self, fp, b, length)
        if c >= 0:
            return c
    definition = PyBytes_FromStringAndSize(<const char*>b, length)
    cdef _Reader d  # (the definition alone: a length beyond it is refused)
    d.b = b
    d.i = 0
    d.n = length
    req = _r_units(self, &d)
    lim = _r_units(self, &d)
    nz_cpu = _r_i64(&d)
    nz = (nz_cpu, _r_i64(&d))
    prio = _r_i64(&d)
    cdef uint32_t k = _r_u32(&d)
    _need(&d, k)
    ckey = PyUnicode_DecodeUTF8(<const char*>(d.b + d.i), k, NULL)
    d.i += k
    _need(&d, 2)
    if d.b[d.i] == 0xFF and d.b[d.i + 1] == 0xFF:
        pcn = None
        d.i += 2
    else:
        pcn = _r_text(&d)
    if d.i != d.n:
        raise ClaimsError("bytes after a class definition")
    c = _class_of(self, req, nz, prio, ckey, pcn, lim or None)
    if c >= 0:
        made = self._classes_made
        if made and made[len(made) - 1] == c:
            made.pop()  # (made just now: indexed here, under the record's fingerprint)
        _index_of(self).put(fp, c, class_stamp(self, c), definition)
    return c


cdef inline bint _skipped(const unsigned char[::1] own, Py_ssize_t part) noexcept:
    # Whether partition ``part`` is one of ``own``'s (a bitmap: bit i of byte i // 8).
    return (own is not None and part < own.shape[0] * 8
            and (own[part >> 3] >> (part & 7)) & 1)


cdef class _Slots:
    # A C array of Py_ssize_t for one record's tables (freed with the object).
    cdef Py_ssize_t* v

    def __cinit__(self, Py_ssize_t n, Py_ssize_t fill):
        cdef Py_ssize_t i
        self.v = <Py_ssize_t*>PyMem_Malloc(max(n, 1) * sizeof(Py_ssize_t))
        if self.v == NULL:
            raise MemoryError()
        for i in range(n):
            self.v[i] = fill

    def __dealloc__(self):
        PyMem_Free(self.v)


cdef enum:
    UNRESOLVED = -2                     # a table entry no operation has used yet


cdef long long _apply_claims(ClusterState self, bytes record, object own_bits,
                             list released) except -1:
    # ClusterState.apply_claims: see its docstring and this module's. The record's
    # tables are resolved against the state once per record, at their first use, into
    # C arrays: an operation then reads its node, class, queue, gang and resources'
    # slots without a Python object.
    cdef _Reader rd, at_name
    rd.b = <const unsigned char*>PyBytes_AS_STRING(record)
    rd.n = PyBytes_GET_SIZE(record)
    rd.i = 4
    if rd.n < 4 or memcmp(rd.b, PyBytes_AS_STRING(<bytes>MAGIC), 4) != 0:
        raise ClaimsError("not a claims record")
    cdef const unsigned char[::1] own = own_bits
    cdef uint32_t k, j, ops, v
    cdef Py_ssize_t length
    # The resource names where they are, each read at its first use as the state's
    # own str (_r_name): not decoded and hashed anew per record. (An operation's
    # resource index is a u8: the entries beyond 256 cannot be named.)
    cdef Py_ssize_t res_at[256]
    k = _r_u32(&rd)
    cdef Py_ssize_t nr = k
    for j in range(k):
        if j < 256:
            res_at[j] = rd.i
        length = _r_u16(&rd)
        _need(&rd, length)
        rd.i += length
    k = _r_u32(&rd)
    cdef Py_ssize_t nn = k, nd, nq, ng, nl
    cdef _Slots node_at = _Slots(nn, 0)
    for j in range(k):
        node_at.v[j] = rd.i
        length = _r_u16(&rd)
        _need(&rd, length + 4)
        rd.i += length + 4
    cdef list queue_names = _r_texts(&rd), gang_keys = _r_texts(&rd)
    nq = len(queue_names)
    ng = len(gang_keys)
    k = _r_u32(&rd)
    nd = k
    cdef _Slots def_at = _Slots(nd, 0)
    for j in range(k):
        def_at.v[j] = rd.i
        _need(&rd, 8)
        rd.i += 8
        length = _r_u32(&rd)
        _need(&rd, length)
        rd.i += length
    k = _r_u32(&rd)
    cdef list lset_raw = []
    for j in range(k):
        _need(&rd, 1)
        owned = rd.b[rd.i] != 0
        rd.i += 1
        length = _r_u32(&rd)
        _need(&rd, length)
        lset_raw.append((owned, record[rd.i : rd.i + length]))
        rd.i += length
    nl = len(lset_raw)
    cdef list labels = [None] * nl
    # [nodes | classes | their epochs | their priorities | queues | gangs | resources]
    cdef _Slots ids = _Slots(nn + 3 * nd + nq + ng + nr, UNRESOLVED)
    cdef Py_ssize_t* node_ids = ids.v
    cdef Py_ssize_t* class_ids = node_ids + nn
    cdef Py_ssize_t* class_epochs = class_ids + nd
    cdef Py_ssize_t* class_prios = class_epochs + nd
    cdef Py_ssize_t* queue_ids = class_prios + nd
    cdef Py_ssize_t* gang_ids = queue_ids + nq
    cdef Py_ssize_t* cols = gang_ids + ng
    cdef Py_ssize_t p, n, c, q, g, r, part, count = 0, nres
    cdef int kind, flags
    cdef bint skip
    cdef int64_t dev, start
    cdef uint32_t ni, ci, li, qi, gi
    ops = _r_u32(&rd)
    for j in range(ops):
        _need(&rd, 3)
        kind = rd.b[rd.i]
        part = rd.b[rd.i + 1] | (rd.b[rd.i + 2] << 8)
        rd.i += 3
        skip = _skipped(own, part)
        if skip:
            # (its key not made: the state folds this pod's events itself)
            length = _r_u16(&rd)
            _need(&rd, length)
            rd.i += length
        else:
            key = _r_key(&rd)
        if kind == CLAIM_RELEASED:
            if not skip:
                if released is not None:
                    # (held or not: a follower that enters Pending pods from their
                    # submissions must not enter one withdrawn since)
                    released.append(key)
                if key in self.pod_index:
                    _pod_finish(self, key, PHASE_FREE)
                    count += 1
            continue
        if kind != CLAIM_BOUND:
            raise ClaimsError(f"operation kind {kind}")
        _need(&rd, 38)  # (the fixed part at once: five u32 indexes, flags, dev, start, count)
        memcpy(&ni, rd.b + rd.i, 4)
        memcpy(&ci, rd.b + rd.i + 4, 4)
        memcpy(&li, rd.b + rd.i + 8, 4)
        memcpy(&qi, rd.b + rd.i + 12, 4)
        memcpy(&gi, rd.b + rd.i + 16, 4)
        rd.i += 20
        flags = rd.b[rd.i]
        memcpy(&dev, rd.b + rd.i + 1, 8)
        memcpy(&start, rd.b + rd.i + 9, 8)
        nres = rd.b[rd.i + 17]
        rd.i += 18
        _need(&rd, 9 * nres)
        if skip:
            rd.i += 9 * nres
            continue
        if ni >= <uint32_t>nn or ci >= <uint32_t>nd or qi >= <uint32_t>nq or (
                li != _NONE and li >= <uint32_t>nl) or (gi != _NONE and gi >= <uint32_t>ng):
            raise ClaimsError("an operation's index beyond its table")
        n = node_ids[ni]
        if n == UNRESOLVED:
            n = node_ids[ni] = _node_of(self, &rd, node_at.v[ni])
        if n < 0:
            self._anomaly("claim_unknown_node")
            rd.i += 9 * nres
            continue
        idx = self.pod_index.get(key)
        if idx is not None and self.pod_phase[<Py_ssize_t>idx] == PHASE_RUNNING:
            # Bound twice without a release between (a lost record): the later claim wins.
            self._anomaly("claim_pod_bound")
            _pod_finish(self, key, PHASE_FREE)
            idx = None
        # (checked at each use: a release earlier in the record may have let it go)
        c = class_ids[ci]
        if c == UNRESOLVED or not class_still(self, c, class_epochs[ci]):
            c = _class_from(self, &rd, def_at.v[ci])
            if c < 0:
                rd.i += 9 * nres
                continue
            class_ids[ci] = c
            class_epochs[ci] = class_stamp(self, c)
            class_prios[ci] = (<tuple>self.class_keys[c])[2]
        q = queue_ids[qi]
        if q == UNRESOLVED:
            q = queue_ids[qi] = self._queue(queue_names[qi])
        g = -1
        if gi != _NONE:
            g = gang_ids[gi]
            if g == UNRESOLVED:
                g = gang_ids[gi] = self._gang(gang_keys[gi], queue_names[qi])
        lab = None
        owned = False
        if li != _NONE:
            got = labels[li]
            if got is None:
                raw = (<tuple>lset_raw[li])[1]
                got = labels[li] = ((<tuple>lset_raw[li])[0],
                                    orjson.loads(raw) if raw else None)
            owned, lab = got
        p = _pod_enter(self, key, idx, c, q, g, class_prios[ci], lab, owned)
        if flags & _NOT_PREEMPTABLE:
            self.not_preemptable[key] = True
        elif self.not_preemptable:
            self.not_preemptable.pop(key, None)
        for r in range(self.n_res):
            self.pod_alloc[p, r] = 0
        for r in range(nres):
            v = rd.b[rd.i]
            if v >= <uint32_t>nr:
                raise ClaimsError("a resource index beyond its table")
            if cols[v] == UNRESOLVED:
                at_name = rd
                at_name.i = res_at[v]
                cols[v] = self._resource(_r_name(self, &at_name))
            memcpy(&self.pod_alloc[p, cols[v]], rd.b + rd.i + 1, 8)
            rd.i += 9
        _bind_allocated(self, p, n, True, dev)
        self.pod_start[p] = start  # (the binding's position, not the record's)
        count += 1
    if rd.i != rd.n:
        raise ClaimsError("bytes after a claims record's operations")
    return count
