"""Volcano's reclaim: a queue below its fair share takes back room from queues above theirs.

A pending pod of a *starved* queue (dominant share < 1: it holds less than its fair
share, :func:`esched.core.queues.queue_view`) that fits no node as things are may
evict running pods of other queues when every victim is legal:

* its queue is ``reclaimable`` and is not the starved queue;
* the victim's queue stays at or above its own fair share after the eviction
  (dominant share >= 1, counting the victims already chosen): only what a queue
  uses *above* its fair share is taken back, so the victim's queue cannot turn
  round and reclaim it again (no ping-pong);
* the victim's queue keeps its ``guarantee``: after the eviction it still holds at
  least the guaranteed amount of every guaranteed resource (a guarantee is never
  reclaimed).

Victims are chosen per node, lowest priority first, until the pod fits; among
nodes the plan with the lowest highest-victim priority, then the fewest victims,
then the lowest node slot wins (deterministic). The plan is a proposal like a
preemption (``victims`` plus the pod's binding, one transaction, with
``"reclaim": true``); the commit service re-checks legality with
:func:`victims_legal` against its authoritative state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from esched.core.queues import dominant_share, queue_view

__all__ = ["ReclaimPlan", "plan_reclaim", "victims_legal"]

_PENDING = 0
_RUNNING = 1
_NODE_ALIVE = 1
_RESOURCE_REASONS = ("Insufficient ", "Too many pods")


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    """Bind ``pod`` to ``node`` after evicting ``victims`` (pod keys, all on ``node``)."""

    pod: str
    queue: str
    node: str
    victims: tuple[str, ...]

    def proposal(self, proposal_id: str, position: int, requests: dict[str, int],
                 replica: str = "dispatch") -> dict[str, Any]:
        """The proposal ``data``: the pod's binding plus its victims, marked reclaim."""
        return {"proposal": proposal_id, "replica": replica, "position": position,
                "gang": None, "reclaim": True,
                "bindings": [{"pod": self.pod, "node": self.node, "resources": requests}],
                "victims": [{"pod": v, "node": self.node} for v in self.victims]}


def _alloc_of(state: Any, p: int, names: list[str]) -> dict[str, int]:
    row = state.pod_alloc_np[p]
    return {names[r]: int(row[r]) for r in range(len(names)) if row[r]}


def _sub(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) - v
    return out


def _victim_ok(queue: str, meta: dict, alloc: dict[str, int], fair: dict[str, int],
               victim: dict[str, int]) -> str | None:
    """Why evicting ``victim`` from ``queue`` (holding ``alloc``) is illegal, or None."""
    if not meta.get("reclaimable", True):
        return f"queue {queue} is not reclaimable"
    after = _sub(alloc, victim)
    if dominant_share(after, fair) < 1.0:
        return f"queue {queue} would fall below its fair share"
    for r, g in (meta.get("guarantee") or {}).items():
        if victim.get(r, 0) and after.get(r, 0) < g:
            return f"queue {queue} would fall below its guarantee of {r}"
    return None


def victims_legal(state: Any, pod: str, victims: Iterable[str],
                  view: dict[str, dict[str, Any]] | None = None,
                  taken: Iterable[str] = ()) -> str | None:
    """Why reclaiming ``victims`` for pending ``pod`` is illegal now, or None if legal.

    ``taken``: running pods already evicted by earlier decisions of the same batch
    (their queues hold that much less).
    """
    view = view if view is not None else queue_view(state)
    idx = state.pod_index.get(pod)
    if idx is None:
        return f"pod {pod} is not in the log"
    q = state.queue_names[int(state.pod_queue_np[idx])]
    if view[q]["share"] >= 1.0:
        return f"queue {q} is not below its fair share (share {view[q]['share']:.3f})"
    names = list(state.res_names[: state.n_res])
    held = {name: dict(v["allocated"]) for name, v in view.items()}
    for t in taken:
        tidx = state.pod_index.get(t)
        if tidx is not None and int(state.pod_phase_np[tidx]) == _RUNNING:
            tq = state.queue_names[int(state.pod_queue_np[tidx])]
            held[tq] = _sub(held[tq], _alloc_of(state, int(tidx), names))
    for v in victims:
        vidx = state.pod_index.get(v)
        if vidx is None:
            return f"victim {v} is not in the log"
        vq = state.queue_names[int(state.pod_queue_np[vidx])]
        if vq == q:
            return f"victim {v} is in the reclaiming queue {q}"
        alloc = _alloc_of(state, int(vidx), names)
        why = _victim_ok(vq, state.queue_meta[state.queue_index[vq]], held[vq],
                         view[vq]["fairShare"], alloc)
        if why is not None:
            return f"victim {v}: {why}"
        held[vq] = _sub(held[vq], alloc)
    return None


def plan_reclaim(state: Any, placer: Any, pod: str,
                 view: dict[str, dict[str, Any]] | None = None) -> ReclaimPlan | None:
    """The best legal reclaim for pending ``pod`` (see the module doc), or None."""
    idx = state.pod_index.get(pod)
    if idx is None or int(state.pod_phase_np[idx]) != _PENDING:
        return None
    view = view if view is not None else queue_view(state)
    q = int(state.pod_queue_np[idx])
    qname = state.queue_names[q]
    if view[qname]["share"] >= 1.0:
        return None
    nres, npods = state.n_res, state.n_pods
    names = list(state.res_names[:nres])
    need = np.asarray(state.class_req_np[int(state.pod_class_np[idx]), :nres], dtype=np.int64)
    reclaimable = np.array([bool(state.queue_meta[i].get("reclaimable", True))
                            for i in range(state.n_queues)], dtype=bool)
    pq = state.pod_queue_np[:npods]
    cand = np.flatnonzero((state.pod_phase_np[:npods] == _RUNNING) & (pq != q)
                          & reclaimable[pq])
    if not len(cand):
        return None
    # Lowest priority first, then slot (deterministic).
    cand = cand[np.lexsort((cand, state.pod_prio_np[cand]))]
    by_node: dict[int, list[int]] = {}
    for p in cand:
        by_node.setdefault(int(state.pod_node_np[p]), []).append(int(p))
    best: tuple[tuple[int, int, int], ReclaimPlan] | None = None
    for n in sorted(by_node):
        if not state.flags_np[n] & _NODE_ALIVE:
            continue
        node = state.node_names[n]
        problems = [r for r in placer.fits(pod, node) if not r.startswith(_RESOURCE_REASONS)]
        if problems:
            continue
        free = (np.asarray(state.allocatable_np[n, :nres], dtype=np.int64)
                - np.asarray(state.allocated_np[n, :nres], dtype=np.int64))
        held = {name: dict(v["allocated"]) for name, v in view.items()}
        chosen: list[int] = []
        for p in by_node[n]:
            if np.all(free >= need):
                break
            alloc = _alloc_of(state, p, names)
            vq = state.queue_names[int(state.pod_queue_np[p])]
            if _victim_ok(vq, state.queue_meta[state.queue_index[vq]], held[vq],
                          view[vq]["fairShare"], alloc) is not None:
                continue
            # Only a victim that frees some resource the pod is still short of helps.
            short = need > free
            if not np.any(short & (np.asarray(state.pod_alloc_np[p, :nres]) > 0)):
                continue
            chosen.append(p)
            held[vq] = _sub(held[vq], alloc)
            free = free + np.asarray(state.pod_alloc_np[p, :nres], dtype=np.int64)
        if not chosen or not np.all(free >= need):
            continue
        cost = (int(max(state.pod_prio_np[p] for p in chosen)), len(chosen), n)
        if best is None or cost < best[0]:
            best = (cost, ReclaimPlan(pod, qname, node,
                                      tuple(state.pod_keys[p] for p in chosen)))
    return None if best is None else best[1]
