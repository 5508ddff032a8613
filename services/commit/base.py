"""What every part of the commit service shares: one instance's attributes."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from esched.core import ClusterState
from esched.core.validation import Validator
from esched.services.bus import Bus, BusConsumer, BusProducer
from esched.services.commit.config import CommitConfig, CommitTotals
from esched.services.lease import Lease, LocalLease
from esched.services.store.base import EventStore


class _CommitBase:
    """The attributes of one commit service instance; each module of this package adds
    one job on top (books, leadership, arbitration, publishing, the proposal consumer)."""

    def __init__(
        self,
        store: EventStore,
        bus: Bus | None = None,
        *,
        lease: Lease | None = None,
        config: CommitConfig | None = None,
    ) -> None:
        self.store = store
        self.bus = bus
        self.lease = lease or LocalLease("commit")
        self.config = config or CommitConfig()
        self.totals = CommitTotals()
        self.state: ClusterState | None = None
        self._validator: Validator | None = None
        #: Version of the decisions stream as of :attr:`state` (the fence).
        self.decisions_version = 0
        self._leading = False
        self._stopping = asyncio.Event()
        self._lock = asyncio.Lock()  # one decision batch at a time
        #: held while a polled batch is decided and handed to _finish (see stop)
        self._handling = asyncio.Lock()
        self._lead_lock = asyncio.Lock()  # one takeover at a time
        self._producer: BusProducer | None = None
        self._consumer: BusConsumer | None = None
        self._decided: OrderedDict[str, int] = OrderedDict()  # proposal -> decision position
        self._submitted: dict[str, float] = {}  # pending pod -> submit time (epoch s)
        self._expected: set[str] = set()  # decision ids of the batch being appended
        self._foreign: list[int] = []  # positions of decisions some other writer made
        self._snapshot_at = 0
        #: The last decided batch being published (see _handle)
        self._outgoing: asyncio.Task | None = None
        #: The snapshot being written (see _snapshot)
        self._snapshotting: asyncio.Task | None = None
        #: id(envelope) -> (envelope, its JSON) of the last appended batch, for _publish
        self._payloads: dict[int, tuple[dict[str, Any], bytes]] = {}
