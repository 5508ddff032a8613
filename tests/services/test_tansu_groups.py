"""What the tests' broker, tansu, does with a consumer group, shown with aiokafka alone.

tansu (0.6) holds a static member's SyncGroup 3 s and does not count the sync as
contact with the member; its heartbeat handler drops every member whose last contact
is older than the session *before* counting the heartbeat itself. So with a session
not above 3 s plus a heartbeat interval, each member's first heartbeat after a sync
finds the whole group silent past its session: tansu drops them all, answers
"rebalancing" or "unknown member", the members rejoin, sync again, and the group
rebalances every ~6.5 s although nobody joined or left. This was the cause of the
replica recovery tests' endless rebalances with a 3 s session (with the rebalance
bridge on, the survivor's share never settled); those tests now use a longer
session, and ``KafkaBus`` warns of a session this short
(:data:`esched.services.bus.kafka.TANSU_SYNC_HOLD_MS`). Apache Kafka refuses a
session below its ``group.min.session.timeout.ms`` (6 s by default) anyway.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from esched.services.bus.kafka import TANSU_SYNC_HOLD_MS
from esched.services.devbroker import DevBroker

HEARTBEAT_MS = 500


@pytest.fixture(scope="module")
def group_broker() -> Iterator[DevBroker]:
    with DevBroker().running() as broker:
        yield broker


class _Revocations(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.revoked = 0
        self.assigned = asyncio.Event()

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.revoked += bool(revoked)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned.set()


async def _rebalances_while_idle(bootstrap: str, session_ms: int, watch: float) -> int:
    """Two static members of a fresh group on a fresh topic: once both have a share,
    how many times either loses it within ``watch`` seconds (nobody joins or leaves)."""
    topic, group = f"t{session_ms}-{time.monotonic_ns()}", f"g{session_ms}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 4, 1)])
    finally:
        await admin.close()
    members = []
    for name in ("m1", "m2"):
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            group_instance_id=name,
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=HEARTBEAT_MS,
            rebalance_timeout_ms=30_000,
            enable_auto_commit=False,
        )
        listener = _Revocations()
        consumer.subscribe([topic], listener=listener)
        members.append((consumer, listener))
    polls = []
    try:
        for consumer, _ in members:
            await consumer.start()
        # getmany drives nothing here (aiokafka's coordinator runs in the background),
        # but a consumer that never polls would leave the group after max.poll.interval.
        polls = [asyncio.ensure_future(_poll_forever(consumer)) for consumer, _listener in members]
        await asyncio.wait_for(
            asyncio.gather(*(listener.assigned.wait() for _c, listener in members)), 60
        )
        before = sum(listener.revoked for _c, listener in members)
        await asyncio.sleep(watch)  # the observation window: nothing should happen in it
        return sum(listener.revoked for _c, listener in members) - before
    finally:
        for poll in polls:
            poll.cancel()
        await asyncio.gather(*polls, return_exceptions=True)
        for consumer, _ in members:
            await consumer.stop()


async def _poll_forever(consumer: AIOKafkaConsumer) -> None:
    while True:
        await consumer.getmany(timeout_ms=200)


@pytest.mark.scale
@pytest.mark.kafka
async def test_tansu_rebalances_forever_a_group_whose_session_is_not_above_its_sync_hold(
    group_broker: DevBroker,
) -> None:
    short, long = TANSU_SYNC_HOLD_MS, 6_000
    watch = 15.0
    churn_short, churn_long = await asyncio.gather(
        _rebalances_while_idle(group_broker.bootstrap, short, watch),
        _rebalances_while_idle(group_broker.bootstrap, long, watch),
    )
    print(
        f"revocations in {watch:.0f} s of an idle group: {short} ms {churn_short}, "
        f"{long} ms {churn_long}"
    )
    # The short session: the group is torn down after every sync (every ~6.5 s).
    assert churn_short >= 2
    assert churn_long == 0
