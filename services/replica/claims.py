"""Claims in flight (kube-scheduler's assume cache): the placer's view is the fold plus
every proposal sent and not yet decided; a decision folded releases its claim."""

from __future__ import annotations

from typing import Any

from esched.schemas.events import PLACEMENT_COMMITTED, PLACEMENT_REJECTED
from esched.services.replica._claims import claimed_slots
from esched.services.replica.base import _ReplicaBase
from esched.services.replica.proposals import Proposed


class _Claims(_ReplicaBase):
    """Claims of undecided proposals, assumed in the placer's view."""

    def _resync(self) -> None:
        """Make the placer's view the fold plus every undecided claim (assumed).

        Cheap when nothing changed: the view a pass leaves behind already holds its
        own claims, so the next batch placed before any fold starts from it as is.
        """
        assert self.placer is not None
        now = (int(self.state.position), self._claims_version)
        if self._view_at == now:
            return
        self.placer.sync()
        if self._inflight:
            st = self.state
            pods, nodes, victims = claimed_slots(
                self._inflight.values(), st.pod_keys, st.node_names, st.pod_index, st.node_index
            )
            self.placer.assume_claims(pods, nodes, victims)
        if self.devices is not None:
            assert self.scheduler is not None
            self.devices.sync()
            self.scheduler.use_gpu_resource(self.devices.resource, self.devices.scale)
            self.devices.claim(b for bindings, _v, _s in self._inflight.values() for b in bindings)
        self._view_at = now

    def renew_view(self) -> None:
        """Renew the placer's view now, as when a claim has come or gone: the fold plus
        every undecided claim assumed again. Placing renews it itself before each pass
        when needed; this is for measuring that renewal (``bench_follow ... renew``)."""
        self._view_at = (-1, -1)
        self._resync()

    def _claim(self, proposed: Proposed) -> None:
        """Record the claims of proposals about to be sent (already in the view)."""
        inflight = self._inflight
        inflight_pods = self._inflight_pods
        for pid, pl in zip(proposed.pids, proposed.placements, strict=True):
            pairs = pl.bindings
            if len(pairs) != 1 or pairs[0][2]:  # GPU devices as tuples, whatever the plan
                pairs = [(pod, node, tuple(devices)) for pod, node, devices in pairs]
            inflight[pid] = (
                pairs,
                [v["pod"] for v in pl.victims] if pl.victims else (),
                [],  # their slots, from the first renewal of the view on (_resync)
            )
            for pod, _node, _devices in pairs:
                inflight_pods[pod] = pid
        self._claims_version += 1
        # The view already holds them (the pass assumed each placement as it went).
        self._view_at = (int(self.state.position), self._claims_version)

    def _release(self, pid: str) -> None:
        """Forget a claim whose decision is in the fold (committed: the fold has it)."""
        claim = self._inflight.pop(pid, None)
        if claim is None:
            return
        for pod, _node, _devices in claim[0]:
            if self._inflight_pods.get(pod) == pid:
                del self._inflight_pods[pod]
        self._claims_version += 1

    def _on_fold(self, events: list[tuple[int, dict[str, Any]]]) -> None:
        """Release the claims of our proposals whose decisions just got folded (in the
        same step as the fold: the state has a committed claim exactly when the
        ledger has not) and hand each decision to its batch."""
        if not self._waiting and not self._inflight:
            return
        for _pos, ev in events:
            if ev.get("type") in (PLACEMENT_COMMITTED, PLACEMENT_REJECTED):
                pid: Any = (ev.get("data") or {}).get("proposal")  # as stored: any JSON
                if pid in self._inflight:
                    self._release(pid)
                batch = self._waiting.get(pid)
                if batch is not None:
                    batch.decide(pid, ev)
