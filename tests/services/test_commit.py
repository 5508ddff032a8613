"""The commit service: fine-grained validation, gangs, idempotence, the bus, one leader.

Against the real stores (PostgreSQL and SQLite), the real broker for the bus path,
and PostgreSQL advisory locks for leadership (a killed session hands over).
"""

from __future__ import annotations

import asyncio
import time

import asyncpg
import orjson
import pytest
from click.testing import CliRunner
from prometheus_client import REGISTRY

from esched.core.validation import Verdict
from esched.schemas.events import DECISIONS_STREAM
from esched.services.audit import audit_store
from esched.services.bus import open_bus
from esched.services.bus.memory import MemoryBus
from esched.services.cli import EXIT_USAGE, cli
from esched.services.commit import (
    FENCE_SNAPSHOT,
    CommitConfig,
    CommitService,
    NotLeader,
    decision_event,
    decision_id,
)
from esched.services.lease import PostgresLease
from esched.services.store import NewEvent, open_store
from esched.services.store.snapshots import SNAPSHOT_NAME, fold_log, save_snapshot
from support.aio import eventually
from support.events import append_events, ev, node, pod, podgroup
from support.events import placement as proposal


def envelope(data: dict) -> dict:
    return ev(f"proposal-{data['proposal']}", "esched.placement.proposed", data)


def head_conflicts(outcome: str) -> float:
    """``esched_commit_head_conflicts_total{outcome}`` so far (the process's registry)."""
    value = REGISTRY.get_sample_value("esched_commit_head_conflicts_total", {"outcome": outcome})
    return value or 0.0


def kinds(decisions: list[dict]) -> list[tuple[str, str | None]]:
    return [(d["type"].rsplit(".", 1)[1], d["data"].get("reason")) for d in decisions]


async def test_accepts_a_fitting_proposal_and_folds_it(store):
    await append_events(store, node("n1"), pod("a"))
    service = CommitService(store)
    [d] = await service.decide([proposal("p1", [("a", "n1")])])

    assert d["type"] == "esched.placement.committed" and d["id"] == decision_id("p1")
    assert service.state.pod("t/a")["phase"] == "Running"
    assert service.state.node("n1")["allocated"]["cpu"] == 1000
    stored = (await store.read(0, 100))[-1]
    assert stored.stream == DECISIONS_STREAM and stored.id == "decision-p1"
    assert (await fold_log(store)).pod("t/a")["node"] == "n1"  # the log says so too
    await service.stop()


async def test_concurrent_first_calls_take_over_once(store):
    await append_events(store, node("n1", cpu="4"), pod("a"), pod("b"))
    service = CommitService(store)
    # Two replicas' first proposals arrive together: one takeover, both decided.
    first, second = await asyncio.gather(
        service.decide([proposal("p1", [("a", "n1")])]),
        service.decide([proposal("p2", [("b", "n1")])]),
    )
    assert kinds(first + second) == [("committed", None), ("committed", None)]
    assert service.state.node("n1")["allocated"]["cpu"] == 2000
    await service.stop()


async def test_two_replicas_racing_for_the_last_room_exactly_one_wins(store):
    await append_events(store, node("n1", cpu="2"), pod("a"), pod("b"), pod("c"), pod("x"))
    service = CommitService(store)
    await service.decide([proposal("p0", [("a", "n1")])])  # 1 of 2 cpu left
    # Same batch: r1 and r2 both saw the room free and propose different pods.
    decisions = await service.decide(
        [
            proposal("r1-b", [("b", "n1")], replica="r1"),
            proposal("r2-c", [("c", "n1")], replica="r2"),
        ]
    )
    assert kinds(decisions) == [("committed", None), ("rejected", "Insufficient.cpu")]
    # Separate batches: the later one meets the earlier one's decision in the log.
    await append_events(store, node("n2", cpu="1"))
    first = await service.decide([proposal("r1-x", [("x", "n2")], replica="r1")])
    second = await service.decide([proposal("r2-c2", [("c", "n2")], replica="r2")])
    assert kinds(first + second) == [("committed", None), ("rejected", "Insufficient.cpu")]
    # Double placement: one pod proposed by two replicas, on different nodes.
    await append_events(store, node("n3", cpu="4"), node("n4", cpu="4"), pod("d"))
    decisions = await service.decide(
        [
            proposal("r1-d", [("d", "n3")], replica="r1"),
            proposal("r2-d", [("d", "n4")], replica="r2"),
        ]
    )
    assert kinds(decisions) == [("committed", None), ("rejected", "PodNotPending")]
    again = await service.decide([proposal("r3-d", [("d", "n4")], replica="r3")])
    assert kinds(again) == [("rejected", "PodNotPending")]
    assert "Running" in again[0]["data"]["message"]
    state = await fold_log(store)
    for name in ("n1", "n2", "n3", "n4"):
        n = state.node(name)
        assert all(n["allocated"][r] <= n["allocatable"][r] for r in n["allocated"])
    assert service.totals.reasons == {"Insufficient.cpu": 2, "PodNotPending": 2}
    await service.stop()


async def test_a_node_that_changed_since_the_replica_looked_is_fine_if_it_still_fits(store):
    await append_events(store, node("n1", cpu="4"), pod("a"), pod("b"), pod("c"))
    seen = await store.head()  # the replica's view
    service = CommitService(store)
    await service.decide([proposal("p-a", [("a", "n1")], position=seen)])
    version = service.state.node("n1")["version"]
    # The node changes after the replica looked: new labels, and more capacity.
    await append_events(
        store, node("n1", cpu="5", labels={"zone": "z1"}, eid="n1-v2", type_="esched.node.updated")
    )
    [d] = await service.decide([proposal("p-b", [("b", "n1")], position=seen)])
    assert d["type"] == "esched.placement.committed"  # no coarse per-node version check
    assert service.state.node("n1")["version"] > version + 1  # the update, then the binding
    # A change that does matter: an untolerated taint.
    await append_events(
        store,
        node(
            "n1",
            cpu="5",
            taints=[{"key": "k", "effect": "NoSchedule"}],
            eid="n1-v3",
            type_="esched.node.updated",
        ),
    )
    [d] = await service.decide([proposal("p-c", [("c", "n1")], position=seen)])
    # The code an unschedulable report would count, the taint named as kube names it.
    assert d["data"]["reason"] == "TaintToleration"
    assert "node(s) had untolerated taint {k: }" in d["data"]["message"]
    # A node that is gone, and claims that are not the pod's requests.
    await append_events(
        store, ev("rm-n1", "esched.node.removed", {"metadata": {"name": "n1"}}), node("n2", cpu="8")
    )
    bad = await service.decide(
        [proposal("p-c2", [("c", "n1")]), proposal("p-c3", [("c", "n2")], cpu=10)]
    )
    assert kinds(bad) == [("rejected", "NodeNotFound"), ("rejected", "ResourcesMismatch")]
    await service.stop()


class InterleavingStore:
    """A store where external events (ingest) land after the commit service caught up
    and validated, just before its decision batch is appended."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.external: list[list[dict]] = []  # one list of events per append to interleave
        self.head_checks: list[int | None] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def append(self, events, **kwargs):
        if self.external and events and events[0].stream == DECISIONS_STREAM:
            await append_events(self.inner, *self.external.pop(0))
            self.head_checks.append(kwargs.get("expected_head"))
        return await self.inner.append(events, **kwargs)


class ReadCountingStore:
    """A store that counts the events the commit service reads back."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.read_positions: list[int] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def read(self, after=0, limit=10_000, upto=None):
        rows = await self.inner.read(after, limit, upto)
        self.read_positions.extend(r.position for r in rows)
        return rows


async def test_own_decisions_are_folded_from_memory_exactly_as_the_log_folds_them(store):
    """After a head-checked append, the service folds its decisions (evictions,
    commits, rejections) from memory instead of reading them back; its state and
    fence are what a fold of the log gives."""
    await append_events(
        store,
        node("n1", cpu="2"),
        node("n2", cpu="4"),
        pod("a"),
        pod("b"),
        pod("c", "3"),
        pod("v", "3", priority=0, node_name="n2"),
        pod("p", "2", priority=1000),
    )  # prod preempts best-effort
    counting = ReadCountingStore(store)
    service = CommitService(counting)
    await service.decide([proposal("warm", [("a", "n1")])])  # takes the lease, folds the log
    head = await store.head()
    counting.read_positions.clear()
    decisions = await service.decide(
        [
            proposal("p-b", [("b", "n1")]),
            proposal("p-c", [("c", "n1")], cpu=3000),  # no room left on n1
            proposal("p-p", [("p", "n2")], cpu=2000, victims=[("v", "n2")]),
        ]
    )
    assert kinds(decisions) == [
        ("committed", None),
        ("rejected", "Insufficient.cpu"),
        ("committed", None),
    ]
    assert not [p for p in counting.read_positions if p > head]  # nothing read back
    folded = await fold_log(store, use_snapshot=False)
    assert service.state.position == folded.position == head + 4  # eviction + 3 decisions
    assert service.state.summary() == folded.summary()
    assert service.state.pod("t/v")["phase"] == "Pending"
    stream = [r for r in await store.read(0, 1000) if r.stream == DECISIONS_STREAM]
    assert service.decisions_version == stream[-1].stream_version
    # A redelivered proposal (a duplicate id) is the fallback: read from the store.
    [again] = await service.decide([proposal("p-b", [("b", "n1")])])
    assert again["id"] == decision_id("p-b") and service.totals.duplicates == 1
    later = await service.decide([proposal("p-late", [("c", "n2")], cpu=3000)])
    assert kinds(later) == [("rejected", "Insufficient.cpu")]  # n2: 2 of 4 cpus left
    assert service.state.summary() == (await fold_log(store, use_snapshot=False)).summary()
    report = await audit_store(store)
    assert report["ok"], report["violations"]
    await service.stop()


async def test_an_external_event_before_the_append_is_validated_against(store):
    await append_events(
        store, node("n1", cpu="2"), node("n2", cpu="4"), pod("a"), pod("b"), pod("c"), pod("x")
    )
    racing = InterleavingStore(store)
    service = CommitService(racing)
    await service.decide([proposal("p0", [("x", "n2")])])
    # n1 shrinks to 1 cpu (ingest) after the service validated "a" and "b" on it.
    racing.external.append([node("n1", cpu="1", eid="n1-v2", type_="esched.node.updated")])
    decisions = await service.decide(
        [proposal("p-a", [("a", "n1")]), proposal("p-b", [("b", "n1")])]
    )
    assert kinds(decisions) == [("committed", None), ("rejected", "Insufficient.cpu")]
    # A competing binding of the pod (another writer's decision is a foreign one,
    # so here: the pod is deleted) and then the node removed, one after the other.
    racing.external += [
        [ev("del-c", "esched.pod.deleted", {"metadata": {"name": "c", "namespace": "t"}})],
        [ev("rm-n2", "esched.node.removed", {"metadata": {"name": "n2"}})],
    ]
    [d] = await service.decide([proposal("p-c", [("c", "n2")])])
    assert kinds([d]) == [("rejected", "PodUnknown")]
    assert not racing.external and all(h is not None for h in racing.head_checks)
    assert racing.head_checks == sorted(racing.head_checks)
    # Every decision is valid at its own position: the log folds without anomalies.
    state = await fold_log(store)
    assert not {k: v for k, v in state.anomalies.items() if k.startswith("commit_")}
    n1 = state.node("n1")
    assert n1["allocated"]["cpu"] == 1000 <= n1["allocatable"]["cpu"]
    report = await audit_store(store)
    assert report["ok"], report["violations"]
    await service.stop()


async def test_new_pods_before_the_append_do_not_cost_a_revalidation(store):
    """Ingest appending new pods between validation and append (the usual race under
    load) leaves every verdict as it was: the batch is appended after them as is."""
    await append_events(store, node("n1", cpu="2"), pod("a"), pod("b"))
    racing = InterleavingStore(store)
    service = CommitService(racing)
    before = {o: head_conflicts(o) for o in ("unaffected", "revalidated")}
    racing.external.append([pod("new1"), pod("new2")])
    decisions = await service.decide([proposal("p-a", [("a", "n1")])])
    assert kinds(decisions) == [("committed", None)]
    # Validated once, appended on the second try.
    assert head_conflicts("unaffected") == before["unaffected"] + 1
    assert head_conflicts("revalidated") == before["revalidated"]
    assert racing.head_checks[0] is not None
    # A submission of a pod in the batch (or any other kind of event) still revalidates.
    racing.external.append([{**pod("b"), "id": "pod-b-again"}])
    decisions = await service.decide([proposal("p-b", [("b", "n1")])])
    assert kinds(decisions) == [("committed", None)]
    assert head_conflicts("revalidated") == before["revalidated"] + 1
    report = await audit_store(store)
    assert report["ok"], report["violations"]
    await service.stop()


async def test_job_records_and_other_gangs_podgroups_before_the_append_do_not_revalidate(store):
    """The job controller appending between validation and append (a Job's
    transitions, the next Job's PodGroup and pod) leaves every verdict as it was; the
    PodGroup of a gang the batch binds still revalidates (it sets the gang's minMember)."""
    await append_events(store, node("n1", cpu="4"), podgroup("g", 1), pod("a", gang="g"))
    racing = InterleavingStore(store)
    service = CommitService(racing)
    before = {o: head_conflicts(o) for o in ("unaffected", "revalidated")}
    update = {"job": "t/j0", "seq": 0, "phase": "Pending", "previous": "", "attempt": 0}
    update |= {"reason": "Submitted", "action": ""}
    racing.external.append(
        [
            ev("j1.t0", "esched.job.updated", {**update, "job": "t/j1"}),
            podgroup("j1", 1),
            pod("j1-w-0", gang="j1"),
        ]
    )
    decisions = await service.decide([proposal("p-a", [("a", "n1")], gang="t/g")])
    assert kinds(decisions) == [("committed", None)]
    assert head_conflicts("unaffected") == before["unaffected"] + 1
    assert head_conflicts("revalidated") == before["revalidated"]
    # The batch's own gang's PodGroup submitted again: validated again.
    await append_events(store, podgroup("h", 1), pod("b", gang="h"))
    racing.external.append([{**podgroup("h", 1), "id": "pg-h-again"}])
    decisions = await service.decide([proposal("p-b", [("b", "n1")], gang="t/h")])
    assert kinds(decisions) == [("committed", None)]
    assert head_conflicts("revalidated") == before["revalidated"] + 1
    report = await audit_store(store)
    assert report["ok"], report["violations"]
    await service.stop()


def _volcano_job(name: str) -> dict:
    """``esched.job.submitted`` of a one-pod Volcano Job ``t/<name>`` (defaulted)."""
    from esched.schemas.volcano_jobs import default_job

    template = {"spec": pod("x")["data"]["spec"]}
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "t"},
        "spec": {"tasks": [{"name": "w", "replicas": 1, "template": template}]},
    }
    return ev(f"job-{name}", "esched.job.submitted", default_job(job))


async def test_a_job_before_the_append_revalidates_only_its_own_gang(store):
    """A Volcano Job implies its PodGroup (the gang of its key): another Job appended
    between validation and append leaves the verdicts as they were; a Job of the
    name of a gang the batch binds revalidates, as its PodGroup would."""
    await append_events(store, node("n1", cpu="4"), pod("a", gang="k"), pod("b", gang="m"))
    racing = InterleavingStore(store)
    service = CommitService(racing)
    before = {o: head_conflicts(o) for o in ("unaffected", "revalidated")}
    racing.external.append([_volcano_job("other")])
    decisions = await service.decide([proposal("p-a", [("a", "n1")], gang="t/k")])
    assert kinds(decisions) == [("committed", None)]
    assert head_conflicts("unaffected") == before["unaffected"] + 1
    assert head_conflicts("revalidated") == before["revalidated"]
    racing.external.append([_volcano_job("m")])
    decisions = await service.decide([proposal("p-b", [("b", "n1")], gang="t/m")])
    assert kinds(decisions) == [("committed", None)]
    assert head_conflicts("revalidated") == before["revalidated"] + 1
    assert service.state.gang_meta[service.state.gang_index["t/m"]]["podGroup"]
    await service.stop()


async def test_a_log_that_never_stops_moving_is_appended_unchecked_in_the_end(store, caplog):
    await append_events(store, node("n1", cpu="4"), pod("a"))
    racing = InterleavingStore(store)
    service = CommitService(racing, config=CommitConfig(head_attempts=1))
    racing.external += [
        [node("n1", cpu="3", eid="n1-v2", type_="esched.node.updated")],
        [node("n1", cpu="2", eid="n1-v3", type_="esched.node.updated")],
    ]
    unchecked = head_conflicts("unchecked")
    [d] = await service.decide([proposal("p-a", [("a", "n1")])])
    assert kinds([d]) == [("committed", None)]  # still fits after both updates
    assert racing.head_checks[0] is not None and racing.head_checks[1] is None
    assert head_conflicts("unchecked") == unchecked + 1
    assert "without the head check" in caplog.text
    await service.stop()


async def test_a_gang_is_all_or_nothing(store):
    await append_events(
        store,
        podgroup("g", 3),
        node("n1", cpu="2"),
        node("n2", cpu="1"),
        *(pod(f"m{i}", gang="g") for i in range(4)),
    )
    service = CommitService(store)
    # Three members, the third does not fit (n2 has 1 cpu, two proposed there).
    [d] = await service.decide(
        [proposal("g1", [("m0", "n1"), ("m1", "n2"), ("m2", "n2")], gang="t/g")]
    )
    assert (d["type"], d["data"]["reason"]) == ("esched.placement.rejected", "Insufficient.cpu")
    assert d["data"]["pods"] == ["t/m0", "t/m1", "t/m2"]
    assert service.state.summary()["gangs"]["t/g"]["Running"] == 0  # nothing bound
    # Two members fit but minMember is 3.
    [d] = await service.decide([proposal("g2", [("m0", "n1"), ("m1", "n1")], gang="t/g")])
    assert d["data"]["reason"] == "GangIncomplete"
    # A lone member without the gang is held to the same rule.
    [d] = await service.decide([proposal("g2b", [("m0", "n1")])])
    assert d["data"]["reason"] == "GangIncomplete"
    # All three fit.
    [d] = await service.decide(
        [proposal("g3", [("m0", "n1"), ("m1", "n1"), ("m2", "n2")], gang="t/g")]
    )
    assert d["type"] == "esched.placement.committed"
    assert service.state.summary()["gangs"]["t/g"]["Running"] == 3
    # Once the gang runs at minMember, one more member may join alone... if it fits.
    [d] = await service.decide([proposal("g4", [("m3", "n2")], gang="t/g")])
    assert d["data"]["reason"] == "Insufficient.cpu"
    await service.stop()


async def test_a_redelivered_proposal_gets_the_recorded_decision(store):
    await append_events(store, node("n1", cpu="1"), pod("a"), pod("b"))
    service = CommitService(store)
    first = await service.decide([proposal("p1", [("a", "n1")]), proposal("p2", [("b", "n1")])])
    head = await store.head()
    again = await service.decide(
        [
            proposal("p2", [("b", "n1")]),
            proposal("p1", [("a", "n1")]),
            proposal("p1", [("a", "n1")]),
        ]
    )
    assert again == [first[1], first[0], first[0]]
    assert await store.head() == head
    assert service.totals.duplicates == 3
    await service.stop()
    # An instance that remembers no decided proposal (as after a takeover from an old
    # snapshot) re-validates, finds the id already stored, and answers with what the
    # log says.
    fresh = CommitService(store, config=CommitConfig(remember=0))
    [d] = await fresh.decide([envelope(proposal("p2", [("b", "n1")]))])
    assert d == first[1] and d["data"]["reason"] == "Insufficient.cpu"
    assert await store.head() == head
    await fresh.stop()


async def test_published_decisions_are_the_bytes_the_store_holds(store):
    await append_events(store, node("n1", cpu="1"), pod("a"), pod("b"))
    bus = MemoryBus()
    service = CommitService(store, bus)
    await service.start()
    for key, pid, name in ((b"t/a", "m1", "a"), (b"t/b", "m2", "b")):
        bus.append(bus.topics.proposals, key, orjson.dumps(envelope(proposal(pid, [(name, "n1")]))))
    await asyncio.wait_for(service.run(exit_when_idle=True, idle_polls=3), 30)
    # Redelivered: answered with the decision the log holds (encoded again).
    bus.append(bus.topics.proposals, b"t/a", orjson.dumps(envelope(proposal("m1", [("a", "n1")]))))
    await asyncio.wait_for(service.run(exit_when_idle=True, idle_polls=3), 30)
    await service.stop()
    stored = {e.id: e.payload for e in await store.read(0, 100) if e.stream == DECISIONS_STREAM}
    published = [m.value for m in bus.log(bus.topics.decisions)]
    assert published[:2] == [stored["decision-m1"], stored["decision-m2"]]
    assert [orjson.loads(v)["id"] for v in published] == [
        "decision-m1",
        "decision-m2",
        "decision-m1",
    ]
    assert orjson.loads(published[2]) == orjson.loads(stored["decision-m1"])


class _GatedDecisions(MemoryBus):
    """The in-process bus, with sends to the decisions topic held until ``gate`` opens."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    def producer(self):
        inner = super().producer()
        bus = self

        class Gated(type(inner)):
            async def send_many(self, topic, records):
                if topic == bus.topics.decisions:
                    await bus.gate.wait()
                await super().send_many(topic, records)

        return Gated(self)


async def test_the_next_batch_is_decided_while_the_previous_one_is_published(store):
    await append_events(store, node("n1", cpu="4"), pod("a"), pod("b"))
    bus = _GatedDecisions()
    service = CommitService(store, bus)
    await service.start()
    run = asyncio.create_task(service.run())

    async def decided(pid: str) -> None:
        for _ in range(500):  # 10 s
            if decision_id(pid) in {e.id for e in await store.read(0, 100)}:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"{pid} not decided within 10 s")

    bus.append(bus.topics.proposals, b"t/a", orjson.dumps(envelope(proposal("g1", [("a", "n1")]))))
    await decided("g1")
    # g1's decision is not on the topic yet (held), g2 is decided meanwhile.
    bus.append(bus.topics.proposals, b"t/b", orjson.dumps(envelope(proposal("g2", [("b", "n1")]))))
    await decided("g2")
    assert bus.log(bus.topics.decisions) == []
    bus.gate.set()
    await service.stop()
    await run
    assert [orjson.loads(m.value)["id"] for m in bus.log(bus.topics.decisions)] == [
        "decision-g1",
        "decision-g2",
    ]
    # Both batches' offsets were committed (after their decisions were published).
    assert bus.committed("esched-commit", bus.topics.proposals) == 2


async def test_snapshots_carry_the_fence_and_speed_up_takeover(store):
    await append_events(store, node("n1", cpu="8"), *(pod(f"p{i}") for i in range(6)))
    service = CommitService(store, config=CommitConfig(snapshot_every=3))
    for i in range(3):
        await service.decide([proposal(f"s{i}", [(f"p{i}", "n1")])])
    await service.stop()  # waits for the snapshot being written in the background
    snap = await store.load_snapshot(SNAPSHOT_NAME)
    fence = await store.load_snapshot(FENCE_SNAPSHOT)
    assert snap is not None and fence is not None and snap[0] == fence[0]
    takeover = CommitService(store)
    [d] = await takeover.decide([proposal("s3", [("p3", "n1")])])
    assert d["type"] == "esched.placement.committed"
    assert takeover.state.summary()["pods"]["Running"] == 4
    assert takeover.decisions_version == 4
    await takeover.stop()
    # A newer state snapshot without a fence (as `esched replay --save-snapshot` writes)
    # is not trusted for the fence: the next leader starts from its own fence.
    await save_snapshot(store, await fold_log(store))
    third = CommitService(store)
    [d] = await third.decide([proposal("s4", [("p4", "n1")])])
    assert d["type"] == "esched.placement.committed" and third.decisions_version == 5
    await third.stop()


class HeldSnapshots:
    """A store whose snapshot writes wait for ``release`` (a slow snapshot write)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.release = asyncio.Event()
        self.held = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def save_snapshot(self, name, position, data):
        self.held += 1
        await self.release.wait()
        await self.inner.save_snapshot(name, position, data)


async def test_decisions_do_not_wait_for_a_snapshot_being_written(store):
    await append_events(store, node("n1", cpu="8"), *(pod(f"p{i}") for i in range(4)))
    held = HeldSnapshots(store)
    service = CommitService(held, config=CommitConfig(snapshot_every=3))
    for i in range(4):
        [d] = await service.decide([proposal(f"s{i}", [(f"p{i}", "n1")])])
        assert d["type"] == "esched.placement.committed"
    # One snapshot is due and held; the batches after it were decided meanwhile.
    assert held.held == 1 and await store.load_snapshot(SNAPSHOT_NAME) is None
    held.release.set()
    await service.stop()  # waits for the snapshot being written
    snap = await store.load_snapshot(SNAPSHOT_NAME)
    fence = await store.load_snapshot(FENCE_SNAPSHOT)
    assert snap is not None and fence is not None and snap[0] == fence[0]


class RacingStore:
    """A store where another commit service appends a decision just before ours."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.race = False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def append(self, events, **kwargs):
        if self.race:
            self.race = False
            rival = decision_event(proposal("rival", [("b", "n1")]), Verdict(True), "rival")
            version = len(
                [e for e in await self.inner.read(0, 1000) if e.stream == DECISIONS_STREAM]
            )
            await self.inner.append(
                [
                    NewEvent(
                        rival["id"],
                        rival["type"],
                        DECISIONS_STREAM,
                        orjson.dumps(rival),
                        expected_version=version,
                    )
                ]
            )
        return await self.inner.append(events, **kwargs)


async def test_a_deposed_leader_is_fenced_and_steps_down(pg_store, pg_url):
    await append_events(pg_store, node("n1", cpu="4"), pod("a"), pod("b"), pod("c"))
    racing = RacingStore(pg_store)
    lease = PostgresLease(pg_url)
    service = CommitService(racing, lease=lease)
    await service.decide([proposal("p1", [("a", "n1")])])
    assert service.leading and lease.held
    racing.race = True
    head = await pg_store.head()
    with pytest.raises(NotLeader, match="expected"):
        await service.decide([proposal("p2", [("c", "n1")])])
    assert not service.leading and not lease.held
    assert await pg_store.head() == head + 1  # only the rival's decision
    # The lease is free for another instance at once.
    other = PostgresLease(pg_url)
    assert await other.try_acquire()
    await other.release()
    # A decision written by someone else between batches is noticed on catch-up too.
    await service.decide([proposal("p3", [("c", "n1")])])  # re-acquires, rebuilds
    rival = decision_event(proposal("rival2", [("c", "n1")]), Verdict(False, "x", "m"), "rival")
    await pg_store.append(
        [NewEvent(rival["id"], rival["type"], DECISIONS_STREAM, orjson.dumps(rival))]
    )
    with pytest.raises(NotLeader, match="another commit service"):
        await service.decide([proposal("p4", [("b", "n1")])])
    await service.stop()


async def test_proposals_from_kafka_become_published_decisions(
    pg_store, kafka_bootstrap, topic_prefix
):
    await append_events(pg_store, node("n1", cpu="1"), pod("a"), pod("b"))
    bus = open_bus(kafka_bootstrap, topic_prefix)
    service = CommitService(pg_store, bus)
    await service.start()
    producer = bus.producer()
    await producer.start()
    await producer.send_many(
        bus.topics.proposals,
        [
            (b"t/a", orjson.dumps(envelope(proposal("k1", [("a", "n1")])))),
            (b"t/b", orjson.dumps(envelope(proposal("k2", [("b", "n1")])))),
            (b"x", b"{not json"),
            (b"t/a", orjson.dumps(envelope(proposal("k1", [("a", "n1")])))),  # redelivered
        ],
    )
    totals = await asyncio.wait_for(service.run(exit_when_idle=True, idle_polls=5), 30)
    await service.stop()
    assert (totals.committed, totals.rejected, totals.duplicates, totals.deadlettered) == (
        1,
        1,
        1,
        1,
    )

    # The test's own reader: exclusive, so no group join (seconds on tansu).
    consumer = bus.consumer(
        [bus.topics.decisions, bus.topics.deadletter], "checker", exclusive=True
    )
    await consumer.start()
    got: list = []
    deadline = time.monotonic() + 20
    while len(got) < 4 and time.monotonic() < deadline:
        got += await consumer.poll(500, 100)
    await consumer.stop()
    await producer.stop()
    decisions = [orjson.loads(m.value) for m in got if m.topic == bus.topics.decisions]
    dead = [orjson.loads(m.value) for m in got if m.topic == bus.topics.deadletter]
    assert sorted((d["id"], d["type"]) for d in decisions) == [
        ("decision-k1", "esched.placement.committed"),
        ("decision-k1", "esched.placement.committed"),
        ("decision-k2", "esched.placement.rejected"),
    ]
    assert [d["reason"] for d in dead] == ["not_json"] and dead[0]["service"] == "commit"
    assert [e.id for e in await pg_store.read(0, 100) if e.stream == DECISIONS_STREAM] == [
        "decision-k1",
        "decision-k2",
    ]


async def _wait_for(predicate, within: float) -> float:
    """Seconds until ``predicate()`` held (:func:`eventually`, failing after ``within``)."""
    started = time.monotonic()
    await eventually(predicate, within, interval=0.05)
    return time.monotonic() - started


async def test_a_standby_takes_over_when_the_leader_session_dies(pg_url, pg_server):
    stores = [open_store(pg_url) for _ in range(2)]
    for s in stores:
        await s.connect()
    await stores[0].migrate()
    await append_events(stores[0], node("n1", cpu="4"), pod("a"), pod("b"))
    bus = MemoryBus()
    a = CommitService(stores[0], bus, lease=PostgresLease(pg_url))
    b = CommitService(stores[1], bus, lease=PostgresLease(pg_url))
    for s in (a, b):
        await s.start()
    run_a = asyncio.ensure_future(a.run())
    await _wait_for(lambda: a.leading, 5)
    run_b = asyncio.ensure_future(b.run())
    bus.append(bus.topics.proposals, None, orjson.dumps(envelope(proposal("x1", [("a", "n1")]))))
    await _wait_for(lambda: a.totals.committed == 1, 5)
    await asyncio.sleep(0.6)
    assert not b.leading  # standing by

    admin = await asyncpg.connect(pg_url)
    await admin.execute("SELECT pg_terminate_backend($1)", a.lease.backend_pid)
    await admin.close()
    lost_after = await _wait_for(lambda: not a.leading, 3)
    took_over = await _wait_for(lambda: b.leading, 5)
    assert lost_after < 2.5 and took_over < 5
    assert b.state.pod("t/a")["phase"] == "Running"  # continued from the log
    bus.append(bus.topics.proposals, None, orjson.dumps(envelope(proposal("x2", [("b", "n1")]))))
    await _wait_for(lambda: b.totals.committed == 1, 5)
    assert a.totals.committed == 1 and a.totals.stepdowns == 1

    for s in (a, b):
        await s.stop()
    await asyncio.gather(run_a, run_b)
    ids = [e.id for e in await stores[0].read(0, 100) if e.stream == DECISIONS_STREAM]
    assert ids == ["decision-x1", "decision-x2"]
    for s in stores:
        await s.close()


def test_the_commit_command_documents_itself_and_needs_kafka():
    runner = CliRunner()
    help_text = runner.invoke(cli, ["commit", "--help"], catch_exceptions=False).output
    assert "--snapshot-every" in help_text and "--kafka" in help_text
    result = runner.invoke(
        cli, ["commit", "--store", "sqlite://:memory:"], env={"ESCHED_KAFKA": ""}
    )
    assert result.exit_code == EXIT_USAGE and "--kafka" in result.output
