"""``esched simulate``, ``esched compare`` and ``esched bench simulate``."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import click
import orjson

from esched.core import ProfileError, load_profile
from esched.services.cli import cli, emit, migrated_store, queue_hierarchy_option
from esched.services.cli.bench import bench
from esched.services.sim.traces import KINDS, TraceError, load_trace

__all__ = ["bench_simulate", "compare", "simulate"]

TRACE_HELP = (
    f"Trace as KIND:PATH, KIND one of {', '.join(KINDS)}; e.g. openb:DIR, "
    "philly:DIR, itp:FILE.csv, dlrm:FILE.csv, synthetic:nodes=64,jobs=2000,seed=1."
)
NODES_HELP = (
    "Node table for traces without one (itp, dlrm) or to replace it: an openb-style "
    "CSV (sn,cpu_milli,memory_mib,gpu,model) or COUNTxGPUS[:cpu=C][:mem=GiB]"
    "[:model=M],... e.g. 64x8."
)


@contextlib.contextmanager
def _progress(label: str, total: int, enabled: bool) -> Iterator:
    """A rich progress bar on stderr (only on a terminal); yields update(done, total)."""
    if not enabled or not sys.stderr.isatty():
        yield lambda done, tot=None: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)

        def update(done: int, tot: int | None = None) -> None:
            bar.update(task, completed=done, total=tot or total)

        yield update


def _load(trace: str, nodes: str | None):
    try:
        return load_trace(trace, nodes)
    except (TraceError, OSError) as exc:
        raise click.UsageError(str(exc)) from None


def _profile(path: str):
    try:
        return load_profile(path)
    except (ProfileError, OSError) as exc:
        raise click.UsageError(f"profile {path}: {exc}") from None


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


#: ``--usage-every`` of simulate and of compare's reclamation study (one definition).
usage_every_option = click.option(
    "--usage-every",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds of virtual time between usage reports (with --usage).",
)


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
    tr = _load(trace_spec, nodes)
    if max_jobs is not None:
        tr.jobs = tr.jobs[:max_jobs]
    prof = _profile(profile_path)
    model = _usage_model(usage_spec)
    with _progress(f"simulate {tr.kind}", len(tr.jobs), progress) as update:
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


def _usage_model(spec: str | None):
    """The ``--usage`` model (None without one); a bad spec is a usage error."""
    if spec is None:
        return None
    from esched.services.sim.usage import UsageModelError, parse_usage

    try:
        return parse_usage(spec)
    except UsageModelError as exc:
        raise click.UsageError(f"--usage: {exc}") from None


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


#: The flow variants of ``compare --study quincy``: name -> QuincyConfig keywords.
#: QFP is Quincy's (section 4: running tasks in the flow, killed where the flow
#: routes them off their machine, any job); QFP-bands keeps esched's commit rule
#: (only lower bands are evicted), which on a trace of best-effort jobs evicts none.
QUINCY_VARIANTS: dict[str, dict] = {
    "Q": {"fairness": "none"},
    "QF": {},
    "QFP": {"preemption": True, "victims": "any"},
    "QFP-bands": {"preemption": True},
}


def _run_quincy(args: tuple) -> dict:
    """One run of ``compare --study quincy`` in a worker: the greedy queue (variant
    None) or a flow variant."""
    from esched.core.quincy import QuincyConfig
    from esched.services.sim.engine import Simulator
    from esched.services.sim.metrics import summarize
    from esched.services.sim.quincy import QuincySimulator

    tr, path, seed, variant, round_seconds = args
    prof = load_profile(path)
    if variant is None:
        r = Simulator(tr, prof, seed).run()
        r.profile = f"queue ({prof.name})"
    else:
        config = QuincyConfig(**QUINCY_VARIANTS[variant])
        r = QuincySimulator(
            tr,
            prof,
            seed,
            preemption=config.preemption,
            quincy=config,
            round_seconds=round_seconds,
        ).run()
        r.profile = f"quincy {variant}"
    summary = summarize(r)
    summary["variant"] = variant or "queue"
    return summary


def _quincy_study(
    tr, profile: str, seed: int, workers, progress: bool, figs, tables, round_seconds: float = 0.0
) -> dict:
    """Quincy's table (SOSP '09, section 6): SNP, slowdown norms, unfairness per policy."""
    from concurrent.futures import ProcessPoolExecutor

    from esched.core.flow import FlowSolverMissing, require_solver
    from esched.services.sim.report import quincy_figure, quincy_rows, terminal_table

    try:
        require_solver()
    except FlowSolverMissing as exc:
        raise click.UsageError(str(exc)) from None
    t0 = time.perf_counter()
    variants: list[str | None] = [None, *QUINCY_VARIANTS]
    with (
        _progress("quincy", len(variants), progress) as update,
        ProcessPoolExecutor(max_workers=workers or 2) as pool,
    ):
        summaries = []
        for i, s in enumerate(
            pool.map(_run_quincy, [(tr, profile, seed, v, round_seconds) for v in variants])
        ):
            summaries.append(s)
            update(i + 1)
    cols, rows = quincy_rows(summaries)
    tables.append(("Quincy's metrics per policy", cols, rows))
    terminal_table(cols, rows, title=f"quincy ({tr.kind})")
    quincy_figure(summaries, figs)
    return {
        "summaries": summaries,
        "table": {"columns": cols, "rows": rows},
        "seconds": time.perf_counter() - t0,
    }


def _run_one(args: tuple) -> dict:
    """One simulation in a worker: returns (summary, result) for the report."""
    from esched.services.sim.engine import simulate as run
    from esched.services.sim.metrics import summarize

    tr, path, seed = args
    r = run(tr, load_profile(path), seed)
    r.events = None
    return {"summary": summarize(r), "result": r}


@cli.command()
@click.option("--trace", "trace_spec", required=True, metavar="KIND:PATH", help=TRACE_HELP)
@click.option(
    "--profiles",
    "profile_opts",
    multiple=True,
    metavar="FILE",
    help="Profiles to compare (repeat, or list them after --profiles).",
)
@click.argument("more_profiles", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option("--nodes", metavar="SPEC", help=NODES_HELP)
@click.option(
    "--study",
    "studies",
    default="simulate,compaction",
    show_default=True,
    help="Comma list of: simulate, compaction, inflation, holes (Verma et al.'s "
    "hole filling: how many filler tasks still fit after the checkpoint is "
    "packed), curve (FGD's GPU allocation as the workload grows; GPU traces), "
    "quincy (Quincy's table: the greedy queue against the flow scheduler's Q, QF, "
    "QFP (Quincy's preemption) and QFP-bands (esched's band rule for victims), with "
    "the first profile; needs esched[flow]), reclamation (Borg 5.5: the share of the "
    "workload in reclaimed resources, non-production evictions, and compaction by "
    "limits against with reclamation; with --usage).",
)
@click.option(
    "--usage",
    "usage_spec",
    default="synthetic",
    show_default=True,
    metavar="MODEL",
    help="reclamation study: the usage model (synthetic[:k=v,...], correlated[:k=v,...], "
    "limits, constant:F, "
    "csv:FILE; see docs/simulation.md).",
)
@usage_every_option
@click.option(
    "--horizon",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="reclamation study: how long a packing with reclamation runs before pending "
    "pods count as not fitting (default: the hold plus ten decay time constants).",
)
@click.option(
    "--no-run",
    "skip_run",
    is_flag=True,
    help="reclamation study: only the compaction, not the run of the trace in time.",
)
@click.option(
    "--trials",
    type=click.IntRange(1),
    default=11,
    show_default=True,
    help="Compaction/inflation trials (seeds 0..N-1) per profile; Borg used 11.",
)
@click.option(
    "--curve-seeds",
    type=click.IntRange(1),
    default=10,
    show_default=True,
    help="Seeds of the allocation curve (42..; FGD used 10).",
)
@click.option(
    "--method",
    "curve_method",
    type=click.Choice(["kube", "paper", "both"]),
    default="kube",
    show_default=True,
    help="Curve study's scheduler: kube (esched's: seeded random ties, the fullest "
    "fitting GPU share, x floored), paper (the FGD artifact's: a fixed seeded node "
    "order breaks ties, Random takes a random fitting GPU, x rounded) or both.",
)
@click.option(
    "--tau",
    type=click.FloatRange(0, 1),
    default=0.0,
    show_default=True,
    help="Share of pending pods allowed (compaction, inflation).",
)
@click.option(
    "--mu",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Compaction binary search stops when hi - lo <= mu machines.",
)
@click.option(
    "--at",
    "at",
    default=None,
    metavar="WHEN",
    help="Checkpoint for packing studies: peak, all, running (openb's recorded "
    "Running pods) or a time in seconds. Default: running for openb, else peak.",
)
@click.option(
    "--filler",
    "filler_specs",
    multiple=True,
    metavar="SPEC",
    help="Hole-filling task shape (repeat): cpu=Q,memory=Q,gpu=G, e.g. cpu=1, "
    "gpu=0.5, cpu=8,memory=32Gi,gpu=1. Default: cpu=1, memory=1Gi, gpu=1 (for "
    "the resources the cluster has) and the checkpoint's most common pod shape.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the simulations.")
@click.option(
    "--workers", type=click.IntRange(1), default=None, help="Worker processes (default: CPU count)."
)
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Write report.html, figures.json and summary.json here.",
)
@click.option("--progress/--no-progress", default=True, show_default=True)
@click.option(
    "--max-jobs",
    type=click.IntRange(min=1),
    help="Use only the trace's first N jobs (by arrival).",
)
@click.option(
    "--round-seconds",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="quincy study: at most one flow round per this much virtual time (0: after every event).",
)
def compare(
    trace_spec: str,
    profile_opts: tuple[str, ...],
    more_profiles: tuple[str, ...],
    nodes: str | None,
    studies: str,
    trials: int,
    curve_seeds: int,
    curve_method: str,
    tau: float,
    mu: int,
    at: str | None,
    filler_specs: tuple[str, ...],
    seed: int,
    workers: int | None,
    report_dir: str | None,
    progress: bool,
    max_jobs: int | None,
    round_seconds: float,
    usage_spec: str,
    usage_every: float,
    horizon: float | None,
    skip_run: bool,
) -> None:
    """The same trace under several profiles, side by side.

    Studies: the simulation itself (one run per profile), Verma et al.'s cluster
    compaction (smallest random-permutation prefix of machines that runs the
    checkpoint with <= tau pending; --trials trials with error bars), workload
    inflation and hole filling, and FGD's allocation curve. Trials run in parallel
    processes. Prints a JSON document; a table per study goes to stderr.
    """
    from concurrent.futures import ProcessPoolExecutor

    from esched.services.sim.compaction import (
        checkpoint,
        default_at,
        default_fillers,
        parse_filler,
        run_trials,
    )
    from esched.services.sim.report import (
        Figures,
        compare_tables,
        run_figures,
        summary_rows,
        terminal_table,
        write_report,
    )

    profiles = list(profile_opts) + list(more_profiles)
    if len(profiles) < 1:
        raise click.UsageError("give at least one profile (--profiles A.yaml B.yaml ...)")
    for p in profiles:
        if not Path(p).is_file():
            raise click.UsageError(f"profile {p}: no such file")
        _profile(p)
    wanted = [s.strip() for s in studies.split(",") if s.strip()]
    bad = set(wanted) - {
        "simulate", "compaction", "inflation", "holes", "curve", "quincy", "reclamation",
    }  # fmt: skip
    if bad:
        raise click.UsageError(f"unknown study {sorted(bad)}")
    tr = _load(trace_spec, nodes)
    if max_jobs is not None:
        tr.jobs = tr.jobs[:max_jobs]
    at_value: str | float = at or default_at(tr)
    if at_value not in ("peak", "all", "running"):
        try:
            at_value = float(at_value)
        except ValueError:
            raise click.UsageError(f"--at {at!r}: peak, all, running or seconds") from None
    try:
        fillers = [parse_filler(f) for f in filler_specs]
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    out: dict = {"trace": tr.summary(), "profiles": profiles, "studies": wanted}
    model = _usage_model(usage_spec) if "reclamation" in wanted else None
    if {"compaction", "inflation", "holes", "reclamation"} & set(wanted):
        t_cp, cp = checkpoint(tr, at_value)
        fillers = fillers or default_fillers(tr, cp)
        out["checkpoint"] = {
            "at": at_value,
            "time_s": t_cp,
            "jobs": len(cp),
            "pods": sum(j.tasks for j in cp),
            "gpus": sum(j.tasks * j.gpu_milli for j in cp) / 1000,
            "cpu_cores": sum(j.tasks * j.cpu_milli for j in cp) / 1000,
        }
    figs = Figures()
    summaries: list[dict] = []
    tables: list[tuple[str, list[str], list[list[str]]]] = []
    t_all = time.perf_counter()
    if "simulate" in wanted:
        t0 = time.perf_counter()
        with (
            _progress("simulate", len(profiles), progress) as update,
            ProcessPoolExecutor(max_workers=workers or min(len(profiles), 2)) as pool,
        ):
            runs = []
            for i, run in enumerate(pool.map(_run_one, [(tr, p, seed) for p in profiles])):
                runs.append(run)
                update(i + 1)
        summaries = [r["summary"] for r in runs]
        out["simulate"] = {"summaries": summaries, "seconds": time.perf_counter() - t0}
        run_figures([r["result"] for r in runs], figs)
        cols, rows = summary_rows(summaries)
        terminal_table(cols, rows, title=f"simulate {tr.kind}")
    if "quincy" in wanted:
        out["quincy"] = _quincy_study(
            tr, profiles[0], seed, workers, progress, figs, tables, round_seconds
        )
    trial_sets: dict[str, list[dict]] = {}
    for study in ("compaction", "inflation", "holes", "curve", "reclamation"):
        if study not in wanted:
            continue
        seeds = list(range(42, 42 + curve_seeds)) if study == "curve" else list(range(trials))
        params: dict[str, Any] = {"tau": tau, "mu": mu, "at": at_value, "fillers": fillers}
        if study == "reclamation":
            from esched.core.reservations import current_reclamation

            params.update(
                usage=model,
                every=usage_every,
                horizon=horizon,
                run=not skip_run,
                reclamation=current_reclamation(),
            )
        t0 = time.perf_counter()
        n_runs = (
            len(seeds) * len(profiles) * (2 if study == "curve" and curve_method == "both" else 1)
        )
        with _progress(study, n_runs, progress) as update:
            done = [0]

            def tick(_r: dict, done=done, update=update) -> None:
                done[0] += 1
                update(done[0])

            if study == "curve":
                methods = ["kube", "paper"] if curve_method == "both" else [curve_method]
                res = []
                for m in methods:
                    res += run_trials(
                        study, tr, profiles, seeds, {**params, "method": m}, workers, tick
                    )
            else:
                res = run_trials(study, tr, profiles, seeds, params, workers, tick)
        trial_sets[study] = res
        out[study] = {
            "trials": res,
            "seconds": time.perf_counter() - t0,
            "params": {"tau": tau, "mu": mu, "at": at_value, "seeds": seeds},
        }
        if study == "curve":
            out[study]["params"]["method"] = curve_method
        if study == "holes":
            out[study]["params"]["fillers"] = [{"name": f.name, **f.requests()} for f in fillers]
        if study == "reclamation" and model is not None and res:
            out[study]["params"].update(
                usage_model=model.as_dict(),
                assumptions=model.assumptions(),
                reclamation=res[0]["reclamation"],
                every_s=usage_every,
                horizon_s=res[0]["horizon_s"],
            )
            out[study]["borg"] = BORG_RECLAIMED
            tables.append(
                ("reclamation: the usage model's assumptions", ["assumption"],
                 [[a] for a in model.assumptions()])
            )  # fmt: skip
        cols, rows = _study_rows(study, res)
        out[study]["table"] = {"columns": cols, "rows": rows}
        tables.append((study, cols, rows))
        terminal_table(cols, rows, title=f"{study} ({tr.kind}, tau={tau}, at={at_value})")
    compare_tables(trial_sets, figs)
    out["seconds"] = time.perf_counter() - t_all
    if report_dir:
        out["report"] = write_report(
            report_dir, f"esched compare: {tr.kind}", summaries, figs, tables
        )
    emit(out)


#: Borg's figures the reclamation study is read beside (Verma et al., section 5.5).
BORG_RECLAIMED = {
    "reclaimed_share_median_cell": 0.20,
    "source": "Verma et al., EuroSys 2015, section 5.5: about 20% of the workload runs "
    "in reclaimed resources in a median cell",
}


def _study_rows(study: str, res: list[dict]) -> tuple[list[str], list[list[str]]]:
    import numpy as np

    from esched.services.sim.compaction import curve_label
    from esched.services.sim.report import hole_rows

    by: dict[str, list[dict]] = {}
    for r in res:
        by.setdefault(r["profile"], []).append(r)
    rows = []
    if study == "compaction":
        cols = [
            "profile",
            "trials",
            "median machines",
            "p5",
            "p95",
            "min",
            "max",
            "vs best fit",
            "capacity bound (median)",
            "failed",
        ]
        base = None
        meds = {}
        for name, ts in by.items():
            v = [t["machines"] for t in ts if t.get("machines") is not None]
            meds[name] = float(np.median(v)) if v else None
            if "best" in name and v:
                base = meds[name]
        for name, ts in by.items():
            v = [t["machines"] for t in ts if t.get("machines") is not None]
            failed = len(ts) - len(v)
            bounds = [t["capacity_bound"] for t in ts if t.get("capacity_bound") is not None]
            bound = f"{np.median(bounds):.0f}" if bounds else "-"
            if v:
                a = np.asarray(v, dtype=float)
                med = meds[name]
                vs = f"{100 * (med / base - 1):+.1f}%" if base and med is not None else "-"
                rows.append(
                    [
                        name,
                        str(len(ts)),
                        f"{np.median(a):.0f}",
                        f"{np.percentile(a, 5):.0f}",
                        f"{np.percentile(a, 95):.0f}",
                        f"{a.min():.0f}",
                        f"{a.max():.0f}",
                        vs,
                        bound,
                        str(failed),
                    ]
                )
            else:
                share = np.mean([t.get("pending_share_whole", 0) for t in ts])
                rows.append(
                    [
                        name,
                        str(len(ts)),
                        "-",
                        "-",
                        "-",
                        "-",
                        "-",
                        "-",
                        bound,
                        f"{failed} (pending {100 * share:.2f}% on all machines)",
                    ]
                )
        return cols, rows
    if study == "holes":
        return hole_rows(res)
    if study == "reclamation":
        from esched.services.sim.reclamation import reclamation_rows

        return reclamation_rows(res)
    if study == "inflation":
        cols = ["profile", "trials", "median clones", "GPU % at limit", "CPU % at limit"]
        for name, ts in by.items():
            c = [t["clones"] for t in ts]
            g = [t["at_limit"].get("gpu") for t in ts if t["at_limit"].get("gpu") is not None]
            u = [t["at_limit"].get("cpu") for t in ts if t["at_limit"].get("cpu") is not None]
            rows.append(
                [
                    name,
                    str(len(ts)),
                    f"{np.median(c):.0f}",
                    f"{100 * np.median(g):.2f}" if g else "-",
                    f"{100 * np.median(u):.2f}" if u else "-",
                ]
            )
        return cols, rows
    cols = [
        "profile",
        "seeds",
        "GPU alloc % @100 (median)",
        "p25",
        "p75",
        "unallocated GPUs @100",
        "frag % of capacity @100",
        "alloc % final",
    ]
    curves: dict[str, list[dict]] = {}
    for r in res:
        curves.setdefault(curve_label(r), []).append(r)
    for name, ts in curves.items():
        at100 = [t["alloc_at_100"] for t in ts if t["alloc_at_100"] is not None]
        fr = [t["frag_at_100"] for t in ts if t.get("frag_at_100") is not None]
        f = [t["alloc_final"] for t in ts]
        gpus = ts[0]["gpus"]
        med100 = float(np.median(at100)) if at100 else float("nan")
        rows.append(
            [
                name,
                str(len(ts)),
                f"{100 * med100:.2f}",
                f"{100 * np.percentile(at100, 25):.2f}" if at100 else "-",
                f"{100 * np.percentile(at100, 75):.2f}" if at100 else "-",
                f"{(1 - med100) * gpus:.0f}" if at100 else "-",
                f"{100 * np.median(fr):.2f}" if fr else "-",
                f"{100 * np.median(f):.2f}",
            ]
        )
    return cols, rows


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
    from esched.core import ClusterState
    from esched.services.sim.compaction import default_at, run_trials
    from esched.services.sim.engine import Simulator

    here = Path(__file__).resolve().parents[2] / "deploy" / "profiles" / "best-fit.yaml"
    path = profile_path or str(here)
    prof = _profile(path)
    out: dict = {"profile": path, "targets_s": {"openb": 5, "philly": 60, "compaction_11": 120}}
    for name, spec in (("openb", f"openb:{openb}"), ("philly", f"philly:{philly}")):
        folder = spec.split(":", 1)[1]
        if not Path(folder).exists():
            out[name] = {"skipped": f"{folder} not found"}
            continue
        t0 = time.perf_counter()
        tr = load_trace(spec)
        load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        sim = Simulator(tr, prof, 0, record=True)
        res = sim.run()
        sim_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        st = ClusterState()
        st.apply_many(enumerate(res.events or [], start=1))
        fold_s = time.perf_counter() - t0
        out[name] = {
            "jobs": len(tr.jobs),
            "pods": sum(j.tasks for j in tr.jobs),
            "nodes": len(tr.nodes),
            "events": len(res.events or []),
            "load_s": round(load_s, 3),
            "simulate_s": round(sim_s, 3),
            "fold_baseline_s": round(fold_s, 3),
            "ratio_to_fold": round(sim_s / fold_s, 2) if fold_s else None,
            "within_target": load_s + sim_s < out["targets_s"][name],
        }
        if name == "openb":
            t0 = time.perf_counter()
            res_t = run_trials(
                "compaction",
                tr,
                [path],
                list(range(trials)),
                {"tau": 0.0, "mu": 1, "at": default_at(tr)},
                workers,
            )
            comp_s = time.perf_counter() - t0
            machines = [r["machines"] for r in res_t]
            out["compaction_11"] = {
                "trace": "openb",
                "trials": trials,
                "seconds": round(comp_s, 2),
                "machines": machines,
                "within_target": comp_s < out["targets_s"]["compaction_11"],
            }
    emit(out)
