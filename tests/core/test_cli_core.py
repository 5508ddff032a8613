"""``esched explain`` and ``esched bench core`` through click."""

import orjson
import yaml
from click.testing import CliRunner

from esched.services.cli import EXIT_UNSCHEDULABLE
from esched.services.cli.core import bench_core, explain


def _write(tmp_path, name, docs):
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def _node(name, cpu, labels=None):
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}},
    }


def _pod(name, cpu, node=None, selector=None):
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}
    if node:
        spec["nodeName"] = node
    if selector:
        spec["nodeSelector"] = selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def test_explain_json_reports_reasons_scores_and_choice(tmp_path):
    state = _write(
        tmp_path,
        "state.yaml",
        [
            {"kind": "List", "items": [_node("a", "2"), _node("b", "4", {"zone": "x"})]},
            _node("c", "8"),
            _pod("running", "3", node="b"),
        ],
    )
    pod = _write(tmp_path, "pod.yaml", [_pod("new", "1500m")])
    r = CliRunner().invoke(explain, ["--state", state, "--pod", pod, "--format", "json"])
    assert r.exit_code == 0, r.output
    out = orjson.loads(r.output)
    rows = {n["name"]: n for n in out["nodes"]}
    assert rows["b"]["feasible"] is False and rows["b"]["reasons"] == ["Insufficient cpu"]
    assert set(rows["c"]["scores"]) == {"NodeResourcesFit", "NodeResourcesBalancedAllocation"}
    assert out["chosen"] == "c"
    assert rows["c"]["total"] == max(n["total"] or 0 for n in out["nodes"])


def test_explain_exits_3_when_nothing_fits_and_prints_text(tmp_path):
    state = _write(tmp_path, "state.yaml", [_node("a", "1")])
    pod = _write(tmp_path, "pod.yaml", [_pod("new", "2", selector={"zone": "q"})])
    r = CliRunner().invoke(explain, ["--state", state, "--pod", pod])
    assert r.exit_code == EXIT_UNSCHEDULABLE
    assert "infeasible" in r.output and "Insufficient cpu" in r.output
    assert "didn't match Pod's node affinity/selector" in r.output


def test_explain_shows_a_gated_pod_as_not_attempted(tmp_path):
    # kube's SchedulingGates PreEnqueue: "waiting for scheduling gates: [foo bar]".
    state = _write(tmp_path, "state.yaml", [_node("a", "8")])
    gated = _pod("new", "1")
    gated["spec"]["schedulingGates"] = [{"name": "foo"}, {"name": "bar"}]
    pod = _write(tmp_path, "pod.yaml", [gated])
    r = CliRunner().invoke(explain, ["--state", state, "--pod", pod])
    assert r.exit_code == EXIT_UNSCHEDULABLE
    assert r.output.strip() == "SchedulingGated: waiting for scheduling gates: [foo bar]"
    r = CliRunner().invoke(explain, ["--state", state, "--pod", pod, "--format", "json"])
    assert orjson.loads(r.output)["gated"] == ["foo", "bar"]


def test_explain_shows_a_pod_of_another_scheduler_as_not_esched_s(tmp_path):
    state = _write(tmp_path, "state.yaml", [_node("a", "8")])
    other = _pod("new", "1")
    other["spec"]["schedulerName"] = "someone-else"
    pod = _write(tmp_path, "pod.yaml", [other])
    r = CliRunner().invoke(explain, ["--state", state, "--pod", pod])
    assert r.exit_code == EXIT_UNSCHEDULABLE
    assert r.output.startswith("OtherScheduler: pod names schedulerName 'someone-else'")


def test_bench_core_prints_the_documented_keys():
    r = CliRunner().invoke(bench_core, ["--nodes", "200", "--pods", "300", "--json"])
    assert r.exit_code == 0, r.output
    out = orjson.loads(r.output)
    keys = {"pods_per_s", "us_per_pod", "nodes_visited_per_pod", "cache_hit_rate", "utilization"}
    assert keys <= set(out) and keys <= set(out["cache_off"]) and keys <= set(out["full_scan"])
    assert out["placed"] == 300 and out["full_scan"]["nodes_visited_per_pod"] == 200
    assert out["nodes_visited_per_pod"] == 100  # kube: at least 100 nodes
    assert 0 < out["utilization"]["cpu"] < 1


def test_bench_core_repeat_reports_every_run_and_the_same_decisions():
    r = CliRunner().invoke(
        bench_core, ["--nodes", "150", "--pods", "200", "--repeat", "3", "--json"]
    )
    assert r.exit_code == 0, r.output
    out = orjson.loads(r.output)
    assert out["workload"]["repeat"] == 3
    for run in (out, out["cache_off"], out["full_scan"]):
        assert len(run["pods_per_s_runs"]) == 3
        assert sorted(run["pods_per_s_runs"])[1] == run["pods_per_s"]
    single = orjson.loads(
        CliRunner().invoke(bench_core, ["--nodes", "150", "--pods", "200", "--json"]).output
    )
    assert single["utilization"] == out["utilization"] and single["placed"] == out["placed"]


def test_bench_core_workloads_place_kube_perf_shapes_beside_requests_only():
    shapes = (
        ("anti-affinity", 40),
        ("spread", 60),
        ("mixed", 60),
        ("preferred-affinity", 60),
        ("default-spread", 60),
    )
    for workload, placed in shapes:
        result = CliRunner().invoke(
            bench_core, ["--workload", workload, "--nodes", "40", "--pods", "60", "--json"]
        )
        assert result.exit_code == 0, result.output
        out = orjson.loads(result.output)
        # One selector on hostname: one pod per node, the rest Pending.
        assert out["workload"] == workload and out["placed"] == placed, out
        assert out["resources_only"]["placed"] == 60
        assert out["ratio_to_resources_only"] > 0 and out["interpod_index_bytes"] > 0


def test_explain_shows_the_anti_affinity_and_spread_verdicts(tmp_path):
    host = "kubernetes.io/hostname"
    running = _pod("web-0", "1", node="a")
    running["metadata"]["labels"] = {"app": "web"}
    state = _write(
        tmp_path,
        "state.yaml",
        [_node("a", "4", {host: "a"}), _node("b", "4", {"zone": "z"}), running],
    )
    new = _pod("web-1", "1")
    new["metadata"]["labels"] = {"app": "web"}
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": host}
    new["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    }
    new["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": host,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    pod = _write(tmp_path, "pod.yaml", [new])
    r = CliRunner().invoke(explain, ["--state", state, "--pod", pod, "--format", "json"])
    assert r.exit_code == EXIT_UNSCHEDULABLE, r.output
    rows = {n["name"]: n["reasons"] for n in orjson.loads(r.output)["nodes"]}
    # a is the only node with the key: the one domain, skew 1 + 1 - 1 is within 1.
    assert rows == {
        "a": ["node(s) didn't match pod anti-affinity rules"],
        "b": ["node(s) didn't match pod topology spread constraints (missing required label)"],
    }


def test_explain_shows_the_inter_pod_and_spread_scores(tmp_path):
    host = "kubernetes.io/hostname"
    running = _pod("db-0", "1", node="a")
    running["metadata"]["labels"] = {"app": "db"}
    state = _write(
        tmp_path,
        "state.yaml",
        [_node("a", "4", {host: "a"}), _node("b", "4", {host: "b"}), running],
    )
    new = _pod("web-0", "1")
    new["metadata"]["labels"] = {"app": "web"}
    near_db = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": host}
    new["spec"]["affinity"] = {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "podAffinityTerm": near_db}
            ]
        }
    }
    new["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": host,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "db"}},
        }
    ]
    pod = _write(tmp_path, "pod.yaml", [new])
    r = CliRunner().invoke(explain, ["--state", state, "--pod", pod, "--format", "json"])
    assert r.exit_code == 0, r.output
    scores = {n["name"]: n["scores"] for n in orjson.loads(r.output)["nodes"]}
    # Near the db pod by affinity; away from it by spread (its selector counts it).
    assert scores["a"]["InterPodAffinity"] == 100 and scores["b"]["InterPodAffinity"] == 0
    assert scores["a"]["PodTopologySpread"] == 0 and scores["b"]["PodTopologySpread"] == 100


def test_explain_says_which_accounting_judged_the_pod(tmp_path):
    # Borg's reclamation (enabled in the config file): production pods by limits, the
    # others by reservations; without it (the default) every pod by its requests.
    from esched.services.cli import cli

    state = _write(tmp_path, "state.yaml", [_node("a", "4")])
    batch = _write(tmp_path, "batch.yaml", [_pod("new", "1")])
    prod_pod = _pod("new", "1")
    prod_pod["spec"]["priority"] = 1000
    prod = _write(tmp_path, "prod.yaml", [prod_pod])
    borg = _write(tmp_path, "esched.yaml", [{"reclamation": {"enabled": True}}])
    try:
        r = CliRunner().invoke(cli, ["--config", borg, "explain", "--state", state, "--pod", batch])
        assert r.exit_code == 0, r.output
        assert "accounting: reservations" in r.output
        args = ["--config", borg, "explain", "--state", state, "--pod", prod, "--format", "json"]
        r = CliRunner().invoke(cli, args)
        assert orjson.loads(r.output)["accounting"] == "limits"
    finally:
        r = CliRunner().invoke(cli, ["explain", "--state", state, "--pod", prod])
    # no config file: the defaults (reclamation off) again, kube's accounting
    assert r.exit_code == 0, r.output
    assert "accounting: requests" in r.output
