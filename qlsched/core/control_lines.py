"""The one line a pause or resume answers with: ``pause``, ``resume``, their Edge twins and
the dashboard's actions all say it the same way. Pure formatting of core outcomes."""

from __future__ import annotations

import datetime as dt
from typing import assert_never

from qlsched.core.control import AlreadyPaused, NotPaused, Paused, Resumed
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
