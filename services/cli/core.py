"""``esched explain``, ``esched bench core`` and ``esched bench preempt``: the Cython
core from the command line."""

from __future__ import annotations

import sys

import click
import orjson

from esched.services.cli import EXIT_UNSCHEDULABLE, cli
from esched.services.cli.bench import bench

__all__ = ["bench_core", "bench_flow", "bench_preempt", "explain"]


def _profile(path: str | None):
    from esched.core.profile import DEFAULT_PROFILE, ProfileError, load_profile

    if path is None:
        return DEFAULT_PROFILE
    try:
        return load_profile(path)
    except (OSError, ProfileError) as exc:
        raise click.BadParameter(str(exc), param_hint="--profile") from exc


@cli.command("explain")
@click.option(
    "--state",
    "state_file",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Nodes and pods (YAML/JSON: a List, multi-document, or one object). "
    "Pods with spec.nodeName are already running there.",
)
@click.option(
    "--pod",
    "pod_file",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="The pod to place (one Pod manifest).",
)
@click.option(
    "--profile",
    "profile_file",
    type=click.Path(exists=True, dir_okay=False),
    help="KubeSchedulerConfiguration (v1) file; default: kube's resource scoring.",
)
@click.option("--seed", default=0, show_default=True, help="Tie-break seed.")
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def explain(state_file: str, pod_file: str, profile_file: str | None, seed: int, fmt: str) -> None:
    """Show, per node, why a pod fits or not, each plugin's score, and the chosen node.

    Every feasible node is scored (no sampling), so anyone can reproduce a decision.
    Exit code 0 when a node was chosen, 5 when the pod fits nowhere.
    """
    from esched.core._placer import Placer
    from esched.core.manifests import load_events, state_from_events
    from esched.core.profile import scheduler_names
    from esched.schemas.events import POD_SUBMITTED
    from esched.schemas.quantity import QuantityError

    try:
        state = state_from_events(load_events(state_file))
        pods = [e["data"] for e in load_events(pod_file) if e["type"] == POD_SUBMITTED]
    except (OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    if len(pods) != 1:
        raise click.BadParameter(f"expected one Pod, found {len(pods)}", param_hint="--pod")
    gates = [g.get("name") for g in (pods[0].get("spec") or {}).get("schedulingGates") or ()]
    if gates:
        # kube's SchedulingGates (PreEnqueue): a gated pod is not attempted at all.
        if fmt == "json":
            click.echo(orjson.dumps({"gated": gates, "nodes": [], "chosen": None}).decode())
        else:
            click.echo(f"SchedulingGated: waiting for scheduling gates: [{' '.join(gates)}]")
        sys.exit(EXIT_UNSCHEDULABLE)
    profile = _profile(profile_file)
    asked = (pods[0].get("spec") or {}).get("schedulerName")
    if asked and asked not in scheduler_names(profile):
        # Another scheduler's pod: esched leaves it Pending without trying it.
        why = f"pod names schedulerName {asked!r}; the profile is {profile.name!r}"
        if fmt == "json":
            click.echo(orjson.dumps({"otherScheduler": why, "nodes": [], "chosen": None}).decode())
        else:
            click.echo(f"OtherScheduler: {why}")
        sys.exit(EXIT_UNSCHEDULABLE)
    placer = Placer(state, profile, seed=seed)
    try:
        result = placer.explain(pods[0])
    except QuantityError as exc:
        raise click.ClickException(str(exc)) from exc
    if fmt == "json":
        click.echo(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    else:
        for row in result["nodes"]:
            if row["feasible"]:
                parts = " ".join(f"{k}={v}" for k, v in row["scores"].items())
                click.echo(f"{row['name']:<30} feasible   total={row['total']:<5} {parts}")
            else:
                click.echo(f"{row['name']:<30} infeasible {'; '.join(row['reasons'])}")
        click.echo(f"chosen: {result['chosen'] or '(none: the pod fits no node)'}")
        click.echo(f"accounting: {_ACCOUNTING[result['accounting']]}")
    sys.exit(0 if result["chosen"] else EXIT_UNSCHEDULABLE)


#: ``explain``'s line on which accounting judged the pod (Borg's reclamation).
_ACCOUNTING = {
    "requests": "requests (reclamation off, as kube: its requests against the requests "
    "of the node's pods; limits ignored)",
    "limits": "limits (production: its limits against the limits of the node's pods)",
    "reservations": "reservations (non-production: its limits against the node's "
    "reservations plus the burst share, i.e. in reclaimed resources)",
}


@bench.command("core")
@click.option("--nodes", default=10_000, show_default=True, help="Nodes in the synthetic cluster.")
@click.option("--pods", default=100_000, show_default=True, help="Pods to place.")
@click.option(
    "--profile",
    "profile_file",
    type=click.Path(exists=True, dir_okay=False),
    help="KubeSchedulerConfiguration (v1) file; default: kube's resource scoring.",
)
@click.option("--seed", default=0, show_default=True, help="Workload and tie-break seed.")
@click.option("--labels", is_flag=True, help="Zone labels on nodes; 30% of pods select a zone.")
@click.option("--taints", is_flag=True, help="Taint every 10th node; 10% of pods tolerate it.")
@click.option("--gpus", is_flag=True, help="8 GPUs on every 8th node; 5% of pods ask 1-4.")
@click.option("--burst", is_flag=True, help="All pods identical (2 CPU, 4 GiB): the cache case.")
@click.option(
    "--reclaimed",
    is_flag=True,
    help="Every node runs a production pod whose reservation has decayed, and the pods "
    "set cpu limits: placement against reservations (Borg's reclamation).",
)
@click.option(
    "--full-scan-pods",
    type=int,
    default=None,
    help="Pods for the full-scan run (default: all, capped at 2e8 node visits).",
)
@click.option(
    "--repeat",
    default=1,
    show_default=True,
    help="Time each run this many times (fresh placer each); report the median run "
    "and every run's pods_per_s under pods_per_s_runs.",
)
@click.option(
    "--workload",
    type=click.Choice(["anti-affinity", "spread", "mixed", "preferred-affinity", "default-spread"]),
    default=None,
    help="A kube scheduler_perf shape instead of the default workload: required pod "
    "anti-affinity on hostname, DoNotSchedule spread on zone and hostname, a mix, "
    "preferred pod affinity on zone, or ReplicaSets' pods (kube's system default "
    "spreading); "
    "pods placed one by one by key beside the same pods with requests only "
    "(default size with it: 5,000 nodes and pods).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (default: also).")
def bench_core(
    nodes: int,
    pods: int,
    profile_file: str | None,
    seed: int,
    labels: bool,
    taints: bool,
    gpus: bool,
    burst: bool,
    reclaimed: bool,
    full_scan_pods: int | None,
    repeat: int,
    workload: str | None,
    as_json: bool,
) -> None:
    """Place pods on a synthetic cluster; print pods/s with sampling, cache off, full scan.

    Keys: pods_per_s, us_per_pod, nodes_visited_per_pod, cache_hit_rate, utilization,
    and the same under cache_off and full_scan.
    """
    from esched.services.bench_core import run_bench, run_workload

    if nodes < 1 or pods < 1:
        raise click.BadParameter("--nodes and --pods must be positive")
    if workload is not None:
        src = click.get_current_context().get_parameter_source
        n = nodes if src("nodes") != click.core.ParameterSource.DEFAULT else 5_000
        p = pods if src("pods") != click.core.ParameterSource.DEFAULT else 5_000
        out = run_workload(workload, n, p, seed)
        click.echo(orjson.dumps(out, option=0 if as_json else orjson.OPT_INDENT_2).decode())
        return
    if repeat < 1:
        raise click.BadParameter("--repeat must be positive")
    result = run_bench(
        nodes,
        pods,
        _profile(profile_file),
        seed,
        labels,
        taints,
        gpus,
        burst,
        full_scan_pods,
        repeat=repeat,
        reclaimed=reclaimed,
    )
    # One JSON object either way: it is data (--json kept for the documented interface).
    click.echo(orjson.dumps(result, option=0 if as_json else orjson.OPT_INDENT_2).decode())


@bench.command("preempt")
@click.option("--nodes", default=2000, show_default=True, help="Nodes in the full cluster.")
@click.option("--per-node", default=8, show_default=True, help="Running 4-cpu pods per node.")
@click.option("--plans", default=200, show_default=True, help="Preemptions to plan.")
@click.option("--seed", default=0, show_default=True, help="Workload and tie-break seed.")
def bench_preempt(nodes: int, per_node: int, plans: int, seed: int) -> None:
    """Preemption planning on a full cluster of mixed bands, per plan, against a
    full-scan placement that finds no node (the baseline, same process). JSON."""
    from esched.services.bench_preempt import run_preempt_bench

    click.echo(orjson.dumps(run_preempt_bench(nodes, per_node, plans, seed)).decode())


@bench.command("flow")
@click.option("--machines", default=1000, show_default=True, help="Nodes in the cluster.")
@click.option("--tasks", default=10_000, show_default=True, help="Pending tasks in the round.")
@click.option("--repeat", default=3, show_default=True, help="Warm rounds (median).")
@click.option("--seed", default=0, show_default=True, help="Workload seed.")
@click.option(
    "--grid/--no-grid",
    default=False,
    show_default=True,
    help="Also machines and tasks from 1/4 to 4 times, to show how a round grows.",
)
def bench_flow(machines: int, tasks: int, repeat: int, seed: int, grid: bool) -> None:
    """One Quincy round (min-cost flow; needs esched[flow]): problem from the state,
    network, OR-Tools solve and the feasibility check of every placement. JSON."""
    from esched.core.flow import FlowSolverMissing, require_solver
    from esched.services.bench_flow import run_flow_bench

    try:
        require_solver()
    except FlowSolverMissing as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(orjson.dumps(run_flow_bench(machines, tasks, seed, repeat, grid)).decode())
