"""The fold: every event type's effect on ClusterState, and its guarantees."""

import itertools

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from esched.core import ClusterState, PositionError
from esched.schemas.objects import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    nonzero_requests,
    pod_requests,
    pod_resource_requests,
)
from support.fold import EV, commit, envelope, node, pod, ref

GI = 2**30


def res(cpu: int, mem: int, pods: int = 1) -> dict:
    return {"cpu": cpu, "memory": mem, "pods": pods}


def test_empty_state_summary_has_the_stable_shape(state):
    assert state.summary() == {
        "gangs": {},
        "nodes": {
            "allocatable": {"cpu": 0, "memory": 0, "pods": 0},
            "allocated": {"cpu": 0, "memory": 0, "pods": 0},
            "count": 0,
        },
        "pods": {"Pending": 0, "Running": 0, "Succeeded": 0, "Failed": 0},
        "position": 0,
        "priorityClasses": {},
        "queues": {},
        "reservations": {},
        "schedulingGated": {},
    }


def test_node_added_registers_allocatable_in_base_units(log, state):
    log(EV.NODE_ADDED, node("n1", cpu="1500m", memory="2Gi", **{"nvidia.com/gpu": "2"}))
    nodes = state.summary()["nodes"]
    assert nodes["count"] == 1
    assert nodes["allocatable"] == {"cpu": 1500, "memory": 2 * GI, "nvidia.com/gpu": 2, "pods": 110}


def test_node_allocatable_falls_back_to_capacity(log, state):
    n = node("n1")
    n["status"] = {"capacity": {"cpu": "2", "memory": "1Gi", "pods": "10"}}
    log(EV.NODE_ADDED, n)
    assert state.node("n1")["allocatable"] == {"cpu": 2000, "memory": GI, "pods": 10}


def test_commit_binds_and_finishing_releases(log, state):
    log(EV.NODE_ADDED, node("n1"))
    log(EV.POD_SUBMITTED, pod("p1"))
    assert state.summary()["pods"]["Pending"] == 1
    log(EV.PLACEMENT_COMMITTED, commit(("ns/p1", "n1", res(500, GI))))
    s = state.summary()
    assert s["pods"] == {"Pending": 0, "Running": 1, "Succeeded": 0, "Failed": 0}
    assert s["nodes"]["allocated"] == {"cpu": 500, "memory": GI, "pods": 1}
    assert state.pod("ns/p1")["node"] == "n1"
    log(EV.POD_SUCCEEDED, ref("p1"))
    s = state.summary()
    assert s["pods"]["Succeeded"] == 1 and s["pods"]["Running"] == 0
    assert s["nodes"]["allocated"] == {"cpu": 0, "memory": 0, "pods": 0}


def test_commit_without_pods_resource_still_takes_a_pod_slot(log, state):
    log(EV.NODE_ADDED, node("n1"))
    log(EV.POD_SUBMITTED, pod("p1"))
    log(EV.PLACEMENT_COMMITTED, commit(("ns/p1", "n1", {"cpu": 500, "memory": 10})))
    assert state.node("n1")["allocated"] == {"cpu": 500, "memory": 10, "pods": 1}


def test_failed_releases_and_deleted_leaves_the_counts(log, state):
    log(EV.NODE_ADDED, node("n1"))
    log(EV.POD_SUBMITTED, pod("a"))
    log(EV.POD_SUBMITTED, pod("b"))
    log(EV.PLACEMENT_COMMITTED, commit(("ns/a", "n1", res(100, 1)), ("ns/b", "n1", res(200, 2))))
    log(EV.POD_FAILED, ref("a"))
    log(EV.POD_DELETED, ref("b"))
    s = state.summary()
    assert s["pods"] == {"Pending": 0, "Running": 0, "Succeeded": 0, "Failed": 1}
    assert s["nodes"]["allocated"] == {"cpu": 0, "memory": 0, "pods": 0}
    assert state.pod("ns/b") is None
    log(EV.POD_DELETED, ref("a"))
    assert state.summary()["pods"]["Failed"] == 0


def test_pod_with_node_name_is_running_there_at_its_requests(log, state):
    log(EV.NODE_ADDED, node("n1"))
    p = pod("p1", cpu="250m", memory="512Mi", node_name="n1")
    log(EV.POD_SUBMITTED, p)
    assert state.pod("ns/p1")["phase"] == "Running"
    assert state.node("n1")["allocated"] == pod_requests(p)


def test_node_removed_returns_its_pods_to_pending(log, state):
    log(EV.NODE_ADDED, node("n1"))
    log(EV.NODE_ADDED, node("n2"))
    log(EV.POD_SUBMITTED, pod("a", node_name="n1"))
    log(EV.POD_SUBMITTED, pod("b", node_name="n2"))
    log(EV.NODE_REMOVED, {"metadata": {"name": "n1"}})
    s = state.summary()
    assert s["nodes"]["count"] == 1
    assert s["pods"] == {"Pending": 1, "Running": 1, "Succeeded": 0, "Failed": 0}
    assert state.pod("ns/a") == {
        **state.pod("ns/a"),
        "phase": "Pending",
        "node": None,
        "allocated": {},
    }
    assert s["nodes"]["allocated"]["cpu"] == 500
    assert s["queues"]["default"]["allocated"]["cpu"] == 500
    assert state.node("n1") is None


def test_removed_node_slot_is_reused_with_a_fresh_version(log, state):
    log(EV.NODE_ADDED, node("n1", labels={"zone": "a"}))
    v = state.node("n1")["version"]
    log(EV.NODE_REMOVED, {"metadata": {"name": "n1"}})
    log(EV.NODE_ADDED, node("n2"))
    assert state.n_nodes == 1
    n2 = state.node("n2")
    assert n2["labels"] == {} and n2["version"] > v


def test_node_update_keeps_allocated_and_replaces_labels_and_taints(log, state):
    log(
        EV.NODE_ADDED,
        node(
            "n1", labels={"zone": "a"}, taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]
        ),
    )
    log(EV.POD_SUBMITTED, pod("p", node_name="n1"))
    v = state.node("n1")["version"]
    log(EV.NODE_UPDATED, node("n1", cpu="8", labels={"zone": "b"}, unschedulable=True))
    n = state.node("n1")
    assert n["allocated"]["cpu"] == 500 and n["allocatable"]["cpu"] == 8000
    assert n["labels"] == {"zone": "b"} and n["taints"] == [] and n["unschedulable"]
    assert n["version"] > v
    # node.added on an existing name is an update, not a second node
    log(EV.NODE_ADDED, node("n1", cpu="2"))
    assert state.summary()["nodes"]["count"] == 1


def test_label_and_taint_bits_follow_the_node(log, state):
    log(
        EV.NODE_ADDED,
        node(
            "n1",
            labels={"zone": "a", "disk": "ssd"},
            taints=[{"key": "gpu", "value": "", "effect": "NoSchedule"}],
        ),
    )
    bits = int(state.label_words_of(0)[0])
    for text in ("zone=a", "zone", "disk=ssd", "disk"):
        assert bits >> state.label_ids[text] & 1
    assert int(state.taint_words_of(0)[0]) >> state.taint_ids[("gpu", "", "NoSchedule")] & 1


def test_many_distinct_labels_widen_the_bitsets(log, state):
    labels = {f"k{i}": "v" for i in range(100)}
    log(EV.NODE_ADDED, node("n1", labels=labels))
    assert state.label_words >= 4
    row = state.label_words_of(0)
    for text in ("k99=v", "k0"):
        b = state.label_ids[text]
        assert int(row[b >> 6]) >> (b & 63) & 1


def test_evicted_pod_is_released_and_pending(log, state):
    log(EV.NODE_ADDED, node("n1"))
    log(EV.POD_SUBMITTED, pod("p", node_name="n1"))
    log(EV.POD_EVICTED, {"pod": "ns/p", "node": "n1", "reason": "reclaim"})
    assert state.pod("ns/p")["phase"] == "Pending"
    assert state.node("n1")["allocated"] == {"cpu": 0, "memory": 0, "pods": 0}


def test_resubmitting_a_pending_pod_updates_its_requests(log, state):
    # The documented rule (docs/events.md): a Pending pod takes the new submit's spec.
    log(EV.POD_SUBMITTED, pod("p", cpu="1"))
    log(EV.POD_SUBMITTED, pod("p", cpu="2"))
    assert state.summary()["pods"]["Pending"] == 1
    assert state.class_specs[state.pod("ns/p")["class"]]["requests"]["cpu"] == 2000
    assert state.anomalies == {}


def test_resubmitting_a_running_pod_is_ignored_and_counted(log, state):
    log(EV.NODE_ADDED, node("n1"))
    log(EV.POD_SUBMITTED, pod("p", cpu="1", node_name="n1"))
    log(EV.POD_SUBMITTED, pod("p", cpu="2", node_name="n1"))
    assert state.summary()["pods"]["Running"] == 1
    assert state.node("n1")["allocated"]["cpu"] == 1000
    assert state.anomalies == {"resubmitted_running_pod": 1}
    assert state.anomaly_first == {"resubmitted_running_pod": 3}


def test_resubmitting_a_finished_pod_makes_a_new_pod(log, state):
    log(EV.POD_SUBMITTED, pod("p", cpu="1"))
    log(EV.POD_SUCCEEDED, ref("p"))
    log(EV.POD_SUBMITTED, pod("p", cpu="2"))
    assert state.summary()["pods"] == {"Pending": 1, "Running": 0, "Succeeded": 0, "Failed": 0}
    assert state.class_specs[state.pod("ns/p")["class"]]["requests"]["cpu"] == 2000


def test_unknown_events_and_pods_are_counted_not_raised(log, state):
    log("esched.something.else", {})
    log(EV.POD_SUCCEEDED, ref("ghost"))
    log(EV.PLACEMENT_COMMITTED, commit(("ns/ghost", "n9", res(1, 1))))
    log(EV.NODE_ADDED, node("bad", cpu="lots"))
    log(EV.POD_SUBMITTED, "not a pod")
    log(EV.PLACEMENT_PROPOSED, {"proposal": "x"})
    assert state.anomalies == {
        "unknown_type": 1,
        "unknown_pod": 1,
        "commit_unknown_pod": 1,
        "malformed": 2,
    }
    assert state.position == 6 and state.summary()["nodes"]["count"] == 0
    assert state.event_counts[EV.PLACEMENT_PROPOSED] == 1


def test_commit_to_unknown_node_changes_nothing(log, state):
    log(EV.POD_SUBMITTED, pod("p"))
    log(EV.PLACEMENT_COMMITTED, commit(("ns/p", "nowhere", res(1, 1))))
    assert state.pod("ns/p")["phase"] == "Pending"
    assert state.anomalies == {"commit_unknown_node": 1}


def test_position_must_strictly_increase(state):
    state.apply(envelope(EV.NODE_ADDED, node("n1")), 5)
    with pytest.raises(
        PositionError,
        match="position 5 cannot be folded into a state at position 5",
    ):
        state.apply(envelope(EV.NODE_ADDED, node("n2")), 5)
    with pytest.raises(PositionError):
        state.apply_many(
            [(6, envelope(EV.NODE_ADDED, node("n2"))), (4, envelope(EV.NODE_ADDED, node("n3")))]
        )
    assert state.position == 6
    assert state.summary()["nodes"]["count"] == 2


def test_apply_many_folds_in_order_and_counts(state):
    events = [(i + 1, envelope(EV.NODE_ADDED, node(f"n{i}"))) for i in range(50)]
    assert state.apply_many(events) == 50
    assert state.position == 50 and state.summary()["nodes"]["count"] == 50


def test_gangs_are_created_lazily_and_updated_by_podgroup(log, state):
    log(EV.POD_SUBMITTED, pod("w0", gang="job", queue="research"))
    s = state.summary()
    assert s["gangs"]["ns/job"] == {
        "Failed": 0,
        "Pending": 1,
        "Running": 0,
        "Succeeded": 0,
        "minMember": 1,
        "queue": "research",
    }
    log(
        EV.PODGROUP_SUBMITTED,
        {
            "metadata": {"name": "job", "namespace": "ns"},
            "spec": {"minMember": 4, "queue": "research", "minResources": {"cpu": "4"}},
        },
    )
    log(EV.POD_SUBMITTED, pod("w1", gang="job", queue="research"))
    gang = state.summary()["gangs"]["ns/job"]
    assert gang["minMember"] == 4 and gang["Pending"] == 2


def test_queues_track_pods_allocation_and_spec(log, state):
    log(EV.NODE_ADDED, node("n1"))
    log(
        EV.QUEUE_UPSERTED,
        {
            "metadata": {"name": "q1"},
            "spec": {
                "weight": 3,
                "priority": 7,
                "reclaimable": False,
                "parent": "root",
                "capability": {"cpu": "10"},
                "deserved": {"cpu": "5"},
                "guarantee": {"resource": {"memory": "1Gi"}},
            },
        },
    )
    log(EV.POD_SUBMITTED, pod("a", queue="q1", node_name="n1"))
    log(EV.POD_SUBMITTED, pod("b", queue="q1"))
    log(EV.POD_SUBMITTED, pod("c"))
    q = state.summary()["queues"]
    assert q["q1"] == {
        "Pending": 1,
        "Running": 1,
        "allocated": {"cpu": 500, "memory": GI, "pods": 1},
        "capability": {"cpu": 10000},
        "deserved": {"cpu": 5000},
        "guarantee": {"memory": GI},
        # Computed: water-filled, capped by demand (a running + b waiting).
        "fairShare": {"cpu": 1000, "memory": 2 * GI, "pods": 2},
        "share": 0.5,
        "path": "root.q1",
        "parent": "root",
        "priority": 7,
        "reclaimable": False,
        "state": "Open",
        "weight": 3,
    }
    assert q["default"]["Pending"] == 1 and q["default"]["weight"] == 1
    assert list(q) == sorted(q)


def test_usage_is_stored_without_touching_allocation(log, state):
    log(EV.NODE_ADDED, node("n1"))
    log(
        EV.USAGE_REPORTED,
        {
            "nodes": [{"name": "n1", "usage": {"cpu": "1200m"}}],
            "pods": [{"pod": "ns/p", "usage": {"memory": "1Mi"}}],
        },
    )
    assert state.node_usage("n1") == {"cpu": 1200}
    assert state.pod_usage == {"ns/p": {"memory": 2**20}}
    assert state.node("n1")["allocated"]["cpu"] == 0


def test_fast_request_path_agrees_with_pod_requests(log, state):
    pods = [
        pod("a", cpu="100m", memory="64Mi"),
        {
            "metadata": {"name": "b", "namespace": "ns"},
            "spec": {
                "containers": [
                    {
                        "resources": {
                            "limits": {"cpu": "2", "memory": "1Gi"},
                            "requests": {"cpu": "1"},
                        }
                    },
                    {"resources": {"requests": {"nvidia.com/gpu": 1}}},
                    {"name": "no-resources"},
                ]
            },
        },
        {
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {
                "containers": [{"resources": {"requests": {"cpu": "1"}}}],
                "initContainers": [{"resources": {"requests": {"cpu": "3"}}}],
                "overhead": {"memory": "10Mi"},
            },
        },
        {"metadata": {"name": "d", "namespace": "ns"}, "spec": {}},
        {
            "metadata": {"name": "e", "namespace": "ns"},
            "spec": {
                "containers": [
                    {"resources": {"limits": {"memory": "1Gi"}}},
                    {"resources": {"requests": {"cpu": "0"}}},
                    {"resources": {}},
                ]
            },
        },
    ]
    for p in pods:
        log(EV.POD_SUBMITTED, p)
        cls = state.class_specs[state.pod(f"ns/{p['metadata']['name']}")["class"]]
        assert cls["requests"] == pod_requests(p)
        assert tuple(cls["nonzero"]) == nonzero_requests(p)


_QUANTITIES = hst.sampled_from(["0", "1", "2", "250m", "64Mi", "1.5Gi", 3])
_RESOURCE_LIST = hst.dictionaries(
    hst.sampled_from(["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage"]), _QUANTITIES
)
_CONTAINER = hst.one_of(
    hst.just({"name": "bare"}),
    hst.just({"resources": {}}),
    hst.builds(
        lambda r, lim: {"resources": {"requests": r, "limits": lim}}, _RESOURCE_LIST, _RESOURCE_LIST
    ),
    hst.builds(lambda r: {"resources": {"requests": r}}, _RESOURCE_LIST),
    hst.builds(lambda lim: {"resources": {"limits": lim}}, _RESOURCE_LIST),
)
_INIT_CONTAINER = hst.one_of(
    _CONTAINER,
    # a sidecar: runs beside the containers (kube's restartable init container)
    hst.builds(lambda c: {**c, "restartPolicy": "Always"}, _CONTAINER),
)
_POD_LEVEL = hst.dictionaries(
    hst.sampled_from(["requests", "limits"]),
    hst.dictionaries(
        hst.sampled_from(["cpu", "memory", "hugepages-2Mi", "nvidia.com/gpu"]),
        hst.sampled_from(["1", "250m", "64Mi", "2Mi"]),
    ),
)
_SPEC = hst.fixed_dictionaries(
    {"containers": hst.lists(_CONTAINER, max_size=4)},
    optional={
        "initContainers": hst.lists(_INIT_CONTAINER, max_size=3),
        "overhead": _RESOURCE_LIST,
        "resources": _POD_LEVEL,
    },
)
_names = itertools.count()


@settings(max_examples=300, deadline=None)
@given(spec=_SPEC)
def test_fold_classes_follow_the_one_request_rule(spec: dict) -> None:
    """The fold's classes (dict path and bytes path) and pod_resource_requests sum a
    pod's requests by one rule (schemas/_requests.pyx): the same requests, in the same
    order, and the same non-zero pair, for containers, sidecars, init containers,
    overhead and pod-level resources."""
    p = {"metadata": {"name": f"p{next(_names)}", "namespace": "ns"}, "spec": spec}
    rule = pod_resource_requests(p)
    by_dict = ClusterState()
    by_dict.apply(envelope(EV.POD_SUBMITTED, p), 1)
    by_bytes = ClusterState()
    by_bytes.apply_payloads([(1, orjson.dumps(envelope(EV.POD_SUBMITTED, p)))])
    for state in (by_dict, by_bytes):
        assert not state.anomalies
        cls = state.class_specs[state.pod(f"ns/{p['metadata']['name']}")["class"]]
        assert list(cls["requests"].items()) == list(rule.fit.items())
        assert tuple(cls["nonzero"]) == rule.nonzero


def test_nonzero_requests_default_only_missing_cpu_and_memory() -> None:
    p = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "0"}}},
                {"resources": {"limits": {"memory": "1Gi"}}},
                {"name": "bare"},
            ]
        }
    }
    assert nonzero_requests(p) == (
        0 + DEFAULT_MILLI_CPU_REQUEST * 2,
        DEFAULT_MEMORY_REQUEST + GI + DEFAULT_MEMORY_REQUEST,
    )
    assert pod_requests(p) == {"cpu": 0, "memory": GI, "pods": 1}


def test_identical_pods_share_an_equivalence_class(log, state):
    log(EV.POD_SUBMITTED, pod("a"))
    log(EV.POD_SUBMITTED, pod("b"))
    log(EV.POD_SUBMITTED, pod("c", nodeSelector={"zone": "a"}))
    log(EV.POD_SUBMITTED, pod("d", priority=100))
    classes = {state.pod(f"ns/{k}")["class"] for k in "abcd"}
    assert state.pod("ns/a")["class"] == state.pod("ns/b")["class"]
    assert len(classes) == 3
    assert state.class_specs[state.pod("ns/c")["class"]]["constraints"]["nodeSelector"] == {
        "zone": "a"
    }


def test_many_resources_and_rows_grow_the_tables(log, state):
    for i in range(100):
        log(EV.NODE_ADDED, node(f"n{i}", **{f"example.com/r{i % 12}": "5"}))
    for i in range(2000):
        log(EV.POD_SUBMITTED, pod(f"p{i}", node_name=f"n{i % 100}"))
    s = state.summary()
    assert s["nodes"]["allocated"]["pods"] == 2000
    assert s["nodes"]["allocatable"]["example.com/r11"] == 5 * 8
    assert s["pods"]["Running"] == 2000


def test_cluster_totals_are_exact_beyond_int64(log, state):
    # Issue 19: three nodes of 4Ei memory add up past 2**63; the totals are exact.
    for i in range(3):
        log(EV.NODE_ADDED, node(f"n{i}", memory="4Ei"))
    assert state.summary()["nodes"]["allocatable"]["memory"] == 3 * 2**62


def test_a_pod_bound_by_node_name_past_the_tables_range_is_an_anomaly(log, state):
    # Each pod is within range, but a node charged with both would pass 2**62.
    log(EV.NODE_ADDED, node("n1", memory="4Ei"))
    log(EV.POD_SUBMITTED, pod("a", memory="3Ei", node_name="n1"))
    log(EV.POD_SUBMITTED, pod("b", memory="3Ei", node_name="n1"))
    assert state.node("n1")["allocated"]["memory"] == 3 * 2**60
    assert state.pod("ns/b")["phase"] == "Pending"
    assert state.anomalies == {"overflow": 1} and state.anomaly_first == {"overflow": 3}


def test_a_commit_with_resources_beyond_int64_is_an_anomaly(log, state):
    log(EV.NODE_ADDED, node("n1"))
    log(EV.POD_SUBMITTED, pod("a"))
    log(EV.PLACEMENT_COMMITTED, commit(("ns/a", "n1", {"cpu": 2**63, "memory": 1})))
    assert state.pod("ns/a")["phase"] == "Pending"
    assert state.anomalies == {"commit_bad_resources": 1}


_VOLCANO_KEYS = hst.dictionaries(
    hst.sampled_from(
        [
            "volcano.sh/queue-name",
            "scheduling.volcano.sh/queue-name",
            "scheduling.k8s.io/group-name",
            "scheduling.volcano.sh/group-name",
            "volcano.sh/preemptable",
            "app",
        ]
    ),
    hst.sampled_from(["", "q1", "g1", "false", "true", "False", "0", "nope"]),
)


@settings(max_examples=150, deadline=None)
@given(annotations=_VOLCANO_KEYS, labels=_VOLCANO_KEYS, bytes_path=hst.booleans())
def test_a_pods_queue_gang_and_preemptable_are_the_helpers_reading(annotations, labels, bytes_path):
    """The fold reads a pod's queue, gang and ``volcano.sh/preemptable`` in one pass
    over its annotations and labels; what it keeps is what the reference helpers of
    ``schemas.objects`` (``pod_queue``, ``gang_key``, ``pod_preemptable``) say."""
    from esched.schemas.objects import gang_key, pod_preemptable, pod_queue

    p = pod("p")
    p["metadata"]["annotations"] = annotations
    p["metadata"]["labels"] = labels
    s = ClusterState()
    if bytes_path:
        s.apply_payloads([(1, orjson.dumps(envelope(EV.POD_SUBMITTED, p)))])
    else:
        s.apply(envelope(EV.POD_SUBMITTED, p), 1)
    idx = s.pod_index["ns/p"]
    assert s.queue_names[s.queue_of(idx)] == pod_queue(p)
    g = s.gang_of(idx)
    assert (s.gang_keys[g] if g >= 0 else None) == gang_key(p)
    assert ("ns/p" in (s.not_preemptable or {})) == (not pod_preemptable(p))


def test_an_event_without_a_string_type_is_counted_and_the_state_still_snapshots(state):
    # A stored record without ``type`` (or a number there) is an unknown type like any
    # other: counted by its JSON text, so the state's snapshot (string keys) still writes.
    state.apply({"id": "e1", "source": "tests", "data": {}}, 1)
    state.apply({"id": "e2", "type": 7, "source": "tests", "data": {}}, 2)
    assert state.anomalies == {"unknown_type": 2}
    assert state.event_counts == {"null": 1, "7": 1}
    again = ClusterState.from_bytes(state.to_bytes())
    assert again.event_counts == state.event_counts
