"""The low-sensitivity diagnostic sink: msgspec Structs written as JSON lines.

What may be written is fixed by the Struct: a code, counts, a SQLSTATE, an exception's class
name, the replica, project and trigger ids, a duration. There is no free-text field, so a
DSN, password, payload, SQL parameter or driver message (which can echo row data) has no way
in. Exceptions enter only through ``from_exception``, which keeps the class name and the
SQLSTATE and drops the message.

Each line starts with ``ts`` (UTC, ISO 8601, this process's clock: when the line was
written, not a database time) and ``level`` (``error`` for a failed step, ``warning`` for
everything else a replica reports, the record's level for a library's log record).

Library loggers (asyncpg, asyncio, trio-asyncio, hypercorn) would print their own records, with
tracebacks and driver messages, through logging's last-resort handler on stderr.
``route_library_logs`` turns each of their records into a ``library_log`` diagnostic naming
the logger, the level and the exception class, and drops the text.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Final, Literal

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
    }
)
"""Codes for a step that failed; every other code a replica emits is a warning."""

LIBRARY_LOGGERS: Final = ("asyncpg", "asyncio", "trio_asyncio", "hypercorn")
LIBRARY_LOG: Final = "library_log"


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
    """For ``library_log``: one of ``LIBRARY_LOGGERS`` (or a child logger of one)."""
    level: Level | None = None
    """Set for library records; otherwise the sink derives it from the code."""


def level_of(diagnostic: Diagnostic) -> Level:
    if diagnostic.level is not None:
        return diagnostic.level
    return "error" if diagnostic.code in ERROR_CODES else "warning"


def _utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def sqlstate_of(exc: BaseException) -> str | None:
    state = getattr(exc, "sqlstate", None)
    if isinstance(state, str) and len(state) == 5 and state.isalnum():
        return state
    return None


def from_exception(code: str, exc: BaseException, **fields: object) -> Diagnostic:
    """A diagnostic for an exception: class name and SQLSTATE only, never ``str(exc)``."""
    return Diagnostic(
        code=code,
        exception=type(exc).__name__,
        sqlstate=sqlstate_of(exc),
        **fields,  # type: ignore[arg-type]
    )


class DiagnosticSink:
    """Writes one JSON line per diagnostic to a text stream (stderr by default)."""

    def __init__(self, stream: IO[str] | None = None, *, replica: str = "") -> None:
        self._stream = stream
        self._replica = replica
        self._lock = threading.Lock()
        self._encoder = msgspec.json.Encoder()
        self.emitted = 0

    def emit(self, diagnostic: Diagnostic) -> None:
        if self._replica and not diagnostic.replica:
            diagnostic = msgspec.structs.replace(diagnostic, replica=self._replica)
        # `code` is required, so the encoding always opens with `{"code":`: the stamp goes
        # in front of it, and the Struct stays the one definition of what a line may hold.
        level = level_of(diagnostic)
        if diagnostic.level is not None:
            diagnostic = msgspec.structs.replace(diagnostic, level=None)  # said once, in front
        body = self._encoder.encode(diagnostic).decode()
        line = f'{{"ts":"{_utc_now()}","level":"{level}",{body[1:]}\n'
        stream = self._stream if self._stream is not None else sys.stderr
        with self._lock:
            stream.write(line)
            stream.flush()
            self.emitted += 1


class MemorySink(DiagnosticSink):
    """Keeps diagnostics in a list (tests, and the demo's live view)."""

    def __init__(self, *, replica: str = "") -> None:
        super().__init__(replica=replica)
        self.items: list[Diagnostic] = []

    def emit(self, diagnostic: Diagnostic) -> None:
        if self._replica and not diagnostic.replica:
            diagnostic = msgspec.structs.replace(diagnostic, replica=self._replica)
        self.items.append(diagnostic)
        self.emitted += 1


_LEVELS: Final[dict[int, Level]] = {
    logging.CRITICAL: "error",
    logging.ERROR: "error",
    logging.WARNING: "warning",
}


class _LibraryHandler(logging.Handler):
    """A library's log record as a diagnostic: logger name, level, exception class; no text."""

    def __init__(self, sink: DiagnosticSink) -> None:
        super().__init__(level=logging.WARNING)
        self._sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        self._sink.emit(
            Diagnostic(
                code=LIBRARY_LOG,
                logger=record.name,
                level=_LEVELS.get(record.levelno, "info"),
                exception=type(exc).__name__ if exc is not None else None,
                sqlstate=sqlstate_of(exc) if exc is not None else None,
            )
        )


@contextmanager
def route_library_logs(sink: DiagnosticSink) -> Iterator[None]:
    """Within the block, records of ``LIBRARY_LOGGERS`` (warning and above) go to ``sink``
    as ``library_log`` codes and nowhere else; on exit the loggers are as they were."""
    handler = _LibraryHandler(sink)
    saved: list[tuple[logging.Logger, bool]] = []
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.propagate))
        logger.addHandler(handler)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, propagate in saved:
            logger.removeHandler(handler)
            logger.propagate = propagate
