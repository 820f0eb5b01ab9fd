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
from typing import Final

from qlsched.core.control import ActionTotal
from qlsched.core.store import FailingCounts, ScheduleView
from qlsched.postgres import observe
from qlsched.postgres.control import read_action_totals, with_controls
from qlsched.postgres.pool import Connection, Database, open_database
from qlsched.postgres.queries import query
from qlsched.postgres.runs import with_outcomes
from qlsched.postgres.status import STUCK_AFTER

HTTP_POOL_SIZE: Final = 2
ACQUIRE_TIMEOUT_S: Final = 0.25
"""How long a request waits for a free connection before it is refused (503)."""
STATEMENT_TIMEOUT_MS: Final = 5_000


class PostgresReader:
    """``ScheduleReader`` over one pool (the HTTP reads' own)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def due_backlog(self) -> int:
        """Counted up to ``DUE_BACKLOG_LIMIT`` (``observe.due_backlog``): a scrape never
        walks the whole backlog."""
        counted = await self._db.run(observe.due_backlog)
        return counted.rows

    async def list_schedules(self, limit: int = 1000) -> list[ScheduleView]:
        sql = query("list_schedules")

        async def fn(conn: Connection) -> list[ScheduleView]:
            views = [ScheduleView(**dict(r)) for r in await conn.fetch(sql, limit)]
            return await with_outcomes(conn, await with_controls(conn, views))

        return await self._db.run(fn)

    async def list_schedules_after(
        self, after: tuple[str, str], limit: int = 1000
    ) -> list[ScheduleView]:
        async def fn(conn: Connection) -> list[ScheduleView]:
            views = await observe.schedules_after(conn, after, limit=limit)
            return await with_outcomes(conn, await with_controls(conn, views))

        return await self._db.run(fn)

    async def action_totals(self) -> list[ActionTotal]:
        return await self._db.run(read_action_totals)

    async def failing_counts(self) -> FailingCounts:
        sql = query("failing_counts")

        async def fn(conn: Connection) -> FailingCounts:
            row = await conn.fetchrow(sql, STUCK_AFTER)
            assert row is not None
            return FailingCounts(**{k: int(v) for k, v in dict(row).items()})

        return await self._db.run(fn)


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
