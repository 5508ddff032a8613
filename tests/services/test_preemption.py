"""Preemption and gangs through the services: commit validation of victims (one
transaction: evictions, then the binding), the replica proposing preemptions,
gangs without partial holding (no deadlock), and the audit's legality checks.

Against the real stores (PostgreSQL and SQLite) and the in-process bus, as the
other service tests.
"""

from __future__ import annotations

import asyncio

import orjson

from esched.core.bands import parse_bands
from esched.schemas.events import (
    GANG_RESERVED,
    PLACEMENT_COMMITTED,
    POD_EVICTED,
    POD_SUBMITTED,
    POD_SUCCEEDED,
    POD_UNSCHEDULABLE,
)
from esched.services.audit import audit_events, audit_store
from esched.services.commit import CommitService, decision_id
from esched.services.store.snapshots import fold_log
from support.aio import eventually
from support.events import append_events, ev, node, placement, pod, podgroup
from support.up import up_running

PROD, BATCH, BE = 1000, 100, 0


def kinds(decisions: list[dict]) -> list[tuple[str, str | None]]:
    return [(d["type"].rsplit(".", 1)[1], d["data"].get("reason")) for d in decisions]


async def log_types(store) -> list[tuple[str, str]]:
    return [(r.type, r.id) for r in await store.read(0, 100_000)]


async def test_commit_evicts_victims_and_binds_in_one_transaction(store):
    await append_events(
        store,
        node("n1"),
        pod("v1", priority=BE, node_name="n1"),
        pod("v2", priority=BATCH, node_name="n1"),
        pod("p", "2", priority=PROD),
    )
    service = CommitService(store)
    head = await store.head()
    [d] = await service.decide(
        [placement("pre", [("p", "n1")], cpu=2000, victims=[("v1", "n1"), ("v2", "n1")])]
    )
    assert kinds([d]) == [("committed", None)]
    assert d["data"]["victims"] == [{"pod": "t/v1", "node": "n1"}, {"pod": "t/v2", "node": "n1"}]
    rows = await store.read(head, 100)
    # evictions first, then the decision; all in the one fenced append
    assert [r.type for r in rows] == [POD_EVICTED, POD_EVICTED, PLACEMENT_COMMITTED]
    evicted = orjson.loads(rows[0].payload)["data"]
    assert evicted == {
        "pod": "t/v1",
        "node": "n1",
        "reason": "Preempted",
        "message": "preempted to make room for t/p",
        "by": "t/p",
        "decision": decision_id("pre"),
    }
    state = await fold_log(store)
    assert state.pod("t/p")["phase"] == "Running"
    assert state.pod("t/v1")["phase"] == "Pending" and state.pod("t/v2")["phase"] == "Pending"
    assert service.totals.evicted == 2
    # A redelivered proposal is answered with the recorded decision: no new evictions.
    [again] = await service.decide(
        [placement("pre", [("p", "n1")], cpu=2000, victims=[("v1", "n1"), ("v2", "n1")])]
    )
    assert again["id"] == d["id"] and service.totals.duplicates == 1
    assert len(await store.read(0, 1000)) == len(rows) + 4
    report = await audit_store(store)
    assert report["ok"], report
    assert report["checked"]["preemptions"] == 1 and report["checked"]["evictions"] == 2
    await service.stop()


async def test_commit_rejects_illegal_and_stale_preemptions(store):
    await append_events(
        store,
        node("n1"),
        node("n2"),
        node("n3", "3"),
        pod("prod1", "2", priority=PROD, node_name="n1"),
        pod("batch2", "2", priority=BATCH, node_name="n2"),
        podgroup("g", 3),
        *(pod(f"g{i}", priority=BE, gang="g", node_name="n3") for i in range(3)),
        pod("p", "2", priority=PROD),
        pod("b", "2", priority=BATCH),
        pod("q", priority=PROD),
    )
    service = CommitService(store)
    decisions = await service.decide(
        [
            # production does not preempt production
            placement("x1", [("p", "n1")], cpu=2000, victims=[("prod1", "n1")]),
            # batch does not preempt batch (equal band)
            placement("x2", [("b", "n2")], cpu=2000, victims=[("batch2", "n2")]),
            # a victim that is not where the proposal says
            placement("x3", [("p", "n2")], cpu=2000, victims=[("batch2", "n1")]),
            # one member of a minMember-3 gang: the gang would be split
            placement("x4", [("q", "n3")], victims=[("g0", "n3")]),
            # two of the three: still split
            placement("x5", [("p", "n3")], cpu=2000, victims=[("g0", "n3"), ("g1", "n3")]),
        ]
    )
    assert kinds(decisions) == [
        ("rejected", "PreemptionIllegal"),
        ("rejected", "PreemptionIllegal"),
        ("rejected", "VictimGone"),
        ("rejected", "VictimGangSplit"),
        ("rejected", "VictimGangSplit"),
    ]
    assert "production may not preempt t/prod1 (production)" in decisions[0]["data"]["message"]
    # The whole gang goes: legal, and the room is there.
    [ok] = await service.decide(
        [placement("x6", [("p", "n3")], cpu=2000, victims=[(f"g{i}", "n3") for i in range(3)])]
    )
    assert kinds([ok]) == [("committed", None)]
    # A victim evicted earlier in a batch cannot be evicted again in it.
    await append_events(
        store,
        node("n4"),
        pod("v", priority=BE, node_name="n4"),
        pod("r1", priority=PROD),
        pod("r2", priority=PROD),
        pod("filler", priority=BE, node_name="n4"),
    )
    twice = await service.decide(
        [
            placement("y1", [("r1", "n4")], victims=[("v", "n4")]),
            placement("y2", [("r2", "n4")], victims=[("v", "n4")]),
        ]
    )
    assert kinds(twice) == [("committed", None), ("rejected", "VictimGone")]
    assert not [t for t, _ in await log_types(store) if t == POD_EVICTED][4:]
    report = await audit_store(store)
    assert report["ok"], report
    await service.stop()


def _forged_log(victim_priority: int, gang_min: int | None = None) -> list[tuple[int, dict]]:
    """A log whose decision evicts by hand, as a buggy or foreign writer might."""
    events = [node("n1"), node("n2")]
    if gang_min:
        events += [
            podgroup("g", gang_min),
            pod("v", priority=victim_priority, gang="g", node_name="n1"),
            pod("w", priority=victim_priority, gang="g", node_name="n2"),
        ]
    else:
        events += [pod("v", "2", priority=victim_priority, node_name="n1")]
    # p needs the whole of n1 (2 CPUs): the eviction is necessary (audit checks that).
    events += [pod("p", "2", priority=PROD)]
    data = placement("f", [("p", "n1")], cpu=2000, victims=[("v", "n1")])
    did = decision_id("f")
    events += [
        ev(
            f"evicted-f-{v['pod']}",
            POD_EVICTED,
            {"pod": v["pod"], "node": v["node"], "reason": "Preempted", "decision": did},
        )
        for v in data["victims"]
    ]
    events += [ev(did, PLACEMENT_COMMITTED, data)]
    return list(enumerate(events, start=1))


def test_audit_flags_prod_preempting_prod_and_split_gangs():
    assert audit_events(_forged_log(BATCH))["ok"]
    report = audit_events(_forged_log(PROD + 1))
    assert report["by_kind"] == {"preemption_illegal": 1}
    assert "production pod(s) t/p evicted t/v (production)" in report["violations"][0]["detail"]
    # The band config decides: with production from 1001 up, the victim is production
    # and the preemptor (1000) only batch: illegal either way round.
    assert not audit_events(_forged_log(PROD + 1), bands=parse_bands({"production": 1001}))["ok"]
    # ... and with monitoring from 1000, the preemptor is monitoring: still prod on prod.
    assert audit_events(
        _forged_log(PROD + 1), bands=parse_bands({"monitoring": 1000, "production": 500})
    )["by_kind"] == {"preemption_illegal": 1}
    split = audit_events(_forged_log(BATCH, gang_min=2))
    assert split["by_kind"] == {"gang_split": 1}
    # victims named but never evicted, and an eviction for a decision that never comes
    log = _forged_log(BATCH)
    dropped = [e for e in log if e[1]["type"] != POD_EVICTED]
    assert audit_events(dropped)["by_kind"]["preemption_unrecorded"] == 1
    orphan = [e for e in log if e[1]["type"] != PLACEMENT_COMMITTED]
    assert audit_events(orphan)["by_kind"] == {"preemption_unrecorded": 1}


def test_audit_flags_a_preemption_whose_pods_had_room():
    # Issue 19: a forged preemption evicted running pods from a node that had room.
    # p asks for 1 CPU of n1's 2 while v holds 1: v's eviction was not needed.
    log = _forged_log(BATCH)
    roomy = []
    for pos, e in log:
        if e["type"] == POD_SUBMITTED and e["data"]["metadata"]["name"] == "v":
            e = pod("v", "1", priority=BATCH, node_name="n1")
        if e["type"] == POD_SUBMITTED and e["data"]["metadata"]["name"] == "p":
            e = pod("p", "1", priority=PROD)
        if e["type"] == PLACEMENT_COMMITTED:
            e = {
                **e,
                "data": {
                    **e["data"],
                    "bindings": [
                        {**b, "resources": {"cpu": 1000, "memory": 2**30}}
                        for b in e["data"]["bindings"]
                    ],
                },
            }
        roomy.append((pos, e))
    report = audit_events(roomy)
    assert report["by_kind"] == {"preemption_unnecessary": 1}
    assert "fit on n1 without evicting anyone" in report["violations"][0]["detail"]


async def until(es, predicate, what: str, within: float = 30.0):
    """The folded log once ``predicate(state, events)`` holds (fails after ``within`` s)."""

    async def folded():
        state = await fold_log(es)
        events = [orjson.loads(r.payload) for r in await es.read(0, 1_000_000)]
        return (state, events) if predicate(state, events) else None

    return await eventually(folded, within, interval=0.1, message=f"waiting for {what}")


def reported(events: list[dict], pod_key: str) -> bool:
    return any(e["type"] == POD_UNSCHEDULABLE and e["data"]["pod"] == pod_key for e in events)


def phase(state, key: str) -> str:
    return state.pod(key)["phase"]


def running(state, gang: str) -> int:
    """Running members of ``gang`` (0 while the log does not have it yet)."""
    return state.summary()["gangs"].get(gang, {}).get("Running", 0)


async def test_replica_preempts_lowest_bands_first_end_to_end(store_url):
    # 4 nodes of 2 cpu, full: best-effort on n1/n2, batch on n3, production on n4.
    events = [node(f"n{i}") for i in range(1, 5)]
    events += [
        pod("be1", "2", priority=BE, node_name="n1"),
        pod("be2", "2", priority=BE + 1, node_name="n2"),
        pod("batch3", "2", priority=BATCH, node_name="n3"),
        pod("prod4", "2", priority=PROD, node_name="n4"),
        pod("urgent", "2", priority=PROD + 10),
    ]
    async with up_running(store_url, events) as run:
        es = run.store
        state, evs = await until(es, lambda s, e: reported(e, "t/be1"), "the victim's report")
        assert state.pod("t/urgent")["node"] == "n1"  # lowest victim: best-effort, priority 0
        assert phase(state, "t/be1") == "Pending"
        assert all(phase(state, f"t/{k}") == "Running" for k in ("be2", "batch3", "prod4"))
        # The victim cannot preempt anything back (best-effort): reported, nothing else.
        assert {e["data"]["pod"] for e in evs if e["type"] == POD_UNSCHEDULABLE} == {"t/be1"}
        # Production never preempts production; be2 (best-effort) goes before batch3.
        await append_events(es, pod("urgent2", "2", priority=PROD))
        state, _ = await until(es, lambda s, e: reported(e, "t/be2"), "be2 evicted")
        assert state.pod("t/urgent2")["node"] == "n2"
        await append_events(es, pod("urgent3", "2", priority=PROD))
        state, _ = await until(es, lambda s, e: reported(e, "t/batch3"), "batch3 evicted")
        assert state.pod("t/urgent3")["node"] == "n3"
        await append_events(es, pod("urgent4", "2", priority=PROD))
        state, _ = await until(es, lambda s, e: reported(e, "t/urgent4"), "urgent4 reported")
        assert phase(state, "t/urgent4") == "Pending"  # only prod left: nothing to evict
        assert phase(state, "t/prod4") == "Running"
        report = await audit_store(es)
    assert report["ok"], report
    assert report["checked"]["preemptions"] == 3


async def test_a_gang_preempts_whole_and_a_victim_gang_goes_whole(store_url):
    events = [node(f"n{i}") for i in range(1, 5)]
    events += [
        podgroup("low", 2),
        *(pod(f"l{i}", "2", gang="low", priority=BE, node_name=f"n{i + 1}") for i in range(2)),
        pod("b3", "2", priority=BATCH, node_name="n3"),
        pod("b4", "2", priority=BATCH, node_name="n4"),
        podgroup("hi", 3),
        *(pod(f"h{i}", "2", gang="hi", priority=PROD) for i in range(3)),
    ]
    async with up_running(store_url, events) as run:
        es = run.store
        state, evs = await until(
            es,
            lambda s, e: running(s, "t/hi") == 3 and reported(e, "t/l0"),
            "the gang placed and the victims reported",
        )
        gangs = state.summary()["gangs"]
        assert gangs["t/low"]["Running"] == 0  # evicted whole: both best-effort members
        evicted = [e["data"]["pod"] for e in evs if e["type"] == POD_EVICTED]
        # the gang's three members: the low gang (cheapest band) and one batch pod
        assert {"t/l0", "t/l1"} <= set(evicted) and len(evicted) == 3
        report = await audit_store(es)
    assert report["ok"], report


async def test_two_big_gangs_never_deadlock(pg_url):
    # Volcano's classic: two 100-pod jobs on 100 nodes, each pod needing a whole node.
    n = 100
    events = [node(f"n{i:03d}") for i in range(n)]
    for g in ("a", "b"):
        events.append(podgroup(g, n))
    for i in range(n):  # interleaved, as two job controllers would submit them
        events.append(pod(f"a{i:03d}", "2", gang="a", priority=BATCH))
        events.append(pod(f"b{i:03d}", "2", gang="b", priority=BATCH))

    def one_gang_and_reports(s, e):
        return {running(s, "t/a"), running(s, "t/b")} == {0, n} and any(
            x["type"] == POD_UNSCHEDULABLE for x in e
        )

    async with up_running(pg_url, events) as run:
        es = run.store
        state, evs = await until(es, one_gang_and_reports, "one whole gang placed")
        gangs = state.summary()["gangs"]
        loser = "a" if gangs["t/a"]["Running"] == 0 else "b"
        assert gangs[f"t/{loser}"]["Pending"] == n  # the loser holds nothing
        reports = [e for e in evs if e["type"] == POD_UNSCHEDULABLE]
        assert all(e["data"]["pod"].startswith(f"t/{loser}") for e in reports)
        assert (
            f"gang t/{loser}: 0/100 members fit; short of cpu: 200" in reports[0]["data"]["message"]
        )
        # The winner finishes: the loser runs whole. Nobody waited on a partial holding.
        winner = "b" if loser == "a" else "a"
        await append_events(
            es,
            *(
                ev(
                    f"done-{winner}{i:03d}",
                    POD_SUCCEEDED,
                    {"metadata": {"name": f"{winner}{i:03d}", "namespace": "t"}},
                )
                for i in range(n)
            ),
        )
        await until(es, lambda s, e: running(s, f"t/{loser}") == n, "the second gang placed")
        report = await audit_store(es)
    assert report["ok"] and report["checked"]["gang_decisions"] == 2


async def test_a_priority_class_mapped_to_a_lower_band_is_preemptible(store_url):
    victim = pod("v", "2", priority=PROD, node_name="n1")
    victim["data"]["spec"]["priorityClassName"] = "nightly"
    bands = parse_bands({"classes": {"nightly": "batch"}})
    events = [node("n1"), victim, pod("p", "2", priority=PROD)]
    async with up_running(store_url, events, bands=bands) as run:
        es = run.store
        state, _ = await until(es, lambda s, e: reported(e, "t/v"), "the victim's report")
        assert phase(state, "t/p") == "Running" and phase(state, "t/v") == "Pending"
        assert (await audit_store(es, bands=bands))["ok"]
        # Audited with the default bands (no class mapping) the eviction is prod on prod.
        assert (await audit_store(es))["by_kind"] == {"preemption_illegal": 1}


async def test_a_podgroups_priority_class_is_its_gangs_band_for_preemption(store_url):
    # The members' own priority is 0 (best-effort); their PodGroup's class is mapped to
    # production, which the gang is (Volcano: the PodGroup carries the job's priority):
    # it preempts the best-effort pods filling the node, as one transaction.
    bands = parse_bands({"classes": {"critical": "production"}})
    group = podgroup("g", 2)
    group["data"]["spec"]["priorityClassName"] = "critical"
    events = [
        node("n1"),
        pod("v1", priority=BE, node_name="n1"),
        pod("v2", priority=BE, node_name="n1"),
        group,
        pod("g0", gang="g", priority=BE),
        pod("g1", gang="g", priority=BE),
    ]
    async with up_running(store_url, events, bands=bands) as run:
        es = run.store
        state, evs = await until(es, lambda s, e: running(s, "t/g") == 2, "the gang placed")
        assert phase(state, "t/v1") == "Pending" and phase(state, "t/v2") == "Pending"
        assert state.pod("t/g0")["priority"] == BE  # the number stays the pod's own
        evicted = {e["data"]["pod"] for e in evs if e["type"] == POD_EVICTED}
        assert evicted == {"t/v1", "t/v2"}
        assert (await audit_store(es, bands=bands))["ok"]
        # Audited without the mapping, best-effort evicted best-effort: illegal.
        assert (await audit_store(es))["by_kind"] == {"preemption_illegal": 2}


def test_a_podgroups_builtin_priority_class_sets_its_members_priority():
    from esched.core import ClusterState

    group = podgroup("g", 1)
    group["data"]["spec"]["priorityClassName"] = "system-cluster-critical"
    own = pod("g1", gang="g", priority=5)
    own["data"]["spec"]["priorityClassName"] = "low"
    s = ClusterState()
    s.apply_many(
        list(
            enumerate(
                [node("n1"), group, pod("g0", gang="g"), own, pod("loner", priority=5)], start=1
            )
        )
    )
    # Members take the PodGroup's class (and a built-in class's value); others keep theirs.
    assert s.pod("t/g0")["priority"] == s.pod("t/g1")["priority"] == 2_000_000_000
    assert s.class_specs[s.pod("t/g1")["class"]]["priorityClassName"] == "system-cluster-critical"
    assert s.pod("t/loner")["priority"] == 5


def test_bands_from_the_config_file_flag_and_environment(tmp_path):
    from click.testing import CliRunner

    from esched.services.cli import EXIT_USAGE, cli

    store = f"sqlite:///{tmp_path / 'a.sqlite'}"
    good = tmp_path / "good.yaml"
    # class names keep their dashes (config keys elsewhere may be spelled either way)
    good.write_text("bands:\n  production: 500\n  classes:\n    nightly-etl: batch\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("bands:\n  classes:\n    nightly-etl: urgent\n")
    runner = CliRunner()
    ok = runner.invoke(cli, ["--config", str(good), "audit", "--store", store])
    assert ok.exit_code == 0, ok.output
    res = runner.invoke(cli, ["--config", str(bad), "audit", "--store", store])
    assert res.exit_code == EXIT_USAGE and "bands.classes.nightly-etl" in res.output
    res = runner.invoke(cli, ["audit", "--store", store, "--bands", "{batch: 5000}"])
    assert res.exit_code == EXIT_USAGE and "monitoring > production > batch" in res.output
    res = runner.invoke(cli, ["audit", "--store", store], env={"ESCHED_BANDS": str(good)})
    assert res.exit_code == 0, res.output


# ---------------------------------------------------------------------- starvation


async def test_commit_keeps_reserved_nodes_for_their_gang(store):
    await append_events(
        store,
        node("n1"),
        node("n2"),
        podgroup("g", 2),
        *(pod(f"g{i}", "2", gang="g") for i in range(2)),
        pod("small"),
        ev("reserve-1", GANG_RESERVED, {"gang": "t/g", "nodes": ["n1", "n2"], "message": "test"}),
    )
    service = CommitService(store)
    decisions = await service.decide(
        [
            placement("s", [("small", "n1")]),
            placement("g", [("g0", "n1"), ("g1", "n2")], gang="t/g", cpu=2000),
        ]
    )
    assert kinds(decisions) == [("rejected", "NodeReserved"), ("committed", None)]
    assert service.state.reservations == {}  # placed: the nodes are given back
    assert (await audit_store(store))["ok"]
    await service.stop()


async def test_replay_shows_a_reservation_until_its_gang_is_placed(store, store_url):
    from click.testing import CliRunner

    from esched.services.cli import cli
    from esched.services.replay import format_table

    await append_events(
        store,
        node("n1"),
        node("n2"),
        podgroup("g", 2),
        *(pod(f"g{i}", "2", gang="g") for i in range(2)),
        ev("reserve-1", GANG_RESERVED, {"gang": "t/g", "nodes": ["n1", "n2"], "message": "test"}),
    )
    summary = (await fold_log(store)).summary()
    assert summary["reservations"] == {"t/g": ["n1", "n2"]}
    assert "t/g" in format_table(summary) and "n1 n2" in format_table(summary)
    # `esched replay` (a separate fold of the same log, as after any restart) shows it.
    res = await asyncio.to_thread(
        CliRunner().invoke, cli, ["replay", "--store", store_url, "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    assert orjson.loads(res.stdout)["reservations"] == {"t/g": ["n1", "n2"]}
    service = CommitService(store)
    await service.decide([placement("g", [("g0", "n1"), ("g1", "n2")], gang="t/g", cpu=2000)])
    await service.stop()
    assert (await fold_log(store)).summary()["reservations"] == {}


async def _stream(es, steps: int) -> int:
    """Small pods finishing and arriving two at a time around a 4-node gang; returns
    the step at which the gang ran (or -1)."""
    started = 8
    for step in range(steps):
        state = await fold_log(es)
        if running(state, "t/big") == 4:
            return step
        old = [
            f"s{i}"
            for i in range(started)
            if state.pod(f"t/s{i}") and phase(state, f"t/s{i}") == "Running"
        ][:2]
        new = [f"s{started + i}" for i in range(2)]
        started += 2
        await append_events(
            es,
            *(
                ev(f"done-{p}", POD_SUCCEEDED, {"metadata": {"name": p, "namespace": "t"}})
                for p in old
            ),
            *(pod(p, priority=BATCH) for p in new),
        )

        def settled(s, e, new=new):  # the new small pods placed, or held back
            return all(phase(s, f"t/{p}") == "Running" or reported(e, f"t/{p}") for p in new)

        await until(es, settled, f"step {step}")
        if not old:  # drained: only the gang's retry (after its backoff) is left
            await asyncio.sleep(0.5)
    return -1


async def test_a_big_gang_behind_a_stream_of_small_pods_runs_with_a_reservation(pg_url, tmp_path):
    # 4 nodes of 2 cpu, 8 small 1-cpu pods; the gang needs all 4 nodes whole. Every step
    # two small pods finish and two arrive: without a reservation the newcomers always
    # take the freed room and the gang starves; with one, the nodes drain for it.
    events = [node(f"n{i}") for i in range(4)]
    events += [pod(f"s{i}", priority=BATCH, node_name=f"n{i // 2}") for i in range(8)]
    events += [
        podgroup("big", 4),
        *(pod(f"b{i}", "2", gang="big", priority=BATCH) for i in range(4)),
    ]
    control = f"sqlite:///{tmp_path / 'control.sqlite'}"
    async with up_running(control, events, reserve_after=None) as run:
        es = run.store
        ran = await _stream(es, steps=8)
    assert ran == -1  # starved
    async with up_running(pg_url, events, reserve_after=0.2) as run:
        es = run.store
        # The gang is re-tried when capacity frees, after the dispatcher's backoff.
        ran = await _stream(es, steps=60)
        state = await fold_log(es)
        evs = [orjson.loads(r.payload) for r in await es.read(0, 100_000)]
        report = await audit_store(es)
    assert ran > 0, "the gang never ran"
    assert state.reservations == {}  # placed: the nodes are given back
    reservations = [e for e in evs if e["type"] == GANG_RESERVED]
    assert len(reservations) == 1 and reservations[0]["data"]["gang"] == "t/big"
    assert sorted(reservations[0]["data"]["nodes"]) == ["n0", "n1", "n2", "n3"]
    held = [
        e for e in evs if e["type"] == POD_UNSCHEDULABLE and "NodeReserved" in e["data"]["reasons"]
    ]
    assert held  # newcomers were held back while the nodes drained
    assert report["ok"], report


async def test_audit_upto_between_the_evictions_and_their_decision(store):
    await append_events(
        store, node("n1"), pod("v", "2", priority=BE, node_name="n1"), pod("p", "2", priority=PROD)
    )
    service = CommitService(store)
    await service.decide([placement("pre", [("p", "n1")], cpu=2000, victims=[("v", "n1")])])
    await service.stop()
    head = await store.head()
    cut = await audit_store(store, upto=head - 1)  # the eviction, not yet its decision
    assert cut["ok"], cut
    assert cut["checked"]["evictions_awaiting_decision"] == 1
    assert (await audit_store(store))["ok"]


def _anti_affine_preemption(victim_app: str) -> list[tuple[int, dict]]:
    """n1 (4 CPUs) runs v (1 CPU, app=<victim_app>); p (1 CPU, production) is
    anti-affine to app=web on the same host and evicts v to go to n1."""
    host = "kubernetes.io/hostname"
    victim = pod("v", "1", priority=BATCH, node_name="n1")
    victim["data"]["metadata"]["labels"] = {"app": victim_app}
    preemptor = pod("p", "1", priority=PROD)
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": host}
    preemptor["data"]["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    }
    data = placement("f", [("p", "n1")], cpu=1000, victims=[("v", "n1")])
    did = decision_id("f")
    evicted = ev(
        "evicted-f-t/v",
        POD_EVICTED,
        {"pod": "t/v", "node": "n1", "reason": "Preempted", "decision": did},
    )
    events = [node("n1", "4", labels={host: "n1"}), victim, preemptor, evicted]
    return list(enumerate([*events, ev(did, PLACEMENT_COMMITTED, data)], start=1))


def test_audit_counts_a_preemption_needed_for_anti_affinity_as_necessary():
    # kube-scheduler's DefaultPreemption keeps a victim only if the preemptor fails
    # its filters with the victim on the node, every filter, not resources alone
    # (SelectVictimsOnNode, pkg/scheduler/framework/plugins/defaultpreemption/
    # default_preemption.go). n1 had CPU to spare, but p may not share a host with
    # an app=web pod: evicting v was what let p on.
    assert audit_events(_anti_affine_preemption("web"))["ok"]
    # The same eviction of a pod p does not mind: unnecessary.
    report = audit_events(_anti_affine_preemption("db"))
    assert report["by_kind"] == {"preemption_unnecessary": 1}
    assert "fit on n1 without evicting anyone" in report["violations"][0]["detail"]


GPU = "esched.dev/gpu-milli"


def _gpu_preemption(*, neighbour: bool, devices: bool) -> list[tuple[int, dict]]:
    """n1 has two GPU devices; v (batch) holds half of device 0, and with
    ``neighbour`` w (production) half of device 1; p (production) asks for a whole
    GPU and evicts v, bound to device 0 (named in its binding with ``devices``)."""
    n1 = node("n1", "8")
    n1["data"]["status"]["allocatable"][GPU] = "2000"

    def gpu_pod(name: str, milli: int, priority: int) -> dict:
        e = pod(name, "1", priority=priority)
        e["data"]["spec"]["containers"][0]["resources"]["requests"][GPU] = str(milli)
        return e

    def bound(pid: str, binds: list[tuple[str, int, int | None]], **kw) -> dict:
        data = placement(pid, [(p, "n1") for p, _m, _d in binds], **kw)
        for b, (_p, milli, dev) in zip(data["bindings"], binds, strict=True):
            b["resources"][GPU] = milli
            if dev is not None:
                b["devices"] = [dev]
        return data

    running = [("v", 500, 0)] + ([("w", 500, 1)] if neighbour else [])
    events = [n1, gpu_pod("v", 500, BATCH), gpu_pod("w", 500, PROD), gpu_pod("p", 1000, PROD)]
    events.append(ev(decision_id("s"), PLACEMENT_COMMITTED, bound("s", running)))
    did = decision_id("f")
    events.append(
        ev(
            "evicted-f-t/v",
            POD_EVICTED,
            {"pod": "t/v", "node": "n1", "reason": "Preempted", "decision": did},
        )
    )
    f = bound("f", [("p", 1000, 0 if devices else None)], victims=[("v", "n1")])
    events.append(ev(did, PLACEMENT_COMMITTED, f))
    return list(enumerate(events, start=1))


def test_audit_judges_a_gpu_preemption_by_the_placers_device_exact_fit():
    # v and w each hold half a device: the node's summed GPU has room for p's whole
    # GPU, no single device has. Evicting v was needed (the placer's DeviceTable.fits).
    assert audit_events(_gpu_preemption(neighbour=True, devices=True))["ok"]
    # Without w, device 1 is idle: p fitted there with v running.
    report = audit_events(_gpu_preemption(neighbour=False, devices=True))
    assert report["by_kind"] == {"preemption_unnecessary": 1}, report
    assert "fit on n1 without evicting anyone" in report["violations"][0]["detail"]
    # A binding without devices is judged by the summed GPU, as the commit service
    # judges it (best fit takes devices later): room for p with v running.
    summed = audit_events(_gpu_preemption(neighbour=True, devices=False))
    assert summed["by_kind"] == {"preemption_unnecessary": 1}, summed
