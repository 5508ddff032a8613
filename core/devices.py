"""GPU devices of the folded state: the device model the live replica and the commit
service share with the simulator.

A node's GPUs come from its Node event: the GPU resource of its allocatable, in
milli-GPU (:data:`GPU_RESOURCES`: ``esched.dev/gpu-milli`` counts milli, 1000 per
device; ``nvidia.com/gpu`` counts whole devices), so ``allocatable / 1000`` devices of
1000 milli each; the model is the node label ``esched.dev/gpu-model``. A pod's device
choice is the ``devices`` of its committed binding, which the fold keeps per pod
(``ClusterState.pod_dev_np``: bit ``i`` = device ``i``). Bindings without ``devices``
(logs from before, or replicas that do not model devices) take the devices best fit
chooses when a table is built (:class:`FoldedDevices`), and are never rejected for it.

:class:`FoldedDevices` keeps a :class:`~esched.core._devices.DeviceTable` in step with
a state (node by node, as the state's versions move); :func:`device_free` is the
per-device room the commit validation checks a binding's devices against.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

import numpy as np

from esched.core._devices import DeviceTable, request_shape
from esched.core._state import ClassMemo, ClusterState
from esched.core.phases import PHASE_RUNNING

__all__ = [
    "GPU_RESOURCES",
    "MODEL_LABEL",
    "DeviceLedger",
    "FoldedDevices",
    "device_free",
    "device_indices",
    "frag_types",
    "gpu_resource",
    "pod_share",
]

#: One whole GPU in milli-GPU (core/scoring/_fgd.pxd GPU_MILLI).
GPU_MILLI = 1000
#: Devices per node a table holds (core/scoring/_fgd.pxd MAX_DEVICES, a C constant).
MAX_DEVICES = int(DeviceTable().free_np.shape[1])

_FREE_SLOT = -1  # pod_phase of an unused pod slot

#: GPU resources a node's devices are read from -> milli-GPU per unit, in order of
#: preference (the first the state knows is the cluster's).
GPU_RESOURCES = {"esched.dev/gpu-milli": 1, "nvidia.com/gpu": GPU_MILLI}
#: The node label carrying the GPU model (pods' model constraints select on it).
MODEL_LABEL = "esched.dev/gpu-model"


def gpu_resource(state: ClusterState) -> tuple[str, int] | None:
    """The cluster's GPU resource and its milli per unit (None: the state has none)."""
    for name, scale in GPU_RESOURCES.items():
        if name in state.res_index:
            return name, scale
    return None


def frag_types(counts: Mapping[tuple, int], coverage: float = 0.95) -> list[tuple]:
    """FGD's target workload from pod counts per ``(cpu milli, total GPU milli, GPU
    models or None)``: types ``(cpu, gpu milli per GPU, num GPUs, models, p)``, the most
    common first, until they cover ``coverage`` of the pods (ties keep first-seen
    order)."""
    by_type: Counter = Counter()
    for (cpu, g, models), c in counts.items():
        num, per = _shape(g)
        by_type[(cpu, per, num, models)] += c
    total = sum(by_type.values())
    out, covered = [], 0
    for key, c in by_type.most_common():
        out.append((*key, c / total))
        covered += c
        if covered >= coverage * total:
            break
    return out


def _shape(g: int) -> tuple[int, int]:
    """(devices, milli per device) of a GPU request, leniently (traces round)."""
    if g <= 0:
        return (0, 0)
    if g <= GPU_MILLI:
        return (1, g)
    return (g // GPU_MILLI, GPU_MILLI)


def device_indices(mask: int) -> tuple[int, ...]:
    """The GPU device indices of a ``pod_dev`` bit mask (bit ``i``: device ``i``)."""
    return tuple(i for i in range(MAX_DEVICES) if mask >> i & 1)


def pod_share(state: ClusterState, pod: int) -> tuple[int, int, tuple[int, ...]]:
    """What pod slot ``pod`` holds where it runs: (GPU milli, CPU milli, the GPU devices
    its binding recorded; ``()`` if none were)."""
    found = gpu_resource(state)
    gpu = 0
    if found is not None:
        gpu = int(state.pod_alloc_np[pod, state.res_index[found[0]]]) * found[1]
    col = state.res_index.get("cpu")
    cpu = 0 if col is None else int(state.pod_alloc_np[pod, col])
    return gpu, cpu, device_indices(int(state.pod_dev_np[pod]))


def device_free(state: ClusterState, node: int, resource: str, scale: int) -> list[int]:
    """Free milli per GPU device of node slot ``node`` in the state: each running pod
    there takes its request (a share of one device, or whole devices) on the devices
    its binding recorded; pods bound without devices are left out (not known)."""
    col = state.res_index.get(resource)
    if col is None:
        return []
    ndev = min(int(state.allocatable_np[node, col]) * scale // GPU_MILLI, MAX_DEVICES)
    free = [GPU_MILLI] * ndev
    n_pods = state.n_pods
    on = np.flatnonzero(
        (state.pod_node_np[:n_pods] == node)
        & (state.pod_phase_np[:n_pods] == PHASE_RUNNING)
        & (state.pod_dev_np[:n_pods] != 0)
    )
    for p in on:
        g = int(state.pod_alloc_np[p, col]) * scale
        per = g if g < GPU_MILLI else GPU_MILLI
        for d in device_indices(int(state.pod_dev_np[p])):
            if d < ndev:
                free[d] -= per
    return free


class FoldedDevices:
    """A :class:`DeviceTable` kept in step with a :class:`ClusterState`.

    :meth:`sync` rebuilds the nodes whose state version moved, or whose table entry
    was changed since (by a scheduling pass's bindings: assumptions, like the
    placer's), from the state's running pods and their recorded devices. With
    ``fgd`` it also keeps FGD's target workload: the pods of the state by request
    shape (:func:`frag_types`), renewed when new pod classes appear.
    """

    def __init__(
        self, state: ClusterState, resource: str | None = None, scale: int = 1, *, fgd: bool
    ) -> None:
        self.state = state
        #: the GPU resource and its milli per unit (None: the first of GPU_RESOURCES
        #: the state has, once it has one)
        self.resource = resource or next(iter(GPU_RESOURCES))
        self.scale = scale
        self._fixed = resource is not None
        self.fgd = fgd
        self.table = DeviceTable()
        self._sver = np.full(0, -1, dtype=np.int64)
        self._tver = np.full(0, -1, dtype=np.int64)
        self._n_classes = -1  # the state's n_classes when the target was drawn
        self._classes = ClassMemo(state)  # (no values: its reused() since the target)

    def request(self, cid: int) -> tuple[int, int]:
        """(GPU milli, CPU milli) a pod of class ``cid`` asks for."""
        req = self.state.class_specs[cid]["requests"]
        return int(req.get(self.resource, 0)) * self.scale, int(req.get("cpu", 0))

    def sync(self) -> None:
        """Bring the table to the state (dropping the bindings assumed since)."""
        st = self.state
        table = self.table
        if not self._fixed:
            found = gpu_resource(st)
            if found is not None:
                self._fixed = True
                if found != (self.resource, self.scale):
                    self.resource, self.scale = found
                    self._sver[:] = -1  # every node again, by the resource found
        n = st.n_nodes
        if self._sver.shape[0] < n:
            grown = np.full(n, -1, dtype=np.int64)
            grown[: self._sver.shape[0]] = self._sver
            self._sver = grown
            tgrown = np.full(n, -1, dtype=np.int64)
            tgrown[: self._tver.shape[0]] = self._tver
            self._tver = tgrown
        sver = st.version_np[:n]
        tver = np.full(n, -2, dtype=np.int64)
        m = min(n, table.n_nodes)
        tver[:m] = table.ver_np[:m]
        changed = np.flatnonzero((sver != self._sver[:n]) | (tver != self._tver[:n]))
        if changed.size:
            self._rebuild(changed)
            self._sver[changed] = sver[changed]
            self._tver[changed] = table.ver_np[changed]
        if self.fgd and (st.n_classes != self._n_classes or self._classes.reused() is not None):
            self._target()

    def _rebuild(self, nodes: np.ndarray) -> None:
        st = self.state
        table = self.table
        col = st.res_index.get(self.resource)
        cpu_col = st.res_index.get("cpu")
        alive = set(st.node_index.values())
        labels = st.node_labels
        for slot in nodes:
            n = int(slot)
            if n not in alive:
                table.set_node(n, 0, None, 0)
                continue
            ndev = 0 if col is None else int(st.allocatable_np[n, col]) * self.scale // GPU_MILLI
            cpu = 0 if cpu_col is None else int(st.allocatable_np[n, cpu_col])
            table.set_node(n, min(ndev, MAX_DEVICES), labels[n].get(MODEL_LABEL), cpu)
        n_pods = st.n_pods
        pods = np.flatnonzero(
            (st.pod_phase_np[:n_pods] == PHASE_RUNNING) & np.isin(st.pod_node_np[:n_pods], nodes)
        )
        unknown = []
        for slot in pods:
            p = int(slot)
            bits = int(st.pod_dev_np[p])
            if bits or self._gpu_of(p) == 0:
                self._bind(p, device_indices(bits))
            else:
                unknown.append(p)
        for p in unknown:  # bound without devices: best fit, after the known ones
            self._bind(p, None)

    def _gpu_of(self, p: int) -> int:
        col = self.state.res_index.get(self.resource)
        return 0 if col is None else int(self.state.pod_alloc_np[p, col]) * self.scale

    def _bind(self, p: int, devices: tuple[int, ...] | None) -> None:
        st = self.state
        n = int(st.pod_node_np[p])
        cpu_col = st.res_index.get("cpu")
        cpu = 0 if cpu_col is None else int(st.pod_alloc_np[p, cpu_col])
        g = self._gpu_of(p)
        table = self.table
        if devices is None:
            if not table.fits(n, g):
                return  # over-committed by bindings without devices: nothing to take
            devices = table.choose(n, g, cpu, False)
        try:
            table.bind(n, g, cpu, devices)
        except ValueError:
            pass  # a recorded choice that no longer fits (capacity shrank): left out

    def fits_with(
        self,
        node: int,
        restored: Iterable[tuple[int, int, tuple[int, ...]]],
        wanted: Iterable[tuple[int, int]],
    ) -> bool:
        """Whether GPU requests ``wanted`` (``(GPU milli, CPU milli)`` each, in order)
        all fit node slot ``node`` device by device (the placer's exact rule,
        :meth:`DeviceTable.fits`, each taking the devices best fit chooses), with the
        pods ``restored`` (``(GPU milli, CPU milli, devices)``: gone from the state,
        assumed back on their devices; ``()``: best fit) still there. What this binds
        stays in the table as assumptions, which the next :meth:`sync` drops."""
        self.sync()
        table = self.table
        for g, cpu, devices in restored:
            if not devices:
                if not table.fits(node, g):
                    continue  # over-committed without devices: nothing to take
                devices = table.choose(node, g, cpu, False)
            try:
                table.bind(node, g, cpu, devices)
            except ValueError:
                pass  # a recorded choice that no longer fits (capacity shrank)
        for g, cpu in wanted:
            if not table.fits(node, g):
                return False
            try:
                table.bind(node, g, cpu, table.choose(node, g, cpu, False))
            except ValueError:
                return False  # not a GPU request shape (request_shape): takes no devices
        return True

    def claim(self, bindings: Iterable[tuple[str, str, tuple[int, ...]]]) -> None:
        """Bind the devices of undecided claims ``(pod, node, devices)`` (still pending
        in the state) in the table."""
        st = self.state
        for pod, node, devices in bindings:
            p = st.pod_index.get(pod)
            n = st.node_index.get(node)
            if p is None or n is None or st.pod_phase_np[p] == PHASE_RUNNING:
                continue
            g, cpu = self.request(int(st.pod_class_np[p]))
            try:
                self.table.bind(n, g, cpu, devices)
            except ValueError:
                pass  # no longer room: the commit service will reject it

    def _target(self) -> None:
        st = self.state
        # (a released class id taken by a new class moves no n_classes: reused() says)
        self._n_classes = st.n_classes
        self._classes.reused()
        n_pods = st.n_pods
        classes = st.pod_class_np[:n_pods][st.pod_phase_np[:n_pods] != _FREE_SLOT]
        # Pods per class, classes in the order their first pod came (ties in
        # frag_types keep first-seen order, as a trace's job order does).
        uniq, first, count = np.unique(classes, return_index=True, return_counts=True)
        counts: dict[tuple, int] = {}
        for i in np.argsort(first, kind="stable"):
            g, cpu = self.request(int(uniq[i]))
            try:
                request_shape(g)
            except ValueError:
                g = 0
            key = (cpu, g, None)
            counts[key] = counts.get(key, 0) + int(count[i])
        if counts:
            self.table.set_target(frag_types(counts))


class DeviceLedger:
    """Checks the ``devices`` a binding names against the state's per-device room and
    the devices the bindings accepted since :meth:`begin` took (the commit service's
    batch). Bindings without ``devices`` are not checked here (the state's summed GPU
    resource is, as for any resource). Evictions in the same proposal are not counted
    as freeing devices: replicas do not preempt for pods that ask for devices."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.begin()

    def begin(self) -> None:
        """Start a batch: the state has every earlier batch's bindings now."""
        self._taken: dict[tuple[int, int], int] = {}  # (node, device) -> milli taken
        self._free: dict[int, list[int]] = {}  # node -> the state's free milli per device
        self._at = self.state.position

    def take(self, pod: int, node: int, devices: object) -> str | None:
        """Record binding pod slot ``pod`` to node slot ``node`` on ``devices``; a
        message saying why not (nothing recorded) if they are not a fitting choice."""
        st = self.state
        if st.position != self._at:
            self.begin()  # the state moved on (the audit folds as it checks)
        found = gpu_resource(st)
        if not isinstance(devices, list) or not found:
            return f"devices {devices!r}: not a list of GPU devices of the node"
        resource, scale = found
        g = int(st.class_specs[int(st.pod_class_np[pod])]["requests"].get(resource, 0)) * scale
        try:
            count, per = request_shape(g)
        except ValueError as exc:
            return str(exc)
        if len(devices) != count or len(set(devices)) != count:
            return f"a request of {g} milli-GPU takes {count} device(s), not {devices!r}"
        free = self._free.get(node)
        if free is None:
            free = self._free[node] = device_free(st, node, resource, scale)
        taken = self._taken
        for d in devices:
            if type(d) is not int or not 0 <= d < len(free):
                return f"node {st.node_names[node]} has no GPU device {d!r}"
            room = free[d] - taken.get((node, d), 0)
            if room < per:
                return (
                    f"GPU device {d} of node {st.node_names[node]} has {room} milli free, "
                    f"the pod needs {per}"
                )
        for d in devices:
            taken[(node, d)] = taken.get((node, d), 0) + per
        return None

    def give_back(self, pod: int, node: int, devices: list[int]) -> None:
        """Undo :meth:`take` (the proposal was not accepted after all)."""
        st = self.state
        found = gpu_resource(st)
        if not found:
            return
        resource, scale = found
        g = int(st.class_specs[int(st.pod_class_np[pod])]["requests"].get(resource, 0)) * scale
        per = g if g < GPU_MILLI else GPU_MILLI
        for d in devices:
            self._taken[(node, d)] -= per
