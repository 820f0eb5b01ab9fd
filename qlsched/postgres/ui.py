"""The dashboard's reads (``qlsched ui``), as the observer role, each bounded.

Every list is a keyset page: it starts after the last key of the previous page and walks an
index for at most its limit (``sql/ui.sql`` names the index of each), so the hundredth page
of a million schedules costs what the first does, and rows added while someone pages move
no other row between pages. The overview's figures are counted over bounded windows (the
latest Runs, the claims in flight), never over a whole table.
"""

from __future__ import annotations

import uuid
from typing import Final, Literal

import msgspec

from qlsched.core.control import ScheduleHead
from qlsched.postgres import observe
from qlsched.postgres.health import RefusedTrigger
from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query
from qlsched.postgres.status import StatusRequest

RECENT_WINDOW: Final = 1000
"""The latest Runs the overview reads replicas, workers and lag from."""
FAILED_LIMIT: Final = 10_000
"""Runs that failed in the last hour counted up to this."""
CLAIMS_LIMIT: Final = 10_000
"""Claims in flight the overview reads (a few per replica in a healthy cluster)."""
HOUR_MS: Final = 3_600_000
TIES_MAX: Final = 1000
"""Runs of one occurrence of one trigger a page shows at most (a handful in practice)."""
WALK: Final = 10_000
"""Schedule keys one page of a filtered list walks at most."""
MAX_UUID: Final = uuid.UUID(int=(1 << 128) - 1)
BIG_MS: Final = (1 << 62) - 1
"""A key above every time: the first page of a newest-first list starts below it."""

ScheduleState = Literal["", "active", "paused", "off", "failing"]
STATES: Final[tuple[ScheduleState, ...]] = ("", "active", "paused", "off", "failing")
RUN_STATES: Final = (
    "held",
    "queued",
    "dispatching",
    "running",
    "succeeded",
    "failed",
    "cancelled",
)


class Owner(msgspec.Struct, frozen=True):
    owner: str
    runs: int
    last_ms: int
    mean_lag_ms: int | None
    max_lag_ms: int | None


class Worker(msgspec.Struct, frozen=True):
    worker_id: str
    attempts: int
    last_ms: int


class Claims(msgspec.Struct, frozen=True):
    owner: str
    live: int
    expired: int


class Overview(msgspec.Struct, frozen=True):
    now_ms: int
    owners: list[Owner]
    workers: list[Worker]
    claims: list[Claims]
    due_backlog: observe.DueBacklog
    failed_last_hour: int
    stuck_requests: int
    refused: list[RefusedTrigger]

    @property
    def expired_claims(self) -> int:
        return sum(c.expired for c in self.claims)


class _ScheduleRow(ScheduleHead, frozen=True):
    """What the dashboard reads of every schedule it shows: spec, cursor, claim, pause,
    counters and failing admissions."""

    jitter_ms: int
    next_fire_at_ms: int | None
    due_at_ms: int | None
    last_scheduled_at_ms: int | None
    claim_owner: str | None
    claim_expires_at_ms: int | None
    paused_at_ms: int | None
    pause_note: str | None
    skipped_total: int
    coalesced_total: int
    paused_total: int
    failures: int
    """Admissions of this row that failed in a row (0 once one succeeds)."""
    last_failure: str | None

    @property
    def key(self) -> str:
        return f"{self.project_id}/{self.trigger_id}"


class ScheduleLine(_ScheduleRow, frozen=True):
    """One row of the schedules page, with its latest Run."""

    last_state: str | None
    last_scheduled_for_ms: int | None


class Schedule(_ScheduleRow, frozen=True):
    """One schedule with its trigger's spec (the schedule page's head)."""

    dst_gap: str
    dst_fold: str
    task_id: str
    task_revision: int
    last_failure_at_ms: int | None
    project_state: str


class RunLine(msgspec.Struct, frozen=True):
    run_id: uuid.UUID
    project_id: str
    trigger_id: str
    trigger_revision: int
    scheduled_for_ms: int
    idempotency_key: str
    state: str
    queued_at_ms: int | None
    created_at_ms: int
    admitted_by_owner: str
    started_at_ms: int | None
    finished_at_ms: int | None
    last_event_at_ms: int | None

    @property
    def finished(self) -> bool:
        return self.state in ("succeeded", "failed", "cancelled")

    @property
    def duration_ms(self) -> int | None:
        """How long it ran (its worker's start to its end), once it has finished; for a
        Run that never started (cancelled while queued) from admission to its end."""
        if not self.finished:
            return None
        end = self.finished_at_ms if self.finished_at_ms is not None else self.last_event_at_ms
        if end is None:
            return None
        start = self.started_at_ms if self.started_at_ms is not None else self.created_at_ms
        return max(0, end - start)


class Run(RunLine, frozen=True, kw_only=True):
    task_id: str
    task_revision: int
    cancel_requested: bool


class Attempt(msgspec.Struct, frozen=True):
    attempt_no: int
    attempt_id: uuid.UUID
    executor_kind: str
    state: str
    worker_id: str | None
    started_at_ms: int | None
    created_at_ms: int
    error: str | None


class RunEvent(msgspec.Struct, frozen=True):
    seq: int
    type: str
    at_ms: int
    actor: str


class Action(msgspec.Struct, frozen=True):
    action_id: int
    project_id: str
    trigger_id: str
    trigger_revision: int
    kind: str
    note: str | None
    actor: str
    actor_label: str | None
    at_ms: int
    occurrences: int


async def now_ms(conn: Connection) -> int:
    return int(await conn.fetchval(query("ui_now_ms")))


async def overview(conn: Connection, *, window: int = RECENT_WINDOW) -> Overview:
    """What the overview shows, in a handful of bounded statements."""
    now = await now_ms(conn)
    owners = [Owner(**dict(r)) for r in await conn.fetch(query("ui_recent_owners"), window)]
    workers = [Worker(**dict(r)) for r in await conn.fetch(query("ui_recent_workers"), window)]
    claims = [
        Claims(**dict(r)) for r in await conn.fetch(query("ui_claims_now"), now, CLAIMS_LIMIT)
    ]
    failed = int(await conn.fetchval(query("ui_failed_since"), now - HOUR_MS, FAILED_LIMIT))
    stuck = int(await conn.fetchval(query("ui_stuck_requests"), now))
    return Overview(
        now_ms=now,
        owners=owners,
        workers=workers,
        claims=claims,
        due_backlog=await observe.due_backlog(conn),
        failed_last_hour=failed,
        stuck_requests=stuck,
        refused=await observe.refused_due_triggers(conn, limit=20),
    )


class SchedulePage(msgspec.Struct, frozen=True):
    now_ms: int
    rows: list[ScheduleLine]
    resume: tuple[str, str] | None
    """Where the next page starts (after this key), None at the end: the last row of a full
    page, or where a filter's walk stopped (``WALK`` entries) before filling it."""


async def schedules(
    conn: Connection,
    *,
    after: tuple[str, str] = ("", ""),
    project: str = "",
    search: str = "",
    state: ScheduleState = "",
    limit: int = 50,
    walk: int = WALK,
) -> SchedulePage:
    """A page of schedules after key ``after`` matching the filters, in key order.

    The walk is a range of the primary key: from ``after`` (or the project's first key) to
    the project's last key (or the greatest project id), at most ``walk`` entries, so a
    filter that matches few rows costs at most that per page and says where it stopped.
    """
    now = await now_ms(conn)
    if project:
        after = max(after, (project, ""))
        last = project
    else:
        last = await conn.fetchval(query("ui_last_project"))
        if last is None:
            return SchedulePage(now, [], None)
    walk = max(walk, limit)
    rows = [
        ScheduleLine(**dict(r))
        for r in await conn.fetch(
            query("ui_schedules"), after[0], after[1], last, project, search, state, limit, walk
        )
    ]
    if len(rows) == limit:
        return SchedulePage(now, rows, (rows[-1].project_id, rows[-1].trigger_id))
    end = await conn.fetchrow(query("ui_schedules_walk_end"), after[0], after[1], last, walk)
    resume = None if end is None else (end["project_id"], end["trigger_id"])
    return SchedulePage(now, rows, resume)


async def schedule(conn: Connection, project_id: str, trigger_id: str) -> Schedule | None:
    row = await conn.fetchrow(query("ui_schedule"), project_id, trigger_id)
    return None if row is None else Schedule(**dict(row))


async def trigger_runs(
    conn: Connection,
    project_id: str,
    trigger_id: str,
    *,
    before_ms: int = BIG_MS,
    limit: int = 50,
) -> list[RunLine]:
    """A trigger's Runs, latest occurrence first, scheduled before ``before_ms``.

    A full page is completed with every Run of its last occurrence (so the next page,
    before that occurrence, misses none of its ties): it may hold a few more than
    ``limit``.
    """
    rows = [
        RunLine(**dict(r))
        for r in await conn.fetch(
            query("ui_trigger_runs"), project_id, trigger_id, before_ms, limit
        )
    ]
    if len(rows) < limit:
        return sorted(rows, key=_newest_first)
    last = rows[-1].scheduled_for_ms
    ties = await conn.fetch(query("ui_trigger_runs_at"), project_id, trigger_id, last, TIES_MAX)
    kept = [r for r in rows if r.scheduled_for_ms != last]
    return sorted(kept + [RunLine(**dict(r)) for r in ties], key=_newest_first)


def _newest_first(r: RunLine) -> tuple[int, str]:
    return (-r.scheduled_for_ms, str(r.run_id))


async def runs(
    conn: Connection,
    *,
    before: tuple[int, uuid.UUID] = (BIG_MS, MAX_UUID),
    since_ms: int = 0,
    state: str = "",
    limit: int = 50,
) -> list[RunLine]:
    """Runs newest first (by admission), created before key ``before`` and at or after
    ``since_ms``; in one state (its own index) or any."""
    name = "ui_runs_in_state" if state else "ui_runs"
    rows = await conn.fetch(query(name), before[0], before[1], since_ms, state, limit)
    return [RunLine(**dict(r)) for r in rows]


async def run(
    conn: Connection, run_id: uuid.UUID
) -> tuple[Run, list[Attempt], list[RunEvent]] | None:
    """One Run with its Attempts and events; None when there is no such Run."""
    row = await conn.fetchrow(query("ui_run"), run_id)
    if row is None:
        return None
    attempts = [Attempt(**dict(r)) for r in await conn.fetch(query("ui_run_attempts"), run_id)]
    events = [RunEvent(**dict(r)) for r in await conn.fetch(query("ui_run_events"), run_id)]
    return Run(**dict(row)), attempts, events


async def requests(
    conn: Connection,
    *,
    before: tuple[int, uuid.UUID] = (BIG_MS, MAX_UUID),
    limit: int = 50,
) -> list[StatusRequest]:
    """Trigger-now and backfill requests, newest first, with their progress."""
    rows = await conn.fetch(query("ui_requests"), before[0], before[1], limit)
    return [StatusRequest(**dict(r)) for r in rows]


async def actions(
    conn: Connection,
    *,
    before: int = BIG_MS,
    project_id: str = "",
    trigger_id: str = "",
    limit: int = 50,
) -> list[Action]:
    """The audit log (``schedule_actions``), newest first, before action id ``before``."""
    rows = await conn.fetch(query("ui_actions"), before, project_id, trigger_id, limit)
    return [Action(**dict(r)) for r in rows]
