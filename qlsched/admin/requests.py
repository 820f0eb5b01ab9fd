"""Trigger-now and backfill from Python: the same checks and the same rows as the CLI.

``trigger_now`` and ``backfill`` record a request with the admin role (with its audit row
in ``schedule_actions``) and return what happened as a value: ``Recorded`` (pending; a
replica admits it) or ``NotRecorded`` (refused at once, with the reason: a disabled or
archived trigger, a range past the database's now, a start before the retention horizon
(``before_retention``, with the earliest start allowed), or more occurrences than
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

from datetime import datetime

from qlsched.admin._session import as_admin
from qlsched.core.control import (
    ACTOR_MAX_CHARS,
    NOTE_MAX_CHARS,
    ControlError,
    TriggerRef,
    UnknownTrigger,
    checked_ref,
    checked_text,
)
from qlsched.core.requests import (
    BACKFILL_MAX_DEFAULT,
    NotRecorded,
    Recorded,
    RecordResult,
    RequestOverlap,
    check_range,
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


def to_ms(instant: datetime | int, what: str = "instant") -> int:
    """Epoch milliseconds of ``instant``: an aware datetime or epoch ms (an int).

    Raises:
        ControlError: a datetime without a zone (ambiguous: give ``tzinfo=UTC``), or
            anything but a datetime or an int.
    """
    if isinstance(instant, datetime):
        if instant.tzinfo is None or instant.utcoffset() is None:
            raise ControlError(
                f"{what}: a datetime without a time zone is ambiguous (give tzinfo=UTC)"
            )
        return int(instant.timestamp() * 1000)
    if isinstance(instant, int) and not isinstance(instant, bool):
        return instant
    raise ControlError(
        f"{what}: expected an aware datetime or epoch milliseconds, got {type(instant).__name__}"
    )


def _inputs(
    trigger: str | TriggerRef, note: str | None, actor: str | None
) -> tuple[TriggerRef, str | None, str | None]:
    ref = checked_ref(trigger)
    return (
        ref,
        checked_text(note, what="note", max_chars=NOTE_MAX_CHARS),
        checked_text(actor, what="actor", max_chars=ACTOR_MAX_CHARS),
    )


def _known(ref: TriggerRef, result: RecordResult) -> RecordResult:
    if isinstance(result, NotRecorded) and result.reason == "trigger_missing":
        raise UnknownTrigger(f"no trigger {ref} (project {ref.project_id}, id {ref.trigger_id})")
    return result


def _overlap(overlap: str | None) -> RequestOverlap | None:
    if overlap is None:
        return None
    if overlap == "allow":
        return "allow"
    raise ControlError(f"overlap {overlap!r}: only 'allow' (or None: the trigger's policy)")


async def trigger_now(
    dsn: str,
    trigger: str | TriggerRef,
    *,
    note: str | None = None,
    actor: str | None = None,
    overlap: str | None = None,
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
        overlap: ``"allow"`` admits it whatever the trigger's overlap policy (default: the
            policy decides, as for cron's occurrences).
    """
    ref, note, actor = _inputs(trigger, note, actor)
    asked = _overlap(overlap)

    async def fn(conn: Connection) -> RecordResult:
        return await record_trigger_now(
            conn, ref.project_id, ref.trigger_id, note=note, actor=actor, overlap=asked
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
    overlap: str | None = None,
) -> RecordResult:
    """Ask for a Run of every occurrence in ``[start, end]`` (admin role).

    The occurrences are the trigger's own (cron, zone, DST rule), counted exactly before
    anything is written. Replicas admit them at most the claim budget per round, each under
    its cron key: one that already has a Run is counted (``already_admitted``), never run
    twice; occurrences at or after the trigger's cron cursor are left to cron.

    Args:
        trigger: ``"PROJECT/TRIGGER"`` or a ``TriggerRef``.
        start, end: aware datetimes or epoch milliseconds (a naive datetime is refused);
            ``end`` not after now, ``start`` not before the retention horizon (Runs that
            ended before it are deleted, so their keys are free: docs/contract.md §14).
        max_occurrences: refuse a range of more (1..1,000,000; default 10,000).
        overlap: ``"allow"`` admits every occurrence whatever the trigger's overlap policy
            (default: the policy decides: under ``skip`` at most one Run while none is
            unfinished, under ``buffer_one`` one queued and one held; the rest counted).
    """
    ref, note, actor = _inputs(trigger, note, actor)
    asked = _overlap(overlap)
    from_ms, until_ms = to_ms(start, "start"), to_ms(end, "end")
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
            overlap=asked,
        )

    return _known(ref, await as_admin(dsn, "backfill", fn))
