"""Audit the log: replay it event by event and check every placement decision.

The audit folds the whole log from position 0 with the one fold
(:class:`~esched.core.ClusterState`), and at each decision checks:

* ``overcommit``: after a committed placement, a bound node's allocation exceeds
  its allocatable for some resource (with reclamation on, the accounting by
  reservations: ``ClusterState.node_reserved()``);
* ``double_binding``: a committed binding for a pod that is not Pending (already
  bound, or bound twice in one decision);
* ``unknown_node``: a committed binding to a node that was removed or never added;
* ``unknown_pod``: a committed binding for a pod the log does not have;
* ``gang_partial``: a committed decision leaves a gang below ``minMember`` running,
  or binds only part of the gang members it names;
* ``malformed``: a committed decision whose bindings are not objects;
* ``irreproducible``: re-validating the recorded proposal (its bindings, from the
  decision event) against the state folded up to just before the decision, with
  the commit service's own :class:`~esched.core.validation.Validator`, gives the
  other verdict (commit vs reject). A rejection recorded without its bindings
  cannot be re-validated and is counted as ``unverifiable``. A committed
  preemption is re-validated after its evictions (they precede it in the log), so
  its bindings must fit in the room the victims left;
* ``quota``: a committed binding for a pod that admission had to reject: over a
  quota of its queue or namespace (given the config's ``quota:``), or submitted to
  a Closing or Closed queue. Admission is re-done event by event with the
  dispatcher's own :class:`~esched.core.admission.Admission`;
* ``reclaim_illegal``: an eviction of a committed reclaim (``Reclaimed``) that the
  queues' rule forbids on the state just before it (:mod:`esched.core.reclaim`:
  the victim's queue reclaimable, of lower priority than the reclaiming queue or
  of equal priority with the reclaiming queue below its fair share and the
  victim's staying at or above its own, and keeping its guarantee);
* ``preemption_illegal``: a committed preemption evicted a pod whose band is not
  strictly lower than the preemptor's (the lowest band among the decision's
  pods), or a prod pod for a prod one;
* ``preemption_unrecorded``: the victims a committed decision names are not
  exactly the pods evicted for it (``esched.pod.evicted`` with its ``decision``
  id) just before it, or an eviction names a decision that never follows, or a
  pod that was not running on the node it names;
* ``gang_split``: evictions left a gang running below ``minMember`` (a victim gang
  is evicted whole or not at all);
* ``chain_broken``: the store's hash chain (:mod:`esched.services.store.chain`)
  breaks at this position: a stored event was edited, deleted or inserted behind
  the store's back (:func:`audit_store` only);
* ``preemption_unnecessary``: a committed preemption whose pods would have fit on
  their nodes with the victims still running (the validator's feasibility check:
  resources and constraints), or that evicted a pod from a node none of its pods
  is bound to;
* ``nodename_overcommit``: a pod submitted with ``spec.nodeName`` (running there,
  charged without a fit check) leaves its node over its allocatable;
* ``job_dependency``: a pod of a Volcano Job's task bound before the tasks it
  depends on (``dependsOn``) completed, in the job fold (:mod:`esched.core.jobs`)
  just before the decision;
* ``job_retry_exceeded``: a job's pod submitted at an attempt (``volcano.sh/job-version``)
  of ``maxRetry`` or more, or a recorded transition past ``maxRetry``;
* ``job_transition``: an ``esched.job.updated`` record whose phase is not the one
  the job fold of the log decides at that point, or that records a transition
  past an earlier one to record that has no record (a lost record: the job
  controller records them in order);
* ``overload_order``: an overload eviction (``esched.pod.evicted``, reason
  ``Overloaded``; :mod:`esched.core.overload`) of a production pod while a
  non-production pod ran on the same node, or of a production pod within its
  limit of the resource;
* ``overload_unneeded``: an overload eviction when the node's pods did not use
  more of the resource than its allocatable on the state just before it, unless it
  continues a run of evictions for the same usage report while the node's need
  (the sum over its running pods of max(usage, reservation)) still exceeds it, or
  of a compressible resource before the overload had lasted ``evict_after``
  seconds on the log's clock, or of a pod not running on the node it names.

Over-commit is only charged to decisions: a node shrinking under running pods is
an external fact, not a scheduling error.

The package has one module per job: :mod:`.base` (the fold, admission, the
validator, the violations), :mod:`.jobs` (the Volcano Job checks), :mod:`.overload`
(overload evictions), :mod:`.preemption` (evictions for a decision, preemption and
reclaim), :mod:`.bindings` (a decision re-validated, its bindings, gangs and
over-commit; ``spec.nodeName``), :mod:`.auditor` (the driver: :class:`Auditor`,
:func:`audit_events`, :func:`audit_store`) and :mod:`.report` (:func:`format_report`).
Each checks module is a class that builds on the one before it, so :class:`Auditor`
is the last of the chain.
"""

from esched.services.audit.auditor import Auditor, audit_events, audit_store
from esched.services.audit.base import MAX_LISTED, Violation
from esched.services.audit.report import format_report

__all__ = ["MAX_LISTED", "Auditor", "Violation", "audit_events", "audit_store", "format_report"]
