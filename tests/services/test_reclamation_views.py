"""Borg's reclamation made visible: ``esched replay``'s table and the Prometheus gauges."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from esched.core import ClusterState
from esched.core.reservations import ReclamationConfig
from esched.schemas import events as EV
from esched.services.metrics import publish_reclamation
from esched.services.replay import format_reclamation, format_table
from support.fold import envelope, node, pod


def _state(reclamation: ReclamationConfig | None = None) -> ClusterState:
    """n1 (4 cpu) runs a pod limited to 2 cpu that has used 100m for an hour; with
    Borg's reclamation enabled unless ``reclamation`` says otherwise."""
    st = ClusterState()
    st.reclamation = reclamation or ReclamationConfig(enabled=True)
    p = pod("a", cpu="1", node_name="n1")
    p["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "2", "memory": "1Gi"}
    events = [envelope(EV.NODE_ADDED, node("n1")), envelope(EV.POD_SUBMITTED, p)]
    for t in ("00", "30", "59"):
        e = envelope(EV.USAGE_REPORTED, {"pods": [{"pod": "ns/a", "usage": {"cpu": "100m"}}]})
        e["time"] = f"2026-01-01T00:{t}:00Z"
        events.append(e)
    st.apply_many(list(enumerate(events, 1)))
    return st


def test_replay_view_shows_limit_reservation_usage_and_reclaimed():
    st = _state()
    view = st.reclamation_view()
    cpu = view["nodes"]["n1"]["cpu"]
    assert cpu["limit"] == 2000 and cpu["usage"] == 100
    # decayed toward 100m + 10% of 2 cpu = 300m; reserved adds 10% of 4 cpu of burst
    assert 300 <= cpu["reservation"] < 2000
    assert cpu["reserved"] == min(2000, cpu["reservation"] + 400)
    assert cpu["reclaimed"] == 2000 - cpu["reserved"] > 0
    assert view["totals"]["cpu"] == cpu
    lines = format_reclamation(view)
    assert lines[0].startswith("reclaim   1 nodes")
    assert any(line.split()[:2] == ["n1", "cpu"] for line in lines)
    assert "reclaim" in format_table({**st.summary(), "reclamation": view})


def test_replay_view_says_requests_when_reclamation_is_off():
    st = _state(ReclamationConfig())  # the default: off, kube's accounting
    view = st.reclamation_view()
    assert view["accounting"] == "requests"
    cpu = view["nodes"]["n1"]["cpu"]
    # the limit (2 cpu) is ignored: everything is the requests, nothing reclaimed
    assert cpu["limit"] == cpu["reservation"] == cpu["reserved"] == 1000
    assert cpu["reclaimed"] == 0 and cpu["usage"] == 100
    lines = format_reclamation(view)
    assert lines[0].startswith("reclaim   off: every pod placed by its requests")


def test_gauges_report_the_reclaimed_capacity():
    st = _state()
    publish_reclamation(st)
    cpu = st.reclamation_view()["totals"]["cpu"]
    got = REGISTRY.get_sample_value("esched_reclaim_reclaimed", {"resource": "cpu"})
    assert got == cpu["reclaimed"]
    assert REGISTRY.get_sample_value("esched_reclaim_limits", {"resource": "cpu"}) == 2000


def test_bench_usage_folds_every_report_without_anomalies():
    from esched.services.bench_usage import bench_usage

    out = bench_usage(nodes=20, pods=100, rounds=2)
    assert out["anomalies"] == {} and out["events_per_round"] == 20
    assert len(out["round_cpu_seconds_runs"]) == 2
    # Both figures are rounded to 4 places, so they agree within one unit there.
    assert out["cpu_share"] == pytest.approx(out["round_cpu_seconds"] / 10.0, abs=1e-4)
    # The dispatcher's overload check over the same reports: no node is overloaded.
    assert out["overloaded_nodes"] == 0 and out["overload_cpu_share"] >= 0


def test_bench_core_reclaimed_places_against_reservations():
    from esched.services.bench_core import run_bench

    out = run_bench(n_nodes=40, n_pods=400, reclaimed=True, full_scan_pods=50)
    assert out["workload"]["reclaimed"] is True
    # limit L = a quarter of the node's cpu, 100m used: reserved = 100m + 0.1 L (margin)
    # + 0.4 L (10% of the node kept for bursts), so about half of L is reclaimed
    assert 0.45 < out["workload"]["reclaimed_cpu_share"] < 0.5
    assert out["pods_per_s"] > 0
