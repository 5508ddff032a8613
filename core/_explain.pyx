"""Explain a placement over a :class:`~esched.core._placer.Placer`'s view.

Reason bits become kube's words here (and only at this edge): :func:`explain` (every
alive node: feasible or not with reasons, each plugin's score, the choice),
:func:`scores` and :func:`fits` (one node), :func:`reason_texts` (the commit
validator's rejected bindings) and :func:`stats` (the placer's counters). They run
the placer's own view, feasibility and plugin scores, so they say what the scan
decides. The :class:`Placer` methods of the same names delegate here.
"""

from libc.stdint cimport uint64_t

from esched.core import reasons as _reasons

from esched.core._classview cimport ClassView
from esched.core._feasibility cimport (
    REASON_NON_RESOURCE,
    REASON_NOT_ALIVE,
    reason_bits,
    resource_reason,
)
from esched.core._placer cimport Placer
from esched.core._rng cimport below
from esched.core._state cimport ClusterState
from esched.core._types cimport NODE_ALIVE

__all__ = ["explain", "fits", "reason_texts", "scores", "stats"]


def explain(Placer pl, pod) -> dict:
    """Every alive node: feasible or not with reasons, each plugin's score, total.

    Scores every feasible node (no sampling, no cache) and chooses as ``place``
    would among all of them: highest total, ties broken by the placer's RNG.
    ``accounting``: what the pod's resources were judged against: ``requests``
    with reclamation off (the default, as kube-scheduler); with Borg's reclamation on,
    ``limits`` (production) or ``reservations`` (the others).
    """
    cdef ClusterState st = pl.state
    cdef Py_ssize_t cid = pl._class_of(pod), n
    pl._ensure_synced()
    cdef ClassView v
    cdef uint64_t reasons
    cdef int k
    pl._view(cid, &v, pl._lset_of(pod))
    pl._normalize(&v, 0, pl.n_nodes + 1)  # over every feasible node
    rows = []
    tied, best_total = [], -1
    for n in range(pl.n_nodes):
        if not (st.flags[n] & NODE_ALIVE):
            continue
        reasons = reason_bits(&v, n, True)
        row = {"name": st.node_names[n], "feasible": reasons == 0,
               "reasons": _reason_strings(pl, reasons, n, &v), "scores": {}, "total": None}
        if reasons == 0:
            total = 0
            for k in range(pl.n_specs):
                if not pl._plugin_applies(k, &v):
                    continue
                sc = int(pl._plugin_score(n, &v, k, cid))
                row["scores"][pl.plugin_names[k]] = sc
                total += pl.specs[k].weight * sc
            row["total"] = total
            if total > best_total:
                tied, best_total = [row["name"]], total
            elif total == best_total:
                tied.append(row["name"])
        rows.append(row)
    # As the scan: one draw among the tied, in node order.
    best = None
    if tied:
        best = tied[below(&pl.rng, <uint64_t>len(tied)) if len(tied) > 1 else 0]
    return {"chosen": best, "nodes": rows,
            "accounting": ("reservations" if v.by_reservations
                           else "limits" if pl.reclaim_on else "requests")}


cdef list _reason_strings(Placer pl, uint64_t reasons, Py_ssize_t n, const ClassView* v):
    # The resource bits name columns (the last bit is shared): recheck which.
    cdef ClusterState st = pl.state
    cdef Py_ssize_t r
    short = [st.res_names[r] for r in range(pl.n_res)
             if reasons & resource_reason(r) and v.fit_req[r] > 0
             and v.fit_used[n * v.n_res + r] + v.fit_req[r] > v.alloc[n * v.alloc_stride + r]]
    return _reasons.texts(reasons & <uint64_t>REASON_NON_RESOURCE, short)


def reason_texts(Placer pl, Py_ssize_t p, Py_ssize_t n, uint64_t reasons) -> list[str]:
    """kube-style texts of reason bits of pod slot ``p`` on node slot ``n`` (the
    placer's ``binding_reasons``), as :func:`fits` gives them."""
    cdef ClusterState st = pl.state
    cdef ClassView v
    pl._view(st.pod_class[p], &v, st.interpod.pod_lset_of(p))
    return _reason_strings(pl, reasons, n, &v)


def scores(Placer pl, pod, node: str) -> dict[str, int]:
    """Each plugin's score of ``pod`` on ``node``, feasible or not (kube's Score call)."""
    cdef Py_ssize_t cid = pl._class_of(pod)
    cdef int k
    pl._ensure_synced()
    idx = pl.state.node_index.get(node)
    if idx is None:
        raise KeyError(node)
    cdef ClassView v
    pl._view(cid, &v, pl._lset_of(pod))
    pl._normalize(&v, 0, pl.n_nodes + 1)  # over every feasible node, as explain
    out = {}
    for k in range(pl.n_specs):
        if pl._plugin_applies(k, &v):
            out[pl.plugin_names[k]] = int(pl._plugin_score(idx, &v, k, cid))
    return out


def fits(Placer pl, pod, node: str) -> list[str]:
    """Reasons ``pod`` does not fit ``node`` now (empty list: it fits)."""
    cdef Py_ssize_t cid = pl._class_of(pod)
    pl._ensure_synced()
    idx = pl.state.node_index.get(node)
    if idx is None:
        return [_reasons.TEXTS[REASON_NOT_ALIVE]]
    cdef ClassView v
    pl._view(cid, &v, pl._lset_of(pod))
    return _reason_strings(pl, reason_bits(&v, idx, True), idx, &v)


def stats(Placer pl) -> dict:
    """Counters: placed, unschedulable, nodes visited, cache hits/misses and hit rate,
    the rows given up by classes whose visits kept missing and those taken again."""
    lookups = pl.hits + pl.misses
    return {
        "placed": pl.placed,
        "unschedulable": pl.unschedulable,
        "nodes_visited": pl.visited,
        "cache_hits": pl.hits,
        "cache_misses": pl.misses,
        "cache_hit_rate": (pl.hits / lookups) if lookups else 0.0,
        "cache_steps_aside": pl.steps_aside,
        "cache_returns": pl.returns,
        "python_plugin_errors": pl.python_plugin_errors,
    }
