"""Diagnostics: what a replica may report, as fixed msgspec Structs, and the sink port.

What may be written is fixed by the Struct: a code, counts, a SQLSTATE, an exception's class
name, the replica, project and trigger ids, a duration. There is no free-text field, so a
DSN, password, payload, SQL parameter or driver message (which can echo row data) has no way
in. Exceptions enter only through ``from_exception``, which keeps the class name and the
SQLSTATE and drops the message.

A ``DiagnosticSink`` is anything with ``emit(diagnostic)``: the JSON-lines stream sink (and
the routing of library log records into it) is ``qlsched.sinks``, outside the core, since
it writes and locks. ``level_of`` says how a line is levelled: ``error`` for a failed step,
``warning`` for everything else a replica reports, the record's level for a library's log
record.
"""

from __future__ import annotations

from typing import Final, Literal, Protocol

import msgspec

Level = Literal["error", "warning", "info"]

ERROR_CODES: Final = frozenset(
    {
        "round_failed",
        "claim_task_failed",
        "spec_invalid",
        "admit_error",
        "admit_failed",
        "admit_mismatch",
        "schema_not_ready",
        "backlog_failed",
        "schedules_failed",
        "action_totals_failed",
    }
)
"""Codes for a step that failed; every other code a replica emits is a warning."""


class Diagnostic(msgspec.Struct, frozen=True, omit_defaults=True):
    code: str
    replica: str = ""
    at_ms: int | None = None
    project_id: str | None = None
    trigger_id: str | None = None
    part: str | None = None
    """A closed enum from an outcome (a fence part, a revision part): never free text."""
    sqlstate: str | None = None
    exception: str | None = None
    count: int | None = None
    duration_ms: float | None = None
    logger: str | None = None
    """For ``library_log``: the library's logger (``qlsched.sinks.LIBRARY_LOGGERS``)."""
    level: Level | None = None
    """Set for library records; otherwise the sink derives it from the code."""


def level_of(diagnostic: Diagnostic) -> Level:
    if diagnostic.level is not None:
        return diagnostic.level
    return "error" if diagnostic.code in ERROR_CODES else "warning"


def sqlstate_of(exc: BaseException) -> str | None:
    state = getattr(exc, "sqlstate", None)
    if isinstance(state, str) and len(state) == 5 and state.isalnum():
        return state
    return None


def from_exception(
    code: str,
    exc: BaseException,
    *,
    replica: str = "",
    at_ms: int | None = None,
    project_id: str | None = None,
    trigger_id: str | None = None,
    count: int | None = None,
) -> Diagnostic:
    """A diagnostic for an exception: class name and SQLSTATE only, never ``str(exc)``."""
    return Diagnostic(
        code=code,
        replica=replica,
        at_ms=at_ms,
        project_id=project_id,
        trigger_id=trigger_id,
        exception=type(exc).__name__,
        sqlstate=sqlstate_of(exc),
        count=count,
    )


class DiagnosticSink(Protocol):
    """Where diagnostics go (the port): ``qlsched.sinks.StreamSink`` writes JSON lines."""

    def emit(self, diagnostic: Diagnostic) -> None: ...
