"""The decision and binding checks: ``irreproducible``, ``unverifiable``, ``quota``,
``unknown_pod``, ``double_binding``, ``unknown_node``, ``malformed``, ``overcommit``,
``gang_partial``, and ``nodename_overcommit`` for pods bound by ``spec.nodeName``."""

from __future__ import annotations

from typing import Any

import numpy as np

from esched.core import PHASE_PENDING, PHASE_RUNNING, PHASES
from esched.core.admission import event_key
from esched.schemas.events import PLACEMENT_COMMITTED
from esched.services.audit.preemption import _PreemptionChecks


class _BindingChecks(_PreemptionChecks):
    """A decision re-validated and its bindings checked around its fold."""

    def _node_name(self, position: int, data: dict[str, Any]) -> None:
        """A pod bound by ``spec.nodeName`` is charged to its node without a fit check
        (the policy: reported, not refused); flag the node if that overcommits it."""
        spec = data.get("spec")
        node = spec.get("nodeName") if isinstance(spec, dict) else None
        if not isinstance(node, str) or not node:
            return
        st = self.state
        key = event_key(data)
        record = st.pod(key)
        nidx = st.node_index.get(node)
        if record is None or record["node"] != node or nidx is None:
            return  # not charged (an unknown node, out of range): a fold anomaly
        allocated, allocatable = st.node_allocated(), st.node_allocatable()
        over = np.flatnonzero(allocated[nidx] > allocatable[nidx])
        if over.size:
            parts = ", ".join(
                f"{st.res_names[r]} {int(allocated[nidx, r])} > {int(allocatable[nidx, r])}"
                for r in over
            )
            self._flag(
                position, "nodename_overcommit", f"pod {key} on {node} by spec.nodeName: {parts}"
            )

    def _decision(
        self, position: int, etype: str, event: dict[str, Any], data: dict[str, Any]
    ) -> None:
        st = self.state
        committed = etype == PLACEMENT_COMMITTED
        self.checked["decisions"] += 1
        self.checked["committed" if committed else "rejected"] += 1
        bindings = data.get("bindings")
        proposal = data.get("proposal")
        victims = data.get("victims") if isinstance(data.get("victims"), list) else []
        victim_gangs: set[int] = set()
        if committed and victims:
            victim_gangs = self._preemption(position, event, data, victims)
        elif (decision := event.get("id")) in self._evictions:
            self._evictions.pop(decision)
            self._flag(
                position,
                "preemption_unrecorded",
                f"pods were evicted for {event.get('id')}, which names no victims",
            )
        # 1. Reproducibility: the same validation, on the state just before the decision
        # (for a committed preemption: after its evictions, which precede it).
        if isinstance(bindings, list) and bindings and isinstance(proposal, str):
            self.validator.begin()
            try:
                checked = (
                    {k: v for k, v in data.items() if k != "victims"}
                    if committed and victims
                    else data
                )
                verdict = self.validator.check(checked, record=False)
            except (KeyError, TypeError, AttributeError) as exc:
                verdict = None
                self._flag(position, "irreproducible", f"proposal {proposal}: malformed ({exc})")
            if verdict is not None:
                if verdict.ok == committed:
                    self.checked["reproduced"] += 1
                elif committed:
                    self._flag(
                        position,
                        "irreproducible",
                        f"proposal {proposal} was committed; re-validation rejects it: "
                        f"{verdict.reason} ({verdict.message})",
                    )
                else:
                    self._flag(
                        position,
                        "irreproducible",
                        f"proposal {proposal} was rejected ({data.get('reason')}); "
                        "re-validation accepts it",
                    )
        else:
            self.checked["unverifiable"] += 1
        if not committed or not isinstance(bindings, list):
            st.apply(event, position)
            return
        if victim_gangs:
            self._gang_split(position, victim_gangs)
        if not all(isinstance(b, dict) for b in bindings):
            self._flag(position, "malformed", f"proposal {proposal}: a binding is not an object")
            st.apply(event, position)
            return
        # 2. Per-binding facts before the fold applies the decision.
        nodes: set[int] = set()
        gangs: dict[int, int] = {}
        seen: set[str] = set()
        for b in bindings:
            pod, node = b.get("pod"), b.get("node")
            self.checked["bindings"] += 1
            if pod in self._refused:
                self._flag(position, "quota", f"pod {pod} bound though {self._refused[pod]}")
            pidx = st.pod_index.get(pod)
            nidx = st.node_index.get(node)
            if pidx is None:
                self._flag(position, "unknown_pod", f"pod {pod} bound but not in the log")
            elif st.phase_of(pidx) != PHASE_PENDING or pod in seen:
                where = st.node_of(pidx)
                on = st.node_names[where] if where >= 0 else None
                self._flag(
                    position,
                    "double_binding",
                    f"pod {pod} bound to {node} while {PHASES[st.phase_of(pidx)]}"
                    + (f" on {on}" if on else "")
                    + (" (twice in one decision)" if pod in seen else ""),
                )
            if nidx is None:
                state = "removed" if node in self._removed else "unknown"
                self._flag(position, "unknown_node", f"pod {pod} bound to {state} node {node}")
            else:
                nodes.add(int(nidx))
            if pidx is not None:
                g = st.gang_of(pidx)
                if g >= 0:
                    gangs[g] = gangs.get(g, 0) + 1
            seen.add(pod)
        running_before = {g: st.gang_count(g, PHASE_RUNNING) for g in gangs}
        st.apply(event, position)
        # 3. Over-commit on the bound nodes, after the decision, by the accounting
        # placement uses: with reclamation on, min(limits, reservations + burst) (a
        # legal decision keeps it within allocatable, while non-production pods placed
        # in reclaimed resources take the requests above it); off, the requests.
        allocatable = st.node_allocatable()
        allocated = st.node_reserved() if st.reclamation.enabled else st.node_allocated()
        for n in sorted(nodes):
            over = np.flatnonzero(allocated[n] > allocatable[n])
            if over.size:
                parts = ", ".join(
                    f"{st.res_names[r]} {int(allocated[n, r])} > {int(allocatable[n, r])}"
                    for r in over
                )
                self._flag(position, "overcommit", f"node {st.node_names[n]}: {parts}")
        # 4. Gangs: atomic and at least minMember running after the decision.
        for g, named in gangs.items():
            self.checked["gang_decisions"] += 1
            running = st.gang_count(g, PHASE_RUNNING)
            need = st.gang_min_of(g)
            bound = running - running_before[g]
            if bound != named:
                self._flag(
                    position,
                    "gang_partial",
                    f"gang {st.gang_keys[g]}: {bound} of the {named} members in the "
                    "decision were bound",
                )
            elif running < need:
                self._flag(
                    position,
                    "gang_partial",
                    f"gang {st.gang_keys[g]}: {running} running < minMember {need}",
                )
