"""What ``qlsched status`` shows, read with the observer role (database time throughout)."""

from __future__ import annotations

import msgspec

from qlsched.core.store import ScheduleView
from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query


class RecentRun(msgspec.Struct, frozen=True):
    project_id: str
    trigger_id: str
    scheduled_for_ms: int
    queued_at_ms: int | None
    state: str
    admitted_by_owner: str


class StatusReport(msgspec.Struct, frozen=True):
    now_ms: int
    due_backlog: int
    schedules: list[ScheduleView]
    recent_runs: list[RecentRun]


async def read_status(conn: Connection, *, limit: int = 1000, runs: int = 10) -> StatusReport:
    schedules = [ScheduleView(**dict(r)) for r in await conn.fetch(query("list_schedules"), limit)]
    backlog = int(await conn.fetchval(query("due_backlog")))
    recent = [RecentRun(**dict(r)) for r in await conn.fetch(query("recent_runs"), runs)]
    now_ms = schedules[0].now_ms if schedules else 0
    return StatusReport(now_ms=now_ms, due_backlog=backlog, schedules=schedules, recent_runs=recent)
