"""The esched services as OS processes in a test: a migrated store, the processes,
the workload published, and what the event store says so far."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import orjson

from esched.schemas.events import PLACEMENT_COMMITTED, POD_UNSCHEDULABLE
from esched.services.devbroker import DevBroker
from esched.services.procs import ServiceProcess, run_esched, wait_until
from esched.services.store import open_store

#: Options every test replica gets: the tests' broker is tansu (DevBroker.REPLICA_ARGS
#: says why).
TANSU_REPLICA_ARGS = DevBroker.REPLICA_ARGS


class Processes:
    """The esched processes of one test, on a migrated store; the test stops them."""

    def __init__(self, env: dict[str, str], logdir: Path) -> None:
        self.env = env
        self.logdir = logdir
        self.services: list[ServiceProcess] = []
        run_esched(["store", "migrate"], env)

    def start(self, name: str, *args: str) -> ServiceProcess:
        s = ServiceProcess(name, args, self.env, self.logdir)
        self.services.append(s)
        return s

    def start_placing(
        self, replicas: int = 1, replica_args: Sequence[str] = (), seeded: bool = True
    ) -> tuple[ServiceProcess, list[ServiceProcess]]:
        """The placing set: ingest, commit, dispatch and replicas ``r1``..``r<replicas>``
        (``--seed i`` when ``seeded``, :data:`TANSU_REPLICA_ARGS`, then
        ``replica_args``), once the commit service
        leads and every replica is ready; returns the commit service and the replicas."""
        self.start("ingest", "ingest")
        commit = self.start("commit", "commit")
        self.start("dispatch", "dispatch")
        started = [
            self.start(
                f"replica-r{i}",
                "replica",
                "--id",
                f"r{i}",
                *(("--seed", str(i)) if seeded else ()),
                *TANSU_REPLICA_ARGS,
                *replica_args,
            )
            for i in range(1, replicas + 1)
        ]
        wait_until(
            "the services ready",
            lambda: (
                commit.logged("commit service leading")
                and all(r.logged(f"replica r{i} ready") for i, r in enumerate(started, 1))
            ),
            60,
            self.services,
        )
        return commit, started

    def publish(self, path: Path) -> None:
        run_esched(["publish", str(path)], self.env)


def write_events(path: Path, events: list[dict]) -> Path:
    """Write ``events`` as JSON lines to ``path`` (for ``esched publish``)."""
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    return path


class Log:
    """What the event store says so far (read with a short-lived connection)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def read(self) -> list[dict]:
        async def main() -> list[dict]:
            es = open_store(self.url)
            await es.connect()
            try:
                out, after = [], 0
                while rows := await es.read_payloads(after, 10_000):
                    out.extend(orjson.loads(p) for _pos, p in rows)
                    after = rows[-1][0]
                return out
            finally:
                await es.close()

        return asyncio.run(main())

    def committed(self) -> Counter:
        """pod -> number of committed bindings; also the replica of each (``by``)."""
        counts: Counter = Counter()
        self.by: dict[str, str] = {}
        for e in self.read():
            if e["type"] == PLACEMENT_COMMITTED:
                for b in e["data"]["bindings"]:
                    counts[b["pod"]] += 1
                    self.by[b["pod"]] = e["data"]["replica"]
        return counts

    def replicas(self) -> set[str]:
        """Replicas with at least one committed placement."""
        self.committed()
        return set(self.by.values())

    def unschedulable(self) -> set[str]:
        """Pods reported unschedulable."""
        return {e["data"]["pod"] for e in self.read() if e["type"] == POD_UNSCHEDULABLE}


def group_settled(replicas: list[ServiceProcess]) -> bool:
    """Every replica has a share and no rebalance is under way (the group's startup
    rebalances are over): a fault then meets a settled group, as in production.

    A replica logs both ends of each rebalance (``esched.services.bus.kafka._Moves``);
    a fault inside one (on tansu: the leader stopped while the group rebalances) can
    leave the group without an assignment (tests/services/test_tansu_groups.py)."""

    def settled(r: ServiceProcess) -> bool:
        text = r.log.read_text(errors="replace")
        return text.rfind("group rebalanced: share of") > text.rfind("group rebalancing: share of")

    return all(settled(r) for r in replicas)
