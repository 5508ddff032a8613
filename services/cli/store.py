"""``esched store``: event store administration."""

from __future__ import annotations

from esched.services.cli import (
    cli,
    emit,
    migrated_store,
    run_async,
    store_option,
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
    from esched.services.replay import SNAPSHOT_NAME

    async def main() -> dict:
        async with migrated_store(store) as es:
            snap = await es.load_snapshot(SNAPSHOT_NAME)
            return {
                "head": await es.head(),
                "snapshot": {"position": snap[0], "bytes": len(snap[1])} if snap else None,
            }

    emit(run_async(main))
