"""The deployment as separate processes, against real PostgreSQL and the real broker.

``esched ingest``, two ``esched commit`` (one leads, one stands by), ``esched
dispatch`` and two ``esched replica`` run as their own processes; the workload
goes in with ``esched publish``. Mid-run one replica and then the active commit
service are killed with SIGKILL (no goodbye to the group, no lease release).
Checked from the log afterwards:

* the standby commit service leads within seconds of the kill (it reads the
  proposals topic without joining a group, so it has nothing to wait for);
* the surviving replica places pods from every work partition, the dead one's
  included, once the group has rebalanced;
* every placeable pod is committed exactly once (none twice, none forgotten), a
  gang all at once, and the pods no node fits are reported unschedulable;
* ``esched audit`` passes.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest
from aiokafka.partitioner import DefaultPartitioner

from esched.schemas.events import PLACEMENT_COMMITTED
from esched.services.devbroker import DevBroker
from esched.services.procs import run_esched, service_env, wait_until
from esched.services.synth import node_event, pod_event
from support.processes import TANSU_REPLICA_ARGS, Log, Processes, group_settled, write_events

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

NAMESPACE = "synth"
#: Partitions of the work topic (KafkaBus.ensure_topics' default).
WORK_PARTITIONS = 3


def _podgroup(name: str, min_member: int) -> dict:
    return {
        "specversion": "1.0",
        "id": f"pg-{name}",
        "source": "test",
        "type": "esched.podgroup.submitted",
        "data": {
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"minMember": min_member},
        },
    }


def _big_pod(j: int) -> dict:
    """A pod no node fits (200 CPUs): must end reported unschedulable, never committed."""
    ev = pod_event(j, random.Random(j), NAMESPACE)
    ev["data"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "200"
    return ev


def _gang_pod(j: int, gang: str) -> dict:
    ev = pod_event(j, random.Random(j), NAMESPACE)
    ev["data"]["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": gang}
    return ev


def test_processes_survive_kill9_of_a_replica_and_the_commit_leader(
    pg_url: str, dev_broker: DevBroker, tmp_path: Path
) -> None:
    env = service_env(pg_url, dev_broker.bootstrap)
    store_log = Log(pg_url)
    # 60 nodes (1,800 cores) and 600 ordinary pods (~1,230 cores): all fit, ~70% full.
    rng = random.Random(11)
    nodes = [node_event(i) for i in range(60)]
    plain = [pod_event(j, rng, NAMESPACE) for j in range(600)]
    gang = [_podgroup("g", 3), *(_gang_pod(1000 + k, "g") for k in range(3))]
    big = [_big_pod(2000 + k) for k in range(3)]
    waves = [
        write_events(tmp_path / "wave1.jsonl", nodes + plain[:200]),
        write_events(tmp_path / "wave2.jsonl", plain[200:400] + gang),
        write_events(tmp_path / "wave3.jsonl", plain[400:] + big),
    ]
    placeable = {f"{NAMESPACE}/{e['data']['metadata']['name']}" for e in plain + gang[1:]}
    unplaceable = {f"{NAMESPACE}/{e['data']['metadata']['name']}" for e in big}

    procs = Processes(env, tmp_path)
    services, start, publish = procs.services, procs.start, procs.publish

    try:
        start("ingest", "ingest")
        commit_a = start("commit-a", "commit", "--snapshot-every", "300")
        wait_until(
            "commit-a to lead", lambda: commit_a.logged("commit service leading"), 60, services
        )
        commit_b = start("commit-b", "commit")
        start("dispatch", "dispatch")
        r1 = start("replica-r1", "replica", "--id", "r1", "--seed", "1", *TANSU_REPLICA_ARGS)
        r2 = start("replica-r2", "replica", "--id", "r2", "--seed", "2", *TANSU_REPLICA_ARGS)
        wait_until(
            "both replicas ready",
            lambda: r1.logged("replica r1 ready") and r2.logged("replica r2 ready"),
            60,
            services,
        )

        # Wave 1, then kill -9 a replica that is placing (its group share moves to r2)
        # in a settled group (support.processes.group_settled says why).
        publish(waves[0])
        wait_until("r1 to commit placements", lambda: "r1" in store_log.replicas(), 60, services)
        wait_until("the replicas' group settled", lambda: group_settled([r1, r2]), 60, services)
        r1.kill9()
        killed_r1 = time.monotonic()
        # Wave 2 lands partly on r1's partitions: only r2 can place it, after the rebalance.
        publish(waves[1])
        time.sleep(0.5)
        commit_a.kill9()
        killed_commit = time.monotonic()
        # Wave 3 goes out while the leader is down. `esched publish` is a process of
        # its own (seconds to start on a busy machine), so it runs beside the wait
        # and the takeover is timed on its own.
        with ThreadPoolExecutor(1) as pool:
            published = pool.submit(publish, waves[2])
            wait_until(
                "the standby commit service to lead",
                lambda: commit_b.logged("commit service leading"),
                30,
                services,
            )
            takeover = time.monotonic() - killed_commit  # within 0.2 s of the poll
            published.result()

        def done() -> bool:
            committed = store_log.committed()
            return placeable <= committed.keys() and unplaceable <= store_log.unschedulable()

        wait_until("every placeable pod committed", done, 90, services)
        finished = time.monotonic()
        time.sleep(1.0)  # anything still in flight would show up as a second binding
        committed = store_log.committed()
        by = store_log.by
        audit = run_esched(["audit", "--format", "json"], env, 120, check=False)
    finally:
        statuses = {s.name: s.stop() for s in services}

    twice = {pod: n for pod, n in committed.items() if n > 1}
    assert not twice, f"pods committed more than once: {twice}"
    assert committed.keys() == placeable, (
        placeable - committed.keys(),
        committed.keys() - placeable,
    )
    # The surviving replica placed pods of every work partition, r1's included.
    partitioner = DefaultPartitioner()
    parts = list(range(WORK_PARTITIONS))
    by_r2 = {
        partitioner(pod.encode(), parts, parts)
        for pod, r in by.items()
        if r == "r2" and pod in placeable
    }
    assert by_r2 == set(parts), f"r2 placed work of partitions {by_r2} only"
    assert takeover < 5, f"standby led {takeover:.1f}s after the kill"
    report = orjson.loads(audit.stdout)
    assert audit.returncode == 0 and report["ok"], report
    # The services still alive shut down cleanly on SIGTERM.
    assert all(statuses[n] == 0 for n in ("ingest", "commit-b", "dispatch", "replica-r2")), statuses
    print(
        f"standby led {takeover:.1f}s after the commit kill; all placed "
        f"{finished - killed_r1:.1f}s after the replica kill "
        f"({finished - killed_commit:.1f}s after the commit kill)"
    )


def test_preemption_over_kafka_as_processes(
    pg_url: str, dev_broker: DevBroker, tmp_path: Path
) -> None:
    """A production pod preempts best-effort pods with every service its own process
    (ingest, commit, dispatch, a replica) on the real broker and PostgreSQL: the
    victims get their eviction events in the decision's append, go back to Pending,
    are dispatched again and reported unschedulable (nothing lower to evict), and
    ``esched audit`` passes."""
    from support.events import node, pod

    env = service_env(pg_url, dev_broker.bootstrap)
    store_log = Log(pg_url)
    # Two 2-CPU nodes filled by four 1-CPU best-effort pods (priority 0).
    fill = [node("n1"), node("n2"), *(pod(f"be{i}", priority=0) for i in range(4))]
    urgent = [pod("prod", "2", priority=1000)]

    procs = Processes(env, tmp_path)
    services, publish = procs.services, procs.publish

    try:
        procs.start_placing()
        publish(write_events(tmp_path / "fill.jsonl", fill))
        be = {f"t/be{i}" for i in range(4)}
        wait_until(
            "the best-effort pods placed", lambda: be <= store_log.committed().keys(), 60, services
        )
        publish(write_events(tmp_path / "urgent.jsonl", urgent))

        def victims_reported() -> bool:
            evs = store_log.read()
            evicted = {e["data"]["pod"] for e in evs if e["type"] == "esched.pod.evicted"}
            return (
                "t/prod" in store_log.committed()
                and len(evicted) == 2
                and evicted <= store_log.unschedulable()
            )

        wait_until(
            "the preemption committed and the victims reported", victims_reported, 60, services
        )
        events = store_log.read()
        audit = run_esched(["audit", "--format", "json"], env, 120, check=False)
        replay = run_esched(["replay", "--format", "json"], env, 120, check=False)
    finally:
        statuses = {s.name: s.stop() for s in services}

    (decision,) = [
        e
        for e in events
        if e["type"] == PLACEMENT_COMMITTED and e["data"]["bindings"][0]["pod"] == "t/prod"
    ]
    at = events.index(decision)
    evictions = events[at - 2 : at]
    # Victims and preemptor in one transaction: the evictions just before the decision.
    assert [e["type"] for e in evictions] == ["esched.pod.evicted"] * 2
    assert {e["data"]["reason"] for e in evictions} == {"Preempted"}
    assert {e["data"]["decision"] for e in evictions} == {decision["id"]}
    node_name = decision["data"]["bindings"][0]["node"]
    assert {e["data"]["node"] for e in evictions} == {node_name}
    assert sorted(v["pod"] for v in decision["data"]["victims"]) == sorted(
        e["data"]["pod"] for e in evictions
    )
    # Back to Pending (the log's fold, by `esched replay`): 2 running, 2 pending.
    summary = orjson.loads(replay.stdout)
    assert replay.returncode == 0 and summary["pods"]["Pending"] == 2, summary
    assert summary["pods"]["Running"] == 3
    report = orjson.loads(audit.stdout)
    assert audit.returncode == 0 and report["ok"], report
    assert report["checked"]["preemptions"] == 1 and report["checked"]["evictions"] == 2
    assert all(statuses[n] == 0 for n in ("ingest", "commit", "dispatch", "replica-r1")), statuses
