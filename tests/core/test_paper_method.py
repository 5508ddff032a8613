"""The FGD paper's scheduler, as its artifact defines it: the PaperBestFit kernel, the
fixed seeded node-order tie-break, FGD's packing key among equal scores, and the random
GPU choice of the artifact's Random."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from esched.core import ClusterState, Placer, load_profile, parse_profile
from esched.core._devices import DeviceTable
from esched.core.profile import ProfileError
from esched.core.schedule import PassConfig, SchedulingPass, Target, node_order_rank
from support.fold import EV, Log, node, pod

GPU = "esched.dev/gpu-milli"
PROFILES = Path(__file__).resolve().parents[2] / "deploy" / "profiles"


def _go_best_fit(cpu_free: int, gpu_free: int, cpu_req: int, gpu_req: int) -> int:
    """getBestFitScore of pkg/simulator/plugin/best_fit_score.go, transcribed: weights
    0.5/0.5, MaxSpecCpu 128000, MaxSpecGpu 8000, int64 of (1 - s) * 100."""
    s = (cpu_free - cpu_req) / 128000 * 0.5 + (gpu_free - gpu_req) / 8000 * 0.5
    return int((1.0 - s) * 100)


def _gpu_pod(name: str, cpu_milli: int, gpu_milli: int, node_name: str | None = None) -> dict:
    p = pod(name, cpu=f"{cpu_milli}m", memory="1Gi", node_name=node_name)
    if gpu_milli:
        p["spec"]["containers"][0]["resources"]["requests"][GPU] = str(gpu_milli)
    return p


@pytest.mark.parametrize(
    ("node_cpu", "node_gpus", "used_cpu", "used_gpu", "cpu_req", "gpu_req"),
    [
        (64000, 8, 16000, 2000, 8000, 500),  # s = 0.15625 + 0.34375: exactly 50
        (96000, 2, 0, 0, 4000, 0),  # a CPU pod keeps the GPU term: 51.56 -> 51
        (32000, 0, 0, 0, 2000, 0),  # a CPU node: no GPU left, 88.28 -> 88
        (128000, 8, 120000, 7000, 8000, 1000),  # nothing left: 100
        (96000, 8, 4000, 0, 12000, 2000),  # 37.5 -> 37
    ],
)
def test_paper_best_fit_scores_as_best_fit_score_go(
    node_cpu, node_gpus, used_cpu, used_gpu, cpu_req, gpu_req
):
    """Cases computed from best_fit_score.go (hkust-adsl/kubernetes-scheduler-simulator,
    pkg/simulator/plugin/best_fit_score.go getBestFitScore; MaxSpec* in
    pkg/type/open-gpu-share/utils/const.go)."""
    st = ClusterState()
    log = Log(st)
    extra = {GPU: str(node_gpus * 1000)} if node_gpus else {}
    log(EV.NODE_ADDED, node("n", cpu=f"{node_cpu}m", memory="64Gi", **extra))
    if used_cpu:
        log(EV.POD_SUBMITTED, _gpu_pod("busy", used_cpu, used_gpu, node_name="n"))
    prof = load_profile(PROFILES / "paper-best-fit.yaml")
    got = Placer(st, prof).scores(_gpu_pod("p", cpu_req, gpu_req), "n")
    want = _go_best_fit(node_cpu - used_cpu, node_gpus * 1000 - used_gpu, cpu_req, gpu_req)
    assert got == {"PaperBestFit": want}


def test_paper_best_fit_defaults_and_checks_its_normalisers():
    def prof(args):
        return parse_profile(
            {
                "profiles": [
                    {
                        "plugins": {"score": {"enabled": [{"name": "PaperBestFit"}]}},
                        "pluginConfig": [{"name": "PaperBestFit", "args": args}],
                    }
                ]
            }
        )

    p = next(x for x in prof({}).plugins if x.kind == "PaperBestFit")
    assert p.resources == (("cpu", 1), (GPU, 1)) and p.max_spec == (128000, 8000)
    with pytest.raises(ProfileError, match="maxSpec"):
        prof({"resources": [{"name": "memory"}]})
    with pytest.raises(ProfileError, match="only resources"):
        prof({"base": 2})


def _identical(names: list[str]) -> tuple[ClusterState, Log]:
    st = ClusterState()
    log = Log(st)
    for n in names:
        log(EV.NODE_ADDED, node(n, cpu="8"))
    return st, log


def _first_placement(names: list[str], config: PassConfig, seed: int = 0) -> str:
    st, log = _identical(names)
    log(EV.POD_SUBMITTED, pod("p", cpu="1"))
    sp = SchedulingPass(st, Placer(st, seed=seed), config)
    out = sp.run([Target("pod", "ns/p")])
    return out.placements[0].bindings[0][1]


def test_node_order_ties_go_to_the_seeds_first_node_whatever_the_order_nodes_came_in():
    names = [f"node-{i:02d}" for i in range(40)]
    cfg = PassConfig(preemption=False, tie_break="node-order", tie_seed=7)
    first = min(names, key=lambda n: node_order_rank(7, n))
    # Placer seeds and node insertion order do not matter: the order is the tie_seed's.
    assert {_first_placement(names, cfg, seed) for seed in range(5)} == {first}
    assert _first_placement(list(reversed(names)), cfg) == first
    # Another tie_seed, another order (a random permutation per seed, as the artifact's).
    firsts = {
        _first_placement(names, PassConfig(preemption=False, tie_break="node-order", tie_seed=s))
        for s in range(8)
    }
    assert len(firsts) > 1


def test_random_ties_draw_with_the_placers_seed():
    names = [f"node-{i:02d}" for i in range(40)]
    cfg = PassConfig(preemption=False)
    assert _first_placement(names, cfg, 3) == _first_placement(names, cfg, 3)
    assert len({_first_placement(names, cfg, s) for s in range(8)}) > 1


def test_pass_config_refuses_unknown_modes():
    with pytest.raises(ValueError, match="tie_break"):
        PassConfig(tie_break="smallest")
    with pytest.raises(ValueError, match="gpu_choice"):
        PassConfig(gpu_choice="worst")


def _gpu_cluster(gpus_used: dict[str, int]) -> tuple[ClusterState, DeviceTable, Log]:
    """Nodes of 2 GPUs; ``gpus_used[node]`` whole GPUs taken by a bound pod."""
    st = ClusterState()
    log = Log(st)
    table = DeviceTable()
    for name in gpus_used:
        log(EV.NODE_ADDED, node(name, cpu="32", memory="64Gi", **{GPU: "2000"}))
    for name, used in gpus_used.items():
        n = st.node_index[name]
        table.set_node(n, 2, "T4", 32000)
        if used:
            log(EV.POD_SUBMITTED, _gpu_pod(f"on-{name}", 1000, used * 1000, node_name=name))
            table.bind(n, used * 1000, 1000, tuple(range(used)))
    # FGD's target workload: whole-GPU pods only, so every whole-GPU placement has Δ = 0.
    table.set_target([(1000, 1000, 1, None, 1.0)])
    return st, table, log


def test_fgd_pack_sends_equal_fgd_scores_to_the_fullest_node():
    names = [f"g{i}" for i in range(12)]
    used = dict.fromkeys(names, 0)
    used["g7"] = 1  # the one node with a GPU already taken
    pack = load_profile(PROFILES / "fgd-pack.yaml")
    plain = load_profile(PROFILES / "fgd.yaml")
    for seed in range(5):
        st, table, log = _gpu_cluster(used)
        log(EV.POD_SUBMITTED, _gpu_pod("p", 1000, 1000))
        sp = SchedulingPass(st, Placer(st, pack, seed=seed), devices=table)
        # Whole GPUs anywhere leave the target's fragmentation unchanged: one FGD score.
        assert sp.run([Target("pod", "ns/p")]).placements[0].bindings == [("ns/p", "g7", (1,))]
    spread = set()
    for seed in range(8):
        st, table, log = _gpu_cluster(used)
        log(EV.POD_SUBMITTED, _gpu_pod("p", 1000, 1000))
        sp = SchedulingPass(st, Placer(st, plain, seed=seed), devices=table)
        spread.add(sp.run([Target("pod", "ns/p")]).placements[0].bindings[0][1])
    assert len(spread) > 1  # plain FGD draws among the ties


def test_random_gpu_choice_draws_among_the_fitting_devices():
    st = ClusterState()
    log = Log(st)
    log(EV.NODE_ADDED, node("g", cpu="64", memory="64Gi", **{GPU: "4000"}))
    chosen = set()
    for seed in range(12):
        table = DeviceTable()
        table.set_node(st.node_index["g"], 4, "T4", 64000)
        table.bind(st.node_index["g"], 800, 0, (2,))  # device 2 has 200 left: no fit
        cfg = PassConfig(preemption=False, gpu_choice="random", tie_seed=seed)
        log(EV.POD_SUBMITTED, _gpu_pod(f"p{seed}", 1000, 500))
        sp = SchedulingPass(st, Placer(st), cfg, devices=table)
        (_, _, devs) = sp.run([Target("pod", f"ns/p{seed}")]).placements[0].bindings[0]
        chosen.update(devs)
    assert chosen == {0, 1, 3}
    # "fit" takes the fullest fitting device: here all fitting ones are idle, the first.
    table = DeviceTable()
    table.set_node(st.node_index["g"], 4, "T4", 64000)
    assert table.choose(st.node_index["g"], 500) == (0,)


def test_node_order_rank_is_a_seeded_permutation():
    names = [f"n{i}" for i in range(100)]
    r = np.array([node_order_rank(1, n) for n in names])
    assert len(set(r.tolist())) == 100 and (r >= 0).all()
    assert [node_order_rank(1, n) for n in names] == r.tolist()
