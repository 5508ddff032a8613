"""The overload-eviction checks: ``overload_order``, ``overload_unneeded``."""

from __future__ import annotations

from typing import Any

from esched.core import PHASE_RUNNING
from esched.core.overload import log_seconds, need, node_loads
from esched.services.audit.jobs import _JobChecks


class _OverloadChecks(_JobChecks):
    """An overload eviction against Borg's order and the node's need
    (:mod:`esched.core.overload`)."""

    def _overload_eviction(
        self, position: int, event: dict[str, Any], data: dict[str, Any]
    ) -> None:
        """An eviction for overload: the seed's order and its need, on the state just
        before it (:mod:`esched.core.overload`)."""
        st = self.state
        self.checked["overload_evictions"] = self.checked.get("overload_evictions", 0) + 1
        pod: Any = data.get("pod")
        node: Any = data.get("node")
        resource: Any = data.get("resource")
        pidx = st.pod_index.get(pod)
        n = st.node_index.get(node)
        if (
            pidx is None
            or n is None
            or st.phase_of(pidx) != PHASE_RUNNING
            or st.node_of(pidx) != n
            or resource not in st.res_names
        ):
            self._flag(
                position,
                "overload_unneeded",
                f"pod {pod} evicted for overload of {resource} on {node}, where it was not "
                "running (or the node or resource is unknown)",
            )
            return
        r = st.res_names.index(resource)
        capacity = int(st.node_allocatable()[n, r])
        rows = node_loads(st, n, resource, self.validator.bands)
        used, needed = sum(row.usage for row in rows), need(rows)
        run = (node, resource)
        if used > capacity:
            # An overload: it starts a run of evictions for this report.
            self._overload_runs[run] = data.get("report")
        elif needed <= capacity or self._overload_runs.get(run) != data.get("report"):
            # Later evictions of one run go on while the reservations do not fit.
            self._flag(
                position,
                "overload_unneeded",
                f"{pod} evicted from {node}: its pods use {used} and need {needed} of "
                f"{resource}, capacity {capacity}",
            )
        cfg = st.reclamation
        since = log_seconds(data.get("since"))
        if resource in cfg.compressible and (since is None or st.clock - since < cfg.evict_after):
            self._flag(
                position,
                "overload_unneeded",
                f"{pod} evicted from {node} for {resource} (compressible) before the "
                f"overload lasted {cfg.evict_after:g} s",
            )
        me = next(row for row in rows if row.pod == pod)
        if me.prod:
            ran = sorted(row.pod for row in rows if not row.prod)
            if ran:
                self._flag(
                    position,
                    "overload_order",
                    f"production pod {pod} evicted from {node} for {resource} while "
                    f"non-production {', '.join(ran[:3])} ran",
                )
            elif me.usage <= me.limit:
                self._flag(
                    position,
                    "overload_order",
                    f"production pod {pod} evicted from {node} for {resource} within its "
                    f"limit ({me.usage} <= {me.limit})",
                )
