"""Placer: feasibility with reasons, sampling, determinism, gangs, batches, cache."""

import numpy as np
import pytest

from esched.core import ClusterState, Placer, num_feasible_nodes_to_find
from esched.core.profile import parse_profile
from support.fold import EV, Log, commit, node, pod
from support.kube import fit_and_balanced_profile, fit_profile
from support.simd import kernel_body

GI = 2**30


def cluster(*nodes) -> tuple[ClusterState, Log]:
    s = ClusterState()
    log = Log(s)
    for n in nodes:
        log(EV.NODE_ADDED, n)
    return s, log


def _decision_stats(placer: Placer) -> dict:
    # Everything but the cache counters: the fused scan fills its cache a block step at
    # a time and the plugin table node by node, so their hit counts differ, never their
    # decisions.
    return {k: v for k, v in placer.stats().items() if not k.startswith("cache_")}


def feasible_names(placer: Placer, p) -> set[str]:
    return {r["name"] for r in placer.explain(p)["nodes"] if r["feasible"]}


@pytest.mark.parametrize(
    ("n", "pct", "expected"),
    [
        (50, 0, 50),  # below 100 nodes: all
        (99, 0, 99),
        (100, 0, 100),  # 50 - 0 = 50% of 100 -> 50, but at least 100
        (1000, 0, 420),  # 50 - 8 = 42%
        (5000, 0, 500),  # 50 - 40 = 10%
        (10000, 0, 500),  # 50 - 80 < 5 -> 5%
        (100000, 0, 5000),
        (5000, 100, 5000),  # a profile's percentage overrides the adaptive rule
        (5000, 1, 100),  # never fewer than 100
    ],
)
def test_num_feasible_nodes_to_find_follows_kube(n, pct, expected):
    assert num_feasible_nodes_to_find(n, pct) == expected


def test_node_selector_and_required_affinity_operators():
    s, _ = cluster(
        node("a", labels={"zone": "z1", "gen": "3", "ssd": "true"}),
        node("b", labels={"zone": "z2", "gen": "5"}),
        node("c", labels={"zone": "z3"}),
    )
    p = Placer(s)

    def aff(*exprs, more_terms=()):
        terms = [{"matchExpressions": list(exprs)}, *more_terms]
        return {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
        }

    assert feasible_names(p, pod("x", nodeSelector={"zone": "z2"})) == {"b"}
    assert feasible_names(p, pod("x", nodeSelector={"zone": "nowhere"})) == set()
    cases = {
        ("zone", "In", ("z1", "z3")): {"a", "c"},
        ("zone", "NotIn", ("z1",)): {"b", "c"},
        ("ssd", "Exists", ()): {"a"},
        ("ssd", "DoesNotExist", ()): {"b", "c"},
        ("gen", "Gt", ("3",)): {"b"},
        ("gen", "Lt", ("5",)): {"a"},
        ("gen", "Gt", ("x",)): set(),  # not an integer: matches nothing
    }
    for (key, op, values), expected in cases.items():
        expr = {"key": key, "operator": op, "values": list(values)}
        assert feasible_names(p, pod("x", affinity=aff(expr))) == expected, (key, op)
    # terms are ORed, expressions within a term ANDed, nodeSelector ANDed with both
    two_terms = aff(
        {"key": "zone", "operator": "In", "values": ["z1"]},
        {"key": "gen", "operator": "Exists"},
        more_terms=[{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z3"]}]}],
    )
    assert feasible_names(p, pod("x", affinity=two_terms)) == {"a", "c"}
    assert feasible_names(p, pod("x", affinity=two_terms, nodeSelector={"zone": "z3"})) == {"c"}
    # an empty term matches nothing (kube)
    assert feasible_names(p, pod("x", affinity=aff())) == set()


def test_taints_and_tolerations():
    s, _ = cluster(
        node("plain"),
        node("gpu", taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]),
        node("drain", taints=[{"key": "drain", "effect": "NoExecute"}]),
        node("soft", taints=[{"key": "soft", "effect": "PreferNoSchedule"}]),
    )
    p = Placer(s)
    assert feasible_names(p, pod("x")) == {"plain", "soft"}
    tol = [{"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}]
    assert feasible_names(p, pod("x", tolerations=tol)) == {"plain", "soft", "gpu"}
    wrong_value = [{"key": "gpu", "operator": "Equal", "value": "no"}]
    assert feasible_names(p, pod("x", tolerations=wrong_value)) == {"plain", "soft"}
    exists_any_effect = [{"key": "drain", "operator": "Exists"}]
    assert feasible_names(p, pod("x", tolerations=exists_any_effect)) == {"plain", "soft", "drain"}
    tolerate_all = [{"operator": "Exists"}]
    assert feasible_names(p, pod("x", tolerations=tolerate_all)) == {
        "plain",
        "soft",
        "gpu",
        "drain",
    }
    reasons = {r["name"]: r["reasons"] for r in p.explain(pod("x"))["nodes"]}
    assert reasons["gpu"] == ["node(s) had untolerated taint"]


def test_unschedulable_nodes_unless_tolerated():
    s, _ = cluster(node("cordoned", unschedulable=True), node("ok"))
    p = Placer(s)
    assert feasible_names(p, pod("x")) == {"ok"}
    tol = [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert feasible_names(p, pod("x", tolerations=tol)) == {"ok", "cordoned"}


def test_every_resource_dimension_and_pod_count_limit_with_reasons():
    s, log = cluster(
        node("small", cpu="1", memory="1Gi", pods="1", **{"nvidia.com/gpu": "1"}),
        node("big", cpu="8", memory="16Gi"),
    )
    p = Placer(s)
    x = pod("x", cpu="2", memory="2Gi")
    x["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    out = {r["name"]: r for r in p.explain(x)["nodes"]}
    assert out["small"]["reasons"] == ["Insufficient cpu", "Insufficient memory"]
    assert out["big"]["reasons"] == ["Insufficient nvidia.com/gpu"]
    log(EV.POD_SUBMITTED, pod("filler", cpu="100m", memory="1Mi", node_name="small"))
    assert p.fits(pod("y", cpu="100m", memory="1Mi"), "small") == ["Too many pods"]
    assert p.fits(pod("y", cpu="100m", memory="1Mi"), "big") == []
    assert p.fits(pod("y"), "nowhere") == ["node(s) not found"]


def test_explain_scores_each_plugin_and_chooses_the_best():
    s, _ = cluster(node("n1", cpu="4", memory="8Gi"), node("n2", cpu="8", memory="8Gi"))
    result = Placer(s).explain(pod("x", cpu="1", memory="1Gi"))
    rows = {r["name"]: r for r in result["nodes"]}
    # n1: cpu (4000-1000)*100/4000 = 75, mem (8-1)/8 = 87 -> 81; balanced |0.25-0.125|/2 -> 93
    assert rows["n1"]["scores"] == {"NodeResourcesFit": 81, "NodeResourcesBalancedAllocation": 93}
    # n2: cpu 87, mem 87 -> 87; balanced 100
    assert rows["n2"]["scores"] == {"NodeResourcesFit": 87, "NodeResourcesBalancedAllocation": 100}
    assert rows["n2"]["total"] == 187 and result["chosen"] == "n2"


def _node_sizes(i: int, labels=None) -> dict:
    # Node i of _many_nodes (labels: a changed label renews the node in the state).
    cpu, memory = str((8, 16, 32, 64)[i % 4]), f"{(i % 4 + 1) * 8}Gi"
    return node(f"n{i}", cpu=cpu, memory=memory, labels=labels)


def _many_nodes(n: int) -> ClusterState:
    s, _ = cluster(*[_node_sizes(i) for i in range(n)])
    return s


def _workload(s: ClusterState, n: int, seed: int = 3) -> np.ndarray:
    rnd = np.random.default_rng(seed)
    return np.array(
        [
            s.intern_class(pod("w", cpu=f"{100 * int(c)}m", memory=f"{128 * int(m)}Mi"))
            for c, m in rnd.integers(1, 41, size=(n, 2))
        ],
        dtype=np.int32,
    )


def test_same_seed_same_decisions_and_cache_does_not_change_them():
    s = _many_nodes(300)
    cids = _workload(s, 400)
    a = Placer(s, seed=7).place_classes(cids)
    b = Placer(s, seed=7).place_classes(cids)
    c = Placer(s, seed=7, cache=False).place_classes(cids)
    assert (a == b).all() and (a == c).all()
    assert (a >= 0).all()


@pytest.mark.parametrize("seed", range(3))
def test_cache_on_and_off_choose_the_same_nodes_when_the_sample_wraps(seed):
    # 1,000 nodes: each pod visits 420 (kube's adaptive percentage), starting where the
    # last visit stopped, so a class's pods come back to nodes it scored only after the
    # walk has gone round; runs of a few classes among random shapes fill and read rows.
    s = _many_nodes(1000)
    rnd = np.random.default_rng(seed)
    bursts = [s.intern_class(pod("b", cpu=f"{c}m", memory="256Mi")) for c in (300, 700, 1100)]
    randoms = _workload(s, 400, seed=seed)
    parts = []
    for i in range(8):
        parts.append(np.full(int(rnd.integers(5, 40)), bursts[i % 3], dtype=np.int32))
        parts.append(randoms[50 * i : 50 * i + 50])
    cids = np.concatenate(parts)
    on = Placer(s, seed=seed)
    a = on.place_classes(cids)
    b = Placer(s, seed=seed, cache=False).place_classes(cids)
    assert (a == b).all() and (a >= 0).all()
    assert on.stats()["cache_hits"] > 0  # the cached path did run


def test_a_class_takes_a_cache_row_only_once_the_walk_has_come_round():
    s = _many_nodes(1000)  # 420 nodes a pod, all feasible: the walk goes round in 3 pods
    x = np.array([s.intern_class(pod("x", cpu="100m", memory="64Mi"))], dtype=np.int32)
    p = Placer(s, seed=0)
    for _ in range(3):  # its run began 0, 420, 840 nodes ago: no row yet
        p.place_classes(x)
    assert p.stats()["cache_misses"] == 0 and p.stats()["cache_hits"] == 0
    p.place_classes(x)  # 1,260 nodes walked since: the row, filled by this visit
    assert p.stats()["cache_misses"] == 420 and p.stats()["cache_hits"] == 0
    for _ in range(3):
        p.place_classes(x)
    assert p.stats()["cache_hits"] > 0  # the walk came back to the nodes it scored
    # a class that holds a row keeps using it when it comes back after a gap
    others = _workload(s, 20)
    p.place_classes(others)
    p.place_classes(x)  # after 20 other placements: a new run, no lookup
    hits = p.stats()["cache_hits"]
    p.place_classes(x)
    assert p.stats()["cache_hits"] > hits


def test_a_random_workload_on_a_sampled_cluster_leaves_the_cache_alone():
    # 2,000 nodes at 5%: 100 nodes a pod, the walk goes round in 20 placements. Random
    # shapes repeat within 16 placements now and then, but a class's run does not last
    # until the walk comes back to the nodes it scored: no class takes a row.
    s = _many_nodes(2000)
    cids = _workload(s, 600)
    p = Placer(s, parse_profile({"percentageOfNodesToScore": 5}), seed=0)
    a = p.place_classes(cids)
    assert p.stats()["nodes_visited"] == 600 * 100
    assert p.stats()["cache_misses"] == 0 and p.stats()["cache_hits"] == 0
    off = Placer(s, parse_profile({"percentageOfNodesToScore": 5}), seed=0, cache=False)
    assert (off.place_classes(cids) == a).all()


def _renew(log: Log, nodes, tag: int) -> None:
    # The cluster changing under the placers: these nodes folded again, each renewed.
    for i in nodes:
        log(EV.NODE_ADDED, _node_sizes(int(i), {"gen": str(tag)}))


def test_a_class_whose_row_keeps_missing_gives_it_up_and_takes_it_back():
    # 256 nodes, full scans: the walk comes round every pod. A steady class fills its
    # row and hits; then every node is renewed between its pods, so each visit misses
    # everywhere: it gives the row up, walks uncached for a pause that doubles each
    # time it retries and misses again; once the cluster is quiet it takes a row again
    # and hits. The same nodes as the cache off throughout.
    s, log = cluster(*[_node_sizes(i) for i in range(256)])
    x = np.array([s.intern_class(pod("x", cpu="100m", memory="64Mi"))], dtype=np.int32)
    on = Placer(s, seed=1, sample=False)
    off = Placer(s, seed=1, sample=False, cache=False)

    def place(n: int, churn: bool = False) -> None:
        for k in range(n):
            assert on.place_classes(x)[0] == off.place_classes(x)[0]
            if churn:
                _renew(log, range(256), k)

    place(10)
    quiet = on.stats()
    assert quiet["cache_hits"] > 7 * 256 and quiet["cache_steps_aside"] == 0
    place(40, churn=True)
    churned = on.stats()
    # without stepping aside every one of the 40 visits would miss its 256 nodes
    misses = churned["cache_misses"] - quiet["cache_misses"]
    assert misses < 20 * 256
    assert churned["cache_steps_aside"] >= 4  # it retried (pauses 1, 2, 4, 8 rounds...)
    assert churned["cache_returns"] == churned["cache_steps_aside"] - 1
    place(100)
    back = on.stats()
    assert back["cache_returns"] == churned["cache_steps_aside"]  # it took a row again
    assert back["cache_steps_aside"] == churned["cache_steps_aside"]
    before = back["cache_hits"]
    place(5)
    assert on.stats()["cache_hits"] - before > 4 * 250  # ... and its row pays again


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("sample", [True, False])
def test_the_adaptive_cache_places_as_the_cache_off_through_bursts_and_churn(seed, sample):
    # Seeded mixes on 1,000 nodes (sampled: 420 a pod, the walk wraps every 3 pods):
    # bursts of a few classes among random shapes, phases where most nodes are renewed
    # between placements (rows miss, classes step aside) and quiet phases (they come
    # back and hit). Every placement the same as the cache off.
    s, log = cluster(*[_node_sizes(i) for i in range(1000)])
    rnd = np.random.default_rng(seed)
    bursts = [s.intern_class(pod("b", cpu=f"{c}m", memory="256Mi")) for c in (300, 700, 1100)]
    randoms = _workload(s, 300, seed=seed)
    on = Placer(s, seed=seed, sample=sample)
    off = Placer(s, seed=seed, sample=sample, cache=False)
    for phase in range(10):
        churn = phase % 3 == 1
        for j in range(int(rnd.integers(15, 30))):
            if rnd.random() < 0.8:
                cids = np.array([bursts[int(rnd.integers(0, 2 if churn else 3))]], np.int32)
            else:
                cids = randoms[int(rnd.integers(0, 300)), None]
            a, b = on.place_classes(cids), off.place_classes(cids)
            assert (a == b).all() and (a >= 0).all()
            if churn:
                _renew(log, np.flatnonzero(rnd.random(1000) < 0.8), 100 * phase + j)
    st = on.stats()
    # the paths ran: rows hit, were given up and taken again
    assert st["cache_hits"] > 0 and st["cache_steps_aside"] > 0 and st["cache_returns"] > 0


def test_sampling_visits_fewer_nodes_than_a_full_scan():
    s = _many_nodes(1000)
    cids = _workload(s, 50)
    sampled = Placer(s, seed=1)
    sampled.place_classes(cids)
    full = Placer(s, seed=1, sample=False)
    full.place_classes(cids)
    assert sampled.stats()["nodes_visited"] == 50 * 420
    assert full.stats()["nodes_visited"] == 50 * 1000


def test_least_allocated_spreads_and_most_allocated_packs():
    s, _ = cluster(*[node(f"n{i}", cpu="8", memory="32Gi") for i in range(4)])
    spread = Placer(s, seed=0)
    names = {spread.place(pod(f"p{i}", cpu="1", memory="1Gi"))[0] for i in range(4)}
    assert len(names) == 4
    pack = Placer(s, parse_profile(fit_profile("MostAllocated")), seed=0)
    names = {pack.place(pod(f"p{i}", cpu="1", memory="1Gi"))[0] for i in range(4)}
    assert len(names) == 1


def test_place_assumes_in_the_placer_only():
    s, _ = cluster(node("n1", cpu="1", memory="4Gi"))
    p = Placer(s)
    assert p.place(pod("a", cpu="600m", memory="1Gi"))[0] == "n1"
    assert p.place(pod("b", cpu="600m", memory="1Gi")) is None  # the first is assumed
    assert s.node("n1")["allocated"]["cpu"] == 0  # the fold's state is untouched
    p.sync()  # drop assumptions
    assert p.place(pod("b", cpu="600m", memory="1Gi"))[0] == "n1"


def test_gang_is_all_or_nothing_without_side_effects():
    s, _ = cluster(node("n1", cpu="2", memory="8Gi"), node("n2", cpu="2", memory="8Gi"))
    p = Placer(s)
    before = p.used_array().copy()
    members = [pod(f"w{i}", cpu="1500m", memory="1Gi") for i in range(3)]
    assert p.plan_gang(members) is None
    assert (p.used_array() == before).all()
    plan = p.plan_gang(members[:2])
    assert sorted(plan) == ["n1", "n2"]
    assert p.plan_gang([pod("late", cpu="1", memory="1Gi")]) is None  # the plan is assumed
    # min_member: 2 of 3 suffices, the third is reported as not placed
    p.sync()
    assert sorted(p.plan_gang(members, min_member=2), key=str) == [None, "n1", "n2"]


def test_batch_places_in_order():
    s, _ = cluster(node("n1", cpu="2", memory="8Gi"))
    out = Placer(s).place_batch([pod(f"p{i}", cpu="1", memory="1Gi") for i in range(3)])
    assert [o[0] if o else None for o in out] == ["n1", "n1", None]


def test_cache_hits_for_identical_pods_and_invalidates_on_node_change():
    s = _many_nodes(200)
    cid = s.intern_class(pod("same", cpu="100m", memory="64Mi"))
    one = np.array([cid], dtype=np.int32)
    p = Placer(s, seed=0, sample=False)
    p.place_classes(one)  # a class seen for the first time does not touch the cache
    assert p.stats()["cache_misses"] == 0 and p.stats()["cache_hits"] == 0
    p.place_classes(one)  # it came back: fill the entries
    assert p.stats()["cache_misses"] == 200 and p.stats()["cache_hits"] == 0
    p.place_classes(one)
    # only the node that received the previous pod changed
    assert p.stats()["cache_hits"] == 199 and p.stats()["cache_misses"] == 201
    p.place_classes(one)  # the entry renewed last time holds; one more node changed
    assert p.stats()["cache_hits"] == 398 and p.stats()["cache_misses"] == 202


def test_a_class_not_seen_recently_bypasses_the_cache():
    s = _many_nodes(150)
    cids = np.array(
        [s.intern_class(pod(f"p{i}", cpu=f"{i + 1}m", memory="1Mi")) for i in range(300)],
        dtype=np.int32,
    )
    p = Placer(s, seed=0)
    p.place_classes(np.concatenate([cids, cids[:1]]))  # class 0 returns after 300 others
    assert p.stats()["cache_misses"] == 0


def test_placer_resyncs_after_the_fold_moves_and_keeps_unchanged_entries():
    s, log = cluster(node("n1", cpu="2", memory="8Gi"), node("n2", cpu="2", memory="8Gi"))
    p = Placer(s, sample=False)
    cid = s.intern_class(pod("x", cpu="1", memory="1Gi"))
    p.place(cid, assume=False)
    p.place(cid, assume=False)  # entries filled
    log(EV.POD_SUBMITTED, pod("r", cpu="1", memory="1Gi"))
    log(EV.PLACEMENT_COMMITTED, commit(("ns/r", "n1", {"cpu": 1000, "memory": GI, "pods": 1})))
    hits = p.stats()["cache_hits"]
    assert p.place(cid, assume=False)[0] == "n2"  # sees the committed pod on n1
    assert p.stats()["cache_hits"] == hits + 1  # n2's entry survived the resync
    assert p.synced_position == s.position


def test_pod_key_in_the_state_can_be_placed():
    s, log = cluster(node("n1"))
    log(EV.POD_SUBMITTED, pod("pending"))
    assert Placer(s).place("ns/pending")[0] == "n1"


def test_plan_a_gang_from_the_state_with_its_min_member():
    s, log = cluster(node("n1", cpu="2", memory="8Gi"))
    log(
        EV.PODGROUP_SUBMITTED,
        {
            "metadata": {"name": "job", "namespace": "ns"},
            "spec": {"minMember": 2, "queue": "default"},
        },
    )
    for i in range(3):
        log(EV.POD_SUBMITTED, pod(f"w{i}", cpu="1", memory="1Gi", gang="job"))
    members = s.gang_members("ns/job", "Pending")
    assert members == ["ns/w0", "ns/w1", "ns/w2"]
    plan = Placer(s).plan_gang(members, min_member=s.gang_min_member("ns/job"))
    assert plan == ["n1", "n1", None]


def test_esched_plugins_in_a_profile():
    s, _ = cluster(node("busy", cpu="4", memory="4Gi"), node("idle", cpu="4", memory="4Gi"))
    from esched.core import parse_profile as pp

    def prof(name, args=None):
        return pp(
            {
                "profiles": [
                    {
                        "plugins": {
                            "score": {"disabled": [{"name": "*"}], "enabled": [{"name": name}]}
                        },
                        "pluginConfig": [{"name": name, "args": args or {}}],
                    }
                ]
            }
        )

    from support.fold import Log

    Log(s)(EV.POD_SUBMITTED, pod("r", cpu="2", memory="2Gi", node_name="busy"))
    batch = pod("b", cpu="1", memory="1Gi", priority=0)
    prod = pod("p", cpu="1", memory="1Gi", priority=5000)
    mixed = prof("Mixed", {"productionPriority": 1000})
    assert Placer(s, mixed).place(batch, assume=False)[0] == "busy"  # pack batch
    assert Placer(s, mixed).place(prod, assume=False)[0] == "idle"  # spread production
    assert Placer(s, prof("EPVM")).place(batch, assume=False)[0] == "idle"


@pytest.mark.parametrize("strategy", ["LeastAllocated", "MostAllocated"])
@pytest.mark.parametrize("seed", range(4))
def test_fused_scan_decides_exactly_as_the_plugin_table(strategy, seed):
    # (cpu, memory) runs on the fused scan; (memory, cpu) scores the same but goes
    # through the general table. Zero capacities, unschedulable nodes, pods without
    # requests (kube's non-zero defaults, above capacity on small nodes), odd weights.
    rnd = np.random.default_rng(seed)
    nodes = [
        node(
            f"n{i}",
            cpu=str(rnd.choice(["0", "100m", "500m", "4", "8", "12"])),
            memory=str(rnd.choice(["0", "100Mi", "1Gi", "8Gi", "12Gi"])),
            pods=str(rnd.choice(["3", "110"])),
            unschedulable=bool(rnd.random() < 0.1),
        )
        for i in range(150)
    ]
    s, _ = cluster(*nodes)
    cids = np.array(
        [
            s.intern_class(
                pod("w", cpu=f"{int(c)}m" if c else None, memory=f"{int(m)}Mi" if m else None)
            )
            for c, m in rnd.integers(0, 3000, size=(300, 2)) * (rnd.random((300, 2)) < 0.8)
        ],
        dtype=np.int32,
    )
    rw = {"cpu": int(rnd.integers(1, 4)), "memory": int(rnd.integers(1, 4))}
    fw, bw = int(rnd.integers(1, 5)), int(rnd.integers(1, 5))
    fused = parse_profile(fit_and_balanced_profile(strategy, ("cpu", "memory"), fw, bw, rw))
    table = parse_profile(fit_and_balanced_profile(strategy, ("memory", "cpu"), fw, bw, rw))
    for cache in (True, False):
        for sample in (True, False):
            a = Placer(s, fused, seed=seed, cache=cache, sample=sample)
            b = Placer(s, table, seed=seed, cache=cache, sample=sample)
            assert a.fused_path and not b.fused_path
            assert (a.place_classes(cids) == b.place_classes(cids)).all()
            assert _decision_stats(a) == _decision_stats(b)
            assert (a.used_array() == b.used_array()).all()


def _varied_cluster(rnd, n: int, big: bool = False) -> list[dict]:
    # Zero and tiny capacities, cordons, labels, taints, pod limits; optionally one node
    # with a capacity above the vectorized kernel's exact range (2**46).
    nodes = []
    for i in range(n):
        cores = int(rnd.choice([0, 1, 4, 8, 16]))
        mem_gi = int(rnd.choice([0, 1, 4, 16, 32]))
        nodes.append(
            node(
                f"n{i}",
                cpu=str(cores) if rnd.random() < 0.9 else "250m",
                memory=f"{mem_gi}Gi",
                pods=str(rnd.choice(["2", "110"])),
                labels={"zone": f"z{i % 3}"} if rnd.random() < 0.7 else {},
                taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]
                if rnd.random() < 0.15
                else [],
                unschedulable=bool(rnd.random() < 0.1),
            )
        )
    # where a reciprocal-only BalancedAllocation is off by one (see the test below)
    nodes += [node(f"odd{i}", cpu="750m", memory="1Gi") for i in range(20)]
    if big:
        nodes.append(node("huge", cpu="4", memory=f"{2**47}"))
    return nodes


def _varied_pods(s: ClusterState, rnd, n: int) -> np.ndarray:
    cids = []
    for _ in range(n):
        kind = rnd.random()
        if kind < 0.15:
            c, m = [(510, 512), (600, 1024), (490, 512)][int(rnd.integers(0, 3))]
            p = pod("w", cpu=f"{c}m", memory=f"{m}Mi")
        elif kind < 0.3:
            # proportional to a node (1 core : 4Gi): equal fractions, std == 0, so the
            # kernel's reciprocal fractions hit its exact-quotient fallback
            c = int(rnd.integers(1, 8))
            p = pod("w", cpu=f"{c * 250}m", memory=f"{c}Gi")
        else:
            c, m = (int(x) for x in rnd.integers(0, 3000, size=2))
            p = pod("w", cpu=f"{c}m" if c else None, memory=f"{m}Mi" if m else None)
        if rnd.random() < 0.2:
            p["spec"]["nodeSelector"] = {"zone": f"z{int(rnd.integers(0, 3))}"}
        if rnd.random() < 0.2:
            p["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
        # runs of identical pods, so the cache fills, hits, and goes stale node by node
        cids += [s.intern_class(p)] * int(rnd.choice([1, 1, 2, 6]))
    return np.array(cids[:n], dtype=np.int32)


@pytest.mark.parametrize("isa", ["avx512", "avx2", "baseline"])
@pytest.mark.parametrize("big", [False, True])
def test_vectorized_block_kernel_decides_exactly_as_the_plugin_table(isa, big):
    # Every body of _fused_block.h this CPU runs (the widest up to `isa`), against the
    # general plugin table: same decisions, stats and allocation, also after the cluster
    # grows (the placer reshapes its arrays) and a node is cordoned (a resync).
    with kernel_body(isa):
        rnd = np.random.default_rng(11)
        s, log = cluster(*_varied_cluster(rnd, 300, big))
        cids = _varied_pods(s, rnd, 400)
        fused = parse_profile(
            fit_and_balanced_profile(
                "LeastAllocated", ("cpu", "memory"), 1, 1, {"cpu": 1, "memory": 1}
            )
        )
        table = parse_profile(
            fit_and_balanced_profile(
                "LeastAllocated", ("memory", "cpu"), 1, 1, {"cpu": 1, "memory": 1}
            )
        )
        for cache in (True, False):
            for sample in (True, False):
                a = Placer(s, fused, seed=3, cache=cache, sample=sample)
                b = Placer(s, table, seed=3, cache=cache, sample=sample)
                assert a.fused_path and not b.fused_path
                assert (a.place_classes(cids[:200]) == b.place_classes(cids[:200])).all()
                log(EV.NODE_ADDED, node(f"late-{cache}-{sample}", cpu="64", memory="256Gi"))
                n0 = s.node_names[0]
                log(EV.NODE_UPDATED, node(n0, cpu="8", memory="32Gi", unschedulable=True))
                assert (a.place_classes(cids[200:]) == b.place_classes(cids[200:])).all()
                assert _decision_stats(a) == _decision_stats(b)
                assert (a.used_array() == b.used_array()).all()


@pytest.mark.parametrize("isa", ["avx512", "avx2", "baseline"])
def test_vectorized_balanced_allocation_uses_the_ieee_quotients(isa):
    # 510m on a 750m node and 512Mi on 1Gi: kube's fractions 0.68 and 0.5, std 0.09,
    # (1 - std) * 100 = 90.00000000000001 -> 90. By reciprocal, 510 * (1 / 750) is one ulp
    # off 510 / 750 and the product lands on 91.0 (found by search): the kernel must
    # notice the near-integer result and redo it with the true quotients.
    with kernel_body(isa):
        s, _ = cluster(*[node(f"n{i}", cpu="750m", memory="1Gi") for i in range(8)])
        x = pod("x", cpu="510m", memory="512Mi")
        expected = Placer(s).explain(x)["nodes"][0]
        assert expected["scores"]["NodeResourcesBalancedAllocation"] == 90
        for cache in (False, True):
            _, total = Placer(s, sample=False, cache=cache).place(x, assume=False)
            assert total == expected["total"]


def test_vectorized_kernel_sees_assumed_evictions_and_their_rollback():
    # plan_gang_preempting evicts in the placer's view and, when the gang cannot be
    # completed, puts the victims back: the kernel's columns must follow both.
    s, log = cluster(node("n1", cpu="2", memory="8Gi"))
    log(EV.POD_SUBMITTED, pod("v", cpu="2", memory="1Gi", node_name="n1", priority=0))
    for name in ("g1", "g2"):
        log(EV.POD_SUBMITTED, pod(name, cpu="2", memory="1Gi", priority=1000))
    small = s.intern_class(pod("small", cpu="1", memory="1Gi", priority=0))
    p = Placer(s)
    assert p.fused_path
    assert p.plan_gang_preempting(["ns/g1", "ns/g2"]) is None  # g2 fits nowhere: undone
    assert p.place(small, assume=False) is None  # v is back on n1 in the view
    plan = p.plan_preemption("ns/g1")
    assert plan["victims"] == ["ns/v"]
    assert p.place(small, assume=False) is None  # g1 holds n1 now


@pytest.mark.parametrize("seed", range(4))  # rotating starts: some scans begin a block
def test_cached_block_summaries_die_when_a_node_is_reserved_for_a_gang(seed):
    # A reservation hides a node from everyone else in the placer's view (pods capacity
    # 0); a burst's cached summary of that node's block must not outlive it.
    s, log = cluster(*[node(f"n{i}", cpu="8", memory="32Gi") for i in range(4)])
    log(
        EV.PODGROUP_SUBMITTED,
        {"metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 1}},
    )
    log(EV.POD_SUBMITTED, pod("g0", cpu="4", memory="1Gi", gang="g"))
    x = s.intern_class(pod("x", cpu="1", memory="1Gi"))
    p = Placer(s, sample=False, seed=seed)
    for _ in range(3):
        chosen, _ = p.place(x, assume=False)  # the class's row and summaries fill
    assert p.stats()["cache_hits"] > 0
    log(EV.GANG_RESERVED, {"gang": "ns/g", "nodes": [chosen], "message": "test"})
    assert s.reserved_nodes == {chosen: "ns/g"}
    for _ in range(3):
        assert p.place(x, assume=False)[0] != chosen


@pytest.mark.parametrize("strategy", ["LeastAllocated", "MostAllocated"])
@pytest.mark.parametrize("isa", ["avx512", "baseline"])
@pytest.mark.parametrize("seed", range(3))
def test_few_stale_rescoring_equals_full_rescoring(strategy, isa, seed):
    # With the cache, a block with at most FEW_STALE changed nodes rescores just those,
    # through the kernels' reciprocal variants; without it every visited node is
    # rescored. Bursts of identical pods (each placement makes one node stale), on
    # random clusters with zero and odd capacities, cordons, labels and taints: same
    # node and same total for every pod, and the cache did take the few-stale path.
    with kernel_body(isa):
        rnd = np.random.default_rng(100 + seed)
        s, _ = cluster(*_varied_cluster(rnd, 400))
        cids = _varied_pods(s, rnd, 300)
        cids = np.repeat(cids[::10], 10)  # runs of 10 identical pods
        rw = {"cpu": int(rnd.integers(1, 4)), "memory": int(rnd.integers(1, 4))}
        fw, bw = int(rnd.integers(1, 5)), int(rnd.integers(1, 5))
        prof = parse_profile(fit_and_balanced_profile(strategy, ("cpu", "memory"), fw, bw, rw))
        for sample in (True, False):
            few = Placer(s, prof, seed=seed, cache=True, sample=sample)
            full = Placer(s, prof, seed=seed, cache=False, sample=sample)
            assert few.fused_path
            for cid in cids:
                got = few.place(int(cid))
                assert got == full.place(int(cid))
            assert few.stats()["cache_hit_rate"] > 0.5
            assert _decision_stats(few) == _decision_stats(full)
            assert (few.used_array() == full.used_array()).all()


def test_new_classes_alternating_compiled_forms_keep_their_own_constraints():
    # Every pod a new class: unconstrained ones share one compiled form (the view copies
    # the pointers of the last form it read), selector classes each have their own, so
    # a view must not keep the pointers of the form before.
    s, _ = cluster(*(node(f"n{i}", labels={"zone": f"z{i % 2}"}) for i in range(8)))
    pods, zones = [], []
    for i in range(60):
        zone = (None, "z0", None, "z1", "z1")[i % 5]
        extra = {"nodeSelector": {"zone": zone}} if zone else {}
        pods.append(pod(f"p{i}", cpu=f"{i + 1}m", memory=f"{i + 1}Mi", **extra))
        zones.append(zone)
    cids = np.array([s.intern_class(p) for p in pods], dtype=np.int32)
    out = Placer(s, seed=1).place_classes(cids)
    got = [s.node_names[n] for n in out]
    assert all(n >= 0 for n in out)
    for name, zone in zip(got, zones, strict=True):
        if zone:
            assert int(name[1:]) % 2 == int(zone[1:]), (name, zone)
    # the unconstrained classes after a selector class still reach both zones
    assert {int(name[1:]) % 2 for name, z in zip(got, zones, strict=True) if z is None} == {0, 1}
