"""Pause and resume as the admin role, each one transaction with its audit row; and the
reads of pause state and recent actions that status, ``/v1/schedules`` and metrics show.

A pause or resume locks the schedule row, reads the database time (after the lock, so the
time is the action's own), writes the row and appends one ``schedule_actions`` row (with its
kind's totals) in the same transaction: the state and its audit commit together or not at
all. An action that changes nothing (pausing a paused trigger, resuming a running one)
writes nothing and returns the outcome that says so. The cursor arithmetic is
``core.pause.plan_resume``; the database only stores its result.

Pausing voids any claim on the row (cleared, claim and state versions up): a replica that
claimed it just before fails its fence at admit, so no Run is admitted after the pause
commits. The claim itself never sees a paused row (it is not ``active``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

import msgspec

from qlsched.core.control import (
    RECENT_ACTIONS,
    ActionTotal,
    AlreadyPaused,
    NotPaused,
    Paused,
    PauseOutcome,
    ResumeOutcome,
    ScheduleAction,
    ScheduleControl,
    ScheduleState,
    TriggerRef,
    UnknownTrigger,
    resumed,
)
from qlsched.core.cron import CronSchedule, parse_cron
from qlsched.core.pause import CatchUp, ResumePlan, plan_resume
from qlsched.core.store import ScheduleRow
from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query

Key = tuple[str, str]


def _schedule_of(row: Any) -> CronSchedule:
    """The revision's cron as the coordinator builds it from a claim (same inputs)."""
    return parse_cron(
        row["cron"], row["timezone"], dst_gap=row["dst_gap"], dst_fold=row["dst_fold"]
    )


async def _locked(conn: Connection, ref: TriggerRef) -> tuple[Any, int]:
    """Lock ``ref``'s schedule row, then read it with its spec and the database time."""
    locked = await conn.fetchval(query("control_lock_schedule"), ref.project_id, ref.trigger_id)
    row = None
    if locked:
        row = await conn.fetchrow(query("control_locked_schedule"), ref.project_id, ref.trigger_id)
    if row is None:
        raise UnknownTrigger(f"no trigger {ref} (project {ref.project_id}, id {ref.trigger_id})")
    return row, int(row["now_ms"])


async def record_action(
    conn: Connection,
    ref: TriggerRef,
    *,
    revision: int,
    kind: str,
    note: str | None,
    actor: str | None,
    occurrences: int = 0,
    detail: dict[str, Any] | None = None,
) -> tuple[int, int]:
    """Append one audit row (and count it), inside the caller's transaction.

    Returns:
        ``(action_id, at_ms)`` as the database assigned them.
    """
    row = await conn.fetchrow(
        query("control_record_action"),
        ref.project_id,
        ref.trigger_id,
        revision,
        kind,
        note,
        actor,
        occurrences,
        msgspec.json.encode(detail or {}).decode(),
    )
    assert row is not None
    return int(row["action_id"]), int(row["at_ms"])


async def pause(
    conn: Connection, ref: TriggerRef, *, note: str | None, actor: str | None
) -> PauseOutcome:
    """Pause ``ref`` (one transaction). ``note`` and ``actor`` are already checked."""
    async with conn.transaction():
        row, now = await _locked(conn, ref)
        if row["paused_at_ms"] is not None:
            return AlreadyPaused(
                ref.project_id, ref.trigger_id, row["paused_at_ms"], row["pause_note"]
            )
        await conn.execute(query("control_pause"), ref.project_id, ref.trigger_id, now, note)
        action_id, _ = await record_action(
            conn, ref, revision=row["trigger_revision"], kind="pause", note=note, actor=actor
        )
    return Paused(ref.project_id, ref.trigger_id, now, note, action_id)


async def resume(
    conn: Connection,
    ref: TriggerRef,
    *,
    catch_up: CatchUp,
    actor: str | None,
    note: str | None = None,
) -> ResumeOutcome:
    """Resume ``ref`` (one transaction): the cursor from the database time, the occurrences
    inside the pause counted (``core.pause``). ``note`` goes on the audit row."""
    async with conn.transaction():
        row, now = await _locked(conn, ref)
        paused_at = row["paused_at_ms"]
        if paused_at is None:
            return NotPaused(ref.project_id, ref.trigger_id)
        cursor = row["next_fire_at_ms"]
        scheduled = bool(row["schedulable"])
        plan = (
            plan_resume(
                _schedule_of(row),
                cursor_ms=cursor,
                since_ms=max(paused_at, row["revised_at_ms"]),
                now_ms=now,
                catch_up=catch_up,
            )
            if scheduled
            else ResumePlan.unscheduled(cursor)
        )
        next_ms, catch_up_ms, paused = plan.next_fire_at_ms, plan.catch_up_at_ms, plan.paused
        await conn.execute(
            query("control_resume"),
            ref.project_id,
            ref.trigger_id,
            next_ms,
            catch_up_ms,
            paused,
            now,
            plan.decided_from_ms,
        )
        action_id, _ = await record_action(
            conn,
            ref,
            revision=row["trigger_revision"],
            kind="resume",
            note=note,
            actor=actor,
            occurrences=paused,
            detail={
                "catch_up": catch_up,
                "paused_at_ms": paused_at,
                "inside": plan.inside,
                "next_fire_at_ms": next_ms,
                "fires_at_ms": catch_up_ms,
            },
        )
    return resumed(
        ref, plan, at_ms=now, catch_up=catch_up, scheduled=scheduled, action_id=action_id
    )


async def read_recent_actions(
    conn: Connection, keys: Iterable[Key], *, recent: int = RECENT_ACTIONS
) -> dict[Key, list[ScheduleAction]]:
    """The latest ``recent`` actions of each schedule in ``keys``, newest first (one
    statement; a schedule without actions is absent)."""
    keys = list(keys)
    actions: dict[Key, list[ScheduleAction]] = {}
    if not keys or recent <= 0:
        return actions
    rows = await conn.fetch(
        query("control_recent_actions"), [k[0] for k in keys], [k[1] for k in keys], recent
    )
    for r in rows:
        actions.setdefault((r["project_id"], r["trigger_id"]), []).append(
            ScheduleAction(
                action_id=r["action_id"],
                kind=r["kind"],
                at_ms=r["at_ms"],
                actor=r["actor"],
                actor_label=r["actor_label"],
                note=r["note"],
                occurrences=r["occurrences"],
            )
        )
    return actions


async def read_controls(
    conn: Connection, keys: Iterable[Key], *, recent: int = RECENT_ACTIONS
) -> dict[Key, ScheduleControl]:
    """Pause state and the latest ``recent`` actions of each schedule in ``keys`` (two
    statements whatever their number; absent rows are left out)."""
    keys = list(keys)
    if not keys:
        return {}
    actions = await read_recent_actions(conn, keys, recent=recent)
    rows = await conn.fetch(query("control_states"), [k[0] for k in keys], [k[1] for k in keys])
    return {
        (r["project_id"], r["trigger_id"]): ScheduleControl(
            paused_at_ms=r["paused_at_ms"],
            pause_note=r["pause_note"],
            paused_total=r["paused_total"],
            actions=actions.get((r["project_id"], r["trigger_id"]), []),
        )
        for r in rows
    }


Row = TypeVar("Row", bound=ScheduleRow)


async def with_controls(conn: Connection, rows: list[Row]) -> list[Row]:
    """Each schedule row (status's or the HTTP view's) with its pause state and latest
    actions, read in two statements for all of them."""
    controls = await read_controls(conn, [(r.project_id, r.trigger_id) for r in rows])
    out: list[Row] = []
    for row in rows:
        c = controls.get((row.project_id, row.trigger_id))
        if c is not None:
            row = msgspec.structs.replace(
                row,
                paused_at_ms=c.paused_at_ms,
                pause_note=c.pause_note,
                paused_total=c.paused_total,
                actions=c.actions,
            )
        out.append(row)
    return out


async def read_action_totals(conn: Connection) -> list[ActionTotal]:
    """Every kind's totals so far (a few rows: what a metrics scrape reads)."""
    return [
        ActionTotal(kind=r["kind"], actions=r["actions"], occurrences=r["occurrences"])
        for r in await conn.fetch(query("control_action_totals"))
    ]


async def list_schedule_states(
    conn: Connection,
    *,
    limit: int,
    after: TriggerRef | None = None,
    recent: int = RECENT_ACTIONS,
) -> list[ScheduleState]:
    """Up to ``limit`` schedules in key order after ``after``, each with its latest actions."""
    start = ("", "") if after is None else (after.project_id, after.trigger_id)
    rows = await conn.fetch(query("control_list_schedules"), start[0], start[1], limit)
    actions = await read_recent_actions(
        conn, [(r["project_id"], r["trigger_id"]) for r in rows], recent=recent
    )
    return [
        ScheduleState(
            **dict(r),
            paused=r["paused_at_ms"] is not None,
            actions=actions.get((r["project_id"], r["trigger_id"]), []),
        )
        for r in rows
    ]
