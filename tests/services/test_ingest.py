"""Ingest: valid events land in the store once; bad input is dead-lettered with its reason.

Runs on the in-process bus against both stores, and end to end on a real broker
and the real PostgreSQL, including a database outage and a broker outage.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib

import asyncpg
import orjson
import pytest

from esched.services.bus import TopicNames, open_bus
from esched.services.bus.kafka import KafkaBus
from esched.services.ingest import IngestConfig, IngestService
from esched.services.store import open_store


def envelope(i: int, **data_overrides) -> dict:
    data = {
        "metadata": {"name": f"pod-{i}", "namespace": "t"},
        "spec": {
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}
            ]
        },
    }
    data.update(data_overrides)
    return {
        "specversion": "1.0",
        "id": f"ev-{i}",
        "source": "test",
        "type": "esched.pod.submitted",
        "time": "2026-11-22T00:00:00Z",
        "data": data,
    }


def _job_envelope(name: str, replicas: int, **spec: object) -> dict:
    """A Volcano Job of one task of ``replicas`` pods (its template's spec with
    ``spec`` added), id ``name``."""
    template = {"spec": {"containers": [{"name": "c", "image": "x"}], **spec}}
    data = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "t"},
        "spec": {"tasks": [{"name": "w", "replicas": replicas, "template": template}]},
    }
    return {**envelope(0), "id": name, "type": "esched.job.submitted", "data": data}


def good(i: int) -> bytes:
    return orjson.dumps(envelope(i))


BAD_INPUTS = {
    "not_json": b"{not json",
    "not_object": b"[1, 2, 3]",
    "envelope": orjson.dumps({"id": "x", "type": "esched.pod.submitted", "data": {}}),
    "unknown_type": orjson.dumps({**envelope(900), "type": "esched.pod.teleported"}),
    "schema": orjson.dumps(envelope(901, spec={"containers": "nope"})),
    "quantity": orjson.dumps(
        envelope(
            902, spec={"containers": [{"name": "c", "resources": {"requests": {"cpu": "-1"}}}]}
        )
    ),
    "oversize": orjson.dumps(
        envelope(903, spec={"containers": [{"name": "c", "image": "x" * 200_000}]})
    ),
}
#: Below the broker's message limit, so an oversize event can travel through Kafka.
SMALL_LIMIT = 100_000


async def _stored_ids(store) -> list[str]:
    return [e.id for e in await store.read(0, 100_000)]


async def test_valid_events_are_stored_once_and_bad_ones_dead_lettered(store):
    bus = open_bus(None, "esched.")
    for i in range(5):
        bus.append(bus.topics.pods, None, good(i))
    bus.append(bus.topics.pods, None, good(0))  # at-least-once: a redelivered duplicate
    for raw in BAD_INPUTS.values():
        bus.append(bus.topics.nodes, b"key", raw)

    service = IngestService(bus, store, IngestConfig(max_event_bytes=SMALL_LIMIT))
    await service.start()
    totals = await service.run(exit_when_idle=True)
    await service.stop()

    assert await _stored_ids(store) == [f"ev-{i}" for i in range(5)]
    assert totals.stored == 5 and totals.duplicates == 1
    assert totals.reasons == {reason: 1 for reason in BAD_INPUTS}
    dead = [orjson.loads(m.value) for m in bus.log(bus.topics.deadletter)]
    assert [d["reason"] for d in dead] == list(BAD_INPUTS)
    for d, raw in zip(dead, BAD_INPUTS.values(), strict=True):
        # The original bytes, untouched (the first 64 KiB of a longer one, with its
        # size and hash).
        assert raw.startswith(base64.b64decode(d["value_b64"]))
        assert d["value_bytes"] == len(raw)
        assert d["value_sha256"] == hashlib.sha256(raw).hexdigest()
        assert d["origin"]["topic"] == bus.topics.nodes
        assert d["message"]
    quantity = next(d for d in dead if d["reason"] == "quantity")
    assert quantity["field"] == "data.spec.containers[0].resources.requests.cpu"


async def test_a_volcano_job_whose_pods_esched_refuses_is_dead_lettered_with_the_reason(store):
    # Volcano's webhook lets a DRA claim through; esched's pod schema does not: the Job
    # is refused at ingest (not accepted with its pods skipped by the job controller).
    def job(name: str, **spec: object) -> bytes:
        return orjson.dumps(_job_envelope(name, 2, **spec))

    bus = open_bus(None, "esched.")
    bus.append(bus.topics.pods, None, job("fine"))
    bus.append(bus.topics.pods, None, job("claims", resourceClaims=[{"name": "gpu"}]))
    service = IngestService(bus, store, IngestConfig())
    await service.start()
    totals = await service.run(exit_when_idle=True)
    await service.stop()

    assert await _stored_ids(store) == ["fine"]
    assert totals.reasons == {"unsupported": 1}
    [dead] = [orjson.loads(m.value) for m in bus.log(bus.topics.deadletter)]
    assert dead["field"] == "data.spec.tasks[0].template.spec.resourceClaims"
    assert dead["message"].startswith("task 'w': its pod claims-w-1 is refused: ")


async def test_offsets_are_committed_only_after_the_store_has_the_batch(store):
    bus = open_bus(None, "esched.")
    for i in range(3):
        bus.append(bus.topics.pods, None, good(i))
    service = IngestService(bus, store, IngestConfig(batch_size=2))
    await service.start()
    await service.run_once()  # stores and commits the first two
    await service.stop()  # dies before the third

    again = IngestService(bus, store, IngestConfig(batch_size=10))
    await again.start()
    totals = await again.run(exit_when_idle=True)
    await again.stop()
    assert totals.polled == 1  # only the uncommitted message came back
    assert await _stored_ids(store) == ["ev-0", "ev-1", "ev-2"]


@pytest.mark.kafka
async def test_kafka_to_postgres_end_to_end_with_deadletter(kafka_bootstrap, topic_prefix, pg_url):
    bus = KafkaBus(kafka_bootstrap, TopicNames(topic_prefix), session_timeout_ms=3000)
    await bus.ensure_topics()
    producer = bus.producer()
    await producer.start()
    await producer.send_many(bus.topics.pods, [(b"k", good(i)) for i in range(200)])
    await producer.send_many(bus.topics.usage, [(None, raw) for raw in BAD_INPUTS.values()])
    await producer.send_many(bus.topics.pods, [(b"k", good(i)) for i in range(50)])  # dups
    await producer.stop()

    store = open_store(pg_url)
    await store.connect()
    await store.migrate()
    service = IngestService(
        bus, store, IngestConfig(group="ingest", batch_size=64, max_event_bytes=SMALL_LIMIT)
    )
    await service.start()
    try:
        while service.totals.polled < 200 + len(BAD_INPUTS) + 50:
            await asyncio.wait_for(service.run_once(), 30)
    finally:
        await service.stop()
    assert len(await _stored_ids(store)) == 200
    assert await store.head() == 200
    await store.close()

    # The test's own reader: exclusive, so no group join (seconds on tansu).
    dl = bus.consumer([bus.topics.deadletter], "inspect", exclusive=True)
    await dl.start()
    dead: list = []
    for _ in range(100):
        dead += await dl.poll(200, 100)
        if len(dead) >= len(BAD_INPUTS):
            break
    await dl.stop()
    assert sorted(orjson.loads(m.value)["reason"] for m in dead) == sorted(BAD_INPUTS)


@pytest.mark.kafka
async def test_ingest_survives_a_database_outage_and_loses_nothing(
    kafka_bootstrap, topic_prefix, pg_url
):
    bus = KafkaBus(kafka_bootstrap, TopicNames(topic_prefix), session_timeout_ms=3000)
    await bus.ensure_topics()
    store = open_store(pg_url)
    await store.connect()
    await store.migrate()
    service = IngestService(bus, store, IngestConfig(group="ingest", batch_size=50))
    await service.start()
    producer = bus.producer()
    await producer.start()
    admin = await asyncpg.connect(pg_url.rsplit("/", 1)[0] + "/postgres")
    dbname = pg_url.rsplit("/", 1)[1]
    try:
        await producer.send_many(bus.topics.pods, [(None, good(i)) for i in range(100)])
        while service.totals.stored < 100:
            await asyncio.wait_for(service.run_once(), 30)

        # The database goes away: no new connections, existing ones killed.
        await admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS false')
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", dbname
        )
        await producer.send_many(bus.topics.pods, [(None, good(i)) for i in range(100, 300)])
        batch = asyncio.ensure_future(service.run_once())
        await asyncio.sleep(2.0)
        assert not batch.done()  # retrying with backoff, offsets not committed
        await admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
        await asyncio.wait_for(batch, 60)
        while service.totals.stored < 300:
            await asyncio.wait_for(service.run_once(), 60)
    finally:
        await admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
        await admin.close()
        await producer.stop()
        await service.stop()
    assert sorted(await _stored_ids(store)) == sorted(f"ev-{i}" for i in range(300))
    await store.close()


@pytest.mark.kafka
async def test_ingest_resumes_after_the_broker_comes_back(dev_broker, pg_url):
    bus = KafkaBus(dev_broker.bootstrap, TopicNames("esched."), session_timeout_ms=3000)
    store = open_store(pg_url)
    await store.connect()
    await store.migrate()
    service = IngestService(bus, store, IngestConfig(group="ingest", batch_size=50))
    await service.start()
    try:
        producer = bus.producer()
        await producer.start()
        # One key, so one partition: the restarted broker is empty (memory storage), and
        # the consumer's position there (50) must lie past the new log's end (30) for
        # it to reset to the earliest offset, as it does after a real broker loses
        # its log. Spread over partitions by chance, a partition could receive exactly
        # as many new records as its old position and look caught up (a flaky test).
        await producer.send_many(bus.topics.pods, [(b"k", good(i)) for i in range(50)])
        await producer.stop()
        while service.totals.stored < 50:
            await asyncio.wait_for(service.run_once(), 30)

        dev_broker.stop()
        for _ in range(3):  # polls fail or come back empty; the service keeps going
            await asyncio.wait_for(service.run_once(), 30)
        dev_broker.start()  # memory storage: a new, empty broker on the same address
        await bus.ensure_topics()
        producer = bus.producer()
        await producer.start()
        await producer.send_many(bus.topics.pods, [(b"k", good(i)) for i in range(50, 80)])
        await producer.stop()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 90
        while service.totals.stored < 80 and loop.time() < deadline:
            await asyncio.wait_for(service.run_once(), 30)
    finally:
        await service.stop()
    assert sorted(await _stored_ids(store)) == sorted(f"ev-{i}" for i in range(80))
    await store.close()


async def test_ingest_marks_the_jobs_it_stores_and_trusts_no_producers_marker(store):
    """Only a Job ingest checked implies its first pods (the ``eschedimplies``
    extension attribute, :func:`esched.schemas.events.stored_form`): ingest sets it on
    each Job it stores, in either content mode; a producer's marker on a Job whose
    pods esched refuses does not get it stored, one on a pod is removed, one of
    another value on a Job is overwritten."""
    from esched.schemas.events import IMPLIES, IMPLIES_PODS, implies_pods
    from esched.schemas.kafka_binding import BINARY, encode_event

    def job(name: str, marker: object = None, **spec: object) -> dict:
        env = _job_envelope(name, 1, **spec)
        return env if marker is None else {**env, IMPLIES: marker}

    bus = open_bus(None, "esched.")
    bus.append(bus.topics.pods, None, orjson.dumps(job("plain")))
    bus.append(bus.topics.pods, None, orjson.dumps(job("other", "all")))
    value, headers = encode_event(job("binary"), BINARY)
    bus.append(bus.topics.pods, None, value, headers)
    forged = job("forged", IMPLIES_PODS, resourceClaims=[{"name": "gpu"}])
    bus.append(bus.topics.pods, None, orjson.dumps(forged))
    bus.append(bus.topics.pods, None, orjson.dumps({**envelope(7), IMPLIES: IMPLIES_PODS}))
    service = IngestService(bus, store, IngestConfig())
    await service.start()
    totals = await service.run(exit_when_idle=True)
    await service.stop()

    rows = {r.id: orjson.loads(r.payload) for r in await store.read(0, 100)}
    assert sorted(rows) == ["binary", "ev-7", "other", "plain"]
    assert totals.reasons == {"unsupported": 1}  # the forged one: its pods refused
    assert {k: implies_pods(e) for k, e in rows.items()} == {
        "binary": True,
        "ev-7": False,
        "other": True,
        "plain": True,
    }
    assert IMPLIES not in rows["ev-7"]


async def test_a_job_stored_before_the_marker_sent_again_is_a_duplicate(store):
    """A Job a producer sends again after ingest began marking Jobs is the same event
    as the one stored unmarked before: counted a duplicate (not an id conflict), and
    the stored one, which implies no pod, stands."""
    from esched.schemas.events import IMPLIES
    from esched.services.store import NewEvent

    env = _job_envelope("old", 1)
    raw = orjson.dumps(env)
    await store.append([NewEvent("old", env["type"], "job/t/old", raw)])
    bus = open_bus(None, "esched.")
    bus.append(bus.topics.pods, None, raw)
    service = IngestService(bus, store, IngestConfig())
    await service.start()
    totals = await service.run(exit_when_idle=True)
    await service.stop()

    assert totals.duplicates == 1 and not totals.reasons
    [row] = await store.read(0, 100)
    assert row.payload == raw and IMPLIES not in orjson.loads(row.payload)
