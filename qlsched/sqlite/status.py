"""``edge status``: what the file holds, read in one read transaction (no lock taken)."""

from __future__ import annotations

import sqlite3
import uuid

import msgspec

from qlsched.core.requests import RequestView
from qlsched.core.store import ScheduleView
from qlsched.sqlite.queries import query


class RecentRun(msgspec.Struct, frozen=True):
    project_id: str
    trigger_id: str
    scheduled_for_ms: int
    state: str
    queued_at_ms: int | None
    admitted_by_owner: str


class EdgeStatus(msgspec.Struct, frozen=True):
    path: str
    now_ms: int
    scheduler_pid: int | None
    """The pid of the ``edge run`` holding the file, if one is alive."""
    due_backlog: int
    runs_total: int
    schedules: list[ScheduleView]
    recent_runs: list[RecentRun]
    requests: list[RequestView] = msgspec.field(default_factory=list)
    """Trigger-now and backfill requests: the pending ones (held when paused), then the
    latest, with their progress."""


def schedule_views(
    conn: sqlite3.Connection, now_ms: int, limit: int, after: tuple[str, str] | None = None
) -> list[ScheduleView]:
    """The first ``limit`` schedule rows as status and ``/v1/schedules`` show them (an Edge
    file has no leases, so no claim holder)."""
    return [
        ScheduleView(
            project_id=r[0],
            trigger_id=r[1],
            trigger_revision=r[2],
            active=bool(r[3]),
            cron=r[4],
            timezone=r[5],
            next_fire_at_ms=r[6],
            last_scheduled_at_ms=r[7],
            claim_owner=None,
            claim_expires_at_ms=None,
            skipped_total=r[8],
            coalesced_total=r[9],
            now_ms=now_ms,
            dst_gap=r[10],
            dst_fold=r[11],
            jitter_ms=r[12],
            due_at_ms=r[13],
            paused_at_ms=r[14],
            pause_note=r[15],
            paused_total=r[16],
            overlap_skipped_total=r[17],
            deadline_cancelled_total=r[18],
        )
        for r in conn.execute(query("schedules_list"), (*(after or ("", "")), limit))
    ]


def request_views(conn: sqlite3.Connection, limit: int = 20) -> list[RequestView]:
    """Blocking: the latest requests with their progress, pending ones first (``edge
    status``); inside the caller's read transaction."""
    views: list[RequestView] = []
    for r in conn.execute(query("status_requests"), (limit,)).fetchall():
        held = r[9] == "pending" and bool(
            (conn.execute(query("request_held"), (r[1], r[2])).fetchone() or (0,))[0]
        )
        views.append(
            RequestView(
                request_id=uuid.UUID(r[0]),
                project_id=r[1],
                trigger_id=r[2],
                trigger_revision=r[3],
                kind=r[4],
                note=r[5],
                actor=r[6],
                requested_by=r[7],
                created_at_ms=r[8],
                state=r[9],
                refused_reason=r[10],
                done_at_ms=r[11],
                from_ms=r[12],
                to_ms=r[13],
                total=r[14],
                cursor_ms=r[15],
                admitted=r[16],
                already_admitted=r[17],
                claim_owner=None,
                failures=r[18],
                last_failure=r[19],
                overlap_skipped=r[20],
                held=held,
            )
        )
    return views


def read_status(
    conn: sqlite3.Connection,
    path: str,
    now_ms: int,
    *,
    scheduler_pid: int | None = None,
    limit: int = 1000,
    recent: int = 10,
) -> EdgeStatus:
    """Blocking: one read transaction, so the figures are one snapshot of the file. The
    runner's pid is the caller's to find (the run lock is the Edge runtime's, not the
    store's: ``qlsched.edge.lock.holder_pid``)."""
    conn.execute(query("begin_read"))
    try:
        schedules = schedule_views(conn, now_ms, limit)
        backlog = int(conn.execute(query("due_backlog"), (now_ms,)).fetchone()[0])
        total = int(conn.execute(query("runs_count")).fetchone()[0])
        runs = [RecentRun(*r) for r in conn.execute(query("runs_recent"), (recent,))]
        requests = request_views(conn, recent)
    finally:
        conn.execute(query("rollback"))
    return EdgeStatus(
        path=path,
        now_ms=now_ms,
        scheduler_pid=scheduler_pid,
        due_backlog=backlog,
        runs_total=total,
        schedules=schedules,
        recent_runs=runs,
        requests=requests,
    )
