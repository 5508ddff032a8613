"""The replay command's view of a fold: the summary as a table for people.

Folding the log (and its snapshots) is :mod:`esched.services.store.snapshots`.
"""

from __future__ import annotations

from esched.schemas.quantity import human_pairs, human_units
from esched.services.store.snapshots import format_anomalies

__all__ = ["format_jobs", "format_reclamation", "format_table"]


def format_table(summary: dict) -> str:
    """The replay summary as a human-readable table."""
    lines = [f"position  {summary['position']}"]
    nodes = summary["nodes"]
    lines.append(f"nodes     {nodes['count']}")
    lines.append(f"  {'RESOURCE':<24}{'ALLOCATABLE':>16}{'ALLOCATED':>16}{'USED':>8}")
    for res in sorted(nodes["allocatable"]):
        cap = nodes["allocatable"][res]
        used = nodes["allocated"].get(res, 0)
        pct = f"{100 * used / cap:.1f}%" if cap else "-"
        lines.append(f"  {res:<24}{human_units(res, cap):>16}{human_units(res, used):>16}{pct:>8}")
    pods = summary["pods"]
    lines.append("pods      " + "  ".join(f"{k}={v}" for k, v in pods.items()))
    gated = summary.get("schedulingGated") or {}
    if gated:
        # Pending but never attempted: each waits for its gates' removal (kube's
        # SchedulingGated).
        lines.append(f"gated     {len(gated)} (SchedulingGated: waiting for an esched.pod.updated)")
        for key, gates in list(gated.items())[:20]:
            lines.append(f"  {key:<40}{','.join(gates)}")
        if len(gated) > 20:
            lines.append(f"  ... and {len(gated) - 20} more")
    if summary["gangs"]:
        lines.append(f"gangs     {len(summary['gangs'])}")
        lines.append(f"  {'GANG':<40}{'MIN':>6}{'PENDING':>9}{'RUNNING':>9}{'DONE':>6}")
        for name, g in summary["gangs"].items():
            done = g.get("Succeeded", 0) + g.get("Failed", 0)
            lines.append(
                f"  {name:<40}{g['minMember']:>6}{g.get('Pending', 0):>9}"
                f"{g.get('Running', 0):>9}{done:>6}"
            )
    if summary["queues"]:
        lines.append(f"queues    {len(summary['queues'])}")
        lines.append(
            f"  {'QUEUE':<24}{'STATE':<10}{'PRIO':>6}{'WEIGHT':>7}{'PENDING':>9}"
            f"{'RUNNING':>9}{'SHARE':>8}  ALLOCATED/FAIR SHARE"
        )
        for name, q in summary["queues"].items():
            res = human_pairs(q.get("allocated") or {}, q.get("fairShare") or {})
            lines.append(
                f"  {q.get('path', name):<24}{q.get('state', ''):<10}"
                f"{q.get('priority', 0):>6}{q.get('weight', 0):>7}"
                f"{q.get('Pending', 0):>9}{q.get('Running', 0):>9}"
                f"{q.get('share', 0.0):>8.3f}  {res}"
            )
    if summary.get("priorityClasses"):
        lines.append(f"classes   {len(summary['priorityClasses'])}")
        lines.append(f"  {'PRIORITYCLASS':<40}{'VALUE':>12}  {'DEFAULT':<8}PREEMPTION")
        for name, pc in summary["priorityClasses"].items():
            default = "yes" if pc.get("globalDefault") else ""
            lines.append(
                f"  {name:<40}{pc.get('value', 0):>12}  {default:<8}"
                f"{pc.get('preemptionPolicy', '')}"
            )
    if summary.get("reservations"):
        lines.append(f"reserved  {len(summary['reservations'])}")
        lines.append(f"  {'GANG':<40}NODES HELD FOR IT")
        for gang, held in summary["reservations"].items():
            lines.append(f"  {gang:<40}{' '.join(held)}")
    if summary.get("reclamation"):
        lines += format_reclamation(summary["reclamation"])
    if summary.get("jobs"):
        lines += format_jobs(summary["jobs"])
    lines += format_anomalies(summary.get("anomalies") or {})
    return "\n".join(lines)


def format_jobs(jobs: list[dict]) -> list[str]:
    """Volcano Jobs (:meth:`esched.core.jobs.JobState.summary`) as table lines: each
    job's phase and attempt, then its tasks' pods by status."""
    lines = [f"jobs      {len(jobs)}"]
    lines.append(
        f"  {'JOB':<40}{'PHASE':<13}{'ATTEMPT':>8}  TASKS (pending/running/succeeded/failed)"
    )
    for j in jobs:
        tasks = " ".join(
            f"{name}={t['pending']}/{t['running']}/{t['succeeded']}/{t['failed']}"
            + ("" if t["released"] else "(waiting)")
            for name, t in j["tasks"].items()
        )
        lines.append(f"  {j['job']:<40}{j['phase']:<13}{j['attempt']:>8}  {tasks}")
    return lines


#: Nodes the table lists one by one (the JSON has every node).
RECLAIM_ROWS = 20


def format_reclamation(view: dict) -> list[str]:
    """Borg's reclamation (:meth:`~esched.core.ClusterState.reclamation_view`) as table
    lines: per node and resource the limits (production's accounting), reservations,
    the accounting by reservations with the burst kept back (the others'), the pods'
    reported usage and what is reclaimed; the cluster's totals first. With reclamation
    off the heading says so: the limit column is then the requests."""
    head = (
        f"  {'NODE':<28}{'RESOURCE':<10}{'LIMIT':>12}{'RESERVATION':>13}{'RESERVED':>12}"
        f"{'USAGE':>12}{'RECLAIMED':>12}"
    )
    if view.get("accounting") == "requests":
        # Reclamation off (the default): every pod judged by its requests, as kube.
        lines = [f"reclaim   off: every pod placed by its requests ({len(view['nodes'])} nodes)"]
    else:
        lines = [f"reclaim   {len(view['nodes'])} nodes (limit: production; reserved: the others)"]
    lines.append(head)

    def row(name: str, res: str, e: dict) -> str:
        return f"  {name:<28}{res:<10}" + "".join(
            f"{human_units(res, e[k]):>{w}}"
            for k, w in (
                ("limit", 12),
                ("reservation", 13),
                ("reserved", 12),
                ("usage", 12),
                ("reclaimed", 12),
            )
        )

    for res, e in sorted(view["totals"].items()):
        if res != "pods":
            lines.append(row("(cluster)", res, e))
    for name, per in list(view["nodes"].items())[:RECLAIM_ROWS]:
        for res, e in per.items():
            if res != "pods":
                lines.append(row(name, res, e))
    if len(view["nodes"]) > RECLAIM_ROWS:
        lines.append(f"  ... and {len(view['nodes']) - RECLAIM_ROWS} more nodes (--format json)")
    return lines
