"""A throughput phase's timeline: when each pod passed each stage, and the longest
stretch with no placement committed (a stall) with the stage its pods waited in.

Single runs of one replica count vary by up to 2x on shared cores; a run whose tail
stalls shows here as one long gap between commits, not as a slower rate throughout.
The marks are clock readings of the same machine: the store's for the submission and
the decision (PostgreSQL's ``recorded_at``), the broker timestamps (the producer's
clock) of the first work item and the first proposal naming each pod.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

import orjson

from esched.services.bench_e2e.observe import proposal_pods, work_pods
from esched.services.bus.base import Bus

__all__ = [
    "StageMarks",
    "commit_gaps",
    "longest_gap",
    "read_stage_marks",
    "run_timeline",
    "stall_stages",
]

#: The stages of a pod in their order, as :func:`stall_stages` names where it waited.
STAGES = ("stored", "work", "proposed", "decided")


class StageMarks:
    """Per pod, the broker timestamp (s) of the first record naming it on a topic, the
    records naming it, and (proposals) the replica of the first."""

    __slots__ = ("by", "count", "first")

    def __init__(self) -> None:
        self.first: dict[str, float] = {}
        self.count: dict[str, int] = {}
        self.by: dict[str, str] = {}

    def add(self, pod: str, at: float, by: str | None = None) -> None:
        """One record naming ``pod`` at broker time ``at`` (from ``by``)."""
        self.count[pod] = self.count.get(pod, 0) + 1
        if pod not in self.first or at < self.first[pod]:
            self.first[pod] = at
            if by is not None:
                self.by[pod] = by


async def read_stage_marks(
    bus: Bus, group: str, pods: Iterable[str], within: float = 20.0
) -> tuple[StageMarks, StageMarks]:
    """Read the work and proposals topics from their start (consumers of a fresh
    ``group``) until every pod of ``pods`` has a work item and a proposal, or nothing
    came for 2 s, or ``within`` s passed: (work marks, proposal marks)."""
    want = set(pods)
    work, proposed = StageMarks(), StageMarks()
    for topic, marks in ((bus.topics.work, work), (bus.topics.proposals, proposed)):
        # Exclusive: every partition, from its start, with no group join (seconds on tansu).
        consumer = bus.consumer([topic], f"{group}-{topic}", exclusive=True)
        await consumer.start()
        try:
            deadline = time.monotonic() + within
            quiet_since = time.monotonic()
            while time.monotonic() < deadline and not want.issubset(marks.first):
                msgs = await consumer.poll(200, 5000)
                if msgs:
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since > 2.0:
                    break
                for m in msgs:
                    _record(marks, m.value, m.timestamp_ms / 1000, proposals=marks is proposed)
        finally:
            await consumer.stop()
    return work, proposed


def _record(marks: StageMarks, value: bytes, at: float, *, proposals: bool) -> None:
    try:
        item = orjson.loads(value)
        if proposals:
            by = str(item["data"].get("replica"))
            for pod in proposal_pods(item):
                marks.add(str(pod), at, by)
        else:
            # (a gang's work item names its pods, which the latency marks leave out)
            for pod in work_pods(item) or item.get("pods") or ():
                marks.add(str(pod), at)
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return


def longest_gap(decided: Iterable[float], start: float) -> tuple[float, float, int]:
    """``(length, begin, pods decided after it)`` of the longest stretch with no
    commit from ``start`` to the last commit; ``(0.0, start, 0)`` without commits."""
    times = sorted(decided)
    longest, begin, after = 0.0, start, 0
    prev = start
    for i, at in enumerate(times):
        if at - prev > longest:
            longest, begin, after = at - prev, prev, len(times) - i
        prev = at
    return longest, begin, after


def commit_gaps(decided: Iterable[float], start: float) -> dict[str, Any]:
    """The longest stretch (s) with no placement committed between ``start`` (the first
    pod recorded) and the last commit, when it began (s after ``start``), and the
    share of the pods decided after it: a run that stalls has one gap much longer than
    a pass over a batch (~0.1-0.5 s at these caps)."""
    times = list(decided)
    if not times:
        return {"longest_s": None, "at_s": None, "after_share": None}
    return _gap_summary(longest_gap(times, start), len(times), start)


def _gap_summary(gap: tuple[float, float, int], decided: int, start: float) -> dict[str, Any]:
    longest, begin, after = gap
    return {
        "longest_s": round(longest, 3),
        "at_s": round(begin - start, 3),
        "after_share": round(after / decided, 3),
    }


def stall_stages(
    gap: tuple[float, float], marks: dict[str, dict[str, float]], pods: Iterable[str]
) -> dict[str, int]:
    """Where ``pods`` (decided after the gap ``(begin, end)``) waited while it lasted:
    per pod, the stage whose wait (from the mark before it to its own, ``marks``:
    stage -> pod -> time, of :data:`STAGES`) overlapped the gap most, named by the mark
    waited for (``work``: the dispatcher's release, ``proposed``: a replica's pass,
    ``decided``: the commit service); ``none`` for a pod whose marks miss it."""
    begin, end = gap
    out: dict[str, int] = {}
    for pod in pods:
        waited, most = "none", 0.0
        prev = marks.get(STAGES[0], {}).get(pod)
        for stage in STAGES[1:]:
            at = marks.get(stage, {}).get(pod)
            if prev is not None and at is not None:
                overlap = min(at, end) - max(prev, begin)
                if overlap > most:
                    waited, most = stage, overlap
            if at is not None:
                prev = at
        out[waited] = out.get(waited, 0) + 1
    return out


async def run_timeline(
    bus: Bus,
    group: str,
    stored: dict[str, float],
    decided: dict[str, float],
    path: Any,
) -> dict[str, Any]:
    """The run's commit gaps and where the pods decided after the longest gap waited
    during it (``waited_in``: pods per last stage passed), with every pod's marks
    (s after the first pod recorded) written to ``path`` (JSON)."""
    if not stored or not decided:
        return {"longest_s": None}
    start = min(stored.values())
    gap = longest_gap(decided.values(), start)
    gaps = _gap_summary(gap, len(decided), start)
    work, proposed = await read_stage_marks(bus, group, stored)
    marks = {"stored": stored, "work": work.first, "proposed": proposed.first, "decided": decided}
    longest, begin, _after = gap
    if longest > 0:
        end = begin + longest
        late = [p for p, t in decided.items() if t >= end]
        gaps["waited_in"] = stall_stages((begin, end), marks, late)
        by: dict[str, int] = {}
        for p in late:
            r = proposed.by.get(p, "?")
            by[r] = by.get(r, 0) + 1
        gaps["late_by_replica"] = dict(sorted(by.items()))
    gaps["reproposed"] = sum(1 for n in proposed.count.values() if n > 1)
    gaps["reworked"] = sum(1 for n in work.count.values() if n > 1)
    table = {
        pod: {
            **{s: round(m[pod] - start, 3) for s, m in marks.items() if pod in m},
            "replica": proposed.by.get(pod),
            "proposals": proposed.count.get(pod, 0),
            "work_items": work.count.get(pod, 0),
        }
        for pod in stored
    }
    await asyncio.to_thread(path.write_bytes, orjson.dumps(table))
    return gaps
