"""ClusterState's read API: named accessors agree with the records and the summary."""

import numpy as np
import pytest

from esched.core import (
    PHASE_FREE,
    PHASE_PENDING,
    PHASE_RUNNING,
    PHASE_SUCCEEDED,
    PHASES,
    phase_code,
)
from support.fold import EV, commit, node, pod, ref

GI = 2**30


@pytest.fixture
def cluster(log, state):
    """Two nodes; ns/a bound to n1, ns/b pending in gang ns/job (minMember 2) with ns/c
    bound to n2, ns/d submitted then succeeded."""
    log(EV.NODE_ADDED, node("n1", cpu="4", memory="8Gi"))
    log(EV.NODE_ADDED, node("n2", cpu="2", memory="4Gi"))
    log(
        EV.PODGROUP_SUBMITTED,
        {"metadata": {"name": "job", "namespace": "ns"}, "spec": {"minMember": 2}},
    )
    log(EV.POD_SUBMITTED, pod("a", cpu="1", memory="1Gi", priority=7))
    log(EV.POD_SUBMITTED, pod("b", cpu="500m", gang="job", queue="research"))
    log(EV.POD_SUBMITTED, pod("c", cpu="500m", gang="job", queue="research"))
    log(EV.POD_SUBMITTED, pod("d"))
    log(EV.PLACEMENT_COMMITTED, commit(("ns/a", "n1", {"cpu": 1000, "memory": GI, "pods": 1})))
    log(EV.PLACEMENT_COMMITTED, commit(("ns/c", "n2", {"cpu": 500, "memory": GI, "pods": 1})))
    log(EV.POD_SUCCEEDED, ref("d"))
    return state


def test_phase_constants_follow_the_phase_names():
    assert [phase_code(name) for name in PHASES] == [0, 1, 2, 3]
    assert (PHASE_PENDING, PHASE_RUNNING, PHASE_SUCCEEDED) == (0, 1, 2)
    assert PHASE_FREE < 0
    with pytest.raises(ValueError, match="unknown pod phase"):
        phase_code("Bound")


def test_per_pod_accessors_agree_with_the_pod_record(cluster):
    st = cluster
    for key in ("ns/a", "ns/b", "ns/c", "ns/d"):
        p = st.pod_index[key]
        record = st.pod(key)
        assert PHASES[st.phase_of(p)] == record["phase"]
        n = st.node_of(p)
        assert (st.node_names[n] if n >= 0 else None) == record["node"]
        assert st.queue_names[st.queue_of(p)] == record["queue"]
        g = st.gang_of(p)
        assert (st.gang_keys[g] if g >= 0 else None) == record["gang"]
        assert st.class_of(p) == record["class"] == st.pod_class_id(key)
        assert st.priority_of(p) == record["priority"]
        alloc = st.allocation_of(p)
        assert {st.res_names[r]: int(v) for r, v in enumerate(alloc) if v} == record["allocated"]


def test_pod_tables_are_the_per_pod_values_in_slot_order(cluster):
    st = cluster
    slots = range(st.n_pods)
    assert list(st.pod_phases()) == [st.phase_of(p) for p in slots]
    assert list(st.pod_nodes()) == [st.node_of(p) for p in slots]
    assert list(st.pod_queues()) == [st.queue_of(p) for p in slots]
    assert list(st.pod_gangs()) == [st.gang_of(p) for p in slots]
    assert list(st.pod_classes()) == [st.class_of(p) for p in slots]
    assert list(st.pod_priorities()) == [st.priority_of(p) for p in slots]
    assert st.pod_allocations().shape == (st.n_pods, st.n_res)
    assert (st.pod_allocations()[st.pod_index["ns/a"]] == st.allocation_of(0)).all()


def test_phase_counts_and_members(cluster):
    st = cluster
    counts = st.summary()["pods"]
    for code, name in enumerate(PHASES):
        assert st.phase_count(code) == counts[name]
        assert [st.pod_keys[p] for p in st.pods_in_phase(code)] == [
            k for k in st.pod_keys if k is not None and st.pod(k)["phase"] == name
        ]
    with pytest.raises(ValueError):
        st.phase_count(PHASE_FREE)
    assert st.pods_on_node(st.node_index["n1"]) == ["ns/a"]
    assert st.pods_on_node(st.node_index["n2"]) == ["ns/c"]


def test_gang_accessors_agree_with_the_summary(cluster):
    st = cluster
    g = st.gang_index["ns/job"]
    gang = st.summary()["gangs"]["ns/job"]
    assert st.gang_min_of(g) == gang["minMember"] == 2
    assert st.gang_count(g, PHASE_PENDING) == gang["Pending"] == 1
    assert st.gang_count(g, PHASE_RUNNING) == gang["Running"] == 1
    assert st.gang_shortfall(g) == 1


def test_node_class_and_queue_tables_agree_with_the_records(cluster):
    st = cluster
    for name in ("n1", "n2"):
        n = st.node_index[name]
        record = st.node(name)
        assert st.is_alive(n)
        allocatable = st.node_allocatable()[n]
        allocated = st.node_allocated()[n]
        for r, res in enumerate(st.res_names[: st.n_res]):
            assert int(allocatable[r]) == record["allocatable"][res]
            assert int(allocated[r]) == record["allocated"][res]
    assert st.node_alive().tolist() == [True, True]
    req = st.class_requests()[st.pod_class_id("ns/a")]
    assert int(req[st.res_index["cpu"]]) == 1000
    queues = st.summary()["queues"]
    alloc = st.queue_allocations()
    for q, qname in enumerate(st.queue_names):
        held = {st.res_names[r]: int(v) for r, v in enumerate(alloc[q]) if v}
        assert held == queues[qname]["allocated"]


def test_removed_node_is_not_alive(cluster, log):
    log(EV.NODE_REMOVED, {"metadata": {"name": "n2"}})
    n = next(i for i, name in enumerate(cluster.node_names) if name is None)
    assert not cluster.is_alive(n)
    assert cluster.node_alive().tolist().count(False) == 1


def test_tables_are_read_only_views(cluster):
    st = cluster
    for table in (
        st.pod_phases(),
        st.pod_nodes(),
        st.pod_allocations(),
        st.node_allocatable(),
        st.node_allocated(),
        st.class_requests(),
        st.queue_allocations(),
        st.allocation_of(0),
        *st.tables().values(),
    ):
        with pytest.raises(ValueError, match="read-only"):
            table[...] = 0
    assert isinstance(st.pods_in_phase(PHASE_PENDING), np.ndarray)


def test_slots_outside_the_table_raise_index_error(cluster):
    st = cluster
    for read in (st.phase_of, st.node_of, st.queue_of, st.allocation_of):
        with pytest.raises(IndexError):
            read(st.n_pods)
        with pytest.raises(IndexError):
            read(-1)
    with pytest.raises(IndexError):
        st.gang_min_of(st.n_gangs)
    with pytest.raises(IndexError):
        st.is_alive(st.n_nodes)
