"""Trigger-now and backfill from Python: the same checks and the same rows as the CLI.

``trigger_now`` and ``backfill`` record a request with the admin role and return what
happened as a value: ``Recorded`` (pending; a replica admits it) or ``NotRecorded`` (refused
at once, with the reason: a missing, disabled or archived trigger, a range past the
database's now, or more occurrences than ``max_occurrences``, with the exact count). Bad
arguments raise ``RequestInputError`` before anything connects.

Example::

    result = await trigger_now(admin_dsn, "default", "backup-nightly", note="after restore")
    if isinstance(result, NotRecorded):
        print(result.message())

Cancellation: each call is one connection and one transaction; cancelled before its COMMIT,
nothing is recorded.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from qlsched.core.requests import (
    ACTOR_MAX_CHARS,
    BACKFILL_MAX_DEFAULT,
    BACKFILL_MAX_HARD_CAP,
    NOTE_MAX_CHARS,
    NotRecorded,
    Recorded,
    RecordResult,
)
from qlsched.core.specs import ID_PATTERN, ID_RULE, SpecError
from qlsched.postgres.login import ADMIN, read_login, require
from qlsched.postgres.pool import Connection, connect_once
from qlsched.postgres.requests import record_backfill, record_trigger_now

__all__ = [
    "NotRecorded",
    "RecordResult",
    "Recorded",
    "RequestInputError",
    "backfill",
    "check",
    "check_range",
    "to_ms",
    "trigger_now",
]

_ID = re.compile(ID_PATTERN)


class RequestInputError(SpecError):
    """An argument that can never make a valid request (the CLI exits 2)."""


def to_ms(instant: datetime | int) -> int:
    """Epoch milliseconds of ``instant``; a datetime without a zone is read as UTC."""
    if isinstance(instant, int):
        return instant
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return int(instant.timestamp() * 1000)


def check(project_id: str, trigger_id: str, note: str | None, actor: str | None) -> None:
    """Raise ``RequestInputError`` unless the ids, the note and the actor can be recorded."""
    for name, value in (("project", project_id), ("trigger", trigger_id)):
        if not _ID.match(value):
            raise RequestInputError(f"{name} id {value!r} does not match {ID_RULE}")
    if note is not None and len(note) > NOTE_MAX_CHARS:
        raise RequestInputError(f"note: at most {NOTE_MAX_CHARS} characters")
    if actor is not None and not 1 <= len(actor) <= ACTOR_MAX_CHARS:
        raise RequestInputError(f"actor: 1 to {ACTOR_MAX_CHARS} characters")


def check_range(from_ms: int, to_ms: int, max_occurrences: int) -> None:
    """Raise ``RequestInputError`` for a backwards range or a ``max`` out of bounds."""
    if from_ms > to_ms:
        raise RequestInputError("the range's start is after its end")
    if not 1 <= max_occurrences <= BACKFILL_MAX_HARD_CAP:
        raise RequestInputError(f"max: must be 1 to {BACKFILL_MAX_HARD_CAP:,}")


async def trigger_now(
    dsn: str,
    project_id: str,
    trigger_id: str,
    *,
    note: str | None = None,
    actor: str | None = None,
) -> RecordResult:
    """Ask for one Run of the trigger's current revision now (``ql3:manual:v1:`` key).

    Raises:
        RequestInputError: a malformed id, note or actor.
        WrongRole: the DSN does not log in as ``qlsched_admin``.
        DatabaseUnavailable: the database could not be reached.
    """
    check(project_id, trigger_id, note, actor)

    async def fn(conn: Connection) -> RecordResult:
        require(await read_login(conn, ADMIN), command="trigger", role=ADMIN)
        return await record_trigger_now(conn, project_id, trigger_id, note=note, actor=actor)

    return await connect_once(dsn, fn)


async def backfill(
    dsn: str,
    project_id: str,
    trigger_id: str,
    *,
    start: datetime | int,
    end: datetime | int,
    max_occurrences: int = BACKFILL_MAX_DEFAULT,
    note: str | None = None,
    actor: str | None = None,
) -> RecordResult:
    """Ask for a Run of every occurrence in ``[start, end]`` (the trigger's own cron, zone
    and DST rule), each under its cron key: one that already has a Run is counted, not
    repeated. ``start``/``end``: datetimes (naive = UTC) or epoch milliseconds.

    Raises:
        RequestInputError: ``start`` after ``end``, ``max_occurrences`` outside
            1..1,000,000, or a malformed id, note or actor.
        WrongRole: the DSN does not log in as ``qlsched_admin``.
        DatabaseUnavailable: the database could not be reached.
    """
    check(project_id, trigger_id, note, actor)
    from_ms, until_ms = to_ms(start), to_ms(end)
    check_range(from_ms, until_ms, max_occurrences)

    async def fn(conn: Connection) -> RecordResult:
        require(await read_login(conn, ADMIN), command="backfill", role=ADMIN)
        return await record_backfill(
            conn,
            project_id,
            trigger_id,
            from_ms=from_ms,
            to_ms=until_ms,
            max_occurrences=max_occurrences,
            note=note,
            actor=actor,
        )

    return await connect_once(dsn, fn)
