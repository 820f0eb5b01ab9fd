"""The one line a control command prints, for both profiles (``pause``, ``edge pause``,
``trigger``, ``edge trigger``, ...; a pause or resume's is ``core.control_lines``'s, which
the dashboard shows too), and the range flags' parsing. Imports ``core`` only, so
the Edge's commands share it without the PostgreSQL path."""

from __future__ import annotations

import datetime as dt

from qlsched.core.control import ControlError
from qlsched.core.requests import Recorded


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
