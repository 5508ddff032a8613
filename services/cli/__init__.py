"""The ``esched`` command: every service and tool is a subcommand.

This package holds the main group, the shared options, configuration and exit codes;
one module per command group registers its commands on :data:`cli` when imported:
:mod:`.services` (ingest, commit, replica, dispatch, up), :mod:`.store`,
:mod:`.data` (publish, replay, audit), :mod:`.bench`, :mod:`.simulate` (simulate,
bench simulate), :mod:`.compare` (the studies) and :mod:`.core` (explain, the core's
benchmarks); :mod:`.sim_inputs` holds what simulate and compare read from flags.

Configuration, highest precedence first: flags, environment (``ESCHED_KAFKA``,
``ESCHED_STORE``, ...), the YAML file given by ``--config`` / ``ESCHED_CONFIG``,
built-in defaults. Exit codes: 0 ok, 1 failure (``audit``: a violation), 2 usage or
configuration error, 3 invalid input, 4 a peer (store, broker) could not be
reached, 5 unschedulable (``explain``: the pod fits no node).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import click
import orjson
import yaml

from esched.services.bus.base import DEFAULT_FEED_RETENTION_MS, DEFAULT_WORK_PARTITIONS

if TYPE_CHECKING:
    from esched.services.bus import Bus
    from esched.services.bus.base import GroupOptions
    from esched.services.bus.security import KafkaSecurity
    from esched.services.bus.signing import Keyring
    from esched.services.store.base import EventStore

__all__ = ["cli", "main"]

T = TypeVar("T")
log = logging.getLogger("esched")

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INVALID_INPUT = 3
EXIT_UNAVAILABLE = 4
#: ``esched explain``: the pod fits no node.
EXIT_UNSCHEDULABLE = 5

DEFAULT_STORE = "sqlite:///esched.sqlite"
#: Keys of a config file that apply to every subcommand that has such an option.
SHARED_KEYS = (
    "kafka",
    "store",
    "topic_prefix",
    "metrics_port",
    "metrics_addr",
    "bands",
    "reclamation",
    "kafka_security_protocol",
    "kafka_ca_file",
    "kafka_cert_file",
    "kafka_key_file",
    "kafka_key_password_file",
    "kafka_check_hostname",
    "kafka_sasl_mechanism",
    "kafka_sasl_username",
    "kafka_sasl_password_file",
    "kafka_oauth_token_file",
    "signing_keys_file",
    "work_partitions",
    "feed_retention_ms",
    "queue_hierarchy",
)
#: Top-level keys whose values are data, not option names: kept as written.
_VERBATIM_KEYS = ("bands", "reclamation")


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
    except BusError as exc:
        if not exc.retriable:
            # Refused by the broker (a record too large, a bad topic): not a peer away.
            click.echo(f"esched: bus error: {exc}", err=True)
            sys.exit(EXIT_FAILURE)
        click.echo(f"esched: unavailable: {exc}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    except TransientStoreError as exc:
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


class Service(Protocol):
    """What a long-running service offers the CLI: start, stop (idempotent), run."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


async def serve(service: Service, run: Callable[[], Awaitable[T]]) -> T:
    """Start ``service``, await ``run()`` until it ends or a signal stops it
    (:func:`until_signalled`), and stop the service whatever happened."""
    await service.start()
    try:
        return await until_signalled(run(), service.stop)
    finally:
        await service.stop()


@contextlib.asynccontextmanager
async def migrated_store(url: str) -> AsyncIterator[EventStore]:
    """The store at ``url``, connected and migrated (every service migrates at start:
    idempotent, and safe when several start at once), closed on exit."""
    from esched.services.store import open_store

    async with open_store(url) as es:
        await es.migrate()
        yield es


def input_records(
    paths: tuple[str, ...], topics: Any, command: str, mode: str | None = None
) -> list[Any]:
    """The bus records of input files (``publish``, ``ingest --input``, ``up --input``):
    one warning line on stderr per object skipped; exit 2 when a file cannot be read,
    3 when its content cannot be converted (nothing is sent or ingested then)."""
    from esched.services.event_files import read_records

    def warn(line: str) -> None:
        click.echo(f"esched {command}: warning: {line}", err=True)

    try:
        return list(read_records(paths, topics, warn=warn, mode=mode))
    except OSError as exc:
        raise click.UsageError(str(exc)) from exc
    except ValueError as exc:
        click.echo(f"esched {command}: invalid input: {exc}", err=True)
        sys.exit(EXIT_INVALID_INPUT)


def emit(data: Any) -> None:
    """Print data as indented JSON on stdout (the data channel); numpy values as numbers."""
    option = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY
    click.echo(orjson.dumps(data, option=option).decode())


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
_metrics_port = click.option(
    "--metrics-port",
    envvar="ESCHED_METRICS_PORT",
    type=int,
    default=0,
    help="Serve Prometheus /metrics on this port (0: off).",
)


def _set_metrics_addr(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    from esched.services import metrics

    metrics.BIND_ADDR = value
    return value


_metrics_addr = click.option(
    "--metrics-addr",
    envvar="ESCHED_METRICS_ADDR",
    default="127.0.0.1",
    show_default=True,
    metavar="ADDRESS",
    expose_value=False,
    callback=_set_metrics_addr,
    help="Address /metrics listens on (0.0.0.0: every interface, e.g. in a container).",
)


def metrics_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--metrics-port`` and ``--metrics-addr`` (the latter read by ``metrics.serve``)."""
    return _metrics_port(_metrics_addr(fn))


#: Where the Kafka security and signing options are collected (``ctx.meta``): they
#: are not parameters of each command function, :func:`command_bus` reads them.
_BUS_META = "esched.bus_options"


def _collect(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    ctx.meta.setdefault(_BUS_META, {})[param.name] = value
    return value


def _bus_option(*decls: str, **kwargs: Any) -> Callable[[Any], Any]:
    return click.option(*decls, expose_value=False, callback=_collect, **kwargs)


_security_options = (
    _bus_option(
        "--kafka-security-protocol",
        envvar="ESCHED_KAFKA_SECURITY_PROTOCOL",
        type=click.Choice(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"], case_sensitive=False),
        help="Kafka security.protocol [env ESCHED_KAFKA_SECURITY_PROTOCOL]. Default: from "
        "the other options (SASL_SSL with a SASL mechanism and a CA or client "
        "certificate, SASL_PLAINTEXT with a mechanism, SSL with a CA or certificate, "
        "else PLAINTEXT).",
    ),
    _bus_option(
        "--kafka-ca-file",
        envvar="ESCHED_KAFKA_CA_FILE",
        metavar="PEM",
        help="CA certificates the brokers' certificates are checked against (else the "
        "system's) [env ESCHED_KAFKA_CA_FILE].",
    ),
    _bus_option(
        "--kafka-cert-file",
        envvar="ESCHED_KAFKA_CERT_FILE",
        metavar="PEM",
        help="Client certificate for mutual TLS [env ESCHED_KAFKA_CERT_FILE].",
    ),
    _bus_option(
        "--kafka-key-file",
        envvar="ESCHED_KAFKA_KEY_FILE",
        metavar="PEM",
        help="Client certificate's private key [env ESCHED_KAFKA_KEY_FILE]; its "
        "password, if any, in $ESCHED_KAFKA_KEY_PASSWORD or --kafka-key-password-file.",
    ),
    _bus_option(
        "--kafka-key-password-file",
        envvar="ESCHED_KAFKA_KEY_PASSWORD_FILE",
        metavar="FILE",
        help="File holding the client key's password [env ESCHED_KAFKA_KEY_PASSWORD_FILE].",
    ),
    _bus_option(
        "--kafka-check-hostname/--kafka-no-check-hostname",
        envvar="ESCHED_KAFKA_CHECK_HOSTNAME",
        default=True,
        show_default=True,
        help="Check the broker's host name against its certificate.",
    ),
    _bus_option(
        "--kafka-sasl-mechanism",
        envvar="ESCHED_KAFKA_SASL_MECHANISM",
        type=click.Choice(
            ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"], case_sensitive=False
        ),
        help="SASL mechanism [env ESCHED_KAFKA_SASL_MECHANISM].",
    ),
    _bus_option(
        "--kafka-sasl-username",
        envvar="ESCHED_KAFKA_SASL_USERNAME",
        metavar="NAME",
        help="SASL user (PLAIN, SCRAM) [env ESCHED_KAFKA_SASL_USERNAME]; the password in "
        "$ESCHED_KAFKA_SASL_PASSWORD or --kafka-sasl-password-file, never a flag.",
    ),
    _bus_option(
        "--kafka-sasl-password-file",
        envvar="ESCHED_KAFKA_SASL_PASSWORD_FILE",
        metavar="FILE",
        help="File holding the SASL password [env ESCHED_KAFKA_SASL_PASSWORD_FILE].",
    ),
    _bus_option(
        "--kafka-oauth-token-file",
        envvar="ESCHED_KAFKA_OAUTH_TOKEN_FILE",
        metavar="FILE",
        help="OAUTHBEARER: file holding the access token, re-read at each "
        "authentication (a refresher rewrites it) [env ESCHED_KAFKA_OAUTH_TOKEN_FILE].",
    ),
)
_work_partitions_option = _bus_option(
    "--work-partitions",
    envvar="ESCHED_WORK_PARTITIONS",
    type=click.IntRange(1),
    default=DEFAULT_WORK_PARTITIONS,
    show_default=True,
    help="Partitions the work topic is created with: the most replicas that share "
    "work [env ESCHED_WORK_PARTITIONS]. An existing topic is not changed (a warning "
    "when it has fewer).",
)
_feed_retention_option = _bus_option(
    "--feed-retention-ms",
    envvar="ESCHED_FEED_RETENTION_MS",
    type=click.IntRange(1),
    default=DEFAULT_FEED_RETENTION_MS,
    show_default=True,
    help="retention.ms (and segment.ms) the feed topic is created with [env "
    "ESCHED_FEED_RETENTION_MS]: a replica starts near its fold's position and folds "
    "from the store what the feed no longer holds. An existing topic is not changed.",
)
_signing_option = _bus_option(
    "--signing-keys-file",
    envvar="ESCHED_SIGNING_KEYS_FILE",
    metavar="FILE",
    help="Keys that sign and check proposals and work items: `kid:secret` lines, the "
    "current key first, then previous ones still accepted [env "
    "ESCHED_SIGNING_KEYS_FILE; or the keys themselves in $ESCHED_SIGNING_KEYS, "
    "comma-separated]. Without keys records are unsigned (a warning at start).",
)


def kafka_security_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The Kafka TLS / SASL options, ``--work-partitions`` and ``--feed-retention-ms``
    (read by :func:`command_bus`)."""
    for option in reversed((*_security_options, _work_partitions_option, _feed_retention_option)):
        fn = option(fn)
    return fn


def signing_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--signing-keys-file`` (read by :func:`command_bus`)."""
    return _signing_option(fn)


def _secret(options: dict[str, Any], file_key: str, env: str, what: str) -> str | None:
    """A secret from its file option, else its environment variable (never a flag:
    flags show in process lists)."""
    import os

    path = options.get(file_key)
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise click.UsageError(f"{what} file {path}: {exc.strerror}") from None
    return os.environ.get(env) or None


def command_security() -> KafkaSecurity:
    """The Kafka security settings of the current command's options and environment."""
    from esched.services.bus.security import KafkaSecurity, KafkaSecurityError

    opts = click.get_current_context().meta.get(_BUS_META, {})
    security = KafkaSecurity(
        protocol=opts.get("kafka_security_protocol"),
        ca_file=opts.get("kafka_ca_file"),
        cert_file=opts.get("kafka_cert_file"),
        key_file=opts.get("kafka_key_file"),
        key_password=_secret(
            opts, "kafka_key_password_file", "ESCHED_KAFKA_KEY_PASSWORD", "Kafka key password"
        ),
        check_hostname=opts.get("kafka_check_hostname", True),
        sasl_mechanism=opts.get("kafka_sasl_mechanism"),
        sasl_username=opts.get("kafka_sasl_username"),
        sasl_password=_secret(
            opts, "kafka_sasl_password_file", "ESCHED_KAFKA_SASL_PASSWORD", "SASL password"
        ),
        oauth_token_file=opts.get("kafka_oauth_token_file"),
    )
    try:
        security.client_kwargs()  # checked in full here: files, key password
    except KafkaSecurityError as exc:
        raise click.UsageError(str(exc)) from None
    return security


def command_keyring() -> Keyring | None:
    """The signing keys of the current command (None: unsigned)."""
    from esched.services.bus.signing import SigningConfigError, load_keyring

    opts = click.get_current_context().meta.get(_BUS_META, {})
    try:
        return load_keyring(opts.get("signing_keys_file"))
    except SigningConfigError as exc:
        raise click.UsageError(str(exc)) from None


def command_bus(
    kafka: str | None,
    topic_prefix: str,
    *,
    signing: bool = False,
    group: GroupOptions | None = None,
) -> Bus:
    """The bus of the current command: Kafka with its security options (bad ones
    are a usage error, exit 2) and consumer ``group`` timing, or the in-process bus;
    with ``signing``, the command's signing keys."""
    from esched.services.bus import open_bus
    from esched.services.bus.security import KafkaSecurityError

    opts = click.get_current_context().meta.get(_BUS_META, {})
    security = command_security() if kafka else None
    keyring = command_keyring() if signing else None
    try:
        return open_bus(
            kafka,
            topic_prefix,
            security=security,
            keyring=keyring,
            work_partitions=int(opts.get("work_partitions") or DEFAULT_WORK_PARTITIONS),
            feed_retention_ms=int(opts.get("feed_retention_ms") or DEFAULT_FEED_RETENTION_MS),
            group=group,
        )
    except KafkaSecurityError as exc:
        raise click.UsageError(str(exc)) from None


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
queue_hierarchy_option = click.option(
    "--queue-hierarchy",
    type=click.Choice(["parent", "annotations"]),
    envvar="ESCHED_QUEUE_HIERARCHY",
    default="parent",
    show_default=True,
    help="Where the queue tree of fair shares and capabilities comes from: `parent` "
    "(spec.parent, Volcano's proportion/capacity plugins) or `annotations` (the "
    "volcano.sh/hierarchy and volcano.sh/hierarchy-weights annotations, as Volcano's drf "
    "plugin with enableHierarchy). Give every service the same value "
    "[env ESCHED_QUEUE_HIERARCHY; config key queue_hierarchy].",
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


def _round_policy(ctx: click.Context, _param: click.Parameter, value: str) -> Any:
    """``--policy`` as the replicas' Quincy config (None: the scheduling pass)."""
    if value != "quincy":
        return None
    from esched.core.flow import FlowSolverMissing, require_solver
    from esched.core.quincy import QuincyConfig

    try:
        require_solver()
    except FlowSolverMissing as exc:
        raise click.UsageError(str(exc)) from None
    fairness = ctx.params.get("quincy_fairness") or "strict"
    return QuincyConfig(fairness=fairness)


def policy_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--policy pass|quincy`` and ``--quincy-fairness``: the replicas' placement
    (the parameter ``quincy``: a QuincyConfig or None)."""
    fn = click.option(
        "--policy",
        "quincy",
        type=click.Choice(["pass", "quincy"]),
        default="pass",
        show_default=True,
        callback=_round_policy,
        help="pass: one scheduling pass per batch of work; quincy: each batch is a round "
        "of Quincy's min-cost flow (needs esched[flow]), what it leaves goes to the pass.",
    )(fn)
    return click.option(
        "--quincy-fairness",
        type=click.Choice(["strict", "none"]),
        default="strict",
        show_default=True,
        is_eager=True,
        help="--policy quincy: strict fair shares among a round's jobs (E = F = A) or "
        "none (Quincy's Q).",
    )(fn)


format_option = click.option(
    "--format",
    "output_format",
    type=click.Choice(["json", "table"]),
    default="json",
    show_default=True,
    help="Output format.",
)


def upto_option(verb: str) -> Callable[[Any], Any]:
    """``--upto POSITION``: the last log position a command reads; ``verb`` starts the help."""
    return click.option(
        "--upto",
        type=click.IntRange(0),
        metavar="POSITION",
        help=f"{verb} up to and including this log position (default: the head).",
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
    from esched.core.reservations import use_reclamation

    # Every state this process folds uses the file's reclamation section (without
    # one: the defaults, reclamation off, as kube).
    use_reclamation(config_reclamation())


def config_quota(bands: Any = None) -> Any:
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


def config_reclamation() -> Any:
    """The config file's ``reclamation:`` section as a
    :class:`~esched.core.reservations.ReclamationConfig` (the defaults without one); a
    bad section is a usage error (exit 2) naming the field."""
    from esched.core.reservations import ReclamationConfigError, parse_reclamation

    ctx = click.get_current_context().find_root()
    path = (ctx.obj or {}).get("config")
    if not path:
        return parse_reclamation(None)
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise click.UsageError(f"config file {path}: {exc}") from exc
    try:
        return parse_reclamation(data.get("reclamation") if isinstance(data, dict) else None)
    except ReclamationConfigError as exc:
        raise click.UsageError(f"config file {path}: {exc}") from exc


# The command groups register themselves on ``cli`` (and ``bench``) when imported.
for _group in ("services", "store", "data", "bench", "simulate", "compare", "core"):
    importlib.import_module(f"{__name__}.{_group}")


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="esched")
