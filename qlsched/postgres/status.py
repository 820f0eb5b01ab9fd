"""What ``qlsched status`` shows, read with the observer role (database time throughout).

The report carries the database's clock once (``now_ms``, read even when there is no
schedule row), and every lag or lease left is computed against it. Every read is bounded
(``observe``): the cost of ``status`` does not grow with the tables.
"""

from __future__ import annotations

from typing import Final

import msgspec

from qlsched.core.requests import RequestView
from qlsched.core.retention import PrunedTotals, RetentionSetting
from qlsched.core.store import DUE_BACKLOG_LIMIT, ScheduleRow
from qlsched.postgres import observe
from qlsched.postgres.control import with_controls
from qlsched.postgres.health import RefusedTrigger
from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query
from qlsched.postgres.retention import read_setting, read_totals
from qlsched.postgres.runs import run_state_counts, with_outcomes


class RecentRun(msgspec.Struct, frozen=True):
    project_id: str
    trigger_id: str
    scheduled_for_ms: int
    queued_at_ms: int | None
    state: str
    admitted_by_owner: str


StatusRequest = RequestView
"""One request as ``status`` shows it: the view both profiles share (``core.requests``)."""


STUCK_AFTER: Final = 3
"""Admits of one schedule row failing in a row before status, check and metrics call it stuck."""


class FailingRow(msgspec.Struct, frozen=True):
    """A schedule row whose last admits failed (each gave its claim back at once)."""

    project_id: str
    trigger_id: str
    failures: int
    last_failure: str | None
    """The outcome and SQLSTATE, e.g. ``store_failed:23514``."""
    last_failure_at_ms: int | None

    @property
    def stuck(self) -> bool:
        return self.failures >= STUCK_AFTER


class StatusReport(msgspec.Struct, frozen=True):
    now_ms: int
    due_backlog: int
    """Counted up to ``due_backlog_limit`` (``due_backlog_capped``: more are due)."""
    schedules: list[ScheduleRow]
    recent_runs: list[RecentRun]
    refused: list[RefusedTrigger] = msgspec.field(default_factory=list)
    """Triggers every admit refuses until someone re-publishes, with the reason, among the
    rows an admit meets (``observe.refused_due_triggers``; ``qlsched check`` reads all)."""
    due_backlog_capped: bool = False
    due_backlog_limit: int = DUE_BACKLOG_LIMIT
    requests: list[StatusRequest] = msgspec.field(default_factory=list)
    """The latest trigger-now and backfill requests, pending ones first."""
    failing: list[FailingRow] = msgspec.field(default_factory=list)
    """Rows whose last admits failed (``stuck`` from ``STUCK_AFTER`` in a row)."""
    runs_running: int = 0
    """Runs a worker holds now (counted up to ``runs.RUN_COUNT_LIMIT``)."""
    runs_failed: int = 0
    """Runs that ended failed (counted up to ``runs.RUN_COUNT_LIMIT``)."""

    schedules_more: bool = False
    """More schedule rows exist than ``schedules`` holds (``status --all`` shows them all)."""
    retention: RetentionSetting | None = None
    """How long finished Runs are kept, and the horizon that puts now (docs §14)."""
    pruned: PrunedTotals = msgspec.field(default_factory=PrunedTotals)
    """What retention deleted so far, database-wide."""


async def failing_rows(conn: Connection, *, limit: int = 100) -> list[FailingRow]:
    """Schedule rows whose last admits failed, in key order, at most ``limit``."""
    return [FailingRow(**dict(r)) for r in await conn.fetch(query("status_failing"), limit)]


STATUS_LIMIT = 1000
"""The schedule rows ``status`` shows unless ``--all`` (``schedules_more`` says there are more)."""


async def _all_schedules(conn: Connection, page: int) -> list[ScheduleRow]:
    """Every schedule row, a keyset page at a time (each page as cheap as the first)."""
    out: list[ScheduleRow] = []
    after = ("", "")
    while True:
        rows = await conn.fetch(query("status_schedules_after"), *after, page)
        out += await with_controls(conn, [ScheduleRow(**dict(r)) for r in rows])
        if len(rows) < page:
            return out
        after = (out[-1].project_id, out[-1].trigger_id)


async def read_status(
    conn: Connection, *, limit: int | None = STATUS_LIMIT, runs: int = 10
) -> StatusReport:
    """The report, with the first ``limit`` schedule rows (None: all of them)."""
    now_ms = int(await conn.fetchval(query("status_now_ms")))
    more = False
    if limit is None:
        schedules = await _all_schedules(conn, STATUS_LIMIT)
    else:
        rows = await conn.fetch(query("status_schedules"), limit + 1)
        more = len(rows) > limit
        schedules = await with_controls(conn, [ScheduleRow(**dict(r)) for r in rows[:limit]])
    schedules = await with_outcomes(conn, schedules)
    running, failed = await run_state_counts(conn)
    backlog = await observe.due_backlog(conn)
    recent = [RecentRun(**dict(r)) for r in await conn.fetch(query("recent_runs"), runs)]
    refused = await observe.refused_due_triggers(conn, limit=limit or STATUS_LIMIT)
    requests = [StatusRequest(**dict(r)) for r in await conn.fetch(query("status_requests"), runs)]
    return StatusReport(
        now_ms=now_ms,
        due_backlog=backlog.rows,
        schedules=schedules,
        recent_runs=recent,
        refused=refused,
        due_backlog_capped=backlog.capped,
        due_backlog_limit=backlog.limit,
        requests=requests,
        schedules_more=more,
        failing=await failing_rows(conn),
        runs_running=running,
        runs_failed=failed,
        retention=await read_setting(conn),
        pruned=await read_totals(conn),
    )
