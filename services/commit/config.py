"""The commit service's settings, totals, names and its one exception."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from esched.core.bands import BandConfig
from esched.core.profile import Profile
from esched.schemas.validator import MAX_EVENT_BYTES

SERVICE = "commit"

#: Companion snapshot series: the decisions stream's version at each state snapshot
#: this service saves, so a new leader knows its fence without re-reading the log.
FENCE_SNAPSHOT = "commit-fence"


@dataclass(frozen=True, slots=True)
class CommitConfig:
    """Tuning of the commit service."""

    group: str = "esched-commit"
    #: Proposals per decision batch (one store transaction, one fence check).
    batch_size: int = 1000
    #: Short, so a lost lease is noticed between polls within ~0.1 s.
    poll_timeout_ms: int = 100
    #: Save a snapshot after this many events folded since the last one (0: never).
    snapshot_every: int = 50_000
    source: str = "esched/commit"
    max_proposal_bytes: int = MAX_EVENT_BYTES
    #: After stepping down, wait this long before contending for the lease again, so a
    #: standby (retrying every 0.5 s) takes over rather than the instance that just failed.
    stepdown_backoff: float = 2.0
    #: How long :meth:`CommitService.stop` waits for an in-flight batch.
    stop_timeout: float = 10.0
    #: Proposal ids remembered (with the position of their decision) for idempotency
    #: without a store round trip; older redeliveries fall back to the store's own.
    remember: int = 200_000
    #: Head-conditional appends of one batch (each refused because another event got
    #: into the log first) before it is appended without the head check.
    head_attempts: int = 20
    #: Priority bands for preemption legality (None: the documented defaults).
    bands: BandConfig | None = None
    #: Where the queue tree comes from: "parent" (``spec.parent``) or "annotations"
    #: (Volcano's hdrf ``volcano.sh/hierarchy``); see ``esched.core.queues``.
    queue_hierarchy: str = "parent"
    #: The replicas' KubeSchedulerConfiguration: its profiles' NodeAffinity addedAffinity
    #: is checked on each binding as the replicas apply it (None: no profile).
    profile: Profile | None = None


@dataclass(slots=True)
class CommitTotals:
    """What the service did so far."""

    proposals: int = 0
    committed: int = 0
    rejected: int = 0
    duplicates: int = 0
    deadlettered: int = 0
    takeovers: int = 0
    stepdowns: int = 0
    #: Pods evicted by committed preemptions.
    evicted: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "proposals": self.proposals,
            "committed": self.committed,
            "rejected": self.rejected,
            "duplicates": self.duplicates,
            "deadlettered": self.deadlettered,
            "takeovers": self.takeovers,
            "stepdowns": self.stepdowns,
            "evicted": self.evicted,
            "reasons": dict(sorted(self.reasons.items())),
        }


class NotLeader(Exception):
    """This instance is not (or no longer) the leader; nothing was decided."""
