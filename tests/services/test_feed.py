"""Replicas that follow the feed (``ReplicaConfig.follow = "feed"``): the dispatcher
publishes claims records and the events replicas fold themselves (services/store/feed.py);
replicas in that mode place every pod, the committed decisions pass the audit, and each
replica's state holds the whole fold's bindings."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import orjson
import pytest

from esched.core import PHASE_RUNNING, ClusterState, Placer, claims_record
from esched.schemas.events import PLACEMENT_COMMITTED, PLACEMENT_REJECTED, POD_DELETED, stream_of
from esched.services.audit import audit_store
from esched.services.bus.base import TopicNames
from esched.services.event_files import record_for_event
from esched.services.replica import ReplicaConfig
from esched.services.replica.feed import FeedFollower
from esched.services.store import NewEvent, open_store
from esched.services.store.base import StoredEvent
from esched.services.store.feed import (
    CLAIMS,
    COMMITS,
    DECISIONS,
    FOLD,
    MAY_MAKE_WORK,
    FeedError,
    FeedWriter,
    commits_mentioning,
    decisions_mentioning,
    decisions_part,
    decode_message,
    encode_message,
)
from esched.services.store.snapshots import fold_log
from esched.services.up import Up, UpConfig, generated_records
from support.aio import eventually
from support.events import ev, node, placement, pod

_T = datetime(2026, 1, 1, tzinfo=UTC)


def _rows(events: list[dict], first: int = 1) -> list[StoredEvent]:
    return [
        StoredEvent(p, e["id"], e["type"], "s", 1, None, _T, orjson.dumps(e))
        for p, e in zip(itertools.count(first), events, strict=False)
    ]


def committed(pid: str, name: str, node_name: str) -> dict:
    return ev(pid, PLACEMENT_COMMITTED, placement(pid, [(name, node_name)]))


def bound(state: ClusterState) -> dict[str, tuple[str, dict]]:
    """Every bound pod: its node and allocation."""
    out = {}
    for key, p in state.pod_index.items():
        if state.phase_of(p) == PHASE_RUNNING:
            rec = state.pod(key)
            out[key] = (rec["node"], rec["allocated"])
    return out


def placeable_pending(state: ClusterState) -> list[str]:
    """Pending pods (outside gangs) that some node would take now."""
    placer = Placer(state)
    return [
        p
        for p in state.pending_pods()
        if state.pod(p)["gang"] is None and placer.place(p, assume=False) is not None
    ]


def test_a_writer_cuts_a_record_before_each_event_replicas_fold() -> None:
    st = ClusterState()
    writer = FeedWriter(st)
    assert st.claims_journal == []
    # the first message, though nothing was folded: where the writer begins
    assert [decode_message(m) for m in writer.take()] == [(0, 0, MAY_MAKE_WORK, [])]
    assert writer.take() == []
    events = [
        node("n1", "4"),
        pod("a"),
        committed("p1", "a", "n1"),
        node("n2", "4"),
        pod("b"),
    ]
    writer.fold(_rows(events))
    (msg,) = writer.take()
    after, upto, flags, parts = decode_message(msg)
    assert (after, upto, flags & MAY_MAKE_WORK) == (0, 5, MAY_MAKE_WORK)
    # (a record's position: the first event whose fold it may hold, here the node's,
    # whose removal would release its pods)
    assert [(kind, position) for kind, position, _ in parts] == [
        (FOLD, 1),
        (CLAIMS, 1),
        (COMMITS, 3),
        (FOLD, 4),
    ]
    assert writer.take() == []
    # a follower: the events it folds and the claims, in order, leave it the bindings
    follower = ClusterState()
    for kind, position, data in parts:
        if kind == FOLD:
            follower.apply_payloads([(position, data)])
        elif kind == CLAIMS:
            follower.apply_claims(data)
    assert bound(follower) == bound(st) == {"t/a": ("n1", bound(st)["t/a"][1])}
    # committed placements alone: nothing that may make work
    events_2 = [committed("p2", "b", "n2")]
    writer.fold(_rows(events_2, 6))
    (msg,) = writer.take()
    after, upto, flags, parts = decode_message(msg)
    assert (after, upto, flags, [k for k, _p, _d in parts]) == (5, 6, 0, [CLAIMS, COMMITS])
    # a committed placement: its proposal id (its bindings are in the record)
    assert decisions_mentioning(parts[1][2], None) == [(6, b"p2")]
    assert decisions_mentioning(parts[1][2], b"nobody") == []
    # a rejection: its payload
    rejected = ev("p3", PLACEMENT_REJECTED, {"proposal": "p3", "reason": "x"})
    writer.fold(_rows([rejected], 7))
    (msg,) = writer.take()
    _a, _u, _f, parts = decode_message(msg)
    assert [(k, decisions_mentioning(d, None)) for k, _p, d in parts] == [
        (DECISIONS, [(7, orjson.dumps(rejected))])
    ]
    with pytest.raises(FeedError):
        decode_message(msg[:-1])


def test_a_replica_finds_its_decisions_in_a_part_by_its_prefix() -> None:
    decisions = [(7, b'{"proposal":"a-1"}'), (9, b'{"proposal":"b-1"}'), (12, b'{"x":"a-2"}')]
    part = decisions_part(decisions)
    assert decisions_mentioning(part, None) == decisions
    assert decisions_mentioning(part, b'"a-') == [decisions[0], decisions[2]]
    assert decisions_mentioning(part, b"b-1") == [decisions[1]]
    assert decisions_mentioning(decisions_part([]), b"a") == []
    with pytest.raises(FeedError):
        decisions_mentioning(part[:3], b"a")


def test_a_mention_split_across_two_decisions_is_in_neither() -> None:
    decisions = [(3, b'{"p":"xa'), (4, b'-1"}'), (5, b'{"p":"a-1"}')]
    part = decisions_part(decisions)
    assert decisions_mentioning(part, b"a-1") == [decisions[2]]
    assert decisions_mentioning(decisions_part(decisions[:2]), b"a-1") == []


def test_a_replica_reads_its_proposal_ids_off_a_commits_part_as_their_json_text() -> None:
    pids = ["a-1", 'a-"q"', "a-\\x", "a-\u00e9t\u00e9", "b-1", "a-\u2603\n"]
    part = decisions_part([(10 + i, orjson.dumps(pid)[1:-1]) for i, pid in enumerate(pids)])
    assert commits_mentioning(part, None) == [(10 + i, pid) for i, pid in enumerate(pids)]
    assert commits_mentioning(part, b"a-") == [
        (10 + i, pid) for i, pid in enumerate(pids) if pid.startswith("a-")
    ]
    assert commits_mentioning(part, b"c-") == []
    with pytest.raises(FeedError):
        commits_mentioning(part[:5], None)


def test_every_cut_or_bad_offset_of_a_message_is_refused() -> None:
    part = decisions_part([(7, b"p-1"), (8, b"p-22")])
    msg = encode_message(4, 9, MAY_MAKE_WORK, [(CLAIMS, 5, b"abc"), (COMMITS, 7, part)])
    assert decode_message(msg) == (4, 9, MAY_MAKE_WORK, [(CLAIMS, 5, b"abc"), (COMMITS, 7, part)])
    # (a bus client's value in another buffer reads the same)
    assert decode_message(bytearray(msg)) == decode_message(memoryview(msg)) == decode_message(msg)
    for cut in range(len(msg)):
        with pytest.raises(FeedError):
            decode_message(msg[:cut])
    with pytest.raises(FeedError):
        decode_message(encode_message(4, 9, 0, [(7, 5, b"abc")]))  # an unknown kind
    with pytest.raises(FeedError):
        decode_message(encode_message(9, 4, 0, []))  # ends before it begins
    # offsets that go back, or beyond the part
    bad = part[:4] + (3).to_bytes(4, "little") + (1).to_bytes(4, "little") + part[12:]
    with pytest.raises(FeedError):
        decisions_mentioning(bad, b"p-")
    with pytest.raises(FeedError):
        commits_mentioning(part[:8] + (99).to_bytes(4, "little") + part[12:], None)


def test_a_writer_cuts_messages_at_its_size_between_records() -> None:
    st = ClusterState()
    writer = FeedWriter(st, max_bytes=1)
    writer.take()
    events = [node("n1", "64", pods="100")]
    for i in range(4):
        events += [pod(f"p{i}"), committed(f"x{i}", f"p{i}", "n1"), node(f"m{i}")]
    writer.fold(_rows(events))
    messages = [decode_message(m) for m in writer.take()]
    assert len(messages) > 4
    # contiguous ranges, from the state's start to its position
    assert messages[0][0] == 0 and messages[-1][1] == 13
    assert all(a[1] == b[0] for a, b in itertools.pairwise(messages))
    follower = ClusterState()
    for _a, _u, _f, parts in messages:
        for kind, position, data in parts:
            if kind == FOLD:
                follower.apply_payloads([(position, data)])
            elif kind == CLAIMS:
                follower.apply_claims(data)
    assert bound(follower) == bound(st) and len(bound(st)) == 4


async def _up(url: str, records: list, **config) -> tuple[dict, Up]:
    runner = Up(UpConfig(store=url, progress_every=0, exit_when_idle=True, **config), records)
    return await runner.run(), runner


async def _whole_fold_and_audit(url: str) -> tuple[ClusterState, dict[str, Any]]:
    """The store's whole fold and its audit report, read after a run."""
    es = open_store(url)
    await es.connect()
    try:
        return await fold_log(es), await audit_store(es)
    finally:
        await es.close()


async def test_replicas_following_the_feed_place_every_pod_and_the_audit_passes(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'feed.sqlite'}"
    records = list(generated_records(12, 400, TopicNames(), seed=3))
    summary, runner = await _up(url, records, replicas=3, follow="feed")
    whole, report = await _whole_fold_and_audit(url)
    assert report["ok"], report["violations"][:5]
    running = summary["replay"]["pods"]["Running"]
    assert running == summary["placed"] > 100
    assert running + summary["replay"]["pods"].get("Pending", 0) == 400
    assert summary["dispatch"]["feed_messages"] > 0
    for replica in runner.replicas:
        assert replica.config.follow == "feed"
        stats = replica.stats()
        assert stats["log_reads"] > 0  # feed messages applied
        assert stats["feed_entered"] >= stats["placed_pods"]
        # the feed's own CPU, counted apart from the rest of the replica's (a replica
        # given no work enters nothing)
        assert 0 < stats["follow_cpu_s"] < 60
        assert (stats["feed_enter_cpu_s"] > 0) == (stats["feed_entered"] > 0)
        # every bound pod of the whole fold, on its node, with its allocation
        assert bound(replica.state) == bound(whole)
        assert replica.state.position == whole.position
    assert sum(r.stats()["placed_pods"] for r in runner.replicas) == running


async def test_replicas_restarted_on_a_log_that_moved_catch_up_and_place_the_rest(
    tmp_path: Path,
) -> None:
    """A second run on the same store: its replicas start from the whole fold of what
    the first left, then follow a feed that begins where its dispatcher's fold does."""
    url = f"sqlite:///{tmp_path / 'feed2.sqlite'}"
    topics = TopicNames()
    first, _ = await _up(url, list(generated_records(8, 200, topics, seed=1)), follow="feed")
    assert first["placed"] > 0
    more = [record_for_event(node(f"extra{i}", "16", pods="110"), topics, "t") for i in range(4)]
    more += [record_for_event(pod(f"late{i}", "250m"), topics, "t") for i in range(60)]
    summary, runner = await _up(url, more, replicas=2, follow="feed")
    whole, report = await _whole_fold_and_audit(url)
    assert report["ok"], report["violations"][:5]
    assert summary["placed"] > 0
    assert placeable_pending(whole) == []  # (the first run's pending pods compete too)
    for replica in runner.replicas:
        assert bound(replica.state) == bound(whole)


def test_a_replica_refuses_an_unknown_follow_mode() -> None:
    from esched.services.bus.memory import MemoryBus
    from esched.services.replica import Replica

    with pytest.raises(ValueError, match="follow"):
        Replica(None, MemoryBus(), "r", config=ReplicaConfig(follow="claims"))  # type: ignore[arg-type]


async def test_a_follower_started_in_the_middle_of_a_run_catches_up(tmp_path: Path) -> None:
    """A replica's follower started while the others place (the store's head moving,
    the feed already holding messages it covers) skips or bridges what its start
    covers and ends with the whole fold's bindings at the head."""
    url = f"sqlite:///{tmp_path / 'feed3.sqlite'}"
    # Enough pods that the run outlasts the late follower's start on a loaded machine.
    records = list(generated_records(160, 6000, TopicNames(), seed=5))
    runner = Up(
        UpConfig(store=url, progress_every=0, exit_when_idle=True, replicas=2, follow="feed"),
        records,
    )
    task = asyncio.create_task(runner.run())
    es = open_store(url)
    await es.connect()
    try:
        await es.migrate()

        async def placed_some() -> bool:
            return (
                runner.replicas != [] and sum(r.totals.placed_pods for r in runner.replicas) >= 10
            )

        await eventually(placed_some, 60)
        feed = runner.bus.topics.feed
        late = FeedFollower(
            es, lambda: runner.bus.consumer([feed], "late-follower", exclusive=True)
        )
        state = await late.start()
        started_at = int(state.position)
        summary = await asyncio.wait_for(task, 120)
        head = await es.head()
        assert await late.wait_for(head, 30)
        whole = await fold_log(es)
        assert summary["placed"] > 100 and started_at < head
        assert bound(late.state) == bound(whole)
        assert late.messages > 0
        await late.stop()
    finally:
        if not task.done():
            await runner.stop()
            await asyncio.wait_for(task, 60)
        await es.close()


def test_a_follower_skips_what_it_covers_and_bridges_what_does_not_begin_at_it() -> None:
    st = ClusterState()
    writer = FeedWriter(st)
    (first,) = writer.take()
    writer.fold(_rows([node("n1", "4"), pod("a"), committed("p1", "a", "n1")]))
    (m1,) = writer.take()
    writer.fold(_rows([node("n2", "4")], 4))
    (m2,) = writer.take()
    follower = FeedFollower(cast(Any, None), lambda: cast(Any, None))
    follower.state = ClusterState()
    assert follower.apply(first) is None  # (covered: nothing to do)
    assert follower.apply(m2) == 4  # (begins after the state: bridge up to 4)
    assert follower.state.position == 0
    assert follower.apply(m1) is None and follower.state.position == 3
    assert bound(follower.state) == bound(st)
    assert follower.apply(m1) is None and follower.messages == 1  # (covered: skipped)
    assert follower.apply(b"not a message") is None
    assert follower.apply(m2) is None and follower.state.position == 4
    assert sorted(follower.state.node_index) == ["n1", "n2"]


def test_claims_of_another_layout_are_bridged_from_the_store_not_applied() -> None:
    """A dispatcher of another version (a rolling update) writes claims this version
    cannot read: the follower changes nothing and asks for the store's events up to
    the message's end, as for a gap (it neither crashes on them nor skips them)."""
    st = ClusterState()
    writer = FeedWriter(st)
    (first,) = writer.take()
    writer.fold(_rows([node("n1", "4"), pod("a"), committed("p1", "a", "n1")]))
    (ours,) = writer.take()
    after, upto, flags, parts = decode_message(ours)
    claims = [d for k, _p, d in parts if k == CLAIMS]
    assert claims and all(d.startswith(b"ECL") for d in claims)
    older = encode_message(
        after,
        upto,
        flags,
        [(k, pos, b"ECL0" + d[4:] if k == CLAIMS else d) for k, pos, d in parts],
    )
    follower = FeedFollower(cast(Any, None), lambda: cast(Any, None))
    follower.state = ClusterState()
    assert follower.apply(first) is None
    at = follower.state.position
    assert follower.apply(older) == upto
    assert follower.state.position == at and follower.foreign == 1
    assert bound(follower.state) == {}
    assert follower.apply(ours) is None and bound(follower.state) == bound(st)


async def test_a_work_item_older_than_its_pods_release_enters_nothing(tmp_path: Path) -> None:
    """A follower enters a work item's pod from its latest submission, unless a claims
    record released the pod after the item's position (a stale item: bound or
    withdrawn since), or the state holds it bound."""
    es = open_store(f"sqlite:///{tmp_path / 'enter.sqlite'}")
    await es.connect()
    try:
        await es.migrate()
        events = [node("n1", "4"), pod("a", "1"), pod("b", "1"), {**pod("a", "2"), "id": "a2"}]
        await es.append(
            [NewEvent(e["id"], e["type"], stream_of(e), orjson.dumps(e)) for e in events]
        )
        whole = ClusterState()
        whole.claims_journal = []
        whole.apply_payloads([(p, orjson.dumps(e)) for p, e in enumerate(events, 1)])
        whole.claims_journal = []
        whole.apply(committed("c1", "b", "n1"), 5)
        whole.apply(ev("del-a", POD_DELETED, {"metadata": {"name": "a", "namespace": "t"}}), 6)
        follower = FeedFollower(es, lambda: cast(Any, None))
        follower.state = ClusterState()
        follower.state.apply_payloads([(1, orjson.dumps(events[0]))])
        follower.state.position = 4
        assert await follower.enter([("t/a", 4), ("t/b", 4)]) == 2
        assert follower.state.pod("t/a")["allocated"] == {}
        # a's latest submission (2 cpu), and b: both Pending
        assert sorted(follower.state.pending_pods()) == ["t/a", "t/b"]
        assert (
            follower.state.class_specs[follower.state.pod_class_id("t/a")]["requests"]["cpu"]
            == 2000
        )
        record = claims_record(whole)
        assert follower.apply(encode_message(4, 6, 0, [(CLAIMS, 5, record)])) is None
        assert follower.state.pod("t/a") is None and follower.state.pod("t/b")["node"] == "n1"
        # a stale item (position 4, a released at 5) and a bound pod: nothing entered
        assert await follower.enter([("t/a", 4), ("t/b", 4)]) == 0
        assert follower.state.pod("t/a") is None and follower.entered == 2
        # an item after the release: a's submission again (a resubmitted pod's work)
        assert await follower.enter([("t/a", 6)]) == 1
        assert follower.state.pod("t/a")["phase"] == "Pending"
    finally:
        await es.close()


async def test_a_follower_started_on_a_long_feed_reads_few_of_its_messages() -> None:
    """A follower whose fold reached near the feed's end seeks back from the end to a
    message that begins at its position, instead of reading the feed from its start."""
    from esched.services.bus.memory import MemoryBus

    bus = MemoryBus()
    feed = bus.topics.feed
    for k in range(1000):
        bus.append(feed, None, encode_message(k, k + 1, 0, []))
    follower = FeedFollower(
        cast(Any, None), lambda: bus.consumer([feed], "restarted", exclusive=True)
    )
    follower.state = ClusterState()
    follower.state.position = 990
    reading = asyncio.create_task(follower.read_feed())
    try:
        await eventually(lambda: follower.position == 1000, 10)
        bus.append(feed, None, encode_message(1000, 1001, 0, []))
        await eventually(lambda: follower.position == 1001, 10)
    finally:
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
    assert follower.messages == 11
    assert follower.received + follower.probes < 40  # (not the 1,001 messages)


async def test_an_idle_feed_reader_waits_on_the_broker_with_a_wait_that_grows() -> None:
    """A replica's feed reader polls with a long timeout (a poll returns when a message
    comes: no timer wakes an idle reader several times a second) and asks the bus for
    a fetch wait that grows while the feed is silent."""
    from esched.services.bus.memory import MemoryBus
    from esched.services.replica import Replica

    class Recording(MemoryBus):
        def __init__(self) -> None:
            super().__init__()
            self.asked: list[dict[str, Any]] = []
            self.polls: list[int] = []

        def consumer(self, topics, group, **kwargs):  # type: ignore[no-untyped-def]
            self.asked.append(kwargs)
            inner = super().consumer(topics, group, **kwargs)
            polls = self.polls

            class Counting(type(inner)):  # type: ignore[misc]
                async def poll(self, timeout_ms: int, max_records: int) -> list:
                    polls.append(timeout_ms)
                    return await super().poll(timeout_ms, max_records)

            inner.__class__ = Counting
            return inner

    bus = Recording()
    replica = Replica(None, bus, "r", config=ReplicaConfig(follow="feed"))  # type: ignore[arg-type]
    follower = cast(FeedFollower, replica.follower)
    follower.state = ClusterState()
    reading = asyncio.create_task(follower.read_feed())
    try:
        await eventually(lambda: bus.polls, 5)
    finally:
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
    ((asked,),) = [bus.asked]
    wait, (ceiling, after) = asked["wait_ms"], asked["idle_wait"]
    assert ceiling > wait and after > 0
    assert min(bus.polls) >= 1000
