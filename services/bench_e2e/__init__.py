"""End-to-end benchmark: Kafka → ingest → PostgreSQL → N replicas → commit → decisions.

The services run as **separate processes** (``esched ingest``, ``esched commit``,
``esched dispatch``, ``esched replica --id rK``), exactly as deployed: on this
2-core machine that lets the pipeline's stages run in parallel on both cores
(one Python process is bound to one core by the GIL), and what is measured is
what an operator gets, process start-up, group joins and all. The benchmark
process only publishes pods and reads the decisions topic.

Per replica count (a fresh database cloned from one preloaded template, fresh
topics):

1. the cluster is preloaded straight into the store (not measured): ``nodes``
   nodes and running pods up to ``fill`` of the CPU (the synthetic log of
   :func:`~esched.services.synth.cluster_log`), with a state snapshot, so the
   services start from it;
2. warm-up: small waves of pods until every replica has had a proposal committed
   (all are in the group and own work partitions);
3. **throughput**: ``pods`` pods published as fast as the producer goes; pods/s
   = pods / (first send → last committed decision's timestamp on the decisions
   topic);
4. **latency** (only for the replica counts in ``latency_for``): pods offered at
   ``rate`` per second for ``latency_seconds``; submit → commit is the decision
   record's broker timestamp minus the time the pod was sent;
5. **conflict fraction**: rejected / committed decisions (conflicts per commit)
   during the throughput phase.

A baseline measured in the same process comes with it: the raw Kafka round trip
(publish, consume) of as many records, so the figures can be read as a ratio on
a noisy shared machine.

The package has one module per job: :mod:`.preload` (databases, the preloaded
cluster, the pods published), :mod:`.observe` (topic readers and the store's
record times), :mod:`.cpu` (CPU seconds per process), :mod:`.throughput` (the
runs per replica count), :mod:`.restart` (a replica restarted on a big
cluster) and :mod:`.reads` (what the store's live reads cost a follower per
row). The processes are started through :mod:`esched.services.procs`.
"""

from esched.services.bench_e2e.cpu import cpu_seconds
from esched.services.bench_e2e.preload import preload
from esched.services.bench_e2e.restart import run_restart_bench
from esched.services.bench_e2e.throughput import run_e2e_bench

__all__ = ["cpu_seconds", "preload", "run_e2e_bench", "run_restart_bench"]
