"""ClusterState snapshots: the tables and the fold's side state as bytes, and back.

:meth:`ClusterState.to_bytes`, :meth:`~ClusterState.from_bytes` and
:meth:`~ClusterState.tables` delegate here (and ``copy`` and pickling through them).
The format: ``SNAPSHOT_MAGIC``, an 8-byte header length, an orjson header (names,
interned strings, dicts), then the raw little-endian tables. Derived indexes (host
ports, inter-pod counts, limits when folded under the other reclamation setting) are
rebuilt on restore, not stored. The functions are the methods they were, on the state
(``self``).
"""

from heapq import heapify

import numpy as np
import orjson

from esched.core._interpod import InterPodIndex
from esched.core._state import SNAPSHOT_MAGIC, USAGE_MAX_AGE

from esched.core._fold cimport restore_event_counts
from esched.core._state cimport (
    CLASS_HOST_PORTS, CLASS_INTERPOD, DEF_NODES, DEF_PODS, DEF_SMALL, ClusterState, _grown,
    _readonly,
)
from esched.core._types cimport PHASE_FREE

__all__ = ["from_bytes", "restore_limits", "tables", "to_bytes"]


def tables(ClusterState self) -> dict:
    """The raw tables by name (rows in use), read-only, as snapshots serialize them:
    for layout checks and debugging; scheduling code reads the accessors above."""
    return {name: _readonly(arr) for name, arr in _arrays(self).items()}


def _arrays(ClusterState self) -> dict:
    n, p, c, g, q, nr = (self.n_nodes, self.n_pods, self.n_classes, self.n_gangs,
                         self.n_queues, self.n_res)
    return {
        "allocatable": self.allocatable_np[:n, :nr],
        "allocated": self.allocated_np[:n, :nr],
        "version": self.version_np[:n],
        "nz": self.nz_np[:n],
        "flags": self.flags_np[:n],
        "label_bits": self.label_bits_np[:n],
        "taint_bits": self.taint_bits_np[:n],
        "pod_node": self.pod_node_np[:p],
        "pod_class": self.pod_class_np[:p],
        "pod_gang": self.pod_gang_np[:p],
        "pod_queue": self.pod_queue_np[:p],
        "pod_phase": self.pod_phase_np[:p],
        "pod_prio": self.pod_prio_np[:p],
        "pod_alloc": self.pod_alloc_np[:p, :nr],
        "pod_dev": self.pod_dev_np[:p],
        "pod_start": self.pod_start_np[:p],
        "pod_lset": self.interpod.pod_lset_np[:p],
        "class_req": self.class_req_np[:c, :nr],
        "class_nz": self.class_nz_np[:c],
        "gang_min": self.gang_min_np[:g],
        "gang_counts": self.gang_counts_np[:g],
        "queue_alloc": self.queue_alloc_np[:q, :nr],
        "queue_counts": self.queue_counts_np[:q],
        "class_lim": self.class_lim_np[:c, :nr],
        "pod_resv": self.pod_resv_np[:p, :nr],
        "pod_rtime": self.pod_rtime_np[:p],
        "node_lim": self.node_lim_np[:n, :nr],
        "node_resv": self.node_resv_np[:n, :nr],
    }


def to_bytes(ClusterState self) -> bytes:
    """Snapshot: magic, 8-byte header length, orjson header, raw little-endian tables.
    Only the classes a pod slot holds are kept (with their ids): a class interned for a
    manifest outside the state is not, as a label set is not."""
    arrays = _arrays(self)
    held = self.class_refs_np[: self.n_classes] > 0
    if not held.all():
        for name in ("class_req", "class_nz", "class_lim"):
            arrays[name] = np.where(held[:, None], arrays[name], 0)
    table = []
    blobs = []
    offset = 0
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
        raw = arr.tobytes()
        table.append([name, arr.dtype.str, list(arr.shape), offset, len(raw)])
        blobs.append(raw)
        offset += len(raw)
    label_sets, owned_sets = self.interpod.held_label_sets()
    header = {
        "position": self.position,
        "anomalies": self.anomalies,
        "anomaly_first": self.anomaly_first,
        "tombstones": self.tombstones,
        "gated": self.gated,
        "scheduler_of": self.scheduler_of,
        "not_preemptable": self.not_preemptable,
        "event_counts": self.event_counts,
        "res_names": self.res_names,
        "node_names": self.node_names,
        "node_free": self.node_free,
        "node_labels": self.node_labels,
        "node_taints": self.node_taint_list,
        "label_words": self.label_words,
        "taint_words": self.taint_words,
        "label_strs": self.label_strs,
        "taint_strs": self.taint_strs,
        # Pod names cannot contain NUL, so one joined string is the compact form.
        "pod_keys": "\x00".join(k if k is not None else "" for k in self.pod_keys),
        "pod_free": self.pod_free,
        "phase_counts": [self.phase_counts[i] for i in range(4)],
        "class_keys": [[list(map(list, k[0])), list(k[1]), k[2], k[3], k[4]]
                       for k, c in self.class_index.items() if held[c]],
        "class_ids": [c for c in self.class_index.values() if held[c]],
        "class_specs": [spec if held[c] else None for c, spec in enumerate(self.class_specs)],
        "gang_keys": self.gang_keys,
        "gang_meta": self.gang_meta,
        "queue_names": self.queue_names,
        "queue_meta": self.queue_meta,
        "priority_classes": self.priority_classes,
        "namespace_labels": self.namespace_labels,
        "node_usage": {k: [at, u] for k, (at, u) in self._node_usage.items()},
        "usage_max_age": self.usage_max_age,
        "pod_usage": self.pod_usage,
        "reservations": self.reservations,
        "clock": self.clock,
        "reclamation_enabled": self._reclamation.enabled,
        "label_sets": label_sets,
        "label_sets_owned": owned_sets,
        "arrays": table,
    }
    head = orjson.dumps(header)
    return b"".join([SNAPSHOT_MAGIC, len(head).to_bytes(8, "little"), head, *blobs])


cdef inline Py_ssize_t _room(Py_ssize_t n, Py_ssize_t least) noexcept:
    # A restored table's capacity: room for half as many rows again. Restored at its
    # count exactly, the first row made after a load doubled every array of its table
    # (tens of ms at 100,000 pods, paid by the first work a replica enters or folds; a
    # new Job's gang or a new spec's class the same).
    return max(least, n + n // 2)


def from_bytes(cls, data: bytes) -> ClusterState:
    """Restore a state written by :meth:`to_bytes`."""
    if data[:8] != SNAPSHOT_MAGIC:
        raise ValueError("not an esched ClusterState snapshot (bad magic)")
    hlen = int.from_bytes(data[8:16], "little")
    h = orjson.loads(data[16:16 + hlen])
    base = 16 + hlen
    arrays = {}
    for name, dtype, shape, offset, nbytes in h["arrays"]:
        arr = np.frombuffer(data, dtype=np.dtype(dtype), count=nbytes // np.dtype(dtype).itemsize,
                            offset=base + offset).reshape(shape)
        arrays[name] = arr.astype(arr.dtype.newbyteorder("="))

    cdef ClusterState s = cls()
    s.position = h["position"]
    s.anomalies = h["anomalies"]
    s.anomaly_first = h.get("anomaly_first") or {}
    s.tombstones = h.get("tombstones") or {}
    s.gated = {k: tuple(v) for k, v in (h.get("gated") or {}).items()}
    s.scheduler_of = h.get("scheduler_of") or {}
    s.not_preemptable = h.get("not_preemptable") or {}
    restore_event_counts(s, h["event_counts"])
    for name in h["res_names"]:
        s._resource(name)
    nr = s.res_cap
    s.n_nodes = len(h["node_names"])
    s.node_cap = _room(s.n_nodes, DEF_NODES)
    s.node_names = h["node_names"]
    s.node_index = {name: i for i, name in enumerate(s.node_names) if name is not None}
    s.node_free = h["node_free"]
    s.node_labels = h["node_labels"]
    s.node_taint_list = [[tuple(t) for t in ts] for ts in h["node_taints"]]
    s.label_words = h["label_words"]
    s.taint_words = h["taint_words"]
    s.label_strs = h["label_strs"]
    s.label_ids = {t: i for i, t in enumerate(s.label_strs)}
    s.taint_strs = [tuple(t) for t in h["taint_strs"]]
    s.taint_ids = {t: i for i, t in enumerate(s.taint_strs)}
    cap = s.node_cap
    s.allocatable_np = _grown(arrays["allocatable"], cap, nr)
    s.allocated_np = _grown(arrays["allocated"], cap, nr)
    s.version_np = _grown(arrays["version"], cap)
    s.nz_np = _grown(arrays["nz"], cap, 2)
    s.flags_np = _grown(arrays["flags"], cap)
    s.label_bits_np = _grown(arrays["label_bits"], cap, s.label_words)
    s.taint_bits_np = _grown(arrays["taint_bits"], cap, s.taint_words)

    keys = h["pod_keys"].split("\x00") if h["pod_keys"] or arrays["pod_node"].shape[0] else []
    s.n_pods = len(keys)
    s.pod_cap = cap = _room(s.n_pods, DEF_PODS)
    s.pod_keys = [k or None for k in keys]
    s.pod_index = {k: i for i, k in enumerate(keys) if k}
    s.pod_free = h["pod_free"]
    s.pod_node_np = _grown(arrays["pod_node"], cap)
    s.pod_node_np[s.n_pods:] = -1
    s.pod_class_np = _grown(arrays["pod_class"], cap)
    s.pod_gang_np = _grown(arrays["pod_gang"], cap)
    s.pod_queue_np = _grown(arrays["pod_queue"], cap)
    s.pod_phase_np = _grown(arrays["pod_phase"], cap)
    s.pod_phase_np[s.n_pods:] = PHASE_FREE
    s.pod_prio_np = _grown(arrays["pod_prio"], cap)
    s.pod_alloc_np = _grown(arrays["pod_alloc"], cap, nr)
    # Snapshots from before devices were folded have none recorded.
    s.pod_dev_np = _grown(arrays.get("pod_dev", np.zeros(s.n_pods, dtype=np.int64)), cap)
    # Snapshots from before starts were kept: every bound pod equally old.
    s.pod_start_np = _grown(arrays.get("pod_start", np.zeros(s.n_pods, dtype=np.int64)), cap)
    for i, v in enumerate(h["phase_counts"]):
        s.phase_counts[i] = v

    s.class_specs = h["class_specs"]
    s.n_classes = len(s.class_specs)
    s.class_cap = _room(s.n_classes, DEF_SMALL)
    s.class_index = {
        # Snapshots before priorityClassName joined the key have 4 parts.
        (tuple(tuple(kv) for kv in k[0]), tuple(k[1]), k[2], k[3],
         k[4] if len(k) > 4 else None): cid
        for k, cid in zip(h["class_keys"], h["class_ids"])
    }
    s.class_req_np = _grown(arrays["class_req"], s.class_cap, nr)
    s.class_nz_np = _grown(arrays["class_nz"], s.class_cap, 2)
    s.class_keys = [None] * s.n_classes
    s.class_memo_head = [None] * s.n_classes
    for key, cid in s.class_index.items():
        s.class_keys[cid] = key
    s.class_free = [c for c, spec in enumerate(s.class_specs) if spec is None]
    heapify(s.class_free)
    live = np.fromiter((k is not None for k in s.pod_keys), dtype=bool, count=s.n_pods)
    held = s.pod_class_np[: s.n_pods][live]
    held = held[held >= 0]
    s.class_refs_np = np.zeros(s.class_cap, dtype=np.int32)
    s.class_refs_np[: s.n_classes] = np.bincount(held, minlength=s.n_classes)[: s.n_classes]
    s.class_epoch_np = np.zeros(s.class_cap, dtype=np.int64)

    s.gang_keys = h["gang_keys"]
    s.gang_meta = h["gang_meta"]
    s.n_gangs = len(s.gang_keys)
    s.gang_cap = _room(s.n_gangs, DEF_SMALL)
    s.gang_index = {k: i for i, k in enumerate(s.gang_keys)}
    s.gang_min_np = _grown(arrays["gang_min"], s.gang_cap)
    s.gang_counts_np = _grown(arrays["gang_counts"], s.gang_cap, 4)

    s.queue_names = h["queue_names"]
    s.queue_meta = h["queue_meta"]
    s.priority_classes = h.get("priority_classes") or {}
    s.namespace_labels = h.get("namespace_labels") or {}
    s.n_queues = len(s.queue_names)
    s.queue_cap = _room(s.n_queues, DEF_SMALL)
    s.queue_index = {k: i for i, k in enumerate(s.queue_names)}
    s.queue_alloc_np = _grown(arrays["queue_alloc"], s.queue_cap, nr)
    s.queue_counts_np = _grown(arrays["queue_counts"], s.queue_cap, 4)

    # the log's clock (older snapshots: "usage_clock")
    s.clock = h.get("clock") or h.get("usage_clock") or 0.0
    s.usage_max_age = h.get("usage_max_age", USAGE_MAX_AGE)
    # Snapshots from before reports had times hold {name: usage}: at the clock.
    s._node_usage = {k: (v[0], v[1]) if isinstance(v, list) else (s.clock, v)
                     for k, v in h["node_usage"].items()}
    s.pod_usage = h["pod_usage"]
    s.reservations = h.get("reservations") or {}
    s.reserved_nodes = {n: g for g, nodes in s.reservations.items() for n in nodes}
    s.class_flags_np = np.zeros(s.class_cap, dtype=np.uint8)
    s.class_ports = [None] * s.n_classes
    s.port_bits_np = np.zeros((s.node_cap, s.port_words), dtype=np.uint64)
    # Snapshots record whether they were folded with reclamation on (absent: on,
    # as before it became opt-in); folded under the other setting, recompute.
    if "class_lim" in arrays and (h.get("reclamation_enabled", True)
                                  == s._reclamation.enabled):
        s.class_lim_np = _grown(arrays["class_lim"], s.class_cap, nr)
        s.pod_resv_np = _grown(arrays["pod_resv"], s.pod_cap, nr)
        rt = np.full((s.pod_cap, 2), np.nan, dtype=np.float64)
        rt[: s.n_pods] = arrays["pod_rtime"]
        s.pod_rtime_np = rt
        s.node_lim_np = _grown(arrays["node_lim"], s.node_cap, nr)
        s.node_resv_np = _grown(arrays["node_resv"], s.node_cap, nr)
    else:
        # A snapshot from before reclamation, or folded under the other setting:
        # limits from the class specs, every reservation at its limit.
        restore_limits(s)
    s.gang_span_np = np.zeros((s.gang_cap, 2), dtype=np.int32)
    s._bind_views()
    for c in range(s.n_classes):
        # (a snapshot from before classes were released keeps them all)
        if s.class_specs[c] is not None and s.class_refs[c] == 0:
            s._release_class(c)
    s._index_gang_spans()
    _restore_ports(s)
    _restore_interpod(s, h.get("label_sets") or [], arrays.get("pod_lset"),
                        h.get("label_sets_owned") or ())
    return s


def restore_limits(ClusterState self) -> None:
    # class_lim from class_req and (reclamation on) each class's "limits"; bound
    # pods' sums.
    on = self._reclamation.enabled
    # Columns first: interning a resource may widen the tables.
    cols = [[(self._resource(name), units)
             for name, units in (self.class_specs[c].get("limits") or {}).items()]
            if on and self.class_specs[c] is not None else [] for c in range(self.n_classes)]
    cdef Py_ssize_t nr = self.res_cap
    lim = np.zeros((self.class_cap, nr), dtype=np.int64)
    lim[: self.n_classes] = self.class_req_np[: self.n_classes, :nr]
    for c in range(self.n_classes):
        for col, units in cols[c]:
            lim[c, col] = units
    self.class_lim_np = lim
    self.pod_rtime_np = np.full((self.pod_cap, 2), np.nan, dtype=np.float64)
    self.pod_resv_np = np.zeros((self.pod_cap, nr), dtype=np.int64)
    self.node_lim_np = np.zeros((self.node_cap, nr), dtype=np.int64)
    bound = np.flatnonzero(self.pod_node_np[: self.n_pods] >= 0)
    if bound.size:
        self.pod_resv_np[bound] = lim[self.pod_class_np[bound]]
        np.add.at(self.node_lim_np, self.pod_node_np[bound], self.pod_resv_np[bound])
    self.node_resv_np = self.node_lim_np.copy()


def _restore_interpod(ClusterState self, list label_sets, object pod_lset, owned=()) -> None:
    # The label sets and each pod's are serialized; the counts are derived.
    cdef Py_ssize_t c
    ip = InterPodIndex(self, self.pod_cap)
    ip.restore(label_sets, owned, pod_lset, self.pod_keys)
    self.interpod = ip
    for c in range(self.n_classes):
        if self.class_specs[c] is None:
            continue  # (a released id)
        cons = self.class_specs[c].get("constraints")
        if cons and (cons.get("podAffinity") or cons.get("podAntiAffinity")
                     or cons.get("topologySpread")):
            self.class_flags[c] |= CLASS_INTERPOD
    ip.rebuild()


def _restore_ports(ClusterState self) -> None:
    # Host ports are derived, not serialized: the classes' ports and the bound pods.
    cdef Py_ssize_t c, p, n
    for c in range(self.n_classes):
        if self.class_specs[c] is None:
            continue  # (a released id)
        cons = self.class_specs[c].get("constraints")
        if cons and cons.get("hostPorts"):
            self._intern_ports(c, cons["hostPorts"])
    if not self.port_strs:
        return
    for p in range(self.n_pods):
        n = self.pod_node[p]
        c = self.pod_class[p]
        if n >= 0 and self.class_flags[c] & CLASS_HOST_PORTS:
            self._ports_change(n, c, 1)
