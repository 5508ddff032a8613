"""Pods' labels by topology domain: the index kube's InterPodAffinity filter reads.

kube-scheduler's PreFilter (``pkg/scheduler/framework/plugins/interpodaffinity/
filtering.go``) counts, for every pod it places, the pods on every node that match the
incoming pod's terms, by topology pair (key, value). esched keeps those counts folded
instead, so a placement reads them and never rescans pods:

- every pod has a **label set** (its namespace and labels, interned: pods of one
  workload share one);
- a **matcher** is a conjunction of (namespaces, label selector) parts: one
  anti-affinity term, or all the required affinity terms of a pod (kube counts a pod
  for affinity only if it matches every term);
- ``counts[(matcher, key)]``: per domain of the topology key (a node label value), the
  bound pods whose label set the matcher matches; index 0 holds the total over domains
  (kube's ``len(affinityCounts) == 0``, the first pod of a self-affine group);
- ``owners[(matcher, key)]``: per domain, the bound pods that carry that required
  anti-affinity term (kube's existing pods' anti-affinity, honoured symmetrically).

- ``scored[(SCORED_PREFERRED, matcher, key)]``: per domain, the signed weights of the
  preferred terms (affinity +, anti-affinity -) of bound pods; ``scored[(SCORED_REQUIRED,
  matcher, key)]``: per domain, the bound pods with that required affinity term (kube's
  InterPodAffinity score: existing pods' terms that match the incoming pod, the required
  ones weighted by ``hardPodAffinityWeight``).

``counts`` arrays are made when a placement first asks for them (one vectorized count
over the pods), then kept by the fold (:meth:`InterPodIndex.move` on every bind and
release); ``owners`` arrays by the fold from the first owner on. Memory: an int32 per
domain per (matcher, key) in use, an int32 per pod, one entry per distinct label set.

What a pod holds is released with it, so the index follows the live cluster, not its
history (pods come and go with ever new ``pod-template-hash`` or job names): every pod
slot holds its label set (a refcount, dropped when the pod is deleted or replaced); a
label set no slot holds is released with its memoized terms, and so is every matcher
only its terms held, with its counts, owners and scored arrays. Released ids are reused,
smallest first (a heap: a restored snapshot reuses the same ones).
"""

cimport cython
from cpython.dict cimport PyDict_Copy
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.string cimport memcmp
from cpython.unicode cimport (
    PyUnicode_Compare, PyUnicode_DATA, PyUnicode_GET_LENGTH, PyUnicode_KIND, PyUnicode_READ,
    PyUnicode_READ_CHAR, PyUnicode_Tailmatch,
)


cdef extern from "Python.h":
    # A new label set's key hashed once for its lookup and its insertion (a tuple's
    # hash is not cached).
    Py_hash_t PyObject_Hash(object o) except -1
    PyObject* _PyDict_GetItem_KnownHash(object mp, object key, Py_hash_t h)
    int _PyDict_SetItem_KnownHash(object mp, object key, object item, Py_hash_t h) except -1
    PyObject* PyErr_Occurred()
    bint PyDict_Next(object d, Py_ssize_t* pos, PyObject** key, PyObject** value)

import numpy as np
import orjson

from heapq import heapify, heappop, heappush

from esched.schemas.objects import PER_POD_LABELS as _PER_POD_LABELS

# A constraints dict's key by the dict's identity (cons_key): the fold gives every
# class of one constraints key the same dict (a Volcano Job's pods: thousands of
# classes of one profile), read only; each entry holds its dict, so its id is not
# reused while the entry lives.
cdef dict _CONS_KEYS = {}
cdef Py_ssize_t _CONS_KEYS_LIMIT = 4096

_ALL = None  # a part's namespaces: every namespace (namespaceSelector: {})
#: The topology key whose domain is the node itself (per-node counts, for topology
#: spread: kube counts a domain's pods on the nodes that pass its policies only).
NODE_KEY = "\x00node"
#: Kinds of :attr:`InterPodIndex.scored` arrays (and of the placer's copies: 0 counts,
#: 1 owners).
#: kube's v1.LabelHostname: a spread score counts a node's own pods for this key.
HOSTNAME = "kubernetes.io/hostname"
SCORED_PREFERRED = 2
SCORED_REQUIRED = 3


def _values(expr) -> tuple:
    return tuple(sorted(str(v) for v in expr.get("values") or ()))


def _selector(dict sel, dict labels=None, term=None) -> tuple:
    # A metav1.LabelSelector as (sorted matchLabels items, sorted expressions); a
    # term's matchLabelKeys / mismatchLabelKeys merged in with the pod's ``labels``.
    ml = tuple(sorted((str(k), str(v)) for k, v in (sel.get("matchLabels") or {}).items()))
    exprs = [(str(e.get("key", "")), str(e.get("operator", "")), _values(e))
             for e in sel.get("matchExpressions") or ()]
    if term is not None:
        for key in term.get("matchLabelKeys") or ():
            if key in labels:
                exprs.append((key, "In", (str(labels[key]),)))
        for key in term.get("mismatchLabelKeys") or ():
            if key in labels:
                exprs.append((key, "NotIn", (str(labels[key]),)))
    return (ml, tuple(sorted(set(exprs))))


def term_part(dict term, str ns, dict labels):
    """One pod affinity term of a pod in namespace ``ns`` with ``labels`` as a matcher
    part ``(namespaces, selector, namespace selector)``: kube's ``AffinityTerm`` after
    the API server merged ``matchLabelKeys``/``mismatchLabelKeys`` into the selector
    (``key In/NotIn [the pod's value]``, keys the pod lacks ignored). ``namespaces``:
    None for all (an empty ``namespaceSelector``), else a sorted tuple (default, with
    neither field: the pod's own namespace). ``namespace selector``: None, or the
    canonical form of a non-empty ``namespaceSelector``: a pod also matches when its
    namespace's labels (:attr:`ClusterState.namespace_labels`) match it (kube:
    ``namespaces`` and ``namespaceSelector`` are ORed). ``selector`` None matches
    nothing (kube: a nil labelSelector)."""
    sel = term.get("labelSelector")
    selector = None if sel is None else _selector(sel, labels, term)
    nsel = term.get("namespaceSelector")
    nssel = None
    if nsel is not None and not (nsel.get("matchLabels") or nsel.get("matchExpressions")):
        namespaces = _ALL  # kube: an empty selector is labels.Everything()
    else:
        namespaces = tuple(sorted(set(str(x) for x in term.get("namespaces") or ())))
        if nsel is not None:
            nssel = _selector(nsel)
        elif not namespaces:
            namespaces = (ns,)
    return namespaces, selector, nssel


cdef bint _sel_matches(tuple selector, dict labels) except -1:
    for k, v in selector[0]:
        if labels.get(k) != v:
            return False
    for k, op, values in selector[1]:
        have = labels.get(k)
        if op == "In":
            ok = have is not None and have in values
        elif op == "NotIn":
            ok = have is None or have not in values
        elif op == "Exists":
            ok = have is not None
        elif op == "DoesNotExist":
            ok = have is None
        else:
            ok = False
        if not ok:
            return False
    return True


def part_matches(part, str ns, dict labels, dict ns_labels=None) -> bool:
    """Whether a pod (namespace, labels) matches one matcher part; ``ns_labels``:
    namespace -> its labels (a namespace without an entry has none, as a Namespace
    object without labels: kube's pods always live in an existing one)."""
    return _part_matches(part, ns, labels, ns_labels)


cdef bint _part_matches(tuple part, str ns, dict labels, dict ns_labels) except -1:
    # part_matches in C, for the index's loops over label sets and matchers
    namespaces, selector, nssel = part
    if selector is None:
        return False
    if namespaces is not None and ns not in namespaces:
        if nssel is None or not _sel_matches(nssel, (ns_labels or {}).get(ns) or {}):
            return False
    return _sel_matches(selector, labels)


cdef bint _all_match(tuple parts, str ns, dict labels, dict ns_labels) except -1:
    # A pod matches a matcher: every part (a loop, not a generator: it runs for every
    # label set a new matcher meets, and every matcher a new label set meets).
    for pt in parts:
        if not _part_matches(pt, ns, labels, ns_labels):
            return False
    return True


cdef inline bint _in_namespace(str key, str ns) except -1:
    # Whether pod key ``key`` (``ns/name``) is in namespace ``ns`` (None: no).
    # Namespaces hold no "/", so the key's first "/" is the one after ``ns``.
    if ns is None:
        return False
    cdef Py_ssize_t length = PyUnicode_GET_LENGTH(ns)
    cdef int kind = PyUnicode_KIND(ns)
    cdef void* data
    if PyUnicode_GET_LENGTH(key) <= length:
        return False
    if PyUnicode_KIND(key) == kind:
        # The same width (the common case, both ASCII): one memcmp.
        data = PyUnicode_DATA(key)
        return (PyUnicode_READ(kind, data, length) == 0x2f
                and memcmp(data, PyUnicode_DATA(ns), length * kind) == 0)
    return (PyUnicode_READ_CHAR(key, length) == 0x2f
            and PyUnicode_Tailmatch(key, ns, 0, length, -1) == 1)


cdef Py_ssize_t _lset(InterPodIndex self, str ns, object labels, bint owned) except -1:
    # InterPodIndex.lset, called in C by set_pod: each Volcano Job's pods bring a
    # label set of their own (volcano.sh/job-name), so the fold makes one per job.
    cdef dict lab = {}
    if labels:
        # str() only where needed: labels decoded from JSON are str already.
        for k, v in labels.items():
            lab[k if type(k) is str else str(k)] = v if type(v) is str else str(v)
    items = tuple(sorted(lab.items()))
    key = (ns, items, True) if owned else (ns, items)
    got = self.lset_index.get(key)
    if got is not None:
        return got
    return _new_lset(self, ns, lab, items, key, owned)


cdef Py_ssize_t _new_lset(InterPodIndex self, str ns, dict lab, tuple items, tuple key,
                          bint owned, Py_hash_t h=-1) except -1:
    # Label set ``lab`` (``items``: its canonical items, ``key`` its lset_index key,
    # ``h`` its hash where the caller has it, else -1), not interned yet: a released
    # id, else a new one.
    cdef Py_ssize_t i
    matched = ()
    if self.matcher_index:
        nsl = self.state.namespace_labels
        matched = tuple([m for m, parts in enumerate(self.matchers)
                         if parts is not None and _all_match(parts, ns, lab, nsl)])
    if self.lset_free:
        i = heappop(self.lset_free)
        self.lsets[i] = (ns, lab)
        self.lset_owned[i] = bool(owned)
        self.lset_keys[i] = key
        self.lset_match[i] = matched
    else:
        i = len(self.lsets)
        self.lsets.append((ns, lab))
        self.lset_owned.append(bool(owned))
        self.lset_keys.append(key)
        self.lset_fast_keys.append(None)
        self.lset_uses.append(None)
        self.lset_match.append(matched)
        if i >= self.lset_refs.shape[0]:
            grown = np.zeros(2 * i, dtype=np.int32)
            grown[: i] = self.lset_refs_np[: i]
            self.lset_refs_np = grown
            self.lset_refs = grown
    if self.by_label_keys:
        for kv in items:
            if (<tuple>kv)[0] in self.by_label_keys:
                _index_label(self, kv, i)
    if h == -1:
        h = PyObject_Hash(key)
    _PyDict_SetItem_KnownHash(self.lset_index, key, i, h)
    return i


cdef inline int _index_label(InterPodIndex self, tuple kv, Py_ssize_t i) except -1:
    # Label set i carries pair kv, of a key some matcher's selector leads with.
    got = self.lset_by_label.get(kv)
    if got is None:
        self.lset_by_label[kv] = {i: None}
    else:
        (<dict>got)[i] = None
    return 0


cdef inline int _hold(InterPodIndex self, Py_ssize_t p, Py_ssize_t got) except -1:
    # Pod slot p holds label set ``got`` now, and no longer the one it held (a
    # replaced pod's): that one is released when no slot holds it any more.
    cdef Py_ssize_t old = self.pod_lset[p]
    self.pod_lset[p] = <int>got
    self.lset_refs[got] += 1  # (first: old == got is not released)
    if old >= 0:
        self.lset_refs[old] -= 1
        if self.lset_refs[old] == 0:
            self._release_lset(old)
    return 0


cdef list _term_matchers(tuple terms):
    # The matcher ids resolved terms (InterPodIndex.terms) name.
    am, _, _, pairs, spread, pref, own, soft = terms
    ms = [am] if am >= 0 else []
    ms += [pr[0] for pr in pairs]
    ms += [t[0] for t in spread]
    ms += [t[0] for t in pref]
    ms += [key[1] for key, _ in own]
    ms += [t[0] for t in soft]
    return ms


cdef tuple _items(dict d):
    # tuple(d.items()), without the items view, its iterator and the tuple's growth
    # (a Volcano Job's pods bring a new label set each: its key is made per pod).
    cdef Py_ssize_t pos = 0, j = 0
    cdef PyObject* k
    cdef PyObject* v
    cdef tuple out = PyTuple_New(len(d))
    while PyDict_Next(d, &pos, &k, &v):
        pair = (<object>k, <object>v)
        Py_INCREF(pair)  # (PyTuple_SET_ITEM steals a reference)
        PyTuple_SET_ITEM(out, j, pair)
        j += 1
    return out


cdef int _canonical(tuple items) except -1:
    # Whether a label dict's items are _lset's canonical ones already: str keys and
    # values, keys in sorted order (as the job controller and most manifests list them).
    cdef Py_ssize_t i, n = len(items)
    cdef object prev = None
    for i in range(n):
        kv = <tuple>items[i]
        k = kv[0]
        if type(k) is not str or type(kv[1]) is not str:
            return False
        if prev is not None and PyUnicode_Compare(prev, k) >= 0:  # (str: no error)
            return False
        prev = k
    return True


@cython.auto_pickle(False)  # derived: a state snapshot rebuilds it
cdef class InterPodIndex:
    """See the module docstring. ``state``: the :class:`ClusterState` it indexes."""

    def __init__(self, state, Py_ssize_t pod_cap=1024):
        self.state = state
        self.active = False
        self.pod_lset_np = np.full(max(pod_cap, 1), -1, dtype=np.int32)
        self.pod_lset = self.pod_lset_np
        self.lsets = []
        self.lset_refs_np = np.zeros(64, dtype=np.int32)
        self.lset_refs = self.lset_refs_np
        self.lset_free = []
        self.lset_keys = []
        self.lset_fast_keys = []
        self.lset_uses = []
        self.lset_index = {}
        self.lset_fast = {}
        self.bare_ns = None
        self.bare_ns_lset = -1
        self.last_ns = None
        self.lset_match = []
        self.lset_by_label = {}
        self.by_label_keys = set()
        self.lset_owned = []
        self.default_memo = {}
        self.key_index = {}
        self.key_names = []
        self.dom_np = []
        self.dom_vals = []
        self.dom_cap = []
        self.matcher_index = {}
        self.matchers = []
        self.m_refs = []
        self.m_free = []
        self.m_keys = []
        self.counts = {}
        self.owners = {}
        self.owner_keys = {}
        self.scored = {}
        self.scored_keys = {}
        self.terms_memo = {}
        self.terms_by_cons = {}
        self.cons_keys = {}
        self.ns_matchers = []

    # ---------------------------------------------------------------- label sets

    def lset(self, str ns, labels, bint owned=False) -> int:
        """The id of label set (``ns``, ``labels``), interned on first sight. ``owned``:
        the pods have a controller whose selector gives them default topology spread
        constraints (:func:`esched.schemas.objects.spread_default_labels`); such pods
        have a label set of their own, matched alike."""
        return _lset(self, ns, labels, owned)

    cpdef int set_pod(self, Py_ssize_t p, str key, object labels, bint owned=False) except -1:
        """Pod slot ``p`` (key ``ns/name``) has ``labels`` (``owned``: see :meth:`lset`)."""
        if p >= self.pod_lset.shape[0]:  # the view: no attribute lookup per pod
            grown = np.full(max(2 * self.pod_lset_np.shape[0], p + 1), -1, dtype=np.int32)
            grown[: self.pod_lset_np.shape[0]] = self.pod_lset_np
            self.pod_lset_np = grown
            self.pod_lset = grown
        cdef Py_ssize_t cut
        cdef Py_hash_t h
        cdef PyObject* found
        if not labels and not owned and _in_namespace(key, self.bare_ns):
            # The bulk of a log: pods without labels, one namespace after another's;
            # no namespace str sliced and hashed per pod.
            return _hold(self, p, self.bare_ns_lset)
        if _in_namespace(key, self.last_ns):
            # Labelled pods one namespace after another's (a Volcano Job's each bring
            # labels): the namespace's str reused, not sliced and hashed per pod.
            ns = self.last_ns
            cut = PyUnicode_GET_LENGTH(ns)
        else:
            cut = key.find("/")
            ns = key[:cut] if cut >= 0 else key
            if cut >= 0:
                self.last_ns = ns
        if not owned and type(labels) is dict and labels:
            items = _items(<dict>labels)
            if _canonical(items):
                # Listed as _lset's canonical key: one lookup, and a new label set
                # (each Volcano Job's pods bring one) neither sorted nor cached twice.
                lkey = (ns, items)
                h = PyObject_Hash(lkey)
                found = _PyDict_GetItem_KnownHash(self.lset_index, lkey, h)
                if found != NULL:
                    return _hold(self, p, <object>found)
                if PyErr_Occurred() != NULL:
                    return -1  # (the error set)
                return _hold(self, p, _new_lset(self, ns, PyDict_Copy(labels), items, lkey,
                                                False, h))
        # The fold's path: labels as the manifest lists them (one workload's pods list
        # them alike), one lookup; the canonical form only on a miss.
        try:
            fast = (ns, tuple(labels.items())) if labels else ns
            if owned:
                fast = (fast, True)
            got = self.lset_fast.get(fast)
        except (TypeError, AttributeError):
            fast = got = None
        if got is None:
            got = _lset(self, ns, labels, owned)
            if fast is not None and len(self.lset_fast) < 1_000_000:
                self.lset_fast[fast] = got
                keys = self.lset_fast_keys[got]
                if keys is None:
                    self.lset_fast_keys[got] = [fast]
                else:
                    (<list>keys).append(fast)
        if fast is ns and cut >= 0:
            self.bare_ns = ns
            self.bare_ns_lset = got
        return _hold(self, p, got)

    cpdef int release_pod(self, Py_ssize_t p) except -1:
        """Pod slot ``p`` was freed (its pod deleted): it holds no label set any more;
        the one it held is released when no other slot holds it."""
        if p >= self.pod_lset.shape[0]:
            return 0
        cdef Py_ssize_t old = self.pod_lset[p]
        self.pod_lset[p] = -1
        if old >= 0:
            self.lset_refs[old] -= 1
            if self.lset_refs[old] == 0:
                self._release_lset(old)
        return 0

    cdef int _release_lset(self, Py_ssize_t i) except -1:
        # Label set i is held by no pod slot: out of every table, its memoized terms
        # with it, and the matchers only its terms held; its id is free for reuse.
        if self.lsets[i] is None:
            return 0
        key = <tuple>self.lset_keys[i]
        del self.lset_index[key]
        if self.by_label_keys:
            for kv in <tuple>key[1]:
                if (<tuple>kv)[0] in self.by_label_keys:
                    ids = <dict>self.lset_by_label[kv]
                    del ids[i]
                    if not ids:
                        del self.lset_by_label[kv]
        fast = self.lset_fast_keys[i]
        if fast is not None:
            for f in <list>fast:
                if self.lset_fast.get(f) == i:
                    del self.lset_fast[f]
            self.lset_fast_keys[i] = None
        if self.bare_ns_lset == i:
            self.bare_ns = None
            self.bare_ns_lset = -1
        self.lsets[i] = None
        self.lset_keys[i] = None
        self.lset_owned[i] = False
        self.lset_match[i] = ()
        self.terms_memo.pop(i, None)
        self.terms_by_cons.pop(i, None)
        self.default_memo.pop(i, None)
        uses = self.lset_uses[i]
        self.lset_uses[i] = None
        heappush(self.lset_free, i)
        if uses is not None:
            for m in sorted(uses):
                self.m_refs[m] -= 1
                if self.m_refs[m] == 0:
                    self._release_matcher(m)
        return 0

    cdef int _release_matcher(self, Py_ssize_t m) except -1:
        # Matcher m is held by no label set's terms: its arrays go (no bound pod holds
        # its terms, so its owners and scored arrays are zero; no view asks for its
        # counts: a placer starts again from the state after every fold), and so does
        # its id in the label sets matching it.
        parts = <tuple>self.matchers[m]
        del self.matcher_index[parts]
        for k in self.m_keys[m]:
            del self.counts[(m, k)]
        self.m_keys[m] = []
        for k in self.owner_keys.pop(m, ()):
            del self.owners[(m, k)]
        for kind in (SCORED_PREFERRED, SCORED_REQUIRED):
            for k in self.scored_keys.pop((kind, m), ()):
                del self.scored[(kind, m, k)]
        if m in self.ns_matchers:
            self.ns_matchers.remove(m)
        for i in self._candidates(parts):
            got = self.lset_match[i]
            if m in got:
                self.lset_match[i] = tuple([x for x in got if x != m])
        self.matchers[m] = None
        heappush(self.m_free, m)
        return 0

    cdef int _hold_matchers(self, Py_ssize_t lset, object ms) except -1:
        # Label set lset's memoized terms name matchers ``ms``: they live while it does.
        uses = self.lset_uses[lset]
        if uses is None:
            uses = self.lset_uses[lset] = set()
        for m in ms:
            if m not in uses:
                (<set>uses).add(m)
                self.m_refs[m] += 1
        return 0

    def held_label_sets(self) -> tuple:
        """What a snapshot keeps of the label sets: ``(label sets by id, None for an id
        no pod slot holds, ids of the owned ones)``; :meth:`restore` takes them back."""
        cdef Py_ssize_t i
        sets = []
        owned = []
        for i, entry in enumerate(self.lsets):
            if entry is None or self.lset_refs[i] == 0:
                sets.append(None)
                continue
            sets.append(entry)
            if self.lset_owned[i]:
                owned.append(i)
        return sets, owned

    def restore(self, list label_sets, owned, object pod_lset, list pod_keys) -> None:
        """A new index takes a snapshot's label sets back (:meth:`held_label_sets`), with
        the same ids, and each live pod slot's (``pod_keys``: the state's, None for a
        free slot); a label set no live slot holds is released. ``pod_lset`` None (a
        snapshot from before label sets were kept): the pods' labels are unknown, taken
        as none (each in its namespace) until they are submitted again."""
        cdef Py_ssize_t i, n
        if pod_lset is None or not label_sets:
            for i, key in enumerate(pod_keys):
                if key is not None:
                    self.set_pod(i, key, None)
            return
        owned = frozenset(owned)
        free = []
        for i, entry in enumerate(label_sets):
            if entry is None:
                self.lsets.append(None)
                self.lset_owned.append(False)
                self.lset_keys.append(None)
                self.lset_fast_keys.append(None)
                self.lset_uses.append(None)
                self.lset_match.append(())
                free.append(i)
            elif _lset(self, entry[0], entry[1], i in owned) != i:
                raise ValueError(f"label set {i} is listed twice")
        n = len(self.lsets)
        self.lset_refs_np = np.zeros(max(64, 2 * n), dtype=np.int32)
        self.lset_refs = self.lset_refs_np
        heapify(free)
        self.lset_free = free
        P = min(pod_lset.shape[0], len(pod_keys))
        if P > self.pod_lset_np.shape[0]:
            self.pod_lset_np = np.full(P, -1, dtype=np.int32)
            self.pod_lset = self.pod_lset_np
        live = np.fromiter((k is not None for k in pod_keys[:P]), dtype=bool, count=P)
        held = np.where(live, np.asarray(pod_lset[:P], dtype=np.int32), -1)
        self.pod_lset_np[:P] = held
        self.lset_refs_np[:n] = np.bincount(held[held >= 0], minlength=n)[:n]
        for i in range(n):
            if self.lsets[i] is not None and self.lset_refs[i] == 0:
                self._release_lset(i)

    def sizes(self) -> dict:
        """How many entries the index holds (read-only; for tests and operators):
        ``label_sets`` interned (every one held by a pod slot, or interned since for a
        pod outside the state), ``label_set_ids`` (the table's length: the most label
        sets live at once), ``matchers`` and ``matcher_ids`` alike, ``arrays`` (counts,
        owners and scored arrays), ``label_pairs`` (distinct (label, value) pairs of the
        label sets, of the keys a selector has led with), ``memo`` (label sets with memoized terms)."""
        return {
            "label_sets": len(self.lset_index),
            "label_set_ids": len(self.lsets),
            "matchers": len(self.matcher_index),
            "matcher_ids": len(self.matchers),
            "arrays": len(self.counts) + len(self.owners) + len(self.scored),
            "label_pairs": len(self.lset_by_label),
            "memo": len(set(self.terms_memo) | set(self.default_memo)),
        }

    def pod_lset_of(self, Py_ssize_t p) -> int:
        """The label set id of pod slot ``p``."""
        return self.pod_lset[p]

    cpdef bint owned(self, Py_ssize_t lset) except -1:
        """Whether label set ``lset``'s pods get default spread constraints."""
        return self.lset_owned[lset]

    def default_spread(self, Py_ssize_t lset, tuple defaults) -> tuple:
        """A profile's default topology spread constraints for a pod of label set
        ``lset`` (one without constraints of its own, with a controller: kube's
        ``buildDefaultConstraints``), as :meth:`terms` gives a pod's own: ``(spread,
        soft)``, both empty when the label set has no default selector. ``defaults``:
        ``((topology key, maxSkew, whenUnsatisfiable, minDomains, honour node affinity,
        honour taints), ...)``. The selector: the pod's labels without the per-pod ones
        (see :func:`esched.schemas.objects.spread_default_labels`), in its namespace."""
        memo = self.default_memo.get(lset)
        if memo is None:
            memo = self.default_memo[lset] = {}
        got = (<dict>memo).get(defaults)
        if got is not None:
            return got
        ns, labels = self.lsets[lset]
        sel = {k: v for k, v in labels.items() if k not in _PER_POD_LABELS}
        spread = []
        soft = []
        if self.lset_owned[lset] and sel:
            part = term_part({"labelSelector": {"matchLabels": sel}}, ns, labels)
            m = self.matcher((part,))
            self._hold_matchers(lset, (m,))
            for key, max_skew, when, min_domains, h_aff, h_taint in defaults:
                if when == "DoNotSchedule":
                    spread.append((m, self.key(key), max_skew, min_domains, h_aff, h_taint,
                                   True))
                else:
                    soft.append((m, self.key(key), max_skew, h_aff, h_taint, key == HOSTNAME))
        got = (<dict>memo)[defaults] = (tuple(spread), tuple(soft))
        return got

    cpdef tuple matched(self, Py_ssize_t lset):
        """Matcher ids label set ``lset`` matches."""
        return self.lset_match[lset]

    # ---------------------------------------------------------------- topology

    cpdef Py_ssize_t key(self, str name) except -1:
        """The id of topology key ``name``; its domains are the node label's values."""
        got = self.key_index.get(name)
        if got is not None:
            return got
        cdef Py_ssize_t k = len(self.key_names)
        self.key_names.append(name)
        self.key_index[name] = k
        self.dom_vals.append({})
        self.dom_cap.append(16)
        st = self.state
        cdef Py_ssize_t n, N = st.n_nodes
        dom = np.full(max(N, 16), -1, dtype=np.int32)
        self.dom_np.append(dom)
        cdef int[::1] dv = dom
        cdef list names = st.node_names, labels = st.node_labels
        cdef bint host = name == NODE_KEY
        for n in range(N):
            dv[n] = <int>self._domain_in(k, n, names, labels, name, host)
        return k

    cdef Py_ssize_t _domain_of(self, Py_ssize_t k, Py_ssize_t n) except -2:
        st = self.state
        name = self.key_names[k]
        return self._domain_in(k, n, st.node_names, st.node_labels, name, name == NODE_KEY)

    cdef Py_ssize_t _domain_in(self, Py_ssize_t k, Py_ssize_t n, list names, list labels,
                               str name, bint host) except -2:
        # Node n's domain of key k (name), from the state's node names and labels
        # (passed in: key() runs this for every node).
        if names[n] is None:
            return -1
        if host:
            if n >= self.dom_cap[k]:
                self._grow_domains(k, 2 * (n + 1))
            return n
        value = (<dict>labels[n]).get(name)
        if value is None:
            return -1
        vals = self.dom_vals[k]
        d = vals.get(value)
        if d is None:
            d = vals[value] = len(vals)
            if d >= self.dom_cap[k]:
                self._grow_domains(k, 2 * d)
        return d

    cdef int _grow_domains(self, Py_ssize_t k, Py_ssize_t cap) except -1:
        self.dom_cap[k] = cap
        for table in (self.counts, self.owners, self.scored):
            for pair in [pr for pr in table if pr[len(pr) - 1] == k]:
                old = table[pair]
                new = np.zeros(1 + cap, dtype=np.int32)
                new[: old.shape[0]] = old
                table[pair] = new
        return 0

    def node_changed(self, Py_ssize_t n) -> None:
        """Node slot ``n`` was added, changed or removed: its domains follow its labels;
        a key whose domain moved on a node is recounted (rare: a relabelled node)."""
        cdef Py_ssize_t k, d
        for k in range(len(self.key_names)):
            dom = self.dom_np[k]
            if n >= dom.shape[0]:
                grown = np.full(max(2 * dom.shape[0], n + 1), -1, dtype=np.int32)
                grown[: dom.shape[0]] = dom
                self.dom_np[k] = dom = grown
            d = self._domain_of(k, n)
            if dom[n] != d:
                dom[n] = d
                for pair in [pr for pr in self.counts if pr[1] == k]:
                    self.counts[pair] = self._count(pair[0], k)
                for pair in [pr for pr in self.owners if pr[1] == k]:
                    self.owners[pair] = self._count_owners(pair[0], k)
                for triple in [t for t in self.scored if t[2] == k]:
                    self.scored[triple] = self._count_owners(triple[1], k, triple[0])

    def namespace_changed(self, str ns) -> None:
        """Namespace ``ns``'s labels changed (or it was deleted): the label sets of its
        pods match the terms with a ``namespaceSelector`` afresh, and the counts of
        each matcher whose matches moved are recounted (kube resolves the selector in
        every scheduling cycle: bound pods' terms see the change too)."""
        if not self.ns_matchers:
            return
        nsl = self.state.namespace_labels
        cdef Py_ssize_t i
        moved = set()
        for i, entry in enumerate(self.lsets):
            if entry is None or (<tuple>entry)[0] != ns:
                continue
            lns, lab = entry
            old = self.lset_match[i]
            new = tuple([m for m in old if m not in self.ns_matchers])
            new += tuple(m for m in self.ns_matchers
                         if _all_match(self.matchers[m], lns, lab, nsl))
            new = tuple(sorted(new))
            if new != old:
                moved.update(set(new) ^ set(old))
                self.lset_match[i] = new
        # a term's "the pod matches itself" may have changed with the labels
        self.terms_memo = {}
        self.terms_by_cons = {}
        self.default_memo = {}
        for m in moved:
            for k in self.m_keys[m]:
                self.counts[(m, k)] = self._count(m, k)

    # ---------------------------------------------------------------- matchers

    def matcher(self, tuple parts) -> int:
        """The id of a conjunction of parts (see :func:`term_part`), interned."""
        parts = tuple(sorted(set(parts), key=repr))
        got = self.matcher_index.get(parts)
        if got is not None:
            return got
        cdef Py_ssize_t m
        if self.m_free:
            m = heappop(self.m_free)
            self.matchers[m] = parts
        else:
            m = len(self.matchers)
            self.matchers.append(parts)
            self.m_keys.append([])
            self.m_refs.append(0)
        self.matcher_index[parts] = m
        if any(pt[2] is not None for pt in parts):
            self.ns_matchers.append(m)
        nsl = self.state.namespace_labels
        for i in self._candidates(parts):
            entry = self.lsets[i]
            if entry is not None and _all_match(parts, (<tuple>entry)[0], (<tuple>entry)[1], nsl):
                self.lset_match[i] = self.lset_match[i] + (m,)
        return m

    cdef object _candidates(self, tuple parts):
        # The label sets a matcher may match: those carrying a part's first
        # matchLabels pair (a selector needs all of them), else all ids. Label sets
        # are indexed by the keys such a pair has named only (a Volcano Job's pods
        # bring a new job-name each, which no selector may ever name): the first
        # matcher to lead with a key indexes the label sets that carry it.
        cdef Py_ssize_t i
        for pt in parts:
            sel = pt[1]
            if sel is not None and sel[0]:
                kv = sel[0][0]
                label = (<tuple>kv)[0]
                if label not in self.by_label_keys:
                    self.by_label_keys.add(label)
                    for i, key in enumerate(self.lset_keys):
                        if key is None:
                            continue
                        for pair in <tuple>(<tuple>key)[1]:
                            if (<tuple>pair)[0] == label:
                                _index_label(self, pair, i)
                return self.lset_by_label.get(kv, ())
        return range(len(self.lsets))

    cpdef tuple terms(self, Py_ssize_t c, Py_ssize_t lset):
        """Class ``c``'s inter-pod terms for a pod of label set ``lset``:
        ``(affinity matcher or -1, its key ids, the pod matches its own affinity,
        ((anti-affinity matcher, key id), ...), spread, preferred, own)``; ``spread``: per
        DoNotSchedule topology spread constraint ``(matcher, key id, maxSkew,
        minDomains, honour node affinity, honour taints, the pod matches itself)``;
        ``preferred``: the pod's preferred terms ``((matcher, key id, signed weight),
        ...)`` (anti-affinity negative); ``own``: what the pod adds to :attr:`scored`
        once bound ``(((SCORED_*, matcher, key id), amount), ...)``; ``soft``: per
        ScheduleAnyway constraint ``(matcher, key id, maxSkew, honour node affinity,
        honour taints, the key is kubernetes.io/hostname)``."""
        # (by label set first: a released label set's entries go with it)
        memo = self.terms_memo.get(lset)
        if memo is not None:
            got = (<dict>memo).get(c)
            if got is not None:
                return got
        else:
            memo = self.terms_memo[lset] = {}
        # Classes differ by their requests too; the terms only by the constraints:
        # a workload of many request shapes with one affinity resolves them once.
        by_cons = self.terms_by_cons.get(lset)
        if by_cons is None:
            by_cons = self.terms_by_cons[lset] = {}
        ck = self.cons_key(c)
        got = (<dict>by_cons).get(ck)
        if got is None:
            got = (<dict>by_cons)[ck] = self._resolve_terms(c, lset)
            self._hold_matchers(lset, _term_matchers(<tuple>got))
        (<dict>memo)[c] = got
        return got

    def _resolve_terms(self, Py_ssize_t c, Py_ssize_t lset) -> tuple:
        # terms' work on a miss (a def: its generator expressions cannot be in a cpdef)
        cons = self.state.class_specs[c]["constraints"] or {}
        ns, labels = self.lsets[lset]
        aff = cons.get("podAffinity") or ()
        anti = cons.get("podAntiAffinity") or ()
        am, akeys, self_match = -1, (), False
        if aff:
            parts = tuple(term_part(t, ns, labels) for t in aff)
            am = self.matcher(parts)
            akeys = tuple(sorted(set(self.key(str(t.get("topologyKey", ""))) for t in aff)))
            self_match = _all_match(parts, ns, labels, self.state.namespace_labels)
        pairs = tuple(sorted(set(
            (self.matcher((term_part(t, ns, labels),)), self.key(str(t.get("topologyKey", ""))))
            for t in anti)))
        spread = []
        for t in cons.get("topologySpread") or ():
            # kube's PodTopologySpread: pods of the pod's own namespace; matchLabelKeys
            # merged into the selector as for affinity terms.
            part = term_part({"labelSelector": t.get("labelSelector"),
                              "matchLabelKeys": t.get("matchLabelKeys")}, ns, labels)
            spread.append((
                self.matcher((part,)), self.key(str(t.get("topologyKey", ""))),
                int(t.get("maxSkew", 1)), int(t.get("minDomains") or 1),
                (t.get("nodeAffinityPolicy") or "Honor") == "Honor",
                (t.get("nodeTaintsPolicy") or "Ignore") == "Honor",
                part_matches(part, ns, labels, self.state.namespace_labels)))
        soft = []
        for t in cons.get("topologySpreadSoft") or ():
            part = term_part({"labelSelector": t.get("labelSelector"),
                              "matchLabelKeys": t.get("matchLabelKeys")}, ns, labels)
            key = str(t.get("topologyKey", ""))
            soft.append((
                self.matcher((part,)), self.key(key), int(t.get("maxSkew", 1)),
                (t.get("nodeAffinityPolicy") or "Honor") == "Honor",
                (t.get("nodeTaintsPolicy") or "Ignore") == "Honor",
                key == HOSTNAME))
        pref = {}
        own = {}
        for field, sign in (("podAffinityPreferred", 1), ("podAntiAffinityPreferred", -1)):
            for wt in cons.get(field) or ():
                t = wt.get("podAffinityTerm") or {}
                mk = (self.matcher((term_part(t, ns, labels),)),
                      self.key(str(t.get("topologyKey", ""))))
                w = sign * int(wt.get("weight", 0))
                pref[mk] = pref.get(mk, 0) + w
                own[(SCORED_PREFERRED,) + mk] = own.get((SCORED_PREFERRED,) + mk, 0) + w
        for t in aff:
            # each required affinity term on its own (kube's processTerm per term)
            mk = (SCORED_REQUIRED, self.matcher((term_part(t, ns, labels),)),
                  self.key(str(t.get("topologyKey", ""))))
            own[mk] = own.get(mk, 0) + 1
        return (
            am, akeys, self_match, pairs, tuple(spread),
            tuple((m, k, w) for (m, k), w in sorted(pref.items()) if w),
            tuple((key, a) for key, a in sorted(own.items()) if a), tuple(soft))

    cpdef int forget_class(self, Py_ssize_t c, bint last=False) except -1:
        """Class ``c`` is being released (no pod slot holds it; its id may come back as
        another class): its constraints key and resolved terms are forgotten, and
        (``last``: no other class shares its constraints' decoding) the decoding's
        serialization too."""
        self.cons_keys.pop(c, None)
        if last:
            cons = self.state.class_specs[c]["constraints"]
            known = _CONS_KEYS.get(id(cons))
            if known is not None and (<tuple>known)[0] is cons:
                del _CONS_KEYS[id(cons)]
        for memo in self.terms_memo.values():
            (<dict>memo).pop(c, None)
        return 0

    cpdef bytes cons_key(self, Py_ssize_t c):
        """Class ``c``'s constraints as canonical bytes: classes with equal keys differ
        only by requests, priority or priority class (memoized per class)."""
        got = self.cons_keys.get(c)
        if got is None:
            cons = self.state.class_specs[c]["constraints"]
            if not cons:
                got = b""
            else:
                known = _CONS_KEYS.get(id(cons))
                if known is not None and (<tuple>known)[0] is cons:
                    got = (<tuple>known)[1]
                else:
                    got = orjson.dumps(cons, option=orjson.OPT_SORT_KEYS)
                    if len(_CONS_KEYS) >= _CONS_KEYS_LIMIT:
                        _CONS_KEYS.clear()
                    _CONS_KEYS[id(cons)] = (cons, got)
            self.cons_keys[c] = got
        return got

    # ---------------------------------------------------------------- counts

    def counts_for(self, Py_ssize_t m, Py_ssize_t k):
        """``counts[(m, k)]``, counted from the pods on first use, kept by the fold."""
        arr = self.counts.get((m, k))
        if arr is None:
            arr = self.counts[(m, k)] = self._count(m, k)
            self.m_keys[m].append(k)
            self.active = True
        return arr

    def owners_for(self, Py_ssize_t m, Py_ssize_t k):
        """``owners[(m, k)]`` (None: no pod with that term was bound since the index
        was made)."""
        return self.owners.get((m, k))

    def owner_pairs(self) -> list:
        """The (matcher, key) pairs some bound pod's anti-affinity term holds."""
        return [pair for pair, arr in self.owners.items() if arr[0] > 0]

    def scored_for(self, int kind, Py_ssize_t m, Py_ssize_t k):
        """``scored[(kind, m, k)]`` (None: no bound pod holds such a term)."""
        return self.scored.get((kind, m, k))

    cpdef list count_keys(self, Py_ssize_t m):
        """Key ids with a ``counts`` array for matcher ``m``."""
        return self.m_keys[m]

    def _bound(self):
        st = self.state
        P = st.n_pods
        nodes = st.pod_node_np[:P]
        return np.flatnonzero(nodes >= 0), nodes

    def _count(self, Py_ssize_t m, Py_ssize_t k):
        arr = np.zeros(1 + self.dom_cap[k], dtype=np.int32)
        ps, nodes = self._bound()
        if ps.shape[0] == 0:
            return arr
        hits = np.array([i for i, ms in enumerate(self.lset_match) if m in ms], dtype=np.int32)
        if hits.shape[0] == 0:
            return arr
        ps = ps[np.isin(self.pod_lset_np[ps], hits)]
        d = self.dom_np[k][nodes[ps]]
        d = d[d >= 0]
        arr[1: 1 + self.dom_cap[k]] = np.bincount(d, minlength=self.dom_cap[k])[: self.dom_cap[k]]
        arr[0] = d.shape[0]
        return arr

    def _count_owners(self, Py_ssize_t m, Py_ssize_t k, int kind=1):
        # owners (kind 1) or scored (SCORED_*) array of (m, k), from the pods
        arr = np.zeros(1 + self.dom_cap[k], dtype=np.int32)
        st = self.state
        ps, nodes = self._bound()
        dom = self.dom_np[k]
        cdef long long amount
        for p in ps:
            c = st.pod_class_np[p]
            if not st.class_specs[c]["constraints"]:
                continue
            terms = self.terms(c, self.pod_lset[p])
            if kind == 1:
                amount = 1 if (m, k) in terms[3] else 0
            else:
                amount = dict(terms[6]).get((kind, m, k), 0)
            d = dom[nodes[p]]
            if amount and d >= 0:
                arr[0] += amount
                arr[1 + d] += amount
        return arr

    cpdef int move(self, Py_ssize_t p, Py_ssize_t n, Py_ssize_t c, int sign) except -1:
        """Pod slot ``p`` is bound (``sign`` 1) to node slot ``n`` or leaves it (-1);
        ``c``: its class when the class has inter-pod terms, else -1."""
        cdef Py_ssize_t lset = self.pod_lset[p], m, k, d
        cdef int[::1] arr, dom
        if self.counts:
            for m in self.lset_match[lset]:
                for k in self.m_keys[m]:
                    dom = self.dom_np[k]
                    d = dom[n]
                    if d >= 0:
                        arr = self.counts[(m, k)]
                        arr[0] += sign
                        arr[1 + d] += sign
        if c >= 0:
            for m, k in self.terms(c, lset)[3]:
                dom = self.dom_np[k]
                d = dom[n]
                if d < 0:
                    continue
                a = self.owners.get((m, k))
                if a is None:
                    a = self.owners[(m, k)] = np.zeros(1 + self.dom_cap[k], dtype=np.int32)
                    self.owner_keys.setdefault(m, []).append(k)
                    self.active = True
                arr = a
                arr[0] += sign
                arr[1 + d] += sign
            for key, amount in self.terms(c, lset)[6]:
                k = key[2]
                dom = self.dom_np[k]
                d = dom[n]
                if d < 0:
                    continue
                a = self.scored.get(key)
                if a is None:
                    a = self.scored[key] = np.zeros(1 + self.dom_cap[k], dtype=np.int32)
                    self.scored_keys.setdefault(key[:2], []).append(k)
                    self.active = True
                arr = a
                arr[0] += sign * amount
                arr[1 + d] += sign * amount
        return 0

    def rebuild(self) -> None:
        """Counts and owners again from the pods (after a snapshot restore)."""
        self.counts = {}
        self.owners = {}
        self.owner_keys = {}
        self.scored = {}
        self.scored_keys = {}
        self.m_keys = [[] for _ in self.matchers]
        self.terms_memo = {}
        self.default_memo = {}
        self.terms_by_cons = {}
        self.active = False
        st = self.state
        ps, nodes = self._bound()
        for p in ps:
            c = st.pod_class_np[p]
            cons = st.class_specs[c]["constraints"]
            if cons and (cons.get("podAntiAffinity") or cons.get("podAffinity")
                         or cons.get("podAffinityPreferred")
                         or cons.get("podAntiAffinityPreferred")):
                self.move(p, nodes[p], c, 1)

    def nbytes(self) -> int:
        """Bytes held by the index's arrays (counts, owners, domains, pod label sets)."""
        total = self.pod_lset_np.nbytes + sum(a.nbytes for a in self.dom_np)
        total += sum(a.nbytes for a in self.counts.values())
        total += sum(a.nbytes for a in self.owners.values())
        total += sum(a.nbytes for a in self.scored.values())
        return total
