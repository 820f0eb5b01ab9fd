"""The schedule reader behind HTTP (``/metrics``, ``/v1/schedules``), on a pool of its own.

A flood of HTTP requests must never hold a connection the scheduler needs, so these reads
never touch the claim or admit pools: they get a small pool (``HTTP_POOL_SIZE``
connections, opened on first use) whose acquire gives up after ``ACQUIRE_TIMEOUT_S`` with
``TimeoutError`` (the HTTP layer answers 503), and whose statements are bounded by the
session's ``statement_timeout``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import msgspec

from qlsched.core.control import ActionTotal
from qlsched.core.store import ScheduleView
from qlsched.postgres.control import read_action_totals, read_controls
from qlsched.postgres.pool import Connection, Database, open_database
from qlsched.postgres.queries import query

HTTP_POOL_SIZE: Final = 2
ACQUIRE_TIMEOUT_S: Final = 0.25
"""How long a request waits for a free connection before it is refused (503)."""
STATEMENT_TIMEOUT_MS: Final = 5_000


class PostgresReader:
    """``ScheduleReader`` over one pool (the HTTP reads' own)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def due_backlog(self) -> int:
        sql = query("due_backlog")

        async def fn(conn: Connection) -> Any:
            return await conn.fetchval(sql)

        return int(await self._db.run(fn))

    async def list_schedules(self, limit: int = 1000) -> list[ScheduleView]:
        sql = query("list_schedules")

        async def fn(conn: Connection) -> list[ScheduleView]:
            views = [ScheduleView(**dict(r)) for r in await conn.fetch(sql, limit)]
            return await _with_controls(conn, views)

        return await self._db.run(fn)

    async def action_totals(self) -> list[ActionTotal]:
        return await self._db.run(read_action_totals)


async def _with_controls(conn: Connection, views: list[ScheduleView]) -> list[ScheduleView]:
    """Each view with its pause state and latest actions (two statements for all)."""
    controls = await read_controls(conn, [(v.project_id, v.trigger_id) for v in views])
    out: list[ScheduleView] = []
    for v in views:
        c = controls.get((v.project_id, v.trigger_id))
        if c is not None:
            v = msgspec.structs.replace(
                v,
                paused_at_ms=c.paused_at_ms,
                pause_note=c.pause_note,
                paused_total=c.paused_total,
                actions=c.actions,
            )
        out.append(v)
    return out


@asynccontextmanager
async def open_reader(
    dsn: str,
    *,
    max_size: int = HTTP_POOL_SIZE,
    acquire_timeout_s: float = ACQUIRE_TIMEOUT_S,
) -> AsyncIterator[PostgresReader]:
    """A reader on a pool of its own, closed on exit. No connection is opened until the
    first read (a replica without HTTP never holds one)."""
    async with open_database(
        dsn,
        min_size=0,
        max_size=max_size,
        application_name="qlsched-http",
        settings={"statement_timeout": str(STATEMENT_TIMEOUT_MS)},
        acquire_timeout=acquire_timeout_s,
    ) as db:
        yield PostgresReader(db)
