"""``esched compare``: one trace under several profiles, study by study."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from esched.services.cli import cli, emit
from esched.services.cli.sim_inputs import (
    NODES_HELP,
    TRACE_HELP,
    profile_of,
    progress_bar,
    trace_of,
    usage_every_option,
    usage_model_of,
)
from esched.services.sim.studies import (
    BORG_RECLAIMED,
    QUINCY_VARIANTS,
    run_profile,
    run_quincy_variant,
    study_rows,
)

__all__ = ["compare"]


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
        progress_bar("quincy", len(variants), progress) as update,
        ProcessPoolExecutor(max_workers=workers or 2) as pool,
    ):
        summaries = []
        for i, s in enumerate(
            pool.map(run_quincy_variant, [(tr, profile, seed, v, round_seconds) for v in variants])
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
        profile_of(p)
    wanted = [s.strip() for s in studies.split(",") if s.strip()]
    bad = set(wanted) - {
        "simulate", "compaction", "inflation", "holes", "curve", "quincy", "reclamation",
    }  # fmt: skip
    if bad:
        raise click.UsageError(f"unknown study {sorted(bad)}")
    tr = trace_of(trace_spec, nodes)
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
    model = usage_model_of(usage_spec) if "reclamation" in wanted else None
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
            progress_bar("simulate", len(profiles), progress) as update,
            ProcessPoolExecutor(max_workers=workers or min(len(profiles), 2)) as pool,
        ):
            runs = []
            for i, run in enumerate(pool.map(run_profile, [(tr, p, seed) for p in profiles])):
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
        with progress_bar(study, n_runs, progress) as update:
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
        cols, rows = study_rows(study, res)
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
