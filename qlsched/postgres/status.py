"""What ``qlsched status`` shows, read with the observer role (database time throughout).

The report carries the database's clock once (``now_ms``, read even when there is no
schedule row), and every lag or lease left is computed against it.
"""

from __future__ import annotations

import msgspec

from qlsched.postgres.health import RefusedTrigger, refused_triggers
from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query


class StatusSchedule(msgspec.Struct, frozen=True):
    """One schedule row with its trigger's cron and zone (database times, epoch ms)."""

    project_id: str
    trigger_id: str
    trigger_revision: int
    active: bool
    cron: str
    timezone: str
    next_fire_at_ms: int | None
    last_scheduled_at_ms: int | None
    claim_owner: str | None
    claim_expires_at_ms: int | None
    skipped_total: int
    """Occurrences the ``skip`` policy dropped because they were found past the grace."""
    coalesced_total: int
    """Occurrences passed over by a Fire that admitted an earlier one (either policy)."""


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
    schedules: list[StatusSchedule]
    recent_runs: list[RecentRun]
    refused: list[RefusedTrigger] = msgspec.field(default_factory=list)
    """Triggers every admit refuses until someone re-publishes, with the reason."""


async def read_status(conn: Connection, *, limit: int = 1000, runs: int = 10) -> StatusReport:
    now_ms = int(await conn.fetchval(query("status_now_ms")))
    rows = await conn.fetch(query("status_schedules"), limit)
    schedules = [StatusSchedule(**dict(r)) for r in rows]
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
