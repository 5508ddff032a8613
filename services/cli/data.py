"""``esched publish``, ``replay`` and ``audit``: events in, state and checks out."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

import click

from esched.services.cli import (
    EXIT_FAILURE,
    EXIT_INVALID_INPUT,
    bands_option,
    cli,
    command_bus,
    config_quota,
    emit,
    format_option,
    input_records,
    kafka_security_options,
    migrated_store,
    prefix_option,
    queue_hierarchy_option,
    run_async,
    store_option,
    upto_option,
)

# publish -----------------------------------------------------------------------------


@cli.command()
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option(
    "--kafka",
    envvar="ESCHED_KAFKA",
    required=True,
    metavar="HOST:PORT[,...]",
    help="Kafka bootstrap servers [env ESCHED_KAFKA]; required (without Kafka, "
    "`esched ingest --input` and `esched up --input` read the same files).",
)
@kafka_security_options
@prefix_option
@click.option(
    "--mode",
    type=click.Choice(["structured", "binary"]),
    default="structured",
    show_default=True,
    help="CloudEvents Kafka content mode: the JSON envelope as the value "
    "(content-type application/cloudevents+json), or ce_ headers with the data as the value.",
)
@click.option(
    "--no-validate",
    is_flag=True,
    help="Send as-is, without local validation (ingest will dead-letter bad input).",
)
def publish(
    files: tuple[str, ...], kafka: str, topic_prefix: str, mode: str, no_validate: bool
) -> None:
    """Publish events to Kafka: CloudEvents JSONL, or Kubernetes/Volcano manifests
    converted to events. '-' is stdin.

    Manifests: Node, Pod, PodGroup, Queue, PriorityClass, Volcano Job, and the
    workloads Deployment, ReplicaSet, StatefulSet, DaemonSet, Job and CronJob as the
    pods their controllers would create; other kinds (ConfigMap, Service, ...) are
    skipped with one warning line each.

    Everything is validated first; if anything is invalid, nothing is sent. Exit
    codes: 0 sent; 2 usage (no --kafka, a file that cannot be read); 3 invalid input
    (a manifest that cannot be converted, an invalid event); 4 Kafka unreachable.
    """
    from esched.schemas.validator import InvalidEvent, parse_event
    from esched.services.event_files import publish_records, with_mode

    bus = command_bus(kafka, topic_prefix)
    records = input_records(files, bus.topics, "publish")
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
    records = [with_mode(rec, mode) for rec in records]

    async def main() -> dict:
        by_topic = await publish_records(bus, records)
        return {"sent": len(records), "mode": mode, "topics": by_topic}

    emit(run_async(main))


# replay ------------------------------------------------------------------------------


@cli.command()
@store_option
@upto_option("Fold")
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
@queue_hierarchy_option
def replay(
    store: str,
    upto: int | None,
    at_time: str | None,
    no_snapshot: bool,
    save_snapshot: bool,
    output_format: str,
    queue_hierarchy: str,
) -> None:
    """Fold the log and print the cluster state: nodes, pods by phase, gangs, queues.

    JSON keys: position; nodes {count, allocatable, allocated}; pods {Pending,
    Running, Succeeded, Failed}; gangs {ns/name: {minMember, queue, <phase>: n}};
    queues {name: {...}}; anomalies {reason: {count, first}} (events the fold
    ignored, first = the log position of the first); jobs (Volcano Jobs, when the
    log has any) [{job, phase, attempt, maxRetry, tasks: {name: {replicas, pending,
    running, succeeded, failed, released}}, transitions}]; reclamation {nodes: {name:
    {resource: {limit, reservation, reserved, usage, reclaimed}}}, totals, clock,
    accounting, config} (with Borg's reclamation enabled in the config file, production
    pods are placed against limits, the others against ``reserved``; off, the default,
    ``accounting`` is ``requests``: every pod by its requests, as kube). Quantities
    are integers in base units (milli-CPU, bytes).
    """
    from esched.core.queues import summary_view
    from esched.services.cli import config_reclamation
    from esched.services.jobs import fold_job_log
    from esched.services.replay import format_table
    from esched.services.store.snapshots import anomaly_report, fold_log
    from esched.services.store.snapshots import save_snapshot as write_snapshot

    if upto is not None and at_time:
        raise click.UsageError("give --upto or --at, not both")
    reclamation = config_reclamation()
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
            state = await fold_log(
                es, upto=upto, at=at, use_snapshot=not no_snapshot, reclamation=reclamation
            )
            if save_snapshot:
                await write_snapshot(es, state)
            jobs = await fold_job_log(es, upto=int(state.position))
            out = {
                **state.summary(),
                "anomalies": anomaly_report(state),
                "reclamation": state.reclamation_view(),
            }
            summary_view(out["queues"], state, queue_hierarchy)
            if jobs.jobs:
                out["jobs"] = jobs.summaries()
            return out

    summary = run_async(main)
    if output_format == "table":
        click.echo(format_table(summary))
    else:
        emit(summary)


# audit -------------------------------------------------------------------------------


@cli.command()
@store_option
@upto_option("Audit")
@format_option
@bands_option
@queue_hierarchy_option
def audit(
    store: str, upto: int | None, output_format: str, bands: Any, queue_hierarchy: str
) -> None:
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

    quota = config_quota(bands)

    async def main() -> dict:
        async with migrated_store(store) as es:
            return await audit_store(
                es, upto=upto, quota=quota, bands=bands, queue_hierarchy=queue_hierarchy
            )

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
