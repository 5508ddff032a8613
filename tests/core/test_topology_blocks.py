"""Inter-pod affinity and topology spread by blocks decide as node by node.

The fused profile (NodeResourcesFit and BalancedAllocation on cpu, memory) checks the
topology filters check by check over a block (``_topology_pass``, the gather body of
``_fused_block.h`` this CPU runs) and scores normalized plugins from the raw scores of
its maxima walk; the same profile with its resources listed the other way round takes
the plugin table, node by node (``reason_bits``, ``plugin_raw`` per node). Both must
choose the same node with the same total for every pod, in every SIMD body.
"""

import numpy as np
import pytest

from esched.core import ClusterState, Placer
from esched.core.profile import parse_profile
from support.fold import EV, Log, node, pod
from support.kube import fit_and_balanced_profile
from support.simd import kernel_body

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def _profile(order) -> dict:
    return fit_and_balanced_profile(
        "LeastAllocated",
        order,
        1,
        1,
        dict.fromkeys(order, 1),
        extra=(("InterPodAffinity", 2), ("PodTopologySpread", 2)),
    )


def _cluster(rnd) -> ClusterState:
    # Zones interleaved (every block holds several), some nodes without a zone label
    # (a check's node without the key), odd capacities, one cordoned node.
    s = ClusterState()
    log = Log(s)
    for i in range(300):
        labels = {HOST: f"n{i}"}
        if i % 37:
            labels[ZONE] = f"z{int(rnd.integers(0, 5))}"
        cores = int(rnd.choice([2, 4, 8, 16]))
        log(
            EV.NODE_ADDED,
            node(f"n{i}", cpu=str(cores), memory=f"{4 * cores}Gi", labels=labels,
                 unschedulable=i == 7),
        )  # fmt: skip
    return s


def _term(app: str, key: str) -> dict:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


def _shape(j: int, rnd) -> dict:
    c = int(rnd.integers(1, 12))
    p = pod(f"p{j}", cpu=f"{c * 250}m", memory=f"{c}Gi")
    kind = j % 7
    labels = {"app": ("a", "b", "s", "t", "b", "a", "w")[kind]}
    if kind == 0:  # required anti-affinity on hostname (and existing pods' own)
        p["spec"]["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [_term("a", HOST)]
            }
        }
    elif kind == 1:  # required affinity on zone: the first pod alone, then next to one
        p["spec"]["affinity"] = {
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term("b", ZONE)]}
        }
    elif kind == 2:  # DoNotSchedule spread on zone and hostname
        p["spec"]["topologySpreadConstraints"] = [
            {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app": "s"}}}
            for key in (ZONE, HOST)
        ]  # fmt: skip
    elif kind == 3:  # ScheduleAnyway spread on zone and hostname (scored)
        p["spec"]["topologySpreadConstraints"] = [
            {"maxSkew": 2, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": {"matchLabels": {"app": "t"}}}
            for key in (ZONE, HOST)
        ]  # fmt: skip
    elif kind == 4:  # preferred affinity on zone, preferred anti-affinity on hostname
        p["spec"]["affinity"] = {
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "podAffinityTerm": _term("a", ZONE)}
                ]
            },
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 3, "podAffinityTerm": _term("b", HOST)}
                ]
            },
        }
    elif kind == 6:  # a ReplicaSet's pod: kube's system default spreading
        p["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "w", "uid": "rs-w",
             "controller": True}
        ]  # fmt: skip
    p["metadata"]["labels"] = labels
    return p


@pytest.mark.parametrize("isa", ["avx512", "avx2", "baseline"])
@pytest.mark.parametrize("seed", range(2))
def test_topology_by_blocks_decides_as_node_by_node(isa, seed):
    with kernel_body(isa):
        rnd = np.random.default_rng(seed)
        s = _cluster(rnd)
        pods = [_shape(j, rnd) for j in range(160)]
        blocks = parse_profile(_profile(("cpu", "memory")))
        nodes = parse_profile(_profile(("memory", "cpu")))
        for sample in (True, False):
            a = Placer(s, blocks, seed=seed, sample=sample)
            b = Placer(s, nodes, seed=seed, sample=sample)
            assert a.fused_path and not b.fused_path
            placed = 0
            for p in pods:
                got = a.place(p)
                assert got == b.place(p)
                placed += got is not None
            assert placed > len(pods) // 2
            assert a.stats()["placed"] == b.stats()["placed"] == placed
            assert (a.used_array() == b.used_array()).all()


def test_spread_block_bounds_decide_as_node_by_node_as_pods_come_and_go():
    # Zones of 200 contiguous nodes: whole blocks in one zone (refused while the zone
    # is above the minimum, its check skipped while all of it is within the limit),
    # blocks across two zones, one block with nodes lacking the zone label; pods
    # taken back now and then lower a domain's count again.
    rnd = np.random.default_rng(3)
    s = ClusterState()
    log = Log(s)
    for i in range(700):
        labels = {HOST: f"n{i}"}
        if not 300 <= i < 310:
            labels[ZONE] = f"z{i // 200}"
        log(EV.NODE_ADDED, node(f"n{i}", cpu="8", memory="32Gi", labels=labels))
    keys = []
    for j in range(420):
        c = int(rnd.integers(1, 8))
        p = pod(f"s{j}", cpu=f"{c * 250}m", memory=f"{c}Gi")
        p["metadata"]["labels"] = {"app": "s"}
        p["spec"]["topologySpreadConstraints"] = [
            {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app": "s"}}}
            for key in (ZONE, HOST)
        ]  # fmt: skip
        log(EV.POD_SUBMITTED, p)
        keys.append(f"ns/s{j}")
    a = Placer(s, parse_profile(_profile(("cpu", "memory"))), seed=1)
    b = Placer(s, parse_profile(_profile(("memory", "cpu"))), seed=1)
    assert a.fused_path and not b.fused_path
    placed = []
    for j, key in enumerate(keys):
        got = a.place(key)
        assert got == b.place(key)
        if got is not None:
            placed.append((s.pod_index[key], s.node_index[got[0]]))
        if j % 6 == 5 and placed:
            slot, n = placed.pop(int(rnd.integers(0, len(placed))))
            a.assume_binding(slot, n, -1)
            b.assume_binding(slot, n, -1)
    assert len(placed) > 300
    assert (a.used_array() == b.used_array()).all()
