"""Prometheus metrics of every esched service, defined in one place.

Names follow Prometheus conventions (``_total`` counters, ``_seconds``
histograms). :func:`serve` exposes them over HTTP on ``--metrics-port``.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter, Gauge, Histogram, start_http_server

__all__ = [
    "DEADLETTER",
    "INGEST_BATCH_SECONDS",
    "INGEST_EVENTS",
    "INGEST_LAG",
    "RETRIES",
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


def serve(port: int | None, addr: str = "0.0.0.0") -> None:
    """Expose ``/metrics`` on ``port`` (no-op for None or 0)."""
    if port:
        start_http_server(port, addr=addr)
        log.info("metrics on http://%s:%d/metrics", addr, port)
