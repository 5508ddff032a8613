"""Property tests: the Cython core agrees with the pure-Python reference.

Random small clusters (labels, taints, cordons, running pods) and random pods
(requests or none, selectors, affinity, tolerations): same feasible set, same
per-plugin scores, and the chosen node is among the best totals.
"""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from esched.core import ClusterState, Placer
from esched.core.profile import parse_profile
from esched.schemas.objects import pod_requests
from support.fold import EV, envelope
from support.kube import fit_profile

from . import reference as ref

ZONES = ["a", "b", "c"]
TAINTS = [
    {"key": "gpu", "value": "yes", "effect": "NoSchedule"},
    {"key": "drain", "value": "", "effect": "NoExecute"},
    {"key": "soft", "value": "", "effect": "PreferNoSchedule"},
]


@st.composite
def nodes(draw):
    n = draw(st.integers(1, 8))
    out = []
    for i in range(n):
        labels = {}
        if draw(st.booleans()):
            labels["zone"] = draw(st.sampled_from(ZONES))
        if draw(st.booleans()):
            labels["gen"] = str(draw(st.integers(1, 5)))
        out.append(
            {
                "kind": "Node",
                "metadata": {"name": f"n{i}", "labels": labels},
                "spec": {
                    "taints": draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique_by=str)),
                    "unschedulable": draw(st.booleans()) and draw(st.booleans()),
                },
                "status": {
                    "allocatable": {
                        "cpu": f"{draw(st.integers(0, 16000))}m",
                        "memory": f"{draw(st.integers(0, 64))}Gi",
                        "pods": str(draw(st.integers(1, 6))),
                    }
                },
            }
        )
    return out


@st.composite
def pods(draw, name="p"):
    containers = []
    for i in range(draw(st.integers(0, 2))):
        req = {}
        if draw(st.booleans()):
            req["cpu"] = f"{draw(st.integers(0, 8000))}m"
        if draw(st.booleans()):
            req["memory"] = f"{draw(st.integers(0, 8192))}Mi"
        containers.append({"name": f"c{i}", "resources": {"requests": req}})
    spec = {"containers": containers}
    if draw(st.booleans()):
        spec["nodeSelector"] = {"zone": draw(st.sampled_from(ZONES))}
    if draw(st.booleans()):
        op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))
        key = "zone" if op in ("In", "NotIn") else draw(st.sampled_from(["zone", "gen"]))
        values = (
            [draw(st.sampled_from(ZONES))]
            if op in ("In", "NotIn")
            else [str(draw(st.integers(0, 6)))]
            if op in ("Gt", "Lt")
            else []
        )
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": key, "operator": op, "values": values}]}
                    ]
                }
            }
        }
    if draw(st.booleans()):
        pref = [
            {
                "weight": draw(st.integers(1, 100)),
                "preference": {
                    "matchExpressions": [
                        {"key": "zone", "operator": "In", "values": [draw(st.sampled_from(ZONES))]}
                    ]
                },
            }
            for _ in range(draw(st.integers(1, 2)))
        ]
        node_aff = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        node_aff["preferredDuringSchedulingIgnoredDuringExecution"] = pref
    if draw(st.booleans()):
        spec["tolerations"] = draw(
            st.lists(
                st.sampled_from(
                    [
                        {"key": "gpu", "operator": "Equal", "value": "yes"},
                        {"key": "drain", "operator": "Exists"},
                        {"operator": "Exists"},
                        {"key": "soft", "operator": "Exists", "effect": "PreferNoSchedule"},
                        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
                    ]
                ),
                max_size=2,
            )
        )
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "t"}, "spec": spec}


@st.composite
def scenarios(draw):
    ns = draw(nodes())
    running = []
    for j in range(draw(st.integers(0, 6))):
        p = draw(pods(name=f"r{j}"))
        p["spec"].pop("nodeSelector", None)
        p["spec"].pop("affinity", None)
        p["spec"]["nodeName"] = draw(st.sampled_from(ns))["metadata"]["name"]
        running.append(p)
    return ns, running, draw(pods(name="new"))


def _fold(ns, running) -> ClusterState:
    s = ClusterState()
    events = [envelope(EV.NODE_ADDED, n) for n in ns]
    events += [envelope(EV.POD_SUBMITTED, p) for p in running]
    s.apply_many(enumerate(events, 1))
    return s


def _used(ns, running):
    used = {n["metadata"]["name"]: {} for n in ns}
    nz = {n["metadata"]["name"]: (0, 0) for n in ns}
    for p in running:
        u = used[p["spec"]["nodeName"]]
        for r, q in pod_requests(p).items():
            u[r] = u.get(r, 0) + q
        c, m = ref.nonzero(p)
        a, b = nz[p["spec"]["nodeName"]]
        nz[p["spec"]["nodeName"]] = (a + c, b + m)
    return used, nz


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_default_profile_agrees_with_reference(scenario):
    ns, running, new = scenario
    state = _fold(ns, running)
    used, nz = _used(ns, running)
    result = Placer(state, seed=5).explain(new)
    rows = {r["name"]: r for r in result["nodes"]}
    best = -1
    # The normalized plugins over the feasible nodes (explain scores them all).
    feasible = [n for n in ns if ref.feasible(n, used[n["metadata"]["name"]], new)]
    tt = ref.taint_toleration(feasible, new)
    na = ref.node_affinity(feasible, new)
    # Left out (kube's Skip, or the same score on every node): no preferred terms; no
    # PreferNoSchedule taint in the cluster that the pod does not tolerate.
    has_terms = bool(
        ((new["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
            "preferredDuringSchedulingIgnoredDuringExecution"
        )
    )
    has_soft = any(ref.taint_toleration([n], new)[n["metadata"]["name"]] == 0 for n in ns)
    weights = {"TaintToleration": 3, "NodeAffinity": 2}
    for n in ns:
        name = n["metadata"]["name"]
        want = ref.feasible(n, used[name], new)
        assert rows[name]["feasible"] == want, (name, rows[name]["reasons"])
        assert bool(rows[name]["reasons"]) == (not want)
        if want:
            scores = {
                "NodeResourcesFit": ref.least_allocated(n, nz[name], new),
                "NodeResourcesBalancedAllocation": ref.balanced(n, used[name], new),
            }
            if has_soft:
                scores["TaintToleration"] = tt[name]
            if has_terms:
                scores["NodeAffinity"] = na[name]
            assert rows[name]["scores"] == scores, name
            assert rows[name]["total"] == sum(weights.get(k, 1) * v for k, v in scores.items())
            best = max(best, rows[name]["total"])
    # place() scores through the fused hot path; it must agree with explain's kernels
    placed = Placer(state, seed=5, sample=False).place(new)
    if best < 0:
        assert result["chosen"] is None and placed is None
    else:
        assert rows[result["chosen"]]["total"] == best
        assert placed is not None and placed[1] == best and rows[placed[0]]["total"] == best


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_most_allocated_and_place_agree_with_reference(scenario):
    ns, running, new = scenario
    state = _fold(ns, running)
    used, nz = _used(ns, running)
    placer = Placer(state, parse_profile(fit_profile("MostAllocated")), seed=9, sample=False)
    totals = {}
    for n in ns:
        name = n["metadata"]["name"]
        if ref.feasible(n, used[name], new):
            totals[name] = ref.most_allocated(n, nz[name], new)
    chosen = placer.place(new)
    if not totals:
        assert chosen is None
    else:
        assert chosen is not None and chosen[1] == max(totals.values())
        assert totals[chosen[0]] == chosen[1]
