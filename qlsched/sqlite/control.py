"""Pause and resume on the Edge file, as the cluster's (``postgres/control.py``): each one
``BEGIN IMMEDIATE`` transaction with its audit row, so state and audit commit together.

An action that changes nothing (pausing a paused trigger, resuming a running one) writes
nothing and says so. The cursor arithmetic is ``core.pause.plan_resume``, the same as the
cluster's; the file stores its result (and the cursor's due time, as every cursor write
does). A paused row is not ``active``: no round reads it, and a round that read it just
before the pause fails its compare-and-set (the state version moved), so nothing of a
paused trigger is admitted after ``pause`` returns.
"""

from __future__ import annotations

import getpass
import sqlite3
from typing import Any

from qlsched.core.control import (
    AlreadyPaused,
    NotPaused,
    Paused,
    PauseOutcome,
    ResumeOutcome,
    TriggerRef,
    UnknownTrigger,
    resumed,
)
from qlsched.core.cron import parse_cron
from qlsched.core.jitter import jitter_offset_ms
from qlsched.core.pause import CatchUp, ResumePlan, plan_resume
from qlsched.sqlite.database import rollback
from qlsched.sqlite.queries import query


def os_user() -> str:
    try:
        return getpass.getuser()[:200] or "unknown"
    except (KeyError, OSError):
        return "unknown"


def _row(conn: sqlite3.Connection, ref: TriggerRef) -> Any:
    row = conn.execute(query("control_schedule"), (ref.project_id, ref.trigger_id)).fetchone()
    if row is None:
        raise UnknownTrigger(f"no trigger {ref} (project {ref.project_id}, id {ref.trigger_id})")
    return row


def record_action(
    conn: sqlite3.Connection,
    ref: TriggerRef,
    row: Any,
    kind: str,
    *,
    note: str | None,
    actor: str | None,
    at_ms: int,
    occurrences: int = 0,
) -> int:
    """Append one audit row (``row[0]``: the trigger revision acted on); its id."""
    (action_id,) = conn.execute(
        query("control_record_action"),
        (ref.project_id, ref.trigger_id, row[0], kind, note, os_user(), actor, at_ms, occurrences),
    ).fetchone()
    return int(action_id)


def pause(
    conn: sqlite3.Connection, ref: TriggerRef, now_ms: int, *, note: str | None, actor: str | None
) -> PauseOutcome:
    """Blocking: pause ``ref`` at ``now_ms``. ``note`` and ``actor`` are already checked."""
    conn.execute(query("begin_immediate"))
    try:
        row = _row(conn, ref)
        if row[2] is not None:
            rollback(conn)
            return AlreadyPaused(ref.project_id, ref.trigger_id, row[2], row[3])
        conn.execute(query("control_pause"), (ref.project_id, ref.trigger_id, now_ms, note))
        action_id = record_action(conn, ref, row, "pause", note=note, actor=actor, at_ms=now_ms)
        conn.execute(query("commit"))
    except BaseException:
        rollback(conn)
        raise
    return Paused(ref.project_id, ref.trigger_id, now_ms, note, action_id)


def resume(
    conn: sqlite3.Connection, ref: TriggerRef, now_ms: int, *, catch_up: CatchUp, actor: str | None
) -> ResumeOutcome:
    """Blocking: resume ``ref`` at ``now_ms``; the occurrences inside the pause counted
    (``core.pause``), the cursor and its due time set."""
    conn.execute(query("begin_immediate"))
    try:
        row = _row(conn, ref)
        (revision, cursor, paused_at, _note, cron, zone, gap, fold, revised_at, jitter) = row[:10]
        if paused_at is None:
            rollback(conn)
            return NotPaused(ref.project_id, ref.trigger_id)
        scheduled = bool(row[10])
        plan = (
            plan_resume(
                parse_cron(cron, zone, dst_gap=gap, dst_fold=fold),
                cursor_ms=cursor,
                since_ms=max(paused_at, revised_at),
                now_ms=now_ms,
                catch_up=catch_up,
            )
            if scheduled
            else ResumePlan.unscheduled(cursor)
        )
        next_ms, catch_up_ms, paused = plan.next_fire_at_ms, plan.catch_up_at_ms, plan.paused
        due = None
        if next_ms is not None:
            h = jitter_offset_ms(ref.project_id, ref.trigger_id, revision, next_ms, jitter)
            due = next_ms + h
        conn.execute(
            query("control_resume"),
            (ref.project_id, ref.trigger_id, next_ms, catch_up_ms, paused, now_ms, due),
        )
        action_id = record_action(
            conn, ref, row, "resume", note=None, actor=actor, at_ms=now_ms, occurrences=paused
        )
        conn.execute(query("commit"))
    except BaseException:
        rollback(conn)
        raise
    return resumed(
        ref, plan, at_ms=now_ms, catch_up=catch_up, scheduled=scheduled, action_id=action_id
    )
