"""The audit: a clean log passes; hand-made bad decisions are named by position."""

from __future__ import annotations

import asyncio

import orjson
from click.testing import CliRunner

from esched.services.audit import audit_events, audit_store, format_report
from esched.services.cli import EXIT_FAILURE, cli
from esched.services.commit import CommitService
from esched.services.store import open_store
from support.events import append_events, ev, node, placement, pod, podgroup


def committed(pid: str, binds: list[tuple[str, str]], gang: str | None = None) -> dict:
    return ev(f"decision-{pid}", "esched.placement.committed", placement(pid, binds, gang=gang))


def rejected(pid: str, binds: list[tuple[str, str]], reason: str) -> dict:
    body = {
        **placement(pid, binds),
        "pods": [f"t/{p}" for p, _ in binds],
        "reason": reason,
        "message": "hand-made",
    }
    return ev(f"decision-{pid}", "esched.placement.rejected", body)


#: A log with one sound decision and one bad decision of each kind.
BAD_LOG = [
    node("n1"),
    node("n2"),  # 1, 2
    pod("a"),
    pod("b"),
    pod("c"),
    pod("d"),
    pod("e"),  # 3..7
    podgroup("g", 3),  # 8
    pod("g0", gang="g"),
    pod("g1", gang="g"),
    pod("g2", gang="g"),  # 9..11
    committed("ok", [("a", "n1")]),  # 12: sound
    committed("over", [("b", "n1"), ("c", "n1")]),  # 13: n1 3 cpu > 2
    committed("twice", [("a", "n2")]),  # 14: a already bound
    ev("rm-n2", "esched.node.removed", {"metadata": {"name": "n2"}}),  # 15
    committed("gone", [("d", "n2")]),  # 16: n2 removed
    node("n3", cpu="8"),  # 17
    committed("half", [("g0", "n3"), ("g1", "n3")], gang="t/g"),  # 18: 2 < minMember 3
    rejected("nope", [("e", "n3")], "insufficient_cpu"),  # 19: but it fits (an old spelling)
]


async def test_a_log_written_by_the_commit_service_passes(store):
    await append_events(
        store,
        node("n1"),
        node("n2", cpu="1"),
        *(pod(p) for p in "abcd"),
        podgroup("g", 2),
        pod("g0", gang="g"),
        pod("g1", gang="g"),
    )
    service = CommitService(store)
    await service.decide(
        [
            placement("p1", [("a", "n1")]),
            placement("p2", [("b", "n1")]),
            placement("p3", [("c", "n1")]),
            placement("p4", [("a", "n2")]),
        ]
    )
    await service.decide(
        [
            placement("p5", [("g0", "n2"), ("g1", "n2")], gang="t/g"),
            placement("p6", [("g0", "n1")], gang="t/g"),
            placement("p7", [("d", "n2")]),
        ]
    )
    await append_events(store, node("n3", cpu="4"))
    await service.decide([placement("p8", [("g0", "n3"), ("g1", "n3")], gang="t/g")])
    await service.stop()
    report = await audit_store(store)
    assert report["ok"], report["violations"]
    assert report["position"] == await store.head()
    assert report["checked"]["decisions"] == 8
    assert report["checked"]["reproduced"] == 8
    assert report["checked"]["committed"] == 4 and report["checked"]["unverifiable"] == 0


async def test_bad_decisions_are_flagged_at_their_positions(store):
    await append_events(store, *BAD_LOG)
    report = await audit_store(store)
    assert not report["ok"]
    found = {(v["position"], v["kind"]) for v in report["violations"]}
    assert {
        (13, "overcommit"),
        (14, "double_binding"),
        (16, "unknown_node"),
        (18, "gang_partial"),
        (19, "irreproducible"),
    } <= found
    assert {kind for pos, kind in found if pos == 12} == set()  # the sound one
    # Each bad commit is also irreproducible: re-validation would have rejected it.
    assert {pos for pos, kind in found if kind == "irreproducible"} == {13, 14, 16, 18, 19}
    detail = {v["kind"]: v["detail"] for v in report["violations"]}
    assert "removed node n2" in detail["unknown_node"]
    assert "cpu 3000 > 2000" in detail["overcommit"]
    assert "2 running < minMember 3" in detail["gang_partial"]
    table = format_report(report)
    assert "VIOLATIONS" in table and "overcommit" in table


async def test_the_store_audit_folds_bytes_to_the_report_of_decoded_envelopes(store):
    # audit_store folds what it does not check from the stored bytes; audit_events
    # decodes every event: same verdicts, counts and state.
    await append_events(
        store,
        *BAD_LOG,
        pod("f"),
        ev("done-a", "esched.pod.succeeded", {"metadata": {"name": "a", "namespace": "t"}}),
    )
    rows = await store.read(0, 1000)
    from_store = await audit_store(store)
    assert from_store.pop("chain")["ok"]  # what only the store has: its hash chain
    assert audit_events([(r.position, orjson.loads(r.payload)) for r in rows]) == from_store


def test_the_cli_exit_status_names_the_positions(tmp_path):
    clean = f"sqlite:///{tmp_path}/clean.db"
    bad = f"sqlite:///{tmp_path}/bad.db"

    async def setup() -> None:
        for url, events in ((clean, BAD_LOG[:12]), (bad, BAD_LOG)):
            s = open_store(url)
            await s.connect()
            await s.migrate()
            await append_events(s, *events)
            await s.close()

    asyncio.run(setup())
    runner = CliRunner()
    ok = runner.invoke(cli, ["audit", "--store", clean], catch_exceptions=False)
    assert ok.exit_code == 0, ok.output
    assert orjson.loads(ok.stdout)["ok"] is True

    failed = runner.invoke(cli, ["audit", "--store", bad], catch_exceptions=False)
    assert failed.exit_code == EXIT_FAILURE
    assert orjson.loads(failed.stdout)["ok"] is False
    assert "positions 13, 14, 16, 18, 19" in failed.stderr

    table = runner.invoke(
        cli, ["audit", "--store", bad, "--format", "table", "--upto", "13"], catch_exceptions=False
    )
    assert table.exit_code == EXIT_FAILURE
    assert "position  13" in table.stdout and "overcommit" in table.stdout
