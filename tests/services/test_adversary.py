"""Faults and adversaries: poison pills, reused ids, forged work, tampered logs.

Each poison pill must leave the service running (its offset committed, the next
message handled) and the log foldable; each refusal is a dead letter with a reason.
Runs against both stores (the ``store`` fixture: SQLite and the real PostgreSQL).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import sqlite3

import asyncpg
import orjson
import pytest
from click.testing import CliRunner
from prometheus_client import REGISTRY

from esched.schemas.events import PLACEMENT_COMMITTED, PLACEMENT_PROPOSED
from esched.services.audit import audit_store, format_report
from esched.services.bus import Message, open_bus
from esched.services.bus.deadletter import MAX_ORIGINAL_BYTES, deadletter_record
from esched.services.bus.memory import MemoryBus
from esched.services.cli import EXIT_FAILURE, cli
from esched.services.commit import CommitService
from esched.services.dispatch import work_item
from esched.services.ingest import IngestService
from esched.services.logs import TextFormatter
from esched.services.replica import Replica, ReplicaConfig
from esched.services.store import StoreConfigError, open_store
from esched.services.store.chain import verify_store
from esched.services.store.follower import LogFollower
from esched.services.store.postgres import PostgresEventStore
from esched.services.store.snapshots import anomaly_report, fold_log
from support.aio import eventually
from support.events import append_events, ev, node, placement, pod


def _pod_event(eid: str, name: str, spec: dict, time: str = "2026-11-22T00:00:00Z") -> bytes:
    return orjson.dumps(
        {
            "specversion": "1.0",
            "id": eid,
            "source": "adversary",
            "type": "esched.pod.submitted",
            "time": time,
            "data": {"metadata": {"name": name, "namespace": "t"}, "spec": spec},
        }
    )


def _containers(*requests: dict, kind: str = "requests") -> list[dict]:
    return [{"name": f"c{i}", "resources": {kind: r}} for i, r in enumerate(requests)]


EI4 = "4Ei"  # 2**62 bytes: the largest single quantity; two of them overflow int64
#: Pods whose every quantity is in range but whose totals are not (issue 19, part 1).
OVERFLOWING_PODS = {
    "containers": {"containers": _containers({"memory": EI4}, {"memory": EI4})},
    "limit_and_request": {
        "containers": [
            {"name": "a", "resources": {"limits": {"memory": EI4}}},
            {"name": "b", "resources": {"requests": {"memory": EI4}}},
        ]
    },
    "overhead": {"containers": _containers({"memory": EI4}), "overhead": {"memory": EI4}},
    "extended_twice": {
        "containers": _containers({"example.com/gpu": str(2**62)}, {"example.com/gpu": str(2**62)})
    },
    "scoring_defaults": {
        # Container b requests no memory: kube scores it at 200 MiB, on top of 4Ei.
        "containers": _containers({"memory": EI4}, {"cpu": "1"})
    },
}


async def _ingest(bus, store) -> None:
    service = IngestService(bus, store)
    await service.start()
    await service.run(exit_when_idle=True)
    await service.stop()


def _dead(bus) -> list[dict]:
    return [orjson.loads(m.value) for m in bus.log(bus.topics.deadletter)]


async def test_pods_whose_totals_overflow_are_dead_lettered_and_the_rest_stored(store):
    bus = open_bus(None, "esched.")
    for name, spec in OVERFLOWING_PODS.items():
        bus.append(bus.topics.pods, None, _pod_event(f"bad-{name}", name.replace("_", "-"), spec))
    ok = {"containers": _containers({"memory": EI4})}  # one quantity at the limit: fine
    bus.append(bus.topics.pods, None, _pod_event("good", "good", ok))
    await _ingest(bus, store)
    dead = _dead(bus)
    assert [d["reason"] for d in dead] == ["quantity"] * len(OVERFLOWING_PODS)
    assert all(d["field"] == "data.spec.containers" for d in dead)
    assert [e.id for e in await store.read(0, 100)] == ["good"]
    state = await fold_log(store)
    assert state.summary()["pods"]["Pending"] == 1 and state.anomalies == {}


@pytest.mark.parametrize(
    "time",
    ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "2200-01-01T00:00:00Z"],
)
async def test_a_time_outside_the_sane_window_is_dead_lettered(store, time):
    bus = open_bus(None, "esched.")
    spec = {"containers": _containers({"cpu": "1"})}
    bus.append(bus.topics.pods, None, _pod_event("odd-time", "a", spec, time=time))
    bus.append(bus.topics.pods, None, _pod_event("next", "b", spec))
    await _ingest(bus, store)
    assert [(d["reason"], d["field"]) for d in _dead(bus)] == [("envelope", "time")]
    assert [e.id for e in await store.read(0, 100)] == ["next"]


async def test_a_huge_invalid_message_gets_a_bounded_dead_letter(store):
    bus = open_bus(None, "esched.")
    garbage = b"\x00garbage" * 100_000  # 800 KB, under the event limit, not JSON
    bus.append(bus.topics.pods, b"k" * 10_000, garbage)
    bus.append(bus.topics.pods, None, _pod_event("next", "b", {"containers": _containers({})}))
    await _ingest(bus, store)
    raw = bus.log(bus.topics.deadletter)[0].value
    assert len(raw) < 2 * MAX_ORIGINAL_BYTES
    (d,) = _dead(bus)
    assert d["reason"] == "not_json" and d["value_truncated"]
    assert d["value_bytes"] == len(garbage)
    assert d["value_sha256"] == hashlib.sha256(garbage).hexdigest()
    assert base64.b64decode(d["value_b64"]) == garbage[:MAX_ORIGINAL_BYTES]
    assert [e.id for e in await store.read(0, 100)] == ["next"]


def test_a_dead_letter_cuts_its_texts_and_keeps_a_small_original_whole():
    msg = Message("esched.pods", 0, 7, None, b"{}")
    record = orjson.loads(deadletter_record(msg, "schema", "m" * 10_000, "f" * 10_000, "ingest"))
    assert len(record["message"]) <= 1024 and len(record["field"]) <= 256
    assert base64.b64decode(record["value_b64"]) == b"{}"
    assert not record["value_truncated"] and record["value_bytes"] == 2


async def test_an_id_reused_for_other_content_is_dead_lettered_as_id_conflict(store):
    bus = open_bus(None, "esched.")
    first = {"containers": _containers({"cpu": "1"})}
    other = {"containers": _containers({"cpu": "64"})}
    bus.append(bus.topics.pods, None, _pod_event("x", "a", first))
    await _ingest(bus, store)
    # A redelivery (re-serialized: same content) is a duplicate; other content is not.
    same = orjson.dumps(orjson.loads(_pod_event("x", "a", first)), option=orjson.OPT_INDENT_2)
    bus.append(bus.topics.pods, None, same)
    bus.append(bus.topics.pods, None, _pod_event("x", "a", other))
    # Inside one batch too: the second of two different events with one id.
    bus.append(bus.topics.pods, None, _pod_event("y", "b", first))
    bus.append(bus.topics.pods, None, _pod_event("y", "b", other))
    service = IngestService(bus, store)
    await service.start()
    totals = await service.run(exit_when_idle=True)
    await service.stop()
    assert totals.duplicates == 1 and totals.stored == 1
    dead = _dead(bus)
    assert [(d["reason"], d["field"]) for d in dead] == [("id_conflict", "id")] * 2
    assert "position 1" in dead[0]["message"]
    assert [e.id for e in await store.read(0, 100)] == ["x", "y"]


async def test_an_event_sent_again_with_a_later_time_is_a_duplicate_not_a_conflict(store):
    # esched publish stamps `time` when it sends: publishing an unchanged file again
    # re-sends the same events (same ids, same data) with later times.
    bus = open_bus(None, "esched.")
    spec = {"containers": _containers({"cpu": "1"})}
    bus.append(bus.topics.pods, None, _pod_event("x", "a", spec))
    await _ingest(bus, store)
    later = "2026-11-22T00:05:00Z"
    bus.append(bus.topics.pods, None, _pod_event("x", "a", spec, time=later))
    other = {"containers": _containers({"cpu": "2"})}
    bus.append(bus.topics.pods, None, _pod_event("x", "a", other, time=later))
    service = IngestService(bus, store)
    await service.start()
    totals = await service.run(exit_when_idle=True)
    await service.stop()
    assert totals.duplicates == 1 and totals.stored == 0
    assert [(d["reason"], d["field"]) for d in _dead(bus)] == [("id_conflict", "id")]
    assert [e.id for e in await store.read(0, 100)] == ["x"]


async def test_a_work_item_beyond_the_log_head_is_refused_not_waited_for(store):
    await append_events(store, node("n1", cpu="4"), pod("a", "1"))
    head = await store.head()
    bus = MemoryBus()
    replica = Replica(store, bus, "r1", config=ReplicaConfig(retry_backoff=0.001))
    await replica.start()
    try:
        topic = bus.topics.work
        forged = Message(topic, 0, 0, *work_item("pod", "t/a", 10**12))
        garbage = Message(topic, 0, 1, None, b"\xff not a work item")
        # Returns (no wait for position 10**12), and commits the batch's offsets.
        await asyncio.wait_for(replica.handle([forged, garbage]), 10)
        reasons = [(d["reason"], d["field"]) for d in _dead(bus)]
        assert reasons == [("malformed_work", None), ("position_beyond_head", "position")]
        assert head < 10**12
    finally:
        await replica.stop()


async def test_a_delete_before_its_submit_keeps_the_pod_from_running_and_shows(store):
    deleted = {
        "specversion": "1.0",
        "id": "del-a",
        "source": "t",
        "type": "esched.pod.deleted",
        "time": "2026-11-22T00:00:00Z",
        "data": {"metadata": {"name": "a", "namespace": "t"}},
    }
    await append_events(store, node("n1", cpu="4"), deleted, pod("a", "1"))
    state = await fold_log(store)
    assert state.pod("t/a") is None and state.summary()["pods"]["Pending"] == 0
    expected = {
        "submit_after_delete": {"count": 1, "first": 3},
        "unknown_pod": {"count": 1, "first": 2},
    }
    assert anomaly_report(state) == expected
    report = await audit_store(store)
    assert report["anomalies"] == expected
    assert "submit_after_delete" in format_report(report)
    # replay shows them too, in JSON and in its table (issue 19: "replay shows the
    # deleted pod Pending with no reason").
    url = store.url if isinstance(store, PostgresEventStore) else f"sqlite:///{store.path}"
    runner = CliRunner()
    # In a thread: the CLI runs its own event loop.
    shown = await asyncio.to_thread(
        runner.invoke, cli, ["replay", "--store", url, "--format", "json"]
    )
    assert shown.exit_code == 0, shown.output
    assert orjson.loads(shown.stdout)["anomalies"] == expected
    table = (await asyncio.to_thread(runner.invoke, cli, ["replay", "--store", url])).stdout
    assert "submit_after_delete" in table and "unknown_pod" in table
    follower = LogFollower(store)
    await follower.start()
    try:
        sample = REGISTRY.get_sample_value(
            "esched_fold_anomalies", {"reason": "submit_after_delete"}
        )
        assert sample == 1
    finally:
        await follower.stop()


# ---------------------------------------------------------------- a tamper-evident log


async def _tamper(store, *statements: str) -> None:
    """Run SQL against the store's database behind its back, as an intruder would."""
    if isinstance(store, PostgresEventStore):
        conn = await asyncpg.connect(store.url)
        try:
            for sql in statements:
                await conn.execute(sql)
        finally:
            await conn.close()
    else:
        db = sqlite3.connect(store.path)
        try:
            for sql in statements:
                db.execute(sql)
            db.commit()
        finally:
            db.close()


async def _committed_log(store) -> int:
    """n1 and n2, pods a and b bound to n1; returns the position of the commit."""
    await append_events(
        store,
        node("n1", cpu="4"),
        node("n2", cpu="4"),
        pod("a", "1"),
        pod("b", "1"),
        ev("c1", PLACEMENT_COMMITTED, placement("c1", [("a", "n1"), ("b", "n1")])),
    )
    return await store.head()


async def test_an_untouched_log_verifies(store):
    head = await _committed_log(store)
    report = await store.verify()
    assert report.ok and report.checked == head and report.broken_at is None
    walked = await verify_store(store.chain_rows, store.head_hash)
    assert walked.ok and walked.head_hash == report.head_hash
    assert (await audit_store(store))["ok"]


async def test_an_updated_binding_breaks_the_chain_at_its_position(store):
    head = await _committed_log(store)
    if isinstance(store, PostgresEventStore):
        await _tamper(
            store,
            f"UPDATE events SET payload = convert_to(replace(convert_from(payload, 'UTF8'),"
            f" '\"n1\"', '\"n2\"'), 'UTF8') WHERE position = {head}",
        )
    else:
        await _tamper(
            store,
            f"UPDATE events SET payload = CAST(replace(CAST(payload AS TEXT), '\"n1\"',"
            f" '\"n2\"') AS BLOB) WHERE position = {head}",
        )
    assert (await fold_log(store, use_snapshot=False)).pod("t/a")["node"] == "n2"
    report = await store.verify()
    assert not report.ok and report.broken_at == head
    walked = await verify_store(store.chain_rows, store.head_hash)
    assert (walked.ok, walked.broken_at) == (False, head)
    audit = await audit_store(store)
    assert not audit["ok"] and audit["by_kind"] == {"chain_broken": 1}
    assert audit["violations"][0]["position"] == head


@pytest.mark.parametrize("which", ["middle", "last"])
async def test_a_deleted_row_breaks_the_chain_at_its_position(store, which):
    head = await _committed_log(store)
    gone = 3 if which == "middle" else head
    await _tamper(store, f"DELETE FROM events WHERE position = {gone}")
    report = await store.verify()
    assert not report.ok and report.broken_at == gone, report
    # The client-side walk (PostgreSQL checks links in the server) finds the same.
    walked = await verify_store(store.chain_rows, store.head_hash)
    assert (walked.ok, walked.broken_at) == (False, gone)
    audit = await audit_store(store)
    assert not audit["ok"] and "chain_broken" in audit["by_kind"]
    assert any(v["position"] == gone for v in audit["violations"])


async def test_a_row_slipped_in_past_the_head_breaks_the_chain_there(store):
    # A forged decision appended behind the store's back (log_head untouched, the
    # hash copied from the row before): readers would fold it; verify names it.
    head = await _committed_log(store)
    await _tamper(
        store,
        "INSERT INTO events (position, id, type, stream, stream_version, time, recorded_at,"
        " payload, hash) SELECT position + 1, id || '-forged', type, stream,"
        " stream_version + 1, time, recorded_at, payload, hash"
        f" FROM events WHERE position = {head}",
    )
    report = await store.verify()
    assert (report.ok, report.broken_at) == (False, head + 1), report
    walked = await verify_store(store.chain_rows, store.head_hash)
    assert (walked.ok, walked.broken_at) == (False, head + 1)
    audit = await audit_store(store)
    assert not audit["ok"] and "chain_broken" in audit["by_kind"]


async def test_rows_stored_before_the_chain_are_chained_on_upgrade(store):
    await _committed_log(store)
    before = await store.verify()
    chain = "0004_hash_chain" if isinstance(store, PostgresEventStore) else "0002_hash_chain"
    # The store as it was before the chain's migration.
    await _tamper(
        store,
        "ALTER TABLE events DROP COLUMN hash",
        "ALTER TABLE log_head DROP COLUMN hash",
        f"DELETE FROM schema_migrations WHERE name = '{chain}'",
    )
    assert await store.migrate() == [chain]
    after = await store.verify()
    assert after.ok and after.head_hash == before.head_hash
    await append_events(store, pod("c", "1"))
    assert (await store.verify()).ok


async def test_an_overcommit_by_node_name_is_charged_and_reported(store):
    # Issue 19: spec.nodeName put a 100-CPU pod on a 4-CPU node and audit said ok.
    await append_events(store, node("n1", cpu="4"), pod("big", "100", node_name="n1"))
    state = await fold_log(store)
    assert state.node("n1")["allocated"]["cpu"] == 100_000  # charged to its node
    report = await audit_store(store)
    assert report["by_kind"] == {"nodename_overcommit": 1}
    assert "cpu 100000 > 4000" in report["violations"][0]["detail"]


async def test_an_id_with_the_digest_separator_is_refused_by_the_store(store):
    bad = {**pod("a", "1"), "id": "x\x1fesched.pod.deleted"}
    with pytest.raises(ValueError, match="U\\+001F"):
        await append_events(store, bad)
    assert await store.head() == 0


def test_store_verify_cli_names_the_broken_position(tmp_path):
    url = f"sqlite:///{tmp_path}/log.db"

    async def setup() -> int:
        s = open_store(url)
        await s.connect()
        await s.migrate()
        head = await _committed_log(s)
        await s.close()
        return head

    head = asyncio.run(setup())
    runner = CliRunner()
    ok = runner.invoke(cli, ["store", "verify", "--store", url], catch_exceptions=False)
    assert ok.exit_code == 0 and orjson.loads(ok.stdout)["checked"] == head
    db = sqlite3.connect(f"{tmp_path}/log.db")
    db.execute("UPDATE events SET stream = 'pod/t/other' WHERE position = 3")
    db.commit()
    db.close()
    broken = runner.invoke(cli, ["store", "verify", "--store", url], catch_exceptions=False)
    assert broken.exit_code == EXIT_FAILURE
    assert orjson.loads(broken.stdout)["broken_at"] == 3
    assert "chain broken at position 3" in broken.stderr


# ---------------------------------------------------------------- smaller items


@pytest.mark.parametrize(
    "url",
    [
        "esched:s3cretpw@db.example/esched",  # no scheme
        "postgresql://esched:pa/s3cretpw@db.example/esched",  # a '/' in the password
        "postgresql://esched:s3cretpw@db.example:notaport/esched",
    ],
)
def test_a_store_url_error_never_prints_the_password(url):
    with pytest.raises(StoreConfigError) as err:
        open_store(url)
    assert "s3cret" not in str(err.value) and "***" in str(err.value)


def test_a_newline_in_logged_input_cannot_forge_a_log_line():
    formatter = TextFormatter("%(levelname)s %(name)s: %(message)s")
    record = logging.makeLogRecord(
        {
            "msg": "label %s",
            "args": ("team\nERROR esched.commit: forged\r\x1b[2J",),
            "levelname": "INFO",
            "name": "t",
        }
    )
    line = formatter.format(record)
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert line == "INFO t: label team\\nERROR esched.commit: forged\\r\\x1b[2J"


def test_the_metrics_server_listens_on_loopback_unless_told(monkeypatch):
    from esched.services import metrics

    seen = []
    monkeypatch.setattr(metrics, "start_http_server", lambda port, addr: seen.append(addr))
    metrics.serve(9100)
    metrics.serve(9100, "0.0.0.0")
    assert seen == ["127.0.0.1", "0.0.0.0"]


def test_a_record_the_broker_refuses_exits_1_not_4():
    from esched.services.bus import BusError
    from esched.services.cli import EXIT_UNAVAILABLE, run_async

    async def too_large() -> None:
        raise BusError("kafka: MessageSizeTooLargeError", retriable=False)

    async def away() -> None:
        raise BusError("kafka: broker away", retriable=True)

    with pytest.raises(SystemExit) as local:
        run_async(too_large)
    with pytest.raises(SystemExit) as peer:
        run_async(away)
    assert (local.value.code, peer.value.code) == (EXIT_FAILURE, EXIT_UNAVAILABLE)


async def test_800_kb_of_garbage_on_the_proposals_topic_is_dead_lettered_on_kafka(
    pg_store, kafka_bootstrap, topic_prefix
):
    # Issue 19: the dead letter of such a message (base64 of all of it) was over the
    # producer's request limit, so the commit leader died, then its standby.
    await append_events(pg_store, node("n1", cpu="1"), pod("a"))
    bus = open_bus(kafka_bootstrap, topic_prefix)
    service = CommitService(pg_store, bus)
    await service.start()
    producer = bus.producer()
    await producer.start()
    garbage = b"\x00garbage" * 100_000
    proposal = {
        "specversion": "1.0",
        "id": "proposal-k1",
        "source": "replica/r1",
        "type": PLACEMENT_PROPOSED,
        "data": placement("k1", [("a", "n1")]),
    }
    await producer.send_many(
        bus.topics.proposals, [(b"x", garbage), (b"t/a", orjson.dumps(proposal))]
    )
    try:
        totals = await asyncio.wait_for(service.run(exit_when_idle=True, idle_polls=5), 60)
    finally:
        await service.stop()
        await producer.stop()
    assert (totals.committed, totals.deadlettered) == (1, 1)
    # The test's own reader: exclusive, so no group join (seconds on tansu).
    consumer = bus.consumer([bus.topics.deadletter], "checker", exclusive=True)
    await consumer.start()
    got: list = []

    async def polled() -> list:
        got.extend(await consumer.poll(500, 10))
        return got

    try:
        await eventually(polled, within=20)
    finally:
        await consumer.stop()
    dead = orjson.loads(got[0].value)
    assert dead["service"] == "commit" and dead["value_truncated"]
    assert dead["value_sha256"] == hashlib.sha256(garbage).hexdigest()


async def test_a_message_ingest_cannot_handle_is_dead_lettered_once(store, monkeypatch):
    # A bug met by one message (here: deriving its stream fails) sets that message
    # aside as `unhandled` and its offset is committed; the rest of the batch lands.
    import esched.services.ingest as ingest

    def stream_of(ev: dict) -> str:
        if ev["id"] == "odd":
            raise RuntimeError("no stream for this one")
        return f"pod/t/{ev['data']['metadata']['name']}"

    monkeypatch.setattr(ingest, "stream_of", stream_of)
    bus = open_bus(None, "esched.")
    spec = {"containers": _containers({"cpu": "1"})}
    bus.append(bus.topics.pods, None, _pod_event("odd", "a", spec))
    bus.append(bus.topics.pods, None, _pod_event("fine", "b", spec))
    service = IngestService(bus, store)
    await service.start()
    totals = await service.run(exit_when_idle=True)  # idle: nothing left to consume
    await service.stop()
    assert (totals.polled, totals.stored, totals.deadlettered) == (2, 1, 1)
    assert [(d["reason"], d["message"]) for d in _dead(bus)] == [
        ("unhandled", "RuntimeError: no stream for this one")
    ]
    assert [e.id for e in await store.read(0, 100)] == ["fine"]


@pytest.mark.parametrize("gone", [2, 3, 4, 5])
async def test_the_server_side_walk_finds_a_gap_at_any_range_boundary(pg_store, monkeypatch, gone):
    import esched.services.store.postgres as postgres

    monkeypatch.setattr(postgres, "VERIFY_BATCH", 1)  # ranges of two positions
    await _committed_log(pg_store)
    await _tamper(pg_store, f"DELETE FROM events WHERE position = {gone}")
    report = await pg_store.verify()
    assert (report.ok, report.broken_at) == (False, gone), report
