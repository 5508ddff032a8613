"""The feed: the log as a replica that follows it by claims reads it (opt-in).

A replica that folds the whole log pays, per pod of the flow, the fold of every pod's
submission and decision, though it places only its own share
(docs/benchmarks.md#scaling-replicas). The feed is the log with every pod's own
events replaced by claims records (``core/_claims.pyx``): the dispatcher, the one
leader that folds every event live, keeps its state's claims journal and publishes,
after each batch it folds, one or more feed messages on a topic of one partition
(``TopicNames.feed``), in log order; a replica started with ``follow="feed"``
(``services/replica/feed.py``) applies them instead of reading the store.

A message covers the log positions ``after < position <= upto`` and holds parts, in
log order:

- ``CLAIMS``: a claims record of the pod events folded since the part before it,
  at the position of the first event whose fold it may hold (a replica notes each pod
  it releases at that position: a work item older than it is stale);
- ``FOLD``: an event the replicas fold themselves (every type but :data:`CLAIMED`:
  nodes, queues, PodGroups, PriorityClasses, namespaces, usage, Jobs, reservations),
  at its position; a claims record is cut before each, so that a replica applies
  records and these events in log order;
- ``COMMITS``: the proposal ids of the committed placements the record before it
  covers (as JSON writes them, read off each decision by the fold's scanner), and
  ``DECISIONS``: the payloads of its other decisions (rejections), each kind in one
  part (:func:`decisions_part`): a replica looks in them for its own proposals'
  decisions (:func:`decisions_mentioning`; never folded), without a step per
  decision of another replica; a committed placement's bindings are in the record.

The pods of a replica's own partitions are entered Pending from their submissions
when their work comes (:meth:`ClusterState.enter_payloads`); their bindings and
releases come by claims like every other pod's.

Layout (little endian): ``EFD1``, u64 after, u64 upto, u8 flags (:data:`MAY_MAKE_WORK`:
the positions covered hold an event the dispatcher may make work of), u32 count of
parts, each a u8 kind, a u64 position, a u32 length and the bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import orjson

from esched.core import ClusterState, claims_record, committed_proposal
from esched.schemas.events import (
    PLACEMENT_COMMITTED,
    PLACEMENT_PROPOSED,
    PLACEMENT_REJECTED,
    POD_DELETED,
    POD_EVICTED,
    POD_FAILED,
    POD_REJECTED,
    POD_SUBMITTED,
    POD_SUCCEEDED,
    POD_THROTTLED,
    POD_UNSCHEDULABLE,
    POD_UPDATED,
)
from esched.services.store._feed import (
    CLAIMS,
    COMMITS,
    DECISIONS,
    FOLD,
    MAGIC,
    FeedError,
    commits_mentioning,
    decisions_mentioning,
    decode_message,
    message_range,
)
from esched.services.store.base import StoredEvent

__all__ = [
    "CLAIMED",
    "CLAIMS",
    "COMMITS",
    "DECISIONS",
    "FOLD",
    "MAGIC",
    "MAY_MAKE_WORK",
    "FeedError",
    "FeedMessage",
    "FeedWriter",
    "commits_mentioning",
    "decisions_mentioning",
    "decisions_part",
    "decode_message",
    "encode_message",
    "message_range",
]

#: Flag of a message: it covers an event that may make work (anything but a
#: committed placement), so an idle replica polls its work at once.
MAY_MAKE_WORK = 1

#: Event types the feed carries as claims (or not at all: those the fold ignores),
#: never as events to fold: a pod's own lifecycle.
CLAIMED = frozenset(
    {
        POD_SUBMITTED,
        POD_UPDATED,
        POD_DELETED,
        POD_SUCCEEDED,
        POD_FAILED,
        POD_EVICTED,
        POD_REJECTED,
        POD_UNSCHEDULABLE,
        POD_THROTTLED,
        PLACEMENT_PROPOSED,
        PLACEMENT_COMMITTED,
        PLACEMENT_REJECTED,
    }
)
#: Of those, carried besides in ``DECISIONS`` parts.
DECISION_TYPES = frozenset({PLACEMENT_COMMITTED, PLACEMENT_REJECTED})

_HEAD = struct.Struct("<4sQQBI")
_PART = struct.Struct("<BQI")
#: A message's parts are cut into several messages past this many bytes (a broker
#: refuses records past ~1 MiB).
MAX_MESSAGE_BYTES = 512 * 1024


#: (after, upto, flags, [(kind, position, bytes)])
FeedMessage = tuple[int, int, int, list[tuple[int, int, bytes]]]


def encode_message(
    after: int, upto: int, flags: int, parts: Sequence[tuple[int, int, bytes]]
) -> bytes:
    """One feed message (see the module's layout)."""
    out = [_HEAD.pack(MAGIC, after, upto, flags, len(parts))]
    for kind, position, data in parts:
        out.append(_PART.pack(kind, position, len(data)))
        out.append(data)
    return b"".join(out)


def decisions_part(decisions: Sequence[tuple[int, bytes]]) -> bytes:
    """One ``DECISIONS`` part: u32 count, the payloads' u32 offsets (from the end of
    the tables), their u64 positions, then the payloads one after another."""
    offsets = []
    at = 0
    for _pos, payload in decisions:
        offsets.append(at)
        at += len(payload)
    n = len(decisions)
    return b"".join(
        [
            struct.pack(f"<I{n}I{n}Q", n, *offsets, *(pos for pos, _p in decisions)),
            *(payload for _pos, payload in decisions),
        ]
    )


class FeedWriter:
    """Folds stored rows into a state (the dispatcher's) as the feed's writer: a pod's
    events folded in runs, a claims record cut before each event the followers fold
    themselves; :meth:`take` hands out the messages for what was folded since.

    Turns the state's claims journal on (and keeps it: every fold of the state must go
    through :meth:`fold` from then on, or records would miss its bindings).
    """

    def __init__(self, state: ClusterState, max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        if state.claims_journal is None:
            state.claims_journal = []
        self.state = state
        self.max_bytes = max_bytes
        self._after = int(state.position)
        #: (the state's position once its parts were folded, its parts, their bytes)
        self._groups: list[tuple[int, list[tuple[int, int, bytes]], int]] = []
        #: The first message is sent even when the state has not moved: it tells
        #: followers behind the writer's start to bridge up to it.
        self._work = True
        self._announce = True
        #: the position the next claims record begins at
        self._first = int(state.position) + 1

    @property
    def pending(self) -> bool:
        """Whether the state has moved since the last :meth:`take`."""
        return self._announce or bool(self._groups) or int(self.state.position) > self._after

    def fold(self, rows: Sequence[StoredEvent]) -> None:
        """Fold ``rows`` (following the state's position, in order) into the state,
        noting the feed's parts for them."""
        st = self.state
        run: list[tuple[int, bytes]] = []
        decisions: list[tuple[int, bytes]] = []
        for r in rows:
            etype = r.type
            if etype != PLACEMENT_COMMITTED:
                self._work = True
            if etype in CLAIMED:
                run.append((r.position, r.payload))
                if etype in DECISION_TYPES:
                    decisions.append((r.position, r.payload))
                continue
            self._cut(run, decisions)
            run = []
            decisions = []
            st.apply_payloads([(r.position, r.payload)])
            self._groups.append((r.position, [(FOLD, r.position, r.payload)], len(r.payload)))
            # (the next record begins with what this event's fold released: the pods
            # of a node removed)
            self._first = r.position
        self._cut(run, decisions)

    def _cut(self, run: list[tuple[int, bytes]], decisions: list[tuple[int, bytes]]) -> None:
        st = self.state
        if run:
            st.apply_payloads(run)
        if not st.claims_journal and not decisions:
            if run:
                self._first = run[-1][0] + 1
            return
        parts: list[tuple[int, int, bytes]] = []
        size = 0
        if st.claims_journal:
            # (a rejection binds nothing: its decision goes alone)
            record = claims_record(st)
            parts.append((CLAIMS, self._first, record))
            size += len(record)
        commits: list[tuple[int, bytes]] = []
        others: list[tuple[int, bytes]] = []
        for pos, payload in decisions:
            pid = committed_proposal(payload)
            if type(pid) is str:
                commits.append((pos, orjson.dumps(pid)[1:-1]))
            else:
                others.append((pos, payload))
        for kind, entries in ((COMMITS, commits), (DECISIONS, others)):
            if entries:
                blob = decisions_part(entries)
                parts.append((kind, entries[0][0], blob))
                size += len(blob)
        self._groups.append((int(st.position), parts, size))
        self._first = int(st.position) + 1

    def take(self) -> list[bytes]:
        """The messages covering what was folded since the last call (none when the
        state has not moved, but at the first call), their parts cut at about
        ``max_bytes``."""
        st = self.state
        upto = int(st.position)
        if not self.pending:
            return []
        self._announce = False
        flags = MAY_MAKE_WORK if self._work else 0
        out: list[bytes] = []
        after = self._after
        parts: list[tuple[int, int, bytes]] = []
        size = 0
        end = after
        for g_end, g_parts, g_size in self._groups:
            if parts and size + g_size > self.max_bytes:
                out.append(encode_message(after, end, flags, parts))
                after = end
                parts = []
                size = 0
            parts += g_parts
            size += g_size
            end = g_end
        out.append(encode_message(after, upto, flags, parts))
        self._groups = []
        self._work = False
        self._after = upto
        return out
