"""Publishing decisions on the decisions topic, after the store has them."""

from __future__ import annotations

from typing import Any

import orjson

from esched.schemas.events import proposal_key
from esched.services.commit.arbiter import _Arbiter
from esched.services.commit.config import SERVICE
from esched.services.faults import retry_transient


class _Publisher(_Arbiter):
    """Send decided batches to the decisions topic, as the bytes the store holds."""

    def _appended_payloads(self) -> dict[int, tuple[dict[str, Any], bytes]]:
        """The JSON of the batch just appended, for :meth:`_publish` (taken once)."""
        encoded, self._payloads = self._payloads, {}
        return encoded

    async def _publish(
        self, decisions: list[dict[str, Any]], encoded: dict[int, tuple[dict[str, Any], bytes]]
    ) -> None:
        """Send decisions to the decisions topic (after they are durable in the store);
        ``encoded``: their JSON as appended (:meth:`_appended_payloads`)."""
        if self._producer is None or not decisions or self.bus is None:
            return
        records = []
        for env in decisions:
            # A fresh decision as appended: its stored bytes; a duplicate answered from
            # the log (another object) is encoded here.
            hit = encoded.get(id(env))
            payload = hit[1] if hit is not None and hit[0] is env else orjson.dumps(env)
            records.append((decision_key(env), payload))
        producer, topic = self._producer, self.bus.topics.decisions
        await retry_transient(
            lambda: producer.send_many(topic, records),
            what="decisions send",
            service=SERVICE,
            peer="bus",
        )


def decision_key(env: dict[str, Any]) -> bytes:
    """Partition key of a decision: its gang, else its first pod (per-object order)."""
    return proposal_key(env["data"]).encode()
