"""``qlsched.admin`` for plain scripts: each function runs its async twin under ``trio.run``.

Same arguments, results and errors as the async functions. Not for code already inside a
Trio (or asyncio) event loop: ``trio.run`` refuses to nest there; await the async
functions instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import partial

import trio

from qlsched.admin import requests, schedules
from qlsched.core.control import (
    RECENT_ACTIONS,
    PauseOutcome,
    ResumeOutcome,
    ScheduleState,
    TriggerRef,
)
from qlsched.core.pause import CatchUp
from qlsched.core.publish_result import PublishResult
from qlsched.core.requests import BACKFILL_MAX_DEFAULT, RecordResult
from qlsched.core.specs import ProjectEntry, TaskEntry, TriggerEntry


def publish(
    dsn: str,
    *,
    projects: Sequence[ProjectEntry] = (),
    tasks: Sequence[TaskEntry] = (),
    triggers: Sequence[TriggerEntry] = (),
    prune: bool = False,
) -> PublishResult:
    """``qlsched.admin.publish``, blocking."""
    return trio.run(
        partial(
            schedules.publish, dsn, projects=projects, tasks=tasks, triggers=triggers, prune=prune
        )
    )


def pause(
    dsn: str, trigger: str | TriggerRef, *, note: str | None = None, actor: str | None = None
) -> PauseOutcome:
    """``qlsched.admin.pause``, blocking."""
    return trio.run(partial(schedules.pause, dsn, trigger, note=note, actor=actor))


def resume(
    dsn: str, trigger: str | TriggerRef, *, catch_up: CatchUp = "skip", actor: str | None = None
) -> ResumeOutcome:
    """``qlsched.admin.resume``, blocking."""
    return trio.run(partial(schedules.resume, dsn, trigger, catch_up=catch_up, actor=actor))


def list_schedules(
    dsn: str,
    *,
    limit: int = 1000,
    after: str | TriggerRef | None = None,
    recent_actions: int = RECENT_ACTIONS,
) -> list[ScheduleState]:
    """``qlsched.admin.list_schedules``, blocking."""
    return trio.run(
        partial(
            schedules.list_schedules, dsn, limit=limit, after=after, recent_actions=recent_actions
        )
    )


def trigger_now(
    dsn: str, trigger: str | TriggerRef, *, note: str | None = None, actor: str | None = None
) -> RecordResult:
    """``qlsched.admin.trigger_now``, blocking."""
    return trio.run(partial(requests.trigger_now, dsn, trigger, note=note, actor=actor))


def backfill(
    dsn: str,
    trigger: str | TriggerRef,
    *,
    start: datetime | int,
    end: datetime | int,
    max_occurrences: int = BACKFILL_MAX_DEFAULT,
    note: str | None = None,
    actor: str | None = None,
) -> RecordResult:
    """``qlsched.admin.backfill``, blocking."""
    return trio.run(
        partial(
            requests.backfill,
            dsn,
            trigger,
            start=start,
            end=end,
            max_occurrences=max_occurrences,
            note=note,
            actor=actor,
        )
    )
