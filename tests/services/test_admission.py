"""Queue admission, quota and allocation order (core/admission.py), alone and in the
dispatcher against the real stores."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator

import orjson
import pytest

from esched.core import ClusterState
from esched.core.admission import Admission, event_key
from esched.core.quota import QuotaConfigError, parse_quota
from esched.schemas import events as ev_types
from esched.schemas.volcano_jobs import default_job
from esched.services.bus.memory import MemoryBus
from esched.services.dispatch import DispatchConfig, Dispatcher
from esched.services.store import EventStore
from support.aio import eventually
from support.events import GIB, NAMESPACE, append_events, ev, node, one_pod_job, placement

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def qpod(
    name: str,
    cpu: str = "1",
    *,
    queue: str | None = None,
    priority: int | None = None,
    gang: str | None = None,
    namespace: str = NAMESPACE,
    priority_class: str | None = None,
) -> dict:
    annotations = {}
    if queue:
        annotations["volcano.sh/queue-name"] = queue
    if gang:
        annotations["scheduling.k8s.io/group-name"] = gang
    spec: dict = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]
    }
    if priority is not None:
        spec["priority"] = priority
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return ev(
        f"pod-{namespace}-{name}",
        ev_types.POD_SUBMITTED,
        {
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
            "spec": spec,
        },
    )


def queue(name: str, eid: str | None = None, *, state: str | None = None, **spec) -> dict:
    data: dict = {"metadata": {"name": name}, "spec": spec}
    if state:
        data["status"] = {"state": state}
    return ev(eid or f"queue-{name}", ev_types.QUEUE_UPSERTED, data)


def done(name: str, namespace: str = NAMESPACE) -> dict:
    return ev(
        f"done-{name}", ev_types.POD_SUCCEEDED, {"metadata": {"name": name, "namespace": namespace}}
    )


def bind(name: str, node_name: str, cpu: int = 1000) -> dict:
    return ev(
        f"bind-{name}",
        ev_types.PLACEMENT_COMMITTED,
        placement(f"p-{name}", [(name, node_name)], cpu=cpu),
    )


class Fold:
    """A state, an admission and the log so far (what the dispatcher does, synchronously)."""

    def __init__(self, admission: Admission) -> None:
        self.state = ClusterState()
        self.admission = admission
        self.position = 0
        self.rejections: list = []

    def __call__(self, *events: dict) -> list:
        batch = []
        for e in events:
            self.position += 1
            batch.append((self.position, e))
        self.state.apply_many(batch)
        out = self.admission.observe(
            self.state, [(pos, e["type"], event_key(e["data"]), e["data"]) for pos, e in batch]
        )
        self.rejections.extend(out)
        # What the dispatcher does next: the rejection is appended and folded.
        for r in out:
            self(ev(r.event_id, ev_types.POD_REJECTED, r.data()))
        return out

    def release(self, *keys: str) -> list[str]:
        items = [
            (
                "pending",
                "gang" if k.startswith("gang:") else "pod",
                k.removeprefix("gang:"),
                self.position,
            )
            for k in keys
        ]
        return [it[2] for it in self.admission.release(self.state, items)]


# ---------------------------------------------------------------------- quota config


def test_quota_config_parses_quantities_bands_and_kube_spelling():
    q = parse_quota(
        {
            "queues": {"research": {"cpu": "10", "bands": {"best-effort": {"cpu": "2"}}}},
            "namespaces": {"t": {"requests.memory": "2Gi", "pods": 3}},
        }
    )
    assert q.limits["queue/research"] == {None: {"cpu": 10_000}, "best-effort": {"cpu": 2000}}
    assert q.limits["namespace/t"] == {None: {"memory": 2 * GIB, "pods": 3}}
    assert q.scopes("research", "t") == ["queue/research", "namespace/t"]
    assert q.scopes("other", "x") == []


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"queues": {"a": {"cpu": "-1"}}}, "quota.queues.a.cpu"),
        ({"queues": {"a": {"cpu": "lots"}}}, "quota.queues.a.cpu"),
        ({"queues": {"a": {"bands": {"gold": {"cpu": 1}}}}}, "quota.queues.a.bands.gold"),
        ({"users": {}}, "quota.users"),
        ({"namespaces": ["a"]}, "quota.namespaces"),
    ],
)
def test_quota_config_errors_name_the_field(raw, field):
    with pytest.raises(QuotaConfigError) as exc:
        parse_quota(raw)
    assert exc.value.field == field


def test_quota_bands_come_from_the_bands_section():
    q = parse_quota(None)
    assert [q.band(p) for p in (0, 99, 100, 999, 1000, 10**9)] == [
        "best-effort",
        "best-effort",
        "batch",
        "batch",
        "production",
        "monitoring",
    ]
    assert parse_quota(None, {"batch": 10}).band(50) == "batch"
    with pytest.raises(QuotaConfigError) as exc:
        parse_quota(None, {"production": 5, "batch": 10})
    assert exc.value.field == "bands"


# ---------------------------------------------------------------------- rejection


def test_namespace_quota_rejects_the_pod_that_would_exceed_it_and_frees_on_exit():
    f = Fold(Admission(parse_quota({"namespaces": {"t": {"cpu": "2"}}})))
    f(node("n1", "8"), qpod("a"), qpod("b"))
    (r,) = f(qpod("c"))
    assert (r.pod, r.reason) == ("t/c", "QuotaExceeded")
    assert r.quota.as_dict() == {
        "scope": "namespace/t",
        "band": None,
        "resource": "cpu",
        "limit": 2000,
        "used": 2000,
        "requested": 1000,
    }
    assert "exceeds the quota of namespace/t" in r.message
    assert f.state.pod("t/c")["phase"] == "Failed"  # never scheduled, not left pending
    assert f.admission.used("namespace/t")["cpu"] == 2000
    # Another namespace is not limited; a pod that finishes gives its quota back.
    assert f(qpod("x", namespace="other")) == []
    f(bind("a", "n1"), done("a"))
    assert f(qpod("d")) == []
    assert f.admission.used("namespace/t")["cpu"] == 2000


def test_a_gang_is_admitted_whole_or_rejected_whole():
    f = Fold(Admission(parse_quota({"namespaces": {"t": {"cpu": "2"}}})))
    pg = ev(
        "pg-g",
        ev_types.PODGROUP_SUBMITTED,
        {"metadata": {"name": "g", "namespace": NAMESPACE}, "spec": {"minMember": 3}},
    )
    f(node("n1", "8"), pg, qpod("g0", gang="g"), qpod("g1", gang="g"))
    assert f.admission.used("namespace/t")["cpu"] == 2000
    out = f(qpod("g2", gang="g"))
    # g2 is over quota: the two members admitted before it are rejected with it, and
    # give their quota back (three members can never run within 2 CPUs).
    assert sorted(r.pod for r in out) == ["t/g0", "t/g1", "t/g2"]
    assert {r.reason for r in out} == {"QuotaExceeded"}
    assert all(f.state.pod(f"t/g{i}")["phase"] == "Failed" for i in range(3))
    assert f.admission.used("namespace/t") == {}
    (late,) = f(qpod("g3", gang="g"))
    assert late.pod == "t/g3" and "gang t/g was rejected" in late.message
    assert f(qpod("solo")) == []  # the quota is free for others


def _job_with_two_pods(name: str) -> dict:
    """A Volcano Job ``t/<name>`` (task ``w``, two pods of 1 CPU) in the form ingest
    stores it: defaulted and marked, so its submission implies its PodGroup (the gang
    ``t/<name>``, minMember 2) and its pods ``t/<name>-w-0`` and ``-1``."""
    job = one_pod_job(name)
    job["spec"]["tasks"][0]["replicas"] = 2
    e = ev(f"job-{name}", ev_types.JOB_SUBMITTED, default_job(job))
    return ev_types.stored_form(e, orjson.dumps(e))[0]


@pytest.mark.parametrize("group", ["podgroup", "job"])
def test_a_rejected_gang_is_admitted_afresh_once_its_podgroup_or_job_is_submitted(group):
    """Pods naming a gang before its PodGroup: one over quota takes the gang down whole.
    Its PodGroup submitted then starts a fresh admission of its members, and a Volcano
    Job of that name does the same: its submission implies the PodGroup (and the pods)."""
    f = Fold(Admission(parse_quota({"namespaces": {"t": {"cpu": "2"}}})))
    f(node("n1", "8"))
    early = f(*(qpod(f"early{i}", gang="j") for i in range(3)))
    assert {r.pod for r in early} == {"t/early0", "t/early1", "t/early2"}
    assert f.admission.gang_rejected("t/j")
    if group == "podgroup":
        pg = ev(
            "pg-j",
            ev_types.PODGROUP_SUBMITTED,
            {"metadata": {"name": "j", "namespace": NAMESPACE}, "spec": {"minMember": 2}},
        )
        out = f(pg, qpod("j-w-0", gang="j"), qpod("j-w-1", gang="j"))
    else:
        out = f(_job_with_two_pods("j"))
    assert out == []
    assert not f.admission.gang_rejected("t/j")
    assert f.state.gang_members("t/j", "Pending") == ["t/j-w-0", "t/j-w-1"]
    assert f.admission.used("namespace/t")["cpu"] == 2000
    assert f.release("gang:t/j") == ["t/j"]


def test_band_quota_limits_only_its_band():
    f = Fold(Admission(parse_quota({"queues": {"q": {"bands": {"best-effort": {"cpu": "1"}}}}})))
    f(node("n1", "8"), queue("q"))
    assert f(qpod("a", queue="q")) == []
    (r,) = f(qpod("b", queue="q"))
    assert r.quota.band == "best-effort" and "band best-effort" in r.message
    assert f(qpod("c", queue="q", priority=1000)) == []  # production: not limited


def test_band_quota_counts_a_priority_class_mapped_to_the_band():
    # scavenger -> best-effort by bands.classes, whatever the pod's numeric priority.
    f = Fold(
        Admission(
            parse_quota(
                {"queues": {"q": {"bands": {"best-effort": {"cpu": "1"}}}}},
                {"classes": {"scavenger": "best-effort"}},
            )
        )
    )
    f(node("n1", "8"), queue("q"))
    assert f(qpod("a", queue="q", priority=5000, priority_class="scavenger")) == []
    assert f.admission.used("queue/q", "best-effort")["cpu"] == 1000
    (r,) = f(qpod("b", queue="q", priority=5000, priority_class="scavenger"))
    assert r.reason == "QuotaExceeded" and r.quota.band == "best-effort"
    assert f(qpod("c", queue="q", priority=5000)) == []  # production by its number


def test_a_podgroups_priority_class_is_its_members_band_for_quota():
    f = Fold(
        Admission(
            parse_quota(
                {"queues": {"q": {"bands": {"batch": {"cpu": "2"}}}}},
                {"classes": {"nightly": "batch"}},
            )
        )
    )
    pg = ev(
        "pg-g",
        ev_types.PODGROUP_SUBMITTED,
        {
            "metadata": {"name": "g", "namespace": NAMESPACE},
            "spec": {"minMember": 3, "queue": "q", "priorityClassName": "nightly"},
        },
    )
    f(node("n1", "8"), queue("q"), pg, qpod("g0", gang="g"), qpod("g1", gang="g"))
    assert f.admission.used("queue/q", "batch")["cpu"] == 2000
    out = f(qpod("g2", gang="g"))  # the third member is over the batch quota: all go
    assert sorted(r.pod for r in out) == ["t/g0", "t/g1", "t/g2"]


def test_a_submission_is_judged_by_its_queues_state_at_its_own_position():
    # One fold batch: a pod submitted before its queue starts closing is admitted, one
    # submitted after is rejected (the batch is folded whole before it is judged).
    f = Fold(Admission())
    f(node("n1", "8"), queue("q"))
    out = f(
        qpod("before", queue="q"),
        queue("q", "q-closing", state="Closing"),
        qpod("after", queue="q"),
        queue("q", "q-open", state="Open"),
    )
    assert [(r.pod, r.reason) for r in out] == [("t/after", "QueueClosing")]
    assert f.state.pod("t/before")["phase"] == "Pending"


def test_closing_and_closed_queues_admit_nothing_new():
    f = Fold(Admission())
    f(node("n1", "8"), queue("q"), qpod("early", queue="q"))
    f(queue("q", "q-closing", state="Closing"))
    (r,) = f(qpod("late", queue="q"))
    assert r.reason == "QueueClosing" and "admits no new pods" in r.message
    # Pods admitted before it started closing still run.
    assert f.release("t/early") == ["t/early"]
    f(queue("q", "q-closed", state="Closed"))
    (r,) = f(qpod("later", queue="q"))
    assert r.reason == "QueueClosed"


def test_takeover_rejects_pending_pods_over_quota_and_keeps_closing_queues_work():
    a = Admission()
    f = Fold(a)
    f(node("n1", "8"), queue("q"), qpod("a"), qpod("b"), qpod("c", queue="q"))
    f(queue("q", "q2", state="Closing"))
    fresh = Admission(parse_quota({"namespaces": {"t": {"cpu": "1"}}}))
    out = fresh.start(f.state)
    assert [r.pod for r in out] == ["t/b", "t/c"]  # slot order: a fits, the rest do not
    assert all(r.reason == "QuotaExceeded" for r in out)


def test_takeover_rejects_a_gang_whole():
    f = Fold(Admission())
    pg = ev(
        "pg-g",
        ev_types.PODGROUP_SUBMITTED,
        {"metadata": {"name": "g", "namespace": NAMESPACE}, "spec": {"minMember": 2}},
    )
    f(node("n1", "8"), qpod("solo"), pg, qpod("g0", gang="g"), qpod("g1", gang="g"))
    fresh = Admission(parse_quota({"namespaces": {"t": {"cpu": "2"}}}))
    out = fresh.start(f.state)
    # solo and g0 fit, g1 does not: g0 goes with it, and its quota is given back.
    assert sorted(r.pod for r in out) == ["t/g0", "t/g1"]
    assert fresh.used("namespace/t")["cpu"] == 1000 and fresh.gang_rejected("t/g")


# ---------------------------------------------------------------------- holding


def test_closed_queue_holds_its_pending_work_until_reopened():
    f = Fold(Admission())
    f(node("n1", "8"), queue("q"), qpod("a", queue="q"))
    f(queue("q", "q-closed", state="Closed"))
    assert f.release("t/a") == []
    assert f.admission.held == {("pod", "t/a"): "QueueClosed"}
    f(queue("q", "q-open", state="Open"))
    assert [it[2] for it in f.admission.release(f.state, f.admission.reconsider())] == ["t/a"]


def test_capability_admits_jobs_while_they_fit_counting_inqueue_ones():
    f = Fold(Admission())
    f(
        node("n1", "8"),
        queue("q", capability={"cpu": "2"}),
        qpod("a", queue="q"),
        qpod("b", queue="q"),
        qpod("c", queue="q"),
    )
    # a and b are let through (Inqueue, not yet bound): c would exceed the capability.
    assert f.release("t/a", "t/b", "t/c") == ["t/a", "t/b"]
    assert f.admission.held == {("pod", "t/c"): "QueueCapability"}
    f(bind("a", "n1"))
    assert f.admission.release(f.state, f.admission.reconsider()) == []  # a holds it now
    f(done("a"))
    assert [it[2] for it in f.admission.release(f.state, f.admission.reconsider())] == ["t/c"]


def test_capability_of_a_parent_covers_its_children():
    f = Fold(Admission())
    f(
        node("n1", "8"),
        queue("eng", capability={"cpu": "2"}),
        queue("dev", parent="root.eng"),
        queue("ops", parent="root.eng"),
        qpod("a", queue="dev"),
        qpod("b", queue="ops"),
        qpod("c", queue="dev"),
    )
    assert sorted(f.release("t/a", "t/b", "t/c")) == ["t/a", "t/b"]
    assert f.admission.held == {("pod", "t/c"): "QueueCapability"}


def test_jobs_let_through_before_a_capability_was_set_count_against_it():
    # Without a capability the jobs let through are not looked at on every release
    # (that cost O(backlog) per flush), but they are still remembered.
    f = Fold(Admission())
    f(node("n1", "8"), queue("q"), *(qpod(p, queue="q") for p in ("a", "b", "c")))
    assert f.release("t/a", "t/b") == ["t/a", "t/b"]
    f(queue("q", "q-capped", capability={"cpu": "2"}))
    assert f.release("t/c") == []
    assert f.admission.held == {("pod", "t/c"): "QueueCapability"}


def test_gang_minimum_against_capability_and_cluster():
    f = Fold(Admission())
    pg = ev(
        "pg-big",
        ev_types.PODGROUP_SUBMITTED,
        {
            "metadata": {"name": "big", "namespace": NAMESPACE},
            "spec": {"minMember": 3, "queue": "q"},
        },
    )
    f(
        node("n1", "4"),
        queue("q", capability={"cpu": "10"}),
        pg,
        *(qpod(f"b{i}", "2", gang="big") for i in range(3)),
    )
    # 3 x 2 CPUs > the cluster's 4: never admitted (nothing is held by its members).
    assert f.release("gang:t/big") == []
    assert f.admission.held == {("gang", "t/big"): "ClusterCapacity"}
    f(node("n2", "4"))
    assert [it[2] for it in f.admission.release(f.state, f.admission.reconsider())] == ["t/big"]


def test_gangs_of_one_min_resources_are_each_judged_against_the_cluster():
    # Four one-pod gangs whose PodGroups ask the same minResources, and one asking
    # more than the cluster has, released together: the big one is held, the others
    # go (each gang's minimum is judged, however many share its vector); once a node
    # is added the big one goes too.
    def group(name: str, cpu: str) -> dict:
        spec = {"minMember": 1, "queue": "q", "minResources": {"cpu": cpu}}
        meta = {"name": name, "namespace": NAMESPACE}
        return ev(f"pg-{name}", ev_types.PODGROUP_SUBMITTED, {"metadata": meta, "spec": spec})

    f = Fold(Admission())
    small = [f"s{i}" for i in range(4)]
    f(
        node("n1", "4"),
        queue("q"),
        *(group(g, "2") for g in small),
        group("big", "6"),
        *(qpod(f"{g}-0", "2", gang=g) for g in small),
        qpod("big-0", "6", gang="big"),
    )
    released = f.release(*(f"gang:t/{g}" for g in [*small[:2], "big", *small[2:]]))
    assert released == [f"t/{g}" for g in small]
    assert f.admission.held == {("gang", "t/big"): "ClusterCapacity"}
    f(node("n2", "4"))
    assert [it[2] for it in f.admission.release(f.state, f.admission.reconsider())] == ["t/big"]


def test_gangs_with_and_without_min_resources_released_together_keep_their_own_minimum():
    # One release of three gangs: "given" names minResources (1 CPU, below its members'
    # 2 x 4), "half" has none (minMember 1 of 2 pending 2-CPU pods: 2 CPUs), "whole"
    # has none (minMember 2 of 3-CPU pods: 6 CPUs). Under a 5-CPU capability "given"
    # and "half" go (3 CPUs held) and "whole" is held: each gang is judged by its own
    # minimum, whichever way it is derived.
    def group(name: str, min_member: int, **spec: object) -> dict:
        meta = {"name": name, "namespace": NAMESPACE}
        body = {"minMember": min_member, "queue": "q", **spec}
        return ev(f"pg-{name}", ev_types.PODGROUP_SUBMITTED, {"metadata": meta, "spec": body})

    f = Fold(Admission())
    f(
        node("n1", "16"),
        queue("q", capability={"cpu": "5"}),
        group("given", 2, minResources={"cpu": "1"}),
        group("half", 1),
        group("whole", 2),
        *(qpod(f"given-{i}", "4", gang="given") for i in range(2)),
        *(qpod(f"half-{i}", "2", gang="half") for i in range(2)),
        *(qpod(f"whole-{i}", "3", gang="whole") for i in range(2)),
    )
    released = f.release("gang:t/given", "gang:t/half", "gang:t/whole")
    assert released == ["t/given", "t/half"]
    assert f.admission.held == {("gang", "t/whole"): "QueueCapability"}


# ---------------------------------------------------------------------- order


def test_higher_priority_queue_first_whatever_the_weights():
    # The seed: A (priority 100) gets resources before B (priority 50, weight 10).
    f = Fold(Admission())
    f(node("n1", "64"), queue("a", priority=100, weight=1), queue("b", priority=50, weight=10))
    f(*(qpod(f"b{i}", queue="b") for i in range(3)), *(qpod(f"a{i}", queue="a") for i in range(3)))
    order = f.release(*(f"t/b{i}" for i in range(3)), *(f"t/a{i}" for i in range(3)))
    assert order == ["t/a0", "t/a1", "t/a2", "t/b0", "t/b1", "t/b2"]


def test_equal_priority_queues_interleave_by_weight_two_to_one():
    f = Fold(Admission())
    f(node("n1", "30", memory="300Gi", pods="200"), queue("c", weight=2), queue("d", weight=1))
    f(
        *(qpod(f"c{i}", queue="c") for i in range(40)),
        *(qpod(f"d{i}", queue="d") for i in range(40)),
    )
    order = f.release(*(f"t/d{i}" for i in range(40)), *(f"t/c{i}" for i in range(40)))
    # What the cluster can hold is let through, split 2:1 (the deserved shares, 20 and
    # 10 CPUs); the rest waits (proportion's overused check), not handed to replicas.
    assert Counter(k[2] for k in order) == {"c": 20, "d": 10}
    assert Counter(f.admission.held.values()) == {"QueueOverused": 50}


def test_within_a_queue_job_priority_then_arrival():
    f = Fold(Admission())
    f(node("n1", "8"), qpod("low1"), qpod("high", priority=500), qpod("low2"))
    assert f.release("t/low1", "t/high", "t/low2") == ["t/high", "t/low1", "t/low2"]


def test_job_priority_is_the_band_first_so_a_mapped_podgroup_class_goes_first():
    from esched.core.quota import Quota

    bands = parse_quota(None, {"classes": {"critical": "production"}}).bands
    f = Fold(Admission(Quota(bands=bands)))
    pg = ev(
        "pg-g",
        ev_types.PODGROUP_SUBMITTED,
        {
            "metadata": {"name": "g", "namespace": NAMESPACE},
            "spec": {"minMember": 2, "priorityClassName": "critical"},
        },
    )
    f(node("n1", "8"), qpod("batchy", priority=500), pg, qpod("g0", gang="g"), qpod("g1", gang="g"))
    # The gang's members have priority 0, but their PodGroup's class is production.
    assert f.release("t/batchy", "gang:t/g") == ["t/g", "t/batchy"]


# ---------------------------------------------------------------------- the dispatcher


async def _rows(store: EventStore) -> list[dict]:
    return [orjson.loads(r.payload) for r in await store.read(0, 10_000)]


@contextlib.asynccontextmanager
async def _leading(d: Dispatcher) -> AsyncIterator[None]:
    """Run the dispatcher ``d`` until it holds the lease; stop it on exit."""
    await d.start()
    task = asyncio.create_task(d.run())
    try:
        await eventually(
            lambda: d.leading, 5, interval=0.01, message="the dispatcher never took the lease"
        )
        yield
    finally:
        await d.stop()
        await asyncio.wait_for(task, 5)


def _reclaiming_dispatcher(store: EventStore) -> tuple[Dispatcher, list[dict]]:
    """A dispatcher with a fast reclaim pass whose proposals are collected in the list."""
    proposals: list[dict] = []

    async def submit(batch: list[dict]) -> None:
        proposals.extend(batch)

    return Dispatcher(
        store, MemoryBus(), submit=submit, config=DispatchConfig(tick=0.02, reclaim_interval=0.05)
    ), proposals


async def test_dispatcher_rejects_over_quota_and_publishes_in_queue_order(store: EventStore):
    bus = MemoryBus()
    quota = parse_quota({"namespaces": {"t": {"cpu": "3"}}})
    d = Dispatcher(store, bus, config=DispatchConfig(tick=0.02), admission=Admission(quota))
    async with _leading(d):
        await append_events(
            store,
            node("n1", "8"),
            queue("hi", priority=100),
            queue("lo", priority=1),
            qpod("l1", queue="lo"),
            qpod("h1", queue="hi"),
            qpod("h2", queue="hi"),
            qpod("over", queue="hi"),
        )
        await eventually(lambda: len(bus.log(bus.topics.work)) >= 3 and d.idle(), 5)
        work = [orjson.loads(m.value)["pod"] for m in bus.log(bus.topics.work)]
        assert work == ["t/h1", "t/h2", "t/l1"]  # queue priority first; "over" never
        rejected = [e for e in await _rows(store) if e["type"] == ev_types.POD_REJECTED]
        assert [e["data"]["pod"] for e in rejected] == ["t/over"]
        assert rejected[0]["data"]["reason"] == "QuotaExceeded"
        # The rejection is in the log; the dispatcher's own fold reads it back.
        await eventually(lambda: d.state.pod("t/over")["phase"] == "Failed", 5)
        assert d.totals.rejected == {"QuotaExceeded": 1}


async def test_dispatcher_hands_out_a_job_whose_gang_was_rejected_before_it_came(
    store: EventStore,
):
    """Pods naming a gang before its Volcano Job, over quota: the gang is rejected
    whole; the Job then implies its PodGroup and pods, judged afresh and published
    as the gang's work item."""
    bus = MemoryBus()
    quota = parse_quota({"namespaces": {"t": {"cpu": "2"}}})
    d = Dispatcher(store, bus, config=DispatchConfig(tick=0.02), admission=Admission(quota))
    async with _leading(d):
        await append_events(
            store, node("n1", "8"), *(qpod(f"early{i}", gang="j") for i in range(3))
        )
        await eventually(lambda: d.totals.rejected.get("QuotaExceeded") == 3, 5)
        await append_events(store, _job_with_two_pods("j"))
        await eventually(lambda: bool(bus.log(bus.topics.work)) and d.idle(), 5)
        work = [orjson.loads(m.value) for m in bus.log(bus.topics.work)]
        assert [w.get("gang") for w in work] == ["t/j"]
        assert d.totals.rejected == {"QuotaExceeded": 3}
        assert d.state.gang_members("t/j", "Pending") == ["t/j-w-0", "t/j-w-1"]


async def test_commit_rejects_placing_a_pod_of_a_closed_queue(store: EventStore):
    from esched.core.validation import QUEUE_CLOSED
    from esched.services.commit import CommitService

    await append_events(
        store,
        node("n1", "8"),
        queue("q"),
        qpod("a", queue="q"),
        qpod("b", queue="q"),
        queue("q", "q-closed", state="Closed"),
    )
    service = CommitService(store)
    try:
        [d] = await service.decide([placement("p1", [("a", "n1")])])
        assert d["type"] == ev_types.PLACEMENT_REJECTED and d["data"]["reason"] == QUEUE_CLOSED
        await append_events(store, queue("q", "q-open", state="Open"))
        [d] = await service.decide([placement("p2", [("b", "n1")])])
        assert d["type"] == ev_types.PLACEMENT_COMMITTED
    finally:
        await service.stop()


def test_up_with_a_quota_config_rejects_and_replay_shows_queues(tmp_path):
    import json

    from click.testing import CliRunner

    from esched.services.cli import EXIT_USAGE, cli

    cfg = tmp_path / "esched.yaml"
    cfg.write_text("quota:\n  namespaces:\n    t:\n      cpu: '2'\n")
    manifests = tmp_path / "cluster.yaml"
    docs = [
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n"
        "status: {allocatable: {cpu: '8', memory: 16Gi, pods: '10'}}",
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: q}\n"
        "spec: {weight: 2, priority: 10}",
    ]
    for i in range(3):
        docs.append(
            f"apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, namespace: t, "
            "annotations: {volcano.sh/queue-name: q}}\n"
            "spec: {containers: [{name: c, resources: {requests: {cpu: '1'}}}]}"
        )
    manifests.write_text("\n---\n".join(docs))
    store = f"sqlite:///{tmp_path / 'e.sqlite'}"
    runner = CliRunner()
    up = ["--config", str(cfg), "up", "--store", store, "--input", str(manifests)]
    res = runner.invoke(cli, [*up, "--exit-when-idle", "--quiet"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["dispatch"]["rejected"] == {"QuotaExceeded": 1}
    res = runner.invoke(cli, ["replay", "--store", store])
    q = json.loads(res.stdout)["queues"]["q"]
    assert q["Running"] == 2 and q["allocated"]["cpu"] == 2000 and q["path"] == "root.q"
    assert q["share"] == 1.0  # everything it asks for, it has
    res = runner.invoke(cli, ["replay", "--store", store, "--format", "table"])
    assert "root.q" in res.stdout and "cpu=2/2" in res.stdout
    # A bad quota section is a usage error naming the field.
    cfg.write_text("quota:\n  namespaces:\n    t:\n      cpu: lots\n")
    res = runner.invoke(cli, [*up, "--exit-when-idle", "--quiet"])
    assert res.exit_code == EXIT_USAGE and "quota.namespaces.t.cpu" in res.output


# ---------------------------------------------------------------------- reclaim


def running(name: str, node_name: str, queue_name: str) -> dict:
    e = qpod(name, queue=queue_name)
    e["data"]["spec"]["nodeName"] = node_name
    return e


async def _starve_b0(store: EventStore) -> None:
    """Queue a runs on both 2-CPU nodes; b0 (queue b, same weight) is reported
    unschedulable: a reclaim for it is due."""
    await append_events(
        store,
        node("n1", "2"),
        node("n2", "2"),
        queue("a"),
        queue("b"),
        *(running(f"a{i}", f"n{1 + i // 2}", "a") for i in range(4)),
        qpod("b0", queue="b"),
    )
    report = ev(
        "u-b0",
        ev_types.POD_UNSCHEDULABLE,
        {"pod": "t/b0", "reasons": {"Insufficient.cpu": 2}, "message": "full", "position": 9},
    )
    await append_events(store, report)


async def test_dispatcher_proposes_a_reclaim_for_a_starved_queues_parked_pod(store: EventStore):
    d, proposals = _reclaiming_dispatcher(store)
    async with _leading(d):
        await _starve_b0(store)
        await eventually(lambda: proposals, 5, message=lambda: str(d.totals.as_dict()))
        (p,) = proposals
        assert p["reclaim"] is True and p["bindings"][0]["pod"] == "t/b0"
        assert p["victims"] == [{"pod": "t/a0", "node": "n1"}]
        assert d.totals.reclaims == 1
        await asyncio.sleep(0.2)
        assert len(proposals) == 1  # not planned again while its decision is on the way


async def test_dispatcher_plans_again_at_once_after_a_refused_reclaim(store: EventStore):
    """A reclaim the commit service refuses (its victim already gone) is planned again on
    the next pass, not left waiting for a log that stands still (the queue would stay
    at share 0)."""
    from esched.core.validation import VICTIM_GONE, Verdict
    from esched.services.commit.decisions import decision_event

    d, proposals = _reclaiming_dispatcher(store)
    d.config = DispatchConfig(tick=0.02, reclaim_interval=0.05, reclaim_timeout=60.0)
    async with _leading(d):
        await _starve_b0(store)
        await eventually(lambda: proposals, 5, message=lambda: str(d.totals.as_dict()))
        first = proposals[0]
        refused = decision_event(
            first, Verdict(False, VICTIM_GONE, "victim t/a0 is not running on n1", ("t/b0",))
        )
        await append_events(store, refused)
        await eventually(lambda: len(proposals) >= 2, 5, message=lambda: str(d.totals.as_dict()))
        assert proposals[1]["proposal"] != first["proposal"]
        assert proposals[1]["bindings"][0]["pod"] == "t/b0"


async def test_dispatcher_does_not_propose_a_reclaim_the_commit_service_must_refuse(
    store: EventStore,
):
    d, proposals = _reclaiming_dispatcher(store)
    async with _leading(d):
        # b (higher priority) may take room from a, but its capability (1.5 CPUs)
        # leaves no room for b0 (2 CPUs) anyway: a plan exists, the commit would refuse.
        await append_events(
            store,
            node("n1", "2"),
            node("n2", "2"),
            queue("a"),
            queue("b", priority=10, capability={"cpu": "1500m"}),
            *(running(f"a{i}", f"n{1 + i // 2}", "a") for i in range(4)),
            qpod("b0", "2", queue="b"),
        )
        await append_events(
            store,
            ev(
                "u-b0",
                ev_types.POD_UNSCHEDULABLE,
                {
                    "pod": "t/b0",
                    "reasons": {"Insufficient.cpu": 2},
                    "message": "full",
                    "position": 9,
                },
            ),
        )
        # b0 alone would take b over its capability (its deserved share is at most
        # 1.5 CPUs): no plan (proportion's Preemptive), nothing sent.
        await eventually(lambda: d.position >= 10, 5, message=lambda: str(d.totals.as_dict()))
        await asyncio.sleep(0.7)
        assert proposals == [] and d.totals.reclaims == 0 and "t/b0" not in d.reclaiming


async def test_up_reclaims_for_a_starved_queue_and_the_audit_passes(tmp_path):
    """Queue a runs on all 4 CPUs; queue b (same weight) then wants 4: reclaim evicts a's
    lowest-priority pods until each holds its fair share (2 CPUs), in committed
    victims+binding transactions; a's evicted pods wait (unschedulable)."""
    from esched.services.audit import audit_store
    from esched.services.bus.base import TopicNames
    from esched.services.event_files import record_for_event
    from esched.services.store import open_store
    from esched.services.store.snapshots import fold_log
    from esched.services.up import Up, UpConfig

    url = f"sqlite:///{tmp_path / 'r.sqlite'}"
    events = [node("n1", "2"), node("n2", "2"), queue("a"), queue("b")]
    events += [running(f"a{i}", f"n{1 + i // 2}", "a") for i in range(4)]
    events += [qpod(f"b{i}", queue="b") for i in range(4)]
    topics = TopicNames()
    records = [record_for_event(e, topics, "test") for e in events]
    summary = await asyncio.wait_for(
        Up(UpConfig(store=url, progress_every=0, exit_when_idle=True), records).run(), 60
    )
    assert summary["dispatch"]["reclaims"] >= 2
    es = open_store(url)
    await es.connect()
    try:
        st = await fold_log(es)
        q = st.summary()["queues"]
        assert q["a"]["Running"] == 2 and q["b"]["Running"] == 2
        assert q["a"]["share"] == 1.0 and q["b"]["share"] == 1.0
        evicted = [
            orjson.loads(r.payload)
            for r in await es.read(0, 10_000)
            if r.type == ev_types.POD_EVICTED
        ]
        assert len(evicted) == 2 and all(e["data"]["pod"].startswith("t/a") for e in evicted)
        assert {e["data"]["reason"] for e in evicted} == {"Reclaimed"}
        report = await audit_store(es)
        assert report["ok"], report["violations"]
    finally:
        await es.close()


async def test_up_seed_example_priority_orders_and_the_deserved_share_decides_reclaim(tmp_path):
    """The Volcano seed's queues a (priority 100) and b (priority 50), as Volcano's
    reclaim action treats them: b holds all 4 CPUs when a's 4 pods arrive; a reclaims
    down to the deserved shares (2 CPUs each at equal weights), not the whole cluster
    as the seed's "priority is absolute" would have it (esched follows Volcano there:
    core/reclaim.py), and b, at its share, reclaims nothing back."""
    from esched.services.audit import audit_store
    from esched.services.bus.base import TopicNames
    from esched.services.event_files import record_for_event
    from esched.services.store import open_store
    from esched.services.store.snapshots import fold_log
    from esched.services.up import Up, UpConfig

    url = f"sqlite:///{tmp_path / 'p.sqlite'}"
    events = [
        node("n1", "2"),
        node("n2", "2"),
        queue("a", priority=100, weight=1),
        queue("b", priority=50, weight=1),
    ]
    events += [running(f"b{i}", f"n{1 + i // 2}", "b") for i in range(4)]
    events += [qpod(f"a{i}", queue="a") for i in range(4)]
    records = [record_for_event(e, TopicNames(), "test") for e in events]
    summary = await asyncio.wait_for(
        Up(UpConfig(store=url, progress_every=0, exit_when_idle=True), records).run(), 60
    )
    assert summary["dispatch"]["reclaims"] == 2
    es = open_store(url)
    await es.connect()
    try:
        q = (await fold_log(es)).summary()["queues"]
        assert q["a"]["Running"] == 2 and q["b"]["Running"] == 2 and q["b"]["Pending"] == 2
        report = await audit_store(es)
        assert report["ok"], report["violations"]
        assert report["queues"]["a"]["allocated"]["cpu"] == 2000
    finally:
        await es.close()


async def test_up_seed_example_weights_two_to_one_give_two_thirds_and_one_third(tmp_path):
    """The Volcano seed: queues c and d of equal priority, weights 2 and 1, both wanting
    more than the cluster: c ends with 2/3 of it and d with 1/3 (20 and 10 of 30 CPUs),
    as `esched replay` and `esched audit` show."""
    from esched.services.audit import audit_store
    from esched.services.bus.base import TopicNames
    from esched.services.event_files import record_for_event
    from esched.services.store import open_store
    from esched.services.store.snapshots import fold_log
    from esched.services.up import Up, UpConfig

    url = f"sqlite:///{tmp_path / 'w.sqlite'}"
    events = [node(f"n{i}", "10", memory="64Gi", pods="110") for i in range(3)]
    events += [queue("c", priority=100, weight=2), queue("d", priority=100, weight=1)]
    events += [qpod(f"{q}{i}", queue=q) for i in range(40) for q in ("d", "c")]
    records = [record_for_event(e, TopicNames(), "test") for e in events]
    await asyncio.wait_for(
        Up(UpConfig(store=url, progress_every=0, exit_when_idle=True), records).run(), 90
    )
    es = open_store(url)
    await es.connect()
    try:
        q = (await fold_log(es)).summary()["queues"]
        assert (q["c"]["Running"], q["d"]["Running"]) == (20, 10)
        assert q["c"]["fairShare"]["cpu"] == 20000 and q["d"]["fairShare"]["cpu"] == 10000
        report = await audit_store(es)
        assert report["ok"], report["violations"]
        assert report["queues"]["c"]["share"] == report["queues"]["d"]["share"] == 1.0
    finally:
        await es.close()


async def test_commit_checks_a_reclaim_by_the_queues_rule(store: EventStore):
    from esched.core.validation import RECLAIM_ILLEGAL
    from esched.services.commit import CommitService

    # Fair shares (cpu): keep 1 (its demand), a and b 1.5 each; a holds 3.
    await append_events(
        store,
        node("n1", "3"),
        node("n2", "1"),
        queue("a"),
        queue("keep", reclaimable=False),
        *(running(f"a{i}", "n1", "a") for i in range(3)),
        running("k0", "n2", "keep"),
        queue("b"),
        qpod("b0", queue="b"),
        qpod("b1", queue="b"),
    )

    def reclaim(pid: str, pod: str, victims: list[tuple[str, str]], where: str) -> dict:
        return {
            "proposal": pid,
            "replica": "dispatch",
            "position": 1,
            "gang": None,
            "reclaim": True,
            "bindings": [
                {
                    "pod": f"t/{pod}",
                    "node": where,
                    "resources": {"cpu": 1000, "memory": GIB, "pods": 1},
                }
            ],
            "victims": [{"pod": f"t/{v}", "node": n} for v, n in victims],
        }

    service = CommitService(store)
    try:
        # Not reclaimable; two victims of a, each taken while a holds more than its
        # share (proportion's Reclaimable looks before each victim goes): legal.
        d1, d2 = await service.decide(
            [
                reclaim("r1", "b0", [("k0", "n2")], "n2"),
                reclaim("r2", "b0", [("a0", "n1"), ("a1", "n1")], "n1"),
            ]
        )
        assert d1["data"]["reason"] == RECLAIM_ILLEGAL
        assert "not reclaimable" in d1["data"]["message"]
        assert d2["type"] == ev_types.PLACEMENT_COMMITTED and d2["data"]["reclaim"] is True
        assert service.state.pod("t/a0")["phase"] == "Pending"
        assert service.state.pod("t/b0")["node"] == "n1"
        # b holds 1 of its 1.5 now: b1 would take it over (and a, at 1, is not above).
        [d] = await service.decide([reclaim("r4", "b1", [("a2", "n1")], "n1")])
        assert d["data"]["reason"] == RECLAIM_ILLEGAL
        assert "deserved share" in d["data"]["message"]
    finally:
        await service.stop()
    from esched.services.audit import audit_store

    report = await audit_store(store)
    assert report["ok"], report["violations"]


async def test_reclaim_over_kafka_and_postgresql(
    pg_store: EventStore, kafka_bootstrap: str, topic_prefix: str
):
    """The dispatcher's reclaim proposal travels on the proposals topic of a real broker
    to the commit service, which commits the eviction and the binding in PostgreSQL."""
    from esched.services.bus import open_bus
    from esched.services.commit import CommitService
    from esched.services.store.snapshots import fold_log

    await append_events(
        pg_store,
        node("n1", "2"),
        queue("a"),
        queue("b"),
        running("a0", "n1", "a"),
        running("a1", "n1", "a"),
        qpod("b0", queue="b"),
    )
    bus = open_bus(kafka_bootstrap, topic_prefix)
    commit = CommitService(pg_store, bus)
    d = Dispatcher(pg_store, bus, config=DispatchConfig(tick=0.05, reclaim_interval=0.1))
    await commit.start()
    await d.start()
    tasks = [asyncio.create_task(commit.run()), asyncio.create_task(d.run())]
    try:
        await eventually(lambda: d.leading, 60, interval=0.05)
        # What a replica reports when b0 fits nowhere (there is none in this test).
        await append_events(
            pg_store,
            ev(
                "u-b0",
                ev_types.POD_UNSCHEDULABLE,
                {
                    "pod": "t/b0",
                    "reasons": {"Insufficient.cpu": 1},
                    "message": "full",
                    "position": 6,
                },
            ),
        )

        async def b0_running():
            assert not any(t.done() for t in tasks), [t.exception() for t in tasks if t.done()]
            st = await fold_log(pg_store)
            return st if st.pod("t/b0")["phase"] == "Running" else None

        st = await eventually(b0_running, 60, interval=0.2, message=lambda: str(d.totals.as_dict()))
        assert st.pod("t/a0")["phase"] == "Pending" and st.pod("t/a1")["phase"] == "Running"
        assert d.totals.reclaims == 1 and commit.totals.evicted == 1
    finally:
        await d.stop()
        await commit.stop()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 20)


async def test_commit_takes_a_gang_reclaim_whole_or_not_at_all(store: EventStore):
    from esched.core.validation import RECLAIM_ILLEGAL
    from esched.services.commit import CommitService

    pg = ev(
        "pg-g",
        ev_types.PODGROUP_SUBMITTED,
        {"metadata": {"name": "g", "namespace": NAMESPACE}, "spec": {"minMember": 2, "queue": "b"}},
    )
    await append_events(
        store,
        node("n1", "2"),
        node("n2", "2"),
        queue("a"),
        queue("b"),
        *(running(f"a{i}", f"n{1 + i // 2}", "a") for i in range(4)),
        pg,
        qpod("g0", gang="g"),
        qpod("g1", gang="g"),
    )

    def reclaim(pid: str, binds: list[tuple[str, str]], victims: list[tuple[str, str]]):
        return {
            "proposal": pid,
            "replica": "dispatch",
            "position": 1,
            "gang": "t/g",
            "reclaim": True,
            "bindings": [
                {"pod": f"t/{p}", "node": n, "resources": {"cpu": 1000, "memory": GIB, "pods": 1}}
                for p, n in binds
            ],
            "victims": [{"pod": f"t/{v}", "node": n} for v, n in victims],
        }

    service = CommitService(store)
    try:
        # Three victims would take a below its fair share (2 CPUs): nothing happens.
        [d] = await service.decide(
            [
                reclaim(
                    "r1", [("g0", "n1"), ("g1", "n2")], [("a0", "n1"), ("a2", "n2"), ("a3", "n2")]
                )
            ]
        )
        assert d["data"]["reason"] == RECLAIM_ILLEGAL
        assert service.state.pod("t/a0")["phase"] == "Running"
        # Both members with one victim each: one transaction, evictions then bindings.
        [d] = await service.decide(
            [reclaim("r2", [("g0", "n1"), ("g1", "n2")], [("a0", "n1"), ("a2", "n2")])]
        )
        assert d["type"] == ev_types.PLACEMENT_COMMITTED, d["data"]
        st = service.state
        assert st.pod("t/g0")["node"] == "n1" and st.pod("t/g1")["node"] == "n2"
        assert st.pod("t/a0")["phase"] == "Pending" and st.pod("t/a2")["phase"] == "Pending"
    finally:
        await service.stop()
    rows = await _rows(store)
    types = [r["type"] for r in rows[-3:]]
    assert types == [ev_types.POD_EVICTED, ev_types.POD_EVICTED, ev_types.PLACEMENT_COMMITTED]
    assert {r["data"]["by"] for r in rows[-3:-1]} == {"t/g"}
    from esched.services.audit import audit_store

    report = await audit_store(store)
    assert report["ok"], report["violations"]


async def test_up_reclaims_for_a_starved_queues_gang_and_the_audit_passes(tmp_path):
    """Queue a holds all 4 CPUs; queue b (same weight) then submits a gang of 2 (minMember
    2): one reclaim evicts two of a's lowest-priority pods and binds both members at once."""
    from esched.services.audit import audit_store
    from esched.services.bus.base import TopicNames
    from esched.services.event_files import record_for_event
    from esched.services.store import open_store
    from esched.services.store.snapshots import fold_log
    from esched.services.up import Up, UpConfig

    url = f"sqlite:///{tmp_path / 'g.sqlite'}"
    pg = ev(
        "pg-g",
        ev_types.PODGROUP_SUBMITTED,
        {"metadata": {"name": "g", "namespace": NAMESPACE}, "spec": {"minMember": 2, "queue": "b"}},
    )
    events = [node("n1", "2"), node("n2", "2"), queue("a"), queue("b")]
    for i, prio in enumerate((40, 10, 30, 20)):
        e = running(f"a{i}", f"n{1 + i // 2}", "a")
        e["data"]["spec"]["priority"] = prio
        events.append(e)
    events += [pg, qpod("g0", gang="g"), qpod("g1", gang="g")]
    topics = TopicNames()
    records = [record_for_event(e, topics, "test") for e in events]
    summary = await asyncio.wait_for(
        Up(UpConfig(store=url, progress_every=0, exit_when_idle=True), records).run(), 60
    )
    assert summary["dispatch"]["reclaims"] >= 1
    es = open_store(url)
    await es.connect()
    try:
        st = await fold_log(es)
        assert st.summary()["gangs"]["t/g"]["Running"] == 2
        q = st.summary()["queues"]
        assert q["a"]["Running"] == 2 and q["b"]["Running"] == 2
        rows = [orjson.loads(r.payload) for r in await es.read(0, 10_000)]
        evicted = [e["data"]["pod"] for e in rows if e["type"] == ev_types.POD_EVICTED]
        assert sorted(evicted) == ["t/a1", "t/a3"]  # the lowest priority on each node
        (gang_commit,) = [
            e
            for e in rows
            if e["type"] == ev_types.PLACEMENT_COMMITTED and e["data"].get("gang") == "t/g"
        ]
        assert gang_commit["data"]["reclaim"] is True
        assert len(gang_commit["data"]["bindings"]) == 2
        report = await audit_store(es)
        assert report["ok"], report["violations"]
    finally:
        await es.close()


# ---------------------------------------------------------------------- commit: capability


def _one_binding(pid: str, pod: str) -> dict:
    """A proposal binding pod ``t/<pod>`` (1 CPU) to ``n1``."""
    return {
        "proposal": pid,
        "replica": "r1",
        "position": 1,
        "gang": None,
        "bindings": [
            {
                "pod": f"t/{pod}",
                "node": "n1",
                "resources": {"cpu": 1000, "memory": GIB, "pods": 1},
            }
        ],
    }


async def test_commit_rejects_bindings_over_a_queue_capability(store: EventStore):
    from esched.core.validation import QUEUE_CAPABILITY
    from esched.services.commit import CommitService

    # q (capability 2 CPUs) under parent p (capability 3 CPUs); sibling s uncapped.
    await append_events(
        store,
        node("n1", "8"),
        queue("p", capability={"cpu": "3"}),
        queue("q", parent="root.p", capability={"cpu": "2"}),
        queue("s", parent="p"),
        running("q0", "n1", "q"),
        *(qpod(f"q{i}", queue="q") for i in (1, 2)),
        *(qpod(f"s{i}", queue="s") for i in (0, 1)),
    )

    service = CommitService(store)
    try:
        # Two replicas each placed one more of q's pods on their own view: the batch
        # counts the first, so the second would take q to 3 > 2.
        d1, d2 = await service.decide([_one_binding("a", "q1"), _one_binding("b", "q2")])
        assert d1["type"] == ev_types.PLACEMENT_COMMITTED
        assert d2["data"]["reason"] == QUEUE_CAPABILITY
        assert "queue q: cpu 3000" in d2["data"]["message"]
        # The parent's capability covers its children: p holds 2, one more of s fits.
        d3, d4 = await service.decide([_one_binding("c", "s0"), _one_binding("d", "s1")])
        assert d3["type"] == ev_types.PLACEMENT_COMMITTED
        assert d4["data"]["reason"] == QUEUE_CAPABILITY and "queue p" in d4["data"]["message"]
    finally:
        await service.stop()
    from esched.services.audit import audit_store

    report = await audit_store(store)
    assert report["ok"], report["violations"]


def annotated_queue(name: str, path: str, weights: str, **spec) -> dict:
    """A Queue placed by Volcano's hdrf annotations (read under queue_hierarchy
    "annotations")."""
    e = queue(name, **spec)
    e["data"]["metadata"]["annotations"] = {
        "volcano.sh/hierarchy": path,
        "volcano.sh/hierarchy-weights": weights,
    }
    return e


async def test_commit_checks_capability_up_the_tree_of_the_hierarchy_annotations(
    store: EventStore,
):
    """The capability case above with the tree from ``volcano.sh/hierarchy`` under
    ``queue_hierarchy="annotations"`` (spec.parent names nothing): q (root/p/q,
    capability 2, one pod running) and s (root/p/s) under p (root/p, capability 2):
    p's subtree takes one more pod of s, not two. Under the default tree the three
    are top-level and s is unbounded."""
    from esched.core.validation import QUEUE_CAPABILITY
    from esched.services.commit import CommitConfig, CommitService

    await append_events(
        store,
        node("n1", "8"),
        annotated_queue("p", "root/p", "1/1", capability={"cpu": "2"}),
        annotated_queue("q", "root/p/q", "1/1/1", capability={"cpu": "2"}),
        annotated_queue("s", "root/p/s", "1/1/1"),
        running("q0", "n1", "q"),
        *(qpod(f"s{i}", queue="s") for i in (0, 1)),
    )

    service = CommitService(store, config=CommitConfig(queue_hierarchy="annotations"))
    try:
        d1, d2 = await service.decide([_one_binding("c", "s0"), _one_binding("d", "s1")])
        assert d1["type"] == ev_types.PLACEMENT_COMMITTED
        assert d2["data"]["reason"] == QUEUE_CAPABILITY and "queue p" in d2["data"]["message"]
    finally:
        await service.stop()
    # The default tree sees three top-level queues: s has no capability.
    default = CommitService(store)
    try:
        (d,) = await default.decide([_one_binding("e", "s1")])
        assert d["type"] == ev_types.PLACEMENT_COMMITTED
    finally:
        await default.stop()


# ---------------------------------------------------------------------- deserved as a cap


@pytest.mark.parametrize(
    ("case", "queues", "pods", "released", "held"),
    [
        # volcano pkg/scheduler/plugins/proportion/proportion_test.go, TestProportion
        # "proportion" shape: two busy queues of weights 1 and 2 on 6 CPUs deserve 2
        # and 4; each is let through up to its share, the rest waits.
        (
            "weights 1:2 share 6 CPUs as 2 and 4",
            [("q1", {"weight": 1}), ("q2", {"weight": 2})],
            {"q1": 5, "q2": 5},
            {"q1": 2, "q2": 4},
            {"QueueOverused": 4},
        ),
        # A queue alone with work takes what is free (overused needs another waiting).
        (
            "a queue alone is not held at its share",
            [("q1", {"weight": 1}), ("q2", {"weight": 1})],
            {"q1": 6},
            {"q1": 6},
            {},
        ),
        # capacity_test.go "case1: Pod not allocatable when queue exceed queue
        # capability": the capability is the hard cap, whatever the deserved share.
        (
            "capability below the deserved share caps the queue",
            [("q1", {"weight": 3, "capability": {"cpu": "1"}}), ("q2", {"weight": 1})],
            {"q1": 4, "q2": 4},
            {"q1": 1, "q2": 4},
            {"QueueCapability": 3, "QueueOverused": 0},
        ),
        # A guarantee is reserved (proportion's realCapability = total - the others'
        # guarantees + its own): q1, idle but guaranteed 2 CPUs, is never lent them.
        (
            "another queue's guarantee is never lent",
            [("q1", {"guarantee": {"resource": {"cpu": "2"}}}), ("q2", {})],
            {"q2": 6},
            {"q2": 4},
            {"QueueCapability": 2},
        ),
    ],
)
def test_a_queue_at_its_deserved_share_waits_while_others_wait(case, queues, pods, released, held):
    f = Fold(Admission())
    f(node("n1", "6", memory="64Gi"), *(queue(n, **spec) for n, spec in queues))
    keys = []
    for q, n in pods.items():
        f(*(qpod(f"{q}-{i}", queue=q) for i in range(n)))
        keys += [f"t/{q}-{i}" for i in range(n)]
    got = Counter(k[2:].split("-")[0] for k in f.release(*keys))
    assert dict(got) == released, case
    assert Counter(f.admission.held.values()) == Counter({k: v for k, v in held.items() if v})


def test_a_held_queue_gets_its_turn_when_a_pod_of_the_other_ends():
    """Deserved shares follow demand: when one queue's work ends, the other's share
    grows and its held jobs are let through on the next look."""
    f = Fold(Admission())
    f(node("n1", "4", memory="64Gi"), queue("a"), queue("b"))
    f(*(qpod(f"a{i}", queue="a") for i in range(2)), *(qpod(f"b{i}", queue="b") for i in range(4)))
    assert sorted(f.release(*(f"t/a{i}" for i in range(2)), *(f"t/b{i}" for i in range(4)))) == [
        "t/a0",
        "t/a1",
        "t/b0",
        "t/b1",
    ]
    f(bind("a0", "n1"), bind("a1", "n1"), bind("b0", "n1"), bind("b1", "n1"))
    f(done("a0"), done("a1"))
    # a has no work left: b alone waits and takes what is free.
    assert sorted(it[2] for it in f.admission.release(f.state, f.admission.reconsider())) == [
        "t/b2",
        "t/b3",
    ]


def test_a_job_let_through_before_is_not_held_again_when_re_published():
    f = Fold(Admission())
    f(node("n1", "2", memory="64Gi"), queue("a"), queue("b"))
    f(qpod("a0", queue="a"), qpod("b0", queue="b"), qpod("b1", queue="b"))
    assert sorted(f.release("t/a0", "t/b0", "t/b1")) == ["t/a0", "t/b0"]
    # b0 was reported unschedulable and comes again: it already holds its room.
    assert f.release("t/b0") == ["t/b0"]


# ---------------------------------------------------------------------- a queue not found


def test_a_pod_or_podgroup_naming_a_queue_never_declared_is_rejected():
    """Volcano's PodGroup webhook (pkg/webhooks/admission/podgroups/validate,
    ``checkQueueState``: "unable to find queue") and Job webhook refuse a queue that
    does not exist; esched rejects the pods at admission with ``QueueNotFound``
    (Failed, never silently Pending). ``default`` always exists."""
    f = Fold(Admission())
    pg = ev(
        "pg-lost",
        ev_types.PODGROUP_SUBMITTED,
        {
            "metadata": {"name": "lost", "namespace": NAMESPACE},
            "spec": {"minMember": 2, "queue": "nowhere"},
        },
    )
    out = f(
        node("n1", "8"),
        queue("real"),
        qpod("typo", queue="reel"),
        qpod("fine", queue="real"),
        qpod("plain"),
        pg,
        qpod("g0", gang="lost"),
        qpod("g1", gang="lost"),
    )
    assert {r.pod: r.reason for r in out} == {
        "t/typo": "QueueNotFound",
        "t/g0": "QueueNotFound",
        "t/g1": "QueueNotFound",
    }
    typo = next(r for r in out if r.pod == "t/typo")
    assert typo.queue == "reel" and 'unable to find queue: queue.scheduling.volcano.sh "reel"' in (
        typo.message
    )
    assert f.state.pod("t/typo")["phase"] == "Failed"
    assert f.state.pod("t/fine")["phase"] == "Pending"
    assert f.state.pod("t/plain")["phase"] == "Pending"


def test_a_pod_submitted_before_its_queue_is_rejected_after_it_is_admitted():
    # Judged at its own log position, as the webhook judges at creation time.
    f = Fold(Admission())
    out = f(node("n1", "8"), qpod("early", queue="late"), queue("late"), qpod("ok", queue="late"))
    assert [(r.pod, r.reason) for r in out] == [("t/early", "QueueNotFound")]


def test_a_new_leader_rejects_pending_pods_of_a_queue_never_declared():
    f = Fold(Admission())
    f.state.apply_many(
        [(1, node("n1", "8")), (2, qpod("orphan", queue="ghost")), (3, queue("real"))]
    )
    f.position = 3
    out = f.admission.start(f.state)
    assert [(r.pod, r.reason) for r in out] == [("t/orphan", "QueueNotFound")]
    # A queue the fold knows only from a pod's name is not declared in its summary.
    assert "implicit" not in f.state.summary()["queues"]["ghost"]


def test_children_share_their_parents_deserved_share():
    """Hierarchy from ``spec.parent`` (volcano docs/design/hierarchical-queue-on-capacity-
    plugin.md): eng and sci split 8 CPUs, eng's children dev and ops split eng's 4; each
    leaf is let through up to its own share while the others wait."""
    f = Fold(Admission())
    f(
        node("n1", "8", memory="64Gi"),
        queue("eng"),
        queue("sci"),
        queue("dev", parent="root.eng"),
        queue("ops", parent="root.eng"),
    )
    pods = {"dev": 4, "ops": 4, "sci": 8}
    keys = []
    for q, n in pods.items():
        f(*(qpod(f"{q}-{i}", queue=q) for i in range(n)))
        keys += [f"t/{q}-{i}" for i in range(n)]
    got = Counter(k[2:].split("-")[0] for k in f.release(*keys))
    assert got == {"dev": 2, "ops": 2, "sci": 4}
    assert Counter(f.admission.held.values()) == {"QueueOverused": 8}


def _hq(name: str, path: str, weights: str) -> dict:
    return ev(
        f"queue-{name}",
        ev_types.QUEUE_UPSERTED,
        {
            "metadata": {
                "name": name,
                "annotations": {
                    "volcano.sh/hierarchy": path,
                    "volcano.sh/hierarchy-weights": weights,
                },
            },
            "spec": {"weight": 1},
        },
    )


def _rpod(name: str, queue_name: str, cpu: str, memory: str) -> dict:
    e = qpod(name, cpu, queue=queue_name)
    e["data"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = memory
    return e


def test_annotations_hierarchy_releases_in_hdrf_order():
    """Under ``queue_hierarchy="annotations"`` the queues are served in hdrf's order
    (drf.go ``compareQueues`` over the rescaled tree), with the shapes of
    hdrf_test.go's "rescaling test": sci (1 CPU + 1Gi pods) against eng, whose dev
    (CPU only) and prod (memory only) are rescaled to one share. Worked by hand: sci
    and eng alternate at the top (eng's share is its children's at the smallest
    dominant share), and inside eng the child with the lower share goes first. The
    fair-share caps are the same as in the default mode (5 pods each)."""
    f = Fold(Admission(queue_hierarchy="annotations"))
    f(
        node("n1", "10", memory="10Gi", pods="50"),
        _hq("root-sci", "root/sci", "100/50"),
        _hq("root-eng-dev", "root/eng/dev", "100/50/50"),
        _hq("root-eng-prod", "root/eng/prod", "100/50/50"),
    )
    f(
        *(_rpod(f"s{i}", "root-sci", "1", "1Gi") for i in range(10)),
        *(_rpod(f"d{i}", "root-eng-dev", "1", "0") for i in range(10)),
        *(_rpod(f"p{i}", "root-eng-prod", "0", "1Gi") for i in range(10)),
    )
    keys = [f"t/{k}{i}" for k in "sdp" for i in range(10)]
    order = [k[2] for k in f.release(*keys)]
    assert order == list("sdspdpsdpsdpsdp")
    assert Counter(order) == {"s": 5, "d": 5, "p": 5}


def test_a_podgroups_fact_is_keyed_from_its_stream_without_decoding_it() -> None:
    """The dispatcher and the audit read a PodGroup's key only (a Volcano Job brings one
    per job): from its stream, as a pod's; decoded only when the stream names none."""
    from datetime import UTC, datetime

    from esched.services.store.base import StoredEvent
    from esched.services.store.rows import row_fact

    now = datetime.now(UTC)
    pg = orjson.dumps(ev("pg", ev_types.PODGROUP_SUBMITTED, {"metadata": {"name": "g"}}))
    keyed = StoredEvent(7, "pg", ev_types.PODGROUP_SUBMITTED, "podgroup/t/g", 0, now, now, b"{")
    assert row_fact(keyed) == (7, ev_types.PODGROUP_SUBMITTED, "t/g", None)
    elsewhere = keyed._replace(stream="other", payload=pg)
    assert row_fact(elsewhere) == (
        7,
        ev_types.PODGROUP_SUBMITTED,
        "default/g",
        orjson.loads(pg)["data"],
    )
