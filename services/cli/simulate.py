"""``esched simulate`` (one run of a trace, its events optionally stored) and
``esched bench simulate``."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path

import click
import orjson

from esched.services.cli import cli, emit, migrated_store, queue_hierarchy_option
from esched.services.cli.bench import bench
from esched.services.cli.sim_inputs import (
    NODES_HELP,
    TRACE_HELP,
    profile_of,
    progress_bar,
    trace_of,
    usage_every_option,
    usage_model_of,
)

__all__ = ["bench_simulate", "simulate"]


async def _append(url: str, events: list[dict]) -> dict:
    """Append a run's events to the store at ``url`` (idempotent on event id)."""
    from esched.schemas.events import stream_of
    from esched.services.store.base import NewEvent

    stored = dupes = 0
    async with migrated_store(url) as es:
        for i in range(0, len(events), 5000):
            batch = [
                NewEvent(
                    id=ev["id"],
                    type=ev["type"],
                    stream=stream_of(ev),
                    payload=orjson.dumps(ev),
                    time=datetime.fromisoformat(ev["time"]),
                )
                for ev in events[i : i + 5000]
            ]
            res = await es.append(batch)
            stored += len(batch) - res.duplicates
            dupes += res.duplicates
        head = await es.head()
    return {"url": url, "appended": stored, "duplicates": dupes, "head": head}


@cli.command()
@click.option("--trace", "trace_spec", required=True, metavar="KIND:PATH", help=TRACE_HELP)
@click.option(
    "--profile",
    "profile_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="KubeSchedulerConfiguration file (see deploy/profiles/).",
)
@click.option("--nodes", metavar="SPEC", help=NODES_HELP)
@click.option("--seed", type=int, default=0, show_default=True, help="The placer's seed.")
@click.option(
    "--store",
    metavar="URL",
    help="Append the run's events to this store "
    "(postgresql://... or sqlite:///path) so replay and audit can read it; "
    "default: in memory only. Event ids carry the seed: one store per run.",
)
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Write report.html, figures.json and summary.json here.",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["json", "table"]),
    default="json",
    show_default=True,
    help="stdout: the summary as JSON, or a table (on stderr) and the JSON.",
)
@click.option(
    "--progress/--no-progress",
    default=True,
    show_default=True,
    help="Progress bar on stderr (terminals only).",
)
@click.option(
    "--preemption/--no-preemption",
    default=False,
    show_default=True,
    help="A job that fits nowhere may evict jobs of lower priority bands (they queue again).",
)
@click.option(
    "--reserve-after",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="Reserve nodes for a gang that has not fitted for this long (virtual time); "
    "default: never.",
)
@click.option(
    "--policy",
    type=click.Choice(["queue", "quincy"]),
    default="queue",
    show_default=True,
    help="queue: the scheduling pass after every event (greedy, oldest first); quincy: "
    "Quincy's min-cost-flow rounds (needs esched[flow]); with --preemption, fair with "
    "preemption (QFP with --victims any, QFP-bands with the default).",
)
@click.option(
    "--fairness",
    type=click.Choice(["strict", "none"]),
    default="strict",
    show_default=True,
    help="quincy: strict fair shares (E = F = A) or none (Quincy's Q).",
)
@click.option(
    "--victims",
    type=click.Choice(["bands", "any"]),
    default="bands",
    show_default=True,
    help="quincy with --preemption: evict only lower bands (esched's commit rule) or any "
    "job over its fair share (Quincy's; such a log fails the audit's preemption check).",
)
@click.option(
    "--round-seconds",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="quincy: at most one round per this much virtual time (0: after every event).",
)
@click.option(
    "--max-jobs",
    type=click.IntRange(min=1),
    help="Simulate only the trace's first N jobs (by arrival).",
)
@click.option(
    "--usage",
    "usage_spec",
    metavar="MODEL",
    help="Usage model: every --usage-every seconds the running pods' usage is logged "
    "(esched.usage.reported) and folded into reservations, and overload evicts "
    "non-production pods: synthetic[:cpu=,memory=,spread=,diurnal=,period=,noise=,seed=,"
    "job=,burst=,burst_p=,window=], correlated[:...] (jobs move together, with bursts), "
    "limits, constant:F or csv:FILE (see docs/simulation.md); --policy queue only. "
    "Default: no usage.",
)
@usage_every_option
@click.option(
    "--reclaim/--no-reclaim",
    "reclaim",
    default=None,
    help="Switch the config file's reclamation section on (or off) for this run; "
    "default: as the config file says (off without one).",
)
@queue_hierarchy_option
def simulate(
    trace_spec: str,
    profile_path: str,
    nodes: str | None,
    seed: int,
    store: str | None,
    report_dir: str | None,
    output_format: str,
    progress: bool,
    preemption: bool,
    reserve_after: float | None,
    policy: str,
    fairness: str,
    victims: str,
    round_seconds: float,
    max_jobs: int | None,
    usage_spec: str | None,
    usage_every: float,
    reclaim: bool | None,
    queue_hierarchy: str,
) -> None:
    """Simulate a trace in virtual time through the core, with one profile.

    Pods arrive at their trace time, wait until they fit (gangs all at once), run for
    their duration and leave; the run's events are the real event model (CloudEvents),
    so with --store the log replays and audits like a live one. Prints the run's
    summary (allocation, pending, latency, stranding, GPU fragmentation, Quincy's SNP,
    slowdown and unfairness, trace quirks) as JSON.
    """
    from esched.services.sim.engine import Simulator
    from esched.services.sim.metrics import summarize
    from esched.services.sim.report import run_figures, summary_rows, terminal_table, write_report

    if policy == "quincy" and usage_spec is not None:
        # Quincy's network counts a machine's free room by requests: it would neither
        # place by the band's accounting (limits, reservations) nor run anything in
        # reclaimed resources, so a usage model there would measure nothing.
        raise click.UsageError(
            "--usage needs --policy queue: Quincy's flow network counts free room by "
            "requests, not by limits and reservations, so it does not reclaim"
        )
    tr = trace_of(trace_spec, nodes)
    if max_jobs is not None:
        tr.jobs = tr.jobs[:max_jobs]
    prof = profile_of(profile_path)
    model = usage_model_of(usage_spec)
    with progress_bar(f"simulate {tr.kind}", len(tr.jobs), progress) as update:
        kw: dict = dict(
            record=bool(store),
            progress=update,
            preemption=preemption,
            reserve_after=reserve_after,
            queue_hierarchy=queue_hierarchy,
        )
        if model is not None:
            kw.update(usage=model, usage_every=usage_every)
        if reclaim is not None:
            from dataclasses import replace

            from esched.core.reservations import current_reclamation

            kw["reclamation"] = replace(current_reclamation(), enabled=reclaim)
        if policy == "quincy":
            config = dict(fairness=fairness, preemption=preemption, victims=victims)
            sim = _quincy(tr, prof, seed, kw, config, round_seconds)
        else:
            sim = Simulator(tr, prof, seed, **kw)
        try:
            result = sim.run()
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
    summary = summarize(result)
    summary["queue_hierarchy"] = queue_hierarchy
    if model is not None:
        summary["usage_model"] = {**model.as_dict(), "assumptions": model.assumptions()}
        summary["reclamation"] = sim.state.reclamation.as_dict()
    if store:
        summary["store"] = asyncio.run(_append(store, result.events or []))
    if report_dir:
        figs = run_figures([result])
        summary["report"] = write_report(
            report_dir, f"esched simulate: {tr.kind} / {prof.name}", [summary], figs
        )
    if output_format == "table":
        terminal_table(*summary_rows([summary]), title=f"{tr.kind}: {tr.source}")
    emit(summary)


def _quincy(tr, prof, seed: int, kw: dict, config: dict, round_seconds: float):
    """The simulator with Quincy's flow rounds (a usage error if OR-Tools is missing)."""
    from esched.core.flow import FlowSolverMissing, require_solver
    from esched.core.quincy import QuincyConfig
    from esched.services.sim.quincy import QuincySimulator

    try:
        require_solver()
    except FlowSolverMissing as exc:
        raise click.UsageError(str(exc)) from None
    return QuincySimulator(
        tr,
        prof,
        seed,
        quincy=QuincyConfig(**config),
        round_seconds=round_seconds,
        **kw,
    )


@bench.command("simulate")
@click.option(
    "--openb",
    default="/work/shared/traces/alibaba-gpu-v2023-openb",
    show_default=True,
    help="openb trace folder (skipped if absent).",
)
@click.option(
    "--philly",
    default="/work/shared/traces/philly-2017",
    show_default=True,
    help="Philly trace folder (skipped if absent).",
)
@click.option(
    "--profile",
    "profile_path",
    default=None,
    help="Profile (default: deploy/profiles/best-fit.yaml of this checkout).",
)
@click.option("--trials", type=click.IntRange(1), default=11, show_default=True)
@click.option("--workers", type=click.IntRange(1), default=None)
def bench_simulate(
    openb: str, philly: str, profile_path: str | None, trials: int, workers: int | None
) -> None:
    """Simulator targets: whole openb, whole Philly, an 11-trial compaction study.

    Each time comes with a baseline measured in the same process: folding the run's
    own event log into a fresh ClusterState (what any replay costs), so
    ``ratio = simulate / fold`` says what scheduling adds on this machine.
    """
    from esched.services.sim.bench import bench_simulator

    here = Path(__file__).resolve().parents[2] / "deploy" / "profiles" / "best-fit.yaml"
    path = profile_path or str(here)
    prof = profile_of(path)
    emit(bench_simulator(prof, path, openb, philly, trials, workers))
