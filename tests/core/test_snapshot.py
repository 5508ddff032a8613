"""Snapshots: to_bytes/from_bytes preserve everything the fold and summary need."""

import pickle
import random

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esched.core import ClusterState
from support.fold import EV, commit, envelope, node, pod, ref


def random_log(seed: int, n: int) -> list[tuple[int, dict]]:
    """A random but plausible event stream over a small name space."""
    rnd = random.Random(seed)
    events = []
    nodes = [f"n{i}" for i in range(6)]
    pods = [f"p{i}" for i in range(25)]
    for pos in range(1, n + 1):
        k = rnd.random()
        if k < 0.12:
            data = node(
                rnd.choice(nodes),
                cpu=str(rnd.randint(1, 16)),
                labels={"zone": rnd.choice("abc"), f"l{rnd.randint(0, 80)}": "x"},
                taints=[{"key": "t", "value": rnd.choice("uv"), "effect": "NoSchedule"}]
                if rnd.random() < 0.3
                else [],
                **({"nvidia.com/gpu": "2"} if rnd.random() < 0.2 else {}),
            )
            e = envelope(rnd.choice([EV.NODE_ADDED, EV.NODE_UPDATED]), data)
        elif k < 0.17:
            e = envelope(EV.NODE_REMOVED, {"metadata": {"name": rnd.choice(nodes)}})
        elif k < 0.45:
            e = envelope(
                EV.POD_SUBMITTED,
                pod(
                    rnd.choice(pods),
                    cpu=f"{rnd.randint(1, 9) * 100}m",
                    memory=f"{rnd.randint(1, 4)}Gi",
                    gang=rnd.choice([None, "g1", "g2"]),
                    queue=rnd.choice([None, "q1"]),
                    node_name=rnd.choice(nodes) if rnd.random() < 0.2 else None,
                    priority=rnd.choice([None, 100]),
                ),
            )
        elif k < 0.70:
            p = rnd.choice(pods)
            e = envelope(
                EV.PLACEMENT_COMMITTED,
                commit(
                    (
                        f"ns/{p}",
                        rnd.choice(nodes),
                        {
                            "cpu": rnd.randint(1, 900),
                            "memory": rnd.randint(1, 2**32),
                            **({"example.com/fpga": 1} if rnd.random() < 0.1 else {}),
                        },
                    )
                ),
            )
        elif k < 0.80:
            e = envelope(
                rnd.choice([EV.POD_SUCCEEDED, EV.POD_FAILED, EV.POD_DELETED]), ref(rnd.choice(pods))
            )
        elif k < 0.85:
            e = envelope(
                EV.POD_EVICTED, {"pod": f"ns/{rnd.choice(pods)}", "node": "x", "reason": "test"}
            )
        elif k < 0.90:
            e = envelope(
                EV.PODGROUP_SUBMITTED,
                {
                    "metadata": {"name": rnd.choice(["g1", "g2"]), "namespace": "ns"},
                    "spec": {"minMember": rnd.randint(1, 5), "queue": "q1"},
                },
            )
        elif k < 0.94:
            e = envelope(
                EV.QUEUE_UPSERTED,
                {
                    "metadata": {"name": rnd.choice(["q1", "q2"])},
                    "spec": {"weight": rnd.randint(1, 5)},
                },
            )
        else:
            e = envelope(
                EV.USAGE_REPORTED,
                {
                    "nodes": [{"name": rnd.choice(nodes), "usage": {"cpu": "1"}}],
                    "pods": [{"pod": f"ns/{rnd.choice(pods)}", "usage": {"memory": "1Mi"}}],
                },
                # a reporter's clock, a few minutes either way: reports go stale
                time=f"2026-01-01T00:{rnd.randint(0, 20):02d}:00Z",
            )
        events.append((pos, e))
    return events


def observe(s: ClusterState) -> dict:
    """Everything observable: summary, every node and pod record, counters."""
    return {
        "summary": s.summary(),
        "nodes": {n: s.node(n) for n in s.node_index},
        "pods": {p: s.pod(p) for p in s.pod_index},
        "anomalies": dict(s.anomalies),
        "events": dict(s.event_counts),
        "usage": (
            {n: s.node_usage(n) for n in s.node_index},
            s.clock,
            s.pod_usage,
        ),
        "pending": sorted(s.pending_pods()),
    }


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(0, 300), split=st.floats(0, 1))
def test_fold_a_snapshot_fold_b_equals_fold_a_plus_b(seed, n, split):
    events = random_log(seed, n)
    cut = int(len(events) * split)
    whole = ClusterState()
    whole.apply_many(events)
    part = ClusterState()
    part.apply_many(events[:cut])
    restored = ClusterState.from_bytes(part.to_bytes())
    assert observe(restored) == observe(part)
    restored.apply_many(events[cut:])
    assert observe(restored) == observe(whole)


def test_empty_state_round_trips():
    s = ClusterState.from_bytes(ClusterState().to_bytes())
    assert s.summary() == ClusterState().summary()
    assert s.n_pods == 0


def test_pickle_and_copy_use_the_snapshot():
    s = ClusterState()
    s.apply_many(random_log(7, 200))
    assert observe(pickle.loads(pickle.dumps(s))) == observe(s)
    c = s.copy()
    c.apply(envelope(EV.NODE_ADDED, node("extra")), s.position + 1)
    assert "extra" not in s.node_index and "extra" in c.node_index


def test_a_restored_state_takes_new_pods_without_growing_its_arrays():
    # Restored at its pod count exactly, the first pod entered or folded after a load
    # reallocated every pod array (tens of ms at 100,000 pods, in the hot path).
    s = _big_state(10, 3000)
    r = ClusterState.from_bytes(s.to_bytes())
    arrays = (r.pod_phase_np, r.pod_node_np, r.pod_alloc_np, r.pod_rtime_np)
    n = r.n_pods
    r.enter_payloads([(s.position + 1, orjson.dumps(envelope(EV.POD_SUBMITTED, pod("new"))))])
    r.apply_many(
        (s.position + 1 + j, envelope(EV.POD_SUBMITTED, pod(f"more{j}"))) for j in range(n // 3)
    )
    assert r.n_pods == n + n // 3 + 1
    assert all(
        a is b
        for a, b in zip(
            arrays, (r.pod_phase_np, r.pod_node_np, r.pod_alloc_np, r.pod_rtime_np), strict=True
        )
    )


def test_a_restored_state_takes_a_new_node_and_class_without_growing_their_tables():
    # The same room as the pods' for every table a snapshot restores (here nodes and
    # classes, past their default sizes).
    s = _big_state(100, 3000)
    r = ClusterState.from_bytes(s.to_bytes())
    assert r.n_nodes == 100 and r.n_classes == 40
    tables = (r.allocatable_np, r.label_bits_np, r.class_req_np, r.class_nz_np)
    r.apply_many(
        [
            (s.position + 1, envelope(EV.NODE_ADDED, node("node-new"))),
            (s.position + 2, envelope(EV.POD_SUBMITTED, pod("odd", cpu="4321m"))),
        ]
    )
    assert r.n_nodes == 101 and r.n_classes == 41
    now = (r.allocatable_np, r.label_bits_np, r.class_req_np, r.class_nz_np)
    assert all(a is b for a, b in zip(tables, now, strict=True))


def test_bad_magic_is_rejected():
    with pytest.raises(ValueError, match="bad magic"):
        ClusterState.from_bytes(b"NOTASNAP" + bytes(16))


def _big_state(n_nodes: int, n_pods: int) -> ClusterState:
    s = ClusterState()
    events = []
    for i in range(n_nodes):
        events.append(envelope(EV.NODE_ADDED, node(f"node-{i}", labels={"zone": f"z{i % 3}"})))
    for j in range(n_pods):
        events.append(envelope(EV.POD_SUBMITTED, pod(f"p{j}", cpu=f"{100 * (j % 40 + 1)}m")))
        events.append(
            envelope(
                EV.PLACEMENT_COMMITTED,
                commit((f"ns/p{j}", f"node-{j % n_nodes}", {"cpu": 100, "memory": 1, "pods": 1})),
            )
        )
        if j % 3:
            events.append(envelope(EV.POD_SUCCEEDED, ref(f"p{j}")))
    s.apply_many(enumerate(events, 1))
    return s


def test_restoring_a_10k_node_state_is_fast():
    import time

    s = _big_state(10_000, 30_000)
    blob = s.to_bytes()
    t = time.perf_counter()
    r = ClusterState.from_bytes(blob)
    assert time.perf_counter() - t < 1.0
    assert r.summary() == s.summary()


@pytest.mark.scale
def test_restoring_10k_nodes_and_1m_events_takes_under_a_second():
    import time

    s = _big_state(10_000, 400_000)
    blob = s.to_bytes()
    t = time.perf_counter()
    r = ClusterState.from_bytes(blob)
    assert time.perf_counter() - t < 1.0
    assert r.summary() == s.summary()
