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
  the lower job share first.

Volcano computes these with float64 over every resource of the cluster, the pods
count included; so does this module. Pure: numpy vectors in, numbers out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import numpy.typing as npt

from esched.core.queues import QueueTree

__all__ = ["HdrfTree", "dominant_share", "vector"]

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

    def order(self, queues: Iterable[str]) -> list[str]:
        """``queues`` in hdrf order (ties by name)."""
        return sorted(queues, key=lambda q: (self.queue_key(q), q))


def vector(amounts: Mapping[str, int | float], names: list[str]) -> Vector:
    """A resource vector over ``names`` from a mapping."""
    return np.array([float(amounts.get(n, 0)) for n in names], dtype=np.float64)
