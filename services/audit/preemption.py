"""The preemption and reclaim checks: the victims and their evictions
(``preemption_illegal``, ``preemption_unrecorded``, ``preemption_unnecessary``,
``reclaim_illegal``, ``gang_split``)."""

from __future__ import annotations

from typing import Any

from esched.core import PHASE_RUNNING
from esched.core.bands import may_preempt
from esched.core.devices import FoldedDevices, pod_share
from esched.core.queues import queue_view
from esched.core.reclaim import victims_legal
from esched.core.validation import RECLAIMED
from esched.services.audit.overload import _OverloadChecks


class _PreemptionChecks(_OverloadChecks):
    """Evictions for a decision, checked as they come and against the decision."""

    def _eviction(self, position: int, data: dict[str, Any]) -> None:
        """An eviction made for a preemption: the victim must be running where named."""
        st = self.state
        # Payload fields as stored (any JSON value; a missing pod is flagged below).
        pod: Any = data.get("pod")
        node: Any = data.get("node")
        self.checked["evictions"] += 1
        pidx = st.pod_index.get(pod)
        if (
            pidx is None
            or st.phase_of(pidx) != PHASE_RUNNING
            or st.node_of(pidx) != st.node_index.get(node, -2)
        ):
            self._flag(
                position,
                "preemption_unrecorded",
                f"pod {pod} evicted from {node} where it was not running",
            )
        elif data.get("reason") == RECLAIMED and isinstance(data.get("by"), str):
            # Checked victim by victim on the state before each eviction (the earlier
            # victims of the same reclaim are evicted already): the commit's own rule,
            # hdrf's aside (it judges every victim on the state before the first).
            h = self.admission.queue_hierarchy
            view = None if h == "parent" else queue_view(st, h)
            why = victims_legal(st, data["by"], [pod], view=view)
            if why is not None:
                self._flag(position, "reclaim_illegal", f"{pod} reclaimed for {data['by']}: {why}")
        self._evictions.setdefault(data["decision"], []).append((position, pod))
        if pidx is not None and st.phase_of(pidx) == PHASE_RUNNING:
            # Where the victim ran and what GPU share it held on which devices: the
            # preemption's necessity is judged with it still there (_necessary).
            self._victims_of.setdefault(data["decision"], []).append(
                (int(pidx), int(st.node_of(pidx)), pod_share(st, int(pidx)))
            )

    def _preemption(
        self, position: int, event: dict[str, Any], data: dict[str, Any], victims: list[Any]
    ) -> set[int]:
        """Legality of a committed preemption; returns the victims' gangs."""
        st = self.state
        self.checked["preemptions"] += 1
        decision: Any = event.get("id")
        evicted = {pod for _, pod in self._evictions.pop(decision, [])}
        named = {v.get("pod") for v in victims if isinstance(v, dict)}
        if evicted != named:
            self._flag(
                position,
                "preemption_unrecorded",
                f"decision {event.get('id')} names victims {sorted(map(str, named))}, "
                f"evicted for it: {sorted(evicted)}",
            )
        self._necessary(position, decision, data)
        pods: list[Any] = [b.get("pod") for b in data.get("bindings") or () if isinstance(b, dict)]
        known = [st.pod_index[p] for p in pods if p in st.pod_index]
        gangs: set[int] = set()
        if not known:
            return gangs
        preemptor = min(self.validator.band_of_pod(i) for i in known)
        reclaim = bool(data.get("reclaim"))  # legality checked per eviction (_eviction)
        for pod in sorted(map(str, named)):
            pidx = st.pod_index.get(pod)
            if pidx is None:
                continue
            band = self.validator.band_of_pod(pidx)
            if not reclaim and not may_preempt(preemptor, band):
                self._flag(
                    position,
                    "preemption_illegal",
                    f"{preemptor.label} pod(s) {', '.join(pods)} evicted {pod} ({band.label})",
                )
            g = st.gang_of(pidx)
            if g >= 0:
                gangs.add(g)
        return gangs

    def _necessary(self, position: int, decision: Any, data: dict[str, Any]) -> None:
        """A committed preemption evicts only where its pods did not fit: on each node
        that lost victims, the decision's bindings there must not all have fit with
        those victims still running. Checked by the one feasibility path (the
        validator's :meth:`Placer.binding_reasons` on its overlay, the victims assumed
        back on their nodes): resources, pod slots, and every constraint a victim can
        stand in the way of (inter-pod anti-affinity, topology spread, host ports).
        Bindings that name GPU devices must also fit device by device, by the placer's
        exact rule (:meth:`FoldedDevices.fits_with`, the victims back on the devices
        they held): a whole-GPU pod does not fit two half-free devices, whatever the
        node's summed GPU says. Bindings without devices are judged by the summed
        resource, as the commit service judges them."""
        held = self._victims_of.pop(decision, [])
        if not held or data.get("reclaim"):
            return  # reclaim: victims free a queue's share, not a node's room
        st = self.state
        on_node: dict[int, list[tuple[int, bool]]] = {}
        for b in data.get("bindings") or ():
            if not isinstance(b, dict) or not isinstance(b.get("node"), str):
                return  # malformed: flagged elsewhere
            if not isinstance(b.get("pod"), str):
                return
            nidx = st.node_index.get(b["node"])
            pidx = st.pod_index.get(b["pod"])
            if nidx is None or pidx is None:
                return  # unknown pod or node: flagged elsewhere
            on_node.setdefault(int(nidx), []).append((int(pidx), b.get("devices") is not None))
        victims: dict[int, list[tuple[int, tuple[int, int, tuple[int, ...]]]]] = {}
        for vidx, nidx, share in held:
            victims.setdefault(nidx, []).append((vidx, share))
        validator = self.validator
        placer = validator.placer
        for nidx, there in sorted(victims.items()):
            node = st.node_names[nidx]
            if nidx not in on_node:
                self._flag(
                    position,
                    "preemption_unnecessary",
                    f"decision {decision} evicted pods from {node}, where none of its pods go",
                )
                continue
            validator.begin()  # the overlay is the state again (victims evicted)
            try:
                # Asked first: the placer's inter-pod view starts with the first
                # question about a pod with inter-pod terms, and a pod assumed bound
                # before that (a victim without terms) would not count in it.
                for pidx, _dev in on_node[nidx]:
                    placer.binding_reasons(pidx, nidx)
                for vidx, _share in there:
                    placer.assume_binding(vidx, nidx)
                fits = True
                for pidx, _dev in on_node[nidx]:
                    if placer.binding_reasons(pidx, nidx):
                        fits = False
                        break
                    placer.assume_binding(pidx, nidx)
            finally:
                validator.begin()  # drop the assumptions
            named = [pidx for pidx, dev in on_node[nidx] if dev]
            if fits and named:
                fits = self._devices_fit(nidx, [share for _v, share in there], named)
            if fits:
                self._flag(
                    position,
                    "preemption_unnecessary",
                    f"decision {decision}: its pods fit on {node} without evicting anyone",
                )

    def _devices_fit(
        self, nidx: int, restored: list[tuple[int, int, tuple[int, ...]]], pods: list[int]
    ) -> bool:
        """Whether ``pods`` (slots) fit node slot ``nidx`` device by device with the
        victims' shares ``restored`` on their devices."""
        st = self.state
        if self._devices is None:
            self._devices = FoldedDevices(st, fgd=False)
        devices = self._devices
        wanted = [devices.request(st.class_of(p)) for p in pods]
        return devices.fits_with(nidx, restored, wanted)

    def _gang_split(self, position: int, gangs: set[int]) -> None:
        # The evictions are folded by now: a victim gang is gone whole or kept whole.
        st = self.state
        for g in sorted(gangs):
            running = st.gang_count(g, PHASE_RUNNING)
            if 0 < running < st.gang_min_of(g):
                self._flag(
                    position,
                    "gang_split",
                    f"gang {st.gang_keys[g]}: {running} running < minMember "
                    f"{st.gang_min_of(g)} after evictions",
                )
