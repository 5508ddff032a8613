"""The work dispatcher: turns "this pod (or gang) is now pending" into work items.

It follows the log with its own fold and publishes ``{"pod": "ns/name",
"position": P}`` or ``{"gang": "ns/name", "position": P}`` on ``{prefix}work``,
keyed by gang or pod (so Kafka spreads the work over the replicas' consumer
group, and one gang is always one item), where ``P`` is the log position the
replica's fold must reach before acting on it. Causes:

* a pod submitted (a gang's member: the gang, once it has enough pending members
  to reach minMember together with its running ones), a PodGroup submitted;
* a pod evicted; the pods of a removed node (looked up *before* folding the
  removal, which unbinds them);
* a rejected proposal's pods, after a short delay (the replica retries first;
  this covers a replica that gave up or died) — only if still pending;
* pods reported ``esched.pod.unschedulable`` are *parked*, and re-published when
  capacity may have freed (a pod finished or was deleted or evicted, a node was
  added or updated) after the report's position, with per-pod exponential
  backoff — never in a hot loop;
* on start (and on every takeover), every pending pod and ready gang of the fold.
  Duplicates are harmless: replicas skip pods no longer Pending and the commit
  service rejects a second binding.

**Queues and quota** (:mod:`~esched.core.admission`): a submission to a Closing
or Closed queue or over a quota is rejected (an ``esched.pod.rejected`` event,
appended here with a deterministic id), a job its queue's capability (or a Closed
queue) does not admit is held until capacity frees or the queue changes, and what
is let through is published in Volcano's allocation order (queue priority, share,
job priority, arrival).

**Reclaim** (:mod:`~esched.core.reclaim`): every ``reclaim_interval`` the parked
(unschedulable) pods of queues below their fair share (or above a queue of lower
priority) are looked at, one pod or gang per such queue; if evicting pods of
reclaimable queues (of lower priority, or of equal priority above their fair share)
makes room (for a gang: for every member it needs to reach minMember, or nothing), a
proposal binding the pod or those members with those victims (``"reclaim": true``)
goes to the commit service, which checks it again and commits the evictions and the
bindings as one transaction.

**Overload** (:mod:`~esched.core.overload`, Borg 5.5): with reclamation on, the
nodes each ``esched.usage.reported`` names are planned on the fold; a node whose
pods use more memory than it holds gets ``esched.pod.evicted`` events (reason
``Overloaded``) in Borg's order, one overloaded on cpu ``esched.pod.throttled``
events, then evictions once the overload has lasted ``evict_after`` seconds on the
log's clock. They are appended only on the log head they were planned on (as the
commit service appends), with deterministic ids.

**Exactly one active, on its own lease** (:mod:`~esched.services.lease`, name
``dispatch``) rather than inside the commit service's leadership: the commit
service is another engineer's module with its own state and lifecycle, and the
dispatcher only needs a fold of the log, so coupling the two would buy nothing
but a shared failure. With its own lease it can run in the commit process
(``esched commit --dispatch``), in ``esched up`` or alone (``esched dispatch``),
and a standby takes over within the lease's retry interval; the takeover
re-publishes everything pending, so no wake-up is lost in the switch.

The package has one module per job: :mod:`.wakeups` (the fold and what became
work: parked, delayed, ready), :mod:`.overload` (overload evictions and
throttles), :mod:`.reclaim` (reclaim proposals),
:mod:`.outbox` (rejections appended, work published) and :mod:`.service` (the
facade, :class:`Dispatcher`). Each job is a class that builds on the one before
it, so :class:`Dispatcher` is the last of the chain.
"""

from esched.services.dispatch.config import DispatchConfig, DispatchTotals
from esched.services.dispatch.outbox import work_item
from esched.services.dispatch.service import Dispatcher

__all__ = ["DispatchConfig", "DispatchTotals", "Dispatcher", "work_item"]
