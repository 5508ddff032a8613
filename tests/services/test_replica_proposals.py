"""A replica's proposals on the wire: one-pod proposals are joined from a template's
pieces, so each record must be byte for byte what ``orjson.dumps`` of its envelope
writes (the commit service, the dead-letter path and any consumer read that), signed
over those bytes, keyed as every proposal is; so are a one-pod gang's (its gang in the
template); larger gangs and evictions go through the envelope. Runs on both stores (``store``)."""

from __future__ import annotations

import asyncio

import orjson

from esched.core.schedule import Placement, Target
from esched.schemas.events import PLACEMENT_COMMITTED, proposal_envelope, proposal_key
from esched.services.bus import Message, open_bus
from esched.services.bus.memory import MemoryBus
from esched.services.bus.signing import Keyring, SigningKey
from esched.services.commit import CommitService
from esched.services.dispatch import work_item
from esched.services.replica import Replica, ReplicaConfig
from esched.services.replica._records import proposal_records
from esched.services.replica.proposals import binding, proposal_data, proposal_parts
from support.aio import eventually
from support.events import append_events, node, pod, podgroup

KEYRING = Keyring([SigningKey("k1", b"0123456789abcdef0123456789abcdef")])


async def _place(
    store, replica_id: str, pods: list[dict], work: list[tuple[str, str]], *, sent: int = 0
) -> list:
    """Place ``work`` ((kind, key) items) with one replica and the commit service on
    an in-process bus; the proposal records it sent. With ``sent``, only until that
    many are sent (the commit service refuses names that are not DNS names: such
    proposals are never decided)."""
    await append_events(store, node("n-1", cpu="64", pods="100"), *pods)
    head = await store.head()
    bus = open_bus(None, keyring=KEYRING)
    assert isinstance(bus, MemoryBus)
    commit = CommitService(store, bus)
    await commit.start()
    running = asyncio.create_task(commit.run())
    replica = Replica(store, bus, replica_id, config=ReplicaConfig(retry_backoff=0.001))
    await replica.start()
    msgs = []
    for i, (kind, key) in enumerate(work):
        k, v = work_item(kind, key, head)
        msgs.append(Message(bus.topics.work, 0, i, k, v, 0, KEYRING.sign(v)))
    handling = asyncio.create_task(replica.handle(msgs))
    try:
        if sent:
            await eventually(lambda: len(bus.log(bus.topics.proposals)) >= sent, within=20)
        else:
            await asyncio.wait_for(asyncio.shield(handling), 20)
            assert not bus.log(bus.topics.deadletter)
    finally:
        handling.cancel()
        await asyncio.gather(handling, return_exceptions=True)
        await replica.stop()
        await commit.stop()
        await asyncio.wait_for(running, 10)
    return bus.log(bus.topics.proposals)


def _check_records(records: list, replica_id: str) -> None:
    """Each record is its envelope's encoding, keyed and signed as every proposal."""
    for m in records:
        env = orjson.loads(m.value)
        data = env["data"]
        assert m.value == orjson.dumps(proposal_envelope(data, env["source"], time=env["time"]))
        assert m.key == proposal_key(data).encode()
        assert data["replica"] == replica_id and env["source"].endswith(replica_id)
        assert data["proposal"].startswith(replica_id + "-")
        assert KEYRING.refusal(m) is None


async def test_each_proposal_record_is_the_bytes_its_envelope_encodes_to(store):
    pods = [pod(name) for name in ("a", "b-1", "c.2")]
    pods += [podgroup("g", 2), pod("g1", gang="g"), pod("g2", gang="g")]
    work = [("pod", f"t/{p}") for p in ("a", "b-1", "c.2")] + [("gang", "t/g")]
    records = await _place(store, "r1", pods, work)
    assert len(records) == 4
    _check_records(records, "r1")
    gangs = [orjson.loads(m.value)["data"] for m in records if b'"gang":null' not in m.value]
    assert [(g["gang"], len(g["bindings"])) for g in gangs] == [("t/g", 2)]
    committed = [e for e in await store.read(0, 100) if e.type == PLACEMENT_COMMITTED]
    proposed = {orjson.loads(m.value)["data"]["proposal"] for m in records}
    assert {orjson.loads(e.payload)["data"]["proposal"] for e in committed} == proposed


async def test_names_and_ids_json_escapes_are_written_as_the_envelope_writes_them(store):
    names = ("b-ü", 'c"q', "d\\e", "e\u2028")
    records = await _place(
        store, 'r"ü\\1', [pod(n) for n in names], [("pod", f"t/{n}") for n in names], sent=4
    )
    _check_records(records, 'r"ü\\1')
    assert {orjson.loads(m.value)["data"]["bindings"][0]["pod"] for m in records} == {
        f"t/{n}" for n in names
    }


async def test_a_one_pod_gangs_record_is_the_bytes_its_envelope_encodes_to(store):
    # A one-pod Volcano Job's pod: joined from the gang template, keyed by its gang.
    pods = [podgroup("j1", 1), pod("j1-w-0", gang="j1"), podgroup('j"ü', 1)]
    pods += [pod("j2-w-0", gang='j"ü'), pod("a")]
    work = [("gang", "t/j1"), ("gang", 't/j"ü'), ("pod", "t/a")]
    records = await _place(store, "r1", pods, work, sent=3)
    assert len(records) == 3
    _check_records(records, "r1")
    by_key = {m.key: orjson.loads(m.value)["data"] for m in records}
    assert {k: (d["gang"], [b["pod"] for b in d["bindings"]]) for k, d in by_key.items()} == {
        b"t/j1": ("t/j1", ["t/j1-w-0"]),
        't/j"ü'.encode(): ('t/j"ü', ["t/j2-w-0"]),
        b"t/a": (None, ["t/a"]),
    }


def test_one_pod_gangs_are_joined_from_the_template_and_larger_ones_from_the_envelope() -> None:
    source, stamp = "esched/replica/r1", "2026-01-01T00:00:00Z"
    one = Placement(Target("gang", "t/j1"), "t/j1", [("t/j1-w-0", "n1", ())])
    two = Placement(Target("gang", "t/g"), "t/g", [("t/g1", "n1", ()), ("t/g2", "n2", ())])
    res = {"cpu": 1000, "pods": 1}
    pids = ["r1-0abc-1", "r1-0abc-2"]
    enveloped: list[int] = []

    def other(i: int) -> tuple[bytes, bytes]:
        enveloped.append(i)
        return b"k", b"v"

    records = proposal_records(
        proposal_parts("r1", source, 42, stamp),
        lambda: proposal_parts("r1", source, 42, stamp, gang=True),
        pids,
        [one, two],
        range(2),
        lambda pod: 0,
        {},
        {},
        True,
        lambda cid: orjson.dumps(res),
        other,
    )
    assert enveloped == [1]
    data = proposal_data(pids[0], "r1", 42, "t/j1", [binding("t/j1-w-0", "n1", res, ())])
    assert records[0] == (b"t/j1", orjson.dumps(proposal_envelope(data, source, time=stamp)))


def test_a_gang_template_splits_only_where_its_stand_ins_are() -> None:
    parts = proposal_parts("r1", "esched/replica/r1", 42, "2026-01-01T00:00:00Z", gang=True)
    assert parts is not None and len(parts) == 7
    pid, gang, pod_, node_, res = "r1-0abc-1f", 't/j"1', 't/j"1-w-0', "n1", {"cpu": 1000}
    fields = (pid.encode(), pid.encode(), orjson.dumps(gang), orjson.dumps(pod_))
    fields += (orjson.dumps(node_), orjson.dumps(res))
    joined = b"".join(b for pair in zip(parts, (*fields, b""), strict=True) for b in pair)
    data = proposal_data(pid, "r1", 42, gang, [binding(pod_, node_, res, ())])
    env = proposal_envelope(data, "esched/replica/r1", time="2026-01-01T00:00:00Z")
    assert joined == orjson.dumps(env)


def test_a_template_splits_only_where_its_stand_ins_are() -> None:
    parts = proposal_parts("r1", "esched/replica/r1", 42, "2026-01-01T00:00:00Z")
    assert parts is not None
    pid, pod_, node_, res = "r1-0abc-1f", 't/p"1', "n1", {"cpu": 1000, "pods": 1}
    joined = b"".join(
        (
            parts[0],
            pid.encode(),
            parts[1],
            pid.encode(),
            parts[2],
            orjson.dumps(pod_),
            parts[3],
            orjson.dumps(node_),
            parts[4],
            orjson.dumps(res),
            parts[5],
        )
    )
    data = proposal_data(pid, "r1", 42, None, [binding(pod_, node_, res, ())])
    env = proposal_envelope(data, "esched/replica/r1", time="2026-01-01T00:00:00Z")
    assert joined == orjson.dumps(env)


def test_own_decisions_read_a_commit_off_its_bytes_and_anything_else_whole() -> None:
    # The replica reads its decisions' type, proposal id and a rejection's reason:
    # a commit's are read off the bytes, the rest (and odd bytes) decoded by orjson.
    from esched.core.validation import Verdict
    from esched.services.commit.decisions import decision_event
    from esched.services.replica.base import own_decision

    data = proposal_data("r0-ab-1", "r0", 7, None, [binding("ns/a", "n-1", {"cpu": 1}, ())])
    committed = orjson.dumps(decision_event(data, Verdict(True)))
    assert own_decision(committed) == {"type": PLACEMENT_COMMITTED, "data": {"proposal": "r0-ab-1"}}
    rejected = orjson.dumps(decision_event(data, Verdict(False, "Conflict", "taken")))
    assert own_decision(rejected) == orjson.loads(rejected)
    escaped = orjson.dumps(decision_event(dict(data, proposal="r0-\u00e9-1"), Verdict(True)))
    assert own_decision(escaped) == orjson.loads(escaped)
    assert own_decision(escaped)["data"]["proposal"] == "r0-\u00e9-1"
