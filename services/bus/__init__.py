"""The bus port and its adapters; :func:`open_bus` picks one from configuration."""

from esched.services.bus.base import Bus, BusConsumer, BusError, BusProducer, Message, TopicNames

__all__ = ["Bus", "BusConsumer", "BusError", "BusProducer", "Message", "TopicNames", "open_bus"]


def open_bus(kafka: str | None, prefix: str = "esched.") -> Bus:
    """The Kafka bus when bootstrap servers are given, else the in-process bus."""
    topics = TopicNames(prefix)
    if kafka:
        from esched.services.bus.kafka import KafkaBus

        return KafkaBus(kafka, topics)
    from esched.services.bus.memory import MemoryBus

    return MemoryBus(topics)
