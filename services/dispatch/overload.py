"""Overload handling: evictions and throttles for nodes whose pods use more than the
node holds (Borg 5.5; the rule in ``core/overload.py``), appended as events.

The dispatcher notes the nodes each usage report names while it folds the log; the
leader loop plans them on the fold (:meth:`_Overload._plan_overload`) and appends
the plan with the log head it was decided on (``expected_head``), as the commit
service appends its decisions: if any event got in first, nothing is stored and
the nodes are planned again on the newer fold. Ids are deterministic (the usage
report's id and the pod for an eviction; the node, resource, overload start and
pod for a throttle), so a retry or a second leader's copy dedupes.

A compressible overload is evicted for once it has lasted ``evict_after`` on the
log's clock: its episode (:class:`~esched.core.overload.Episodes`) begins at the
first usage report after which the node is overloaded (the fold of a batch stops
where a report names a node an earlier report of the batch named, to look at it
first), and a new leader takes over the episodes going on from the
``since`` of their throttles in the log (:meth:`_Overload._recover_overload`).
"""

from __future__ import annotations

import functools
import logging
from datetime import UTC, datetime
from typing import Any

import orjson

from esched.core.overload import log_seconds, log_time, overloads, plan_overload
from esched.core.overload import node_loads as overload_rows
from esched.core.validation import OVERLOADED
from esched.schemas.events import (
    POD,
    POD_EVICTED,
    POD_THROTTLED,
    USAGE_REPORTED,
    envelope,
    stream_name,
)
from esched.services import metrics
from esched.services.dispatch.config import SERVICE
from esched.services.dispatch.wakeups import _WakeUps
from esched.services.faults import retry_transient
from esched.services.store.base import HeadConflictError, NewEvent, StoredEvent

log = logging.getLogger(__name__)

SOURCE = "esched/dispatch"


class _Overload(_WakeUps):
    """Note the nodes usage reports name; plan and append their overload handling."""

    def _fold(self, rows: list[StoredEvent]) -> None:
        if not self.state.reclamation.handles_overload():
            super()._fold(rows)
            return
        # An overload episode begins at the first report that shows it, not at the
        # last one of the batch: when a report names a node that an earlier report of
        # the batch named, fold up to it and look at the nodes named so far first.
        # (Reports naming different nodes, one per node agent, need no stop.)
        start = 0
        chunk: list[tuple[StoredEvent, dict[str, Any]]] = []
        named: set[str] = set()
        for i, r in enumerate(rows):
            if r.type != USAGE_REPORTED:
                continue
            env = orjson.loads(r.payload)
            names = self._named(env.get("data") or {}, pods=False)
            if names & named:
                super()._fold(rows[start:i])
                start = i
                self._note_reports(chunk)
                chunk, named = [], set()
            chunk.append((r, env))
            named |= names
        super()._fold(rows[start:])
        self._note_reports(chunk)
        if self._overload_nodes:
            self._wake.set()

    def _named(self, data: Any, pods: bool = True) -> set[str]:
        """The nodes a usage report's ``data`` names: its ``nodes[]``, and (with
        ``pods``, or when it has no ``nodes[]``) the nodes its pods run on."""
        st = self.state
        if not isinstance(data, dict):
            return set()
        names = {
            n["name"]
            for n in data.get("nodes") or ()
            if isinstance(n, dict) and isinstance(n.get("name"), str)
        }
        if names and not pods:
            return names
        slots: set[int] = set()
        for entry in data.get("pods") or ():
            key = entry.get("pod") if isinstance(entry, dict) else None
            slot = st.pod_index.get(key) if isinstance(key, str) else None
            if slot is not None:
                slots.add(st.node_of(slot))
        names.update(st.node_names[n] for n in slots if n >= 0)
        return names

    def _note_reports(self, chunk: list[tuple[StoredEvent, dict[str, Any]]]) -> None:
        """After the fold of the reports in ``chunk`` (each naming other nodes): note
        the nodes they name for the next plan, and begin or end those nodes' overload
        episodes at the time of the report that named them."""
        if not chunk:
            return
        st = self.state
        clock = float(st.clock)
        slots: dict[int, tuple[str, float]] = {}
        for r, env in chunk:
            at = log_seconds(env.get("time"))
            for name in self._named(env.get("data")):
                n = st.node_index.get(name)
                if n is not None:
                    self._overload_nodes[name] = r.id
                    slots[n] = (name, clock if at is None else min(at, clock))
        self._observe_episodes(slots)

    def _observe_episodes(self, slots: dict[int, tuple[str, float]]) -> None:
        """Begin or end the overload episodes of node ``slots`` (slot -> its name and
        the time of the report that named it) on the state as it is now."""
        for n, resource, over in overloads(self.state, slots, self.state.reclamation.reclaim):
            name, at = slots[n]
            key = (name, resource)
            if self._episodes.observe(key, over, at) is None:
                self._throttled.pop(key, None)

    async def _recover_overload(self) -> None:
        """Take over the overload episodes a previous leader had begun, from the log.

        For each node and compressible resource overloaded on the state at takeover,
        the newest throttle (or eviction for overload) of it in the last
        ``takeover_scan`` events gives the episode's start (its ``since``): a failover
        neither restarts the wait of ``evict_after`` nor throttles the same pods again
        (their throttle ids are the same, so the store dedupes them anyway).
        """
        st = self.state
        cfg = st.reclamation
        if not cfg.handles_overload():
            return
        hot: set[tuple[str, str]] = {
            (name, resource)
            for n, resource, over in overloads(st, range(st.n_nodes), cfg.compressible)
            if over and (name := st.node_names[n]) is not None
        }
        if not hot:
            return
        found: dict[tuple[str, str], float] = {}
        async for rows in self._log_tail():
            if len(found) == len(hot):
                break
            for row in rows:
                if row.type != POD_THROTTLED and row.type != POD_EVICTED:
                    continue
                data = orjson.loads(row.payload).get("data") or {}
                key = (data.get("node"), data.get("resource"))
                since = log_seconds(data.get("since"))
                if key not in hot or since is None:
                    continue
                if key not in found:
                    found[key] = since  # the newest: the episode still going on
                if found[key] == since and row.type == POD_THROTTLED:
                    self._throttled.setdefault(key, set()).add(row.id)
        for key, since in found.items():
            self._episodes.resume(key, since)
        if found:
            log.info("dispatcher: %d overload episode(s) taken over from the log", len(found))

    def _plan_overload(self) -> None:
        """Plan the noted nodes on the fold as it is now (see the module docstring)."""
        if not self._overload_nodes or self._overload_out:
            return
        st = self.state
        cfg = st.reclamation
        bands = self.admission.quota.bands
        clock = float(st.clock)
        out: list[tuple[dict[str, Any], str, str, bool]] = []  # env, resource, kind, prod
        allocatable = st.node_allocatable()
        slots = {
            n: name for name in self._overload_nodes if (n := st.node_index.get(name)) is not None
        }
        hot = {(n, r): over for n, r, over in overloads(st, slots, cfg.reclaim)}
        for n, name in slots.items():
            report = self._overload_nodes[name]
            evicted: set[str] = set()
            for resource in sorted(cfg.reclaim):
                over = hot.get((n, resource))
                if over is None:  # a resource the state does not have
                    continue
                capacity = int(allocatable[n, st.res_index[resource]])
                key = (name, resource)
                if not over:
                    # (most nodes: their rows are not read)
                    self._episodes.observe(key, False, clock)
                    self._throttled.pop(key, None)
                    continue
                rows = [r for r in overload_rows(st, n, resource, bands) if r.pod not in evicted]
                compressible = resource in cfg.compressible
                used = sum(r.usage for r in rows)
                if used <= capacity:
                    continue
                # Begun by the report that showed it (_note_report), or now.
                since = self._episodes.observe(key, True, clock)
                assert since is not None, "an overloaded node is in an episode"
                lasted = compressible and self._episodes.lasted(key, clock, cfg.evict_after)
                plan = plan_overload(capacity, rows, compressible=compressible, evict=lasted)
                prod = {r.pod: r.prod for r in rows}
                common = {
                    "node": name,
                    "reason": OVERLOADED,
                    "resource": resource,
                    "capacity": capacity,
                    "report": report,
                }
                for pod in plan.evictions:
                    body = {
                        "pod": pod,
                        **common,
                        "usage": plan.usage,
                        "need": plan.need,
                        "message": f"{name} out of {resource}: pods use {plan.usage}, "
                        f"need {plan.need}, capacity {capacity}",
                    }
                    if compressible:
                        body["since"] = log_time(since)
                    env = envelope(
                        POD_EVICTED,
                        SOURCE,
                        body,
                        id=f"evicted-overload-{report}-{pod}",
                        time=log_time(clock),
                        subject=pod,
                    )
                    out.append((env, resource, "eviction", prod[pod]))
                    evicted.add(pod)
                for t in plan.throttles:
                    body = {
                        "pod": t.pod,
                        **common,
                        "usage": t.usage,
                        "cap": t.cap,
                        "since": log_time(since),
                        "message": f"{name} out of {resource}: {t.pod} held at {t.cap}",
                    }
                    tid = f"throttled-{name}-{resource}-{int(since * 1000)}-{t.pod}"
                    if tid in self._throttled.get(key, ()):
                        continue  # once per overload episode
                    env = envelope(
                        POD_THROTTLED, SOURCE, body, id=tid, time=log_time(clock), subject=t.pod
                    )
                    out.append((env, resource, "throttle", prod[t.pod]))
        self._overload_nodes.clear()
        self._overload_out = out
        self._overload_head = int(st.position)

    async def _append_overload(self) -> None:
        """Append the planned evictions and throttles on the head they were planned on;
        when the log moved on, plan those nodes again on the newer fold."""
        if not self._overload_out:
            return
        out, self._overload_out = self._overload_out, []
        now = datetime.now(UTC)
        events = [
            NewEvent(
                env["id"], env["type"], stream_name(POD, env["data"]["pod"]), orjson.dumps(env), now
            )
            for env, _r, _k, _p in out
        ]
        # After a few moved heads in a row, append unchecked (as the commit service
        # does): a log busy with other writers must not starve overload handling.
        checked = self._overload_conflicts < self.config.overload_head_attempts
        try:
            res = await retry_transient(
                functools.partial(
                    self.store.append,
                    events,
                    expected_head=self._overload_head if checked else None,
                ),
                what="overload append",
                service=SERVICE,
                peer="store",
            )
        except HeadConflictError:
            self._overload_conflicts += 1
            for env, _r, _k, _p in out:
                self._overload_nodes.setdefault(env["data"]["node"], env["data"]["report"])
            return
        self._overload_conflicts = 0
        for env, resource, kind, _p in out:
            if kind == "throttle":
                key = (env["data"]["node"], resource)
                self._throttled.setdefault(key, set()).add(env["id"])
        if res.duplicates:
            return  # a retry or another leader's copy: counted there
        for env, resource, kind, prod in out:
            band = "prod" if prod else "non-prod"
            if kind == "eviction":
                metrics.OVERLOAD_EVICTIONS.labels(resource, band).inc()
                self.totals.overload_evictions += 1
            else:
                metrics.OVERLOAD_THROTTLES.labels(resource, band).inc()
                self.totals.overload_throttles += 1
            log.info(
                "overload on %s (%s): %s %s",
                env["data"]["node"],
                resource,
                kind,
                env["data"]["pod"],
                extra={
                    "node": env["data"]["node"],
                    "resource": resource,
                    "pod": env["data"]["pod"],
                },
            )
