"""``esched ingest``, ``commit``, ``replica``, ``dispatch``, ``jobs`` and ``up``: the services."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from esched.services.cli import (
    bands_option,
    cli,
    command_bus,
    command_keyring,
    command_security,
    config_quota,
    emit,
    input_records,
    kafka_option,
    kafka_security_options,
    metrics_option,
    migrated_store,
    policy_option,
    prefix_option,
    queue_hierarchy_option,
    reserve_option,
    run_async,
    serve,
    signing_option,
    store_option,
    until_signalled,
)

if TYPE_CHECKING:
    from esched.services.bus.base import Bus, GroupOptions


def _service_bus(
    what: str,
    kafka: str | None,
    topic_prefix: str,
    metrics_port: int,
    group: GroupOptions | None = None,
) -> Bus:
    """The Kafka bus of a service that only runs against Kafka (its consumer
    ``group`` timing); serves its metrics.

    ``what`` starts the usage error when ``--kafka`` is missing ("commit reads
    proposals from Kafka").
    """
    from esched.services import metrics
    from esched.services.bus.signing import warn_if_unsigned

    if not kafka:
        raise click.UsageError(
            f"{what}: give --kafka HOST:PORT (or ESCHED_KAFKA); the "
            "embedded mode runs it inside `esched up`"
        )
    bus = command_bus(kafka, topic_prefix, signing=True, group=group)
    warn_if_unsigned(bus.keyring, what.split()[0])
    metrics.serve(metrics_port)
    return bus


# ingest ------------------------------------------------------------------------------


@cli.command()
@kafka_option
@kafka_security_options
@store_option
@prefix_option
@metrics_option
@click.option("--group", default="esched-ingest", show_default=True, help="Consumer group.")
@click.option(
    "--batch-size",
    type=click.IntRange(1, 100_000),
    default=2000,
    show_default=True,
    help="Messages per store transaction.",
)
@click.option(
    "--input",
    "inputs",
    multiple=True,
    metavar="FILE",
    help="Embedded mode (no --kafka): read events from FILE (CloudEvents JSONL or "
    "Kubernetes/Volcano YAML; '-' for stdin) instead of Kafka. Repeatable.",
)
@click.option(
    "--exit-when-idle",
    is_flag=True,
    help="Stop once the input topics are drained (implied by --input).",
)
@click.option(
    "--deadletter-file",
    default="esched-deadletter.jsonl",
    show_default=True,
    help="Embedded mode: where the dead-letter records are appended.",
)
def ingest(
    kafka: str | None,
    store: str,
    topic_prefix: str,
    metrics_port: int,
    group: str,
    batch_size: int,
    inputs: tuple[str, ...],
    exit_when_idle: bool,
    deadletter_file: str,
) -> None:
    """Consume input topics into the event store; bad input goes to the dead-letter topic.

    Offsets are committed only after the store has the batch; a lost broker or
    database is retried with backoff. Prints a JSON summary when it stops. With
    --input, manifests become events as `esched publish` converts them (workloads as
    their pods; other kinds skipped with one warning line each) and invalid events go
    to --deadletter-file.

    Exit codes: 0 done; 2 usage (a file that cannot be read); 3 invalid input (a
    manifest of --input that cannot be converted: nothing is ingested); 4 the store
    could not be reached.
    """
    from esched.services import metrics
    from esched.services.bus.memory import MemoryBus
    from esched.services.ingest import IngestConfig, IngestService

    if kafka and inputs:
        raise click.UsageError("--input is the embedded mode; with --kafka use `esched publish`")
    if not kafka and not inputs:
        raise click.UsageError(
            "nothing to read: give --kafka HOST:PORT (or ESCHED_KAFKA), "
            "or --input FILE for the embedded mode"
        )
    bus = command_bus(kafka, topic_prefix)
    # The embedded mode (--input) reads files into the in-process bus and writes its
    # dead letters back out of it: only the MemoryBus has append() and log().
    memory = bus if isinstance(bus, MemoryBus) else None
    if inputs:
        assert memory is not None  # --input excludes --kafka (checked above)
        for rec in input_records(inputs, bus.topics, "ingest"):
            memory.append(rec.topic, rec.key, rec.value, rec.headers)
        exit_when_idle = True
    metrics.serve(metrics_port)

    async def main() -> dict:
        async with migrated_store(store) as es:
            service = IngestService(bus, es, IngestConfig(group=group, batch_size=batch_size))
            totals = await serve(service, lambda: service.run(exit_when_idle=exit_when_idle))
            head = await es.head()
        return {
            "polled": totals.polled,
            "stored": totals.stored,
            "duplicates": totals.duplicates,
            "deadlettered": totals.deadlettered,
            "reasons": totals.reasons,
            "head": head,
        }

    summary = run_async(main)
    if memory is not None and inputs and summary["deadlettered"]:
        with open(deadletter_file, "ab") as f:
            for m in memory.log(bus.topics.deadletter):
                f.write(m.value + b"\n")
        summary["deadletter_file"] = deadletter_file
    emit(summary)


# commit ------------------------------------------------------------------------------


@cli.command()
@kafka_option
@kafka_security_options
@signing_option
@store_option
@prefix_option
@metrics_option
@click.option(
    "--group",
    default="esched-commit",
    show_default=True,
    help="Consumer group of the proposals topic.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, 100_000),
    default=1000,
    show_default=True,
    help="Proposals per decision batch (one store transaction).",
)
@click.option(
    "--snapshot-every",
    type=click.IntRange(0),
    default=50_000,
    show_default=True,
    metavar="N",
    help="Save a state snapshot every N folded events (0: never), so a standby takes over fast.",
)
@click.option(
    "--exit-when-idle",
    is_flag=True,
    help="Stop once the proposals topic is drained (tests, batch runs).",
)
@click.option(
    "--profile",
    "profile_path",
    type=click.Path(exists=True, dir_okay=False),
    help="The replicas' KubeSchedulerConfiguration: its NodeAffinity addedAffinity is "
    "checked on each binding.",
)
@bands_option
@queue_hierarchy_option
def commit(
    kafka: str | None,
    store: str,
    topic_prefix: str,
    metrics_port: int,
    group: str,
    batch_size: int,
    snapshot_every: int,
    exit_when_idle: bool,
    profile_path: str | None,
    bands: Any,
    queue_hierarchy: str,
) -> None:
    """The commit service: the single writer of placement decisions.

    Reads proposals from the `<prefix>proposals` topic, validates each against the
    authoritative fold of the log (fine-grained; gangs all-or-nothing), appends
    committed / rejected decisions to the store and publishes them to
    `<prefix>decisions`. Exactly one instance decides: others stand by on a lease
    (PostgreSQL advisory lock; a lock file next to a SQLite store) and take over
    from the log within seconds. Prints a JSON summary when it stops.
    """
    from esched.services.commit import CommitConfig, CommitService
    from esched.services.lease import open_lease

    bus = _service_bus("commit reads proposals from Kafka", kafka, topic_prefix, metrics_port)
    profile = _load_profile_option(profile_path)

    async def main() -> dict:
        async with migrated_store(store) as es:
            service = CommitService(
                es,
                bus,
                lease=open_lease(store, "commit"),
                config=CommitConfig(
                    group=group,
                    batch_size=batch_size,
                    snapshot_every=snapshot_every,
                    bands=bands,
                    profile=profile,
                    queue_hierarchy=queue_hierarchy,
                ),
            )
            totals = await serve(service, lambda: service.run(exit_when_idle=exit_when_idle))
            return {**totals.as_dict(), "head": await es.head()}

    emit(run_async(main))


# replica / dispatch / up ------------------------------------------------------------


def _load_profile_option(path: str | None) -> Any:
    from esched.core import ProfileError, load_profile

    if not path:
        return None
    try:
        return load_profile(path)
    except (OSError, ProfileError) as exc:
        raise click.UsageError(f"--profile {path}: {exc}") from exc


#: How replicas follow the log (ReplicaConfig.follow): `esched replica` and `up`.
follow_option = click.option(
    "--follow",
    type=click.Choice(["log", "feed"]),
    default="log",
    show_default=True,
    help="How replicas follow the log once started: `log` folds every event from "
    "the store; `feed` applies the dispatcher's feed of claims records and folds only "
    "the events that are not a pod's, entering their work's pods from their "
    "submissions (less CPU per pod of the flow; the dispatcher must run with --feed, "
    "which `up` sets). See docs/architecture.md, following other partitions by their "
    "claims.",
)


@cli.command()
@click.option(
    "--id",
    "replica_id",
    required=True,
    metavar="NAME",
    help="This replica's name (in its proposals; unique per process).",
)
@kafka_option
@kafka_security_options
@signing_option
@store_option
@prefix_option
@metrics_option
@click.option(
    "--group",
    default="esched-replicas",
    show_default=True,
    help="Consumer group of the replicas sharing the work topic (one per "
    "deployment sharing a broker).",
)
@click.option(
    "--profile",
    "profile_path",
    type=click.Path(exists=True, dir_okay=False),
    help="KubeSchedulerConfiguration profile (scoring plugins and weights).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Placer RNG seed.")
@click.option(
    "--batch-size",
    type=click.IntRange(1, 100_000),
    default=1000,
    show_default=True,
    help="Work items per placement pass.",
)
@click.option(
    "--pipeline",
    type=click.IntRange(1, 64),
    default=8,
    show_default=True,
    help="Batches in flight: the next batch is placed, with the undecided "
    "claims assumed, while earlier ones wait for their decisions.",
)
@click.option(
    "--preemption/--no-preemption",
    default=True,
    show_default=True,
    help="Let pods that fit nowhere evict pods of lower priority bands.",
)
@click.option(
    "--session-timeout",
    type=click.FloatRange(1, 300),
    default=6.0,
    show_default=True,
    metavar="SECONDS",
    help="The group drops a replica silent this long and hands its work partitions "
    "to the others (how long a killed replica's share waits). Apache Kafka refuses "
    "less than its group.min.session.timeout.ms (6 s by default); on tansu it must "
    "exceed 3 s plus --heartbeat-interval, or the group never settles.",
)
@click.option(
    "--heartbeat-interval",
    type=click.FloatRange(0.05, 60),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between group heartbeats (a replica learns of a rebalance at its "
    "next one); below --session-timeout.",
)
@click.option(
    "--static-membership/--no-static-membership",
    default=True,
    show_default=True,
    help="Join the group under the replica's --id (Kafka static membership, KIP-345): "
    "restarted within its session, it takes its old partitions back without a "
    "rebalance. Turn it off on the tansu broker, which can rebalance a group of "
    "static members forever (docs/operations.md).",
)
@click.option(
    "--bridge-rebalance/--no-bridge-rebalance",
    default=True,
    show_default=True,
    help="While the group rebalances, keep working this replica's previous share of "
    "the work partitions (read by assignment), so one replica leaving or dying does "
    "not stop placement on every replica (aiokafka rebalances eagerly).",
)
@follow_option
@bands_option
@queue_hierarchy_option
@reserve_option
@policy_option
@click.option(
    "--count-cpu",
    is_flag=True,
    help="Count this replica's CPU per part of placing (its summary's `cpu_s`, as "
    "`esched bench e2e` and `bench scale` report it): a thread CPU clock read per "
    "part of each batch.",
)
def replica(
    replica_id: str,
    kafka: str | None,
    store: str,
    topic_prefix: str,
    metrics_port: int,
    group: str,
    profile_path: str | None,
    seed: int,
    batch_size: int,
    pipeline: int,
    preemption: bool,
    session_timeout: float,
    heartbeat_interval: float,
    static_membership: bool,
    bridge_rebalance: bool,
    follow: str,
    bands: Any,
    queue_hierarchy: str,
    reserve_after: float,
    quincy: Any,
    quincy_fairness: str,
    count_cpu: bool,
) -> None:
    """A replica scheduler: fold the log, place pending work, send proposals.

    Joins the consumer group (`--group`) of `<prefix>work` (so replicas share
    the work and take over a dead one's share), places pods and whole gangs with
    the core on its own fold, sends proposals to `<prefix>proposals`, and places
    the next batches while the decisions come back (their claims assumed);
    retries rejections with fresh state, and reports pods no node fits as
    `esched.pod.unschedulable`. Restarted, it works its previous share of the work
    partitions (recorded in the store) while it rejoins the group. Stopped with
    SIGTERM, it leaves the group (on Apache Kafka its partitions move at once).
    Prints a JSON summary when it stops.
    """
    from esched.services.bus import GroupOptions
    from esched.services.replica import Replica, ReplicaConfig

    if heartbeat_interval >= session_timeout:
        raise click.UsageError("--heartbeat-interval must be below --session-timeout")
    group_options = GroupOptions(
        session_timeout_ms=round(session_timeout * 1000),
        heartbeat_interval_ms=round(heartbeat_interval * 1000),
        static_membership=static_membership,
    )
    bus = _service_bus(
        "replica takes work from Kafka", kafka, topic_prefix, metrics_port, group_options
    )
    profile = _load_profile_option(profile_path)

    async def main() -> dict:
        async with migrated_store(store) as es:
            r = Replica(
                es,
                bus,
                replica_id,
                profile=profile,
                seed=seed,
                config=ReplicaConfig(
                    group=group,
                    batch_size=batch_size,
                    pipeline=pipeline,
                    preemption=preemption,
                    bridge_rebalance=bridge_rebalance,
                    bands=bands,
                    reserve_after=reserve_after,
                    queue_hierarchy=queue_hierarchy,
                    quincy=quincy,
                    follow=follow,
                    count_cpu=count_cpu,
                ),
            )
            await serve(r, r.run)
            return r.stats()

    emit(run_async(main))


@cli.command()
@kafka_option
@kafka_security_options
@signing_option
@store_option
@prefix_option
@metrics_option
@bands_option
@queue_hierarchy_option
@click.option(
    "--feed/--no-feed",
    default=False,
    show_default=True,
    help="While leading, publish the feed on `<prefix>feed` (claims records of the "
    "pods' events and the events replicas fold themselves) for replicas run with "
    "--follow feed.",
)
def dispatch(
    kafka: str | None,
    store: str,
    topic_prefix: str,
    metrics_port: int,
    bands: Any,
    queue_hierarchy: str,
    feed: bool,
) -> None:
    """The work dispatcher: publish pending pods and gangs to `<prefix>work`.

    Follows the log; publishes a work item when a pod or gang becomes pending (and
    every pending one on start), re-publishes rejected pods after a delay and
    unschedulable ones when capacity frees, with backoff. One instance is active
    (lease `dispatch`); others stand by. Prints a JSON summary when it stops.
    """
    from esched.core.admission import Admission
    from esched.services.dispatch import DispatchConfig, Dispatcher
    from esched.services.lease import open_lease

    quota = config_quota(bands)
    bus = _service_bus("dispatch publishes to Kafka", kafka, topic_prefix, metrics_port)

    async def main() -> dict:
        async with migrated_store(store) as es:
            d = Dispatcher(
                es,
                bus,
                lease=open_lease(store, "dispatch"),
                admission=Admission(quota, queue_hierarchy),
                config=DispatchConfig(feed=feed),
            )
            totals = await serve(d, d.run)
            return totals.as_dict()

    emit(run_async(main))


@cli.command()
@store_option
@metrics_option
@click.option(
    "--tick",
    type=click.FloatRange(0.01, 60),
    default=0.2,
    show_default=True,
    help="Seconds between passes when nothing wakes it (deadlines are checked each pass).",
)
def jobs(store: str, metrics_port: int, tick: float) -> None:
    """The Volcano Job lifecycle controller as its own process.

    Follows the log with the job fold and appends what the fold decides: job phase
    changes but a job's start, which its Job and placement imply
    (`esched.job.updated`), pods withdrawn (`esched.pod.deleted`) and
    resubmitted after a restart or once a task's `dependsOn` tasks completed
    (`esched.pod.submitted`), deadlines reached (`esched.job.timer`). Needs only the
    store (no Kafka). One instance is active (lease `jobs`); others stand by. Not
    needed beside `esched up`, which runs one. Prints a JSON summary when it stops.
    """
    from esched.services import metrics
    from esched.services.jobs import JobController, JobsConfig
    from esched.services.lease import open_lease

    metrics.serve(metrics_port)

    async def main() -> dict:
        async with migrated_store(store) as es:
            c = JobController(es, lease=open_lease(store, "jobs"), config=JobsConfig(tick=tick))
            totals = await serve(c, c.run)
            return totals.as_dict()

    emit(run_async(main))


@cli.command()
@kafka_option
@kafka_security_options
@signing_option
@store_option
@prefix_option
@metrics_option
@click.option(
    "--input",
    "inputs",
    multiple=True,
    metavar="FILE",
    help="Events to ingest (CloudEvents JSONL or Kubernetes/Volcano YAML; '-' for "
    "stdin). Repeatable.",
)
@click.option(
    "--generate",
    metavar="NODES:PODS",
    help="Ingest a synthetic cluster: NODES nodes, PODS pending pods.",
)
@click.option(
    "--replicas",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Replica schedulers to run.",
)
@click.option(
    "--profile",
    "profile_path",
    type=click.Path(exists=True, dir_okay=False),
    help="KubeSchedulerConfiguration profile of the replicas.",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the placers (and of --generate).",
)
@click.option(
    "--exit-when-idle",
    is_flag=True,
    help="Stop once the input is consumed and nothing placeable is left.",
)
@click.option("--quiet", is_flag=True, help="No progress lines on stderr.")
@follow_option
@bands_option
@queue_hierarchy_option
@reserve_option
@policy_option
def up(
    kafka: str | None,
    store: str,
    topic_prefix: str,
    metrics_port: int,
    inputs: tuple[str, ...],
    generate: str | None,
    replicas: int,
    profile_path: str | None,
    seed: int,
    exit_when_idle: bool,
    quiet: bool,
    follow: str,
    bands: Any,
    queue_hierarchy: str,
    reserve_after: float,
    quincy: Any,
    quincy_fairness: str,
) -> None:
    """The whole system in one process: ingest, commit, dispatcher, replicas.

    Embedded by default (SQLite store, in-process bus); with --kafka and --store
    postgresql://... the same services run against the real ones. Progress goes to
    stderr, a JSON summary to stdout (placed, unschedulable, conflicts, pods/s and
    the final replay summary). A second run on the same store continues where the
    first stopped.

    Exit codes: 0 done; 2 usage (a file that cannot be read); 3 invalid input (a
    manifest of --input that cannot be converted: nothing runs); 4 the broker or
    store could not be reached.
    """
    from esched.services import metrics
    from esched.services.bus.base import TopicNames
    from esched.services.bus.signing import warn_if_unsigned
    from esched.services.up import Up, UpConfig, generated_records, parse_generate

    topics = TopicNames(topic_prefix)
    records: list = []
    if inputs:
        records.extend(input_records(inputs, topics, "up"))
    try:
        if generate:
            nodes, pods = parse_generate(generate)
            records.extend(generated_records(nodes, pods, topics, seed))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    profile = _load_profile_option(profile_path)
    quota = config_quota(bands)
    security = command_security() if kafka else None
    keyring = command_keyring()
    if kafka:
        # Embedded (no --kafka), nothing outside the process can write its records.
        warn_if_unsigned(keyring, "up")
    metrics.serve(metrics_port)
    runner = Up(
        UpConfig(
            store=store,
            kafka=kafka,
            kafka_security=security,
            keyring=keyring,
            topic_prefix=topic_prefix,
            replicas=replicas,
            profile=profile,
            bands=bands,
            queue_hierarchy=queue_hierarchy,
            reserve_after=reserve_after,
            quincy=quincy,
            seed=seed,
            exit_when_idle=exit_when_idle,
            quota=quota,
            follow=follow,
        ),
        records,
        progress=None if quiet else (lambda line: click.echo(line, err=True)),
    )

    async def main() -> dict:
        return await until_signalled(runner.run(), runner.stop)

    emit(run_async(main))
