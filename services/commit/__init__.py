"""The commit service: the single writer of placement decisions (Omega's shared state).

Replicas place pods on their own fold of the log and send *proposals*
(``esched.placement.proposed``: one pod or one whole gang, the log position
they saw and the resources they claim per node). The commit service holds the
authoritative state (the fold of the log, its own decisions included) and
decides each proposal:

* **fine-grained validation**, binding by binding: the pod exists and is still
  Pending and is not bound twice; the node exists and is alive; the claimed
  resources are the pod's requests; and it still fits, resource by resource and
  constraint by constraint, counting the earlier accepted bindings of the same
  batch. A node that changed since the replica's ``position`` is fine as long as
  the pod still fits: no coarse per-node version check (Omega measured 2-3x more
  conflicts with one).
* **gangs all-or-nothing**: every binding fits (on a scratch overlay) and the
  gang's running members plus the proposed ones reach ``minMember``, else the
  whole proposal is rejected with one reason.

Decisions (``esched.placement.committed`` / ``.rejected`` with a reason code) are
appended to the store in batches, id ``decision-<proposal>`` so a redelivered
proposal is answered with the decision already recorded; then published on the
decisions topic; only then are the proposals' offsets committed.

**One leader.** A :mod:`~esched.services.lease` keeps a single instance active;
standbys wait on it and, on takeover, rebuild the state from the newest snapshot
plus the tail of the log. Every batch is appended with ``expected_version`` on
the ``decisions`` stream (the version this instance folded), so if another
instance wrote decisions meanwhile the store refuses the batch
(:class:`~esched.services.store.ConflictError`) and this instance steps down.

**Valid at its own position.** The ``expected_version`` fence orders decisions
against decisions only, so each batch is also appended with ``expected_head``:
the log position it was validated at. If an external event (node removed or
shrunk, pod deleted, appended by ingest) got in between the catch-up and the
append, the store refuses the batch
(:class:`~esched.services.store.HeadConflictError`, nothing stored); this service
folds the new events and validates the batch's proposals again, so every
decision is valid at its own position. After ``head_attempts`` refusals in a row
(:class:`CommitConfig`; a log that never stops moving) it appends once without the
head check,
logging a warning and counting ``esched_commit_head_conflicts_total{outcome=
"unchecked"}``; an event interleaved then is tolerated by the fold (the binding
is ignored and counted as an anomaly), logged here, and reported by ``esched audit``.

The package has one module per job: :mod:`.decisions` (the decision and eviction
envelopes), :mod:`.books` (the fold and its books), :mod:`.leader` (lease,
rebuild, step-down, snapshots), :mod:`.arbiter` (validate, append fenced, fold,
count), :mod:`.publish` (the decisions topic), :mod:`.consumer` (the proposals
topic) and :mod:`.service` (the facade, :class:`CommitService`). Each job is a
class that builds on the one before it, so :class:`CommitService` is the last of
the chain.
"""

from esched.services.commit.config import FENCE_SNAPSHOT, CommitConfig, CommitTotals, NotLeader
from esched.services.commit.decisions import decision_event, decision_id, eviction_events
from esched.services.commit.service import CommitService

__all__ = [
    "FENCE_SNAPSHOT",
    "CommitConfig",
    "CommitService",
    "CommitTotals",
    "NotLeader",
    "decision_event",
    "decision_id",
    "eviction_events",
]
