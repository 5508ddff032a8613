"""A replica's settings, totals and names."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from esched.core.bands import BandConfig
from esched.core.quincy import QuincyConfig

SERVICE = "replica"
#: Consumer group of the work topic: every replica process joins it, so Kafka
#: spreads the work partitions over them and moves a dead member's partitions.
REPLICA_GROUP = "esched-replicas"


Submit = Callable[[list[dict[str, Any]]], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """Tuning of a replica."""

    group: str = REPLICA_GROUP
    #: Work items per poll: one placement pass, one proposal send, one decision wait.
    batch_size: int = 1000
    #: Batches in flight at once: a batch's proposals wait for their decisions (a
    #: round trip through the commit service and the store, 10x the placement time)
    #: while the next batches are placed with the earlier claims assumed. 1: place a
    #: batch only once the previous one is decided.
    pipeline: int = 8
    poll_timeout_ms: int = 100
    #: The work consumer's fetch wait at the broker (ms), whether or not its last poll
    #: brought work. Under load a replica keeps polling while its batches wait for
    #: their decisions, so its consumer has a fetch waiting at the broker all the time:
    #: each costs the replica's bus client and the broker CPU whatever it brings, and
    #: their number grows with the replicas, not the pods. On tansu a record reached
    #: a waiting reader as soon at 40 ms as at 20 (5.4 / 5.7 ms median, 15.6 / 12.5
    #: p90; `python -m esched.services.bench_wait 20,40,100`, 16.7 / 42.5 at 100) for
    #: half the idle reader's CPU; Kafka answers a waiting fetch when records come.
    work_fetch_wait_ms: int = 40
    #: Keep polling for up to this many seconds while more work arrives (batching), but
    #: only when the first poll brought at least ``linger_min`` items: a backlog, where
    #: fuller batches save round trips. A handful of items (light load) goes at once:
    #: lingering only added its time to every pod's latency.
    linger: float = 0.01
    linger_poll_ms: int = 10
    linger_min: int = 50
    #: Least time (s) between two reads of the log while following it live: under
    #: load one read gathers the appends of that time (a read per append cost a
    #: round trip each). Decisions are seen up to this much later.
    follow_interval: float = 0.01
    #: The same after a read that found a burst (64 events or more): a read's fixed
    #: cost (~100 µs) was half of following's CPU per pod at 10 ms.
    follow_busy_interval: float = 0.04
    #: How long (s) a batch waits for the fold to reach its work items' positions
    #: before reading the store's head to refuse those beyond it: the fold is
    #: usually a read or two behind the work, and the head read is a round trip.
    head_check_after: float = 0.25
    #: Stop fetching work (no fetch requests: an idle replica costs nothing) once
    #: polls have come back empty for this long (s) with no event in the log that
    #: may make work (anything but a committed placement); the next such event
    #: resumes fetching at once.
    idle_after: float = 0.5
    #: While fetching is stopped, still poll once this often (s): work that no new
    #: event announces (a rejected pod re-sent after the dispatcher's delay, a parked
    #: one retried, work redelivered after a rebalance) waits at most this long.
    idle_poll: float = 1.0
    #: Count the work loop's thread CPU per part of placing (ReplicaTotals.cpu, the
    #: stats' ``cpu_s``): what ``bench e2e`` and ``bench scale`` report.
    count_cpu: bool = False
    #: Attempts after the first for proposals the commit service rejected.
    max_retries: int = 3
    #: Their backoff (:class:`~esched.services.retry.Backoff`, the services' one policy):
    #: ``retry_backoff * 2**n`` capped at ``retry_backoff_max``, half of it jitter.
    retry_backoff: float = 0.02
    retry_backoff_max: float = 1.0
    #: Re-send proposals still undecided after this long (idempotent on proposal id:
    #: covers a commit service that failed over with our proposals unread).
    decision_timeout: float = 30.0
    #: On stop, how long batches in flight may wait for their decisions.
    stop_grace: float = 2.0
    #: On a restart, work the share of the work partitions this replica had (recorded
    #: in the store) while the group join is under way (see Replica._start_provisional).
    resume_share: bool = True
    #: While the group rebalances (between revoking this replica's share and assigning
    #: the next), work the share it had, read by assignment (see
    #: Replica._bridge_rebalance): aiokafka rebalances eagerly, so without this every
    #: replica stops placing while one replica's share moves.
    bridge_rebalance: bool = True
    source_prefix: str = "esched/replica/"
    #: How the replica follows the log after its start: "log" (the default) folds
    #: every event from the store; "feed" applies the dispatcher's feed of claims
    #: records and folds only the events that are not a pod's (the dispatcher must
    #: publish it: ``DispatchConfig.feed``), entering its work's pods from their
    #: submissions (services/replica/feed.py; what differs from the whole fold:
    #: docs/architecture.md#following-other-partitions-by-their-claims).
    follow: str = "log"
    #: Let pods and gangs that fit nowhere propose evicting pods of lower bands.
    preemption: bool = True
    #: Priority bands (None: the documented defaults of :mod:`esched.core.bands`).
    bands: BandConfig | None = None
    #: Where the queue tree comes from: "parent" (``spec.parent``) or "annotations"
    #: (Volcano's hdrf ``volcano.sh/hierarchy``); see ``esched.core.queues``.
    queue_hierarchy: str = "parent"
    #: Starvation guard: a gang that has not fitted for this many seconds (as this
    #: replica saw it) gets nodes reserved (``esched.gang.reserved``), one gang at a
    #: time; None turns it off.
    reserve_after: float | None = 60.0
    #: Place GPU requests device by device (core.devices: the fold's devices, exact
    #: fit, each binding names its devices, which the commit service checks). None:
    #: when the profile has the FGD plugin (which scores by devices).
    devices: bool | None = None
    #: Place each batch as one round of Quincy's min-cost flow (core.quincy
    #: QuincyRounds: needs OR-Tools, ``esched[flow]``), its placements proposed as the
    #: pass's are; what the round leaves goes to the one scheduling pass. None: the
    #: pass alone. The flow's own preemption is not available live.
    quincy: QuincyConfig | None = None


#: The parts of placing whose CPU :class:`ReplicaTotals` counts: a polled batch's work
#: items checked and decoded (``work``), the placer's view renewed (``renew``), the
#: scheduling pass (``plan``: the core's, with its result read), the claims recorded
#: (``claim``), the proposals' records made (``records``: not with an in-process
#: ``submit``), the decisions counted (``decided``) and the offsets and gauges after
#: a batch (``commit``).
CPU_PARTS = ("work", "renew", "plan", "claim", "records", "decided", "commit")


@dataclass(slots=True)
class ReplicaTotals:
    """What a replica did so far."""

    work_items: int = 0
    #: Polled batches of work worked (``work_items / batches``: a batch's size).
    batches: int = 0
    #: Polls of the work consumer (a batch's lingering polls included), those that
    #: came back empty, and the offset commits sent: a replica's wake-ups for work
    #: (with the follower's ``log_reads``), time-bound while polls come back empty.
    polls: int = 0
    empty_polls: int = 0
    commits: int = 0
    skipped: int = 0
    proposals: int = 0
    committed: int = 0
    placed_pods: int = 0
    conflicts: int = 0
    retries: int = 0
    gave_up: int = 0
    unschedulable: int = 0
    gangs_waiting: int = 0
    #: Proposals that evict pods of lower bands, and the victims they name.
    preemptions: int = 0
    victims: int = 0
    #: Gang reservations made (starvation guard).
    reservations: int = 0
    #: Work items read from the previous share while the group join of a restart
    #: was under way (see Replica._start_provisional).
    early_items: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    #: perf_counter() of the first proposal sent and of the last decision received
    #: (the window a placement rate is measured over); 0.0 until then.
    first_proposal_at: float = 0.0
    last_decision_at: float = 0.0
    #: Seconds of the work loop's thread CPU per part of placing (:data:`CPU_PARTS`),
    #: each its synchronous code only (between two awaits): what the placing path
    #: costs apart from following, fetching and sending.
    cpu: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CPU_PARTS, 0.0))
    #: The clock :attr:`cpu` is counted by: ``time.thread_time`` with
    #: :attr:`ReplicaConfig.count_cpu`, else one that always reads 0 (a thread CPU
    #: clock read is a system call, 2-7 µs on a shared VM: ~15 a batch).
    clock: Callable[[], float] = field(default=lambda: 0.0)

    def add_cpu(self, part: str, began: float) -> float:
        """Count :attr:`clock` since ``began`` (one of its readings) to ``part``; its
        reading now, to begin the next part with."""
        now = self.clock()
        self.cpu[part] += now - began
        return now

    def as_dict(self) -> dict[str, Any]:
        return {
            "work_items": self.work_items,
            "batches": self.batches,
            "polls": self.polls,
            "empty_polls": self.empty_polls,
            "commits": self.commits,
            "skipped": self.skipped,
            "proposals": self.proposals,
            "committed": self.committed,
            "placed_pods": self.placed_pods,
            "conflicts": self.conflicts,
            "retries": self.retries,
            "gave_up": self.gave_up,
            "unschedulable": self.unschedulable,
            "gangs_waiting": self.gangs_waiting,
            "preemptions": self.preemptions,
            "victims": self.victims,
            "reservations": self.reservations,
            "early_items": self.early_items,
            "conflict_reasons": dict(sorted(self.reasons.items())),
            "cpu_s": {k: round(v, 6) for k, v in self.cpu.items()},
        }
