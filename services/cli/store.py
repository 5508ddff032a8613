"""``esched store``: event store administration."""

from __future__ import annotations

import sys

import click

from esched.services.cli import (
    EXIT_FAILURE,
    cli,
    emit,
    migrated_store,
    run_async,
    store_option,
    upto_option,
)

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
    from esched.services.store.snapshots import SNAPSHOT_NAME

    async def main() -> dict:
        async with migrated_store(store) as es:
            snap = await es.load_snapshot(SNAPSHOT_NAME)
            return {
                "head": await es.head(),
                "snapshot": {"position": snap[0], "bytes": len(snap[1])} if snap else None,
            }

    emit(run_async(main))


@store.command("verify")
@store_option
@upto_option("Verify")
def store_verify(store: str, upto: int | None) -> None:
    """Verify the log's hash chain, and only that: fast, read-only.

    Each stored event carries a hash over its content and the hash before it; an
    event edited, deleted or inserted behind the store's back breaks the chain at
    its position. JSON: {ok, checked, head, head_hash, broken_at, reason, seconds,
    events_per_second}. Keep head_hash where the database's writers cannot change
    it: a later verify that does not reproduce it shows a rewritten log. Exit
    status 1 if the chain is broken.
    """

    async def main() -> dict:
        async with migrated_store(store) as es:
            return (await es.verify(upto=upto)).as_dict()

    report = run_async(main)
    emit(report)
    if not report["ok"]:
        click.echo(
            f"esched store verify: chain broken at position {report['broken_at']}: "
            f"{report['reason']}",
            err=True,
        )
        sys.exit(EXIT_FAILURE)
