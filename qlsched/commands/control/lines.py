"""The one line a control command prints, for both profiles (``pause``, ``edge pause``,
``trigger``, ``edge trigger``, ...), and the range flags' parsing. Imports ``core`` only, so
the Edge's commands share it without the PostgreSQL path."""

from __future__ import annotations

import datetime as dt
from typing import assert_never

from qlsched.core.control import AlreadyPaused, ControlError, NotPaused, Paused, Resumed
from qlsched.core.requests import Recorded
from qlsched.core.shown import shown


def iso(ms: int) -> str:
    """An instant in UTC, to the millisecond (``2026-06-01T12:00:00.000Z``)."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _note(note: str | None) -> str:
    return "" if note is None else f" (note: {shown(note)})"


def outcome_line(outcome: Paused | AlreadyPaused | Resumed | NotPaused) -> str:
    """The one line a control command prints for its outcome."""
    ref = f"{outcome.project_id}/{outcome.trigger_id}"
    match outcome:
        case Paused(paused_at_ms=at, note=note):
            return f"paused {ref} at {iso(at)}{_note(note)}"
        case AlreadyPaused(paused_at_ms=at, note=note):
            return f"{ref} is already paused (since {iso(at)}){_note(note)}: nothing changed"
        case Resumed() as r:
            if not r.scheduled:
                return (
                    f"resumed {ref}; its trigger is disabled or its project archived, so"
                    " nothing is scheduled until a publish makes it active"
                )
            head = (
                f"resumed {ref} at {iso(r.resumed_at_ms)}: {r.inside} occurrence(s) fell"
                f" inside the pause, {r.paused} added to paused_total"
            )
            if r.fires_at_ms is not None:
                return f"{head}; the one of {iso(r.fires_at_ms)} fires once now"
            if r.next_fire_at_ms is None:
                return f"{head}; the next round sets its cursor"
            return f"{head}; next fire {iso(r.next_fire_at_ms)}"
        case NotPaused():
            return f"{ref} is not paused: nothing changed"
        case _:
            assert_never(outcome)


def iso_ms(flag: str, text: str) -> int:
    """An ISO 8601 date or date-time as epoch ms; without an offset it is UTC."""
    try:
        instant = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ControlError(f"{flag}: {text!r} is not an ISO 8601 date or date-time") from None
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=dt.UTC)
    return int(instant.timestamp() * 1000)


def iso_seconds(ms: int) -> str:
    """A range's end as the flags take it (``2026-06-01T12:00:00+00:00``)."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="seconds")


def recorded_line(result: Recorded, span: tuple[int, int] | None = None, *, edge: bool) -> str:
    """The line ``trigger`` / ``backfill`` (``edge`` ones: ``edge=True``) print once a
    request is recorded: its id, what it is for, and who admits it."""
    ref = f"{result.project_id}/{result.trigger_id}"
    status = "qlsched edge status" if edge else "qlsched status"
    if span is None:
        who = "edge run admits it" if edge else "a replica admits it"
        return (
            f"trigger {ref}: request {result.request_id} recorded at"
            f" {iso_seconds(result.created_at_ms)} for revision {result.trigger_revision};"
            f" {who} ({status} shows it)"
        )
    who = "edge run admits them" if edge else "replicas admit them"
    return (
        f"backfill {ref}: request {result.request_id} recorded for {result.total:,} occurrences"
        f" from {iso_seconds(span[0])} to {iso_seconds(span[1])} (revision"
        f" {result.trigger_revision}); {who} ({status} shows the progress)"
    )
