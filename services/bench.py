"""Benchmarks of the backbone: ingest (Kafka → store) and replay (store → fold).

Each reports its figure next to a baseline measured in the same process, so a
ratio survives a shared, noisy machine: ingest against a raw consume and a raw
append; replay against reading the log, reading and decoding it (no fold), and the fold's
dict path (decode each envelope, then ``apply_many``).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import time
import uuid

import orjson

from esched.core import ClusterState
from esched.schemas.events import POD, POD_SUBMITTED, namespaced_key, stream_name
from esched.services.bus import open_bus
from esched.services.devbroker import DevBroker
from esched.services.ingest import IngestConfig, IngestService
from esched.services.store import open_store
from esched.services.store.base import EventStore, NewEvent
from esched.services.store.snapshots import PAGE, SNAPSHOT_NAME, fold_log, save_snapshot
from esched.services.synth import cluster_log, pod_event

__all__ = ["fill_log", "run_ingest_bench", "run_replay_bench"]


def _rate(n: int, seconds: float) -> float:
    return round(n / seconds, 1) if seconds > 0 else float("inf")


async def run_ingest_bench(kafka: str | None, store_url: str, events: int, batch_size: int) -> dict:
    """Publish ``events`` pod events, then time ingest draining them into the store."""
    import random

    broker = None
    if not kafka:
        broker = DevBroker().start()
        kafka = broker.bootstrap
    run = uuid.uuid4().hex[:8]
    try:
        bus = open_bus(kafka, f"bench-{run}.")
        await bus.ensure_topics(partitions=3)
        rng = random.Random(0)
        payloads = [orjson.dumps(pod_event(j, rng, namespace=f"b{run}")) for j in range(events)]
        producer = bus.producer()
        await producer.start()
        try:
            for i in range(0, events, 5000):
                await producer.send_many(
                    bus.topics.pods, [(None, p) for p in payloads[i : i + 5000]]
                )
        finally:
            await producer.stop()

        # Baseline 1: consume only (what the broker and client can do at all).
        consumer = bus.consumer(bus.topics.inputs, f"raw-{run}")
        await consumer.start()
        t0, seen = time.perf_counter(), 0
        while seen < events:
            seen += len(await consumer.poll(500, batch_size))
        consume_s = time.perf_counter() - t0
        await consumer.stop()

        store = open_store(store_url)
        await store.connect()
        try:
            await store.migrate()
            # Baseline 2: append only (what the store can do at all), on other ids.
            raw = [
                NewEvent(
                    id=f"raw-{run}-{j}",
                    type=POD_SUBMITTED,
                    stream=stream_name(POD, namespaced_key(f"raw{run}", str(j))),
                    payload=p,
                )
                for j, p in enumerate(payloads)
            ]
            t0 = time.perf_counter()
            for i in range(0, events, batch_size):
                await store.append(raw[i : i + batch_size])
            append_s = time.perf_counter() - t0

            service = IngestService(
                bus, store, IngestConfig(group=f"ingest-{run}", batch_size=batch_size)
            )
            await service.start()
            t0 = time.perf_counter()
            await service.run(max_messages=events)
            ingest_s = time.perf_counter() - t0
            await service.stop()
        finally:
            await store.close()
    finally:
        if broker:
            broker.stop()
    ingest_rate = _rate(events, ingest_s)
    return {
        "events": events,
        "batch_size": batch_size,
        "ingest_events_per_s": ingest_rate,
        "baseline_consume_events_per_s": _rate(events, consume_s),
        "baseline_append_events_per_s": _rate(events, append_s),
        "ratio_to_append": round(ingest_rate / _rate(events, append_s), 3),
        "ratio_to_consume": round(ingest_rate / _rate(events, consume_s), 3),
        "store": store_url.split("://")[0],
        "broker": "tansu (local)" if broker else kafka,
    }


async def fill_log(store: EventStore, events: int, nodes: int) -> None:
    """Append the synthetic cluster log (``events`` events over ``nodes`` nodes)."""
    batch: list[NewEvent] = []
    for ev in itertools.islice(cluster_log(nodes, pods=events), events):
        batch.append(
            NewEvent(id=ev["id"], type=ev["type"], stream=ev["id"], payload=orjson.dumps(ev))
        )
        if len(batch) == 5000:
            await store.append(batch)
            batch = []
    if batch:
        await store.append(batch)


async def run_replay_bench(store_url: str, events: int, nodes: int) -> dict:
    """Fill an empty store with a synthetic log, then time folds and a snapshot restart."""
    store = open_store(store_url)
    await store.connect()
    try:
        await store.migrate()
        if await store.head() == 0:
            await fill_log(store, events, nodes)
        head = await store.head()

        # Baselines: read every event; read and decode every event (no fold).
        t0, after = time.perf_counter(), 0
        while rows := await store.read_payloads(after, PAGE):
            after = rows[-1][0]
        read_s = time.perf_counter() - t0
        t0, after, loads = time.perf_counter(), 0, orjson.loads
        while rows := await store.read_payloads(after, PAGE):
            for _pos, payload in rows:
                loads(payload)
            after = rows[-1][0]
        decode_s = time.perf_counter() - t0

        # Baseline: the dict path of the same fold (what fold_log did before the bytes
        # path): decode each envelope with orjson, then apply_many.
        gc.disable()  # as fold_log does
        try:
            t0, after, by_dict = time.perf_counter(), 0, ClusterState()
            while rows := await store.read_payloads(after, PAGE):
                by_dict.apply_many([(pos, loads(payload)) for pos, payload in rows])
                after = rows[-1][0]
            dict_fold_s = time.perf_counter() - t0
        finally:
            gc.enable()

        t0 = time.perf_counter()
        state = await fold_log(store, use_snapshot=False)
        fold_s = time.perf_counter() - t0
        assert state.summary() == by_dict.summary(), "bytes path diverged from dict path"
        del by_dict

        await save_snapshot(store, state)
        snapshot = await store.load_snapshot(SNAPSHOT_NAME)
        assert snapshot is not None, "the snapshot just saved"
        snap_bytes = len(snapshot[1])
        t0 = time.perf_counter()
        restored = await fold_log(store, use_snapshot=True)
        restart_s = time.perf_counter() - t0
        assert restored.summary() == state.summary(), "snapshot restart diverged from full fold"
    finally:
        with contextlib.suppress(Exception):
            await store.close()
    fold_rate = _rate(head, fold_s)
    return {
        "events": head,
        "nodes": state.summary()["nodes"]["count"],
        "fold_events_per_s": fold_rate,
        "baseline_read_events_per_s": _rate(head, read_s),
        "baseline_read_decode_events_per_s": _rate(head, decode_s),
        "baseline_dict_fold_events_per_s": _rate(head, dict_fold_s),
        "speedup_vs_dict_fold": round(fold_rate / _rate(head, dict_fold_s), 2),
        "ratio_to_read_decode": round(fold_rate / _rate(head, decode_s), 3),
        "ratio_to_read": round(fold_rate / _rate(head, read_s), 3),
        "full_fold_s": round(fold_s, 3),
        "snapshot_restart_s": round(restart_s, 3),
        "snapshot_bytes": snap_bytes,
        "store": store_url.split("://")[0],
    }
