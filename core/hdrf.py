"""Volcano's hdrf: the drf plugin's order with ``enableHierarchy`` (hierarchical DRF).

Ported from ``pkg/scheduler/plugins/drf/drf.go`` of volcano-sh/volcano
(``buildHierarchy``, ``updateHierarchicalShare``, ``resourceSaturated``,
``compareQueues``, the ``jobOrderFn``), for ``--queue-hierarchy annotations``:

- the tree is the queue tree of :func:`esched.core.queues.hierarchy_specs`
  (``volcano.sh/hierarchy`` paths, ``volcano.sh/hierarchy-weights`` per segment);
  each job (a gang, or a pod of no gang) is a leaf of weight 1 under its queue;
- a job's share is its dominant share of the cluster (``allocated / total`` of its
  largest resource); it is **saturated** when some resource it holds reaches what
  it requests, or when it asks for a resource the cluster has no more of (not
  "demanding": everything of it allocated);
- an inner node rescales its children to the smallest dominant share among its
  non-empty, unsaturated children (saturated children count as they are), so a
  subtree is not credited for the resources its jobs happen not to ask for; its
  share is the dominant share of that sum; it is saturated when all its children
  are;
- **queue order**: walking down both queues' paths from the root, the first level
  where they differ decides: an unsaturated node before a saturated one, then the
  lower ``share / weight``;
- **job order** (drf's ``jobOrderFn``, registered with or without the hierarchy):
  the lower job share first;
- **reclaim** (drf's ``reclaimFn``, registered only with the hierarchy): a running
  task of another queue is a victim for a reclaiming task when, in the tree with the
  reclaimer's request added to its job and that one victim's taken from its job
  (every other victim as it is: each is judged on its own), the reclaimer's queue
  comes strictly before the victim's in the queue order above
  (:meth:`HdrfTree.reclaimable`).

Volcano computes these with float64 over every resource of the cluster, the pods
count included; so does this module. Pure: numpy vectors in, numbers out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from esched.core.phases import PHASE_PENDING, PHASE_RUNNING
from esched.core.queues import QueueTree, cluster_allocatable, state_queue_specs
from esched.schemas.objects import DEFAULT_QUEUE

__all__ = ["PENDING_PODS", "RUNNING_PODS", "HdrfTree", "dominant_share", "state_tree", "vector"]

#: Volcano's ``minResource``: amounts below it are "none" (``Resource.ResourceNames``).
_MIN_RESOURCE = 0.1

Vector = npt.NDArray[np.float64]


def dominant_share(allocated: Vector, total: Vector) -> float:
    """drf's ``calculateShare``: the largest ``allocated[r] / total[r]`` over the
    cluster's resources (a resource the cluster has none of counts 1 if held)."""
    best = 0.0
    for a, t in zip(allocated.tolist(), total.tolist(), strict=True):
        if t < _MIN_RESOURCE:
            continue
        s = a / t
        if s > best:
            best = s
    return best


def _saturated(allocated: Vector, request: Vector, demanding: npt.NDArray[np.bool_]) -> bool:
    """``resourceSaturated``: over the resources the job holds, one it holds all it
    requests of, or one it requests that is no longer demanding (fully allocated)."""
    held = allocated >= _MIN_RESOURCE
    asked = request != 0
    if bool(np.any(held & asked & (allocated >= request))):
        return True
    return bool(np.any(held & asked & ~demanding))


class HdrfTree:
    """The hdrf tree of one ordering: queues from a :class:`QueueTree`, jobs as leaves.

    :param tree: the queue tree (``hierarchy_specs(..., "annotations")``).
    :param total: the cluster's allocatable per resource (the share's denominator).
    """

    def __init__(self, tree: QueueTree, total: Vector) -> None:
        self.tree = tree
        self.total = np.asarray(total, dtype=np.float64)
        self.allocated = np.zeros_like(self.total)  # every job's, summed
        # queue -> job -> [allocated, request]
        self.jobs: dict[str, dict[str, list[Vector]]] = {}
        self.share: dict[str, float] = {}
        self.saturated: dict[str, bool] = {}
        self._counts: dict[tuple[str, str], int] = {}
        self._dirty = True

    def set_job(
        self, queue: str, job: str, allocated: Vector, request: Vector, count: int = 1
    ) -> None:
        """Place job ``job`` of ``queue`` in the tree with what it holds and asks for
        in all (Volcano's ``TotalRequest``: every task, pending ones too). ``count``:
        how many pods a leaf standing for several stands for (see :meth:`take`)."""
        jobs = self.jobs.setdefault(queue, {})
        old = jobs.get(job)
        if old is not None:
            self.allocated -= old[0]
        alloc = np.asarray(allocated, dtype=np.float64).copy()
        jobs[job] = [alloc, np.asarray(request, dtype=np.float64).copy()]
        self._counts[(queue, job)] = count
        self.allocated += alloc
        self._dirty = True

    def allocate(self, queue: str, job: str, amount: Vector, asks: bool = False) -> None:
        """drf's ``AllocateFunc``: ``amount`` more held by the job (made if absent;
        ``asks``: its request grows by as much, a leaf of pods each holding all it
        asks for)."""
        rec = self.jobs.setdefault(queue, {}).get(job)
        if rec is None:
            self.set_job(queue, job, np.zeros_like(self.total), np.zeros_like(self.total))
            rec = self.jobs[queue][job]
        rec[0] = rec[0] + amount
        if asks:
            rec[1] = rec[1] + amount
        self.allocated += amount
        self._dirty = True

    def take(self, queue: str, job: str, amount: Vector) -> None:
        """One pod of a leaf of pending pods left it (asking ``amount``): the leaf is
        gone with its last pod."""
        rec = self.jobs.get(queue, {}).get(job)
        if rec is None:
            return
        left = self._counts.get((queue, job), 1) - 1
        if left <= 0:
            del self.jobs[queue][job]
            self._counts.pop((queue, job), None)
        else:
            self._counts[(queue, job)] = left
            rec[1] = rec[1] - amount
        self._dirty = True

    def job_share(self, queue: str, job: str) -> float:
        """The job's dominant share (drf's job order: lower first); 0 for a job the
        tree does not have (it holds nothing)."""
        rec = self.jobs.get(queue, {}).get(job)
        return 0.0 if rec is None else dominant_share(rec[0], self.total)

    def update(self) -> None:
        """``updateHierarchicalShare`` from the root: every node's share and
        saturation."""
        if not self._dirty:
            return
        demanding = self.allocated < self.total
        self.share.clear()
        self.saturated.clear()
        children = self.tree.children
        # An inner node's input per child: (allocated, share, saturated).

        def visit(name: str | None) -> tuple[Vector, float, bool]:
            kids: list[tuple[Vector, float, bool]] = []
            for c in children.get(name, ()):
                kids.append(visit(c))
            if name is not None:
                for alloc, request in self.jobs.get(name, {}).values():
                    kids.append(
                        (
                            alloc,
                            dominant_share(alloc, self.total),
                            _saturated(alloc, request, demanding),
                        )
                    )
            mdr = 1.0
            for alloc, share, sat in kids:
                if share != 0 and not sat:
                    mdr = min(mdr, dominant_share(alloc, self.total))
            total = np.zeros_like(self.total)
            saturated = True
            for alloc, share, sat in kids:
                if not sat:
                    saturated = False
                if share != 0:
                    total += alloc if sat else alloc * (mdr / share)
            share = dominant_share(total, self.total)
            if name is not None:
                self.share[name] = share
                self.saturated[name] = saturated
            return total, share, saturated

        visit(None)
        self._dirty = False

    def queue_key(self, queue: str) -> tuple[tuple[bool, float], ...]:
        """The sort key of ``compareQueues``: per level from the root down to the
        queue, (saturated, share / weight); the lower key is served first. Where
        ``compareQueues`` finds two queues equal down the shorter path, the key puts
        the shorter path first (Volcano leaves that tie to the next plugin's order)."""
        self.update()
        path: list[str] = []
        q: str | None = queue
        while q is not None:
            path.append(q)
            q = self.tree.parent.get(q)
        key: list[tuple[bool, float]] = []
        for name in reversed(path):
            weight = self.tree.specs[name].weight or 1
            key.append((self.saturated.get(name, True), self.share.get(name, 0.0) / weight))
        return tuple(key)

    def compare(self, left: str, right: str) -> int:
        """``compareQueues``: -1 when queue ``left`` is served before ``right``, 1
        after, 0 when they are equal down the shorter of their paths."""
        lk, rk = self.queue_key(left), self.queue_key(right)
        depth = min(len(lk), len(rk))
        return (lk[:depth] > rk[:depth]) - (lk[:depth] < rk[:depth])

    def copy(self) -> HdrfTree:
        """A tree whose jobs can change without changing this one's."""
        out = HdrfTree(self.tree, self.total)
        out.allocated = self.allocated.copy()
        out.jobs = {q: {j: list(rec) for j, rec in jobs.items()} for q, jobs in self.jobs.items()}
        out._counts = dict(self._counts)
        return out

    def reclaimable(
        self,
        queue: str,
        job: str | None,
        request: Vector,
        victim_queue: str,
        victim_job: str | None,
        victim: Vector,
    ) -> bool:
        """drf's ``reclaimFn`` with the hierarchy, for one victim: whether a task of
        ``victim_job`` (of ``victim_queue``) holding ``victim`` may be evicted for a
        task of ``job`` (of ``queue``) asking ``request``; a job None: a pod of no
        gang (see :func:`state_tree`), else the job's leaf (``gang:<key>``). The
        reclaimer's job holds ``request`` more, the victim's holds ``victim`` less;
        the reclaimer's queue must then come strictly before the victim's
        (``compareQueues < 0``). This tree is left unchanged."""
        t = self.copy()
        req = np.asarray(request, dtype=np.float64)
        if job is None:
            # A pending pod of no gang is a job of its own in Volcano: holding what it
            # asks for once placed, like the queue's other running ones.
            t.take(queue, PENDING_PODS, req)
        t.allocate(queue, job or RUNNING_PODS, req, asks=job is None)
        gone = np.asarray(victim, dtype=np.float64)
        rec = t.jobs.get(victim_queue, {}).get(victim_job or RUNNING_PODS)
        if rec is not None:
            rec[0] = rec[0] - gone
            t.allocated -= gone
            if victim_job is None:
                # The victim, a job of its own, leaves the queue's running leaf and
                # stays in the tree holding nothing of what it asks for.
                rec[1] = rec[1] - gone
                t.set_job(victim_queue, "~victim", np.zeros_like(gone), gone)
            t._dirty = True
        return t.compare(queue, victim_queue) < 0

    def order(self, queues: Iterable[str]) -> list[str]:
        """``queues`` in hdrf order (ties by name)."""
        return sorted(queues, key=lambda q: (self.queue_key(q), q))


#: The leaves of a queue's running and pending pods of no gang (each a job of its own
#: in Volcano; summed per queue, see :func:`state_tree`).
RUNNING_PODS = "~running"
PENDING_PODS = "~pending"


def state_tree(
    st: Any,
    tree: QueueTree | None = None,
    cluster: Mapping[str, int] | None = None,
    pend_idx: npt.NDArray[np.int64] | None = None,
    pend_req: npt.NDArray[np.int64] | None = None,
) -> HdrfTree:
    """The hdrf tree of a ClusterState: each gang a job (what its running members hold,
    what all its members ask for); pods of no gang, each a job of its own, are summed
    per queue into one leaf of running pods (each holds all it asks for: saturated)
    and one of pending ones (holding nothing: it only keeps its queue unsaturated),
    which changes none of hdrf's figures. ``cluster``: the alive nodes' allocatable
    (:func:`cluster_allocatable`); ``pend_idx`` / ``pend_req``: the pending pods'
    slots and requests, when the caller has them; ``tree``: the queues'
    (default: :func:`state_queue_specs` under ``annotations``)."""
    if tree is None:
        tree = QueueTree(state_queue_specs(st, "annotations"))
    res_names = list(st.res_names[: st.n_res])
    nr = len(res_names)
    if cluster is None:
        cluster = cluster_allocatable(st)
    hdrf = HdrfTree(tree, np.array([cluster.get(n, 0) for n in res_names], dtype=np.float64))
    phase = st.pod_phases()
    class_req = st.class_requests()
    classes = st.pod_classes()
    if pend_idx is None or pend_req is None:
        pend_idx = np.flatnonzero(phase == PHASE_PENDING)
        pend_req = class_req[classes[pend_idx]]
    run_idx = np.flatnonzero(phase == PHASE_RUNNING)
    gangs = st.pod_gangs()
    queues = st.pod_queues()
    nq = int(st.n_queues)
    # Per gang: held (running members) and asked (all members); per queue, the
    # pods of no gang.
    ng = max(int(st.n_gangs), 1)
    held = np.zeros((ng, nr), dtype=np.float64)
    asked = np.zeros((ng, nr), dtype=np.float64)
    solo_run = np.zeros((nq, nr), dtype=np.float64)
    solo_pend = np.zeros((nq, nr), dtype=np.float64)
    run_req = class_req[classes[run_idx]][:, :nr]
    run_g = gangs[run_idx]
    in_g = run_g >= 0
    np.add.at(held, run_g[in_g], run_req[in_g])
    np.add.at(asked, run_g[in_g], run_req[in_g])
    np.add.at(solo_run, queues[run_idx][~in_g], run_req[~in_g])
    pend_g = gangs[pend_idx]
    in_g = pend_g >= 0
    np.add.at(asked, pend_g[in_g], pend_req[in_g][:, :nr])
    np.add.at(solo_pend, queues[pend_idx][~in_g], pend_req[~in_g][:, :nr])
    n_pend = np.bincount(queues[pend_idx][~in_g], minlength=nq)
    for q in range(nq):
        name = st.queue_names[q]
        if solo_run[q].any():
            hdrf.set_job(name, RUNNING_PODS, solo_run[q], solo_run[q])
        if n_pend[q]:
            hdrf.set_job(name, PENDING_PODS, np.zeros(nr), solo_pend[q], count=int(n_pend[q]))
    for g in np.flatnonzero(asked.any(axis=1)).tolist():
        if g >= st.n_gangs:
            continue
        name = st.gang_meta[g].get("queue") or DEFAULT_QUEUE
        if name not in st.queue_index:
            name = st.queue_names[0]
        hdrf.set_job(name, f"gang:{st.gang_keys[g]}", held[g], asked[g])
    return hdrf


def vector(amounts: Mapping[str, int | float], names: list[str]) -> Vector:
    """A resource vector over ``names`` from a mapping."""
    return np.array([float(amounts.get(n, 0)) for n in names], dtype=np.float64)
