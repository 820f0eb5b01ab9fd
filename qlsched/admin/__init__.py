"""The Python admin API (docs/contract.md §10): what the admin commands do, from code.

Async functions (await them from Trio); in ``qlsched.admin.sync`` the same functions for
plain scripts, and in ``qlsched.admin.aio`` for asyncio services (FastAPI, Jupyter), where
``sync`` cannot run inside the running loop::

    from qlsched.admin import ProjectEntry, TaskEntry, TriggerEntry, sync

    sync.publish(ADMIN_DSN, projects=[ProjectEntry(id="billing")], tasks=[...], triggers=[...])
    sync.pause(ADMIN_DSN, "billing/nightly", note="migrating the ledger", actor="alice")
    sync.resume(ADMIN_DSN, "billing/nightly", catch_up="fire_once")
    sync.trigger_now(ADMIN_DSN, "billing/nightly", note="rerun after the fix")
    sync.backfill(ADMIN_DSN, "billing/nightly", start=datetime(2026, 3, 1), end=datetime.now())
    sync.cancel(ADMIN_DSN, RUN_ID, note="wrong day")
    await aio.pause(ADMIN_DSN, "billing/nightly")  # inside a running asyncio loop

Entries are the Structs a publish file decodes to, validated the same way. Every call opens
one connection and closes it; see ``qlsched.admin.schedules`` for the errors. Each control
lives in a module of its own, re-exported here.
"""

from __future__ import annotations

from qlsched.admin import aio, sync
from qlsched.admin.requests import backfill, trigger_now
from qlsched.admin.runs import cancel, list_runs
from qlsched.admin.schedules import list_schedules, pause, publish, resume, validated
from qlsched.core.control import (
    AlreadyPaused,
    ControlError,
    NotPaused,
    Paused,
    PauseOutcome,
    Resumed,
    ResumeOutcome,
    ScheduleAction,
    ScheduleState,
    TriggerRef,
    UnknownTrigger,
)
from qlsched.core.pause import CatchUp
from qlsched.core.publish_result import PublishResult
from qlsched.core.requests import NotRecorded, Recorded
from qlsched.core.specs import ProjectEntry, SpecError, TaskEntry, TriggerEntry

__all__ = [
    "AlreadyPaused",
    "CatchUp",
    "ControlError",
    "NotPaused",
    "NotRecorded",
    "PauseOutcome",
    "Paused",
    "ProjectEntry",
    "PublishResult",
    "Recorded",
    "ResumeOutcome",
    "Resumed",
    "ScheduleAction",
    "ScheduleState",
    "SpecError",
    "TaskEntry",
    "TriggerEntry",
    "TriggerRef",
    "UnknownTrigger",
    "aio",
    "backfill",
    "cancel",
    "list_runs",
    "list_schedules",
    "pause",
    "publish",
    "resume",
    "sync",
    "trigger_now",
    "validated",
]
