"""Claims (``core/_claims.pyx``): a state that folds the node events and its own work
partitions' pods, and applies claims records for every other pod, must schedule its
own pods exactly as the state that folded the whole log does."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esched.core import ClusterState, Placer
from esched.core._claims import NO_PARTITION, ClaimsError, claims_record
from esched.core.phases import PHASE_PENDING, PHASE_RUNNING
from support.fold import EV, commit, envelope, node, pod, ref

NAMESPACES = 3  # one work partition per namespace: ns0, ns1, ns2
NODES = [f"n{i}" for i in range(6)]
POD_EVENTS = {
    EV.POD_SUBMITTED,
    EV.POD_DELETED,
    EV.POD_SUCCEEDED,
    EV.POD_FAILED,
    EV.POD_UPDATED,
    EV.PLACEMENT_COMMITTED,
    EV.POD_EVICTED,
    EV.POD_REJECTED,
}


def partition_of(key: str) -> int:
    return int(key.split("/", 1)[0][2:])


def _pod_key(e: dict) -> str:
    data = e["data"]
    if e["type"] == EV.PLACEMENT_COMMITTED:
        return data["bindings"][0]["pod"]
    if "pod" in data:
        return data["pod"]
    meta = data["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


def _spec_extras(rnd: random.Random) -> dict[str, Any]:
    """Inter-pod terms, host ports and priorities, some of the time."""
    extra: dict[str, Any] = {}
    k = rnd.random()
    app = {"matchLabels": {"app": rnd.choice("ab")}}
    if k < 0.15:
        term = {"labelSelector": app, "topologyKey": rnd.choice(["zone", "kubernetes.io/hostname"])}
        kind = rnd.choice(["podAntiAffinity", "podAffinity"])
        extra["affinity"] = {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    elif k < 0.25:
        term = {"labelSelector": app, "topologyKey": "zone"}
        extra["affinity"] = {
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": rnd.randint(1, 100), "podAffinityTerm": term}
                ]
            }
        }
    elif k < 0.35:
        extra["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": rnd.choice(["DoNotSchedule", "ScheduleAnyway"]),
                "labelSelector": app,
            }
        ]
    elif k < 0.4:
        extra["containers"] = [
            {
                "name": "c",
                "resources": {"requests": {"cpu": "100m"}},
                "ports": [{"containerPort": 80, "hostPort": rnd.choice([80, 81])}],
            }
        ]
    return extra


def claims_log(seed: int, n: int) -> list[tuple[int, dict]]:
    """A random log over three namespaces: nodes come, change and go; pods with
    labels, inter-pod terms, host ports, priorities, gangs, queues and limits are
    submitted, committed (some bound by nodeName), evicted, rejected, finished and
    deleted."""
    rnd = random.Random(seed)
    events = []
    pods = [f"p{i}" for i in range(12)]
    for _ in range(n):
        k = rnd.random()
        ns = f"ns{rnd.randrange(NAMESPACES)}"
        name = rnd.choice(pods)
        if k < 0.1:
            data = node(
                rnd.choice(NODES),
                cpu=str(rnd.randint(2, 16)),
                labels={"zone": rnd.choice("xyz")},
                **({"nvidia.com/gpu": "2"} if rnd.random() < 0.2 else {}),
            )
            data["metadata"]["labels"]["kubernetes.io/hostname"] = data["metadata"]["name"]
            e = envelope(rnd.choice([EV.NODE_ADDED, EV.NODE_UPDATED]), data)
        elif k < 0.13:
            e = envelope(EV.NODE_REMOVED, {"metadata": {"name": rnd.choice(NODES)}})
        elif k < 0.42:
            p = pod(
                name,
                cpu=f"{rnd.randint(1, 9) * 100}m",
                memory=f"{rnd.randint(1, 4)}Gi",
                namespace=ns,
                gang=rnd.choice([None, None, "g1"]),
                queue=rnd.choice([None, "q1"]),
                node_name=rnd.choice(NODES) if rnd.random() < 0.1 else None,
                priority=rnd.choice([None, 10, 100]),
                **_spec_extras(rnd),
            )
            labels = {"app": rnd.choice("ab"), "tier": rnd.choice(["web", "db"])}
            if rnd.random() < 0.7:
                p["metadata"]["labels"] = labels
            if rnd.random() < 0.1:
                p["metadata"]["annotations"]["volcano.sh/preemptable"] = "false"
            if rnd.random() < 0.1:
                p["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "2", "memory": "8Gi"}
            e = envelope(EV.POD_SUBMITTED, p)
        elif k < 0.7:
            resources = {"cpu": rnd.randint(1, 900), "memory": rnd.randint(1, 2**32)}
            if rnd.random() < 0.5:
                resources["pods"] = 1
            if rnd.random() < 0.1:
                resources["example.com/fpga"] = 1
            e = envelope(
                EV.PLACEMENT_COMMITTED,
                commit((f"{ns}/{name}", rnd.choice(NODES), resources)),
            )
        elif k < 0.8:
            e = envelope(
                rnd.choice([EV.POD_SUCCEEDED, EV.POD_FAILED, EV.POD_DELETED]), ref(name, ns)
            )
        elif k < 0.85:
            e = envelope(EV.POD_EVICTED, {"pod": f"{ns}/{name}", "node": "x", "reason": "test"})
        elif k < 0.88:
            e = envelope(EV.POD_REJECTED, {"pod": f"{ns}/{name}", "reason": "test"})
        elif k < 0.93:
            e = envelope(
                EV.PODGROUP_SUBMITTED,
                {
                    "metadata": {"name": "g1", "namespace": ns},
                    "spec": {"minMember": rnd.randint(1, 3), "queue": "q1"},
                },
            )
        else:
            e = envelope(
                EV.QUEUE_UPSERTED,
                {
                    "metadata": {"name": rnd.choice(["q1", "q2"])},
                    "spec": {"weight": rnd.randint(1, 5)},
                },
            )
        events.append(e)
    return list(enumerate(events, 1))


def fold_both(
    events: list[tuple[int, dict]], own: int, payloads: bool = False
) -> tuple[ClusterState, ClusterState, int]:
    """The whole log's fold (A, with a claims journal) and partition ``own``'s
    (B: the events of every other partition's pods left out, A's claims applied
    instead, a record per run of such events, cut before each event B folds that
    is not a pod's). ``payloads``: A folds the envelopes' bytes (the bytes path)."""
    a = ClusterState()
    a.claims_journal = []
    b = ClusterState()
    bits = bytes([1 << own])
    applied = 0

    def flush() -> None:
        nonlocal applied
        applied += b.apply_claims(claims_record(a, partition_of), bits)

    for pos, e in events:
        pod_event = e["type"] in POD_EVENTS
        if not pod_event:
            flush()
        if payloads:
            a.apply_payloads([(pos, orjson.dumps(e))])
        else:
            a.apply(e, pos)
        if not pod_event or partition_of(_pod_key(e)) == own:
            b.apply(e, pos)
    flush()
    return a, b, applied


def _interpod_owned(s: ClusterState, p: int) -> bool:
    ip = s.interpod
    lid = int(ip.pod_lset_np[p]) if p < ip.pod_lset_np.shape[0] else -1
    return lid >= 0 and bool(ip.lset_owned[lid])


def scheduling_view(s: ClusterState) -> dict:
    """What a scheduling pass reads of the state, by names (slots and class ids are
    each state's own): nodes' accounting, queues' allocation, and every bound pod."""
    res = s.res_names

    def by_name(row) -> dict:
        # (a resource only other partitions' Pending pods or refused commits named is
        # registered in the whole fold alone, with nothing counted under it)
        return {res[r]: int(row[r]) for r in range(s.n_res) if row[r]}

    nodes = {}
    for name, n in s.node_index.items():
        nodes[name] = {
            "allocatable": by_name(s.allocatable_np[n]),
            "allocated": by_name(s.allocated_np[n]),
            "limits": by_name(s.node_lim_np[n]),
            "reserved": by_name(s.node_resv_np[n]),
            "nonzero": s.nz_np[n].tolist(),
            "ports": sorted(map(str, s.node_port_keys(n).items())),
        }
    bound = {}
    for key, p in s.pod_index.items():
        if s.phase_of(p) != PHASE_RUNNING:
            continue
        rec = s.pod(key)
        rec.pop("class")
        rec["class"] = s.class_specs[s.class_of(p)]
        rec["devices"] = int(s.pod_dev_np[p])
        rec["reservation"] = by_name(s.pod_reservation(p))
        rec["not_preemptable"] = key in s.not_preemptable
        ip = s.interpod
        rec["labels"] = ip.lsets[int(ip.pod_lset_np[p])]
        rec["owned"] = _interpod_owned(s, p)
        rec["allocated"] = {k: v for k, v in rec["allocated"].items()}
        bound[key] = rec
    # (a queue only other partitions' Pending pods named is not in the claims' state)
    queues = {
        name: by_name(s.queue_alloc_np[q])
        for name, q in s.queue_index.items()
        if s.queue_alloc_np[q].any()
    }
    return {"nodes": nodes, "bound": bound, "queues": queues}


PROBES = [
    pod("probe-plain", cpu="1", memory="1Gi", namespace="ns0"),
    pod(
        "probe-anti",
        cpu="500m",
        namespace="ns1",
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "zone"}
                ]
            }
        },
    ),
    pod(
        "probe-affinity",
        cpu="500m",
        namespace="ns2",
        affinity={
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 50,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": {"tier": "db"}},
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }
                ]
            }
        },
    ),
    pod(
        "probe-spread",
        cpu="300m",
        namespace="ns0",
        topologySpreadConstraints=[
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "b"}},
            }
        ],
    ),
    pod("probe-big", cpu="12", memory="6Gi", namespace="ns1", priority=1000),
]


def decisions(s: ClusterState, own_pending: list[str]) -> list:
    """Where a placer on ``s`` puts each of its own Pending pods and each probe, with
    their scores. (Preemption is not compared here: among victims bound by one event,
    which share a start, core/_preempt.pyx chooses by pod slot, and slots are each
    state's own; see test_preemption_of_claimed_pods_ranked_apart_is_the_whole_folds and
    test_preemption_of_claimed_pods_of_equal_priority_takes_the_latest_started.)"""
    placer = Placer(s, seed=3)
    out: list = [placer.place(key, assume=False) for key in own_pending]
    for probe in PROBES:
        out.append(placer.place(probe, assume=False))
        out.append(placer.scores(probe, NODES[0]) if NODES[0] in s.node_index else None)
    return out


def _own_pending(a: ClusterState, own: int) -> list[str]:
    return sorted(k for k in a.pending_pods() if partition_of(k) == own)


def _check(events: list[tuple[int, dict]], own: int, payloads: bool = False) -> int:
    a, b, applied = fold_both(events, own, payloads)
    assert scheduling_view(b) == scheduling_view(a)
    pending = _own_pending(a, own)
    assert decisions(b, pending) == decisions(a, pending)
    return applied


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(0, 250), own=st.integers(0, NAMESPACES - 1))
def test_claims_leave_what_scheduling_reads_as_the_whole_fold(seed, n, own):
    _check(claims_log(seed, n), own)


@pytest.mark.parametrize("seed", range(6))
def test_claims_of_the_bytes_path_fold_are_the_dict_paths(seed):
    events = claims_log(seed, 300)
    a, _, _ = fold_both(events, 0)
    a_bytes, _, _ = fold_both(events, 0, payloads=True)
    assert scheduling_view(a_bytes) == scheduling_view(a)
    assert _check(events, seed % NAMESPACES, payloads=True) > 0


@pytest.mark.parametrize("seed", range(6))
def test_long_logs_apply_claims_of_every_kind(seed):
    """Seeded long logs: binds, releases, pods re-bound after an eviction or a node's
    removal, all applied (the equivalence then holds over many records)."""
    events = claims_log(1000 + seed, 600)
    assert _check(events, seed % NAMESPACES) > 30


def test_a_bound_pod_enters_with_its_labels_class_and_allocation():
    a = ClusterState()
    a.claims_journal = []
    a.apply(envelope(EV.NODE_ADDED, node("n0", labels={"zone": "x"})), 1)
    b = ClusterState()
    b.apply(envelope(EV.NODE_ADDED, node("n0", labels={"zone": "x"})), 1)
    claims_record(a)  # (the node: nothing bound)
    p = pod("w", cpu="250m", memory="1Gi", namespace="ns1", priority=7)
    p["metadata"]["labels"] = {"app": "a"}
    a.apply(envelope(EV.POD_SUBMITTED, p), 2)
    a.apply(envelope(EV.PLACEMENT_COMMITTED, commit(("ns1/w", "n0", {"cpu": 250}))), 3)
    record = claims_record(a, partition_of)
    assert a.claims_journal == []
    assert b.apply_claims(record) == 1
    assert b.pod("ns1/w") == {**a.pod("ns1/w"), "class": b.pod("ns1/w")["class"]}
    assert b.node("n0")["allocated"] == a.node("n0")["allocated"]
    assert b.interpod.lsets[int(b.interpod.pod_lset_np[b.pod_index["ns1/w"]])] == (
        "ns1",
        {"app": "a"},
    )
    # its own partition's: skipped
    c = ClusterState()
    c.apply(envelope(EV.NODE_ADDED, node("n0")), 1)
    assert c.apply_claims(record, bytes([0b10])) == 0
    assert c.pod("ns1/w") is None
    # released: gone, its node's allocation with it
    a.apply(envelope(EV.POD_SUCCEEDED, ref("w", "ns1")), 4)
    assert b.apply_claims(claims_record(a)) == 1
    assert b.pod("ns1/w") is None
    assert b.node("n0")["allocated"] == {"cpu": 0, "memory": 0, "pods": 0}
    assert np.all(b.allocated_np == 0)


def _bound_on_n2(a: ClusterState) -> bytes:
    """The record of a pod bound to node n2 in ``a`` (its nodes already added)."""
    a.claims_journal = []
    a.apply(envelope(EV.POD_SUBMITTED, pod("w", cpu="250m", namespace="ns1")), 10)
    a.apply(envelope(EV.PLACEMENT_COMMITTED, commit(("ns1/w", "n2", {"cpu": 250}))), 11)
    return claims_record(a, partition_of)


def test_a_record_names_each_node_with_its_slot_in_the_writers_state():
    a = ClusterState()
    for i, name in enumerate(["n0", "n1", "n2"]):
        a.apply(envelope(EV.NODE_ADDED, node(name)), i + 1)
    record = _bound_on_n2(a)
    # magic, the resource table, then the node table: n2 and its slot, 2
    at = 8
    for _ in range(int.from_bytes(record[4:8], "little")):
        at += 2 + int.from_bytes(record[at : at + 2], "little")
    assert record[at : at + 4] == (1).to_bytes(4, "little")
    assert record[at + 4 : at + 4 + 2 + 2 + 4] == b"\x02\x00n2" + (2).to_bytes(4, "little")


def test_a_claim_of_a_node_at_another_slot_here_binds_it_by_name():
    a = ClusterState()
    b = ClusterState()
    for i, name in enumerate(["n0", "n1", "n2"]):
        a.apply(envelope(EV.NODE_ADDED, node(name)), i + 1)
    for i, name in enumerate(["n2", "n1", "n0"]):  # (n0 at slot 2 here, n2 there in a)
        b.apply(envelope(EV.NODE_ADDED, node(name)), i + 1)
    record = _bound_on_n2(a)
    assert b.apply_claims(record) == 1
    assert b.pod("ns1/w")["node"] == "n2"
    assert b.node("n2")["allocated"]["cpu"] == 250
    assert b.node("n0")["allocated"]["cpu"] == 0


def test_a_record_names_no_partition_without_partition_of():
    a = ClusterState()
    a.claims_journal = []
    a.apply(envelope(EV.NODE_ADDED, node("n0")), 1)
    a.apply(envelope(EV.POD_SUBMITTED, pod("w", node_name="n0")), 2)
    record = claims_record(a)
    b = ClusterState()
    b.apply(envelope(EV.NODE_ADDED, node("n0")), 1)
    # every partition's bit set: NO_PARTITION is none of them
    assert b.apply_claims(record, b"\xff" * (NO_PARTITION // 8)) == 1


def test_the_journal_is_off_by_default_and_a_bad_record_is_refused():
    s = ClusterState()
    assert s.claims_journal is None
    with pytest.raises(ValueError):
        claims_record(s)
    with pytest.raises(ClaimsError):
        s.apply_claims(b"ECL0")
    s.claims_journal = []
    good = claims_record(s)
    with pytest.raises(ClaimsError):
        s.apply_claims(good[:-1])


def test_preemption_of_claimed_pods_ranked_apart_is_the_whole_folds():
    """Victims of distinct priorities: the claims' state preempts whom the whole
    fold's does, on the same node."""
    events = [envelope(EV.NODE_ADDED, node(f"n{i}", cpu="4", memory="8Gi")) for i in range(3)]
    prio = 0
    for i in range(3):
        for j in range(3):
            prio += 1
            ns = f"ns{j}"
            events.append(
                envelope(
                    EV.POD_SUBMITTED,
                    pod(f"v{i}{j}", cpu=f"{1000 + 100 * j}m", namespace=ns, priority=prio),
                )
            )
            events.append(
                envelope(
                    EV.PLACEMENT_COMMITTED,
                    commit((f"{ns}/v{i}{j}", f"n{i}", {"cpu": 1000 + 100 * j, "memory": 2**30})),
                )
            )
    log = list(enumerate(events, 1))
    for own in range(NAMESPACES):
        a, b, applied = fold_both(log, own)
        assert applied == 6
        probe = pod("hi", cpu="3", memory="1Gi", namespace="ns0", priority=1000)
        plan_a = Placer(a, seed=3).plan_preemption(probe, assume=False)
        plan_b = Placer(b, seed=3).plan_preemption(probe, assume=False)
        assert plan_a is not None and plan_a["victims"]
        assert plan_b == plan_a


def test_preemption_of_claimed_pods_of_equal_priority_takes_the_latest_started():
    """Victims of one priority, submitted in one order and bound in the reverse: each
    state numbers its pods' slots its own way (the claims' state in the order the
    claims bring them), but a pod's start is its binding's position, which the claim
    carries, so both evict the one bound last, as kube's DefaultPreemption would."""
    events = [envelope(EV.NODE_ADDED, node("n0", cpu="4", memory="8Gi"))]
    keys = [f"ns{1 + i % 2}/v{i}" for i in range(4)]
    for key in keys:
        ns, name = key.split("/")
        events.append(envelope(EV.POD_SUBMITTED, pod(name, cpu="1", namespace=ns, priority=0)))
    for key in reversed(keys):
        binding = (key, "n0", {"cpu": 1000, "memory": 2**30, "pods": 1})
        events.append(envelope(EV.PLACEMENT_COMMITTED, commit(binding)))
    a, b, applied = fold_both(list(enumerate(events, 1)), 0)
    assert applied == 4
    probe = pod("hi", cpu="1", memory="1Gi", namespace="ns0", priority=1000)
    plan_a = Placer(a, seed=3).plan_preemption(probe, assume=False)
    plan_b = Placer(b, seed=3).plan_preemption(probe, assume=False)
    assert plan_a is not None and plan_a["victims"] == [keys[0]]
    assert plan_b == plan_a


def _queue_event() -> dict:
    """An event no pod's: fold_both cuts a record before it."""
    return envelope(EV.QUEUE_UPSERTED, {"metadata": {"name": "q2"}, "spec": {"weight": 1}})


def test_a_class_released_and_its_id_given_to_another_is_not_found_by_its_old_entry():
    """The state's index of classes by fingerprint keeps a class's id and epoch: once
    the class is released and its id given to another class (here by the state's own
    fold), a claim of the first class's definition makes it anew rather than taking
    the id's new class."""
    events = [
        envelope(EV.NODE_ADDED, node("n0", cpu="8")),
        envelope(EV.POD_SUBMITTED, pod("w", cpu="250m", namespace="ns1")),
        envelope(EV.PLACEMENT_COMMITTED, commit(("ns1/w", "n0", {"cpu": 250}))),
        _queue_event(),  # (B's class of ns1/w: made from the record)
        envelope(EV.POD_DELETED, ref("w", "ns1")),
        _queue_event(),  # (released: its class id free)
        envelope(EV.POD_SUBMITTED, pod("v", cpu="300m", namespace="ns0")),  # (B's own)
        envelope(EV.POD_SUBMITTED, pod("w2", cpu="250m", namespace="ns1")),
        envelope(EV.PLACEMENT_COMMITTED, commit(("ns1/w2", "n0", {"cpu": 250}))),
    ]
    a, b, applied = fold_both(list(enumerate(events, 1)), 0)
    assert applied == 3
    assert b.class_specs[b.class_of(b.pod_index["ns1/w2"])]["requests"]["cpu"] == 250
    assert b.class_specs[b.class_of(b.pod_index["ns0/v"])]["requests"]["cpu"] == 300
    assert scheduling_view(b) == scheduling_view(a)


def test_a_claim_of_a_class_the_state_restored_holds_that_class():
    """A class the state has from its snapshot (a pod of its own partition holds it)
    is the class a claim of its definition gets, not a second one."""
    a = ClusterState()
    a.claims_journal = []
    a.apply(envelope(EV.NODE_ADDED, node("n0", cpu="8")), 1)
    a.apply(envelope(EV.POD_SUBMITTED, pod("v", cpu="250m", namespace="ns0")), 2)
    b = ClusterState.from_bytes(a.to_bytes())
    claims_record(a)
    a.apply(envelope(EV.POD_SUBMITTED, pod("w", cpu="250m", namespace="ns1")), 3)
    a.apply(envelope(EV.PLACEMENT_COMMITTED, commit(("ns1/w", "n0", {"cpu": 250}))), 4)
    known = b.class_of(b.pod_index["ns0/v"])
    classes = len(b.class_index)
    assert b.apply_claims(claims_record(a, partition_of), bytes([1])) == 1
    assert b.class_of(b.pod_index["ns1/w"]) == known
    assert len(b.class_index) == classes


def test_claims_of_many_classes_the_state_has_make_no_class():
    """600 classes the state restored (its index grown past its first size): a claim
    of each definition holds the class the state has."""
    a = ClusterState()
    a.claims_journal = []
    a.apply(envelope(EV.NODE_ADDED, node("n0", cpu="1000", memory="1Ti", pods="5000")), 1)
    n = 600
    for i in range(n):
        a.apply(envelope(EV.POD_SUBMITTED, pod(f"v{i}", cpu=f"{i + 1}m", namespace="ns0")), i + 2)
    b = ClusterState.from_bytes(a.to_bytes())
    claims_record(a)
    pos = n + 2
    for i in range(n):
        a.apply(envelope(EV.POD_SUBMITTED, pod(f"w{i}", cpu=f"{i + 1}m", namespace="ns1")), pos)
        commit_w = commit((f"ns1/w{i}", "n0", {"cpu": i + 1}))
        a.apply(envelope(EV.PLACEMENT_COMMITTED, commit_w), pos + 1)
        pos += 2
    classes = len(b.class_index)
    assert b.apply_claims(claims_record(a, partition_of), bytes([1])) == n
    assert len(b.class_index) == classes
    for i in range(n):
        assert b.class_of(b.pod_index[f"ns1/w{i}"]) == b.class_of(b.pod_index[f"ns0/v{i}"])


@pytest.mark.parametrize(
    "name", ["w", "wé", "long-name-of-a-pod-é", "long-name-of-a-pod-é-0123456789"]
)
def test_a_pods_key_and_node_name_of_any_text_come_through(name):
    """Keys and node names are copied as they are when ASCII, decoded otherwise
    (Kubernetes names are ASCII; a record carries UTF-8)."""
    a = ClusterState()
    a.claims_journal = []
    a.apply(envelope(EV.NODE_ADDED, node(f"n-{name}")), 1)
    b = ClusterState()
    b.apply(envelope(EV.NODE_ADDED, node(f"n-{name}")), 1)
    claims_record(a)
    a.apply(envelope(EV.POD_SUBMITTED, pod(name, cpu="250m", namespace="ns1")), 2)
    a.apply(envelope(EV.PLACEMENT_COMMITTED, commit((f"ns1/{name}", f"n-{name}", {"cpu": 250}))), 3)
    assert b.apply_claims(claims_record(a)) == 1
    assert list(b.pod_index) == [f"ns1/{name}"]
    assert b.pod(f"ns1/{name}")["node"] == f"n-{name}"


def _released_after(released: dict[str, int], key: str, position: int) -> bool:
    """The rule of a follower that enters its Pending pods from their work items: a
    pod the claims released after the work item's position is not entered (the item
    is stale). ``released``: pod -> the first position of the record releasing it."""
    at = released.get(key)
    return at is not None and at > position


def followed_log(events: list[tuple[int, dict]]) -> list[tuple[int, dict]]:
    """The log without what a follower that enters its pods from their submissions
    reads otherwise than the fold: submissions of pods then bound, which kube's API
    server refuses (a bound pod's spec is immutable; a follower takes a pod's latest
    submission, the fold the one it accepted), and ``spec.nodeName`` (a pod bound by
    name whose node is removed is Pending in the fold with the class it had, without
    the name's constraint; a follower entering it then reads the name of a node it
    does not have: pinned). test_a_claim_binds_a_pending_pod_in_place... covers a
    submission naming a node."""
    s = ClusterState()
    out = []
    for pos, e in events:
        if e["type"] == EV.POD_SUBMITTED:
            idx = s.pod_index.get(_pod_key(e))
            if idx is not None and s.phase_of(idx) == PHASE_RUNNING:
                continue
            e["data"]["spec"].pop("nodeName", None)
        s.apply(e, pos)
        out.append((pos, e))
    return out


def fold_and_follow(
    events: list[tuple[int, dict]], own: int, seed: int
) -> tuple[ClusterState, ClusterState, set[str]]:
    """The whole fold (A, with a journal) and a follower (C) that folds only the
    events that are not a pod's, applies A's claims records for every partition
    (``own`` None: its own pods' bindings and releases come as claims too), and enters
    its own partition's Pending pods from their latest submission when their work
    item arrives, a few batches late: work items are made as a dispatcher makes them,
    for a pod of partition ``own`` Pending at the end of a batch in which it was
    submitted, updated or evicted or its node removed, naming the batch's last
    position. Also returns the
    pods C did not enter because their submission names a node C has now (the whole
    fold left them Pending, pinned to a node it did not have then)."""
    rnd = random.Random(seed)
    a = ClusterState()
    a.claims_journal = []
    c = ClusterState()
    released: dict[str, int] = {}
    first = 0  # the first position the next record covers
    submissions: dict[str, list[tuple[int, bytes]]] = {}
    work: list[tuple[int, int, str]] = []  # (due batch, work position, pod)
    refused: set[str] = set()

    def flush(upto: int) -> None:
        nonlocal first
        out: list[str] = []
        c.apply_claims(claims_record(a, partition_of), None, out)
        for key in out:
            released[key] = first
        first = upto + 1

    def deliver(batch: int) -> None:
        due = [w for w in work if w[0] <= batch]
        work[:] = [w for w in work if w[0] > batch]
        for _due, position, key in due:
            if _released_after(released, key, position):
                continue
            rows = [r for r in submissions.get(key, ()) if r[0] <= c.position]
            if rows:
                c.enter_payloads(rows[-1:])
                if c.pod(key) is None:
                    assert orjson.loads(rows[-1][1])["data"]["spec"].get("nodeName")
                    refused.add(key)
                else:
                    refused.discard(key)

    i = 0
    batch = 0
    while i < len(events):
        chunk = events[i : i + rnd.randint(1, 8)]
        i += len(chunk)
        batch += 1
        touched: dict[str, None] = {}
        for pos, e in chunk:
            raw = orjson.dumps(e)
            if e["type"] not in POD_EVENTS:
                flush(pos - 1)
                n = a.node_index.get(e["data"]["metadata"]["name"])
                if e["type"] == EV.NODE_REMOVED and n is not None:
                    # (the dispatcher's work for the pods a node's removal unbinds)
                    touched.update((k, None) for k in a.pods_on_node(n) if partition_of(k) == own)
                a.apply_payloads([(pos, raw)])
                c.apply_payloads([(pos, raw)])
                # (the next record begins with what this event's fold released: the
                # pods of a node removed)
                first = pos
                continue
            a.apply_payloads([(pos, raw)])
            key = _pod_key(e)
            if partition_of(key) != own:
                continue
            if e["type"] == EV.POD_SUBMITTED:
                submissions.setdefault(key, []).append((pos, raw))
            if e["type"] in (EV.POD_SUBMITTED, EV.POD_EVICTED, EV.POD_UPDATED):
                touched[key] = None
        end = chunk[-1][0]
        flush(end)
        c.position = end
        for key in touched:
            idx = a.pod_index.get(key)
            if idx is not None and a.phase_of(idx) == PHASE_PENDING:
                work.append((batch + rnd.randint(0, 2), end, key))
        deliver(batch)
    deliver(batch + 3)
    return a, c, refused


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(0, 250), own=st.integers(0, NAMESPACES - 1))
def test_a_follower_of_every_partitions_claims_that_enters_its_own_pods_is_the_whole_fold(
    seed, n, own
):
    """Own pods entered Pending from their submissions (late, out of log order: the
    state's position stays), then bound in place by their claims or dropped by their
    release (withdrawn before binding); a stale work item (the pod released since)
    enters nothing: the follower's bound pods, nodes and queues are the whole fold's,
    its Pending pods are the whole fold's Pending pods of its partition, and the
    placer chooses alike."""
    a, c, refused = fold_and_follow(followed_log(claims_log(seed, n)), own, seed)
    assert scheduling_view(c) == scheduling_view(a)
    pending = [k for k in _own_pending(a, own) if k not in refused]
    assert sorted(c.pending_pods()) == pending
    assert decisions(c, pending) == decisions(a, pending)


@pytest.mark.parametrize("seed", range(6))
def test_long_logs_of_a_follower_entering_its_own_pods(seed):
    events = followed_log(claims_log(2000 + seed, 600))
    a, c, refused = fold_and_follow(events, seed % NAMESPACES, seed)
    assert scheduling_view(c) == scheduling_view(a)
    own_pending = _own_pending(a, seed % NAMESPACES)
    assert sorted(c.pending_pods()) == [k for k in own_pending if k not in refused]
    assert c.position == a.position


def test_a_claim_binds_a_pending_pod_in_place_and_a_release_drops_a_pending_one():
    a = ClusterState()
    a.claims_journal = []
    c = ClusterState()
    n0 = orjson.dumps(envelope(EV.NODE_ADDED, node("n0")))
    a.apply_payloads([(1, n0)])
    c.apply_payloads([(1, n0)])
    sub_w = orjson.dumps(envelope(EV.POD_SUBMITTED, pod("w", cpu="250m", namespace="ns0")))
    sub_v = orjson.dumps(envelope(EV.POD_SUBMITTED, pod("v", cpu="250m", namespace="ns0")))
    a.apply_payloads([(2, sub_w), (3, sub_v)])
    # entered late, at positions before the state's own: the position stays
    c.position = 3
    assert c.enter_payloads([(2, sub_w), (3, sub_v)]) == 2
    assert c.position == 3
    slot = c.pod_index["ns0/w"]
    assert sorted(c.pending_pods()) == ["ns0/v", "ns0/w"]
    a.apply(envelope(EV.PLACEMENT_COMMITTED, commit(("ns0/w", "n0", {"cpu": 250}))), 4)
    a.apply(envelope(EV.POD_DELETED, ref("v", "ns0")), 5)
    out: list[str] = []
    assert c.apply_claims(claims_record(a), None, out) == 2
    assert out == ["ns0/v"]
    assert c.pod_index["ns0/w"] == slot  # bound in place, not entered again
    assert c.pod("ns0/w")["node"] == "n0"
    assert c.pending_pods() == []
    assert c.node("n0")["allocated"] == a.node("n0")["allocated"]
    # a submission of a pod held bound is refused
    assert c.enter_payloads([(2, sub_w)]) == 1
    assert c.pod("ns0/w")["node"] == "n0"
    assert c.anomalies.get("resubmitted_running_pod") == 1
    # one naming a node the state has is not entered (only a claim binds a pod)
    pinned = orjson.dumps(envelope(EV.POD_SUBMITTED, pod("x", namespace="ns0", node_name="n0")))
    assert c.enter_payloads([(6, pinned)]) == 1
    assert c.pod("ns0/x") is None
    assert c.anomalies.get("entered_bound_by_name") == 1
    assert c.node("n0")["allocated"] == a.node("n0")["allocated"]
    assert c.position == 3
