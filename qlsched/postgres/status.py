"""What ``qlsched status`` shows, read with the observer role (database time throughout).

The report carries the database's clock once (``now_ms``, read even when there is no
schedule row), and every lag or lease left is computed against it.
"""

from __future__ import annotations

import msgspec

from qlsched.core.store import ScheduleRow
from qlsched.postgres.control import read_controls
from qlsched.postgres.health import RefusedTrigger, refused_triggers
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
    schedules: list[ScheduleRow]
    recent_runs: list[RecentRun]
    refused: list[RefusedTrigger] = msgspec.field(default_factory=list)
    """Triggers every admit refuses until someone re-publishes, with the reason."""


async def read_status(conn: Connection, *, limit: int = 1000, runs: int = 10) -> StatusReport:
    now_ms = int(await conn.fetchval(query("status_now_ms")))
    rows = await conn.fetch(query("status_schedules"), limit)
    schedules = await _with_controls(conn, [ScheduleRow(**dict(r)) for r in rows])
    backlog = int(await conn.fetchval(query("due_backlog")))
    recent = [RecentRun(**dict(r)) for r in await conn.fetch(query("recent_runs"), runs)]
    refused = await refused_triggers(conn, limit=limit)
    return StatusReport(
        now_ms=now_ms,
        due_backlog=backlog,
        schedules=schedules,
        recent_runs=recent,
        refused=refused,
    )


async def _with_controls(conn: Connection, rows: list[ScheduleRow]) -> list[ScheduleRow]:
    """Each row with its pause state and latest actions (two statements for all of them)."""
    controls = await read_controls(conn, [(s.project_id, s.trigger_id) for s in rows])
    out: list[ScheduleRow] = []
    for s in rows:
        c = controls.get((s.project_id, s.trigger_id))
        if c is not None:
            s = msgspec.structs.replace(
                s,
                paused_at_ms=c.paused_at_ms,
                pause_note=c.pause_note,
                paused_total=c.paused_total,
                actions=c.actions,
            )
        out.append(s)
    return out
