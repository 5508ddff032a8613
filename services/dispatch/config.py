"""The dispatcher's settings, totals and name."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SERVICE = "dispatch"


@dataclass(frozen=True, slots=True)
class DispatchConfig:
    """Tuning of the dispatcher."""

    #: Re-publish a rejected proposal's still-pending pods after this delay (the
    #: replica's own retries, ~0.1 s, come first).
    rejected_delay: float = 3.0
    #: Backoff of an unschedulable pod: base * 2**(reports-1), capped. Not the retry
    #: policy's :class:`~esched.services.retry.Backoff`: no call is retried here, the
    #: delay is a function of the pod's report count (which a new leader recovers from
    #: the log, so it must be deterministic), and parked pods contend for nothing.
    backoff_base: float = 0.5
    backoff_max: float = 60.0
    #: How often the timers (delays, backoff) are looked at.
    tick: float = 0.1
    #: Items per send on start (the whole pending set may be large).
    chunk: int = 5000
    #: On takeover, read at most this many events back from the head to find the
    #: pods still parked (reported unschedulable after the newest capacity event);
    #: pods reported before the window are published once more (harmless).
    takeover_scan: int = 200_000
    #: Seconds between reclaim passes over starved queues' parked pods (0: no reclaim).
    reclaim_interval: float = 0.5
    #: A pod with a reclaim proposal in flight is not planned again for this long.
    reclaim_timeout: float = 10.0
    #: Overload plans appended on the head they were planned on this many times in a
    #: row before one is appended without the head check.
    overload_head_attempts: int = 5
    #: Publish the feed (services/store/feed.py) on ``TopicNames.feed`` while leading:
    #: claims records of the pods' events and the events replicas fold themselves,
    #: for replicas that follow the feed (``ReplicaConfig.follow = "feed"``); their
    #: gang work items then name the gang's Pending pods.
    feed: bool = False


@dataclass(slots=True)
class DispatchTotals:
    """What the dispatcher published so far, by cause."""

    published: int = 0
    by_cause: dict[str, int] = field(default_factory=dict)
    takeovers: int = 0
    #: Submissions rejected at admission (new events appended), by reason.
    rejected: dict[str, int] = field(default_factory=dict)
    #: Jobs held now (not admitted to their queue), by reason.
    held: dict[str, int] = field(default_factory=dict)
    #: Reclaim proposals sent.
    reclaims: int = 0
    #: Overload evictions and throttles appended (core/overload.py).
    overload_evictions: int = 0
    overload_throttles: int = 0
    #: Feed messages published (DispatchConfig.feed).
    feed_messages: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "published": self.published,
            "by_cause": dict(sorted(self.by_cause.items())),
            "takeovers": self.takeovers,
            "rejected": dict(sorted(self.rejected.items())),
            "held": dict(sorted(self.held.items())),
            "reclaims": self.reclaims,
            "overload_evictions": self.overload_evictions,
            "overload_throttles": self.overload_throttles,
            "feed_messages": self.feed_messages,
        }
