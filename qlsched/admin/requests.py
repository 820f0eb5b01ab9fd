"""Trigger-now and backfill from Python: the same checks and the same rows as the CLI.

``trigger_now`` and ``backfill`` record a request with the admin role (with its audit row
in ``schedule_actions``) and return what happened as a value: ``Recorded`` (pending; a
replica admits it) or ``NotRecorded`` (refused at once, with the reason: a disabled or
archived trigger, a range past the database's now, or more occurrences than
``max_occurrences``, with the exact count). Bad input raises before anything connects.

Example::

    result = await trigger_now(admin_dsn, "default/backup-nightly", note="after restore")
    if isinstance(result, NotRecorded):
        print(result.message())

Errors (one line each): ``ControlError`` (a malformed ``P/T``, note, actor or range;
``UnknownTrigger`` for a trigger that does not exist), ``WrongRole``, ``DsnError``: bad
input; ``DatabaseUnavailable``, ``NotInitialised``: the database cannot be used.

Cancellation: each call is one connection and one transaction; cut before its COMMIT,
nothing is recorded (``qlsched status`` lists the requests).
"""

from __future__ import annotations

from datetime import UTC, datetime

from qlsched.admin._session import as_admin
from qlsched.core.control import (
    ACTOR_MAX_CHARS,
    NOTE_MAX_CHARS,
    ControlError,
    TriggerRef,
    UnknownTrigger,
    checked_text,
    trigger_ref,
)
from qlsched.core.requests import (
    BACKFILL_MAX_DEFAULT,
    BACKFILL_MAX_HARD_CAP,
    NotRecorded,
    Recorded,
    RecordResult,
)
from qlsched.postgres.pool import Connection
from qlsched.postgres.requests import record_backfill, record_trigger_now

__all__ = [
    "NotRecorded",
    "RecordResult",
    "Recorded",
    "backfill",
    "check_range",
    "to_ms",
    "trigger_now",
]


def to_ms(instant: datetime | int) -> int:
    """Epoch milliseconds of ``instant``; a datetime without a zone is read as UTC."""
    if isinstance(instant, int):
        return instant
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return int(instant.timestamp() * 1000)


def check_range(from_ms: int, to_ms: int, max_occurrences: int) -> None:
    """Raise ``ControlError`` for a backwards range or a ``max`` out of bounds."""
    if from_ms > to_ms:
        raise ControlError("the range's start is after its end")
    if not 1 <= max_occurrences <= BACKFILL_MAX_HARD_CAP:
        raise ControlError(f"max: must be 1 to {BACKFILL_MAX_HARD_CAP:,}")


def _inputs(
    trigger: str | TriggerRef, note: str | None, actor: str | None
) -> tuple[TriggerRef, str | None, str | None]:
    ref = trigger if isinstance(trigger, TriggerRef) else trigger_ref(trigger)
    return (
        ref,
        checked_text(note, what="note", max_chars=NOTE_MAX_CHARS),
        checked_text(actor, what="actor", max_chars=ACTOR_MAX_CHARS),
    )


def _known(ref: TriggerRef, result: RecordResult) -> RecordResult:
    if isinstance(result, NotRecorded) and result.reason == "trigger_missing":
        raise UnknownTrigger(f"no trigger {ref} (project {ref.project_id}, id {ref.trigger_id})")
    return result


async def trigger_now(
    dsn: str,
    trigger: str | TriggerRef,
    *,
    note: str | None = None,
    actor: str | None = None,
) -> RecordResult:
    """Ask for one Run of the trigger's current revision now (admin role).

    A replica admits it as one Run keyed ``ql3:manual:v1:<trigger>:<revision>:<request>``
    (``scheduled_for`` = when it was recorded), without moving the cron cursor. If the
    trigger is re-published with a change, disabled or archived before that, the request is
    refused and nothing runs.

    Args:
        trigger: ``"PROJECT/TRIGGER"`` or a ``TriggerRef``.
        note: why (kept with the request and its audit row; 1..1000 characters).
        actor: who, in the operator's words (recorded beside the database role).
    """
    ref, note, actor = _inputs(trigger, note, actor)

    async def fn(conn: Connection) -> RecordResult:
        return await record_trigger_now(
            conn, ref.project_id, ref.trigger_id, note=note, actor=actor
        )

    return _known(ref, await as_admin(dsn, "trigger", fn))


async def backfill(
    dsn: str,
    trigger: str | TriggerRef,
    *,
    start: datetime | int,
    end: datetime | int,
    max_occurrences: int = BACKFILL_MAX_DEFAULT,
    note: str | None = None,
    actor: str | None = None,
) -> RecordResult:
    """Ask for a Run of every occurrence in ``[start, end]`` (admin role).

    The occurrences are the trigger's own (cron, zone, DST rule), counted exactly before
    anything is written. Replicas admit them at most the claim budget per round, each under
    its cron key: one that already has a Run is counted (``already_admitted``), never run
    twice; occurrences at or after the trigger's cron cursor are left to cron.

    Args:
        trigger: ``"PROJECT/TRIGGER"`` or a ``TriggerRef``.
        start, end: datetimes (naive = UTC) or epoch milliseconds; ``end`` not after now.
        max_occurrences: refuse a range of more (1..1,000,000; default 10,000).
    """
    ref, note, actor = _inputs(trigger, note, actor)
    from_ms, until_ms = to_ms(start), to_ms(end)
    check_range(from_ms, until_ms, max_occurrences)

    async def fn(conn: Connection) -> RecordResult:
        return await record_backfill(
            conn,
            ref.project_id,
            ref.trigger_id,
            from_ms=from_ms,
            to_ms=until_ms,
            max_occurrences=max_occurrences,
            note=note,
            actor=actor,
        )

    return _known(ref, await as_admin(dsn, "backfill", fn))
