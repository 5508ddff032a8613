"""The replica scheduler: optimistic placement on a private fold of the log (Omega).

Each replica folds the whole log into its own :class:`~esched.core.ClusterState`
(newest snapshot, then :meth:`EventStore.subscribe`), takes its share of pending
work from the ``{prefix}work`` topic as a member of the consumer group
``esched-replicas`` (work items ``{"pod"|"gang": "ns/name", "position": P}`` from
the :mod:`~esched.services.dispatch` dispatcher), and per polled batch:

1. waits until its fold has reached every item's ``position`` (so it sees the
   event that made the work pending), and skips pods no longer Pending;
2. places pods with the core's :class:`~esched.core._placer.Placer` (each pod
   assumed, so a batch never double-books a node in the replica's own view) and
   gangs with :meth:`Placer.plan_gang` (all-or-nothing on a scratch overlay);
3. sends one proposal per pod or per gang, carrying the log position it saw and
   the resources claimed per binding (the pod's requests in base units);
4. waits for the decisions *in its fold*, retries rejected pods/gangs with fresh
   state, with backoff and a retry limit (after which the dispatcher re-publishes
   them). Meanwhile it already polls and places the next batch (``pipeline``
   batches in flight): the claims of proposals still undecided are *assumed* in
   its view (kube-scheduler's assume cache), so the next batch never counts room
   they took; a decision folded into the state replaces its claim, a rejection
   simply releases it;
5. reports pods no node fits as ``esched.pod.unschedulable`` (kube-style reason
   counts, deterministic id ``unschedulable-<pod>-<position>`` so a redelivered
   work item dedupes in the store); the dispatcher re-publishes them only when
   capacity may have freed, with backoff, so nothing is retried in a hot loop;
6. commits the work offsets only after all of that is durable in the store.

Proposals go to the commit service either directly (``submit``: the embedded
mode's :meth:`CommitService.decide`) or on the ``{prefix}proposals`` topic.

The package has one module per job: :mod:`.claims` (claims in flight, assumed in
the placer's view), :mod:`.reports` (unschedulable reports, gang reservations),
:mod:`.placing` (the scheduling pass, proposals, decisions, retries),
:mod:`.share` (the share of the work partitions across restarts), :mod:`.worker`
(the work loop), :mod:`.service` (the facade, :class:`Replica`) and
:mod:`.shared` (the embedded mode's :class:`SharedConsumer`). Each job is a class
that builds on the one before it, so :class:`Replica` is the last of the chain.
"""

from esched.core.reasons import reason_code
from esched.services.replica.config import REPLICA_GROUP, ReplicaConfig, ReplicaTotals
from esched.services.replica.reports import unschedulable_id
from esched.services.replica.service import Replica
from esched.services.replica.shared import SharedConsumer

__all__ = [
    "REPLICA_GROUP",
    "Replica",
    "ReplicaConfig",
    "ReplicaTotals",
    "SharedConsumer",
    "reason_code",
    "unschedulable_id",
]
