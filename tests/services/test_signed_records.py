"""Signed internal records (issue 19, part 2): proposals and work items carry an
HMAC-SHA256 signature header; the commit service and the replicas refuse unsigned or
badly signed ones to the dead-letter topic and commit their offsets, so a broker
client without the key can neither place, evict nor stall.

The forged-proposal tests write to a real broker (tansu, or ``$ESCHED_TEST_KAFKA``)
as an outside client would, against real PostgreSQL; the replica tests run on both
stores (``store``: SQLite and PostgreSQL).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
from collections.abc import AsyncIterator

import orjson
import pytest

from esched.schemas.events import PLACEMENT_COMMITTED, PLACEMENT_PROPOSED
from esched.services.bus import Message, open_bus
from esched.services.bus.memory import MemoryBus
from esched.services.bus.signing import (
    HEADER,
    KEYS_ENV,
    KEYS_FILE_ENV,
    Keyring,
    SigningConfigError,
    SigningKey,
    check,
    load_keyring,
    parse_keys,
    split_signed,
    warn_if_unsigned,
)
from esched.services.commit import CommitService
from esched.services.dispatch import work_item
from esched.services.replica import Replica, ReplicaConfig
from support.aio import eventually
from support.events import append_events, ev, node, placement, pod

SECRET_OLD = "old-secret-0123456789abcdef0123456789abcdef"
SECRET_NEW = "new-secret-fedcba9876543210fedcba9876543210"
OLD = Keyring([SigningKey("k1", SECRET_OLD.encode())])
#: After a rotation: k2 signs, k1 is still accepted.
ROTATED = Keyring([SigningKey("k2", SECRET_NEW.encode()), SigningKey("k1", SECRET_OLD.encode())])
#: An attacker's guess at the current key id, with a secret of its own.
FORGER = Keyring([SigningKey("k2", b"attacker-secret-attacker-secret-attacker")])


def _msg(value: bytes, headers=()) -> Message:
    return Message("esched.proposals", 0, 0, b"k", value, 0, tuple(headers))


# ---------------------------------------------------------------------- the keyring


def test_a_signature_is_the_hmac_sha256_of_the_value_under_the_current_key_id():
    value = b'{"pod": "t/a", "position": 3}'
    ((name, sig),) = ROTATED.sign(value)
    expected = hmac.new(SECRET_NEW.encode(), value, hashlib.sha256).hexdigest()
    assert (name, sig) == (HEADER, f"k2:{expected}".encode())
    assert ROTATED.refusal(_msg(value, ROTATED.sign(value))) is None


@pytest.mark.parametrize(
    ("key", "data", "mac"),
    [
        # RFC 4231, section 4: HMAC-SHA-256 test cases 1, 2 (a key shorter than the
        # hash), 6 and 7 (keys longer than the 64-byte block: hashed first).
        (
            b"\x0b" * 20,
            b"Hi There",
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
        ),
        (
            b"Jefe",
            b"what do ya want for nothing?",
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
        ),
        (
            b"\xaa" * 131,
            b"Test Using Larger Than Block-Size Key - Hash Key First",
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
        ),
        (
            b"\xaa" * 131,
            b"This is a test using a larger than block-size key and a larger than "
            b"block-size data. The key needs to be hashed before being used by the "
            b"HMAC algorithm.",
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
        ),
    ],
)
def test_signatures_are_rfc_4231_hmac_sha256(key, data, mac):
    keyring = Keyring([SigningKey("k", key)])
    assert keyring.signature(data) == b"k:" + mac.encode()
    assert keyring.refusal(Message("t", 0, 0, None, data, 0, keyring.sign(data))) is None


def test_a_record_signed_with_the_previous_key_is_accepted_while_rotating():
    value = b"proposal"
    assert ROTATED.refusal(_msg(value, OLD.sign(value))) is None
    # Once the old key is dropped, its signatures are refused.
    done = Keyring([SigningKey("k2", SECRET_NEW.encode())])
    reason, text = done.refusal(_msg(value, OLD.sign(value)))
    assert reason == "bad_signature" and "unknown signing key id b'k1'" in text


@pytest.mark.parametrize(
    ("headers", "reason", "words"),
    [
        ((), "unsigned", "no esched-sig header"),
        ((("ce_type", b"x"),), "unsigned", "no esched-sig header"),
        (((HEADER, b"k2:" + b"0" * 64),), "bad_signature", "does not match"),
        (((HEADER, b"nokid"),), "bad_signature", "unknown signing key id"),
        (((HEADER, None),), "bad_signature", "unknown signing key id"),
        (((HEADER, b"k2:" + b"0" * 300),), "bad_signature", "header of 303 bytes"),
        (
            ((HEADER, ROTATED.signature(b"v")), (HEADER, ROTATED.signature(b"v"))),
            "bad_signature",
            "more than one",
        ),
    ],
    ids=["none", "other-header", "wrong-mac", "no-kid", "empty", "huge", "twice"],
)
def test_records_without_a_valid_signature_are_refused_with_a_reason(headers, reason, words):
    got = ROTATED.refusal(_msg(b"v", headers))
    assert got is not None and got[0] == reason and words in got[1]


def test_a_polled_batch_splits_into_signed_records_and_dead_letters_of_the_others():
    msgs = [
        _msg(b"a", ROTATED.sign(b"a")),
        _msg(b"b"),
        _msg(b"c", FORGER.sign(b"c")),
        _msg(b"d", OLD.sign(b"d")),
        _msg(b"e", ROTATED.sign(b"not e")),
    ]
    accepted, dead = split_signed(ROTATED, msgs)
    assert [m.value for m in accepted] == [b"a", b"d"]
    assert [(m.value, reason, field) for m, reason, _text, field in dead] == [
        (b"b", "unsigned", "headers"),
        (b"c", "bad_signature", "headers"),
        (b"e", "bad_signature", "headers"),
    ]
    assert [text for _m, _r, text, _f in dead] == [
        ROTATED.refusal(m)[1] for m in msgs[1:3] + msgs[4:]
    ]
    assert split_signed(None, msgs) == (msgs, [])


def test_a_batch_signed_at_once_is_signed_as_each_record_alone():
    records = [(b"k1", b"one"), (None, b"two" * 100), (b"k3", b"")]
    expected = [
        (
            k,
            v,
            ((HEADER, b"k2:" + hmac.new(SECRET_NEW.encode(), v, "sha256").hexdigest().encode()),),
        )
        for k, v in records
    ]
    assert ROTATED.signed(records) == expected


def test_a_signature_of_other_bytes_or_of_a_forger_does_not_verify():
    signed = ROTATED.sign(b"place t/a on n1")
    assert ROTATED.refusal(_msg(b"place t/a on n2", signed))[0] == "bad_signature"
    assert ROTATED.refusal(_msg(b"v", FORGER.sign(b"v")))[0] == "bad_signature"


def test_without_keys_every_record_is_accepted_and_a_warning_says_so(caplog):
    assert check(None, _msg(b"v")) is None
    with caplog.at_level(logging.WARNING):
        warn_if_unsigned(None, "commit")
        warn_if_unsigned(ROTATED, "commit")
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["commit"]
    assert "any client of the broker can place and evict" in caplog.records[0].getMessage()


def test_keys_parse_current_first_with_comments_and_commas(tmp_path):
    text = f"# rotated 2 -> current\nk2:{SECRET_NEW}\n\nk1:{SECRET_OLD}\n"
    assert parse_keys(text, "f").kids == ("k2", "k1")
    assert parse_keys(f"k2:{SECRET_NEW},k1:{SECRET_OLD}", "env").kids == ("k2", "k1")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "no keys"),
        ("just-a-secret-without-an-id-0123456789", "not kid:secret"),
        ("k1:short-secret", "shorter than 32 bytes"),
        (f"k1:{SECRET_OLD}\nk1:{SECRET_NEW}", "repeat"),
        (f"k 1:{SECRET_OLD}", "printable ASCII"),
    ],
)
def test_unusable_keys_are_a_configuration_error_that_never_shows_a_secret(text, words):
    with pytest.raises(SigningConfigError, match=words) as err:
        parse_keys(text, "keys")
    for secret in ("short-secret", SECRET_OLD, SECRET_NEW, "just-a-secret"):
        assert secret not in str(err.value)


def test_keys_come_from_the_file_option_then_the_file_env_then_the_env(tmp_path):
    option = tmp_path / "option.keys"
    option.write_text(f"opt:{SECRET_NEW}\n")
    from_env = tmp_path / "env.keys"
    from_env.write_text(f"envfile:{SECRET_NEW}\n")
    env = {KEYS_FILE_ENV: str(from_env), KEYS_ENV: f"inline:{SECRET_OLD}"}
    assert load_keyring(str(option), env).kids == ("opt",)
    assert load_keyring(None, env).kids == ("envfile",)
    assert load_keyring(None, {KEYS_ENV: f"inline:{SECRET_OLD}"}).kids == ("inline",)
    assert load_keyring(None, {}) is None
    with pytest.raises(SigningConfigError, match=r"missing\.keys"):
        load_keyring(str(tmp_path / "missing.keys"), {})


def test_a_keyring_shows_its_key_ids_never_its_secrets():
    shown = repr(ROTATED) + repr(ROTATED.current)
    assert "k2" in shown and SECRET_NEW not in shown and SECRET_OLD not in shown


# ---------------------------------------------------------------------- replicas


def _dead(bus: MemoryBus) -> list[dict]:
    return [orjson.loads(m.value) for m in bus.log(bus.topics.deadletter)]


@contextlib.asynccontextmanager
async def _signed_system(store, keyring: Keyring) -> AsyncIterator[tuple[Replica, MemoryBus]]:
    """A replica and the commit service on an in-process bus with ``keyring``: the
    replica's proposals and dead letters go through the bus."""
    bus = open_bus(None, keyring=keyring)
    assert isinstance(bus, MemoryBus)
    commit = CommitService(store, bus)
    await commit.start()
    running = asyncio.create_task(commit.run())
    replica = Replica(store, bus, "r1", config=ReplicaConfig(retry_backoff=0.001))
    await replica.start()
    try:
        yield replica, bus
    finally:
        await replica.stop()
        await commit.stop()
        await asyncio.wait_for(running, 10)


async def _bound_pods(store) -> set[str]:
    return {
        b["pod"]
        for e in await store.read(0, 1000)
        if e.type == PLACEMENT_COMMITTED
        for b in orjson.loads(e.payload)["data"]["bindings"]
    }


async def test_forged_work_items_are_dead_lettered_and_a_signed_one_is_placed(store):
    await append_events(store, node("n1", cpu="4"), pod("a"), pod("b"), pod("c"), pod("d"))
    head = await store.head()
    async with _signed_system(store, ROTATED) as (replica, bus):
        topic = bus.topics.work
        items = {p: work_item("pod", f"t/{p}", head) for p in "abcd"}
        msgs = [
            Message(topic, 0, 0, *items["a"]),  # unsigned
            Message(topic, 0, 1, *items["b"], 0, FORGER.sign(items["b"][1])),
            Message(topic, 0, 2, *items["c"], 0, ROTATED.sign(items["c"][1])),
            Message(topic, 0, 3, *items["d"], 0, OLD.sign(items["d"][1])),  # previous key
        ]
        await asyncio.wait_for(replica.handle(msgs), 20)
        dead = _dead(bus)
        assert [(d["reason"], d["field"], d["origin"]["offset"]) for d in dead] == [
            ("unsigned", "headers", 0),
            ("bad_signature", "headers", 1),
        ]
        assert await _bound_pods(store) == {"t/c", "t/d"}


async def test_a_forged_work_item_cannot_stall_a_replica_with_a_far_position(store):
    # Unsigned, it is refused before its position is looked at: no wait, no store read.
    await append_events(store, node("n1", cpu="4"), pod("a"))
    async with _signed_system(store, ROTATED) as (replica, bus):
        forged = Message(bus.topics.work, 0, 0, *work_item("pod", "t/a", 10**12))
        await asyncio.wait_for(replica.handle([forged]), 10)
        assert [d["reason"] for d in _dead(bus)] == ["unsigned"]


# ---------------------------------------------------------------------- commit on Kafka


def _proposal(pid: str, binds: list[tuple[str, str]], **kw) -> bytes:
    return orjson.dumps(
        {
            "specversion": "1.0",
            "id": f"proposal-{pid}",
            "source": "replica/r1",
            "type": PLACEMENT_PROPOSED,
            "data": placement(pid, binds, **kw),
        }
    )


async def _deadletters(bus, want: int) -> list[dict]:
    # The test's own reader: exclusive, so no group join (seconds on tansu).
    consumer = bus.consumer([bus.topics.deadletter], "checker", exclusive=True)
    await consumer.start()
    got: list = []

    async def polled() -> bool:
        got.extend(await consumer.poll(500, 10))
        return len(got) >= want

    try:
        await eventually(polled, within=20)
    finally:
        await consumer.stop()
    return [orjson.loads(m.value) for m in got]


@pytest.mark.kafka
@pytest.mark.postgres
async def test_proposals_from_a_client_without_the_key_are_dead_lettered_not_committed(
    pg_store, kafka_bootstrap, topic_prefix
):
    """Issue 19: a proposal written by an outside client (claiming to be replica r1)
    was committed, and a forged preemption evicted running pods."""
    await append_events(
        pg_store,
        node("n1", cpu="1"),
        node("n2", cpu="4"),
        pod("a"),
        pod("b"),
        pod("c"),
        pod("d"),
        pod("e", priority=0),
    )
    # e runs on n1; a forged preemption names it as the victim of a.
    await append_events(
        pg_store,
        ev(
            "decision-seed-e", PLACEMENT_COMMITTED, placement("seed-e", [("e", "n1")], replica="r0")
        ),
    )
    head = await pg_store.head()
    bus = open_bus(kafka_bootstrap, topic_prefix, keyring=ROTATED)
    service = CommitService(pg_store, bus)
    await service.start()
    outsider = open_bus(kafka_bootstrap, topic_prefix).producer()  # no keys
    await outsider.start()
    forged_eviction = _proposal("p-a", [("a", "n1")], position=head, victims=[("e", "n1")])
    records = [
        (b"t/a", forged_eviction, ()),
        (b"t/b", _proposal("p-b", [("b", "n2")], position=head), FORGER.sign(b"other")),
        (
            b"t/c",
            _proposal("p-c", [("c", "n2")], position=head),
            OLD.sign(_proposal("p-c", [("c", "n2")], position=head)),
        ),
        (
            b"t/d",
            _proposal("p-d", [("d", "n2")], position=head),
            ROTATED.sign(_proposal("p-d", [("d", "n2")], position=head)),
        ),
    ]
    try:
        await outsider.send_with_headers(bus.topics.proposals, records)
        totals = await asyncio.wait_for(service.run(exit_when_idle=True, idle_polls=5), 60)
    finally:
        await service.stop()
        await outsider.stop()
    assert (totals.committed, totals.deadlettered) == (2, 2)
    assert await _bound_pods(pg_store) == {"t/c", "t/d", "t/e"}
    assert not [e for e in await pg_store.read(0, 1000) if e.type == "esched.pod.evicted"]
    dead = await _deadletters(bus, 2)
    assert sorted((d["reason"], d["service"]) for d in dead) == [
        ("bad_signature", "commit"),
        ("unsigned", "commit"),
    ]


@pytest.mark.kafka
@pytest.mark.postgres
async def test_the_services_sign_what_they_send_and_place_through_kafka(
    pg_url, kafka_bootstrap, topic_prefix
):
    """`esched up --kafka` with keys: the dispatcher's work (record batches of 32 and
    more take the batch path) and the replicas' proposals are signed and accepted;
    nothing is dead-lettered."""
    from esched.services.bus.base import TopicNames
    from esched.services.up import Up, UpConfig, generated_records

    records = list(generated_records(4, 80, TopicNames(topic_prefix), seed=5))
    runner = Up(
        UpConfig(
            store=pg_url,
            kafka=kafka_bootstrap,
            keyring=ROTATED,
            topic_prefix=topic_prefix,
            exit_when_idle=True,
            progress_every=0,
            group_prefix=topic_prefix,
        ),
        records,
    )
    summary = await asyncio.wait_for(runner.run(), 50)
    assert summary["placed"] > 0
    assert summary["placed"] + summary["unschedulable"] == 80
    assert summary["commit"]["deadlettered"] == 0
    assert summary["commit"]["committed"] == summary["proposals"] - summary["conflicts"]


@pytest.mark.kafka
@pytest.mark.postgres
async def test_the_commit_command_takes_its_keys_from_the_environment(
    pg_store, pg_url, kafka_bootstrap, topic_prefix
):
    """`esched commit` as an OS process, keys in ``$ESCHED_SIGNING_KEYS``: the
    unsigned proposal is dead-lettered, the signed one committed."""
    from esched.services.procs import run_esched, service_env

    await append_events(pg_store, node("n1", cpu="4"), pod("a"), pod("b"))
    head = await pg_store.head()
    bus = open_bus(kafka_bootstrap, topic_prefix)
    await bus.ensure_topics()
    producer = bus.producer()
    await producer.start()
    signed = _proposal("p-b", [("b", "n1")], position=head)
    try:
        await producer.send_with_headers(
            bus.topics.proposals,
            [
                (b"t/a", _proposal("p-a", [("a", "n1")], position=head), ()),
                (b"t/b", signed, OLD.sign(signed)),
            ],
        )
    finally:
        await producer.stop()
    env = {
        **service_env(pg_url, kafka_bootstrap, topic_prefix),
        "ESCHED_SIGNING_KEYS": f"k2:{SECRET_NEW},k1:{SECRET_OLD}",
    }
    done = await asyncio.to_thread(
        run_esched, ["commit", "--exit-when-idle", "--group", f"{topic_prefix}c"], env, 90
    )
    summary = orjson.loads(done.stdout)
    assert (summary["committed"], summary["deadlettered"]) == (1, 1)
    assert await _bound_pods(pg_store) == {"t/b"}
    assert b"no signing keys" not in done.stderr and SECRET_NEW.encode() not in done.stderr
