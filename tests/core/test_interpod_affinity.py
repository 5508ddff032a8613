"""kube's InterPodAffinity filter (required terms) on the one feasibility path.

The single-node table is ported from kubernetes/kubernetes
``pkg/scheduler/framework/plugins/interpodaffinity/filtering_test.go``
(``TestRequiredAffinitySingleNode``; the case names are kube's): a kube ``wantStatus``
of nil is a fit here, else the reason message esched gives for the node
(``Placer.fits``, the words ``explain`` and the unschedulable event use). kube's
fixtures use the namespace ``""``; esched's pod keys need one, so ``default`` stands in
for it (the same one for incoming and existing pods, as in kube).
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from esched.core import ClusterState, Placer
from esched.core.reasons import unschedulable_message
from esched.core.schedule import PassConfig, SchedulingPass, Target
from esched.schemas.volcano_jobs import default_job
from support.events import NAMESPACE, one_pod_job
from support.fold import EV, Log, commit, envelope, node, pod

AFF = "node(s) didn't match pod affinity rules"
ANTI = "node(s) didn't match pod anti-affinity rules"
EXISTING = "node(s) didn't satisfy existing pods anti-affinity rules"
HOST = "kubernetes.io/hostname"

SEC = {"service": "securityscan"}
SEC2 = {"security": "S1"}
NODE1 = {"region": "r1", "zone": "z11"}


def sel(*exprs: tuple) -> dict:
    """A labelSelector of matchExpressions (key, operator, values...)."""
    return {
        "matchExpressions": [
            {"key": k, "operator": op, **({"values": list(vals)} if vals else {})}
            for k, op, *vals in exprs
        ]
    }


def term(selector: dict | None, key: str = "", **extra) -> dict:
    out = {"topologyKey": key, **extra}
    if selector is not None:
        out["labelSelector"] = selector
    return out


def lpod(name, labels, affinity=None, anti=None, namespace="default", node_name=None, **kw):
    """A pod with labels and required pod (anti-)affinity terms."""
    aff = {}
    if affinity:
        aff["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": affinity}
    if anti:
        aff["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": anti}
    spec = {"affinity": aff} if aff else {}
    p = pod(name, namespace=namespace, node_name=node_name, **spec, **kw)
    p["metadata"]["labels"] = dict(labels)
    return p


IN_SEC = sel(("service", "In", "securityscan", "value2"))
IN_AV = sel(("service", "In", "antivirusscan", "value2"))

# (kube's case name, incoming pod, existing pods on machine1, want)
SINGLE_NODE = [
    (
        "A pod that has no required pod affinity scheduling rules can schedule onto a node "
        "with no existing pods",
        lpod("p", {}),
        [],
        [],
    ),
    (
        "satisfies with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using "
        "In operator that matches the existing pod",
        lpod("p", SEC2, affinity=[term(IN_SEC, "region")]),
        [lpod("e", SEC)],
        [],
    ),
    (
        "satisfies the pod with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity "
        "using not in operator in labelSelector that matches the existing pod",
        lpod(
            "p",
            SEC2,
            affinity=[term(sel(("service", "NotIn", "securityscan3", "value3")), "region")],
        ),
        [lpod("e", SEC)],
        [],
    ),
    (
        "Does not satisfy the PodAffinity with labelSelector because of diff Namespace",
        lpod("p", SEC2, affinity=[term(IN_SEC, namespaces=["DiffNameSpace"])]),
        [lpod("e", SEC, namespace="ns")],
        [AFF],
    ),
    (
        "Doesn't satisfy the PodAffinity because of unmatching labelSelector with the existing pod",
        lpod("p", SEC, affinity=[term(IN_AV)]),
        [lpod("e", SEC)],
        [AFF],
    ),
    (
        "satisfies the PodAffinity with different label Operators in multiple "
        "RequiredDuringSchedulingIgnoredDuringExecution ",
        lpod(
            "p",
            SEC2,
            affinity=[
                term(sel(("service", "Exists"), ("wrongkey", "DoesNotExist")), "region"),
                term(
                    sel(("service", "In", "securityscan"), ("service", "NotIn", "WrongValue")),
                    "region",
                ),
            ],
        ),
        [lpod("e", SEC)],
        [],
    ),
    (
        "The labelSelector requirements(items of matchExpressions) are ANDed, the pod cannot "
        "schedule onto the node because one of the matchExpression item don't match.",
        lpod(
            "p",
            SEC2,
            affinity=[
                term(sel(("service", "Exists"), ("wrongkey", "DoesNotExist")), "region"),
                term(
                    sel(("service", "In", "securityscan2"), ("service", "NotIn", "WrongValue")),
                    "region",
                ),
            ],
        ),
        [lpod("e", SEC)],
        [AFF],
    ),
    (
        "satisfies the PodAffinity and PodAntiAffinity with the existing pod",
        lpod("p", SEC2, affinity=[term(IN_SEC, "region")], anti=[term(IN_AV, "node")]),
        [lpod("e", SEC)],
        [],
    ),
    (
        "satisfies the PodAffinity and PodAntiAffinity and PodAntiAffinity symmetry with the "
        "existing pod",
        lpod("p", SEC2, affinity=[term(IN_SEC, "region")], anti=[term(IN_AV, "node")]),
        [lpod("e", SEC, anti=[term(IN_AV, "node")])],
        [],
    ),
    (
        "satisfies the PodAffinity but doesn't satisfy the PodAntiAffinity with the existing pod",
        lpod("p", SEC2, affinity=[term(IN_SEC, "region")], anti=[term(IN_SEC, "zone")]),
        [lpod("e", SEC)],
        [ANTI],
    ),
    (
        "satisfies the PodAffinity and PodAntiAffinity but doesn't satisfy PodAntiAffinity "
        "symmetry with the existing pod",
        lpod("p", SEC, affinity=[term(IN_SEC, "region")], anti=[term(IN_AV, "node")]),
        [lpod("e", SEC, anti=[term(IN_SEC, "zone")])],
        [EXISTING],
    ),
    (
        # kube's existing pod sits on machine2, outside the snapshot: no pod counts.
        "pod matches its own Label in PodAffinity and that matches the existing pod Labels",
        lpod(
            "p", SEC, affinity=[term(sel(("service", "NotIn", "securityscan", "value2")), "region")]
        ),
        [],
        [AFF],
    ),
    (
        "verify that PodAntiAffinity from existing pod is respected when pod has no "
        "AntiAffinity constraints. doesn't satisfy PodAntiAffinity symmetry with the existing "
        "pod",
        lpod("p", SEC),
        [lpod("e", SEC, anti=[term(IN_SEC, "zone")])],
        [EXISTING],
    ),
    (
        "verify that PodAntiAffinity from existing pod is respected when pod has no "
        "AntiAffinity constraints. satisfy PodAntiAffinity symmetry with the existing pod",
        lpod("p", SEC),
        [lpod("e", SEC, anti=[term(sel(("service", "NotIn", "securityscan", "value2")), "zone")])],
        [],
    ),
]


def _cluster(*nodes: dict) -> tuple[ClusterState, Log]:
    st = ClusterState()
    log = Log(st)
    for n in nodes:
        log(EV.NODE_ADDED, n)
    return st, log


@pytest.mark.parametrize(("case", "incoming", "existing", "want"), SINGLE_NODE)
def test_required_affinity_single_node_kube_table(case, incoming, existing, want):
    st, log = _cluster(node("machine1", labels=NODE1))
    for e in existing:
        e["spec"]["nodeName"] = "machine1"
        log(EV.POD_SUBMITTED, e)
    assert Placer(st).fits(incoming, "machine1") == want, case


def _hosts(n: int, **labels_of) -> tuple[ClusterState, Log]:
    return _cluster(
        *(node(f"n{i}", labels={HOST: f"n{i}", **labels_of.get(f"n{i}", {})}) for i in range(n))
    )


WEB = {"app": "web"}
SPREAD = [term({"matchLabels": WEB}, HOST)]


def test_three_replicas_with_hostname_anti_affinity_on_two_nodes_place_two():
    st, log = _hosts(2)
    for i in range(3):
        log(EV.POD_SUBMITTED, lpod(f"w{i}", WEB, anti=SPREAD))
    placer = Placer(st)
    got = [placer.place(f"default/w{i}") for i in range(3)]
    assert sorted(g[0] for g in got[:2]) == ["n0", "n1"] and got[2] is None
    rows = placer.explain("default/w2")["nodes"]
    assert [r["reasons"] for r in rows] == [[ANTI], [ANTI]]


def test_the_fold_keeps_counts_on_bind_finish_and_node_relabel():
    st, log = _hosts(2)
    log(EV.POD_SUBMITTED, lpod("w0", WEB, node_name="n0"))
    log(EV.POD_SUBMITTED, lpod("w1", WEB, anti=SPREAD))
    placer = Placer(st)
    assert placer.fits("default/w1", "n0") == [ANTI] and placer.fits("default/w1", "n1") == []
    log(EV.POD_SUCCEEDED, {"metadata": {"name": "w0", "namespace": "default"}})
    assert placer.fits("default/w1", "n0") == []
    # A bound pod counts in its node's domain; relabelling the node moves it.
    log(EV.POD_SUBMITTED, lpod("w2", WEB, node_name="n1"))
    assert placer.fits("default/w1", "n1") == [ANTI]
    log(EV.NODE_ADDED, node("n1", labels={HOST: "n0"}))
    assert placer.fits("default/w1", "n0") == [ANTI] and placer.fits("default/w1", "n1") == [ANTI]


def test_an_existing_pods_anti_affinity_keeps_a_plain_matching_pod_away():
    st, log = _hosts(2)
    log(EV.POD_SUBMITTED, lpod("guard", {"app": "db"}, anti=SPREAD, node_name="n0"))
    log(EV.POD_SUBMITTED, lpod("plain", WEB))
    log(EV.POD_SUBMITTED, lpod("other", {"app": "cache"}))
    placer = Placer(st)
    assert placer.fits("default/plain", "n0") == [EXISTING]
    assert placer.fits("default/other", "n0") == []
    # Namespaces: the guard's term defaults to its own namespace.
    assert placer.fits(lpod("elsewhere", WEB, namespace="ns"), "n0") == []


def test_the_first_pod_of_a_self_affine_group_goes_anywhere_then_the_rest_follow():
    st, log = _cluster(
        node("a", labels={"zone": "z1"}), node("b", labels={"zone": "z2"}), node("c")
    )
    together = [term({"matchLabels": WEB}, "zone")]
    for i in range(3):
        log(EV.POD_SUBMITTED, lpod(f"w{i}", WEB, affinity=together))
    placer = Placer(st)
    # No pod matches anywhere and the pod matches itself: any node with the key.
    assert placer.fits("default/w0", "a") == [] and placer.fits("default/w0", "c") == [AFF]
    first = placer.place("default/w0")[0]
    zone = {"a": "z1", "b": "z2"}[first]
    for i in (1, 2):
        got = placer.place(f"default/w{i}")[0]
        assert {"a": "z1", "b": "z2"}.get(got) == zone
    # A pod that does not match its own term gets no such exception.
    stranger = lpod("s", {"app": "x"}, affinity=[term({"matchLabels": {"app": "none"}}, "zone")])
    assert placer.fits(stranger, "a") == [AFF]


def test_namespace_selector_empty_matches_every_namespace_and_match_label_keys_narrow():
    st, log = _hosts(2)
    log(EV.POD_SUBMITTED, lpod("v1", {"app": "web", "rev": "1"}, namespace="a", node_name="n0"))
    log(EV.POD_SUBMITTED, lpod("v2", {"app": "web", "rev": "2"}, namespace="b", node_name="n1"))
    placer = Placer(st)
    all_ns = [term({"matchLabels": WEB}, HOST, namespaceSelector={})]
    assert placer.fits(lpod("p", {}, anti=all_ns), "n0") == [ANTI]
    assert placer.fits(lpod("p", {}, anti=[term({"matchLabels": WEB}, HOST)]), "n0") == []
    by_rev = [term({"matchLabels": WEB}, HOST, namespaceSelector={}, matchLabelKeys=["rev"])]
    p2 = lpod("q", {"rev": "2"}, anti=by_rev)
    assert placer.fits(p2, "n0") == [] and placer.fits(p2, "n1") == [ANTI]
    not_rev = [term({"matchLabels": WEB}, HOST, namespaceSelector={}, mismatchLabelKeys=["rev"])]
    p3 = lpod("r", {"rev": "2"}, anti=not_rev)
    assert placer.fits(p3, "n0") == [ANTI] and placer.fits(p3, "n1") == []


def test_a_gang_plan_sees_members_placed_earlier_in_the_plan():
    st, log = _hosts(3)
    for i in range(3):
        log(EV.POD_SUBMITTED, lpod(f"g{i}", WEB, anti=SPREAD, gang="g"))
    log(EV.POD_SUBMITTED, lpod("g3", WEB, anti=SPREAD, gang="h"))
    placer = Placer(st)
    plan = placer.plan_gang([f"default/g{i}" for i in range(3)])
    assert plan is not None and sorted(plan) == ["n0", "n1", "n2"]
    assert placer.plan_gang(["default/g3"]) is None  # the three are still assumed
    assert placer.gang_failure is not None
    placer.sync()
    assert placer.plan_gang(["default/g3"]) is not None


def test_the_commit_check_rejects_a_second_replicas_conflicting_binding():
    st, log = _hosts(1)
    for i in range(2):
        log(EV.POD_SUBMITTED, lpod(f"w{i}", WEB, anti=SPREAD))
    placer = Placer(st)
    p0, p1 = st.pod_index["default/w0"], st.pod_index["default/w1"]
    n0 = st.node_index["n0"]
    assert placer.binding_reasons(p0, n0) == 0
    placer.assume_binding(p0, n0)  # the batch's accepted binding
    bits = placer.binding_reasons(p1, n0)
    assert placer.reason_texts(p1, n0, bits) == [ANTI]
    placer.assume_binding(p0, n0, -1)
    assert placer.binding_reasons(p1, n0) == 0


def test_a_snapshot_restores_the_index():
    st, log = _hosts(2)
    log(EV.POD_SUBMITTED, lpod("guard", WEB, anti=SPREAD, node_name="n0"))
    log(EV.POD_SUBMITTED, lpod("w", WEB))
    copy = ClusterState.from_bytes(st.to_bytes())
    assert Placer(copy).fits("default/w", "n0") == [EXISTING]
    assert Placer(copy).fits("default/w", "n1") == []


def test_the_scheduling_pass_leaves_the_third_replica_pending_with_kubes_message():
    st, log = _hosts(2)
    for i in range(3):
        log(EV.POD_SUBMITTED, lpod(f"w{i}", WEB, anti=SPREAD))
    sp = SchedulingPass(st, Placer(st), PassConfig(preemption=False))
    out = sp.run([Target("pod", f"default/w{i}") for i in range(3)])
    assert sorted(p.bindings[0][1] for p in out.placements) == ["n0", "n1"]
    _target, reasons, _ = out.unschedulable["default/w2"]
    assert reasons == {"InterPodAntiAffinity": 2}
    assert unschedulable_message(2, reasons) == (
        "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."
    )


def test_a_failed_gang_plan_takes_back_its_members_counts():
    st, log = _hosts(2)
    for i in range(3):
        log(EV.POD_SUBMITTED, lpod(f"g{i}", WEB, anti=SPREAD, gang="g"))
    log(EV.POD_SUBMITTED, lpod("solo", WEB, anti=SPREAD))
    placer = Placer(st)
    # Three mutually anti-affine members on two nodes: all or nothing, so nothing.
    assert placer.plan_gang([f"default/g{i}" for i in range(3)]) is None
    assert placer.fits("default/solo", "n0") == [] and placer.fits("default/solo", "n1") == []


def test_a_removed_node_takes_its_pods_out_of_the_counts():
    st, log = _hosts(2)
    log(EV.POD_SUBMITTED, lpod("w0", WEB, node_name="n0"))
    log(EV.POD_SUBMITTED, lpod("w1", WEB, anti=SPREAD))
    placer = Placer(st)
    assert placer.fits("default/w1", "n0") == [ANTI]
    log(EV.NODE_REMOVED, {"metadata": {"name": "n0"}})
    log(EV.NODE_ADDED, node("n0", labels={HOST: "n0"}))
    # w0 went back to Pending with its node: no longer counted anywhere.
    assert placer.fits("default/w1", "n0") == [] and placer.fits("default/w1", "n1") == []


def test_a_snapshot_without_label_sets_takes_its_pods_as_unlabelled():
    import orjson

    st, log = _hosts(1)
    log(EV.POD_SUBMITTED, lpod("w", WEB, node_name="n0"))
    data = st.to_bytes()
    hlen = int.from_bytes(data[8:16], "little")
    head = orjson.loads(data[16 : 16 + hlen])
    del head["label_sets"]
    head["arrays"] = [a for a in head["arrays"] if a[0] != "pod_lset"]
    raw = orjson.dumps(head)
    old = data[:8] + len(raw).to_bytes(8, "little") + raw + data[16 + hlen :]
    placer = Placer(ClusterState.from_bytes(old))
    # w's labels are unknown to such a snapshot: it no longer repels the pod.
    assert placer.fits(lpod("q", WEB, anti=SPREAD), "n0") == []
    assert Placer(ClusterState.from_bytes(data)).fits(lpod("q", WEB, anti=SPREAD), "n0") == [ANTI]


def test_the_commit_service_rejects_the_second_of_two_anti_affine_bindings_in_a_batch():
    """Two replicas each placed an anti-affine replica on n0 from the same view: the
    commit service (``Validator``) accepts the first and rejects the second."""
    from esched.core.validation import Validator

    st, log = _hosts(2)
    for i in range(2):
        log(EV.POD_SUBMITTED, lpod(f"w{i}", WEB, anti=SPREAD))

    def proposal(key: str, node_name: str) -> dict:
        res = {"cpu": 500, "memory": 1 << 30, "pods": 1}
        return {
            "proposal": key,
            "replica": "r",
            "position": 0,
            "gang": None,
            "bindings": [{"pod": key, "node": node_name, "resources": res}],
        }

    v = Validator(st)
    v.begin()
    assert v.check(proposal("default/w0", "n0")).ok
    verdict = v.check(proposal("default/w1", "n0"))
    assert not verdict.ok and verdict.reason == "InterPodAntiAffinity", verdict
    assert ANTI in verdict.message
    assert v.check(proposal("default/w1", "n1")).ok


@settings(max_examples=60, deadline=None)
@given(
    hst.lists(
        hst.dictionaries(
            hst.sampled_from(["app", "tier", "volcano.sh/job-name", "n"]),
            hst.one_of(hst.sampled_from(["a", "b", "web"]), hst.integers(0, 2)),
            max_size=3,
        ),
        max_size=8,
    )
)
def test_label_sets_are_the_labels_as_strings_interned_by_content(labels) -> None:
    # The fold interns a label set per distinct (namespace, labels) (one per Volcano
    # Job: volcano.sh/job-name), whatever order the manifest lists them in, values
    # as strings: what kube's label selectors compare.
    ip = ClusterState().interpod
    ids: dict[tuple, int] = {}
    for i, lab in enumerate(labels):
        ip.set_pod(i, f"ns/p{i}", lab)
        got = ip.pod_lset_of(i)
        as_strings = {str(k): str(v) for k, v in lab.items()}
        assert ip.lsets[got] == ("ns", as_strings)
        assert ids.setdefault(tuple(sorted(as_strings.items())), got) == got
        assert ip.lset("ns", dict(reversed(list(lab.items())))) == got
    assert len(ip.lsets) == len(ids)


@settings(max_examples=60, deadline=None)
@given(
    hst.lists(
        hst.tuples(
            hst.sampled_from(["ns", "ns2", "n", "nsx", "", "é", "ns/x", "ж", "жx", "\U0001f600"]),
            hst.one_of(hst.none(), hst.just({}), hst.just({"app": "a"})),
            hst.booleans(),
            hst.sampled_from(["p", "é", "ж", "\U0001f600"]),
        ),
        max_size=12,
    )
)
def test_pods_without_labels_get_their_namespaces_label_set_whatever_came_before(pods) -> None:
    # set_pod keeps the last namespace of a pod without labels at hand (the fold's
    # bulk): a pod of another namespace, of a namespace that is a prefix of it, a
    # non-ASCII one (keys and namespaces of any width) or one with labels or an owner
    # in between still gets the label set interned for its own (namespace, labels).
    ip = ClusterState().interpod
    for i, (ns, lab, owned, name) in enumerate(pods):
        key = f"{ns}/{name}{i}"
        ip.set_pod(i, key, lab, owned)
        assert ip.pod_lset_of(i) == ip.lset(key.split("/", 1)[0], lab, owned)


def _one_pod_job(log: Log, name: str, node_name: str) -> str:
    """A one-pod Volcano Job ``t/<name>`` folded as ingest stores it (its pod implied,
    labelled ``volcano.sh/job-name: <name>``), its pod committed to ``node_name``."""
    job = default_job(one_pod_job(name))
    env = envelope(EV.JOB_SUBMITTED, job)
    log.position += 1
    assert log.state.apply_payloads([(log.position, EV.stored_form(env, orjson.dumps(env))[1])])
    key = f"{NAMESPACE}/{name}-w-0"
    assert key in log.state.pending_pods()
    res = {"cpu": 1000, "memory": 0, "pods": 1}
    log(EV.PLACEMENT_COMMITTED, commit((key, node_name, res), gang=f"{NAMESPACE}/{name}"))
    assert key not in log.state.pending_pods()
    return key


def test_a_one_pod_jobs_pod_is_found_by_anti_affinity_on_its_job_name():
    # Each one-pod Job's pod brings a label set of its own (its job-name): a pod whose
    # anti-affinity names that job finds it, whether the term came before the Job or
    # after it (label sets are indexed by a label key once a selector leads with it).
    st, log = _hosts(2)
    _one_pod_job(log, "j1", "n0")

    def avoiding(job: str) -> dict:
        anti = [term({"matchLabels": {"volcano.sh/job-name": job}}, HOST, namespaces=[NAMESPACE])]
        return lpod(f"q-{job}", {}, anti=anti)

    assert Placer(st).fits(avoiding("j1"), "n0") == [ANTI]
    assert Placer(st).fits(avoiding("j1"), "n1") == []
    # A pending pod avoiding j2 before j2 exists: its term is resolved first.
    log(EV.POD_SUBMITTED, avoiding("j2"))
    assert Placer(st).fits(avoiding("j2"), "n1") == []
    _one_pod_job(log, "j2", "n1")
    assert Placer(st).fits(avoiding("j2"), "n1") == [ANTI]
    assert Placer(st).fits(avoiding("j2"), "n0") == []
    assert Placer(st).fits(avoiding("j1"), "n0") == [ANTI]
    _one_pod_job(log, "j3", "n0")  # a Job after the key was indexed, its term after it
    assert Placer(st).fits(avoiding("j3"), "n0") == [ANTI]
    assert Placer(st).fits(avoiding("j4"), "n0") == Placer(st).fits(avoiding("j4"), "n1") == []
