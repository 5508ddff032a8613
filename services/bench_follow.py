"""What following the log costs a replica per pod: the fold of a scheduling flow.

Every replica folds every event of the log; per pod of the flow that is its submission
and its committed placement, whichever replica placed it. This builds the log of an
``esched bench scale`` run (the preloaded cluster of :mod:`.bench_e2e.preload`, then the
pods the benchmark publishes, each followed by its decision as the commit service
writes it, proposals spread over ``replicas`` replicas) and folds the flow's part from
a snapshot of the preload with :meth:`ClusterState.apply_payloads`, in batches, as a
replica that has just started follows it (its memos empty, the heap frozen).

``python -m esched.services.bench_follow [pods] [replicas]
[fold|follow|fold-shapes|follow-shapes|fold-submitted|fold-submitted-shapes|claims|claims-shapes|
feed|feed-shapes|jobs|jobs-seen]
[nodes]`` (default 1,000 preloaded
nodes) prints the CPU time per pod of the fold and
of a replica's following; under callgrind with
``--toggle-collect='__pyx_pw_*apply_payloads'`` (argument ``fold``) only the flow's
fold is counted, with ``--toggle-collect=starmap_next`` (argument ``follow``) only the
follower's batches (the preload comes from the snapshot, not from a fold).
``jobs``: the fold only, each pod a one-pod Volcano Job, with the events such a pod
brings to the log (the Job; its PodGroup, its pod, Pending and Running are not
recorded: the Job and its placement imply them).
``jobs-seen``: the same, with a Job of each flow pod's spec folded into the preload
(namespace ``seen``, its pod Succeeded: a pod slot holds its class until the pod is
deleted): its pods' classes are then known, as the
plain flow's are (its pods repeat the preload's shapes, same seed), so the two
compare the fold of a pod whose class exists.
``python -m esched.services.bench_follow [claims] [batch] renew [nodes]``: what
renewing its view costs a replica with ``claims`` pods of its own in flight (placed
``batch`` a pass, claimed, none decided) on ``nodes`` nodes filled to 70%, as
``bench e2e`` preloads them: per renewal, the whole of it and the core's part
(``Placer.sync``, ``assume_claims``), and the replica's part per claim.
``fold-shapes``, ``follow-shapes``: the same measurements over a flow of repeated
shapes (:func:`shape_payloads`: pods in workloads of 1 to 50 replicas sharing one
spec, as ReplicaSets and Jobs make them) instead of the ``bench scale`` pods, of
which about two in five bring a spec the follower has not seen.
``fold-submitted`` (and ``fold-submitted-shapes``): the fold of the flow's
submissions alone (:func:`submissions`), which splits a pod's fold between its
submission and its committed placement.
``claims`` (and ``claims-shapes``): the same flow as claims records
(:func:`claims_records`: what a fold that sees every event would publish, one record
per ``BATCH`` events) applied with :meth:`ClusterState.apply_claims`, as a replica
following other partitions' pods by their claims would; under callgrind with
``--toggle-collect='__pyx_pw_*apply_claims'`` only the records' application is
counted; a fifth argument sets the flow's events per record (default ``BATCH``).
``feed`` (and ``feed-shapes``): the flow as the dispatcher's feed
(:func:`feed_messages`, a batch of ``BATCH`` events per message) followed by a replica
with ``follow="feed"`` (:func:`follow_feed`): every pod's claim, the decisions scanned
for its own, and its own pods (one in ``replicas``) entered from their submissions;
under callgrind with ``--toggle-collect=starmap_next`` only that is counted.
``python -m esched.services.bench_follow [pods] [batch] place|place-jobs``: what
placing costs a replica per pod (:func:`run_place_bench`); ``place-jobs``: each pod
a one-pod Volcano Job's, handed over as its gang's work item.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import random
import time
import zlib
from collections import deque
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

import orjson

from esched.core import ClusterState, claims_record
from esched.core.validation import Verdict
from esched.schemas.events import (
    PLACEMENT_COMMITTED,
    POD_SUBMITTED,
    metadata_key,
    namespaced_key,
)
from esched.services.bench_e2e.preload import NODE_CORES, POD_CORES, pod_payloads
from esched.services.bus import BusProducer, Message
from esched.services.bus.base import Headers
from esched.services.bus.memory import MemoryBus
from esched.services.bus.signing import Keyring, SigningKey
from esched.services.commit.decisions import decision_event
from esched.services.dispatch.outbox import work_item
from esched.services.replica import Replica, ReplicaConfig
from esched.services.replica.feed import FeedFollower
from esched.services.replica.proposals import binding
from esched.services.store.base import StoredEvent
from esched.services.store.feed import FeedWriter, decode_message
from esched.services.store.snapshots import freeze_heap, thaw_heap
from esched.services.synth import cluster_log, pod_event

__all__ = [
    "apply_claims_flow",
    "claims_records",
    "flow_log",
    "fold_flow",
    "follow_flow",
    "idle_replica",
    "place_batches",
    "run_follow_bench",
    "run_place_bench",
    "run_renew_bench",
    "shape_payloads",
    "submissions",
]

#: Events per fold call: a follower's read gathers about this many in a burst.
BATCH = 64

#: The largest workload of :func:`shape_payloads` (replicas drawn from 1..this).
MAX_REPLICAS = 50


def shape_payloads(n: int, namespace: str, seed: int) -> list[tuple[str, bytes]]:
    """``n`` pod submissions as :func:`~esched.services.bench_e2e.preload.pod_payloads`
    makes them (same names, same envelope), in workloads of 1 to ``MAX_REPLICAS``
    consecutive pods whose specs are one, drawn as the benchmark draws a pod's: the
    repeated shapes of a real flow (a ReplicaSet's or a Job's pods), where the
    ``bench scale`` pods ask each their own draw (5,000 pods, ~2,200 specs)."""
    rng = random.Random(seed)
    out: list[tuple[str, bytes]] = []
    while len(out) < n:
        spec = pod_event(0, rng, namespace)["data"]["spec"]
        for _ in range(min(rng.randint(1, MAX_REPLICAS), n - len(out))):
            ev = pod_event(len(out), rng, namespace)
            ev["data"]["spec"] = spec
            out.append(
                (namespaced_key(namespace, ev["data"]["metadata"]["name"]), orjson.dumps(ev))
            )
    return out


def _job_flow(key: str, payload: bytes) -> tuple[str, list[bytes]]:
    """A pod as a one-pod Volcano Job: its key and the events before its placement
    (the Job alone: it implies its PodGroup and its pod); none follows it (its
    Running is implied)."""
    from esched.schemas import events as ev
    from esched.schemas.manifests import volcano_job_objects

    ns, name = ev.split_key(key)
    spec = orjson.loads(payload)["data"]["spec"]
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"tasks": [{"name": "w", "replicas": 1, "template": {"spec": spec}}]},
    }
    (_, job), _group, (_, pod) = volcano_job_objects(job)
    env = ev.envelope(ev.JOB_SUBMITTED, "bench", job, id=f"{key}.job")
    before = [ev.stored_form(env, orjson.dumps(env))[1]]  # (as ingest stores it: marked)
    return ev.metadata_key(pod["metadata"]), before


def flow_log(
    nodes: int = 1000,
    fill: float = 0.2,
    pods: int = 5000,
    replicas: int = 6,
    seed: int = 0,
    prefixes: list[str] | None = None,
    jobs: bool = False,
    seen: bool = False,
    shapes: bool = False,
) -> tuple[bytes, list[tuple[int, bytes]]]:
    """The preload's state snapshot and the flow's ``(position, payload)`` pairs;
    replica ``r``'s proposal ids begin with ``prefixes[r]`` (default ``r<r>-<hex>-``);
    ``jobs``: each pod a one-pod Volcano Job; ``seen`` (with ``jobs``): the preload
    has folded a Job of each flow pod's spec (namespace ``seen``, its pod Succeeded);
    ``shapes``: the pods of :func:`shape_payloads` instead of the benchmark's."""
    state = ClusterState()
    preloaded = int(nodes * NODE_CORES * fill / POD_CORES)  # as bench_e2e.preload sizes it
    # The dict path: under callgrind only the flow's apply_payloads calls count.
    state.apply_many(enumerate(cluster_log(nodes, preloaded, seed=seed, finish_every=0), 1))
    if jobs and seen:
        from esched.schemas import events as ev

        known: list[dict[str, Any]] = []
        for key, payload in pod_payloads(pods, "seen", seed):  # the flow's specs
            pod_key, before = _job_flow(key, payload)
            ns, name = ev.split_key(pod_key)
            known += [orjson.loads(e) for e in before]
            # finished, not deleted: a terminal pod keeps its class held
            done = {"metadata": {"name": name, "namespace": ns}}
            known.append(ev.envelope(ev.POD_SUCCEEDED, "bench", done, id=f"{pod_key}.done"))
        state.apply_many(enumerate(known, int(state.position) + 1))
    position = int(state.position)
    rng = random.Random(seed)
    if prefixes is None:
        prefixes = [f"r{r}-{rng.getrandbits(48):012x}-" for r in range(replicas)]
    flow: list[tuple[int, bytes]] = []
    submissions = (shape_payloads if shapes else pod_payloads)(pods, "bench", seed)
    for j, (key, payload) in enumerate(submissions):
        if jobs:
            key, before = _job_flow(key, payload)
        else:
            before = [payload]
        for event in before:
            position += 1
            flow.append((position, event))
        req = orjson.loads(payload)["data"]["spec"]["containers"][0]["resources"]["requests"]
        resources = {
            "cpu": int(req["cpu"][:-1]),
            "memory": int(req["memory"][:-2]) * 2**20,
            "pods": 1,
        }
        r = j % replicas
        proposal: dict[str, Any] = {
            "proposal": f"{prefixes[r]}{j:x}",
            "replica": prefixes[r].split("-", 1)[0],
            "position": position,
            "gang": None,
            "bindings": [binding(key, f"node-{rng.randrange(nodes)}", resources, ())],
        }
        position += 1
        flow.append((position, orjson.dumps(decision_event(proposal, Verdict(True)))))
    return state.to_bytes(), flow


#: What a submission's envelope holds (orjson's compact JSON) and no other event's.
_SUBMITTED = b'"type":' + orjson.dumps(POD_SUBMITTED)


def submissions(flow: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """The flow's pod submissions alone, in order: their fold against the whole
    flow's splits a pod's fold between its submission and its committed placement."""
    return [(pos, payload) for pos, payload in flow if _SUBMITTED in payload]


def fold_flow(state: ClusterState, flow: list[tuple[int, bytes]]) -> ClusterState:
    """Fold the flow into ``state`` (the preload), ``BATCH`` events at a time."""
    for i in range(0, len(flow), BATCH):
        state.apply_payloads(flow[i : i + BATCH])
    return state


#: Work partitions the claims records name (the work topic's default count).
PARTITIONS = 24


def claims_records(
    snapshot: bytes, flow: list[tuple[int, bytes]], batch: int = BATCH
) -> list[bytes]:
    """The flow's claims: the preload (``snapshot``) folds the flow ``batch`` events
    at a time with a claims journal, and each batch's record is taken, as a commit
    service would publish one per batch it folds; each pod names its partition of
    ``PARTITIONS`` (a CRC of its key)."""
    state = ClusterState.from_bytes(snapshot)
    state.claims_journal = []
    records = []
    for i in range(0, len(flow), batch):
        state.apply_payloads(flow[i : i + batch])
        records.append(claims_record(state, lambda key: zlib.crc32(key.encode()) % PARTITIONS))
    return records


def apply_claims_flow(state: ClusterState, records: list[bytes]) -> ClusterState:
    """Apply the flow's claims records to ``state`` (the preload), one call each."""
    for record in records:
        state.apply_claims(record)
    return state


def feed_messages(
    snapshot: bytes, flow: list[tuple[int, bytes]], batch: int = BATCH
) -> list[bytes]:
    """The flow's feed (services/store/feed.py) as a dispatcher publishes it: the
    preload (``snapshot``) folds the flow ``batch`` events at a time through a
    :class:`FeedWriter`, and each batch's messages are taken (its first announcement
    left out)."""
    state = ClusterState.from_bytes(snapshot)
    writer = FeedWriter(state)
    writer.take()
    at = datetime.now(UTC)
    messages: list[bytes] = []
    for i in range(0, len(flow), batch):
        rows = [
            StoredEvent(
                pos,
                "",
                POD_SUBMITTED if _SUBMITTED in payload else PLACEMENT_COMMITTED,
                "",
                1,
                None,
                at,
                payload,
            )
            for pos, payload in flow[i : i + batch]
        ]
        writer.fold(rows)
        messages += writer.take()
    return messages


def follow_feed(
    replica: Replica, state: ClusterState, messages: list[bytes], own: list[tuple[int, bytes]]
) -> None:
    """Hand the feed to ``replica``'s follower (``follow="feed"``) as its reader would,
    with ``state`` (the preload) as its fold, entering before each message the pods of
    its own (``own``: their submissions) that the message covers, as their work items
    would (the store read of the submissions left out). The messages go through
    ``itertools.starmap``: callgrind's ``--toggle-collect=starmap_next`` counts them and
    nothing else."""
    follower = cast(FeedFollower, replica.follower)
    follower.state = state
    steps = []
    k = 0
    for raw in messages:
        upto = decode_message(raw)[1]
        j = k
        while j < len(own) and own[j][0] <= upto:
            j += 1
        steps.append((raw, own[k:j]))
        k = j

    def step(raw: bytes, mine: list[tuple[int, bytes]]) -> None:
        if mine:
            state.enter_payloads(mine)
        follower.apply(raw)

    deque(itertools.starmap(step, steps), maxlen=0)


def follow_flow(replica: Replica, state: ClusterState, flow: list[tuple[int, bytes]]) -> None:
    """Hand the flow to ``replica``'s follower as its subscription would, ``BATCH``
    events at a time, with ``state`` (the preload) as its fold. The batches go
    through ``itertools.starmap``: callgrind's ``--toggle-collect=starmap_next``
    counts them and nothing else."""
    follower = replica.follower
    follower.state = state
    batches = ((flow[i : i + BATCH],) for i in range(0, len(flow), BATCH))
    deque(itertools.starmap(follower.fold_batch, batches), maxlen=0)


def idle_replica(follow: str = "log") -> Replica:
    """A replica that is never started (no store, no bus): :func:`follow_flow` runs
    its follower's batches (:func:`follow_feed` with ``follow="feed"``)."""
    return Replica(cast(Any, None), cast(Any, None), "r0", config=ReplicaConfig(follow=follow))


def run_follow_bench(
    pods: int = 5000,
    replicas: int = 6,
    repeat: int = 3,
    only: str | None = None,
    jobs: bool = False,
    seen: bool = False,
    nodes: int = 1000,
    shapes: bool = False,
    submitted: bool = False,
    record_events: int = BATCH,
) -> dict[str, Any]:
    """CPU time per pod (best of ``repeat``) of the flow's fold, of a replica's
    whole following, of the flow's claims applied (:func:`apply_claims_flow`) and of
    a replica's following of the feed, its own pods (one in ``replicas``) entered
    from their submissions (:func:`follow_feed`) (``only``: "fold", "follow",
    "claims" or "feed", just that one), and the anomalies;
    ``jobs``: each pod a one-pod Volcano Job; ``seen``, ``shapes``: see
    :func:`flow_log`; ``nodes``: of the preloaded cluster; ``submitted``: the
    flow's submissions alone (:func:`submissions`); ``record_events``: events of the
    flow per claims record."""
    # one for every run: the flow holds its proposal ids
    replica = idle_replica("feed" if only == "feed" else "log")
    prefix = replica.proposal_prefix
    snapshot, flow = flow_log(
        nodes=nodes,
        pods=pods,
        replicas=replicas,
        prefixes=[prefix] + [f"r{r}-{r:012x}-" for r in range(1, replicas)],
        jobs=jobs,
        seen=seen,
        shapes=shapes,
    )
    if submitted:
        flow = submissions(flow)
    out: dict[str, Any] = {"pods": pods, "events": len(flow)}
    records: list[bytes] = []
    if only in (None, "claims"):
        records = claims_records(snapshot, flow, record_events)
        out["claims_bytes_per_pod"] = round(sum(map(len, records)) / pods, 1)
    messages: list[bytes] = []
    own: list[tuple[int, bytes]] = []
    if only == "feed":
        messages = feed_messages(snapshot, flow, record_events)
        out["feed_bytes_per_pod"] = round(sum(map(len, messages)) / pods, 1)
        # (pod j's submission is the flow's event 2j; replica 0, this one, places j % R == 0)
        own = [flow[2 * j] for j in range(0, pods, replicas)]
    for kind in ("fold", "follow", "claims", "feed"):
        if only not in (None, kind):
            continue
        best = float("inf")
        state = None
        for _ in range(repeat):
            state = ClusterState.from_bytes(snapshot)
            freeze_heap()  # as a follower does once it has caught up
            try:
                t0 = time.process_time()
                if kind == "fold":
                    fold_flow(state, flow)
                elif kind == "claims":
                    apply_claims_flow(state, records)
                elif kind == "feed":
                    follow_feed(replica, state, messages, own)
                else:
                    follow_flow(replica, state, flow)
                best = min(best, time.process_time() - t0)
            finally:
                thaw_heap()
        assert state is not None
        out[f"{kind}_cpu_us_per_pod"] = round(best / pods * 1e6, 2)
        out["anomalies"] = dict(state.anomalies)
    return out


def run_enter_bench(
    pods: int = 1000, batch: int = 10, nodes: int = 1000, db: str | None = None
) -> dict[str, Any]:
    """What a replica that follows the feed pays to enter its own pods, per pod: a
    SQLite store holds ``bench e2e``'s preload (``nodes`` nodes, 70% full, its
    snapshot) and then ``pods`` pod submissions; a :class:`FeedFollower` whose state
    is the preload's fold at the log's head enters them with :meth:`FeedFollower.enter`
    (its store read of the pods' submissions included), ``batch`` work items a call
    (fewer a call: more replicas); ``first_call_ms``: the first call's part, in which
    a state restored from a snapshot may grow its pod arrays. Under callgrind,
    ``--toggle-collect=starmap_next`` counts those calls and
    ``--toggle-collect=pysqlite_connection_execute
    --toggle-collect=pysqlite_cursor_fetchall`` the store's query and rows (on its
    worker thread: less a run with ``pods`` 0, its setup's reads, that is the whole
    path). ``enter_payloads_us_per_pod`` and ``apply_payloads_us_per_pod``: the
    core's fold of the same submissions entered, and folded in log order, into
    copies of the state, ``batch`` a call (their first call left out).
    ``db``: a directory to keep the store's file in (``enter-<nodes>-<submissions>.db``,
    written if absent, else reused: under callgrind, write it first without)."""
    import os
    import tempfile

    from esched.services.bench_e2e.preload import preload
    from esched.services.store import open_store
    from esched.services.store.base import NewEvent
    from esched.services.store.snapshots import fold_log

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(db or tmp, f"enter-{nodes}-{pods}.db")
        url = f"sqlite:///{path}"
        loop = asyncio.new_event_loop()
        fresh = not os.path.exists(path)
        if fresh:
            loop.run_until_complete(preload(url, nodes, 0.7))
        store = open_store(url, synchronous="OFF")
        loop.run_until_complete(store.connect())
        try:
            return _enter_bench(loop, store, pods, batch, fresh, fold_log, NewEvent)
        finally:
            loop.run_until_complete(store.close())
            loop.close()


def _enter_bench(
    loop: asyncio.AbstractEventLoop,
    store: Any,
    pods: int,
    batch: int,
    fresh: bool,
    fold_log: Any,
    new_event: Any,
) -> dict[str, Any]:
    """:func:`run_enter_bench` on a connected ``store`` (``fresh``: the preload alone)."""
    submitted = pod_payloads(pods, "bench", 0)
    if fresh and submitted:
        loop.run_until_complete(
            store.append(
                [
                    new_event(f"{key}.s", POD_SUBMITTED, f"pod/{key}", payload)
                    for key, payload in submitted
                ]
            )
        )
    head = loop.run_until_complete(store.head())
    first = head - len(submitted) + 1
    state = loop.run_until_complete(fold_log(store, upto=first - 1))
    follower = FeedFollower(store, cast(Any, None))
    follower.state = state
    state.position = head  # (as the feed's claims records leave it)
    items = [(key, first + i) for i, (key, _p) in enumerate(submitted)]
    rows = [(first + i, payload) for i, (_k, payload) in enumerate(submitted)]
    calls = [items[i : i + batch] for i in range(0, len(items), batch)]
    first_call = 0.0

    async def enter_all(parts: list[list[tuple[str, int]]]) -> int:
        nonlocal first_call
        entered = 0
        for part in parts:
            entered += await follower.enter(part)
            first_call = first_call or follower.enter_cpu
        return entered

    def enter(parts: list[list[tuple[str, int]]]) -> int:
        return loop.run_until_complete(enter_all(parts))

    freeze_heap()
    try:
        t0, w0 = time.process_time(), time.thread_time()
        entered = sum(itertools.starmap(enter, [(calls,)]))
        whole, own = time.process_time() - t0, time.thread_time() - w0
    finally:
        thaw_heap()
    out: dict[str, Any] = {
        "pods_in_state": int(state.n_pods),
        "batch": batch,
        "entered": entered,
        "enter_us_per_pod": round(whole / max(entered, 1) * 1e6, 2),
        "enter_thread_us_per_pod": round(own / max(entered, 1) * 1e6, 2),
        "enter_counted_us_per_pod": round(follower.enter_cpu / max(entered, 1) * 1e6, 2),
        "first_call_ms": round(first_call * 1e3, 2),
    }
    for kind in ("enter_payloads", "apply_payloads"):
        target = loop.run_until_complete(fold_log(store, upto=first - 1))
        if kind == "enter_payloads":
            target.position = head
        fold = getattr(target, kind)
        fold(rows[:batch])
        t0 = time.process_time()
        for i in range(batch, len(rows), batch):
            fold(rows[i : i + batch])
        folded = max(len(rows) - batch, 1)
        out[f"{kind}_us_per_pod"] = round((time.process_time() - t0) / folded * 1e6, 2)
        out["anomalies"] = dict(target.anomalies)
    return out


class _Core:
    """A scheduling pass or placer whose calls the place benchmark separates from the
    replica's own work: each named method is called through a ``functools.partial``,
    so ``--toggle-collect=partial_vectorcall`` toggles on exactly the core's calls;
    ``seconds`` sums their CPU time (outside callgrind)."""

    def __init__(self, inner: Any, methods: tuple[str, ...]) -> None:
        self._inner = inner
        self.seconds = 0.0
        for name in methods:
            setattr(self, name, functools.partial(self._timed, getattr(inner, name)))

    def _timed(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            self.seconds += time.process_time() - t0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Deciding:
    """The commit service and the log in the place benchmark: the proposals the
    replica sent are committed and their decisions handed to its follower as the next
    batch of the log (:meth:`decide`, called between a batch's two steps, outside the
    counted calls). That is following and the commit service's work, not placing;
    ``seconds`` sums its CPU time."""

    def __init__(self, bus: MemoryBus, replica: Replica) -> None:
        self._bus = bus
        self._replica = replica
        self._seen = 0
        self.seconds = 0.0
        #: set once the replica has sent what it proposes for the batch
        self.sent = asyncio.Event()

    async def until_sent(self, task: asyncio.Task) -> None:
        """Return once the replica has sent its proposals or ``task`` is done."""
        waiter = asyncio.ensure_future(self.sent.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()

    def decide(self) -> None:
        """Commit what was sent since the last call and fold the decisions."""
        t0 = time.process_time()
        sent = self._bus.log(self._bus.topics.proposals)[self._seen :]
        self._seen += len(sent)
        follower = self._replica.follower
        position = follower.position
        rows: list[tuple[int, bytes]] = []
        for m in sent:
            data = orjson.loads(m.value)["data"]
            position += 1
            rows.append((position, orjson.dumps(decision_event(data, Verdict(True)))))
        if rows:
            follower.fold_batch(rows)
        self.sent.clear()
        self.seconds += time.process_time() - t0


class _DecidingProducer(BusProducer):
    """A producer telling :class:`_Deciding` of each send it passes on."""

    def __init__(self, inner: BusProducer, deciding: _Deciding) -> None:
        self._inner = inner
        self._deciding = deciding

    async def start(self) -> None:
        await self._inner.start()

    async def stop(self) -> None:
        await self._inner.stop()

    async def send_with_headers(
        self, topic: str, records: Sequence[tuple[bytes | None, bytes, Headers]]
    ) -> None:
        await self._inner.send_with_headers(topic, records)
        self._deciding.sent.set()

    async def send_many(self, topic: str, records: Sequence[tuple[bytes | None, bytes]]) -> None:
        await self._inner.send_many(topic, records)
        self._deciding.sent.set()


#: A signing key for the place benchmark's work items and proposals (signed, as
#: every deployment should run).
_BENCH_KEY = SigningKey("bench", b"0123456789abcdef0123456789abcdef")


def place_batches(
    replica: Replica, state: ClusterState, batches: list[list[Message]]
) -> tuple[float, _Core, _Core, _Deciding]:
    """Run ``batches`` of work items through ``replica`` (one :meth:`Replica.handle`
    each, as its work loop does, on a loop of its own) placing on ``state``. A batch
    runs in two calls through ``itertools.starmap`` (until its proposals are sent;
    after their decisions are folded, until it is done), so
    ``--toggle-collect=starmap_next`` counts the replica's work and not the
    deciding between them. Returns the CPU time of the batches (the deciding's
    included; it is subtracted from the total by :func:`run_place_bench`), the
    scheduling pass and the placer (their calls timed) and the decider."""
    bus = replica.bus
    assert isinstance(bus, MemoryBus)
    deciding = _Deciding(bus, replica)
    loop = asyncio.new_event_loop()
    try:
        memory = bus.producer
        bus.producer = lambda: _DecidingProducer(memory(), deciding)  # type: ignore[method-assign]
        loop.run_until_complete(replica.start_placing(state))
        assert replica.scheduler is not None and replica.placer is not None
        scheduler = _Core(replica.scheduler, ("run",))
        placer = _Core(replica.placer, ("sync", "assume_claims"))
        replica.scheduler = cast(Any, scheduler)
        replica.placer = cast(Any, placer)
        freeze_heap()  # as the follower does once it has folded the log
        try:
            t0 = time.process_time()
            for msgs in batches:
                # Two steps a batch, the decisions committed and folded between them:
                # until its proposals are sent, then until it is done.
                task = loop.create_task(replica.handle(msgs))
                deque(itertools.starmap(loop.run_until_complete, [(deciding.until_sent(task),)]), 0)
                deciding.decide()
                deque(itertools.starmap(loop.run_until_complete, [(task,)]), 0)
            seconds = time.process_time() - t0
        finally:
            thaw_heap()
    finally:
        loop.close()
    return seconds, scheduler, placer, deciding


def _signed_work(bus: MemoryBus, kind: str, key: str, position: int, offset: int) -> Message:
    """The work item the dispatcher sends for ``kind`` (pod or gang) ``key`` pending
    since ``position``, as read off ``bus``'s work topic at ``offset`` and signed with
    its keyring."""
    assert bus.keyring is not None
    k, v = work_item(kind, key, position)
    return Message(bus.topics.work, 0, offset, k, v, 0, bus.keyring.sign(v))


def run_place_bench(
    pods: int = 5000, batch: int = 100, seed: int = 0, jobs: bool = False
) -> dict[str, Any]:
    """What placing costs a replica per pod, beside the core's placement: ``pods``
    pods submitted to the preloaded cluster of :func:`flow_log`, then handed to a
    replica as signed work items, ``batch`` a batch; each proposal it sends is
    committed at once. CPU per pod of the whole batch path (work items checked and
    read, the pass, the proposals built, signed and sent, the claims, the decisions
    awaited), of the core's part of it (the scheduling pass, the placer's view
    renewed) and of the committing and folding of the decisions (not placing).
    ``jobs``: each pod a one-pod Volcano Job's (its Job, implying its PodGroup and pod,
    folded first), handed over as its gang's work item (the Job's key), as the
    dispatcher sends a gang."""
    snapshot, flow = flow_log(pods=pods, replicas=1, seed=seed, jobs=jobs)
    state = ClusterState.from_bytes(snapshot)
    decision = b'"esched.placement.committed"'
    state.apply_payloads([(pos, payload) for pos, payload in flow if decision not in payload])
    submitted = b'"esched.job.submitted"' if jobs else b'"esched.pod.submitted"'
    submissions = [(pos, payload) for pos, payload in flow if submitted in payload]
    bus = MemoryBus()
    bus.keyring = Keyring([_BENCH_KEY])
    replica = Replica(cast(Any, None), bus, "r0")
    msgs = [
        _signed_work(
            bus,
            "gang" if jobs else "pod",
            metadata_key(orjson.loads(payload)["data"]["metadata"]),
            pos,
            i,
        )
        for i, (pos, payload) in enumerate(submissions)
    ]
    batches = [msgs[i : i + batch] for i in range(0, len(msgs), batch)]
    total, scheduler, placer, deciding = place_batches(replica, state, batches)
    core = scheduler.seconds + placer.seconds
    placed = replica.totals.placed_pods
    return {
        "pods": pods,
        "batch": batch,
        "placed": placed,
        "proposals": replica.totals.proposals,
        "whole_cpu_us_per_pod": round((total - deciding.seconds) / pods * 1e6, 2),
        "core_cpu_us_per_pod": round(core / pods * 1e6, 2),
        "replica_cpu_us_per_pod": round((total - deciding.seconds - core) / pods * 1e6, 2),
        "deciding_cpu_us_per_pod": round(deciding.seconds / pods * 1e6, 2),
        # the replica's own counters of the parts of placing (its thread's CPU)
        "parts_cpu_us_per_pod": {
            k: round(v / pods * 1e6, 2) for k, v in replica.totals.cpu.items()
        },
    }


def run_renew_bench(
    claims: int = 4000, batch: int = 500, nodes: int = 10_000, repeat: int = 7
) -> dict[str, Any]:
    """CPU time (best of ``repeat`` rounds of 20) of a replica's view renewal
    (:meth:`Replica.renew_view`, as after its claims changed) with ``claims`` one-pod
    claims in flight, and of the core's part of it (:meth:`Placer.sync` and
    :meth:`Placer.assume_claims` of the same slots); see the module docstring. The
    claims are made as under load: signed work items handed to the replica ``batch``
    a batch (:meth:`Replica.handle`), each batch run until its proposals are claimed,
    none decided."""
    snapshot, flow = flow_log(nodes=nodes, fill=0.7, pods=claims, replicas=1)
    state = ClusterState.from_bytes(snapshot)
    state.apply_payloads([(p, b) for p, b in flow if b'"esched.pod.submitted"' in b])
    bus = MemoryBus()
    bus.keyring = Keyring([_BENCH_KEY])
    replica = Replica(cast(Any, None), bus, "r0")
    position = int(state.position)
    msgs = [
        _signed_work(bus, "pod", str(k), position, i)
        for i, k in enumerate(state.pod_keys[-claims:])
    ]
    loop = asyncio.new_event_loop()
    batches: list[asyncio.Task] = []
    try:
        loop.run_until_complete(replica.start_placing(state))
        for i in range(0, len(msgs), batch):
            planned = asyncio.Event()
            batches.append(loop.create_task(replica.handle(msgs[i : i + batch], planned)))
            loop.run_until_complete(planned.wait())  # claimed and sent; never decided
        placer = replica.placer
        assert placer is not None
        bindings = [
            (b["pod"], b["node"])
            for m in bus.log(bus.topics.proposals)
            for b in orjson.loads(m.value)["data"]["bindings"]
        ]
        pods = [state.pod_index[pod] for pod, _n in bindings]
        on = [state.node_index[node] for _p, node in bindings]
        whole = core = float("inf")
        freeze_heap()
        try:
            for _ in range(repeat):
                t0 = time.process_time()
                for _ in range(20):
                    replica.renew_view()
                whole = min(whole, (time.process_time() - t0) / 20)
                t0 = time.process_time()
                for _ in range(20):
                    placer.sync()
                    placer.assume_claims(pods, on, [])
                core = min(core, (time.process_time() - t0) / 20)
        finally:
            thaw_heap()
    finally:
        for task in batches:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*batches, return_exceptions=True))
        loop.close()
    return {
        "claims": len(bindings),
        "pods_in_state": int(state.n_pods),
        "renewal_us": round(whole * 1e6, 1),
        "core_us": round(core * 1e6, 1),
        "replica_ns_per_claim": round((whole - core) / max(len(bindings), 1) * 1e9),
    }


if __name__ == "__main__":
    import sys

    pods, replicas = ([int(a) for a in sys.argv[1:3]] + [5000, 6])[:2]
    mode = sys.argv[3] if len(sys.argv) > 3 else None
    if mode in ("place", "place-jobs"):  # the second number: work items per batch
        print(orjson.dumps(run_place_bench(pods, replicas, jobs=mode == "place-jobs")).decode())
        sys.exit(0)
    if mode == "enter":  # the second number: work items per call
        nodes = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
        db = sys.argv[5] if len(sys.argv) > 5 else None
        print(orjson.dumps(run_enter_bench(pods, replicas, nodes, db)).decode())
        sys.exit(0)
    if mode == "renew":  # the first number: claims; the second: pods a pass
        nodes = int(sys.argv[4]) if len(sys.argv) > 4 else 10_000
        print(orjson.dumps(run_renew_bench(pods, replicas, nodes)).decode())
        sys.exit(0)
    jobs = mode in ("jobs", "jobs-seen")
    shapes = mode in (
        "fold-shapes",
        "follow-shapes",
        "fold-submitted-shapes",
        "claims-shapes",
        "feed-shapes",
    )
    kind = mode.removesuffix("-shapes") if mode else None
    submitted = kind == "fold-submitted"
    only = "fold" if jobs or submitted else kind
    repeat = 1 if only else 3  # one run under callgrind
    nodes = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
    record_events = int(sys.argv[5]) if len(sys.argv) > 5 else BATCH
    out = run_follow_bench(
        pods,
        replicas,
        repeat,
        only,
        jobs,
        mode == "jobs-seen",
        nodes,
        shapes,
        submitted,
        record_events,
    )
    print(orjson.dumps(out).decode())
