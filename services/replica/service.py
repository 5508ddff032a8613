"""The replica facade: :meth:`Replica.start`, :meth:`Replica.stop`, stats."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import time
from typing import Any

from esched.core import ClusterState
from esched.core._placer import Placer
from esched.core.devices import FoldedDevices
from esched.core.flow import require_solver
from esched.core.quincy import QuincyRounds
from esched.core.schedule import PassConfig, SchedulingPass
from esched.services import metrics
from esched.services.bus import BusError
from esched.services.faults import retry_transient
from esched.services.replica.config import SERVICE
from esched.services.replica.feed import FeedFollower
from esched.services.replica.share import partitions
from esched.services.replica.worker import _WorkLoop

log = logging.getLogger(__name__)


def _switches() -> tuple[int, int]:
    """The calling thread's voluntary and involuntary context switches so far."""
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_nvcsw, usage.ru_nivcsw


class Replica(_WorkLoop):
    """A replica scheduler: :meth:`start`, :meth:`run`, :meth:`stop`.

    :param store: the event store (connected, migrated).
    :param bus: the bus carrying the work topic (and proposals, without ``submit``).
    :param replica_id: this replica's name (in every proposal it sends).
    :param submit: async callable deciding proposal ``data`` dicts directly (the
        embedded mode: :meth:`CommitService.decide`); None sends them on the
        proposals topic.
    :param consumer: a work consumer to use instead of a new group member (the
        embedded mode's :class:`SharedConsumer`).
    """

    async def start(self) -> None:
        """Fold the log, start following it, connect to the bus and join the group.

        The group join runs while the log is folded: a join waits on the broker
        (seconds: tansu holds every JoinGroup about 5 s, Kafka an empty group's
        ``group.initial.rebalance.delay.ms``), the fold of a snapshot plus the tail
        takes about one, so a restarted replica pays the longer of the two, not both.
        Work polled only once both are done.
        """
        started = time.perf_counter()
        if self._consumer is None:
            await retry_transient(
                self.bus.ensure_topics, what="create topics", service=SERVICE, peer="bus"
            )
            # Static membership under the replica's name: a restarted replica takes its
            # old place (and partitions) at once instead of after its old session.
            self._consumer = self.bus.consumer(
                [self.bus.topics.work],
                self.config.group,
                instance=f"{self.config.group}/{self.id}",
                wait_ms=self.config.work_fetch_wait_ms,
            )
            await self._start_provisional()
        joining = asyncio.ensure_future(
            retry_transient(
                self._consumer.start, what="consumer start", service=SERVICE, peer="bus"
            )
        )
        joined: list[float] = []
        joining.add_done_callback(lambda _f: joined.append(time.perf_counter()))
        try:
            state = await self.follower.start()
            folded = time.perf_counter()
            await self.start_placing(state)
            if self._provisional is None:
                await joining
        except BaseException:
            joining.cancel()
            with contextlib.suppress(BaseException):
                await joining
            await self._stop_provisional()
            raise
        if self._provisional is not None:
            # Work the previous share now; run() switches to the group once joined.
            self._joining = joining
            log.info(
                "replica %s ready at position %d in %.2fs (fold %.2fs); working its "
                "previous share %s while it rejoins the group",
                self.id,
                state.position,
                time.perf_counter() - started,
                folded - started,
                partitions(self._provisional.assignment()),
                extra={"replica": self.id},
            )
            return
        log.info(
            "replica %s ready at position %d in %.2fs (fold %.2fs, group join %.2fs)",
            self.id,
            state.position,
            time.perf_counter() - started,
            folded - started,
            joined[0] - started,
            extra={"replica": self.id},
        )

    async def start_placing(self, state: ClusterState) -> None:
        """Make the placer, the device table and the scheduling pass on ``state`` and
        start the proposal producer (unless ``submit``): what :meth:`start` does once
        the log is folded. ``state`` becomes the follower's (a benchmark places on a
        state of its own this way, with no store)."""
        self.follower.state = state
        self.placer = Placer(state, self.profile, self.seed, bands=self.config.bands)
        cfg = self.config
        fgd = any(p.kind == "FGD" for p in self.placer.profile.plugins)
        if cfg.devices if cfg.devices is not None else fgd:
            self.devices = FoldedDevices(state, fgd=fgd)
        self.scheduler = SchedulingPass(
            state,
            self.placer,
            PassConfig(
                preemption=cfg.preemption,
                bands=cfg.bands,
                reserve_after=cfg.reserve_after,
                queue_hierarchy=cfg.queue_hierarchy,
            ),
            devices=None if self.devices is None else self.devices.table,
        )
        if cfg.quincy is not None:
            require_solver()
            self.rounds = QuincyRounds(self.scheduler, cfg.quincy)
        if self._submit is None:
            self._producer = self.bus.producer()
            await retry_transient(
                self._producer.start, what="producer start", service=SERVICE, peer="bus"
            )
        # CPU from here on is the work's (stats: cpu_after_start_s).
        self._started_cpu = (time.process_time(), time.thread_time())
        self._started_at = time.monotonic()
        self._started_switches = _switches()

    async def stop(self) -> None:
        """Leave the group (uncommitted work is redelivered), stop following; idempotent.

        Batches in flight get ``stop_grace`` seconds to see their decisions (so their
        offsets are committed and nothing is redelivered); then they are cancelled:
        their proposals are still decided by the commit service, and the new owner
        of their work items skips pods that are no longer pending.
        """
        self._stopping.set()
        self._work_may_come.set()  # an idle work loop wakes to see it
        if self._joining is not None:
            self._joining.cancel()
            with contextlib.suppress(BaseException):
                await self._joining
            self._joining = None
        if self._batches:
            _done, pending = await asyncio.wait(set(self._batches), timeout=self.config.stop_grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        await self._stop_provisional()
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            with contextlib.suppress(BusError):
                await consumer.stop()
        if self._producer is not None:
            producer, self._producer = self._producer, None
            with contextlib.suppress(BusError):
                await producer.stop()
        await self.follower.stop()

    def stats(self) -> dict[str, Any]:
        """Totals plus the placer's counters (cache hit rate)."""
        out = self.totals.as_dict()
        if self.placer is not None:
            s = self.placer.stats()
            out["cache_hit_rate"] = s["cache_hit_rate"]
            metrics.REPLICA_CACHE_HIT_RATE.labels(self.id).set(s["cache_hit_rate"])
        if self.rounds is not None:
            out["quincy"] = dict(self.rounds.stats)
        out["position"] = self.follower.position
        out["log_reads"] = self.follower.reads
        out["log_rows"] = self.follower.rows_read
        out["follow_cpu_s"] = round(self.follower.follow_cpu, 6)
        if self._started_cpu is not None:
            # The process's CPU since placing started, and its work loop's thread's (of
            # which cpu_s and follow_cpu_s are parts; the rest is the bus client's
            # fetches and sends, the event loop and the store reads).
            process, thread = self._started_cpu
            # The thread's clock read inside the process's interval, at both ends (the
            # process's first at start), so the loop's CPU is never above the process's.
            loop_cpu = time.thread_time() - thread
            out["cpu_after_start_s"] = round(time.process_time() - process, 6)
            out["loop_cpu_after_start_s"] = round(loop_cpu, 6)
            # (the wall time these and the counts are over: rates per second)
            out["after_start_s"] = round(time.monotonic() - self._started_at, 3)
            # The work loop's thread's wake-ups: each time it blocked (its event loop
            # waiting for I/O or a timer) and was woken again (a voluntary context
            # switch); involuntary ones are preemptions (a CPU cap's throttling).
            voluntary, involuntary = _switches()
            out["loop_wakeups_after_start"] = voluntary - self._started_switches[0]
            out["loop_preempted_after_start"] = involuntary - self._started_switches[1]
        if isinstance(self.follower, FeedFollower):
            # (log_reads and log_rows then count feed messages and their parts)
            out["feed_bridged"] = self.follower.bridged
            out["feed_entered"] = self.follower.entered
            out["feed_enter_cpu_s"] = round(self.follower.enter_cpu, 6)
        return out
