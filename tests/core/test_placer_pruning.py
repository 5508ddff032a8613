"""The bounded scan (esched_fbound: exact scores only where a node's bound reaches the
best score held) decides exactly as the scan that scores every visited node."""

from pathlib import Path

import numpy as np
import pytest

from esched.core import ClusterState, Placer
from esched.core.profile import load_profile, parse_profile
from support.fold import EV, Log, node, pod

PROFILES = Path(__file__).resolve().parents[2] / "deploy" / "profiles"


def _fit_only(strategy: str) -> dict:
    res = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 2}]
    return {
        "profiles": [
            {
                "plugins": {
                    "score": {
                        "disabled": [{"name": "*"}],
                        "enabled": [{"name": "NodeResourcesFit", "weight": 3}],
                    }
                },
                "pluginConfig": [
                    {
                        "name": "NodeResourcesFit",
                        "args": {"scoringStrategy": {"type": strategy, "resources": res}},
                    }
                ],
            }
        ]
    }


# name -> (profile, whether it takes the fused scan the bound applies to)
CASES = {
    "default": (None, True),
    "fit-least-only": (parse_profile(_fit_only("LeastAllocated")), True),
    "fit-most-only": (parse_profile(_fit_only("MostAllocated")), True),
    "best-fit": (load_profile(PROFILES / "best-fit.yaml"), False),
    "worst-fit": (load_profile(PROFILES / "worst-fit.yaml"), False),
}


def _cluster(rnd, n: int, zero_cap: bool, taints: bool) -> ClusterState:
    # (a taint a pod does not tolerate, a zero capacity anywhere: the bound is off)
    s = ClusterState()
    log = Log(s)
    for i in range(n):
        cores = int(rnd.choice([1, 2, 4, 8, 16]))
        log(
            EV.NODE_ADDED,
            node(
                f"n{i}",
                cpu=str(cores) if rnd.random() < 0.9 else f"{int(rnd.integers(300, 3000))}m",
                memory=f"{int(rnd.choice([1, 2, 4, 8])) * cores}Gi",
                pods=str(rnd.choice(["4", "110"])),
                labels={"zone": f"z{i % 3}"},
                taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]
                if taints and rnd.random() < 0.1
                else [],
                unschedulable=bool(rnd.random() < 0.05),
            ),
        )
    if zero_cap:
        log(EV.NODE_ADDED, node("no-memory", cpu="8", memory="0"))
    return s


def _pods(s: ClusterState, rnd, n: int) -> np.ndarray:
    # Mixed shapes: tiny, large, proportional to a node, no requests (kube's non-zero
    # defaults); some with a selector or a toleration (the bound is off for those).
    cids = []
    for _ in range(n):
        kind = rnd.random()
        if kind < 0.2:
            c = int(rnd.integers(1, 8))
            p = pod("w", cpu=f"{c * 250}m", memory=f"{c}Gi")
        elif kind < 0.3:
            p = pod("w")
        elif kind < 0.4:
            p = pod("w", cpu=f"{int(rnd.integers(4, 16))}", memory=f"{int(rnd.integers(1, 32))}Gi")
        else:
            c, m = (int(x) for x in rnd.integers(1, 4000, size=2))
            p = pod("w", cpu=f"{c}m", memory=f"{m}Mi")
        if rnd.random() < 0.1:
            p["spec"]["nodeSelector"] = {"zone": f"z{int(rnd.integers(0, 3))}"}
        if rnd.random() < 0.1:
            p["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
        cids.append(s.intern_class(p))
    return np.array(cids, dtype=np.int32)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("seed", range(2))
def test_pruned_scan_places_exactly_as_the_unpruned_scan(case, seed):
    # Random pods on a random cluster of several blocks (128 nodes each) until it is
    # nearly full (most later pods fit nowhere or on a few nodes): identical node
    # choices, visits and allocation with the bound on and off, sampled or not. Seed 0:
    # no taints, the bound on for every pod without a selector; seed 1: tainted nodes
    # and a zero capacity, under which it is off.
    profile, fused = CASES[case]
    rnd = np.random.default_rng(seed)
    s = _cluster(rnd, 700, zero_cap=seed == 1, taints=seed == 1)
    cids = _pods(s, rnd, 3000)
    for sample in (True, False):
        on = Placer(s, profile, seed=seed, sample=sample, prune=True)
        off = Placer(s, profile, seed=seed, sample=sample, prune=False)
        assert on.fused_path == fused
        placed_on, placed_off = on.place_classes(cids), off.place_classes(cids)
        assert (placed_on == placed_off).all()
        assert (placed_on < 0).sum() > 100  # it filled up
        assert on.stats()["nodes_visited"] == off.stats()["nodes_visited"]
        assert (on.used_array() == off.used_array()).all()


@pytest.mark.parametrize("isa", ["avx512", "avx2", "baseline"])
def test_pruned_scan_is_exact_in_every_kernel_body(isa):
    # Equal totals everywhere (identical empty nodes: every node ties with the best, so
    # every bound reaches it) and then a few emptier nodes to find: the seeded draw
    # among the ties and the best are the unpruned scan's in each body of the kernel.
    from esched.core import _placer

    before = _placer.SIMD
    try:
        _placer._py_set_simd(isa)
        s = ClusterState()
        log = Log(s)
        for i in range(600):
            log(EV.NODE_ADDED, node(f"n{i}", cpu="8", memory="32Gi"))
        rnd = np.random.default_rng(5)
        cids = np.array(
            [
                s.intern_class(pod("w", cpu=f"{int(c)}m", memory=f"{int(m)}Mi"))
                for c, m in rnd.integers(1, 2000, size=(800, 2))
            ],
            dtype=np.int32,
        )
        on = Placer(s, seed=1, prune=True)
        off = Placer(s, seed=1, prune=False)
        assert (on.place_classes(cids) == off.place_classes(cids)).all()
    finally:
        _placer._py_set_simd("" if before != "baseline" else "baseline")
