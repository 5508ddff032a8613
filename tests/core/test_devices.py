"""The per-device GPU table: exact GPU-sharing fit, device choice, FGD fragmentation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from esched.core import ClusterState, Placer, parse_profile
from esched.core._devices import DeviceTable, GangDevices, _py_node_frag, request_shape


def table(*free_per_node, cpu=64_000, model="T4") -> DeviceTable:
    t = DeviceTable()
    for n, free in enumerate(free_per_node):
        t.set_node(n, len(free), model, cpu)
        for i, f in enumerate(free):
            t.free_np[n, i] = f
    return t


def test_request_shape():
    assert request_shape(0) == (0, 0)
    assert request_shape(250) == (1, 250)
    assert request_shape(1000) == (1, 1000)
    assert request_shape(4000) == (4, 1000)
    with pytest.raises(ValueError, match="whole GPUs"):
        request_shape(1500)
    with pytest.raises(ValueError, match="negative"):
        request_shape(-1)


def test_share_needs_one_device_with_room_not_the_sum():
    # Four devices with 250 free each: 1000 free in all, yet a 500 share does not fit.
    t = table([250, 250, 250, 250])
    assert not t.fits(0, 500)
    assert t.fits(0, 250)
    assert not t.fits(0, 1000)


def test_whole_gpus_need_idle_devices():
    t = table([1000, 999, 1000, 0])
    assert t.fits(0, 2000)
    assert not t.fits(0, 3000)  # 2,999 free milli, but only two idle devices
    assert t.choose(0, 2000) == (0, 2)  # lowest index first


def test_share_goes_to_the_fullest_device_that_fits():
    t = table([1000, 300, 600, 500])
    assert t.choose(0, 400) == (3,)  # 500 is the least free that fits 400
    assert t.choose(0, 600) == (2,)
    assert t.choose(0, 700) == (0,)
    with pytest.raises(ValueError, match="does not fit"):
        t.choose(0, 2000)


def test_bind_release_exact_and_guarded():
    t = table([1000, 1000])
    t.bind(0, 300, 1000, (1,))
    t.bind(0, 700, 1000, (1,))
    assert t.free_of(0) == [1000, 0]
    assert t.cpu_free_np[0] == 62_000
    with pytest.raises(ValueError, match="has 0 milli free"):
        t.bind(0, 100, 0, (1,))
    t.release(0, 300, 1000, (1,))
    assert t.free_of(0) == [1000, 300]
    with pytest.raises(ValueError, match="exceed one GPU"):
        t.release(0, 800, 0, (1,))
    t.bind(0, 1000, 0, (0,))
    assert not t.fits(0, 1000) and t.fits(0, 300)


def test_fit_mask_counts_and_clears():
    t = table([250, 250], [1000, 0], [600, 600])
    mask = np.full(5, 7, dtype=np.uint8)
    assert t.fit_mask(500, mask) == 2
    assert mask.tolist() == [0, 1, 1, 0, 0]  # slots past the table never fit
    assert t.fit_mask(0, mask) == 3


def test_node_frag_by_hand():
    # FGD's F_n(m): all idle GPU if m cannot run on the node, else the idle milli on
    # devices with less free than m's per-GPU request.
    free = [1000, 500, 200, 0]  # 1,700 idle milli
    types = [
        (1000, 0, 0, None, 0.2),  # CPU-only: every idle milli is fragment -> 1700
        (1000, 500, 1, None, 0.3),  # 500 share: devices 0, 1 fit; 200 is fragment
        (1000, 1000, 2, None, 0.3),  # two whole GPUs: only one idle -> 1700
        (1000, 1000, 1, ("V100",), 0.2),  # model V100 only; node is model 0 -> 1700
    ]
    # model ids: _py_node_frag interns the names in the types; the node's model id 5
    # is none of them.
    f = _py_node_frag(free, 64_000, 5, types)
    assert f == pytest.approx(0.2 * 1700 + 0.3 * 200 + 0.3 * 1700 + 0.2 * 1700)


def test_node_frag_cpu_bound_node_is_all_fragment():
    types = [(8000, 500, 1, None, 1.0)]
    assert _py_node_frag([1000, 1000], 4000, 0, types) == pytest.approx(2000.0)
    assert _py_node_frag([1000, 1000], 8000, 0, types) == pytest.approx(0.0)


def test_fgd_prefers_the_placement_that_fragments_least():
    t = table([1000, 1000], [1000, 300])
    t.set_target([(0, 500, 1, None, 0.5), (0, 1000, 1, None, 0.5)])
    # F before: node 0 has none; node 1: the 300 device is fragment for both types -> 300.
    assert t.node_frag(0) == pytest.approx(0.0)
    assert t.node_frag(1) == pytest.approx(300.0)
    assert t.frag_total == pytest.approx(300.0)
    # A 300 share on node 1's 300 device uses up the fragment: delta -300.
    assert t.delta(1, 300) == pytest.approx(-300.0)
    assert t.choose(1, 300, 0, True) == (1,)
    # On node 0 it splits an idle GPU: the 700 left is a fragment for 1000-types (p .5).
    assert t.delta(0, 300) == pytest.approx(350.0)
    mask = np.ones(2, dtype=np.uint8)
    out = np.zeros(2, dtype=np.int64)
    t.fgd_scores(300, 0, mask, out, 1)
    assert out.tolist() == [
        math.floor(100 / (1 + math.exp(0.35))),
        math.floor(100 / (1 + math.exp(-0.3))),
    ]
    assert out[1] > out[0]
    # Memo: a second call recomputes nothing; a change of node 1 recomputes only it.
    t.fgd_scores(300, 0, mask, out, 1)
    assert t.memo_hits == 2
    t.bind(1, 300, 0, (1,))
    t.fgd_scores(300, 0, mask, out, 1)
    assert t.memo_hits == 3 and t.memo_misses == 3
    assert t.frag_total == pytest.approx(0.0)


def _state(nodes):
    st = ClusterState()
    pos = 0
    for name, gpus in nodes:
        pos += 1
        st.apply(
            {
                "type": "esched.node.added",
                "id": f"n{pos}",
                "data": {
                    "metadata": {"name": name},
                    "status": {
                        "allocatable": {
                            "cpu": "8",
                            "memory": "8Gi",
                            "pods": "10",
                            "esched.dev/gpu-milli": str(gpus * 1000),
                        }
                    },
                },
            },
            pos,
        )
    return st


POD = {
    "metadata": {"name": "p", "namespace": "t"},
    "spec": {
        "containers": [
            {"name": "c", "resources": {"requests": {"cpu": "1", "esched.dev/gpu-milli": "500"}}}
        ]
    },
}


def test_placer_mask_and_extra_hook():
    st = _state([("a", 1), ("b", 1), ("c", 1)])
    placer = Placer(st, parse_profile({}), seed=1)
    mask = np.array([0, 1, 0], dtype=np.uint8)
    assert placer.place(POD, assume=False, mask=mask)[0] == "b"
    none = np.zeros(3, dtype=np.uint8)
    assert placer.place(POD, assume=False, mask=none) is None
    extra = np.array([0, 0, 10_000], dtype=np.int64)
    node, score = placer.place(POD, assume=False, extra=extra)
    assert node == "c" and score >= 10_000
    with pytest.raises(ValueError, match="mask has 2 entries"):
        placer.place(POD, mask=np.ones(2, dtype=np.uint8))
    # The hook is per call: without it every node is a candidate again.
    seen = {placer.place(POD, assume=False)[0] for _ in range(30)}
    assert seen == {"a", "b", "c"}


def test_fgd_profile_plugin_is_external_to_the_placer():
    prof = parse_profile(
        {
            "profiles": [
                {
                    "plugins": {
                        "score": {
                            "disabled": [{"name": "*"}],
                            "enabled": [{"name": "FGD", "weight": 2}],
                        }
                    }
                }
            ]
        }
    )
    assert [(p.kind, p.weight) for p in prof.plugins] == [("FGD", 2), ("NodeGroupAffinity", 2)]
    placer = Placer(_state([("a", 1)]), prof)
    assert placer.plugin_names == ["NodeGroupAffinity"]


def _member(i: int, milli: int) -> dict:
    return {
        "metadata": {"name": f"m{i}", "namespace": "t"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "resources": {"requests": {"cpu": "1", "esched.dev/gpu-milli": str(milli)}},
                }
            ]
        },
    }


def _a_with_one_gpu_600_used_b_idle() -> tuple[ClusterState, DeviceTable]:
    """Node a: two GPUs, 600 milli of the first in use; node b: one idle GPU."""
    st = _state([("a", 2), ("b", 1)])
    dev = DeviceTable()
    dev.set_node(0, 2, None, 8000)
    dev.set_node(1, 1, None, 8000)
    dev.bind(0, 600, 0, (0,))
    return st, dev


def test_gang_plan_checks_each_members_devices():
    # Node a: two GPUs with 400 and 1000 milli free (1,400 in total); b: one idle GPU.
    # A gang of two 600-milli shares: the first fits a's idle GPU, after which a has
    # 400 + 400 free (800 in total, enough by the sum) but no device with 600: the
    # second must go to b. The plan binds each member's devices as it goes.
    st, dev = _a_with_one_gpu_600_used_b_idle()
    placer = Placer(st, parse_profile({}), seed=0)
    gd = GangDevices(dev, [600, 600], [1000, 1000], n_slots=st.n_nodes)
    plan = placer.plan_gang([_member(0, 600), _member(1, 600)], devices=gd)
    assert plan is not None and sorted(plan) == ["a", "b"]
    taken = dict(gd.taken)
    assert taken == {0: (1,), 1: (0,)}
    assert dev.free_of(0) == [400, 400] and dev.free_of(1) == [400]


def test_gang_plan_that_fails_gives_the_devices_back():
    # Three 600-milli members, room for two shares of 600 (a's idle GPU and b's).
    st, dev = _a_with_one_gpu_600_used_b_idle()
    placer = Placer(st, parse_profile({}), seed=0)
    before = placer.used_array().copy()
    gd = GangDevices(dev, [600] * 3, [1000] * 3, n_slots=st.n_nodes)
    assert placer.plan_gang([_member(i, 600) for i in range(3)], devices=gd) is None
    assert dev.free_of(0) == [400, 1000] and dev.free_of(1) == [1000]
    assert gd.taken == [None, None, None]
    assert (placer.used_array() == before).all()
    assert placer.gang_failure["fit"] == 2
    # Whole-GPU members need idle devices, not milli in total: 2 x 1 GPU fits (a's
    # idle GPU and b's), 3 do not, although 2,400 milli are free.
    gd = GangDevices(dev, [1000] * 3, [0] * 3, n_slots=st.n_nodes)
    assert placer.plan_gang([_member(i, 1000) for i in range(3)], devices=gd) is None
    gd = GangDevices(dev, [1000] * 2, [0] * 2, n_slots=st.n_nodes)
    assert sorted(placer.plan_gang([_member(i, 1000) for i in range(2)], devices=gd)) == ["a", "b"]


def test_node_without_a_model_runs_types_open_to_any_model():
    # Philly, ITP and DLRM nodes carry no GPU model (model id -1): a type open to any
    # model can use their idle GPUs; a type pinned to a model cannot.
    free = [1000, 1000]
    assert _py_node_frag(free, 64_000, -1, [(1000, 1000, 1, None, 1.0)]) == 0.0
    assert _py_node_frag(free, 64_000, -1, [(1000, 1000, 1, ("V100",), 1.0)]) == 2000.0


# ---------------------------------------------------------------------- devices of the fold


def _gpu_events(*pods: tuple[str, int]) -> list[dict]:
    """One node "g" with two GPUs (2000 milli) and pending pods (name, GPU milli)."""

    def env(i, type_, data):
        return {"specversion": "1.0", "id": f"e{i}", "source": "t", "type": type_, "data": data}

    out = [
        env(
            0,
            "esched.node.added",
            {
                "metadata": {"name": "g", "labels": {"esched.dev/gpu-model": "T4"}},
                "status": {
                    "allocatable": {
                        "cpu": "8",
                        "memory": "8Gi",
                        "pods": "10",
                        "esched.dev/gpu-milli": "2000",
                    }
                },
            },
        )
    ]
    for name, g in pods:
        req = {"cpu": "1", "esched.dev/gpu-milli": str(g)}
        out.append(
            env(
                len(out),
                "esched.pod.submitted",
                {
                    "metadata": {"name": name, "namespace": "t"},
                    "spec": {"containers": [{"name": "c", "resources": {"requests": req}}]},
                },
            )
        )
    return out


def _commit(i: int, pod: str, g: int, devices: list[int] | None) -> dict:
    b = {"pod": f"t/{pod}", "node": "g", "resources": {"cpu": 1000, "esched.dev/gpu-milli": g}}
    if devices is not None:
        b["devices"] = devices
    return {
        "specversion": "1.0",
        "id": f"c{i}",
        "source": "t",
        "type": "esched.placement.committed",
        "data": {"proposal": f"p{i}", "replica": "r", "position": 1, "gang": None, "bindings": [b]},
    }


def test_the_fold_keeps_each_pods_devices_on_both_paths_and_in_snapshots():
    import orjson

    events = _gpu_events(("a", 600), ("b", 1000), ("c", 300))
    events += [_commit(1, "a", 600, [1]), _commit(2, "b", 1000, [0]), _commit(3, "c", 300, None)]
    by_dict = ClusterState()
    by_dict.apply_many(enumerate(events, start=1))
    by_bytes = ClusterState()
    by_bytes.apply_payloads([(i, orjson.dumps(e)) for i, e in enumerate(events, start=1)])
    for st in (by_dict, by_bytes, ClusterState.from_bytes(by_dict.to_bytes())):
        dev = {k: int(st.pod_dev_np[st.pod_index[f"t/{k}"]]) for k in "abc"}
        assert dev == {"a": 0b10, "b": 0b01, "c": 0}
        assert st.anomalies == {}
    # A finished pod gives its devices back.
    by_dict.apply(
        {
            "specversion": "1.0",
            "id": "s",
            "source": "t",
            "type": "esched.pod.succeeded",
            "data": {"metadata": {"name": "a", "namespace": "t"}},
        },
        len(events) + 1,
    )
    assert int(by_dict.pod_dev_np[by_dict.pod_index["t/a"]]) == 0


def test_a_binding_with_bad_devices_is_a_malformed_commit():
    events = [*_gpu_events(("a", 600)), _commit(1, "a", 600, [0, 0])]
    st = ClusterState()
    st.apply_many(enumerate(events, start=1))
    assert st.anomalies == {"malformed": 1}
    assert st.pod("t/a")["phase"] == "Pending"


def test_device_ledger_checks_room_per_device_through_a_batch():
    from esched.core.devices import DeviceLedger, device_free

    events = _gpu_events(("a", 600), ("b", 600), ("c", 400), ("d", 2000))
    events.append(_commit(1, "a", 600, [0]))
    st = ClusterState()
    st.apply_many(enumerate(events, start=1))
    g = st.node_index["g"]
    assert device_free(st, g, "esched.dev/gpu-milli", 1) == [400, 1000]
    ledger = DeviceLedger(st)
    b, c, d = (st.pod_index[f"t/{k}"] for k in "bcd")
    assert "has 400 milli free" in ledger.take(b, g, [0])
    assert "no GPU device 2" in ledger.take(b, g, [2])
    assert "takes 1 device" in ledger.take(b, g, [0, 1])
    assert ledger.take(b, g, [1]) is None
    assert "has 400 milli free" in ledger.take(d, g, [0, 1])  # whole GPUs: idle devices
    assert ledger.take(c, g, [0]) is None  # 400 beside a's 600
    assert "has 0 milli free" in ledger.take(c, g, [0])
    ledger.give_back(c, g, [0])
    assert ledger.take(c, g, [0]) is None
    ledger.begin()
    assert ledger.take(b, g, [1]) is None


def test_folded_devices_follow_the_state_and_drop_assumed_bindings():
    from esched.core.devices import FoldedDevices

    events = _gpu_events(("a", 600), ("b", 300))
    events.append(_commit(1, "a", 600, [1]))
    st = ClusterState()
    st.apply_many(enumerate(events, start=1))
    folded = FoldedDevices(st, fgd=True)
    folded.sync()
    g = st.node_index["g"]
    assert folded.table.free_of(g) == [1000, 400]
    assert folded.table.has_target  # FGD's target: the state's pods by shape
    folded.table.bind(g, 300, 1000, (0,))  # a pass's assumption
    folded.claim([("t/b", "g", (1,))])
    assert folded.table.free_of(g) == [700, 100]
    folded.sync()  # back to the state: the assumption and the claim are gone
    assert folded.table.free_of(g) == [1000, 400]
    st.apply(_commit(2, "b", 300, [1]), len(events) + 1)
    folded.sync()
    assert folded.table.free_of(g) == [1000, 100]


def test_a_pass_with_devices_places_on_a_device_with_room_and_says_why_not():
    from esched.core.devices import FoldedDevices
    from esched.core.schedule import SchedulingPass, Target

    events = _gpu_events(("a", 600), ("b", 600), ("c", 600), ("d", 400))
    events += [_commit(1, "a", 600, [0]), _commit(2, "b", 600, [1])]
    st = ClusterState()
    st.apply_many(enumerate(events, start=1))
    folded = FoldedDevices(st, fgd=False)
    folded.sync()
    sp = SchedulingPass(st, Placer(st), devices=folded.table)
    out = sp.run([Target("pod", "t/c"), Target("pod", "t/d")])
    # 800 milli free in sum, but 400 per device: c (600) fits no device, d (400) does.
    assert [p.bindings for p in out.placements] == [[("t/d", "g", (0,))]]
    assert out.unschedulable["t/c"][1] == {"InsufficientGPUDevices": 1}
    assert folded.table.free_of(st.node_index["g"]) == [0, 400]


def test_a_pass_reads_the_gpu_request_of_the_class_that_now_holds_a_reused_id():
    from esched.core.devices import FoldedDevices
    from esched.core.schedule import SchedulingPass, Target

    # a and b take most of both devices; x (800 milli) fits neither.
    events = _gpu_events(("a", 1000), ("b", 900), ("x", 800))
    events += [_commit(1, "a", 1000, [0]), _commit(2, "b", 900, [1])]
    st = ClusterState()
    st.apply_many(enumerate(events, start=1))
    folded = FoldedDevices(st, fgd=False)
    folded.sync()
    sp = SchedulingPass(st, Placer(st), devices=folded.table)  # kept, as a replica's
    out = sp.run([Target("pod", "t/x")])
    assert "t/x" in out.unschedulable
    x_class = st.pod_class_id("t/x")
    # x goes with its class; y, without a GPU, gets x's class id
    gone = {
        "specversion": "1.0",
        "id": "del-x",
        "source": "t",
        "type": "esched.pod.deleted",
        "data": {"metadata": {"name": "x", "namespace": "t"}},
    }
    y = dict(_gpu_events(("y", 0))[1], id="sub-y")
    y["data"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1"}
    st.apply_many(enumerate([gone, y], start=len(events) + 1))
    assert st.pod_class_id("t/y") == x_class
    folded.sync()
    out = sp.run([Target("pod", "t/y")])
    assert [p.bindings for p in out.placements] == [[("t/y", "g", ())]]
