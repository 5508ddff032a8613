"""A replica process restarted on a big cluster: seconds until it places again."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from esched.schemas.events import stream_of
from esched.services.bench_e2e.cpu import peak_rss_mib
from esched.services.bench_e2e.observe import first_commit_by, head_position
from esched.services.bench_e2e.preload import PARTITIONS, admin, preload
from esched.services.bus import open_bus
from esched.services.devbroker import DevBroker
from esched.services.procs import ServiceProcess, await_until, service_env
from esched.services.store import open_store
from esched.services.store.base import NewEvent
from esched.services.store.snapshots import fold_log
from esched.services.synth import pod_event


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
        await admin(pg_server, f'CREATE DATABASE "{db}"')
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
            head = await head_position(url)
            t0 = time.time()
            rep = ServiceProcess(
                name, ["replica", "--id", "r1", "--seed", "1", "--batch-size", "100"], env, logs
            )
            services.append(rep)
            first = await first_commit_by(url, "r1", head, 120, alive)
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
        last, out["restart_after_sigkill_s"] = await start_replica("replica-sigkill")
        # The replica's memory with the whole cluster folded and its first batch placed.
        out["replica_peak_rss_mib"] = peak_rss_mib(last.pid)
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
            await admin(pg_server, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        if broker:
            broker.stop()
    out["target_s"] = 5.0
    out["ratio_baseline_fold_to_restart"] = round(
        out["baseline_fold_from_zero_s"] / out["restart_after_sigterm_s"], 2
    )
    return out
