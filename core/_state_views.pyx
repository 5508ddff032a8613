"""ClusterState's larger read-only reports: :meth:`ClusterState.summary` (the stable
JSON view) and :meth:`~ClusterState.reclamation_view` (Borg's reclamation per node).

The methods delegate here; the functions are the methods they were, on the state
(``self``), which this module knows through ``_state.pxd`` only (like the fold's
modules). They read; they change nothing.
"""

import numpy as np

from esched.core.phases import PHASES
from esched.core.queues import queue_view

from esched.core._state cimport ClusterState
from esched.core._types cimport NODE_ALIVE, PHASE_PENDING, PHASE_RUNNING

__all__ = ["reclamation_view", "summary"]


def summary(ClusterState self) -> dict:
    """``ClusterState.summary`` (its docstring says what the view holds)."""
    cdef Py_ssize_t n = self.n_nodes, r
    alive = (self.flags_np[:n] & NODE_ALIVE) != 0
    # Python integers: a cluster's total of int64 columns may not fit an int64.
    allocatable = self.allocatable_np[:n][alive].astype(object).sum(axis=0)
    allocated = self.allocated_np[:n][alive].astype(object).sum(axis=0)
    order = sorted(range(self.n_res), key=lambda i: self.res_names[i])
    gangs = {}
    for g in sorted(range(self.n_gangs), key=lambda i: self.gang_keys[i]):
        entry = {"minMember": int(self.gang_min[g]), "queue": self.gang_meta[g]["queue"]}
        for i, phase in enumerate(PHASES):
            entry[phase] = int(self.gang_counts[g, i])
        gangs[self.gang_keys[g]] = dict(sorted(entry.items()))
    queues = {}
    view = queue_view(self)
    for q in sorted(range(self.n_queues), key=lambda i: self.queue_names[i]):
        meta = self.queue_meta[q]
        entry = {k: (dict(sorted(v.items())) if isinstance(v, dict) else v)
                 for k, v in meta.items() if (k != "affinity" or v) and k != "implicit"}
        computed = view[self.queue_names[q]]
        entry["path"] = computed["path"]
        entry["fairShare"] = computed["fairShare"]
        entry["share"] = computed["share"]
        entry["allocated"] = {
            self.res_names[r]: int(self.queue_alloc[q, r])
            for r in order if self.queue_alloc[q, r] != 0
        }
        entry["Pending"] = int(self.queue_counts[q, PHASE_PENDING])
        entry["Running"] = int(self.queue_counts[q, PHASE_RUNNING])
        queues[self.queue_names[q]] = dict(sorted(entry.items()))
    return {
        "gangs": gangs,
        "nodes": {
            "allocatable": {self.res_names[r]: int(allocatable[r]) for r in order},
            "allocated": {self.res_names[r]: int(allocated[r]) for r in order},
            "count": int(alive.sum()),
        },
        "pods": {phase: int(self.phase_counts[i]) for i, phase in enumerate(PHASES)},
        "position": int(self.position),
        # PriorityClass objects of the log (esched.priorityclass.upserted).
        "priorityClasses": {k: dict(v) for k, v in sorted(self.priority_classes.items())},
        "queues": queues,
        # Nodes held for a starving gang (esched.gang.reserved), until it is placed.
        "reservations": {g: list(nodes) for g, nodes in sorted(self.reservations.items())},
        # Pending pods kube's SchedulingGates holds back, with the gates they wait for.
        "schedulingGated": {k: list(v) for k, v in sorted(self.gated.items())},
    }


def reclamation_view(ClusterState self) -> dict:
    """``ClusterState.reclamation_view`` (its docstring says what the view holds)."""
    cdef Py_ssize_t n, r, p
    use = np.zeros((self.n_nodes, self.n_res), dtype=object)
    for key, usage in self.pod_usage.items():
        slot = self.pod_index.get(key)
        if slot is None or self.pod_node[<Py_ssize_t>slot] < 0:
            continue
        n = self.pod_node[<Py_ssize_t>slot]
        for name, units in usage.items():
            col = self.res_index.get(name)
            if col is not None:
                use[n, col] += units
    lim, resv = self.node_limits(), self.node_reservations()
    reserved = self.node_reserved()
    order = sorted(range(self.n_res), key=lambda i: self.res_names[i])
    nodes = {}
    totals = {}
    for n in range(self.n_nodes):
        if not self.flags[n] & NODE_ALIVE:
            continue
        row = {}
        for r in order:
            if lim[n, r] == 0 and use[n, r] == 0:
                continue
            entry = {"limit": int(lim[n, r]), "reservation": int(resv[n, r]),
                     "reserved": int(reserved[n, r]), "usage": int(use[n, r]),
                     "reclaimed": int(lim[n, r] - reserved[n, r])}
            row[self.res_names[r]] = entry
            t = totals.setdefault(self.res_names[r], dict.fromkeys(entry, 0))
            for k, v in entry.items():
                t[k] += v
        if row:
            nodes[self.node_names[n]] = row
    return {"nodes": nodes, "totals": totals, "clock": self.clock,
            # what pods are placed against: requests with reclamation off (the
            # default; then limit = reservation = reserved = requests)
            "accounting": "limits/reservations" if self._reclamation.enabled
            else "requests",
            "config": self._reclamation.as_dict()}
