"""The audit's state: the fold, admission, the validator and the violations found."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from esched.core import ClusterState
from esched.core.admission import Admission
from esched.core.bands import BandConfig
from esched.core.devices import FoldedDevices
from esched.core.jobs import JobBook
from esched.core.quota import Quota
from esched.core.validation import Validator

#: Violations listed in a report; the counts stay exact beyond it.
MAX_LISTED = 1000


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant at one log position."""

    position: int
    kind: str
    detail: str


class _AuditBase:
    """What every check reads and writes: the fold of the log up to the event being
    checked, admission's and the validator's books, and the violations found."""

    def __init__(
        self,
        quota: Quota | None = None,
        bands: BandConfig | None = None,
        queue_hierarchy: str = "parent",
    ) -> None:
        self.state = ClusterState()
        self.admission = Admission(quota, queue_hierarchy)
        #: pods admission rejects (pod -> why), until they end
        self._refused: dict[str, str] = {}
        self.validator = Validator(self.state, bands, queue_hierarchy=queue_hierarchy)
        self.violations: list[Violation] = []
        self.kinds: dict[str, int] = {}
        self.checked = {
            "events": 0,
            "decisions": 0,
            "committed": 0,
            "rejected": 0,
            "bindings": 0,
            "gang_decisions": 0,
            "reproduced": 0,
            "unverifiable": 0,
            "preemptions": 0,
            "evictions": 0,
        }
        self._removed: set[str] = set()
        #: decision id -> [(position, pod)] evicted for it, awaiting the decision
        self._evictions: dict[str, list[tuple[int, str]]] = {}
        #: (node, resource) -> the usage report whose overload the last overload
        #: eviction there answered (a run of evictions until the reservations fit)
        self._overload_runs: dict[tuple[Any, Any], Any] = {}
        #: decision id -> [(pod slot, node slot, (GPU milli, CPU milli, devices))] of
        #: the pods evicted for it
        self._victims_of: dict[str, list[tuple[int, int, tuple[int, int, tuple[int, ...]]]]] = {}
        #: the fold's GPU devices, built at the first preemption that binds devices
        self._devices: FoldedDevices | None = None
        #: the Volcano Job lifecycle, folded alongside (core/jobs.py)
        self.jobs = JobBook()

    def flag(self, position: int, kind: str, detail: str) -> None:
        """Record a violation found outside the fold (the store's hash chain)."""
        self._flag(position, kind, detail)

    def _flag(self, position: int, kind: str, detail: str) -> None:
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if len(self.violations) < MAX_LISTED:
            self.violations.append(Violation(position, kind, detail))
