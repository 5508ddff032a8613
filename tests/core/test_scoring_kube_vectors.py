"""kube-scheduler v1.30 noderesources test vectors, ported as table tests.

Each case is the upstream one (least_allocated_test.go, most_allocated_test.go,
balanced_allocation_test.go, requested_to_capacity_ratio_test.go); the comment
shows kube's arithmetic. Pods built with ``make_pod()`` and no ``Req`` have no
containers, so they get no non-zero defaults, exactly as ``st.MakePod().Obj()``.
"""

import pytest

from esched.core.profile import ProfileError, parse_profile
from support.kube import balanced_profile, fit_profile, make_node, make_pod, milli_node, scores

N_4000_10000 = {"cpu": "4000", "memory": "10000"}
N_6000_10000 = {"cpu": "6000", "memory": "10000"}
N_10000_20000 = {"cpu": "10000", "memory": "20000"}
REQ_1000_2000 = {"cpu": "1000", "memory": "2000"}
REQ_2000_3000 = {"cpu": "2000", "memory": "3000"}
EXT = "example.com/ext"
EXT_SET = [
    {"name": "cpu", "weight": 1},
    {"name": "memory", "weight": 1},
    {"name": EXT, "weight": 1},
]


def n(name, cap):
    return make_node(name, cap)


LEAST = [
    # (100 + 100) / 2 = 100 on both
    (
        "nothing scheduled, nothing requested",
        make_pod(),
        [n("node1", N_4000_10000), n("node2", N_4000_10000)],
        [],
        None,
        [100, 100],
    ),
    # node1 cpu (4000-3000)*100/4000=25, mem 50 -> 37; node2 cpu 50, mem 50 -> 50
    (
        "nothing scheduled, resources requested, differently sized nodes",
        make_pod(REQ_1000_2000, REQ_2000_3000),
        [n("node1", N_4000_10000), n("node2", N_6000_10000)],
        [],
        None,
        [37, 50],
    ),
    # existing pods have no containers: no non-zero defaults -> 100, 100
    (
        "no resources requested, pods scheduled",
        make_pod(),
        [n("node1", N_4000_10000), n("node2", N_4000_10000)],
        [
            make_pod(node="node1"),
            make_pod(node="node1"),
            make_pod(node="node2"),
            make_pod(node="node2"),
        ],
        None,
        [100, 100],
    ),
    # node1 cpu (10000-6000)/10000=40, mem 100 -> 70; node2 cpu 40, mem 75 -> 57
    (
        "no resources requested, pods scheduled with resources",
        make_pod(),
        [n("node1", N_10000_20000), n("node2", N_10000_20000)],
        [
            make_pod({"cpu": "3000", "memory": "0"}, node="node1"),
            make_pod({"cpu": "3000", "memory": "0"}, node="node1"),
            make_pod({"cpu": "3000", "memory": "0"}, node="node2"),
            make_pod({"cpu": "3000", "memory": "5000"}, node="node2"),
        ],
        None,
        [70, 57],
    ),
    # node1 cpu 40, mem 75 -> 57; node2 cpu 40, mem 50 -> 45
    (
        "resources requested, pods scheduled with resources",
        make_pod(REQ_1000_2000, REQ_2000_3000),
        [n("node1", N_10000_20000), n("node2", N_10000_20000)],
        [
            make_pod({"cpu": "3000", "memory": "0"}, node="node1"),
            make_pod({"cpu": "3000", "memory": "5000"}, node="node2"),
        ],
        None,
        [57, 45],
    ),
    # node2 memory 50000: (50000-10000)*100/50000 = 80 -> (40 + 80) / 2 = 60
    (
        "resources requested, pods scheduled with resources, differently sized nodes",
        make_pod(REQ_1000_2000, REQ_2000_3000),
        [n("node1", N_10000_20000), n("node2", {"cpu": "10000", "memory": "50000"})],
        [
            make_pod({"cpu": "3000", "memory": "0"}, node="node1"),
            make_pod({"cpu": "3000", "memory": "5000"}, node="node2"),
        ],
        None,
        [57, 60],
    ),
    # cpu 6000 > 4000 -> 0; node1 mem 100 -> 50; node2 mem 50 -> 25
    (
        "requested resources exceed node capacity",
        make_pod({"cpu": "3000", "memory": "0"}),
        [n("node1", N_4000_10000), n("node2", N_4000_10000)],
        [
            make_pod({"cpu": "3000", "memory": "0"}, node="node1"),
            make_pod({"cpu": "3000", "memory": "5000"}, node="node2"),
        ],
        None,
        [50, 25],
    ),
    # no allocatable at all: every resource skipped -> 0
    (
        "zero node resources, pods scheduled with resources",
        make_pod(),
        [n("node1", {}), n("node2", {})],
        [
            make_pod({"cpu": "3000", "memory": "0"}, node="node1"),
            make_pod({"cpu": "3000", "memory": "5000"}, node="node2"),
        ],
        None,
        [0, 0],
    ),
    # (25*1 + 50*2) / 3 = 41; (50 + 100) / 3 = 50
    (
        "different weight on CPU and memory",
        make_pod(REQ_1000_2000, REQ_2000_3000),
        [n("node1", N_4000_10000), n("node2", N_6000_10000)],
        [],
        [{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 1}],
        [41, 50],
    ),
    # extended resource not requested: skipped -> (50 + 50) / 2
    (
        "bypass extended resource if the pod does not request",
        make_pod(REQ_1000_2000, REQ_2000_3000),
        [n("node1", N_6000_10000), n("node2", {**N_6000_10000, EXT: "4"})],
        [],
        EXT_SET,
        [50, 50],
    ),
    # ext: node1 (4-2)/4 = 50, node2 (10-2)/10 = 80 -> (50+50+50)/3, (50+50+80)/3
    (
        "honor extended resource if the pod requests",
        make_pod({"cpu": "3000", "memory": "5000", EXT: "2"}),
        [n("node1", {**N_6000_10000, EXT: "4"}), n("node2", {**N_6000_10000, EXT: "10"})],
        [],
        EXT_SET,
        [50, 60],
    ),
]

MOST = [
    (
        "nothing scheduled, nothing requested",
        make_pod(),
        [n("node1", N_4000_10000), n("node2", N_4000_10000)],
        [],
        None,
        [0, 0],
    ),
    # node1 cpu 3000*100/4000=75, mem 50 -> 62; node2 50, 50 -> 50
    (
        "nothing scheduled, resources requested, differently sized nodes",
        make_pod(REQ_1000_2000, REQ_2000_3000),
        [n("node1", N_4000_10000), n("node2", N_6000_10000)],
        [],
        None,
        [62, 50],
    ),
    # node1 cpu 60, mem 0 -> 30; node2 cpu 60, mem 25 -> 42
    (
        "no resources requested, pods scheduled with resources",
        make_pod(),
        [n("node1", N_10000_20000), n("node2", N_10000_20000)],
        [
            make_pod({"cpu": "3000", "memory": "0"}, node="node1"),
            make_pod({"cpu": "3000", "memory": "0"}, node="node1"),
            make_pod({"cpu": "3000", "memory": "0"}, node="node2"),
            make_pod({"cpu": "3000", "memory": "5000"}, node="node2"),
        ],
        None,
        [30, 42],
    ),
    # node1 60, 25 -> 42; node2 60, 50 -> 55
    (
        "resources requested, pods scheduled with resources",
        make_pod(REQ_1000_2000, REQ_2000_3000),
        [n("node1", N_10000_20000), n("node2", N_10000_20000)],
        [
            make_pod({"cpu": "3000", "memory": "0"}, node="node1"),
            make_pod({"cpu": "3000", "memory": "5000"}, node="node2"),
        ],
        None,
        [42, 55],
    ),
    # node1 100, 90 -> 95; node2 50, 100 -> 75
    (
        "resources requested equal node capacity",
        make_pod({"cpu": "2000", "memory": "4000"}, {"cpu": "3000", "memory": "5000"}),
        [
            n("node1", {"cpu": "5000", "memory": "10000"}),
            n("node2", {"cpu": "10000", "memory": "9000"}),
        ],
        [],
        None,
        [95, 75],
    ),
    # (75*1 + 50*2) / 3 = 58; (50 + 100) / 3 = 50
    (
        "different weights",
        make_pod(REQ_1000_2000, REQ_2000_3000),
        [n("node1", N_4000_10000), n("node2", N_6000_10000)],
        [],
        [{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 1}],
        [58, 50],
    ),
    # non-zero defaults: node1 cpu 300m of 250m capped -> 100, mem 600Mi/1000Mi -> 60 -> 80;
    # node2 100m/250m -> 40, 200Mi/1000Mi -> 20 -> 30
    (
        "no resources requested, pods scheduled, nonzero request for resource",
        make_pod(containers=1),
        [
            n("node1", {"cpu": "250m", "memory": "1000Mi"}),
            n("node2", {"cpu": "250m", "memory": "1000Mi"}),
        ],
        [make_pod(containers=1, node="node1"), make_pod(containers=1, node="node1")],
        None,
        [80, 30],
    ),
    (
        "bypass extended resource if the pod does not request",
        make_pod(REQ_1000_2000, REQ_2000_3000),
        [n("node1", N_6000_10000), n("node2", {**N_6000_10000, EXT: "4"})],
        [],
        EXT_SET,
        [50, 50],
    ),
    # ext: node1 2/4 -> 50, node2 2/10 -> 20 -> 50, 40
    (
        "honor extended resource if the pod request",
        make_pod({"cpu": "3000", "memory": "5000", EXT: "2"}),
        [n("node1", {**N_6000_10000, EXT: "4"}), n("node2", {**N_6000_10000, EXT: "10"})],
        [],
        EXT_SET,
        [50, 40],
    ),
    # ext weight 2 but not requested: skipped -> (50 + 40) / 2 = 45 on both
    (
        "if the node doesn't have a resource",
        make_pod({"cpu": "3000", "memory": "4000"}),
        [n("node1", N_6000_10000), n("node2", {**N_6000_10000, EXT: "4"})],
        [],
        [{"name": EXT, "weight": 2}, {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
        [45, 45],
    ),
]


@pytest.mark.parametrize(
    ("name", "pod", "nodes", "existing", "resources", "expected"), LEAST, ids=[c[0] for c in LEAST]
)
def test_least_allocated_matches_kube(name, pod, nodes, existing, resources, expected):
    assert scores(fit_profile("LeastAllocated", resources), pod, nodes, existing) == expected


@pytest.mark.parametrize(
    ("name", "pod", "nodes", "existing", "resources", "expected"), MOST, ids=[c[0] for c in MOST]
)
def test_most_allocated_matches_kube(name, pod, nodes, existing, resources, expected):
    assert scores(fit_profile("MostAllocated", resources), pod, nodes, existing) == expected


CPU_AND_MEMORY = ({"cpu": "1000m", "memory": "2000"}, {"cpu": "2000m", "memory": "3000"})
CPU_ONLY = ({"cpu": "1000m", "memory": "0"}, {"cpu": "2000m", "memory": "0"})
CPU_MEM_GPU = (
    {"cpu": "1000m", "memory": "2000"},
    {"cpu": "2000m", "memory": "3000", "nvidia.com/gpu": "3"},
)
GPU3 = [
    {"name": "cpu", "weight": 1},
    {"name": "memory", "weight": 1},
    {"name": "nvidia.com/gpu", "weight": 1},
]

BALANCED = [
    # node1 |0.75 - 0.5| / 2 = 0.125 -> 87; node2 0.5, 0.5 -> 100
    (
        "nothing scheduled, resources requested, differently sized nodes",
        make_pod(*CPU_AND_MEMORY),
        [milli_node("node1", 4000, 10000), milli_node("node2", 6000, 10000)],
        [],
        None,
        [87, 100],
    ),
    # node1 |0.6 - 0.25| / 2 = 0.175 -> 82; node2 |0.6 - 0.5| / 2 -> 95
    (
        "resources requested, pods scheduled with resources",
        make_pod(*CPU_AND_MEMORY),
        [milli_node("node1", 10000, 20000), milli_node("node2", 10000, 20000)],
        [make_pod(*CPU_ONLY, node="node1"), make_pod(*CPU_AND_MEMORY, node="node2")],
        None,
        [82, 95],
    ),
    # node2 memory 50000: |0.6 - 0.2| / 2 = 0.2 -> 80
    (
        "resources requested, pods scheduled with resources, differently sized nodes",
        make_pod(*CPU_AND_MEMORY),
        [milli_node("node1", 10000, 20000), milli_node("node2", 10000, 50000)],
        [make_pod(*CPU_ONLY, node="node1"), make_pod(*CPU_AND_MEMORY, node="node2")],
        None,
        [82, 80],
    ),
    # node1 fractions 1, 0 -> 50; node2 1, 0.5 -> 75
    (
        "requested resources at node capacity",
        make_pod(*CPU_ONLY),
        [milli_node("node1", 6000, 10000), milli_node("node2", 6000, 10000)],
        [make_pod(*CPU_ONLY, node="node1"), make_pod(*CPU_AND_MEMORY, node="node2")],
        None,
        [50, 75],
    ),
    # three fractions (cpu 3000/3500, mem 5000/40000, gpu 4/8 or 1/8): std 0.3002 / 0.345
    (
        "include scalar resource on a node for balanced resource allocation",
        make_pod({"memory": "0", "nvidia.com/gpu": "1"}),
        [
            milli_node("node1", 3500, 40000, {"nvidia.com/gpu": 8}),
            milli_node("node2", 3500, 40000, {"nvidia.com/gpu": 8}),
        ],
        [make_pod(*CPU_AND_MEMORY, node="node2"), make_pod(*CPU_MEM_GPU, node="node1")],
        GPU3,
        [70, 65],
    ),
    # gpu not requested: skipped on node1, absent on node2 -> |0.857 - 0.125| / 2 -> 63
    (
        "node without the scalar resource should skip the scalar resource",
        make_pod(*CPU_AND_MEMORY),
        [milli_node("node1", 3500, 40000, {"nvidia.com/gpu": 8}), milli_node("node2", 3500, 40000)],
        [],
        GPU3,
        [63, 63],
    ),
]


@pytest.mark.parametrize(
    ("name", "pod", "nodes", "existing", "resources", "expected"),
    BALANCED,
    ids=[c[0] for c in BALANCED],
)
def test_balanced_allocation_matches_kube(name, pod, nodes, existing, resources, expected):
    assert scores(balanced_profile(resources), pod, nodes, existing) == expected


LEAST_SHAPE = [{"utilization": 0, "score": 10}, {"utilization": 100, "score": 0}]
RTCR = [
    (
        "nothing scheduled, nothing requested (least requested nodes have priority)",
        make_pod(),
        [n("node1", N_4000_10000), n("node2", N_4000_10000)],
        [make_pod(node="node1"), make_pod(node="node1")],
        [100, 100],
    ),
    # node1 cpu util 75 -> 100 - 75 = 25, mem 50 -> 50: round(75 / 2) = 38; node2 50, 50
    (
        "nothing scheduled, resources requested, differently sized nodes",
        make_pod(REQ_1000_2000, REQ_2000_3000),
        [n("node1", N_4000_10000), n("node2", N_6000_10000)],
        [make_pod(node="node1"), make_pod(node="node1")],
        [38, 50],
    ),
    (
        "no resources requested, pods scheduled with resources",
        make_pod(),
        [n("node1", N_4000_10000), n("node2", N_6000_10000)],
        [
            make_pod({"cpu": "3000", "memory": "5000"}, node="node1"),
            make_pod({"cpu": "3000", "memory": "5000"}, node="node2"),
        ],
        [38, 50],
    ),
]


@pytest.mark.parametrize(
    ("name", "pod", "nodes", "existing", "expected"), RTCR, ids=[c[0] for c in RTCR]
)
def test_requested_to_capacity_ratio_matches_kube(name, pod, nodes, existing, expected):
    prof = fit_profile("RequestedToCapacityRatio", shape=LEAST_SHAPE)
    assert scores(prof, pod, nodes, existing) == expected


FOO = [{"name": "intel.com/foo", "weight": 1}]
BIN_PACK = [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 1}]
NODES_FOO = [
    milli_node("node1", 4000, 10000 * 1024 * 1024, {"intel.com/foo": 8}),
    milli_node("node2", 4000, 10000 * 1024 * 1024, {"intel.com/foo": 4}),
]
SINGLE_EXTENDED = [
    ("nothing scheduled, nothing requested", make_pod(), [make_pod()], [0, 0]),
    # util 2/8 -> 25 -> shape 0..10: 2; 2/4 -> 50 -> 5
    (
        "resources requested, pods scheduled with less resources",
        make_pod({"intel.com/foo": "2"}),
        [make_pod()],
        [2, 5],
    ),
    # node2 already has 2: (2+2)/4 -> 100 -> 10
    (
        "resources requested, pods scheduled with resources, on node with existing pod running",
        make_pod({"intel.com/foo": "2"}),
        [make_pod({"intel.com/foo": "2"}, node="node2")],
        [2, 10],
    ),
    (
        "resources requested, pods scheduled with more resources",
        make_pod({"intel.com/foo": "4"}),
        [make_pod()],
        [5, 10],
    ),
]


@pytest.mark.parametrize(
    ("name", "pod", "existing", "expected"), SINGLE_EXTENDED, ids=[c[0] for c in SINGLE_EXTENDED]
)
def test_bin_packing_single_extended_resource_matches_kube(name, pod, existing, expected):
    prof = fit_profile("RequestedToCapacityRatio", resources=FOO, shape=BIN_PACK)
    assert scores(prof, pod, NODES_FOO, existing) == expected


@pytest.mark.parametrize("weight", [-1, 0, 101])
def test_resource_weights_outside_1_to_100_are_rejected(weight):
    with pytest.raises(ProfileError, match=r"scoringStrategy.resources\[0\].weight"):
        parse_profile(fit_profile("LeastAllocated", [{"name": "memory", "weight": weight}]))
