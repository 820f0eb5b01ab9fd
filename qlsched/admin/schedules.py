"""Publish, pause, resume and list schedules from Python (async; usable from any Trio task).

The same operations as ``qlsched publish``, ``pause`` and ``resume``, with the same rules:
publish validates the Structs exactly as the TOML path validates a file (they go through
the one converter, so an invalid entry raises the same ``SpecError`` text), and publishes
all or nothing in one admin transaction. Pause and resume are one admin transaction each
with their audit row; repeating one is an outcome (``AlreadyPaused``, ``NotPaused``), not an
error. Inputs are checked before any connection is opened.

Each call opens one connection to ``dsn`` and closes it before returning (nothing is kept
between calls). Errors, all one line:

- ``SpecError``, ``ControlError`` (``UnknownTrigger``), ``WrongRole``, ``DsnError``: bad input;
- ``DatabaseUnavailable``, ``NotInitialised``: the database cannot be used;
- ``asyncpg.PostgresError``: anything else the server refused.

Cancellation: cancelling a call cuts its connection; a pause or resume whose COMMIT was cut
may or may not have landed (``list_schedules`` tells), and repeating it is safe: the second
is a no-op that says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from qlsched.admin._session import as_admin, as_reader
from qlsched.core.control import (
    ACTOR_MAX_CHARS,
    NOTE_MAX_CHARS,
    RECENT_ACTIONS,
    ControlError,
    PauseOutcome,
    ResumeOutcome,
    ScheduleState,
    TriggerRef,
    checked_ref,
    checked_text,
)
from qlsched.core.pause import CATCH_UPS, CatchUp
from qlsched.core.publish_result import PublishResult
from qlsched.core.specs import (
    ProjectEntry,
    PublishFile,
    SpecError,
    TaskEntry,
    TriggerEntry,
    publish_file_from,
)
from qlsched.core.utf8 import surrogate_in
from qlsched.postgres import control
from qlsched.postgres.pool import Connection
from qlsched.postgres.publish import publish as publish_spec

LIST_LIMIT_MAX: Final = 10_000
NOTHING_TO_PUBLISH: Final = "nothing to publish: no projects, tasks or triggers were given"


def validated(
    projects: Sequence[ProjectEntry] = (),
    tasks: Sequence[TaskEntry] = (),
    triggers: Sequence[TriggerEntry] = (),
) -> PublishFile:
    """The entries as one validated ``PublishFile``, by the TOML path's own converter.

    Structs built in code skip msgspec's field constraints (an id pattern, the grace
    bounds) and may hold values of the wrong type; turning them into plain data and
    converting that back checks them exactly as a decoded file is checked.

    Raises:
        SpecError: the first invalid entry and field, worded as for a file.
    """
    if not (projects or tasks or triggers):
        raise SpecError(NOTHING_TO_PUBLISH)
    try:
        data = msgspec.to_builtins(
            {"projects": list(projects), "tasks": list(tasks), "triggers": list(triggers)}
        )
    except TypeError as exc:  # not a Struct, list or plain value at all
        raise SpecError(f"not publishable: {exc}") from None
    where = surrogate_in(data)
    if where is not None:  # the digest and the driver would raise UnicodeEncodeError
        raise SpecError(f"{where}: not UTF-8 text (a lone surrogate)")
    return publish_file_from(data)


def _ref(trigger: str | TriggerRef) -> TriggerRef:
    return checked_ref(trigger)


async def publish(
    dsn: str,
    *,
    projects: Sequence[ProjectEntry] = (),
    tasks: Sequence[TaskEntry] = (),
    triggers: Sequence[TriggerEntry] = (),
    prune: bool = False,
) -> PublishResult:
    """Publish projects, tasks and triggers built in code (admin role, one transaction).

    Args:
        dsn: a DSN that logs in as ``qlsched_admin`` (or a superuser).
        projects, tasks, triggers: the entries, as a publish file would list them.
        prune: disable the listed projects' triggers that are not listed (never delete).

    Returns:
        What changed, per project, task and trigger (``added``, ``changed``, ``unchanged``,
        ``disabled``, ``repinned``). Publishing the same entries twice changes nothing.

    Raises:
        SpecError: an invalid entry (nothing is published), worded as ``qlsched publish``
            words it for a file.
    """
    spec = validated(projects, tasks, triggers)

    async def fn(conn: Connection) -> PublishResult:
        return await publish_spec(conn, spec, prune=prune)

    return await as_admin(dsn, "publish", fn)


async def pause(
    dsn: str,
    trigger: str | TriggerRef,
    *,
    note: str | None = None,
    actor: str | None = None,
) -> PauseOutcome:
    """Pause a trigger: no round claims it until it is resumed (admin role).

    Its revision and cursor are kept, a claim a replica holds on it is voided (no Run is
    admitted after this returns), and re-publishing does not unpause it.

    Args:
        trigger: ``"PROJECT/TRIGGER"`` or a ``TriggerRef``.
        note: why (shown by status and ``/v1/schedules``; 1..1000 characters).
        actor: who, in the operator's words (recorded beside the database role).

    Returns:
        ``Paused``, or ``AlreadyPaused`` (nothing changed, nothing recorded).

    Raises:
        UnknownTrigger: no such trigger. ControlError: a malformed reference, note or actor.
    """
    ref = _ref(trigger)
    text = checked_text(note, what="note", max_chars=NOTE_MAX_CHARS)
    who = checked_text(actor, what="actor", max_chars=ACTOR_MAX_CHARS)

    async def fn(conn: Connection) -> PauseOutcome:
        return await control.pause(conn, ref, note=text, actor=who)

    return await as_admin(dsn, "pause", fn)


async def resume(
    dsn: str,
    trigger: str | TriggerRef,
    *,
    catch_up: CatchUp = "skip",
    actor: str | None = None,
    note: str | None = None,
) -> ResumeOutcome:
    """Resume a paused trigger from the database's time (admin role).

    The occurrences that fell inside the pause are counted into ``paused_total``; with
    ``catch_up="fire_once"`` the latest of them fires once (the next round admits it under
    its own cron key, whatever the misfire grace) and the others are counted. ``note``
    (1..1000 characters) is kept on the audit row.

    Returns:
        ``Resumed`` (with the counts and the new cursor), or ``NotPaused`` (nothing changed,
        nothing recorded).

    Raises:
        UnknownTrigger: no such trigger. ControlError: a malformed reference, catch-up or actor.
    """
    ref = _ref(trigger)
    if catch_up not in CATCH_UPS:
        raise ControlError(f"catch_up: expected one of {', '.join(CATCH_UPS)}, got {catch_up!r}")
    who = checked_text(actor, what="actor", max_chars=ACTOR_MAX_CHARS)
    text = checked_text(note, what="note", max_chars=NOTE_MAX_CHARS)

    async def fn(conn: Connection) -> ResumeOutcome:
        return await control.resume(conn, ref, catch_up=catch_up, actor=who, note=text)

    return await as_admin(dsn, "resume", fn)


def _int_in(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


async def list_schedules(
    dsn: str,
    *,
    limit: int = 1000,
    after: str | TriggerRef | None = None,
    recent_actions: int = RECENT_ACTIONS,
) -> list[ScheduleState]:
    """Schedules in (project, trigger) order with their state: revision, cursor, counters,
    pause state and note, and the latest actions (admin or observer role).

    Args:
        limit: at most this many (1..10000).
        after: start after this trigger (the last one of the previous page).
        recent_actions: how many of each trigger's latest actions to include (0..100).
    """
    if not _int_in(limit, 1, LIST_LIMIT_MAX):
        raise ControlError(f"limit: expected 1..{LIST_LIMIT_MAX}, got {limit!r}")
    if not _int_in(recent_actions, 0, 100):
        raise ControlError(f"recent_actions: expected 0..100, got {recent_actions!r}")
    start = None if after is None else _ref(after)

    async def fn(conn: Connection) -> list[ScheduleState]:
        return await control.list_schedule_states(
            conn, limit=limit, after=start, recent=recent_actions
        )

    return await as_reader(dsn, "list_schedules", fn)
