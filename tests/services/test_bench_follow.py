"""``python -m esched.services.bench_follow``: what following costs a replica per pod."""

from __future__ import annotations

import gc
import itertools

import orjson

from esched.core import PHASE_PENDING, PHASE_RUNNING, ClusterState
from esched.services.bench_follow import (
    MAX_REPLICAS,
    apply_claims_flow,
    claims_records,
    flow_log,
    fold_flow,
    follow_flow,
    idle_replica,
    run_enter_bench,
    run_place_bench,
    run_renew_bench,
    shape_payloads,
    submissions,
)
from esched.services.store._search import mentioning
from esched.services.store.snapshots import FROZEN_GEN0, freeze_heap, thaw_heap


def test_a_replica_following_the_flow_folds_what_the_bare_fold_folds() -> None:
    # The replica's whole per-batch path (LogFollower.fold_batch: fold, search for its
    # own decisions, their decoding, the idle check) ends in the same state as the
    # fold alone, and replica 0's decisions hold that replica's proposal ids.
    replica = idle_replica()
    snapshot, flow = flow_log(
        nodes=50, pods=60, replicas=3, prefixes=[replica.proposal_prefix, "r1-x-", "r2-x-"]
    )
    own = mentioning(flow, replica.proposal_prefix.encode())
    assert len(own) == 20  # every third pod's decision
    folded = fold_flow(ClusterState.from_bytes(snapshot), flow)
    followed = ClusterState.from_bytes(snapshot)
    follow_flow(replica, followed, flow)
    assert followed.position == folded.position == flow[-1][0]
    assert followed.summary() == folded.summary()
    assert not followed.anomalies
    start = ClusterState.from_bytes(snapshot).phase_count(PHASE_RUNNING)
    assert followed.phase_count(PHASE_RUNNING) == folded.phase_count(PHASE_RUNNING) == start + 60


def test_the_flows_claims_bind_what_its_fold_binds() -> None:
    # The claims mode measures what it should: its records, applied to the preload,
    # leave every pod of the flow bound where the fold binds it.
    snapshot, flow = flow_log(nodes=50, pods=60, replicas=3)
    folded = fold_flow(ClusterState.from_bytes(snapshot), flow)
    records = claims_records(snapshot, flow, 10)
    assert len(records) == 12
    claimed = apply_claims_flow(ClusterState.from_bytes(snapshot), records)
    assert claimed.node_allocated().tolist() == folded.node_allocated().tolist()
    assert {k: claimed.pod(k)["node"] for k in claimed.pod_index} == {
        k: folded.pod(k)["node"] for k in folded.pod_index
    }
    assert not claimed.anomalies


def test_the_seen_job_flow_finds_every_class_in_its_preload() -> None:
    # jobs-seen compares a Job's pod with a plain one whose class exists: the plain
    # flow repeats its preload's shapes (same seed), the jobs flow makes a class per
    # new shape unless its preload has folded a Job of that shape.
    for seen, new_classes in ((False, True), (True, False)):
        snapshot, flow = flow_log(nodes=50, pods=40, replicas=3, jobs=True, seen=seen)
        state = ClusterState.from_bytes(snapshot)
        before, running = state.n_classes, state.phase_count(PHASE_RUNNING)
        fold_flow(state, flow)
        assert (state.n_classes > before) is new_classes
        assert not state.anomalies
        assert state.phase_count(PHASE_RUNNING) == running + 40
    snapshot, flow = flow_log(nodes=50, pods=40, replicas=3)
    state = ClusterState.from_bytes(snapshot)
    before = state.n_classes
    assert fold_flow(state, flow).n_classes == before


def test_the_shapes_flow_repeats_each_spec_over_a_workload_of_consecutive_pods() -> None:
    # fold-shapes: the benchmark's pods (names, envelopes, request draws) in workloads
    # sharing one spec, so few pods bring a spec the follower has not seen; its log
    # folds like the plain flow's, every pod placed.
    pods = shape_payloads(500, "bench", 0)
    assert [key for key, _ in pods] == [f"bench/pod-{j}" for j in range(500)]
    specs = [orjson.loads(payload)["data"]["spec"] for _, payload in pods]
    runs = 1 + sum(a != b for a, b in itertools.pairwise(specs))
    assert 500 / MAX_REPLICAS <= runs <= 500 / 10
    snapshot, flow = flow_log(nodes=50, pods=60, replicas=3, shapes=True)
    state = ClusterState.from_bytes(snapshot)
    running = state.phase_count(PHASE_RUNNING)
    fold_flow(state, flow)
    assert not state.anomalies
    assert state.phase_count(PHASE_RUNNING) == running + 60


def test_the_submissions_of_the_flow_fold_every_pod_pending_and_none_bound() -> None:
    # fold-submitted splits a pod's fold: the flow's submissions alone, in order, one
    # per pod; folded, every pod is known and pending, none placed, no anomaly.
    snapshot, flow = flow_log(nodes=50, pods=60, replicas=3)
    submitted = submissions(flow)
    assert len(submitted) == 60 == len(flow) // 2
    assert [orjson.loads(p)["type"] for _, p in submitted] == ["esched.pod.submitted"] * 60
    assert [pos for pos, _ in submitted] == sorted(pos for pos, _ in submitted)
    state = ClusterState.from_bytes(snapshot)
    running, pending = state.phase_count(PHASE_RUNNING), state.phase_count(PHASE_PENDING)
    fold_flow(state, submitted)
    assert not state.anomalies
    assert state.phase_count(PHASE_RUNNING) == running
    assert state.phase_count(PHASE_PENDING) == pending + 60


def test_a_frozen_heap_collects_young_objects_less_often_until_thawed() -> None:
    before = gc.get_threshold()
    freeze_heap()
    try:
        assert gc.get_threshold()[0] == max(before[0], FROZEN_GEN0)
        assert gc.get_threshold()[1:] == before[1:]
    finally:
        thaw_heap()
    assert gc.get_threshold() == before


def test_the_place_benchmark_places_every_pod_through_signed_work_and_proposals() -> None:
    # Work items signed as the dispatcher signs them pass the replica's check, each
    # pod gets one proposal, every proposal's decision reaches the batch waiting
    # for it (three batches, the last one short), and the core's share is apart.
    out = run_place_bench(pods=50, batch=20)
    assert out["placed"] == out["proposals"] == 50
    assert out["whole_cpu_us_per_pod"] >= out["replica_cpu_us_per_pod"] > 0
    assert out["core_cpu_us_per_pod"] > 0 and out["deciding_cpu_us_per_pod"] > 0


def test_the_renew_benchmark_renews_a_view_holding_every_claim_in_flight() -> None:
    # Every pod placed over the passes stays claimed (nothing is decided), so each
    # renewal assumes all of them again.
    out = run_renew_bench(claims=60, batch=25, nodes=200, repeat=1)
    assert out["claims"] == 60
    assert out["renewal_us"] > 0 and out["core_us"] > 0


def test_the_place_benchmark_places_one_pod_jobs_as_their_gangs() -> None:
    # Each pod a one-pod Volcano Job's, handed over as its gang: one gang proposal
    # per pod, every one committed.
    out = run_place_bench(pods=30, batch=20, jobs=True)
    assert out["placed"] == out["proposals"] == 30
    assert out["core_cpu_us_per_pod"] > 0


def test_the_enter_benchmark_enters_every_pod_from_the_store(tmp_path) -> None:
    out = run_enter_bench(pods=30, batch=4, nodes=20, db=str(tmp_path))
    again = run_enter_bench(pods=30, batch=4, nodes=20, db=str(tmp_path))  # (store reused)
    for run in (out, again):
        assert run["entered"] == 30
        assert run["anomalies"] == {}
