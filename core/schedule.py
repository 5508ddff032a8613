"""One scheduling pass: the placement policy shared by the live replica and the simulator.

Given the folded :class:`~esched.core.ClusterState`, a :class:`~esched.core.Placer`
on it and an ordered list of pending :class:`Target` s (pods and gangs),
:meth:`SchedulingPass.run` decides one pass and returns a :class:`PassResult`
(:meth:`SchedulingPass.run_groups`: the same pass over groups of items, as compact
tuples, for the simulator):

- single pods through :meth:`Placer.place` (each placement assumed in the placer's
  view, so a pass never double-books a node), and if none fits and preemption is on,
  through :meth:`Placer.plan_preemption` (victims of lower bands);
- gangs all or nothing through :meth:`Placer.plan_gang` (``minMember`` minus the
  members already running), else :meth:`Placer.plan_gang_preempting`; a gang with
  fewer pending members than it needs waits (``gangs_waiting``);
- the starvation guard: a gang that has not fitted for ``reserve_after`` seconds (in
  the caller's clock: monotonic for a replica, virtual for the simulator) gets nodes
  to reserve (:meth:`Placer.reservation_nodes`), one gang at a time;
- with a :class:`~esched.core._devices.DeviceTable`, GPU requests are fitted device
  by device (the table is the exact filter, ``Placer.place(mask=...)``), FGD scores
  (``extra=...``) when the profile has the ``FGD`` plugin, and each binding carries
  the devices it takes (bound in the table as the pass goes, like the assumptions);
- pods that fit nowhere are returned with kube-style reason counts and a message.

The pass is pure: no I/O, no clock, no asyncio. What the decisions become (proposals
to the commit service, or committed events in virtual time) is the caller's business.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

import numpy as np

from esched.core._devices import DeviceTable, GangDevices
from esched.core._gang_plan import gang_shortfall
from esched.core._placer import Placer
from esched.core._state import ClassMemo, ClusterState
from esched.core.bands import BandConfig
from esched.core.devices import GPU_MILLI
from esched.core.phases import PHASE_PENDING
from esched.core.profile import scheduler_names
from esched.core.queues import deserved_room
from esched.core.reasons import OTHER_SCHEDULER, QUEUE_OVERUSED, reason_code, resource_text
from esched.schemas.events import split_key

__all__ = [
    "GPU_CHOICES",
    "GPU_MILLI_RESOURCE",
    "TIE_BREAKS",
    "Decision",
    "PassConfig",
    "PassResult",
    "Placement",
    "SchedulingPass",
    "Target",
    "node_order_rank",
    "placed_by_key",
    "plan_one",
]


#: The extended resource GPUs are counted in by the simulator: milli-GPU, 1000 per device.
GPU_MILLI_RESOURCE = "esched.dev/gpu-milli"

#: PassConfig.tie_break values.
TIE_BREAKS = ("random", "node-order")
#: PassConfig.gpu_choice values.
GPU_CHOICES = ("fit", "random")


def node_order_rank(seed: int, name: str) -> int:
    """The rank of node ``name`` in the "node-order" tie-break of ``seed`` (smaller
    wins): a keyed 63-bit hash, a seeded random order of any set of node names."""
    h = hashlib.blake2b(name.encode(), digest_size=8, key=seed.to_bytes(8, "little", signed=True))
    return int.from_bytes(h.digest(), "little") >> 1


def placed_by_key(state: ClusterState, cid: int) -> bool:
    """Whether a pod of class ``cid`` is placed by its key, not its class: inter-pod
    rules (its own terms and spread constraints, or bound pods' anti-affinity) depend
    on its labels, not only its class."""
    if state.interpod.active:
        return True
    cons = state.class_specs[cid]["constraints"]
    return bool(
        cons
        and (cons.get("podAffinity") or cons.get("podAntiAffinity") or cons.get("topologySpread"))
    )


def plan_one(placer: Placer, state: ClusterState, pod: str) -> list[str | None] | None:
    """:meth:`Placer.plan_gang` of a gang that places one member (``[pod]``, need 1),
    without devices and without nodes reserved for it (a one-pod Volcano Job): the
    same decision through :meth:`Placer.place`, as the scheduling pass takes it. The
    plan's steps are ``place``'s (the pod's class and label set, one scan, the
    placement assumed, the placer's counters) with nothing to hide or take back, and
    it leaves the same ``gang_failure`` report. As for a single pod, the placer is
    given the class id unless inter-pod rules read the pod's labels
    (:func:`placed_by_key`), which is then the same decision without the pod's label
    set looked up."""
    cid = state.pod_class_id(pod)
    got = placer.place(pod if placed_by_key(state, cid) else cid, True, None, None, None)
    if got is None:
        placer.gang_failure = gang_shortfall(placer, [cid], 0, 1, 1)
        return None
    placer.gang_failure = None
    return [got[0]]


#: The reasons of a pass that does not explain (shared: never written to).
_UNEXPLAINED: dict[str, int] = {}

#: Constraint reasons looked at per unschedulable class: a sample is enough for a message.
_REASON_SAMPLE = 200


class Target(NamedTuple):
    """One unit of pending work: a pod or a gang, and the log position it came with.

    A named tuple: :meth:`SchedulingPass.run_groups` takes plain ``(kind, key,
    position)`` tuples alike.
    """

    kind: str  # "pod" | "gang"
    key: str
    position: int = 0


#: One decision of :meth:`SchedulingPass.run_groups`: (the item decided, the gang's key
#: or None, bindings ``(pod, node, devices)``, victims ``{"pod", "node"}`` or None).
Decision = tuple[
    tuple[str, str, int],
    str | None,
    list[tuple[str, str, tuple[int, ...]]],
    list[dict[str, str]] | None,
]


@dataclass(frozen=True, slots=True)
class PassConfig:
    """The policy switches of a pass."""

    #: Let pods and gangs that fit nowhere evict pods of lower bands.
    preemption: bool = True
    #: Priority bands (None: the documented defaults of :mod:`esched.core.bands`).
    bands: BandConfig | None = None
    #: Starvation guard: reserve nodes for a gang that has not fitted for this many
    #: seconds of the caller's clock; None turns it off.
    reserve_after: float | None = 60.0
    #: Reason counts and gang messages for unschedulable pods (the simulator does not
    #: report them: it skips their cost).
    explain: bool = True
    #: Among nodes of equal total score: "random" (a seeded uniform draw, kube's
    #: selectHost) or "node-order" (a fixed order of the nodes drawn from
    #: ``tie_seed``, the first wins: the FGD paper's artifact, which breaks ties by the
    #: smallest node name over seeded-random name prefixes). Single pods only.
    tie_break: str = "random"
    #: The seed of the "node-order" tie-break (the order is a keyed hash of node names,
    #: so it does not depend on the order nodes were added).
    tie_seed: int = 0
    #: The device a GPU share takes on its node: "fit" (the fitting device with the
    #: least free milli; FGD: the one that fragments least) or "random" (a seeded
    #: uniform draw among the fitting devices: the artifact's ``-gpusel random``).
    #: Whole GPUs always take the lowest-indexed idle devices.
    gpu_choice: str = "fit"
    #: Where the queue tree of the deserved shares comes from (``spec.parent`` or
    #: Volcano's hdrf annotations; :data:`esched.core.queues.QUEUE_HIERARCHIES`).
    queue_hierarchy: str = "parent"

    def __post_init__(self) -> None:
        if self.tie_break not in TIE_BREAKS:
            raise ValueError(f"tie_break must be one of {TIE_BREAKS}, not {self.tie_break!r}")
        if self.gpu_choice not in GPU_CHOICES:
            raise ValueError(f"gpu_choice must be one of {GPU_CHOICES}, not {self.gpu_choice!r}")


@dataclass(slots=True)
class Placement:
    """One all-or-nothing decision: a pod's or a gang's bindings, with any evictions."""

    target: Target
    #: The gang's key, None for a single pod.
    gang: str | None
    #: (pod, node, devices taken: device indices on the node, empty without GPUs)
    bindings: list[tuple[str, str, tuple[int, ...]]]
    #: Pods evicted to make room: ``{"pod", "node"}`` each (preemption).
    victims: list[dict[str, str]] = field(default_factory=list)


@dataclass(slots=True)
class PassResult:
    """What one pass decided."""

    placements: list[Placement] = field(default_factory=list)
    #: pod -> (its target, kube-style reason counts, extra message)
    unschedulable: dict[str, tuple[Target, dict[str, int], str]] = field(default_factory=dict)
    #: gangs with a member in an undecided claim: (target, ids of those claims)
    blocked: list[tuple[Target, set[str]]] = field(default_factory=list)
    #: ``esched.gang.reserved`` data to append, each with the ``position`` it was made at
    reservations: list[dict[str, Any]] = field(default_factory=list)
    #: targets no longer pending (or in someone's undecided claim)
    skipped: int = 0
    #: gangs with fewer pending members than they need (they come again when more arrive)
    gangs_waiting: int = 0


class SchedulingPass:
    """The placement policy over one state and placer; :meth:`run` makes a pass.

    :param state: the folded state the placer works on.
    :param placer: the placer (its view is where the pass assumes its decisions).
    :param config: the policy switches.
    :param devices: per-device GPU accounting (exact fit, device choice, FGD); None
        for no device model (GPUs are then only the state's summed resource).
    :param gpu_resource: the resource a pod's GPU request is read from.
    :param gpu_scale: milli-GPU per unit of ``gpu_resource`` (1000 for whole devices,
        as ``nvidia.com/gpu``).
    """

    def __init__(
        self,
        state: ClusterState,
        placer: Placer,
        config: PassConfig | None = None,
        *,
        devices: DeviceTable | None = None,
        gpu_resource: str = GPU_MILLI_RESOURCE,
        gpu_scale: int = 1,
    ) -> None:
        self.state = state
        self.placer = placer
        self.config = config or PassConfig()
        self.devices = devices
        self.gpu_resource = gpu_resource
        self.gpu_scale = gpu_scale
        profile = placer.profile
        #: FGD's weight in the profile (0: no FGD; devices then chosen best fit)
        self.fgd_weight = sum(p.weight for p in profile.plugins if p.kind == "FGD")
        #: FGD's secondary key among equal totals: pack (least free GPU, then CPU)
        self.fgd_pack = any(p.kind == "FGD" and p.fgd_ties == "pack" for p in profile.plugins)
        #: gang -> clock time it was first found not fitting (starvation guard)
        self.waiting_since: dict[str, float] = {}
        self._mask = np.ones(0, dtype=np.uint8)
        self._extra = np.zeros(0, dtype=np.int64)
        #: class id -> (GPU milli, CPU milli) a pod of it asks for
        self._gpu_of = ClassMemo(state)
        self._rank: np.ndarray | None = None  # the "node-order" ranks per node slot
        self._rank_names: list[str | None] = []  # the node names they were drawn for
        self._gpu_rng = random.Random(self.config.tie_seed)  # gpu_choice "random"
        self._views: Any = None
        self._scratch = PassResult()  # run_groups' collector of what it does not return
        #: the deserved room of each queue for this pass (``_trim_to_deserved``)
        self._room: dict[str, Any] | None = None
        #: The ``spec.schedulerName`` values this pass schedules (a pod naming none is
        #: the profile's); a pod naming another is left Pending (OtherScheduler).
        self.scheduler_names = scheduler_names(profile)

    # ------------------------------------------------------------------ the pass

    def run(
        self,
        targets: Iterable[Target],
        *,
        now: float = 0.0,
        in_flight: Mapping[str, str] | None = None,
        reserving: Collection[str] = (),
        out: PassResult | None = None,
    ) -> PassResult:
        """Decide ``targets`` in order on the placer's current view.

        :param now: the caller's clock (seconds) for the starvation guard.
        :param in_flight: pod -> id of an undecided claim holding it (a replica's
            proposals in flight): such a pod is skipped, a gang with such a member is
            returned as ``blocked``.
        :param reserving: gangs whose reservation is already decided but not yet in
            the state (not reserved twice).
        :param out: the result to fill (default a new one); its placements are
            added when the pass ends.
        """
        if out is None:
            out = PassResult()
        placed: list[Decision] = []
        self._pass((targets,), False, out, placed, now, in_flight or {}, reserving)
        out.placements.extend([Placement(cast(Target, t), g, b, v or []) for t, g, b, v in placed])
        return out

    def run_groups(
        self,
        groups: Iterable[Iterable[tuple[str, str, int]]],
        *,
        now: float = 0.0,
    ) -> tuple[list[Decision], list[int], list[dict[str, Any]]]:
        """Decide groups of ``(kind, key, position)`` items in order, each group until
        one of its items is not placed: the simulator's pass (a group is a shape of
        job; placements only take room away, so the rest of a shape waits).

        The same pass as :meth:`run` (one loop), without its per-decision objects:
        returns (decisions as :data:`Decision` tuples, the indices of the groups that
        stopped at an item not placed, ``esched.gang.reserved`` data to append). No
        claims are in flight; unschedulable reasons are not kept.
        """
        out = self._scratch
        out.unschedulable.clear()
        out.blocked.clear()
        if out.reservations:
            out.reservations = []
        placed: list[Decision] = []
        stopped = self._pass(groups, True, out, placed, now, {}, ())
        return placed, stopped, out.reservations

    def _pass(
        self,
        groups: Iterable[Iterable[tuple[str, str, int]]],
        stop: bool,
        out: PassResult,
        placed: list[Decision],
        now: float,
        inflight: Mapping[str, str],
        reserving: Collection[str],
    ) -> list[int]:
        """The pass: every group's items in order into ``placed`` (compact decisions)
        and ``out`` (the rest); with ``stop``, a group ends at its first item not
        placed. Returns the indices of the groups so ended."""
        self._room = None  # the queues' deserved room is read afresh each pass
        st = self.state
        placer = self.placer
        cfg = self.config
        preempt = cfg.preemption
        bands = cfg.bands
        unschedulable = out.unschedulable
        reasons_cache: dict[Any, Any] = {}
        gangs_done: set[str] = set()
        devices = self.devices
        pod_index = st.pod_index
        phase, gang_of, class_of = self._pod_views()
        place = self._place_pod
        if devices is not None:
            self._buffers()
        explain = cfg.explain
        # kube's SchedulingGates (PreEnqueue): a gated pod is never attempted.
        gated = st.gated
        named = st.scheduler_of
        stopped: list[int] = []
        gi = -1
        for items in groups:
            gi += 1
            for t in items:
                n_placed = len(placed)
                kind, key, position = t
                gang = None  # the gang target this item stands for, if any
                if kind == "pod":
                    idx = pod_index.get(key)
                    if (
                        idx is None
                        or phase[idx] != PHASE_PENDING
                        or key in inflight
                        or (gated and key in gated)
                    ):
                        out.skipped += 1
                    elif named and key in named and named[key] not in self.scheduler_names:
                        self._other_scheduler(Target(kind, key, position), key, out)
                    elif gang_of[idx] >= 0:  # a gang member travels with its gang
                        gang = Target("gang", st.gang_keys[gang_of[idx]], position)
                    else:
                        cid = class_of[idx]
                        got = place(key, cid)
                        if got is not None:
                            placed.append((t, None, [(key, got[0], got[1])], None))
                            continue
                        plan = None
                        # Evictions free the state's summed GPU, not chosen devices: a pod
                        # asking for GPU devices does not preempt under the device model.
                        if (
                            preempt
                            and (devices is None or not self._gpu_request(cid)[0])
                            and st.class_preempts(cid)
                        ):
                            plan = placer.plan_preemption(key, bands)
                        if plan is not None:
                            victims = [
                                {"pod": v, "node": self._node_of(v)}
                                for v in plan["victims"] + plan["collateral"]
                            ]
                            self._bind_cpu([(key, plan["node"])])
                            placed.append((t, None, [(key, plan["node"], ())], victims))
                        else:
                            why = self._reasons(key, reasons_cache) if explain else _UNEXPLAINED
                            unschedulable[key] = (Target(kind, key, position), why, "")
                else:
                    # A work item's Target as it came (run_groups' plain tuples made one).
                    gang = t if type(t) is Target else Target(kind, key, position)
                if gang is not None:
                    self._gang_target(
                        gang, out, placed, inflight, reasons_cache, gangs_done, now, reserving
                    )
                if stop and len(placed) == n_placed:
                    stopped.append(gi)
                    break
        return stopped

    def _gang_target(
        self,
        t: Target,
        out: PassResult,
        placed: list[Decision],
        inflight: Mapping[str, str],
        reasons_cache: dict[Any, Any],
        gangs_done: set[str],
        now: float,
        reserving: Collection[str],
    ) -> None:
        if t.key in gangs_done:
            out.skipped += 1
            return
        g_idx = self.state.gang_index.get(t.key)
        if g_idx is None:
            out.skipped += 1
            return
        gangs_done.add(t.key)  # several items of one gang: planned once per pass
        self._gang(t, g_idx, out, placed, inflight, reasons_cache, now, reserving)

    def _other_scheduler(self, t: Target, pod: str, out: PassResult) -> None:
        """A pod naming a scheduler esched does not run: Pending with that reason."""
        name = self.state.scheduler_of[pod]
        message = (
            f"pod names schedulerName {name!r}; esched schedules "
            f"{' and '.join(repr(n) for n in sorted(self.scheduler_names))}"
        )
        # Every node is not tried: counted as the FitError counts nodes.
        nodes = max(1, len(self.state.node_index))
        out.unschedulable[pod] = (t, {OTHER_SCHEDULER: nodes}, message)

    def _gang(
        self,
        t: Target,
        g_idx: int,
        out: PassResult,
        placed: list[Decision],
        inflight: Mapping[str, str],
        reasons_cache: dict[Any, Any],
        now: float,
        reserving: Collection[str],
    ) -> None:
        st = self.state
        placer = self.placer
        cfg = self.config
        unschedulable = out.unschedulable
        placed_gang = placed
        members = st.gang_members(t.key, "Pending")
        if st.gated:
            # Gated members wait (kube's SchedulingGates); the gang may still reach
            # minMember without them.
            members = [m for m in members if m not in st.gated]
        named = st.scheduler_of
        # Loops, not comprehensions: a comprehension makes a function object per call,
        # which a one-pod gang (a one-pod Volcano Job) pays for on every pass.
        if named:
            # Members naming another scheduler are not esched's: reported, left out.
            others = []
            for m in members:
                if m in named and named[m] not in self.scheduler_names:
                    others.append(m)
            for m in others:
                self._other_scheduler(t, m, out)
                members.remove(m)
        if not members:
            out.skipped += 1
            return
        if inflight:
            busy = set()
            for m in members:
                if m in inflight:
                    busy.add(inflight[m])
            if busy:
                out.blocked.append((t, busy))
                return
        need = st.gang_shortfall(g_idx)
        # Volcano's per-task minimum (PodGroup minTaskMember): the members each task
        # still needs go first, and the plan must place every one of them. As Volcano's
        # CheckTaskValid / CheckTaskReady, only when minMember >= the sum of the task
        # minimums (else the job's minimum alone counts).
        required: list[str] = []
        min_task: Mapping[str, int] = st.gang_meta[g_idx].get("minTaskMember") or {}
        if min_task and st.gang_min_of(g_idx) >= sum(min_task.values()):
            got_tasks = task_requirements(
                t.key, members, st.gang_members(t.key, "Running"), min_task
            )
            if got_tasks is None:
                # A task has fewer members submitted than it needs: wait, as below.
                out.gangs_waiting += 1
                return
            required = got_tasks
            if required:
                if len(required) < len(members):
                    first = set(required)
                    members = required + [m for m in members if m not in first]
                else:  # every member is required (they are members): their order
                    members = required
                need = max(need, len(required))
        if len(members) < need:
            # Not enough members submitted yet: the gang comes again when more arrive.
            out.gangs_waiting += 1
            return
        gd = self._gang_devices(members)
        if gd is None and need == 1 and len(members) == 1 and t.key not in st.reservations:
            plan = plan_one(placer, st, members[0])
        else:
            plan = placer.plan_gang(members, need, devices=gd)
        # Why it does not fit without evictions (the report of this plan_gang).
        message = placer.gang_message() if plan is None and cfg.explain else ""
        if plan is not None and required and None in plan[: len(required)]:
            # Enough members fit, but not those a task needs (the master fits nowhere
            # while its workers would run): not placed, as Volcano's gang plugin.
            message = _task_message(t.key, required, plan, min_task) if cfg.explain else ""
            self._unplan(members, plan, gd)
            plan = None
        if (
            plan is None
            and cfg.preemption
            and not self._asks_devices(members)
            # preemptionPolicy: Never on a member (its own or its PriorityClass's)
            and all(st.class_preempts(st.pod_class_id(m)) for m in members)
        ):
            got = placer.plan_gang_preempting(members, need, cfg.bands)
            if got is not None and required and None in got["nodes"][: len(required)]:
                self._unplan(members, got["nodes"], None, got["victims"])
                got = None
            if got is not None:
                pairs_cpu = [
                    (pod, node)
                    for pod, node in zip(members, got["nodes"], strict=True)
                    if node is not None
                ]
                self._bind_cpu(pairs_cpu)
                no_devices: tuple[int, ...] = ()
                placed_gang.append(
                    (t, t.key, [(p, n, no_devices) for p, n in pairs_cpu], got["victims"])
                )
                for pod, node in zip(members, got["nodes"], strict=True):
                    if node is None:
                        unschedulable[pod] = (t, self._reasons(pod, reasons_cache), "")
                return
        if plan is None:
            self._starving(t.key, members, need, message, now, out, reserving)
            # e.g. "gang ns/train: 7/10 members fit; short of nvidia.com/gpu: 3"
            msg = f"gang {t.key}: {message}" if cfg.explain else ""
            for pod in members:
                reasons = dict(self._reasons(pod, reasons_cache))
                if cfg.explain:
                    reasons["GangUnschedulable"] = 1
                unschedulable[pod] = (t, reasons, msg)
            return
        self.waiting_since.pop(t.key, None)
        if gd is None and len(members) > need and self.state.n_queues > 1:
            plan = list(plan)
            self._trim_to_deserved(t, members, plan, need, out)
        pairs: list[tuple[str, str, tuple[int, ...]]]
        if gd is None:
            pairs = []
            for pod, node in zip(members, plan, strict=True):
                if node is not None:
                    pairs.append((pod, node, ()))
        else:
            pairs = [
                (pod, node, () if took is None else took[1])
                for pod, node, took in zip(members, plan, gd.taken, strict=True)
                if node is not None
            ]
        if pairs:
            placed_gang.append((t, t.key, pairs, None))
        if len(pairs) < len(members):
            for pod, node in zip(members, plan, strict=True):
                if node is None:  # beyond minMember and no room: reported like any pod
                    unschedulable[pod] = (t, self._reasons(pod, reasons_cache), "")

    def _trim_to_deserved(
        self, t: Target, members: list[str], plan: list[str | None], need: int, out: PassResult
    ) -> None:
        """Members of an elastic gang beyond the ``need`` it must place are placed only
        while its queue stays within its deserved share, when another queue waits
        (Volcano's proportion ``allocatable``, task by task); the others are taken back
        from the plan and reported ``QueueOverused`` (they come again when room frees)."""
        st = self.state
        room = self._room
        if room is None:
            room = self._room = {"rows": deserved_room(st, self.config.queue_hierarchy)}
        rows = room["rows"]
        if rows is None:
            return
        q = st.queue_of(st.pod_index[members[0]])
        left = rows.get(q)
        if left is None:
            return
        req = st.class_requests()
        placed = 0
        for i, (pod, node) in enumerate(zip(members, plan, strict=True)):
            if node is None:
                continue
            p = st.pod_index[pod]
            r = req[st.class_of(p)]
            placed += 1
            if placed > need and bool(np.any((r > 0) & (r > left))):
                self.placer.assume_binding(p, st.node_index[node], -1)
                plan[i] = None
                out.unschedulable[pod] = (t, {QUEUE_OVERUSED: 1}, "")
                continue
            left -= r

    def _unplan(
        self,
        members: list[str],
        nodes: list[str | None],
        gd: GangDevices | None,
        victims: list[dict[str, str]] | None = None,
    ) -> None:
        """Take back a gang plan left assumed in the placer's view (its placements,
        devices and evictions)."""
        st = self.state
        placer = self.placer
        for pod, node in zip(members, nodes, strict=True):
            if node is not None:
                placer.assume_binding(st.pod_index[pod], st.node_index[node], -1)
        if gd is not None:
            gd.undo()
        for v in victims or ():
            placer.assume_evicted(st.pod_index[v["pod"]], -1)

    # ------------------------------------------------------------------ devices

    def use_gpu_resource(self, resource: str, scale: int) -> None:
        """Read pods' GPU requests from ``resource`` (``scale`` milli per unit) from now
        on (a live cluster's GPU resource is known once a node has it)."""
        if (resource, scale) != (self.gpu_resource, self.gpu_scale):
            self.gpu_resource, self.gpu_scale = resource, scale
            self._gpu_of.clear()

    def _gpu_request(self, cid: int) -> tuple[int, int]:
        """(GPU milli, CPU milli) a pod of class ``cid`` asks for."""
        got: tuple[int, int] | None = self._gpu_of.get(cid)
        if got is None:
            req = self.state.class_specs[cid]["requests"]
            got = (int(req.get(self.gpu_resource, 0)) * self.gpu_scale, int(req.get("cpu", 0)))
            self._gpu_of.put(cid, got)
        return got

    def _pod_views(self) -> tuple[memoryview, memoryview, memoryview]:
        """Phase, gang and class per pod slot as memoryviews (they index to Python ints
        4x faster than the arrays: the simulator offers tens of targets per
        placement), renewed when the fold has grown the arrays (all pod arrays are
        replaced together)."""
        st = self.state
        phase = st.pod_phase_np
        views = self._views
        if views is None or views[0] is not phase:
            views = self._views = (
                phase,
                (phase.data, st.pod_gang_np.data, st.pod_class_np.data),
            )
        return views[1]

    def _buffers(self) -> tuple[np.ndarray, np.ndarray]:
        n = self.state.n_nodes
        if self._mask.shape[0] < n:
            self._mask = np.ones(n, dtype=np.uint8)
            self._extra = np.zeros(n, dtype=np.int64)
        return self._mask, self._extra

    def _asks_devices(self, pods: list[str]) -> bool:
        """Whether, under the device model, one of ``pods`` asks for GPU devices."""
        if self.devices is None:
            return False
        st = self.state
        return any(self._gpu_request(st.pod_class_id(p))[0] for p in pods)

    def _place_pod(self, pod: str, cid: int) -> tuple[str, tuple[int, ...]] | None:
        """Place a single pod (assumed); with devices, device-exact GPU fit and FGD, and
        its devices bound in the table. (node, devices taken) or None."""
        dev = self.devices
        rank = self._tie_rank()
        # The placer is given the class id (what it places), not the pod's key to look up,
        # unless inter-pod rules apply: those read the pod's labels.
        arg: str | int = pod if placed_by_key(self.state, cid) else cid
        if dev is None:
            got = self.placer.place(arg, True, None, None, rank)
            return None if got is None else (got[0], ())
        g, cpu = self._gpu_request(cid)
        mask = extra = None
        buf = self._mask  # sized for the state by run()
        fgd = self.fgd_weight
        if g:
            if dev.fit_mask(g, buf) == 0:
                return None
            mask = buf
        if fgd:
            if mask is None:
                buf.fill(1)
            extra = self._extra
            dev.fgd_scores(g, cpu, buf, extra, fgd)
        if fgd and self.fgd_pack:
            rank = self._pack_rank(dev)
        got = self.placer.place(arg, True, mask, extra, rank)
        if got is None:
            return None
        node = got[0]
        n = self.state.node_index[node]
        devs: tuple[int, ...] = ()
        if 0 < g < GPU_MILLI and self.config.gpu_choice == "random" and not fgd:
            fitting = [i for i, free in enumerate(dev.free_of(n)) if free >= g]
            devs = (fitting[self._gpu_rng.randrange(len(fitting))],)
        elif g:
            devs = tuple(dev.choose(n, g, cpu, fgd > 0))
        dev.bind(n, g, cpu, devs)
        return node, devs

    def _pack_rank(self, dev: DeviceTable) -> np.ndarray:
        """FGD's "pack" key per node slot: free milli-GPU, then free CPU (smaller
        first), so equal FGD scores go to the fullest node, as a fixed node order packs
        them in the paper's artifact, without depending on an order of the nodes."""
        n = self.state.n_nodes
        gpu_free = dev.device_free(n).sum(axis=1)
        cpu_free = np.asarray(dev.cpu_free_np[:n], dtype=np.int64)
        rank = np.zeros(max(n, len(self.state.node_names)), dtype=np.int64)
        rank[:n] = (gpu_free << 32) + np.clip(cpu_free, 0, (1 << 32) - 1)
        return rank

    def _tie_rank(self) -> np.ndarray | None:
        """The "node-order" ranks per node slot (None: seeded random ties), renewed
        when the state's node names change."""
        if self.config.tie_break != "node-order":
            return None
        names = self.state.node_names
        # A list compare (C speed): a node removed and another added in its slot
        # renews the ranks too.
        if self._rank is None or names != self._rank_names:
            seed = self.config.tie_seed
            self._rank_names = list(names)
            self._rank = np.array(
                [node_order_rank(seed, nm) if nm is not None else 0 for nm in names],
                dtype=np.int64,
            )
        return self._rank

    def _bind_cpu(self, pairs: list[tuple[str, str]]) -> None:
        """Pods without GPUs placed by a preemption plan: their CPU in the device table
        (which FGD's fragmentation measure reads)."""
        dev = self.devices
        if dev is None:
            return
        st = self.state
        for pod, node in pairs:
            dev.bind(st.node_index[node], 0, self._gpu_request(st.pod_class_id(pod))[1], ())

    def _gang_devices(self, members: list[str]) -> GangDevices | None:
        if self.devices is None:
            return None
        st = self.state
        reqs = [self._gpu_request(st.pod_class_id(m)) for m in members]
        return GangDevices(
            self.devices,
            [g for g, _ in reqs],
            [c for _, c in reqs],
            self.fgd_weight > 0,
            st.n_nodes,
        )

    # ------------------------------------------------------------------ starvation

    def _starving(
        self,
        gang: str,
        members: list[str],
        need: int,
        message: str,
        now: float,
        out: PassResult,
        reserving: Collection[str],
    ) -> None:
        """Reserve nodes for ``gang`` if it has waited ``reserve_after`` seconds.

        Reservation, not aging: a large gang behind a stream of small pods never sees
        all the room it needs free at once, because each small pod takes whatever a
        finishing one frees; raising its priority over time (aging) changes the order
        it is tried in, not that. A reservation keeps what frees on the reserved nodes
        for the gang, so it runs once those nodes drain. One gang at a time (the one
        that first waited long enough, as the log orders the reservations), so
        reservations never fragment the cluster against each other.
        """
        after = self.config.reserve_after
        if after is None:
            return
        since = self.waiting_since.setdefault(gang, now)
        st = self.state
        if (
            now - since < after
            or st.reservations
            or gang in reserving
            or any(r["gang"] == gang for r in out.reservations)
        ):
            return
        nodes = self.placer.reservation_nodes(members, need)
        if not nodes:
            return
        waited = round(now - since, 3)
        out.reservations.append(
            {
                "gang": gang,
                "nodes": nodes,
                "waited_seconds": waited,
                "message": f"gang {gang} waited {waited}s ({message}); reserving "
                f"{len(nodes)} node(s) until it is placed",
                "position": int(st.position),
            }
        )

    # ------------------------------------------------------------------ reasons

    def _node_of(self, pod: str) -> str:
        st = self.state
        # A victim is running, so bound to an alive node: the slot has a name.
        return cast(str, st.node_names[st.node_of(st.pod_index[pod])])

    def _reasons(self, pod: str, cache: dict[Any, Any]) -> dict[str, int]:
        """kube-style counts of nodes per reason ``pod`` fits none, on the placer's view.

        Resource reasons are computed for all nodes at once with numpy; the core's
        ``fits`` (constraints) is asked only for nodes that have the room, so a full
        cluster with thousands of classes stays cheap. Cached per class (and label set) per pass.
        """
        if not self.config.explain:
            return {}
        st = self.state
        placer = self.placer
        cid = st.pod_class_id(pod)
        # Per class and label set: inter-pod rules tell pods of one class apart by labels.
        ckey = (cid, st.interpod.pod_lset_of(st.pod_index[pod]))
        hit = cache.get(ckey)
        if hit is not None:
            return hit
        nres = st.n_res
        view = cache.get(-1)  # the alive nodes' free room, gathered once per pass
        if view is None:
            alive = np.fromiter(st.node_index.values(), dtype=np.int64)
            free = st.node_allocatable()[alive].astype(np.int64) - placer.used_array()[
                alive, :nres
            ].astype(np.int64)
            view = cache[-1] = {"alive": alive, "free": free}
        alive, free = view["alive"], view["free"]
        out: dict[str, int] = {}
        if alive.size:
            need = st.class_requests()[cid].astype(np.int64)
            short = (need > 0) & (need > free)
            for r in np.flatnonzero(short.any(axis=0)):
                name = st.res_names[int(r)]
                code = reason_code(resource_text(name))
                out[code] = int(short[:, r].sum())
            roomy = alive[~short.any(axis=1)]
            dev = self.devices
            g = self._gpu_request(cid)[0] if dev is not None else 0
            if dev is not None and g:
                # The summed GPU has room there, no device does (shares are per device).
                dev.fit_mask(g, self._mask)
                fits = self._mask[roomy] != 0
                if not fits.all():
                    out["InsufficientGPUDevices"] = int((~fits).sum())
                roomy = roomy[fits]
            names = cast("list[str]", st.node_names)  # alive slots (roomy) have names
            reserved = st.reserved_nodes
            gidx = st.gang_of(st.pod_index[pod])
            own = st.gang_keys[gidx] if gidx >= 0 else None
            for n in roomy[:_REASON_SAMPLE]:
                holder = reserved.get(names[int(n)]) if reserved else None
                if holder is not None and holder != own:
                    out["NodeReserved"] = out.get("NodeReserved", 0) + 1
                    continue
                for text in placer.fits(pod, names[int(n)]):
                    code = reason_code(text)
                    out[code] = out.get(code, 0) + 1
        else:
            out["NoNodes"] = 1
        cache[ckey] = out
        return out


def member_task(gang: str, pod: str) -> tuple[str, int] | None:
    """(task, index) of a Volcano Job's pod from its name ``<job>-<task>-<index>``
    (Volcano's ``MakePodName``; the gang is ``<namespace>/<job>``), else None.
    The fold keeps no pod annotations, and this name is what Volcano's job controller
    and ``esched publish`` give a Job's pods."""
    got = _member_parts(_member_prefix(gang), pod)
    return None if got is None else (got[0], int(got[1]))


def _member_prefix(gang: str) -> str:
    """What the key of each pod :func:`member_task` reads starts with:
    ``<namespace>/<job>-`` (a namespace holds no ``/``, so the key's namespace is the
    gang's and its name starts with ``<job>-`` exactly when the key starts with this)."""
    namespace, job = split_key(gang)
    return f"{namespace}/{job}-"


def _member_parts(prefix: str, pod: str) -> tuple[str, str] | None:
    """(task, index digits) of ``pod`` given :func:`_member_prefix` of its gang."""
    if not pod.startswith(prefix):
        return None
    task, _, index = pod[len(prefix) :].rpartition("-")
    if not task or not index.isdigit():
        return None
    return task, index


def task_requirements(
    gang: str, pending: list[str], running: list[str], min_task: Mapping[str, int]
) -> list[str] | None:
    """The pending members a Volcano gang must place for each task to reach its
    ``minTaskMember`` (with its running members), in task then member order; None when
    a task has fewer members submitted than it needs (Volcano's ``CheckTaskValid``:
    the job is not valid until it has)."""
    if len(pending) == 1 and not running and len(min_task) == 1:
        # A one-pod Job's gang (one task, its one member pending): what the loops below
        # give for it, without their dicts.
        for task, minimum in min_task.items():
            short = int(minimum)
            if short <= 0:
                return []
            got = _member_parts(_member_prefix(gang), pending[0])
            if short > 1 or got is None or got[0] != task:
                return None
        return pending[:1]
    prefix = _member_prefix(gang)
    have: dict[str, int] = {}
    for pod in running:
        got = _member_parts(prefix, pod)
        if got is not None:
            have[got[0]] = have.get(got[0], 0) + 1
    by_task: dict[str, list[str]] = {}
    for pod in pending:
        got = _member_parts(prefix, pod)
        if got is not None and got[0] in min_task:
            by_task.setdefault(got[0], []).append(pod)
    required: list[str] = []
    for task, minimum in min_task.items():
        short = int(minimum) - have.get(task, 0)
        if short <= 0:
            continue
        mine = by_task.get(task, [])
        if len(mine) < short:
            return None
        required += mine[:short]
    return required


def _task_message(
    gang: str, required: list[str], nodes: list[str | None], min_task: Mapping[str, int]
) -> str:
    """e.g. "task master: 0/1 of its minAvailable members fit" for the first short task."""
    fit: dict[str, list[int]] = {}
    for pod, node in zip(required, nodes, strict=False):
        got = member_task(gang, pod)
        if got is None:
            continue
        counts = fit.setdefault(got[0], [0, 0])
        counts[1] += 1
        if node is not None:
            counts[0] += 1
    for task, (placed, wanted) in fit.items():
        if placed < wanted:
            return (
                f"task {task}: {placed}/{wanted} of the members its minAvailable "
                f"({min_task.get(task)}) needs fit"
            )
    return ""
