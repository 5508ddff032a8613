"""The throughput, latency and conflict runs per replica count, with the raw Kafka
baseline."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from esched.services.bench_e2e.cpu import cpu_snapshot, idle_cpu
from esched.services.bench_e2e.observe import (
    Decisions,
    FirstSeen,
    head_position,
    pct,
    proposal_pods,
    stages,
    store_pods_per_s,
    stored_at,
    wait_committed,
    work_pods,
)
from esched.services.bench_e2e.preload import (
    PARTITIONS,
    WARMUP_PODS_PER_REPLICA,
    admin,
    job_payloads,
    pod_payloads,
    preload,
    send_pods,
)
from esched.services.bench_e2e.timeline import run_timeline
from esched.services.bus import open_bus
from esched.services.devbroker import DevBroker
from esched.services.procs import ServiceProcess, await_until, service_env


async def one_run(
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
    confine: Callable[[ServiceProcess], None] | None = None,
    before_stop: Callable[[], None] | None = None,
    job_size: int = 0,
    replica_args: Sequence[str] = (),
    idle_seconds: float = 0.0,
    follow: str = "log",
    timeline: bool = False,
) -> dict[str, Any]:
    """One run with ``replicas`` replica processes (following the log as ``follow``
    says: ``"feed"`` runs the dispatcher with ``--feed``); ``confine(process)`` is called on
    each replica process once all are ready (``bench scale`` caps its CPU), and
    ``before_stop()`` once measured, before the processes are stopped. ``job_size``
    > 0: the throughput phase's pods come as Volcano Jobs of that many pods (gangs),
    and the job controller runs as one more process. ``replica_args`` are added to
    every replica's command line (the broker's :attr:`DevBroker.REPLICA_ARGS`).
    ``idle_seconds`` > 0: after the other phases, the services are left with nothing to
    do for that long and ``idle`` reports each one's CPU share (cores) meanwhile: what
    fetch and poll loops cost when there is nothing to read. ``timeline``: the
    throughput phase's ``commit_gaps`` (its longest stretch without a commit, and where
    the pods decided after it waited), every pod's marks in ``timeline.json`` of the
    run's log folder (:mod:`.timeline`)."""
    db = f"esched_bench_{run}_r{replicas}"
    await admin(server, f'CREATE DATABASE "{db}" TEMPLATE "{template_db}"')
    url = f"{server}/{db}"
    prefix = f"b{run}r{replicas}."
    bus = open_bus(kafka, prefix)
    await bus.ensure_topics(partitions=PARTITIONS)
    env = service_env(url, kafka, prefix)
    runlog = logdir / f"r{replicas}"
    runlog.mkdir(parents=True, exist_ok=True)
    services: list[ServiceProcess] = []
    decisions = Decisions(bus, f"bench-{run}-{replicas}")
    producer = bus.producer()
    out: dict[str, Any] = {"replicas": replicas, "follow": follow}

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
        services.append(spawn("dispatch", "dispatch", *(["--feed"] if follow == "feed" else [])))
        services.append(spawn("ingest", "ingest"))
        if job_size:
            services.append(spawn("jobs", "jobs"))
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
                "--follow",
                follow,
                "--count-cpu",
                *replica_args,
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
                and (not job_size or services[3].logged("job controller leading"))
            ),
            120,
            services,
        )
        out["services_ready_s"] = round(time.perf_counter() - started, 2)
        if confine is not None:
            # Once ready: a capped start-up (imports, fold, group join) would take minutes.
            for rep in reps:
                confine(rep)

        # Warm-up until every replica has had work committed (the group has settled).
        counter = itertools.count()
        wave = 0
        while True:
            batch = pod_payloads(WARMUP_PODS_PER_REPLICA * replicas, f"w{next(counter)}", seed=wave)
            wave += 1
            await send_pods(producer, bus.topics.pods, batch)
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
        if job_size:
            payloads, keys = job_payloads(pods, "tput", seed=1, size=job_size)
        else:
            payloads = pod_payloads(pods, "tput", seed=1)
            keys = [k for k, _ in payloads]
        c0, r0 = decisions.mark()
        head = await head_position(url)
        decisions.reading.clear()
        cpu0 = cpu_snapshot(services, broker_pid, db)
        t0 = time.time()
        for i in range(0, len(payloads), 2000):
            await send_pods(producer, bus.topics.pods, payloads[i : i + 2000])
        sent_s = time.time() - t0
        # A gang's pods are committed in one decision: count pods, not decisions.
        await wait_committed(url, head, pods if not job_size else -(-pods // job_size), 300, alive)
        cpu1 = cpu_snapshot(services, broker_pid, db)
        decisions.reading.set()
        missing = await decisions.wait_for(keys, 60, alive)
        done = [decisions.committed[k] for k in keys if k in decisions.committed]
        c1, r1 = decisions.mark()
        elapsed = max(done) - t0 if done else float("nan")
        out.update(
            {
                "pods": pods,
                "job_size": job_size,
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
        stored, decided = await stored_at(url, "tput")
        rate_stored = store_pods_per_s(stored, decided)
        if rate_stored is not None:
            out["store_pods_per_s"] = rate_stored
        if timeline:
            out["commit_gaps"] = await run_timeline(
                bus, f"bench-{run}-{replicas}-tl", stored, decided, runlog / "timeline.json"
            )
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
            payloads = pod_payloads(lat_pods, "lat", seed=2)
            tick = 0.01
            per_tick = max(1, round(rate * tick))
            sent_at: dict[str, float] = {}
            work = FirstSeen(bus, bus.topics.work, f"bench-{run}-{replicas}-w", work_pods)
            proposed = FirstSeen(
                bus, bus.topics.proposals, f"bench-{run}-{replicas}-p", proposal_pods
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
                sends.append(asyncio.create_task(send_pods(producer, bus.topics.pods, chunk)))
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
            stored, decided = await stored_at(url, "lat")
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
                "p50_ms": pct(lat, 50),
                "p90_ms": pct(lat, 90),
                "p99_ms": pct(lat, 99),
                "max_ms": pct(lat, 100),
                "stages": stages(
                    sent_at,
                    ("stored", stored),
                    ("work", work.seen),
                    ("proposed", proposed.seen),
                    ("decided", decided),
                    ("published", decisions.committed),
                ),
            }
        if idle_seconds > 0:
            out["idle"] = await idle_cpu(services, broker_pid, idle_seconds, db)
        out["commits_by_replica"] = dict(sorted(decisions.by_replica.items()))
        out["conflict_reasons"] = dict(sorted(decisions.reasons.items()))
    finally:
        if before_stop is not None:
            before_stop()
        for s in services:
            s.stop()
        summaries = {s.name: s.summary() for s in services}
        # aiokafka may raise CancelledError out of a stop whose fetch timed out: it
        # must not hide the error that ended the run.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await decisions.stop()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await producer.stop()
        with contextlib.suppress(Exception):
            await admin(server, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    out["replica_stats"] = {
        k: {
            f: v.get(f)
            for f in (
                "placed_pods",
                "conflicts",
                "retries",
                "cache_hit_rate",
                "log_reads",
                "log_rows",
                "work_items",
                "batches",
                "polls",
                "empty_polls",
                "commits",
                "follow_cpu_s",
                "cpu_s",
                "cpu_after_start_s",
                "loop_cpu_after_start_s",
                "after_start_s",
                "loop_wakeups_after_start",
                "loop_preempted_after_start",
            )
        }
        # following the feed: pods entered from their submissions and the CPU of that
        | {f: v[f] for f in ("feed_entered", "feed_enter_cpu_s") if f in v}
        for k, v in summaries.items()
        if k.startswith("replica") and isinstance(v, dict)
    }
    out["replica_cpu_us"] = replica_cpu_breakdown(
        out["replica_stats"], out.get("cpu_us_per_pod") or {}, pods
    )
    return out


def replica_cpu_breakdown(
    stats: dict[str, dict[str, Any]],
    window: dict[str, float] | None = None,
    window_pods: int = 0,
) -> dict[str, dict[str, Any]]:
    """Where each replica's CPU went after it started placing (its ``replica_stats``),
    in µs per pod it placed (``per_placed_pod``) and per pod of the whole flow (every
    replica's placed pods, ``per_flow_pod``): the parts of placing (``cpu_s``), the
    following (``follow``, and with the feed ``feed_enter``), the rest of its work
    loop's thread (``loop_rest``: the bus client's fetches and sends, the event loop,
    the store reads, and whatever it did while no work came) and its other threads
    (``other_threads``); ``total`` is the process's.

    ``window`` (the run's ``cpu_us_per_pod``: each process's CPU over the throughput
    phase, per pod of its ``window_pods``) adds ``window_rest``: a replica's CPU in
    that phase less its counted parts (which come almost all from that phase's pods:
    the warm-up's are a few %), what the bus client, the event loop and the store
    reads cost while placing."""
    flow = sum(int(v.get("placed_pods") or 0) for v in stats.values())
    out: dict[str, dict[str, Any]] = {}
    for name, v in sorted(stats.items()):
        total = v.get("cpu_after_start_s")
        placed = int(v.get("placed_pods") or 0)
        if total is None or not placed:
            continue
        parts: dict[str, float] = dict(v.get("cpu_s") or {})
        parts["follow"] = float(v.get("follow_cpu_s") or 0.0)
        if "feed_enter_cpu_s" in v:
            parts["feed_enter"] = float(v["feed_enter_cpu_s"])
        counted = sum(parts.values())
        loop = float(v.get("loop_cpu_after_start_s") or 0.0)
        parts["loop_rest"] = loop - counted
        parts["other_threads"] = float(total) - loop
        parts["total"] = float(total)
        if window and name in window:
            parts["window_rest"] = window[name] * window_pods / 1e6 - counted
        out[name] = {
            f"per_{what}_pod": {k: round(s * 1e6 / n, 2) for k, s in parts.items()}
            for what, n in (("placed", placed), ("flow", flow))
        }
    return out


async def _kafka_baseline(kafka: str, records: int) -> dict[str, float]:
    """Raw publish + consume of ``records`` pod-sized records (the broker's share)."""
    bus = open_bus(kafka, f"raw{uuid.uuid4().hex[:6]}.")
    await bus.ensure_topics(partitions=PARTITIONS)
    payloads = pod_payloads(records, "raw", seed=3)
    producer = bus.producer()
    await producer.start()
    t0 = time.perf_counter()
    for i in range(0, records, 2000):
        await send_pods(producer, bus.topics.pods, payloads[i : i + 2000])
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


@contextlib.asynccontextmanager
async def bench_cluster(
    kafka: str | None, pg_server: str, nodes: int, fill: float, logdir: str | None
) -> AsyncIterator[dict[str, Any]]:
    """A broker (a local tansu without ``kafka``) and a preloaded template database
    for the runs of one benchmark; yields the runs' common arguments (``kafka``,
    ``broker_pid``, ``template_db``, ``server``, ``logdir``, ``run``,
    ``replica_args``) and the result's
    head under ``"result"``. Everything is dropped and stopped on exit."""
    broker = None
    if not kafka:
        broker = DevBroker().start()
        kafka = broker.bootstrap
    run = uuid.uuid4().hex[:8]
    template = f"esched_bench_{run}_template"
    logs = Path(logdir or tempfile.mkdtemp(prefix="esched-bench-e2e-"))
    result: dict[str, Any] = {"mode": "processes", "nodes": nodes, "fill": fill, "logs": str(logs)}
    try:
        await admin(pg_server, f'CREATE DATABASE "{template}"')
        t0 = time.perf_counter()
        result["preload"] = await preload(f"{pg_server}/{template}", nodes, fill)
        result["preload"]["seconds"] = round(time.perf_counter() - t0, 1)
        yield {
            "result": result,
            "kafka": kafka,
            "broker_pid": broker.pid if broker else None,
            "template_db": template,
            "server": pg_server,
            "logdir": logs,
            "run": run,
            "replica_args": DevBroker.REPLICA_ARGS if broker else (),
        }
    finally:
        with contextlib.suppress(Exception):
            await admin(pg_server, f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')
        if broker:
            broker.stop()
        result["broker"] = "tansu (local)" if broker else kafka


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
    job_size: int = 0,
    idle_seconds: float = 0.0,
    follow: str = "log",
) -> dict[str, Any]:
    """Run the benchmark; see the module docstring. ``pg_server`` is
    ``postgresql://user@host:port`` (databases are created and dropped there).
    ``profile``: services (commit, dispatch, ingest, jobs, replica) to run under cProfile,
    writing ``<logdir>/r<N>/<name>.prof``. ``job_size``, ``idle_seconds``, ``follow``:
    see :func:`one_run`."""
    async with bench_cluster(kafka, pg_server, nodes, fill, logdir) as common:
        result = common.pop("result")
        result["baseline_kafka"] = await _kafka_baseline(common["kafka"], pods)
        result["runs"] = []
        latency_set = set(latency_for)
        for r in replicas:
            result["runs"].append(
                await one_run(
                    **common,
                    replicas=r,
                    pods=pods,
                    rate=rate,
                    latency_seconds=latency_seconds,
                    measure_latency=r in latency_set,
                    profile=frozenset(profile),
                    job_size=job_size,
                    idle_seconds=idle_seconds,
                    follow=follow,
                )
            )
    return result
