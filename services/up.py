"""``esched up``: the whole system in one process.

Ingest (from files or a generated workload), the commit service, the work
dispatcher and N replica schedulers, on one event store. The embedded default
is a SQLite store and the in-process bus, with proposals decided by a direct
call (:meth:`CommitService.decide`); with ``kafka`` the very same services talk
through the broker (input topics, proposals, decisions, work) and may share the
store with other processes. State lives only in the store, so a second run on
the same store continues where the first stopped: the dispatcher re-publishes
every pending pod of the log on start, and re-submitted input dedupes on event id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from esched.core import Profile
from esched.core.admission import Admission
from esched.core.bands import BandConfig
from esched.core.quincy import QuincyConfig
from esched.core.quota import Quota
from esched.services.bus import open_bus
from esched.services.bus.base import TopicNames
from esched.services.bus.security import KafkaSecurity
from esched.services.bus.signing import Keyring
from esched.services.commit import CommitConfig, CommitService
from esched.services.dispatch import DispatchConfig, Dispatcher
from esched.services.event_files import Record, publish_records, record_for_event
from esched.services.ingest import IngestConfig, IngestService
from esched.services.jobs import JobController
from esched.services.lease import open_lease
from esched.services.replica import REPLICA_GROUP, Replica, ReplicaConfig, SharedConsumer
from esched.services.store import open_store
from esched.services.store.snapshots import fold_log
from esched.services.synth import node_event, pod_event

__all__ = ["Up", "UpConfig", "generated_records", "parse_generate", "system_idle"]

log = logging.getLogger(__name__)


def parse_generate(spec: str) -> tuple[int, int]:
    """``NODES:PODS`` -> (nodes, pods); ValueError if malformed."""
    nodes, sep, pods = spec.partition(":")
    if not sep or not nodes.isdigit() or not pods.isdigit():
        raise ValueError(f"--generate wants NODES:PODS (e.g. 1000:20000), got {spec!r}")
    return int(nodes), int(pods)


def generated_records(nodes: int, pods: int, topics: TopicNames, seed: int = 0) -> Iterator[Record]:
    """The synthetic cluster (services/synth: its nodes and pod requests) as input
    records: nodes added, then pods submitted, all pending. Ids are deterministic,
    so generating again onto the same store adds only what is new."""
    for i in range(nodes):
        yield record_for_event(node_event(i), topics, "generate")
    rng = random.Random(seed)
    for j in range(pods):
        yield record_for_event(pod_event(j, rng), topics, "generate")


@dataclass(frozen=True, slots=True)
class UpConfig:
    """What ``esched up`` runs."""

    store: str
    kafka: str | None = None
    #: TLS / SASL of the Kafka clients (None: plaintext).
    kafka_security: KafkaSecurity | None = None
    #: Keys signing and checking the internal records (None: unsigned).
    keyring: Keyring | None = None
    topic_prefix: str = "esched."
    replicas: int = 1
    profile: Profile | None = None
    #: Priority bands of the replicas and the commit service (None: the defaults).
    bands: BandConfig | None = None
    #: Where the queue tree comes from: "parent" (``spec.parent``) or "annotations"
    #: (Volcano's hdrf ``volcano.sh/hierarchy``); see ``esched.core.queues``.
    queue_hierarchy: str = "parent"
    #: The replicas' starvation guard (seconds a gang waits before nodes are reserved).
    reserve_after: float | None = 60.0
    #: The replicas' Quincy rounds (ReplicaConfig.quincy); None: the scheduling pass.
    quincy: QuincyConfig | None = None
    seed: int = 0
    exit_when_idle: bool = False
    #: Quota limits of the dispatcher's admission (config ``quota:``); None: none.
    quota: Quota | None = None
    #: Seconds between progress lines (0: none).
    progress_every: float = 1.0
    #: Idle checks in a row (``idle_interval`` apart) before --exit-when-idle stops.
    idle_checks: int = 3
    idle_interval: float = 0.1
    #: Prepended to every consumer group name (tests and side-by-side runs sharing a
    #: broker: a group with stale members of another run waits out their sessions).
    group_prefix: str = ""
    #: How the replicas follow the log: "log" (the whole fold) or "feed" (the
    #: dispatcher then publishes it; ReplicaConfig.follow).
    follow: str = "log"


async def system_idle(
    es: Any, dispatcher: Dispatcher, replicas: list[Replica], shared: SharedConsumer | None = None
) -> bool:
    """Every fold at the store's head, no work queued or in flight, and the dispatcher
    has nothing to re-publish: nothing placeable is left (given no new input)."""
    if not dispatcher.idle() or any(r.busy for r in replicas):
        return False
    head = await es.head()
    if dispatcher.position < head or any(r.follower.position < head for r in replicas):
        return False
    if shared is not None:
        return await shared.lag() == 0
    for r in replicas:
        consumer = r.consumer
        if consumer is not None and await consumer.lag() != 0:
            return False
    return True


class Up:
    """One process running everything: :meth:`run` (returns the summary), :meth:`stop`."""

    def __init__(
        self,
        config: UpConfig,
        records: Iterable[Record] = (),
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.records = records
        self.progress = progress
        self.bus = open_bus(
            config.kafka,
            config.topic_prefix,
            security=config.kafka_security,
            keyring=config.keyring,
        )
        self._stopping = asyncio.Event()
        #: The job controller, once :meth:`run` built it.
        self.jobs: JobController | None = None
        #: The replicas, as :meth:`run` builds them.
        self.replicas: list[Replica] = []

    async def stop(self) -> None:
        """Ask :meth:`run` to finish (it still prints its summary)."""
        self._stopping.set()

    async def run(self) -> dict[str, Any]:
        cfg = self.config
        bus = self.bus
        started = time.perf_counter()
        es = open_store(cfg.store)
        await es.connect()
        tasks: list[asyncio.Task] = []
        replicas = self.replicas
        try:
            await es.migrate()
            head0 = await es.head()
            fed = await self._feed()
            embedded = cfg.kafka is None
            gp = cfg.group_prefix
            ingest = IngestService(bus, es, IngestConfig(group=f"{gp}esched-ingest"))
            commit = CommitService(
                es,
                None if embedded else bus,
                lease=open_lease(cfg.store, "commit"),
                config=CommitConfig(
                    group=f"{gp}esched-commit",
                    bands=cfg.bands,
                    profile=cfg.profile,
                    queue_hierarchy=cfg.queue_hierarchy,
                ),
            )
            dispatcher = Dispatcher(
                es,
                bus,
                lease=open_lease(cfg.store, "dispatch"),
                admission=Admission(
                    cfg.quota
                    if cfg.quota is not None or cfg.bands is None
                    else Quota(bands=cfg.bands),
                    cfg.queue_hierarchy,
                ),
                submit=commit.decide if embedded else None,
                config=DispatchConfig(feed=cfg.follow == "feed"),
            )
            jobs = JobController(es, lease=open_lease(cfg.store, "jobs"))
            self.jobs = jobs
            shared = (
                SharedConsumer(bus.consumer([bus.topics.work], "esched-replicas"))
                if embedded
                else None
            )
            host = socket.gethostname().split(".")[0].lower() or "up"
            submit = commit.decide if embedded else None
            replicas.extend(
                Replica(
                    es,
                    bus,
                    f"{host}-up-{i}" if not embedded else f"up-{i}",
                    profile=cfg.profile,
                    seed=cfg.seed + i,
                    submit=submit,
                    consumer=shared,
                    config=ReplicaConfig(
                        group=f"{gp}{REPLICA_GROUP}",
                        bands=cfg.bands,
                        reserve_after=cfg.reserve_after,
                        queue_hierarchy=cfg.queue_hierarchy,
                        quincy=cfg.quincy,
                        follow=cfg.follow,
                    ),
                )
                for i in range(cfg.replicas)
            )
            await commit.start()
            if embedded:
                # Take the lead and build the state now (an empty batch decides nothing),
                # not inside the first replica's first proposal.
                await commit.decide([])
            else:
                # Started first: its group join (like every one) waits out the broker's
                # rebalance delay, which then overlaps the others' below.
                tasks.append(asyncio.create_task(commit.run(), name="commit"))
            await asyncio.gather(
                ingest.start(), dispatcher.start(), jobs.start(), *(r.start() for r in replicas)
            )
            # Embedded: input is all on the in-process bus already; ingest stops once
            # it has drained it. With Kafka it runs until told otherwise.
            ingest_task = asyncio.create_task(
                ingest.run(exit_when_idle=embedded or cfg.exit_when_idle), name="ingest"
            )
            tasks.append(ingest_task)
            tasks.append(asyncio.create_task(dispatcher.run(), name="dispatch"))
            tasks.append(asyncio.create_task(jobs.run(), name="jobs"))
            tasks.extend(
                asyncio.create_task(r.run(), name=f"replica-{i}") for i, r in enumerate(replicas)
            )
            ready = time.perf_counter()
            await self._watch(es, ingest_task, dispatcher, replicas, shared, tasks, ready)
            finished = time.perf_counter()
            for r in replicas:
                await r.stop()
            await dispatcher.stop()
            await jobs.stop()
            await commit.stop()
            await ingest.stop()
            for t in tasks:
                if not t.done():
                    t.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            for t, res in zip(tasks, results, strict=True):
                if isinstance(res, BaseException) and not isinstance(res, asyncio.CancelledError):
                    log.error("%s failed: %r", t.get_name(), res)
            state = await fold_log(es)
            stats = [r.stats() for r in replicas]
            placed = sum(s["placed_pods"] for s in stats)
            seconds = max(finished - ready, 1e-9)
            # The rate counts the scheduling window only: first proposal to last decision
            # (startup, group joins and the idle check's own wait are not placement time).
            firsts = [r.totals.first_proposal_at for r in replicas if r.totals.first_proposal_at]
            window = (
                max(r.totals.last_decision_at for r in replicas) - min(firsts) if firsts else 0.0
            )
            return {
                "store": cfg.store,
                "kafka": cfg.kafka,
                "replicas": cfg.replicas,
                "input_records": fed,
                "log_head_before": head0,
                "ingest": {
                    "stored": ingest.totals.stored,
                    "duplicates": ingest.totals.duplicates,
                    "deadlettered": ingest.totals.deadlettered,
                },
                "placed": placed,
                # Pods left pending (with --exit-when-idle: none of them fits now) and
                # the unschedulable reports made (a pod may be re-tried and re-reported).
                "unschedulable": state.summary()["pods"]["Pending"],
                "unschedulable_reports": sum(s["unschedulable"] for s in stats),
                "conflicts": sum(s["conflicts"] for s in stats),
                "proposals": sum(s["proposals"] for s in stats),
                "pods_per_second": round(placed / window, 1) if window > 0 else 0.0,
                "scheduling_seconds": round(window, 3),
                # Everything from connecting to the store (ingest included) to idle.
                "end_to_end_pods_per_second": round(placed / max(finished - started, 1e-9), 1),
                "seconds": round(seconds, 3),
                "startup_seconds": round(ready - started, 3),
                "commit": commit.totals.as_dict(),
                "dispatch": dispatcher.totals.as_dict(),
                "jobs": jobs.totals.as_dict(),
                "replica_stats": stats,
                "replay": state.summary(),
            }
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()
            for r in replicas:
                with contextlib.suppress(Exception):
                    await r.stop()
            await es.close()

    async def _feed(self) -> int:
        """Put the input records on the bus (in-process: append; Kafka: publish)."""
        bus = self.bus
        if self.config.kafka is None:
            n = 0
            for rec in self.records:
                bus.append(rec.topic, rec.key, rec.value)  # type: ignore[attr-defined]
                n += 1
            return n
        records = list(self.records)
        await publish_records(bus, records)
        return len(records)

    async def _watch(
        self,
        es: Any,
        ingest_task: asyncio.Task,
        dispatcher: Dispatcher,
        replicas: list[Replica],
        shared: SharedConsumer | None,
        tasks: list[asyncio.Task],
        ready: float,
    ) -> None:
        """Print progress; return on stop, on a failed task, or once idle (if asked)."""
        cfg = self.config
        last_print = time.perf_counter()
        idle_in_row = 0
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), cfg.idle_interval)
            for t in tasks:
                if t.done() and t is not ingest_task and not self._stopping.is_set():
                    exc = t.exception() if not t.cancelled() else None
                    if exc is not None:
                        raise exc
            if ingest_task.done() and ingest_task.exception() is not None:
                raise ingest_task.exception()  # type: ignore[misc]
            now = time.perf_counter()
            if self.progress and cfg.progress_every and now - last_print >= cfg.progress_every:
                last_print = now
                self.progress(self._progress_line(replicas, dispatcher, now - ready))
            if not cfg.exit_when_idle:
                continue
            if await self._idle(es, ingest_task, dispatcher, replicas, shared):
                idle_in_row += 1
                if idle_in_row >= cfg.idle_checks:
                    break
            else:
                idle_in_row = 0
        if self.progress:
            self.progress(self._progress_line(replicas, dispatcher, time.perf_counter() - ready))

    async def _idle(
        self,
        es: Any,
        ingest_task: asyncio.Task,
        dispatcher: Dispatcher,
        replicas: list[Replica],
        shared: SharedConsumer | None,
    ) -> bool:
        if not ingest_task.done():
            return False
        jobs = self.jobs
        # The job controller may still submit pods (a dependant task, a restart).
        if jobs is not None and (not jobs.idle() or jobs.position < await es.head()):
            return False
        return await system_idle(es, dispatcher, replicas, shared)

    @staticmethod
    def _progress_line(replicas: list[Replica], dispatcher: Dispatcher, elapsed: float) -> str:
        placed = sum(r.totals.placed_pods for r in replicas)
        unsched = sum(r.totals.unschedulable for r in replicas)
        conflicts = sum(r.totals.conflicts for r in replicas)
        pending = replicas[0].pending_count() if replicas else 0
        rate = placed / elapsed if elapsed > 0 else 0.0
        return (
            f"esched up: {elapsed:6.1f}s  position {dispatcher.position}  placed {placed}  "
            f"pending {pending}  reported unschedulable {unsched}  conflicts {conflicts}  "
            f"parked {dispatcher.parked}  {rate:,.0f} pods/s"
        )
