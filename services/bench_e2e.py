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
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import orjson

from esched.schemas.events import (
    PLACEMENT_COMMITTED,
    PLACEMENT_REJECTED,
    POD,
    namespaced_key,
    parse_stream,
    stream_name,
    stream_of,
)
from esched.services.bus import open_bus
from esched.services.bus.base import Bus, BusConsumer
from esched.services.devbroker import DevBroker
from esched.services.procs import ServiceProcess, await_until, service_env
from esched.services.store import open_store
from esched.services.store.base import NewEvent
from esched.services.store.snapshots import fold_log, save_snapshot
from esched.services.synth import cluster_log, pod_event

__all__ = ["preload", "run_e2e_bench", "run_restart_bench"]

#: Partitions of every topic: at least the largest replica count, so each replica
#: owns work partitions.
PARTITIONS = 8


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc); 0 if gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _postgres_pids() -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if (d / "comm").read_text().strip() == "postgres":
                    pids.append(int(d.name))
    return pids


def _cpu_snapshot(services: list[ServiceProcess], broker_pid: int | None) -> dict[str, float]:
    """CPU seconds so far per service process, the broker and all PostgreSQL processes
    (the server is shared: other clients' work is included)."""
    out = {s.name: cpu_seconds(s.proc.pid) for s in services}
    if broker_pid:
        out["broker"] = cpu_seconds(broker_pid)
    out["postgresql"] = sum(cpu_seconds(p) for p in _postgres_pids())
    out["bench"] = cpu_seconds(os.getpid())
    return out


#: Pause of the benchmark's own consumers between reads. They only read broker
#: timestamps, so reading late changes no figure, and a consumer reading as fast as
#: records come costs the broker a fetch per few records: three of them took a
#: third of its CPU from the pipeline being measured.
_READ_EVERY = 0.1


def _pct(values: np.ndarray, q: float) -> float:
    return round(float(np.percentile(values, q)) * 1000, 2) if values.size else float("nan")


async def _admin(server: str, sql: str) -> None:
    conn = await asyncpg.connect(f"{server}/postgres", timeout=10)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def preload(store_url: str, nodes: int, fill: float, seed: int = 0) -> dict[str, Any]:
    """Write ``nodes`` nodes and running pods up to ``fill`` of the CPU into an empty
    store, then a state snapshot. Returns what was written."""
    mean_cores = 30  # synth nodes: 8, 16, 32, 64 cores; pods ask 2.05 cores on average
    pods = int(nodes * mean_cores * fill / 2.05)
    store = open_store(store_url)
    await store.connect()
    try:
        await store.migrate()
        batch: list[NewEvent] = []
        # Only pods that got a node: a pending pod in the preload would be work.
        events = (e for e in cluster_log(nodes, pods, seed=seed, finish_every=0))
        pending: dict[str, dict] = {}
        for ev in events:
            if ev["type"] == "esched.pod.submitted":
                pending[f"synth/{ev['data']['metadata']['name']}"] = ev
                continue
            if ev["type"] == PLACEMENT_COMMITTED:
                sub = pending.pop(ev["data"]["bindings"][0]["pod"])
                batch.append(NewEvent(sub["id"], sub["type"], stream_of(sub), orjson.dumps(sub)))
            batch.append(NewEvent(ev["id"], ev["type"], stream_of(ev), orjson.dumps(ev)))
            if len(batch) >= 5000:
                await store.append(batch)
                batch = []
        if batch:
            await store.append(batch)
        state = await fold_log(store, use_snapshot=False)
        await save_snapshot(store, state)
        nodes_ = state.summary()["nodes"]
        return {
            "events": int(state.position),
            "nodes": nodes_["count"],
            "running_pods": pods - len(pending),
            "cpu_utilization": round(nodes_["allocated"]["cpu"] / nodes_["allocatable"]["cpu"], 4),
        }
    finally:
        await store.close()


def _pod_payloads(n: int, namespace: str, seed: int) -> list[tuple[str, bytes]]:
    rng = random.Random(seed)
    out = []
    for j in range(n):
        ev = pod_event(j, rng, namespace)
        out.append((namespaced_key(namespace, f"pod-{j}"), orjson.dumps(ev)))
    return out


class _Decisions:
    """Reads the decisions topic; per pod its committed decision's timestamp."""

    def __init__(self, bus: Bus, group: str) -> None:
        self.consumer: BusConsumer = bus.consumer([bus.topics.decisions], group)
        self.committed: dict[str, float] = {}  # pod -> broker timestamp (s)
        self.rejected = 0
        self.commits = 0
        self.by_replica: dict[str, int] = {}
        self.reasons: dict[str, int] = {}
        self._task: asyncio.Task | None = None
        #: Cleared: do not read now (the throughput phase keeps the benchmark's own
        #: consumer off the two cores; the broker timestamps are read afterwards).
        self.reading = asyncio.Event()
        self.reading.set()

    async def start(self) -> None:
        await self.consumer.start()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.consumer.stop()

    async def _run(self) -> None:
        loads = orjson.loads
        while True:
            await self.reading.wait()
            await asyncio.sleep(_READ_EVERY)
            for m in await self.consumer.poll(100, 5000):
                env = loads(m.value)
                data = env["data"]
                if env["type"] == PLACEMENT_COMMITTED:
                    self.commits += 1
                    replica = data["replica"]
                    self.by_replica[replica] = self.by_replica.get(replica, 0) + 1
                    for b in data["bindings"]:
                        self.committed.setdefault(b["pod"], m.timestamp_ms / 1000)
                elif env["type"] == PLACEMENT_REJECTED:
                    self.rejected += 1
                    reason = str(data.get("reason"))
                    self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def mark(self) -> tuple[int, int]:
        return self.commits, self.rejected

    async def wait_for(self, pods: Iterable[str], within: float, alive: Callable[[], None]) -> int:
        """Wait until every pod has a committed decision; the number still missing."""
        pods = list(pods)
        deadline = time.monotonic() + within
        while True:
            missing = sum(1 for p in pods if p not in self.committed)
            if not missing or time.monotonic() > deadline:
                return missing
            alive()
            await asyncio.sleep(0.05)


class _FirstSeen:
    """Reads a topic; per pod the broker timestamp of the first record naming it
    (the work items and the proposals: where a pod's latency goes)."""

    def __init__(
        self, bus: Bus, topic: str, group: str, pods_of: Callable[[Any], Iterable[str]]
    ) -> None:
        self.consumer: BusConsumer = bus.consumer([topic], group)
        self.seen: dict[str, float] = {}
        self._pods_of = pods_of
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        await self.consumer.start()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.consumer.stop()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(_READ_EVERY)
            for m in await self.consumer.poll(100, 5000):
                for pod in self._pods_of(orjson.loads(m.value)):
                    self.seen.setdefault(pod, m.timestamp_ms / 1000)


def _work_pods(item: Any) -> Iterable[str]:
    return [item["pod"]] if item.get("pod") else []


def _proposal_pods(env: Any) -> Iterable[str]:
    return [b["pod"] for b in env["data"]["bindings"]]


async def _stored_at(url: str, namespace: str) -> tuple[dict[str, float], dict[str, float]]:
    """Per pod of ``namespace``: when the store recorded its submission and its
    committed decision (PostgreSQL's clock, the same machine's)."""
    conn = await asyncpg.connect(url, timeout=10)
    try:
        submitted = {
            parse_stream(r["stream"])[1]: r["recorded_at"].timestamp()
            for r in await conn.fetch(
                "SELECT stream, recorded_at FROM events WHERE type = 'esched.pod.submitted' "
                "AND stream LIKE $1",
                stream_name(POD, namespaced_key(namespace, "%")),
            )
        }
        decided: dict[str, float] = {}
        first = min(submitted.values(), default=0.0)
        for r in await conn.fetch(
            "SELECT recorded_at, payload FROM events WHERE type = $1 "
            "AND recorded_at >= to_timestamp($2)",
            PLACEMENT_COMMITTED,
            first,
        ):
            for b in orjson.loads(r["payload"])["data"]["bindings"]:
                decided.setdefault(b["pod"], r["recorded_at"].timestamp())
        return submitted, decided
    finally:
        await conn.close()


def _stages(sent: dict[str, float], *marks: tuple[str, dict[str, float]]) -> dict[str, Any]:
    """Median and p99 (ms) of each stage between consecutive marks of a pod."""
    out: dict[str, Any] = {}
    prev_name, prev = "sent", sent
    for name, mark in marks:
        d = np.array([mark[k] - prev[k] for k in sent if k in mark and k in prev])
        out[f"{prev_name}->{name}"] = {"p50_ms": _pct(d, 50), "p99_ms": _pct(d, 99)}
        prev_name, prev = name, mark
    return out


async def _wait_committed(
    url: str, after: int, want: int, within: float, alive: Callable[[], None]
) -> None:
    """Wait until the log has ``want`` committed decisions after position ``after``
    (incremental counting: cheap for the database while the pipeline runs)."""
    conn = await asyncpg.connect(url, timeout=10)
    try:
        seen, deadline = 0, time.monotonic() + within
        while seen < want and time.monotonic() < deadline:
            alive()
            await asyncio.sleep(0.05)
            top, n = await conn.fetchrow(
                "SELECT max(position), count(*) FILTER (WHERE type = $2) FROM events "
                "WHERE position > $1",
                after,
                PLACEMENT_COMMITTED,
            )
            if top is not None:
                after, seen = top, seen + n
    finally:
        await conn.close()


async def _head(url: str) -> int:
    conn = await asyncpg.connect(url, timeout=10)
    try:
        return int(await conn.fetchval("SELECT position FROM log_head"))
    finally:
        await conn.close()


async def _send(producer, topic: str, records: list[tuple[str, bytes]]) -> None:
    await producer.send_many(topic, [(key.encode(), value) for key, value in records])


async def _one_run(
    *,
    kafka: str,
    broker_pid: int | None,
    template_db: str,
    server: str,
    replicas: int,
    pods: int,
    rate: float,
    latency_seconds: float,
    measure_latency: bool,
    logdir: Path,
    run: str,
    profile: frozenset[str],
) -> dict[str, Any]:
    db = f"esched_bench_{run}_r{replicas}"
    await _admin(server, f'CREATE DATABASE "{db}" TEMPLATE "{template_db}"')
    url = f"{server}/{db}"
    prefix = f"b{run}r{replicas}."
    bus = open_bus(kafka, prefix)
    await bus.ensure_topics(partitions=PARTITIONS)
    env = service_env(url, kafka, prefix)
    runlog = logdir / f"r{replicas}"
    runlog.mkdir(parents=True, exist_ok=True)
    services: list[ServiceProcess] = []
    decisions = _Decisions(bus, f"bench-{run}-{replicas}")
    producer = bus.producer()
    out: dict[str, Any] = {"replicas": replicas}

    def alive() -> None:
        for s in services:
            s.check_alive()

    try:
        started = time.perf_counter()

        def spawn(name: str, *args: str) -> ServiceProcess:
            return ServiceProcess(
                name, list(args), env, runlog, profile=name.split("-")[0] in profile
            )

        services.append(spawn("commit", "commit"))
        services.append(spawn("dispatch", "dispatch"))
        services.append(spawn("ingest", "ingest"))
        # A group per run: static members of an earlier run's group would hold its join.
        reps = [
            spawn(
                f"replica-r{k}",
                "replica",
                "--id",
                f"r{k}",
                "--seed",
                str(k),
                "--group",
                f"{prefix}esched-replicas",
            )
            for k in range(1, replicas + 1)
        ]
        services.extend(reps)
        await producer.start()
        await decisions.start()
        await await_until(
            "the services ready",
            lambda: (
                services[0].logged("commit service leading")
                and services[1].logged("dispatcher leading")
                and all(r.logged("ready at position") for r in reps)
            ),
            120,
            services,
        )
        out["services_ready_s"] = round(time.perf_counter() - started, 2)

        # Warm-up until every replica has had work committed (the group has settled).
        counter = itertools.count()
        wave = 0
        while True:
            batch = _pod_payloads(50 * replicas, f"w{next(counter)}", seed=wave)
            wave += 1
            await _send(producer, bus.topics.pods, batch)
            missing = await decisions.wait_for((k for k, _ in batch), 60, alive)
            if missing:
                raise RuntimeError(f"warm-up: {missing} pods not committed within 60 s")
            if len(decisions.by_replica) >= replicas:
                break
            if wave > 60:
                raise RuntimeError(f"only {sorted(decisions.by_replica)} placed work")
            await asyncio.sleep(0.5)
        out["warmup_waves"] = wave

        # Throughput: everything at once.
        payloads = _pod_payloads(pods, "tput", seed=1)
        c0, r0 = decisions.mark()
        head = await _head(url)
        decisions.reading.clear()
        cpu0 = _cpu_snapshot(services, broker_pid)
        t0 = time.time()
        for i in range(0, pods, 2000):
            await _send(producer, bus.topics.pods, payloads[i : i + 2000])
        sent_s = time.time() - t0
        await _wait_committed(url, head, pods, 300, alive)
        cpu1 = _cpu_snapshot(services, broker_pid)
        decisions.reading.set()
        missing = await decisions.wait_for((k for k, _ in payloads), 60, alive)
        done = [decisions.committed[k] for k, _ in payloads if k in decisions.committed]
        c1, r1 = decisions.mark()
        elapsed = max(done) - t0 if done else float("nan")
        out.update(
            {
                "pods": pods,
                "pods_per_s": round(len(done) / elapsed, 1) if done else 0.0,
                "publish_s": round(sent_s, 2),
                "elapsed_s": round(elapsed, 2),
                "missing": missing,
                "commits": c1 - c0,
                "conflicts": r1 - r0,
                "conflict_fraction": round((r1 - r0) / max(c1 - c0, 1), 4),
                # Where the time goes: CPU microseconds per pod, by process.
                "cpu_us_per_pod": {
                    k: round((cpu1[k] - cpu0.get(k, 0.0)) * 1e6 / pods, 1) for k in cpu1
                },
            }
        )

        # When the pods passed each stage (s after the first send): a stage that ends
        # much later than the one before it is the bottleneck.
        stored, decided = await _stored_at(url, "tput")
        out["timeline_s"] = {
            name: {"half": round(float(np.percentile(v, 50)) - t0, 2), "all": round(max(v) - t0, 2)}
            for name, v in (
                ("published", [t0 + sent_s]),
                ("stored", list(stored.values())),
                ("decided", list(decided.values())),
                ("on_topic", done),
            )
            if v
        }

        if measure_latency:
            lat_pods = int(rate * latency_seconds)
            payloads = _pod_payloads(lat_pods, "lat", seed=2)
            tick = 0.01
            per_tick = max(1, round(rate * tick))
            sent_at: dict[str, float] = {}
            work = _FirstSeen(bus, bus.topics.work, f"bench-{run}-{replicas}-w", _work_pods)
            proposed = _FirstSeen(
                bus, bus.topics.proposals, f"bench-{run}-{replicas}-p", _proposal_pods
            )
            await work.start()
            await proposed.start()
            await asyncio.sleep(1.0)  # both have joined their groups before the first pod
            t0 = time.monotonic()
            # Each tick's send runs on its own, so a slow acknowledgement never holds the
            # next tick back: the offered rate is the rate asked for.
            sends: list[asyncio.Task] = []
            for n, i in enumerate(range(0, lat_pods, per_tick)):
                wait = t0 + n * tick - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                chunk = payloads[i : i + per_tick]
                now = time.time()
                sends.append(asyncio.create_task(_send(producer, bus.topics.pods, chunk)))
                for key, _ in chunk:
                    sent_at[key] = now
            offered = lat_pods / (time.monotonic() - t0)
            await asyncio.gather(*sends)
            missing = await decisions.wait_for(sent_at, 120, alive)
            lat = np.array(
                [decisions.committed[k] - t for k, t in sent_at.items() if k in decisions.committed]
            )
            await work.stop()
            await proposed.stop()
            stored, decided = await _stored_at(url, "lat")
            # Every pod's marks (wall clock, s), to see whether a tail is spread or one stall.
            (runlog / "latency_marks.json").write_bytes(
                orjson.dumps(
                    {
                        name: mark
                        for name, mark in (
                            ("sent", sent_at),
                            ("stored", stored),
                            ("work", work.seen),
                            ("proposed", proposed.seen),
                            ("decided", decided),
                            ("published", decisions.committed),
                        )
                    }
                )
            )
            out["latency"] = {
                "offered_pods_per_s": round(offered, 1),
                "pods": lat_pods,
                "missing": missing,
                "p50_ms": _pct(lat, 50),
                "p90_ms": _pct(lat, 90),
                "p99_ms": _pct(lat, 99),
                "max_ms": _pct(lat, 100),
                "stages": _stages(
                    sent_at,
                    ("stored", stored),
                    ("work", work.seen),
                    ("proposed", proposed.seen),
                    ("decided", decided),
                    ("published", decisions.committed),
                ),
            }
        out["commits_by_replica"] = dict(sorted(decisions.by_replica.items()))
        out["conflict_reasons"] = dict(sorted(decisions.reasons.items()))
    finally:
        for s in services:
            s.stop()
        summaries = {s.name: s.summary() for s in services}
        with contextlib.suppress(Exception):
            await decisions.stop()
        with contextlib.suppress(Exception):
            await producer.stop()
        with contextlib.suppress(Exception):
            await _admin(server, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    out["replica_stats"] = {
        k: {f: v.get(f) for f in ("placed_pods", "conflicts", "retries", "cache_hit_rate")}
        for k, v in summaries.items()
        if k.startswith("replica") and isinstance(v, dict)
    }
    return out


async def _kafka_baseline(kafka: str, records: int) -> dict[str, float]:
    """Raw publish + consume of ``records`` pod-sized records (the broker's share)."""
    bus = open_bus(kafka, f"raw{uuid.uuid4().hex[:6]}.")
    await bus.ensure_topics(partitions=PARTITIONS)
    payloads = _pod_payloads(records, "raw", seed=3)
    producer = bus.producer()
    await producer.start()
    t0 = time.perf_counter()
    for i in range(0, records, 2000):
        await _send(producer, bus.topics.pods, payloads[i : i + 2000])
    publish = time.perf_counter() - t0
    await producer.stop()
    consumer = bus.consumer([bus.topics.pods], "raw")
    await consumer.start()
    t0, seen = time.perf_counter(), 0
    while seen < records:
        seen += len(await consumer.poll(500, 5000))
    consume = time.perf_counter() - t0
    await consumer.stop()
    return {
        "publish_per_s": round(records / publish, 1),
        "consume_per_s": round(records / consume, 1),
    }


async def run_e2e_bench(
    *,
    kafka: str | None,
    pg_server: str,
    nodes: int = 10_000,
    fill: float = 0.7,
    replicas: Iterable[int] = (1, 2, 4),
    pods: int = 20_000,
    rate: float = 1000.0,
    latency_seconds: float = 10.0,
    latency_for: Iterable[int] = (2,),
    logdir: str | None = None,
    profile: Iterable[str] = (),
) -> dict[str, Any]:
    """Run the benchmark; see the module docstring. ``pg_server`` is
    ``postgresql://user@host:port`` (databases are created and dropped there).
    ``profile``: services (commit, dispatch, ingest, replica) to run under cProfile,
    writing ``<logdir>/r<N>/<name>.prof``."""
    broker = None
    if not kafka:
        broker = DevBroker().start()
        kafka = broker.bootstrap
    run = uuid.uuid4().hex[:8]
    template = f"esched_bench_{run}_template"
    logs = Path(logdir or tempfile.mkdtemp(prefix="esched-bench-e2e-"))
    result: dict[str, Any] = {"mode": "processes", "nodes": nodes, "fill": fill, "logs": str(logs)}
    try:
        await _admin(pg_server, f'CREATE DATABASE "{template}"')
        t0 = time.perf_counter()
        result["preload"] = await preload(f"{pg_server}/{template}", nodes, fill)
        result["preload"]["seconds"] = round(time.perf_counter() - t0, 1)
        result["baseline_kafka"] = await _kafka_baseline(kafka, pods)
        result["runs"] = []
        latency_set = set(latency_for)
        for r in replicas:
            result["runs"].append(
                await _one_run(
                    kafka=kafka,
                    broker_pid=broker.pid if broker else None,
                    template_db=template,
                    server=pg_server,
                    replicas=r,
                    pods=pods,
                    rate=rate,
                    latency_seconds=latency_seconds,
                    measure_latency=r in latency_set,
                    logdir=logs,
                    run=run,
                    profile=frozenset(profile),
                )
            )
    finally:
        with contextlib.suppress(Exception):
            await _admin(pg_server, f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')
        if broker:
            broker.stop()
    result["broker"] = "tansu (local)" if broker else kafka
    return result


async def _first_commit_by(
    url: str, replica: str, after: int, within: float, alive: Callable[[], None]
) -> float | None:
    """Wall time (time.time()) when the first decision committing a proposal of
    ``replica`` made on a fold at or past position ``after`` was seen (polled every
    20 ms); None if not within ``within`` seconds. The position the proposal carries
    tells the new process's proposals from those a stopped or killed one had sent
    before ``after`` and the commit service decides only now."""
    conn = await asyncpg.connect(url, timeout=10)
    try:
        deadline = time.monotonic() + within
        seen = after
        while time.monotonic() < deadline:
            alive()
            rows = await conn.fetch(
                "SELECT position, payload FROM events WHERE position > $1 AND type = $2",
                seen,
                PLACEMENT_COMMITTED,
            )
            for r in rows:
                seen = max(seen, r["position"])
                data = orjson.loads(r["payload"])["data"]
                if data["replica"] == replica and data["position"] >= after:
                    return time.time()
            await asyncio.sleep(0.02)
        return None
    finally:
        await conn.close()


async def run_restart_bench(
    *,
    kafka: str | None,
    pg_server: str,
    nodes: int = 10_000,
    fill: float = 0.7,
    pending: int = 2000,
    logdir: str | None = None,
) -> dict[str, Any]:
    """A replica process restarted on a big cluster: seconds until it places again.

    The log holds ``nodes`` nodes and running pods up to ``fill`` (10,000 nodes and
    ~100,000 running pods by default) with a state snapshot, then ``pending`` pods
    submitted after the snapshot (the tail a restarted replica folds live). A
    commit service and a dispatcher run (as processes); a replica process is
    started, stopped and started again: once after SIGTERM (it left the group)
    and once after SIGKILL (the group still counts the dead member until its
    session times out). Each figure is from ``Popen`` to the first decision that
    commits one of its proposals, read from the log. Baselines in this process:
    folding the same log from position 0, and from the snapshot.
    """
    broker = None
    if not kafka:
        broker = DevBroker().start()
        kafka = broker.bootstrap
    run = uuid.uuid4().hex[:8]
    db = f"esched_bench_{run}_restart"
    url = f"{pg_server}/{db}"
    logs = Path(logdir or tempfile.mkdtemp(prefix="esched-bench-restart-"))
    os.makedirs(logs, exist_ok=True)
    prefix = f"rs{run}."
    env = service_env(url, kafka, prefix)
    services: list[ServiceProcess] = []
    out: dict[str, Any] = {"nodes": nodes}

    def alive() -> None:
        for s in services:
            s.check_alive()

    try:
        await _admin(pg_server, f'CREATE DATABASE "{db}"')
        out["preload"] = await preload(url, nodes, fill)
        store = open_store(url)
        await store.connect()
        try:
            rng = random.Random(9)
            tail = [pod_event(j, rng, "tail") for j in range(pending)]
            await store.append(
                [NewEvent(e["id"], e["type"], stream_of(e), orjson.dumps(e)) for e in tail]
            )
            t0 = time.perf_counter()
            full = await fold_log(store, use_snapshot=False)
            out["baseline_fold_from_zero_s"] = round(time.perf_counter() - t0, 3)
            t0 = time.perf_counter()
            snap = await fold_log(store, use_snapshot=True)
            out["fold_from_snapshot_s"] = round(time.perf_counter() - t0, 3)
            assert snap.summary() == full.summary(), "snapshot fold diverged from full fold"
            out["events"] = int(full.position)
            out["running_pods"] = full.summary()["pods"]["Running"]
        finally:
            await store.close()
        bus = open_bus(kafka, prefix)
        await bus.ensure_topics(partitions=PARTITIONS)
        services.append(ServiceProcess("commit", ["commit"], env, logs))
        services.append(ServiceProcess("dispatch", ["dispatch"], env, logs))
        await await_until(
            "commit and dispatch ready",
            lambda: (
                services[0].logged("commit service leading")
                and services[1].logged("dispatcher leading")
            ),
            120,
            services,
        )

        waves = itertools.count()

        async def start_replica(name: str) -> tuple[ServiceProcess, float]:
            # Fresh pending pods, published as work by the dispatcher, wait for it.
            wave = next(waves)
            more = [pod_event(j, random.Random(wave), f"wave{wave}") for j in range(pending)]
            store = open_store(url)
            await store.connect()
            try:
                await store.append(
                    [NewEvent(e["id"], e["type"], stream_of(e), orjson.dumps(e)) for e in more]
                )
            finally:
                await store.close()
            head = await _head(url)
            t0 = time.time()
            rep = ServiceProcess(
                name, ["replica", "--id", "r1", "--seed", "1", "--batch-size", "100"], env, logs
            )
            services.append(rep)
            first = await _first_commit_by(url, "r1", head, 120, alive)
            if first is None:
                raise RuntimeError(f"{name} placed nothing within 120 s")
            return rep, first - t0

        first, out["first_start_s"] = await start_replica("replica-first")
        await asyncio.sleep(1.0)
        first.stop()
        services.remove(first)
        again, out["restart_after_sigterm_s"] = await start_replica("replica-sigterm")
        await asyncio.sleep(1.0)
        again.kill9()
        services.remove(again)
        _, out["restart_after_sigkill_s"] = await start_replica("replica-sigkill")
        out["replica_logs"] = {
            s.name: next(
                (
                    line.split(": ", 1)[-1]
                    for line in s.log.read_text().splitlines()
                    if "ready at position" in line
                ),
                None,
            )
            for s in (first, again, services[-1])
        }
    finally:
        for s in services:
            s.stop()
        with contextlib.suppress(Exception):
            await _admin(pg_server, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        if broker:
            broker.stop()
    out["target_s"] = 5.0
    out["ratio_baseline_fold_to_restart"] = round(
        out["baseline_fold_from_zero_s"] / out["restart_after_sigterm_s"], 2
    )
    return out
