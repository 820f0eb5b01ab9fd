"""Cancel and list Runs from Python (async; usable from any Trio task).

``cancel`` is the admin role's, one transaction with its audit row (``schedule_actions``,
kind ``cancel``): a queued Run is cancelled at once; a running one is stopped by its worker
at the next heartbeat. ``list_runs`` reads with the observer role. Inputs are checked
before any connection is opened; errors are those of ``qlsched.admin.schedules``.
"""

from __future__ import annotations

import uuid
from typing import Final

from qlsched.admin._session import as_admin
from qlsched.core.control import (
    ACTOR_MAX_CHARS,
    NOTE_MAX_CHARS,
    ControlError,
    checked_text,
    trigger_ref,
)
from qlsched.core.work import RUN_STATES, CancelOutcome, RunView
from qlsched.postgres.cancel import cancel_run
from qlsched.postgres.login import OBSERVER, read_login, require
from qlsched.postgres.pool import Connection, connect_once
from qlsched.postgres.runs import recent_runs

RUNS_LIMIT_MAX: Final = 10_000


def checked_run_id(text: str) -> str:
    """``text`` as a canonical UUID, or ``ControlError`` naming it (before any connection)."""
    try:
        return str(uuid.UUID(text.strip()))
    except ValueError:
        raise ControlError(f"run id {text!r}: expected a UUID (as `qlsched runs` shows)") from None


async def cancel(
    dsn: str, run_id: str, *, note: str | None = None, actor: str | None = None
) -> CancelOutcome:
    """Cancel a Run (admin role).

    Returns:
        ``CancelledQueued``, ``CancelRequested`` (its worker stops the job), or
        ``AlreadyFinished`` / ``UnknownRun`` (nothing changed, nothing recorded).

    Raises:
        ControlError: a malformed Run id, note or actor.
    """
    rid = checked_run_id(run_id)
    text = checked_text(note, what="note", max_chars=NOTE_MAX_CHARS)
    who = checked_text(actor, what="actor", max_chars=ACTOR_MAX_CHARS)

    async def fn(conn: Connection) -> CancelOutcome:
        return await cancel_run(conn, rid, note=text, actor=who)

    return await as_admin(dsn, "cancel", fn)


async def list_runs(
    dsn: str, trigger: str | None = None, *, state: str | None = None, limit: int = 50
) -> list[RunView]:
    """The latest Runs, newest first, with their Attempts (observer role).

    Args:
        trigger: ``"PROJECT/TRIGGER"``, or ``"PROJECT"`` for all of a project's.
        state: one of queued, running, succeeded, failed, cancelled.
        limit: at most this many (1..10000).
    """
    if not 1 <= limit <= RUNS_LIMIT_MAX:
        raise ControlError(f"limit: expected 1..{RUNS_LIMIT_MAX}, got {limit}")
    if state is not None and state not in RUN_STATES:
        raise ControlError(f"state {state!r}: one of {', '.join(RUN_STATES)}")
    project = trigger_id = None
    if trigger is not None:
        if "/" in trigger:
            ref = trigger_ref(trigger)
            project, trigger_id = ref.project_id, ref.trigger_id
        else:
            project = trigger

    async def fn(conn: Connection) -> list[RunView]:
        require(await read_login(conn, OBSERVER), command="runs", role=OBSERVER)
        return await recent_runs(
            conn, project_id=project, trigger_id=trigger_id, state=state, limit=limit
        )

    return await connect_once(dsn, fn)
