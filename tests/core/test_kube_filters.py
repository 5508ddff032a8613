"""kube-scheduler's filter plugins, table by table, on the one feasibility path.

Each table is ported from kubernetes/kubernetes ``pkg/scheduler/framework/plugins/
<plugin>/*_test.go`` (the case names are kube's); a kube ``wantStatus`` of nil is a
fit here, an ``Unschedulable``/``UnschedulableAndUnresolvable`` status is the reason
message esched gives for that node (``Placer.fits``, the same words ``explain`` and the
unschedulable event use).
"""

from __future__ import annotations

import pytest

from esched.core import ClusterState, Placer
from support.fold import EV, Log, commit, node, pod, ref

NODE_NAME = "node(s) didn't match the requested node name"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"


def _placer(*nodes: dict) -> tuple[ClusterState, Log, Placer]:
    st = ClusterState()
    log = Log(st)
    for n in nodes:
        log(EV.NODE_ADDED, n)
    return st, log, Placer(st)


# ---------------------------------------------------------------- NodeName
# nodename/node_name_test.go TestNodeName: (case, pod's spec.nodeName, node, want).
NODE_NAME_CASES = [
    ("no host specified", None, "foo", []),
    ("host matches", "foo", "foo", []),
    ("host doesn't match", "bar", "foo", [NODE_NAME]),
]


@pytest.mark.parametrize(("case", "wanted", "node_name", "want"), NODE_NAME_CASES)
def test_node_name_filter_kube_table(case, wanted, node_name, want):
    _, _, placer = _placer(node(node_name))
    manifest = pod("p", node_name=wanted)
    assert placer.fits(manifest, node_name) == want, case


def test_a_pod_naming_a_missing_node_stays_pending_with_kubes_reason():
    st, log, placer = _placer(node("a"), node("b"))
    log(EV.POD_SUBMITTED, pod("p", node_name="c"))
    assert st.pod("ns/p")["phase"] == "Pending"
    assert placer.place("ns/p", assume=False) is None
    rows = placer.explain("ns/p")["nodes"]
    assert [r["reasons"] for r in rows] == [[NODE_NAME], [NODE_NAME]]


def test_a_pod_naming_a_node_is_placed_there_once_it_exists_and_nowhere_else():
    _, log, placer = _placer(node("a"))
    log(EV.POD_SUBMITTED, pod("p", node_name="z"))
    assert placer.place("ns/p", assume=False) is None
    # The same placer: the class's node slot follows the node's arrival and removal.
    log(EV.NODE_ADDED, node("z"))
    assert placer.place("ns/p", assume=False)[0] == "z"
    log(EV.NODE_REMOVED, {"metadata": {"name": "z"}})
    assert placer.place("ns/p", assume=False) is None


def test_a_pod_naming_a_known_node_is_bound_there_at_submission():
    # esched folds spec.nodeName on a known node as a binding made outside (the pod
    # runs there), as the API server's bound pods are: kube-scheduler never sees them.
    st, log, _ = _placer(node("a"), node("b"))
    log(EV.POD_SUBMITTED, pod("p", node_name="b"))
    assert st.pod("ns/p")["phase"] == "Running"
    assert st.pod("ns/p")["node"] == "b"


# ---------------------------------------------------------------- matchFields
def _fields(*terms: list[dict]) -> dict:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [dict(t) for t in terms]
            }
        }
    }


def _name_in(*names: str, op: str = "In") -> dict:
    return {"key": "metadata.name", "operator": op, "values": list(names)}


FOO_BAR = {"key": "foo", "operator": "In", "values": ["bar"]}

# nodeaffinity/node_affinity_test.go TestNodeAffinity, the matchFields cases:
# (case, affinity, node name, node labels, want).
MATCH_FIELDS_CASES = [
    (
        "Pod with matchFields using In operator that matches the existing node",
        _fields({"matchFields": [_name_in("node_1")]}),
        "node_1",
        {},
        [],
    ),
    (
        "Pod with matchFields using In operator that does not match the existing node",
        _fields({"matchFields": [_name_in("node_1")]}),
        "node_2",
        {},
        [AFFINITY],
    ),
    (
        "Pod with two terms: matchFields does not match, but matchExpressions matches",
        _fields({"matchFields": [_name_in("node_1")]}, {"matchExpressions": [FOO_BAR]}),
        "node_2",
        {"foo": "bar"},
        [],
    ),
    (
        "Pod with one term: matchFields does not match, but matchExpressions matches",
        _fields({"matchFields": [_name_in("node_1")], "matchExpressions": [FOO_BAR]}),
        "node_2",
        {"foo": "bar"},
        [AFFINITY],
    ),
    (
        "Pod with one term: both matchFields and matchExpressions match",
        _fields({"matchFields": [_name_in("node_1")], "matchExpressions": [FOO_BAR]}),
        "node_1",
        {"foo": "bar"},
        [],
    ),
    (
        "Pod with two terms: both matchFields and matchExpressions do not match",
        _fields(
            {"matchFields": [_name_in("node_1")]},
            {
                "matchExpressions": [
                    {"key": "foo", "operator": "In", "values": ["not-match-to-bar"]}
                ]
            },
        ),
        "node_2",
        {"foo": "bar"},
        [AFFINITY],
    ),
    # Not in kube's table: NotIn, and a field other than metadata.name (kube's
    # NodeSelectorRequirementsAsFieldSelector refuses it: the term never matches).
    (
        "matchFields NotIn the node",
        _fields({"matchFields": [_name_in("node_1", op="NotIn")]}),
        "node_1",
        {},
        [AFFINITY],
    ),
    (
        "matchFields NotIn another node",
        _fields({"matchFields": [_name_in("x", op="NotIn")]}),
        "node_1",
        {},
        [],
    ),
    (
        "matchFields on another field",
        _fields(
            {"matchFields": [{"key": "spec.unschedulable", "operator": "In", "values": ["x"]}]}
        ),
        "node_1",
        {},
        [AFFINITY],
    ),
]


@pytest.mark.parametrize(("case", "affinity", "node_name", "labels", "want"), MATCH_FIELDS_CASES)
def test_match_fields_kube_table(case, affinity, node_name, labels, want):
    _, _, placer = _placer(node(node_name, labels=labels))
    assert placer.fits(pod("p", affinity=affinity), node_name) == want, case


def test_daemonset_style_pods_land_on_their_node_each():
    # A DaemonSet controller pins each pod with matchFields metadata.name In [node].
    names = [f"n{i}" for i in range(6)]
    _, log, placer = _placer(*(node(n) for n in names))
    for n in names:
        log(EV.POD_SUBMITTED, pod(f"ds-{n}", affinity=_fields({"matchFields": [_name_in(n)]})))
    assert [placer.place(f"ns/ds-{n}")[0] for n in names] == names
    # ...and such a pod for a node that does not exist yet waits, then fits there.
    log(EV.POD_SUBMITTED, pod("ds-late", affinity=_fields({"matchFields": [_name_in("late")]})))
    assert placer.place("ns/ds-late", assume=False) is None
    log(EV.NODE_ADDED, node("late"))
    assert placer.place("ns/ds-late", assume=False)[0] == "late"


# ---------------------------------------------------------------- NodeResourcesFit
# noderesources/fit_test.go TestEnoughRequests, the pod-level resources cases
# (podLevelResourcesEnabled: true). The node: makeAllocatableResources(10, 20, 32, 5, 20,
# 5), i.e. 10m cpu, 20 bytes of memory, 32 pods, 5 example.com/aaa, 20 ephemeral-storage,
# 5 hugepages-2Mi; ``used`` is the pod already there (newResourcePod(MilliCPU, Memory)).
FIT_NODE = {
    "cpu": "10m",
    "memory": "20",
    "pods": "32",
    "example.com/aaa": "5",
    "ephemeral-storage": "20",
    "hugepages-2Mi": "5",
}


def _res_pod(name: str, *containers: dict, init=(), level=None) -> dict:
    spec: dict = {
        "containers": [
            {"name": f"c{i}", "resources": {"requests": dict(r)}} for i, r in enumerate(containers)
        ]
        or [{"name": "c"}]
    }
    if init:
        spec["initContainers"] = [dict(c) for c in init]
    if level is not None:
        spec["resources"] = {"requests": dict(level)}
    return {"metadata": {"name": name, "namespace": "t"}, "spec": spec}


def _milli(cpu: int, mem: int, **extra: int) -> dict:
    return {"cpu": f"{cpu}m", "memory": str(mem), **{k: str(v) for k, v in extra.items()}}


FIT_CASES = [
    (
        "both pod-level and container-level resources fit",
        _res_pod("p", _milli(1, 1), level={"cpu": "1m", "memory": "2"}),
        (5, 5),
        [],
    ),
    (
        "pod-level cpu resource not fit",
        _res_pod("p", _milli(1, 1), level={"cpu": "7m", "memory": "2"}),
        (5, 5),
        ["Insufficient cpu"],
    ),
    (
        "pod-level memory resource not fit",
        _res_pod("p", _milli(1, 1), level={"cpu": "3m", "memory": "2"}),
        (5, 19),
        ["Insufficient memory"],
    ),
    (
        "pod-level hugepages resource fit",
        _res_pod("p", level={"cpu": "3m", "memory": "2", "hugepages-2Mi": "5"}),
        None,
        [],
    ),
    (
        "both pod-level and container-level hugepages resource fit",
        _res_pod(
            "p",
            {"cpu": "1m", "memory": "1", "hugepages-2Mi": "3"},
            level={"cpu": "3m", "memory": "2", "hugepages-2Mi": "5"},
        ),
        None,
        [],
    ),
    (
        "pod-level hugepages resource not fit",
        _res_pod("p", level={"cpu": "3m", "memory": "2", "hugepages-2Mi": "10"}),
        None,
        ["Insufficient hugepages-2Mi"],
    ),
    (
        "one pod-level cpu resource fits and all init and non-init containers resources fit",
        _res_pod(
            "p",
            _milli(1, 1),
            init=[{"name": "i", "resources": {"requests": _milli(1, 1)}}],
            level={"cpu": "3m", "memory": "2"},
        ),
        (5, 19),
        ["Insufficient memory"],
    ),
    # Not in kube's table (its sidecar cases are in component-helpers, see
    # tests/schemas/test_pod_requests_kube.py): a sidecar counts beside the containers,
    # so 3m + 3m does not fit beside 5m used, where a plain init container (max) would.
    (
        "sidecar counted with the containers",
        _res_pod(
            "p",
            _milli(3, 1),
            init=[
                {"name": "s", "restartPolicy": "Always", "resources": {"requests": _milli(3, 1)}}
            ],
        ),
        (5, 5),
        ["Insufficient cpu"],
    ),
    (
        "init container is the max, not the sum",
        _res_pod("p", _milli(3, 1), init=[{"name": "i", "resources": {"requests": _milli(3, 1)}}]),
        (5, 5),
        [],
    ),
]


@pytest.mark.parametrize(("case", "manifest", "used", "want"), FIT_CASES)
def test_node_resources_fit_pod_level_and_sidecars_kube_table(case, manifest, used, want):
    st, log, _ = _placer({"metadata": {"name": "n"}, "status": {"allocatable": FIT_NODE}})
    if used is not None:
        # newResourcePod on the NodeInfo: a pod bound there (spec.nodeName, known node).
        there = _res_pod("there", _milli(*used))
        there["spec"]["nodeName"] = "n"
        log(EV.POD_SUBMITTED, there)
        assert st.pod("t/there")["node"] == "n"
    placer = Placer(st)
    assert placer.fits(manifest, "n") == want, case


# ---------------------------------------------------------------- NodePorts
PORTS = "node(s) didn't have free ports for the requested pod ports"


def _port_pod(name: str, *infos: str, node_name: str | None = None, sidecar=None) -> dict:
    """nodeports/node_ports_test.go newPod: ports as ``PROTOCOL/hostIP/hostPort``."""
    ports = []
    for info in infos:
        proto, ip, port = info.split("/")
        ports.append(
            {"containerPort": int(port), "hostIP": ip, "hostPort": int(port), "protocol": proto}
        )
    m = pod(name, cpu="10m", memory="1Mi")
    m["spec"]["containers"][0]["ports"] = ports
    if sidecar is not None:
        init = {
            "name": "init",
            "ports": [{"containerPort": 8001, "hostPort": 8001, "protocol": "TCP"}],
        }
        if sidecar:
            init["restartPolicy"] = "Always"
        m["spec"]["containers"][0]["ports"] = []
        m["spec"]["initContainers"] = [init]
    if node_name:
        m["spec"]["nodeName"] = node_name
    return m


# nodeports/node_ports_test.go TestNodePorts and TestFits: (name, pod's ports, the ports
# of the pod already on the node, want).
NODE_PORTS_CASES = [
    ("skip filter", [], [], []),
    ("other port", ["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/9090"], []),
    ("same udp port", ["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/8080"], [PORTS]),
    ("same tcp port", ["TCP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], [PORTS]),
    ("different host ip", ["TCP/127.0.0.1/8080"], ["TCP/127.0.0.2/8080"], []),
    ("different protocol", ["UDP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], []),
    (
        "second udp port conflict",
        ["UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"],
        ["UDP/127.0.0.1/8080"],
        [PORTS],
    ),
    (
        "first tcp port conflict",
        ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"],
        ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"],
        [PORTS],
    ),
    (
        "first tcp port conflict due to 0.0.0.0 hostIP",
        ["TCP/0.0.0.0/8001"],
        ["TCP/127.0.0.1/8001"],
        [PORTS],
    ),
    (
        "TCP hostPort conflict due to 0.0.0.0 hostIP",
        ["TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"],
        ["TCP/127.0.0.1/8001"],
        [PORTS],
    ),
    (
        "second tcp port conflict to 0.0.0.0 hostIP",
        ["TCP/127.0.0.1/8001"],
        ["TCP/0.0.0.0/8001"],
        [PORTS],
    ),
    ("second different protocol", ["UDP/127.0.0.1/8001"], ["TCP/0.0.0.0/8001"], []),
    (
        "UDP hostPort conflict due to 0.0.0.0 hostIP",
        ["UDP/127.0.0.1/8001"],
        ["TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"],
        [PORTS],
    ),
    # TestFits
    ("non-conflicting ports", ["TCP/127.0.0.1/80"], ["TCP/127.0.0.1/9090"], []),
    (
        "multiple non-conflicting ports",
        ["TCP/127.0.0.1/80", "TCP/127.0.1.1/80", "TCP/127.0.1.1/90", "TCP/127.0.1.1/100"],
        ["TCP/127.0.0.1/9090", "TCP/127.0.0.1/9191", "TCP/127.0.1.1/8080"],
        [],
    ),
    ("same ports on different protocols", ["TCP/127.0.0.1/80"], ["UDP/127.0.0.1/80"], []),
    ("conflicting ports", ["TCP/127.0.0.1/80"], ["TCP/127.0.0.1/80"], [PORTS]),
    (
        "multiple ports, some conflicting",
        ["TCP/127.0.0.1/80", "TCP/127.0.1.1/80", "TCP/127.0.1.1/90", "TCP/127.0.1.1/100"],
        ["TCP/127.0.0.1/9090", "TCP/127.0.1.1/90", "TCP/127.0.1.1/8080"],
        [PORTS],
    ),
]


@pytest.mark.parametrize(("case", "ports", "existing", "want"), NODE_PORTS_CASES)
def test_node_ports_kube_table(case, ports, existing, want):
    st, log, _ = _placer(node("m1"))
    log(EV.POD_SUBMITTED, _port_pod("there", *existing, node_name="m1"))
    placer = Placer(st)
    assert placer.fits(_port_pod("p", *ports), "m1") == want, case


@pytest.mark.parametrize(
    ("case", "sidecar", "want"),
    [
        ("non-sidecar initContainer using hostPort", False, []),
        ("TCP hostPort conflict from sidecar initContainer", True, [PORTS]),
    ],
)
def test_node_ports_of_init_and_sidecar_containers_kube_table(case, sidecar, want):
    st, log, _ = _placer(node("m1"))
    log(EV.POD_SUBMITTED, _port_pod("there", "TCP/0.0.0.0/8001", node_name="m1"))
    placer = Placer(st)
    assert placer.fits(_port_pod("p", sidecar=sidecar), "m1") == want, case


def test_pods_with_the_same_host_port_spread_one_per_node():
    # The case: two pods with the same hostPort never share a node, neither
    # within one placer's assumed placements nor once the fold binds them.
    names = ["a", "b", "c"]
    st, log, placer = _placer(*(node(n) for n in names))
    for i in range(4):
        log(EV.POD_SUBMITTED, _port_pod(f"web-{i}", "TCP/0.0.0.0/80"))
    chosen = [placer.place(f"ns/web-{i}") for i in range(4)]
    assert sorted(c[0] for c in chosen[:3]) == names
    assert chosen[3] is None
    assert placer.explain("ns/web-3")["nodes"][0]["reasons"] == [PORTS]
    # The fold's own port table: bound on "a", the port is taken there for new placers.
    log(
        EV.PLACEMENT_COMMITTED, commit(("ns/web-0", "a", {"cpu": 10, "memory": 1 << 20, "pods": 1}))
    )
    assert st.node_port_keys(st.node_index["a"])[("0.0.0.0", "TCP", 80)] == 1
    fresh = Placer(st)
    assert fresh.fits("ns/web-1", "a") == [PORTS]
    assert fresh.fits("ns/web-1", "b") == []
    # ...and free again when the pod finishes; a snapshot carries it.
    copy = st.copy()
    assert Placer(copy).fits("ns/web-1", "a") == [PORTS]
    log(EV.POD_SUCCEEDED, ref("web-0"))
    assert st.node_port_keys(st.node_index["a"]) == {}
    assert Placer(st).fits("ns/web-1", "a") == []


def test_host_ports_are_part_of_the_equivalence_class():
    st, _, _ = _placer(node("a"))
    plain = st.intern_class(pod("x", cpu="10m", memory="1Mi"))
    web = st.intern_class(_port_pod("y", "TCP/0.0.0.0/80"))
    other = st.intern_class(_port_pod("z", "TCP/0.0.0.0/81"))
    assert len({plain, web, other}) == 3
    assert st.intern_class(_port_pod("w", "TCP/0.0.0.0/80")) == web


def test_an_undone_assumption_frees_the_port_in_the_view():
    st, log, _ = _placer(node("a"))
    log(EV.POD_SUBMITTED, _port_pod("p", "TCP/10.0.0.1/80"))
    placer = Placer(st)
    slot, n = st.pod_index["ns/p"], st.node_index["a"]
    placer.assume_binding(slot, n)
    assert placer.fits(_port_pod("q", "TCP/0.0.0.0/80"), "a") == [PORTS]
    placer.assume_binding(slot, n, -1)
    assert placer.fits(_port_pod("q", "TCP/0.0.0.0/80"), "a") == []


# ---------------------------------------------------------------- the commit service
def _proposal(*bindings: tuple[str, str]) -> dict:
    return {
        "proposal": "p",
        "replica": "r",
        "position": 0,
        "gang": None,
        "bindings": [
            {"pod": p, "node": n, "resources": {"cpu": 10, "memory": 1 << 20, "pods": 1}}
            for p, n in bindings
        ],
    }


def test_the_commit_service_refuses_a_second_binding_of_a_taken_host_port():
    from esched.core.validation import Validator

    st, log, _ = _placer(node("a"), node("b"))
    for name in ("w1", "w2"):
        log(EV.POD_SUBMITTED, _port_pod(name, "TCP/0.0.0.0/8080"))
    v = Validator(st)
    v.begin()
    assert v.check(_proposal(("ns/w1", "a"))).ok
    # The same batch: the first binding holds the port on "a".
    verdict = v.check(_proposal(("ns/w2", "a")))
    assert not verdict.ok and verdict.reason == "NodePorts" and PORTS in verdict.message
    assert v.check(_proposal(("ns/w2", "b"))).ok


def test_the_commit_service_refuses_a_pod_bound_away_from_its_node_name():
    from esched.core.validation import Validator

    st, log, _ = _placer(node("a"))
    log(EV.POD_SUBMITTED, pod("p", cpu="10m", memory="1Mi", node_name="z"))
    verdict = Validator(st).check(_proposal(("ns/p", "a")))
    assert not verdict.ok and verdict.reason == "NodeName" and NODE_NAME in verdict.message
