"""Retention in PostgreSQL (docs/contract.md §14): the admin's setting, the replicas' prune.

The setting is one row, ``qlsched.retention``: the admin updates it, every other role
reads it and cannot change it (column grants). A prune batch is one statement in
autocommit on the runtime's READ COMMITTED pool (``retention_prune``): it locks at most
``limit`` finished Runs past the horizon with ``SKIP LOCKED`` (a batch another replica
holds is walked past, never waited on), deletes them with their Attempts, events and
recovery marks, and adds the counts to ``retention_pruned``, all or nothing. The horizon
is the database's clock less the retention, never this process's.
"""

from __future__ import annotations

from typing import Any, Final

from qlsched.core.retention import PruneBatch, PrunedTotals, RetentionSetting
from qlsched.postgres.pool import Connection, Database
from qlsched.postgres.queries import query

BATCH_RUNS: Final = 500
"""Runs per prune batch: a few milliseconds of work, far inside the runtime's timeouts."""


def _totals(row: Any) -> PrunedTotals:
    return PrunedTotals(
        runs=int(row["runs"]),
        attempts=int(row["attempts"]),
        events=int(row["events"]),
        marks=int(row["marks"]),
    )


async def prune_batch(db: Database, *, limit: int = BATCH_RUNS) -> PruneBatch:
    """Delete one batch of at most ``limit`` finished Runs past the horizon (runtime role)."""

    async def fn(conn: Connection) -> PruneBatch:
        row = await conn.fetchrow(query("retention_prune"), limit)
        assert row is not None
        horizon = row["horizon_ms"]
        return PruneBatch(
            pruned=_totals(row), horizon_ms=None if horizon is None else int(horizon), limit=limit
        )

    return await db.run(fn)


async def read_setting(conn: Connection) -> RetentionSetting:
    """The retention and the horizon it puts now (any qlsched role)."""
    row = await conn.fetchrow(query("retention_setting"))
    assert row is not None
    ms = row["retention_ms"]
    return RetentionSetting(
        retention_ms=None if ms is None else int(ms),
        horizon_ms=None if ms is None else int(row["horizon_ms"]),
        updated_by=row["updated_by"],
        updated_at_ms=row["updated_at_ms"],
    )


async def set_retention(conn: Connection, retention_ms: int | None, *, actor: str | None) -> None:
    """Set the retention (admin role; None: off). The bounds are the caller's to check
    (``parse_retention``); the schema's CHECK refuses anything else."""
    await conn.execute(query("retention_set"), retention_ms, actor)


async def read_totals(conn: Connection) -> PrunedTotals:
    """Everything retention deleted, database-wide (admin or observer role)."""
    row = await conn.fetchrow(query("retention_totals"))
    assert row is not None
    return _totals(row)


async def backfill_start_limit(conn: Connection, project_id: str, trigger_id: str) -> int | None:
    """The earliest instant a backfill of the trigger may start at (admin role): past the
    horizon and past the latest occurrence retention deleted for it; None: no limit."""
    row = await conn.fetchrow(query("retention_backfill_limit"), project_id, trigger_id)
    assert row is not None
    limits = [int(row["horizon_ms"])] if row["horizon_ms"] is not None else []
    if row["through_ms"] is not None:
        limits.append(int(row["through_ms"]) + 1)
    return max(limits) if limits else None
