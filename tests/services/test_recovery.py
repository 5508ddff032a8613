"""How fast placement recovers from losing a replica or a broker pause, as processes.

``esched ingest``, ``commit``, ``dispatch`` and two ``esched replica`` run as their
own processes on the real broker and PostgreSQL. Once both replicas place, one
fault, then a wave of pods spread over every work partition; the recovery time is
from the fault (for a pause: from the broker's resumption) until the whole wave is
committed, with nothing committed twice:

* a replica stopped with SIGTERM leaves its group (LeaveGroup: its partitions move
  at once; but aiokafka sends it only from generation 1 on, and tansu, the tests'
  broker, numbers a group's first generation 0, so here both bounds are the session
  plus a rebalance);
* a replica killed with SIGKILL says no goodbye: its partitions move once its
  session times out (``--session-timeout``);
* a broker stopped with SIGSTOP and resumed with SIGCONT: the services reconnect.

And what the other replicas do meanwhile: three replicas under a steady load, one
killed with SIGKILL; the longest stretch without a committed placement, with the
replicas working their shares through the group's rebalance (``--bridge-rebalance``,
the default) and without.

Each test prints its recovery time (``pytest -s``); docs/operations.md records them.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path

import pytest

from esched.services.bus import BusError
from esched.services.devbroker import DevBroker
from esched.services.faults import RECONNECT_CAP, retry_transient
from esched.services.procs import ServiceProcess, service_env, wait_until
from esched.services.synth import node_event, pod_event
from support.processes import Log, Processes, group_settled, write_events

NAMESPACE = "synth"
#: Replica options of these tests (beside support.processes.TANSU_REPLICA_ARGS):
#: the default session, heartbeats well within it. Not shorter: on tansu a session
#: not above its SyncGroup hold (3 s) plus a heartbeat interval never lets the group
#: settle (esched.services.bus.kafka.TANSU_SYNC_HOLD_MS).
REPLICA_ARGS = ("--session-timeout", "6", "--heartbeat-interval", "0.5")
#: The session of REPLICA_ARGS.
SESSION = 6.0
#: A rebalance on tansu (a JoinGroup held 5 s, a SyncGroup 3 s), publishing the wave
#: (a process start) and placing it, with room for a loaded machine.
MARGIN = 14.0


def _pods(first: int, count: int) -> list[dict]:
    rng = random.Random(first)
    return [pod_event(j, rng, NAMESPACE) for j in range(first, first + count)]


def _names(events: list[dict]) -> set[str]:
    return {f"{NAMESPACE}/{e['data']['metadata']['name']}" for e in events}


def _recovery(
    pg_url: str,
    broker: DevBroker,
    tmp_path: Path,
    fault: Callable[[ServiceProcess, DevBroker], float],
    replica_args: tuple[str, ...] = REPLICA_ARGS,
    replicas: int = 2,
) -> float:
    """Seconds from ``fault(r1, broker)`` (which returns the fault's moment, a
    ``time.monotonic()``) until a wave published right after it is all committed."""
    env = service_env(pg_url, broker.bootstrap)
    store_log = Log(pg_url)
    nodes = [node_event(i) for i in range(20)]
    before, after = _pods(0, 60), _pods(1000, 60)
    procs = Processes(env, tmp_path)
    services = procs.services
    ids = [f"r{i}" for i in range(1, replicas + 1)]
    try:
        _commit, rs = procs.start_placing(replicas, replica_args)
        r1 = rs[0]
        procs.publish(write_events(tmp_path / "before.jsonl", nodes + before))
        wait_until(
            "every replica placing",
            lambda: (
                _names(before) <= store_log.committed().keys()
                and store_log.replicas() == set(ids)
                and group_settled(rs)
            ),
            60,
            [s for s in services if s is not r1],
        )
        at = fault(r1, broker)
        procs.publish(write_events(tmp_path / "after.jsonl", after))
        wave = _names(after)
        wait_until(
            "the wave after the fault committed",
            lambda: wave <= store_log.committed().keys(),
            120,
            [s for s in services if s is not r1],
            interval=0.05,
        )
        took = time.monotonic() - at
        committed = store_log.committed()
    finally:
        for s in services:
            s.stop()
    twice = {pod: n for pod, n in committed.items() if n > 1}
    assert not twice, f"pods committed more than once: {twice}"
    assert store_log.by.keys() >= wave
    return took


def _sigterm(r1: ServiceProcess, _broker: DevBroker) -> float:
    at = time.monotonic()
    assert r1.stop() == 0
    return at


def _sigkill(r1: ServiceProcess, _broker: DevBroker) -> float:
    at = time.monotonic()
    r1.kill9()
    return at


def _pause(seconds: float) -> Callable[[ServiceProcess, DevBroker], float]:
    def fault(_r1: ServiceProcess, broker: DevBroker) -> float:
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)  # the fault itself: the broker frozen this long
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        return time.monotonic()

    return fault


@pytest.mark.kafka
@pytest.mark.postgres
def test_replica_stopped_with_sigterm_hands_its_partitions_over_within_its_session(
    pg_url: str, dev_broker: DevBroker, tmp_path: Path
) -> None:
    took = _recovery(pg_url, dev_broker, tmp_path, _sigterm)
    print(f"SIGTERM of a replica: the wave after it placed {took:.1f}s later")
    assert took < SESSION + MARGIN


@pytest.mark.scale
@pytest.mark.kafka
@pytest.mark.postgres
def test_replica_killed_with_sigkill_is_replaced_within_its_session_timeout(
    pg_url: str, dev_broker: DevBroker, tmp_path: Path
) -> None:
    took = _recovery(pg_url, dev_broker, tmp_path, _sigkill)
    print(f"SIGKILL of a replica: the wave after it placed {took:.1f}s later")
    assert took < SESSION + MARGIN


#: A broker pause longer than the replicas' session: on resumption the broker finds
#: every member silent past its session and the group rebalances, which the replicas
#: work through (the rebalance bridge).
PAUSE = SESSION + 1.5
#: From SIGCONT until the wave is committed: reconnecting (retries capped at 1 s),
#: publishing the wave (a process start) and placing it on a loaded machine. Not
#: waiting for the rebalance: without the bridge the wave waits for tansu's JoinGroup
#: and SyncGroup holds (about 9 s) on top.
PAUSE_RECOVERY = 9.0


@pytest.mark.kafka
@pytest.mark.postgres
def test_placement_resumes_soon_after_a_broker_pause(
    pg_url: str, dev_broker: DevBroker, tmp_path: Path
) -> None:
    # One replica: a pause stalls every member alike, so more add only start-up time.
    took = _recovery(pg_url, dev_broker, tmp_path, _pause(PAUSE), replicas=1)
    print(f"{PAUSE:.1f} s broker pause: the wave after it placed {took:.1f}s after SIGCONT")
    assert took < PAUSE_RECOVERY


def _small_pod(j: int) -> dict:
    """A pod so small that thousands fit the test's nodes (placement never runs out)."""
    e = pod_event(j, random.Random(j), NAMESPACE)
    e["data"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1m", "memory": "1Mi"}
    return e


def _publish_steadily(bootstrap: str, prefix: str, first: int, rate: float, seconds: float) -> int:
    """Publish ``rate`` small pods a second for ``seconds`` (from pod ``first``) as an
    outside producer would; returns how many."""
    from esched.services.bus import open_bus
    from esched.services.event_files import record_for_event

    async def main() -> int:
        bus = open_bus(bootstrap, prefix)
        producer = bus.producer()
        await producer.start()
        sent, start = 0, time.monotonic()
        try:
            while (elapsed := time.monotonic() - start) < seconds:
                due = int(elapsed * rate) + 1
                records = [
                    record_for_event(_small_pod(j), bus.topics, "load")
                    for j in range(first + sent, first + due)
                ]
                if records:
                    await producer.send_many(records[0].topic, [(r.key, r.value) for r in records])
                    sent = due
                await asyncio.sleep(1 / rate)  # the load's pace, not a wait for an event
        finally:
            await producer.stop()
        return sent

    return asyncio.run(main())


def _commit_times(pg_url: str) -> list[tuple[float, str]]:
    """(when stored, replica) of every committed placement, in log order."""
    import orjson

    from esched.schemas.events import PLACEMENT_COMMITTED
    from esched.services.store import open_store

    async def main() -> list[tuple[float, str]]:
        es = open_store(pg_url)
        await es.connect()
        try:
            out, after = [], 0
            while rows := await es.read(after, 10_000):
                out.extend(
                    (r.recorded_at.timestamp(), orjson.loads(r.payload)["data"]["replica"])
                    for r in rows
                    if r.type == PLACEMENT_COMMITTED
                )
                after = rows[-1].position
            return out
        finally:
            await es.close()

    return asyncio.run(main())


def _longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest stretch of [start, end] without one of ``times``."""
    inside = sorted(t for t in times if start <= t <= end)
    edges = [start, *inside, end]
    return max(b - a for a, b in pairwise(edges))


def _stall_after_sigkill(
    pg_url: str, broker: DevBroker, tmp_path: Path, bridge: bool
) -> tuple[float, dict[str, float]]:
    """Three replicas under a steady load; one is killed with SIGKILL. Returns the
    longest stretch after the kill with no committed placement at all, and the
    longest per surviving replica."""
    env = service_env(pg_url, broker.bootstrap)
    store_log = Log(pg_url)
    procs = Processes(env, tmp_path)
    services = procs.services
    extra = ("--bridge-rebalance",) if bridge else ("--no-bridge-rebalance",)
    rate, seconds, kill_after, window = 40.0, 30.0, 6.0, 20.0
    try:
        _commit, replicas = procs.start_placing(3, (*REPLICA_ARGS, *extra))
        procs.publish(write_events(tmp_path / "nodes.jsonl", [node_event(i) for i in range(20)]))
        warm = [_small_pod(j) for j in range(90)]
        procs.publish(write_events(tmp_path / "warm.jsonl", warm))
        wait_until(
            "every replica placing",
            lambda: (
                _names(warm) <= store_log.committed().keys()
                and store_log.replicas() == {"r1", "r2", "r3"}
                and group_settled(replicas)
            ),
            120,
            services,
        )
        with ThreadPoolExecutor(1) as pool:
            load = pool.submit(_publish_steadily, broker.bootstrap, "esched.", 1000, rate, seconds)
            time.sleep(kill_after)  # the load runs a while before the fault
            killed_at = time.time()
            replicas[0].kill9()
            sent = load.result(timeout=seconds + 60)
        wave = {f"{NAMESPACE}/pod-{j}" for j in range(1000, 1000 + sent)}
        wait_until(
            "the load committed",
            lambda: wave <= store_log.committed().keys(),
            120,
            [s for s in services if s is not replicas[0]],
            interval=0.2,
        )
        twice = {pod: n for pod, n in store_log.committed().items() if n > 1}
    finally:
        for s in services:
            s.stop()
    assert not twice, f"pods committed more than once: {twice}"
    commits = _commit_times(pg_url)
    end = killed_at + window
    overall = _longest_gap([t for t, _r in commits], killed_at, end)
    each = {
        r: _longest_gap([t for t, by in commits if by == r], killed_at, end) for r in ("r2", "r3")
    }
    return overall, each


@pytest.mark.kafka
@pytest.mark.postgres
# Both scale: 30 s of steady load around a rebalance, for the figures of
# docs/operations.md. The default suite keeps the bridge's behaviour in
# test_replica.py::test_a_replica_keeps_placing_its_share_while_the_group_rebalances,
# the moving share on the broker in test_bus_contract.py (a member names its share
# while the group rebalances) and the survivor taking a killed replica's partitions
# in test_processes.py.
@pytest.mark.scale
@pytest.mark.parametrize(
    "bridge",
    [True, False],  # False: the "before" figure
    ids=["bridged", "unbridged"],
)
def test_a_killed_replica_does_not_stop_the_others_placing(
    pg_url: str, dev_broker: DevBroker, tmp_path: Path, bridge: bool
) -> None:
    overall, each = _stall_after_sigkill(pg_url, dev_broker, tmp_path, bridge)
    print(
        f"SIGKILL of one of three replicas under load ({'bridged' if bridge else 'unbridged'}): "
        f"longest stretch without a committed placement {overall:.1f}s; "
        + ", ".join(f"{r} {g:.1f}s" for r, g in sorted(each.items()))
    )
    if bridge:
        # The survivors work their shares through the rebalance (tansu holds it 8 s).
        assert overall < SESSION, (overall, each)


async def test_a_lost_peer_is_retried_at_least_once_per_reconnect_cap(monkeypatch):
    # Twelve failures in a row would back off to 0.1 * 2**11 s uncapped; the cap keeps
    # a service within about a second of its broker coming back.
    slept: list[float] = []

    async def no_sleep(delay: float) -> None:
        slept.append(delay)

    failures = iter(range(12))

    async def op() -> str:
        if next(failures, None) is not None:
            raise BusError("broker away", retriable=True)
        return "back"

    monkeypatch.setattr(asyncio, "sleep", no_sleep)
    assert await retry_transient(op, what="probe", service="test", peer="bus") == "back"
    assert len(slept) == 12 and max(slept) <= RECONNECT_CAP
