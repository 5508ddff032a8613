"""Prometheus metrics of every esched service, defined in one place.

Names follow Prometheus conventions (``_total`` counters, ``_seconds``
histograms). :func:`serve` exposes them over HTTP on ``--metrics-port``.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

__all__ = [
    "ADMISSION_REJECTED",
    "BIND_ADDR",
    "COMMITTED_PODS",
    "COMMIT_CONFLICTS",
    "COMMIT_EVICTED",
    "COMMIT_HEAD_CONFLICTS",
    "COMMIT_LEADER",
    "COMMIT_PENDING_PODS",
    "COMMIT_PROPOSALS",
    "COMMIT_STEPDOWNS",
    "DEADLETTER",
    "DISPATCH_HELD",
    "DISPATCH_PARKED",
    "DISPATCH_WORK",
    "FOLD_ANOMALIES",
    "INGEST_BATCH_SECONDS",
    "INGEST_EVENTS",
    "INGEST_LAG",
    "RECLAIM_LIMITS",
    "RECLAIM_RECLAIMED",
    "RECLAIM_RESERVATIONS",
    "RECLAIM_RESERVED",
    "REPLICA_CACHE_HIT_RATE",
    "REPLICA_CONFLICTS",
    "REPLICA_PENDING",
    "REPLICA_PLACED_PODS",
    "REPLICA_PROPOSALS",
    "REPLICA_UNSCHEDULABLE",
    "RETRIES",
    "SUBMIT_TO_COMMIT_SECONDS",
    "publish_anomalies",
    "publish_reclamation",
    "serve",
]

log = logging.getLogger(__name__)

INGEST_EVENTS = Counter(
    "esched_ingest_events_total",
    "Input messages handled by ingest, by outcome (stored, duplicate, deadletter).",
    ["outcome"],
)
DEADLETTER = Counter(
    "esched_deadletter_total",
    "Records sent to the dead-letter topic, by service and reason.",
    ["service", "reason"],
)
RETRIES = Counter(
    "esched_retries_total",
    "Retries after a transient failure, by service and the peer that failed (store, bus).",
    ["service", "peer"],
)
INGEST_BATCH_SECONDS = Histogram(
    "esched_ingest_batch_seconds",
    "Time from poll to committed offsets for one ingest batch.",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
INGEST_LAG = Gauge("esched_ingest_lag", "Input messages not yet consumed by this ingest member.")

# commit service ---------------------------------------------------------------------
COMMIT_PROPOSALS = Counter(
    "esched_commit_proposals_total",
    "Placement proposals decided by the commit service, by outcome (committed, rejected, "
    "duplicate).",
    ["outcome"],
)
COMMITTED_PODS = Counter("esched_commit_pods_total", "Pods bound by committed decisions.")
COMMIT_EVICTED = Counter(
    "esched_commit_evicted_pods_total", "Running pods evicted by committed preemptions."
)
COMMIT_CONFLICTS = Counter(
    "esched_commit_conflicts_total",
    "Rejected proposals (Omega's conflicts), by reason code (Insufficient.cpu, "
    "PodNotPending, NodeNotFound, TaintToleration, GangIncomplete, ...).",
    ["reason"],
)
COMMIT_HEAD_CONFLICTS = Counter(
    "esched_commit_head_conflicts_total",
    "Decision batches whose head-conditional append was refused because another event "
    "got in first, by outcome (revalidated; unaffected: only new pods of other pods got "
    "in, appended as validated; unchecked: appended without the head check after too "
    "many refusals).",
    ["outcome"],
)
SUBMIT_TO_COMMIT_SECONDS = Histogram(
    "esched_submit_to_commit_seconds",
    "Time from a pod's submission (event time, else recorded_at) to its committed binding "
    "being recorded.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
COMMIT_PENDING_PODS = Gauge(
    "esched_commit_pending_pods", "Pending pods in the commit service's authoritative state."
)
COMMIT_LEADER = Gauge(
    "esched_commit_leader", "1 while this commit service instance holds the leader lease."
)
COMMIT_STEPDOWNS = Counter(
    "esched_commit_stepdowns_total",
    "Times the commit service stopped deciding, by cause (lease_lost, fenced, foreign_writer).",
    ["cause"],
)

# replicas and the work dispatcher -----------------------------------------------------
REPLICA_PROPOSALS = Counter(
    "esched_replica_proposals_total",
    "Proposals a replica sent, by outcome of their decision (committed, rejected).",
    ["replica", "outcome"],
)
REPLICA_PLACED_PODS = Counter(
    "esched_replica_placed_pods_total",
    "Pods bound by a replica's committed proposals.",
    ["replica"],
)
REPLICA_CONFLICTS = Counter(
    "esched_replica_conflicts_total",
    "A replica's proposals the commit service rejected, by reason code.",
    ["replica", "reason"],
)
REPLICA_UNSCHEDULABLE = Counter(
    "esched_replica_unschedulable_total",
    "esched.pod.unschedulable reports a replica appended (new ones, not duplicates).",
    ["replica"],
)
REPLICA_PENDING = Gauge(
    "esched_replica_pending_pods", "Pending pods in a replica's fold.", ["replica"]
)
REPLICA_CACHE_HIT_RATE = Gauge(
    "esched_replica_cache_hit_rate",
    "Hit rate of a replica's equivalence-class feasibility/score cache.",
    ["replica"],
)
DISPATCH_WORK = Counter(
    "esched_dispatch_work_total",
    "Work items the dispatcher published, by cause (pending, start, rejected, retry).",
    ["cause"],
)
DISPATCH_PARKED = Gauge(
    "esched_dispatch_parked_pods",
    "Unschedulable pods waiting for capacity to free (with backoff) before re-publishing.",
)
DISPATCH_HELD = Gauge(
    "esched_dispatch_held_jobs",
    "Jobs (pods, gangs) not admitted to their queue yet, by reason (QueueClosed, "
    "QueueCapability, ClusterCapacity, QueueOverused).",
    ["reason"],
)
FOLD_ANOMALIES = Gauge(
    "esched_fold_anomalies",
    "Events of the log the fold of this process ignored, by reason (a resubmitted running "
    "pod, a commit for an unknown pod, an undecodable or out-of-range event, ...).",
    ["reason"],
)
ADMISSION_REJECTED = Counter(
    "esched_admission_rejected_total",
    "Submissions rejected at admission (esched.pod.rejected), by reason (QuotaExceeded, "
    "QueueClosing, QueueClosed).",
    ["reason"],
)


# Borg's resource reclamation (core/reservations.py) -------------------------------------
RECLAIM_LIMITS = Gauge(
    "esched_reclaim_limits",
    "Sum of the running pods' limits over alive nodes, by resource (base units): what "
    "production pods are placed against.",
    ["resource"],
)
RECLAIM_RESERVATIONS = Gauge(
    "esched_reclaim_reservations",
    "Sum of the running pods' reservations over alive nodes, by resource (base units).",
    ["resource"],
)
RECLAIM_RESERVED = Gauge(
    "esched_reclaim_reserved",
    "Sum over alive nodes of min(limits, reservations + burst share), by resource (base "
    "units): what non-production pods are placed against.",
    ["resource"],
)
RECLAIM_RECLAIMED = Gauge(
    "esched_reclaim_reclaimed",
    "Capacity reclaimed for non-production pods (limits - reserved) over alive nodes, by "
    "resource (base units).",
    ["resource"],
)
OVERLOAD_EVICTIONS = Counter(
    "esched_overload_evictions_total",
    "Pods evicted from overloaded nodes (esched.pod.evicted, reason Overloaded), by "
    "resource and band (prod, non-prod).",
    ["resource", "band"],
)
OVERLOAD_THROTTLES = Counter(
    "esched_overload_throttles_total",
    "Pods throttled on overloaded nodes (esched.pod.throttled), by resource and band.",
    ["resource", "band"],
)


def publish_reclamation(state: Any) -> None:
    """Set the ``esched_reclaim_*`` gauges from a state's totals over alive nodes."""
    alive = state.node_alive()
    lim = state.node_limits()[alive].sum(axis=0)
    resv = state.node_reservations()[alive].sum(axis=0)
    reserved = state.node_reserved()[alive].sum(axis=0)
    for r, name in enumerate(state.res_names):
        RECLAIM_LIMITS.labels(name).set(int(lim[r]))
        RECLAIM_RESERVATIONS.labels(name).set(int(resv[r]))
        RECLAIM_RESERVED.labels(name).set(int(reserved[r]))
        RECLAIM_RECLAIMED.labels(name).set(int(lim[r] - reserved[r]))


def publish_anomalies(anomalies: dict[str, int]) -> None:
    """Set :data:`FOLD_ANOMALIES` from a state's ``anomalies`` (reason -> count)."""
    for reason, count in anomalies.items():
        FOLD_ANOMALIES.labels(reason).set(count)


#: Where :func:`serve` listens by default: loopback, so the metrics (pod names,
#: queue names) are not offered to the network unless asked (``--metrics-addr``).
BIND_ADDR = "127.0.0.1"


def serve(port: int | None, addr: str | None = None) -> None:
    """Expose ``/metrics`` on ``port`` (no-op for None or 0), on ``addr`` (default
    :data:`BIND_ADDR`)."""
    addr = BIND_ADDR if addr is None else addr
    if port:
        start_http_server(port, addr=addr)
        log.info("metrics on http://%s:%d/metrics", addr, port)
