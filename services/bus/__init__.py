"""The bus port and its adapters; :func:`open_bus` picks one from configuration."""

from __future__ import annotations

from typing import TYPE_CHECKING

from esched.services.bus.base import (
    DEFAULT_FEED_RETENTION_MS,
    DEFAULT_WORK_PARTITIONS,
    Bus,
    BusConsumer,
    BusError,
    BusProducer,
    GroupOptions,
    Message,
    TopicNames,
)

if TYPE_CHECKING:
    from esched.services.bus.security import KafkaSecurity
    from esched.services.bus.signing import Keyring

__all__ = [
    "Bus",
    "BusConsumer",
    "BusError",
    "BusProducer",
    "GroupOptions",
    "Message",
    "TopicNames",
    "open_bus",
]


def open_bus(
    kafka: str | None,
    prefix: str = "esched.",
    *,
    security: KafkaSecurity | None = None,
    keyring: Keyring | None = None,
    work_partitions: int = DEFAULT_WORK_PARTITIONS,
    group: GroupOptions | None = None,
    feed_retention_ms: int = DEFAULT_FEED_RETENTION_MS,
) -> Bus:
    """The Kafka bus when bootstrap servers are given (with its TLS / SASL
    ``security`` and consumer ``group`` timing), else the in-process bus; internal
    records signed with ``keyring``; the work topic created with ``work_partitions``
    partitions, the feed topic with ``feed_retention_ms`` of retention."""
    topics = TopicNames(prefix)
    bus: Bus
    if kafka:
        from esched.services.bus.kafka import KafkaBus

        group = group or GroupOptions()
        bus = KafkaBus(
            kafka,
            topics,
            security=security,
            work_partitions=work_partitions,
            feed_retention_ms=feed_retention_ms,
            session_timeout_ms=group.session_timeout_ms,
            heartbeat_interval_ms=group.heartbeat_interval_ms,
            static_membership=group.static_membership,
        )
    else:
        from esched.services.bus.memory import MemoryBus

        bus = MemoryBus(topics)
    bus.keyring = keyring
    bus.work_partitions = work_partitions
    return bus
