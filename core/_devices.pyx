"""Per-device GPU accounting: exact fit of whole-GPU and GPU-sharing requests, and FGD.

A node's GPUs are ``ndev`` devices of ``GPU_MILLI`` (1000) milli-GPU each; the table
keeps the free milli of every device (``free[node, device]``), as GPU-sharing
schedulers in production do (Alibaba's gpushare, the FGD simulator's
``open_gpu_share``). A request is one number, its total milli-GPU ``g``:

- ``0 < g <= 1000``: a share of ONE device; fits if some device has ``free >= g``
  (``g == 1000`` is a whole GPU: a fully idle device);
- ``g > 1000``: ``g // 1000`` whole devices (``g`` must be a multiple of 1000);
  fits if that many devices are fully idle.

The aggregate (``sum free``) that the ClusterState tracks as an ordinary resource is
necessary but not sufficient (four devices at 250 free do not fit a 500 share); this
table is the exact check, used as an extra filter (``fit_mask``) next to the placer.

Device choice (``choose``): whole-GPU requests take the lowest-index idle devices;
shares take the fitting device with the least free milli (best fit, the FGD paper's
baselines), or with FGD the device whose use raises the node's fragmentation least.
The table also tracks free CPU per node, which the fragmentation measure needs, and
keeps F_n per node current so the cluster total is O(1) to read.

Nodes are addressed by the ClusterState's node slots. Everything is integer milli
except the fragmentation values (expected milli-GPU, a double).
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

import numpy as np

from esched.core.scoring._fgd cimport (
    GPU_MILLI,
    MAX_DEVICES,
    FragTypes,
    fgd_score,
    node_frag,
)

# GPU_MILLI and MAX_DEVICES are C constants (cimport them from esched.core.scoring._fgd),
# not module attributes: listing them here broke ``from esched.core._devices import *``.
__all__ = ["DeviceTable", "GangDevices", "request_shape"]


def request_shape(long long g) -> tuple[int, int]:
    """``(devices, milli per device)`` of a total request ``g``; ValueError if not exact."""
    if g < 0:
        raise ValueError(f"GPU request {g} milli is negative")
    if g == 0:
        return (0, 0)
    if g <= GPU_MILLI:
        return (1, int(g))
    if g % GPU_MILLI:
        raise ValueError(f"GPU request {g} milli: above one GPU it must be whole GPUs")
    return (int(g // GPU_MILLI), GPU_MILLI)


cdef inline bint _fits(const int32_t* free, int ndev, long long g) noexcept nogil:
    cdef int i, k = 0
    cdef long long need
    if g <= 0:
        return True
    if g <= GPU_MILLI:
        for i in range(ndev):
            if free[i] >= g:
                return True
        return False
    need = g // GPU_MILLI
    for i in range(ndev):
        if free[i] == GPU_MILLI:
            k += 1
    return k >= need


cdef class DeviceTable:
    """Free milli-GPU per device of every node, free CPU per node, FGD fragmentation.

    :param max_devices: devices per node at most (<= 16).
    """

    def __init__(self, int max_devices=MAX_DEVICES) -> None:
        if not 1 <= max_devices <= MAX_DEVICES:
            raise ValueError(f"max_devices must be in 1..{MAX_DEVICES}")
        self.n_nodes = 0
        self.models = {}
        self.model_names = []
        self.has_target = False
        self.frag_total = 0.0
        self.memo_rows = {}
        self.memo_hits = self.memo_misses = 0
        self._alloc(64, max_devices)
        self.T.n = 0

    def _alloc(self, Py_ssize_t cap, int width) -> None:
        def grown(old, shape, dtype, fill):
            new = np.full(shape, fill, dtype=dtype)
            if old is not None:
                new[: old.shape[0]] = old
            return new
        self.free_np = grown(self.free_np, (cap, width), np.int32, 0)
        self.ndev_np = grown(self.ndev_np, cap, np.int32, 0)
        self.model_np = grown(self.model_np, cap, np.int32, -1)
        self.cpu_free_np = grown(self.cpu_free_np, cap, np.int64, 0)
        self.ver_np = grown(self.ver_np, cap, np.int64, 0)
        self.frag_np = grown(self.frag_np, cap, np.float64, 0.0)
        self.free = self.free_np
        self.ndev = self.ndev_np
        self.model = self.model_np
        self.cpu_free = self.cpu_free_np
        self.ver = self.ver_np
        self.frag = self.frag_np
        self._reset_memo()

    def _reset_memo(self) -> None:
        self.memo_rows = {}
        cap = self.free_np.shape[0]
        self.memo_ver_np = np.full((8, cap), -1, dtype=np.int64)
        self.memo_delta_np = np.zeros((8, cap), dtype=np.float64)
        self.memo_ver = self.memo_ver_np
        self.memo_delta = self.memo_delta_np

    # ------------------------------------------------------------------ nodes

    def model_id(self, name) -> int:
        """The id of GPU model ``name`` (interned on first use); -1 for None/empty."""
        if not name:
            return -1
        mid = self.models.get(name)
        if mid is None:
            mid = len(self.model_names)
            if mid >= 64:
                raise ValueError("at most 64 GPU models")
            self.models[name] = mid
            self.model_names.append(name)
        return mid

    def set_node(self, Py_ssize_t n, int devices, model, long long cpu_milli) -> None:
        """Node slot ``n`` has ``devices`` idle GPUs of ``model`` and ``cpu_milli`` free CPU."""
        if devices < 0 or devices > self.free_np.shape[1]:
            raise ValueError(f"node {n}: {devices} GPUs (this table holds at most "
                             f"{self.free_np.shape[1]} per node)")
        if n >= self.free_np.shape[0]:
            self._alloc(max(n + 1, 2 * self.free_np.shape[0]), self.free_np.shape[1])
        if n >= self.n_nodes:
            self.n_nodes = n + 1
        cdef int i
        for i in range(self.free.shape[1]):
            self.free[n, i] = GPU_MILLI if i < devices else 0
        self.ndev[n] = devices
        self.model[n] = self.model_id(model)
        self.cpu_free[n] = cpu_milli
        self._touch(n)

    def remove_node(self, Py_ssize_t n) -> None:
        """Node slot ``n`` is gone (no devices, no CPU)."""
        self.set_node(n, 0, None, 0)

    cdef void _touch(self, Py_ssize_t n) noexcept:
        cdef double f
        self.ver[n] += 1
        if self.has_target:
            f = node_frag(&self.free[n, 0], self.ndev[n], self.cpu_free[n], self.model[n], &self.T)
            self.frag_total += f - self.frag[n]
            self.frag[n] = f

    # ------------------------------------------------------------------ fit

    def fits(self, Py_ssize_t n, long long g) -> bool:
        """Whether a request of ``g`` milli-GPU fits node ``n``'s devices now."""
        if n < 0 or n >= self.n_nodes:
            return g <= 0
        return _fits(&self.free[n, 0], self.ndev[n], g)

    def fit_mask(self, long long g, uint8_t[::1] out) -> int:
        """``out[n] = 1`` where ``g`` fits node ``n`` (n < len(out)), else 0; count of 1s."""
        cdef Py_ssize_t n, N = out.shape[0], M = self.n_nodes
        cdef long long count = 0
        cdef int W = self.free.shape[1]
        cdef int32_t* base = &self.free[0, 0]
        with nogil:
            for n in range(N):
                if n < M and _fits(base + n * W, self.ndev[n], g):
                    out[n] = 1
                    count += 1
                else:
                    out[n] = 0
        return count

    # ------------------------------------------------------------------ binding

    cdef double _delta_on(self, Py_ssize_t n, long long g, long long cpu, int dev) noexcept nogil:
        """F_n after placing (g on device ``dev`` if a share) minus F_n before."""
        cdef int32_t after[MAX_DEVICES]
        cdef int i, nd = self.ndev[n], k
        cdef long long need
        for i in range(nd):
            after[i] = self.free[n, i]
        if 0 < g < GPU_MILLI:
            after[dev] -= <int32_t>g
        elif g >= GPU_MILLI:
            need = g // GPU_MILLI
            k = 0
            for i in range(nd):
                if k < need and after[i] == GPU_MILLI:
                    after[i] = 0
                    k += 1
        return node_frag(after, nd, self.cpu_free[n] - cpu, self.model[n], &self.T) - self.frag[n]

    cdef double _best_delta(self, Py_ssize_t n, long long g, long long cpu, int* dev) noexcept nogil:
        cdef int i, j, nd = self.ndev[n]
        cdef bint seen
        cdef double d, best = 1e300
        dev[0] = -1
        if not (0 < g < GPU_MILLI):
            return self._delta_on(n, g, cpu, -1)
        for i in range(nd):
            if self.free[n, i] < g:
                continue
            # Devices with the same free milli give the same delta: try each value once.
            seen = False
            for j in range(i):
                if self.free[n, j] == self.free[n, i]:
                    seen = True
                    break
            if seen:
                continue
            d = self._delta_on(n, g, cpu, i)
            if d < best:
                best = d
                dev[0] = i
        return best

    def choose(self, Py_ssize_t n, long long g, long long cpu=0, bint fgd=False) -> tuple:
        """Devices of node ``n`` a request of ``g`` milli takes (ValueError if it does not fit)."""
        request_shape(g)
        if not self.fits(n, g):
            raise ValueError(f"{g} milli-GPU does not fit node slot {n}")
        cdef int i, dev = -1, nd = self.ndev[n]
        cdef int32_t best_free = GPU_MILLI + 1
        if g == 0:
            return ()
        if g >= GPU_MILLI:
            need = g // GPU_MILLI
            out = [i for i in range(nd) if self.free[n, i] == GPU_MILLI][:need]
            return tuple(out)
        if fgd and self.has_target:
            self._best_delta(n, g, cpu, &dev)
            return (dev,)
        for i in range(nd):
            if g <= self.free[n, i] < best_free:
                best_free = self.free[n, i]
                dev = i
        return (dev,)

    def bind(self, Py_ssize_t n, long long g, long long cpu, devices) -> None:
        """Take ``g`` milli on ``devices`` (from :meth:`choose`) and ``cpu`` milli of CPU."""
        cdef int d
        per = g if g < GPU_MILLI else GPU_MILLI
        for d in devices:
            if self.free[n, d] < per:
                raise ValueError(f"device {d} of node slot {n} has {self.free[n, d]} milli free,"
                                 f" asked {per}")
        for d in devices:
            self.free[n, d] -= per
        self.cpu_free[n] -= cpu
        self._touch(n)

    def release(self, Py_ssize_t n, long long g, long long cpu, devices) -> None:
        """Give back what :meth:`bind` took."""
        cdef int d
        per = g if g < GPU_MILLI else GPU_MILLI
        for d in devices:
            if self.free[n, d] + per > GPU_MILLI:
                raise ValueError(f"device {d} of node slot {n} would exceed one GPU")
        for d in devices:
            self.free[n, d] += per
        self.cpu_free[n] += cpu
        self._touch(n)

    # ------------------------------------------------------------------ FGD

    def set_target(self, types) -> None:
        """The target workload: ``[(cpu_milli, gpu_milli_per_gpu, num_gpu, models, p)]``.

        ``models`` is None (any model) or an iterable of model names; ``p`` are
        renormalised to sum to 1. Recomputes F_n of every node.
        """
        types = list(types)
        total = sum(float(t[4]) for t in types)
        if not types or total <= 0:
            raise ValueError("the target workload needs at least one type with p > 0")
        k = len(types)
        self.t_cpu_np = np.array([int(t[0]) for t in types], dtype=np.int64)
        self.t_gpu_np = np.array([int(t[1]) for t in types], dtype=np.int32)
        self.t_num_np = np.array([int(t[2]) for t in types], dtype=np.int32)
        masks = []
        for t in types:
            if t[3] is None:
                masks.append(np.uint64(0xFFFFFFFFFFFFFFFF))
            else:
                m = 0
                for name in t[3]:
                    m |= 1 << self.model_id(name)
                masks.append(np.uint64(m))
        self.t_models_np = np.array(masks, dtype=np.uint64)
        self.t_p_np = np.array([float(t[4]) / total for t in types], dtype=np.float64)
        cdef int64_t[::1] c = self.t_cpu_np
        cdef int32_t[::1] gg = self.t_gpu_np
        cdef int32_t[::1] nn = self.t_num_np
        cdef uint64_t[::1] mm = self.t_models_np
        cdef double[::1] pp = self.t_p_np
        self.T.n = k
        self.T.cpu = &c[0]
        self.T.gpu = &gg[0]
        self.T.num = &nn[0]
        self.T.models = &mm[0]
        self.T.p = &pp[0]
        self.has_target = True
        self.frag_total = 0.0
        cdef Py_ssize_t n
        for n in range(self.n_nodes):
            self.frag[n] = 0.0
            self._touch(n)
        self._reset_memo()

    def node_frag(self, Py_ssize_t n) -> float:
        """F_n of node ``n`` for the target workload (milli-GPU)."""
        if not self.has_target:
            raise ValueError("no target workload (set_target)")
        return self.frag[n]

    def delta(self, Py_ssize_t n, long long g, long long cpu=0) -> float:
        """FGD's Δ for placing the request on node ``n`` (best device for a share)."""
        cdef int dev
        if not self.has_target:
            raise ValueError("no target workload (set_target)")
        return self._best_delta(n, g, cpu, &dev)

    def fgd_scores(self, long long g, long long cpu, const uint8_t[::1] mask,
                   int64_t[::1] out, long long weight=1) -> None:
        """``out[n] = weight * floor(100 sigmoid(-Δ_n / 1000))`` where ``mask[n]``, else 0.

        Δ_n is memoised per (request, node version): between two placements only the
        node that changed is recomputed for a recurring request shape.
        """
        if not self.has_target:
            raise ValueError("no target workload (set_target)")
        key = (g, cpu)
        row = self.memo_rows.get(key)
        if row is None:
            row = len(self.memo_rows)
            if row >= self.memo_ver_np.shape[0]:
                rows = 2 * self.memo_ver_np.shape[0]
                v = np.full((rows, self.memo_ver_np.shape[1]), -1, dtype=np.int64)
                d = np.zeros((rows, self.memo_ver_np.shape[1]), dtype=np.float64)
                v[: self.memo_ver_np.shape[0]] = self.memo_ver_np
                d[: self.memo_ver_np.shape[0]] = self.memo_delta_np
                self.memo_ver_np, self.memo_delta_np = v, d
                self.memo_ver = v
                self.memo_delta = d
            self.memo_rows[key] = row
        cdef Py_ssize_t r = row, n, N = min(mask.shape[0], out.shape[0])
        cdef int dev
        cdef double delta
        cdef long long hits = 0, misses = 0
        with nogil:
            for n in range(N):
                if not mask[n] or n >= self.n_nodes:
                    out[n] = 0
                    continue
                if self.memo_ver[r, n] == self.ver[n]:
                    delta = self.memo_delta[r, n]
                    hits += 1
                else:
                    delta = self._best_delta(n, g, cpu, &dev)
                    self.memo_ver[r, n] = self.ver[n]
                    self.memo_delta[r, n] = delta
                    misses += 1
                out[n] = weight * fgd_score(delta)
        self.memo_hits += hits
        self.memo_misses += misses

    # ------------------------------------------------------------------ views

    def free_of(self, Py_ssize_t n) -> list[int]:
        """Free milli per device of node ``n``."""
        return [int(self.free[n, i]) for i in range(self.ndev[n])]

    def device_free(self, Py_ssize_t n_nodes):
        """[node, device] free milli-GPU of nodes ``0..n_nodes-1``, 0 for devices a node
        does not have (an int64 array)."""
        present = np.arange(self.free_np.shape[1])[None, :] < self.ndev_np[:n_nodes, None]
        return np.where(present, self.free_np[:n_nodes], 0).astype(np.int64)

    def idle_devices(self, Py_ssize_t n_nodes):
        """Per node of ``0..n_nodes-1``: its devices with nothing allocated (int64)."""
        present = np.arange(self.free_np.shape[1])[None, :] < self.ndev_np[:n_nodes, None]
        return (present & (self.free_np[:n_nodes] == GPU_MILLI)).sum(axis=1).astype(np.int64)

    def totals(self) -> dict:
        """Cluster sums: GPUs, idle milli, milli on partly used devices, fragmentation."""
        nd = self.ndev_np[: self.n_nodes]
        fr = self.free_np[: self.n_nodes]
        width = fr.shape[1]
        present = np.arange(width)[None, :] < nd[:, None]
        free = np.where(present, fr, 0)
        return {
            "gpus": int(nd.sum()),
            "free_milli": int(free.sum()),
            "partial_free_milli": int(np.where(present & (fr < GPU_MILLI), fr, 0).sum()),
            "frag_milli": float(self.frag_total) if self.has_target else None,
        }


class GangDevices:
    """The devices a gang's members take, planned member by member (exact).

    Passed to :meth:`esched.core.Placer.plan_gang` as ``devices``: before member
    ``i`` is placed, :meth:`mask` marks the nodes whose devices fit its request *after*
    the members planned before it took theirs; :meth:`take` binds the member's devices
    on the node the placer chose (so the next member sees them gone); :meth:`undo`
    gives everything back when the gang does not fit. On success :attr:`taken` holds
    ``(node slot, devices)`` per planned member, bound in the table.

    :param table: the cluster's device table.
    :param gpu_milli: per member, its GPU request (milli; a share of one device, or
        whole GPUs).
    :param cpu_milli: per member, its CPU request (the table tracks free CPU for FGD).
    :param fgd: choose a share's device by FGD's fragmentation delta (else best fit).
    :param n_slots: length of the masks (the placer's node slots).
    """

    def __init__(self, DeviceTable table, gpu_milli, cpu_milli, bint fgd=False,
                 Py_ssize_t n_slots=0) -> None:
        self.table = table
        self.gpu_milli = [int(g) for g in gpu_milli]
        self.cpu_milli = [int(c) for c in cpu_milli]
        if len(self.gpu_milli) != len(self.cpu_milli):
            raise ValueError("one GPU and one CPU request per member")
        for g in self.gpu_milli:
            request_shape(g)
        self.fgd = fgd
        self.buf = np.zeros(max(n_slots, table.n_nodes), dtype=np.uint8)
        self.taken: list[tuple[int, tuple] | None] = [None] * len(self.gpu_milli)

    def mask(self, i: int):
        """uint8 per node slot: 1 where member ``i``'s GPU request fits now; None when
        it asks for no GPU (nothing to filter)."""
        if self.gpu_milli[i] == 0:
            return None
        self.table.fit_mask(self.gpu_milli[i], self.buf)
        return self.buf

    def take(self, i: int, n: int) -> None:
        """Member ``i`` is planned on node slot ``n``: bind its devices there."""
        g, c = self.gpu_milli[i], self.cpu_milli[i]
        devs = self.table.choose(n, g, c, self.fgd)
        self.table.bind(n, g, c, devs)
        self.taken[i] = (n, devs)

    def undo(self) -> None:
        """Give back every device :meth:`take` bound (the gang does not fit)."""
        for i in range(len(self.taken) - 1, -1, -1):
            if self.taken[i] is not None:
                n, devs = self.taken[i]
                self.table.release(n, self.gpu_milli[i], self.cpu_milli[i], devs)
                self.taken[i] = None


def _py_node_frag(free, long long cpu_free, int model, types) -> float:
    """The FGD kernel on explicit vectors: free milli per device, types as in set_target."""
    t = DeviceTable(max_devices=max(1, len(free)))
    t.set_node(0, len(free), None, cpu_free)
    for i, f in enumerate(free):
        t.free_np[0, i] = f
    t.model_np[0] = model
    t.set_target(types)
    return t.node_frag(0)
