"""The diagnostic sinks that write: JSON lines on a stream, and library log records routed
into them.

Each line starts with ``ts`` (UTC, ISO 8601, this process's clock: when the line was
written, not a database time) and ``level`` (``core.diagnostics.level_of``), then the
Diagnostic's fixed fields. Outside the core because it writes, reads the wall clock and
locks; profile-neutral, so the cluster and the Edge commands share it.

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
from typing import IO, Final

import msgspec

from qlsched.core.diagnostics import Diagnostic, DiagnosticSink, Level, level_of, sqlstate_of

LIBRARY_LOGGERS: Final = ("asyncpg", "asyncio", "trio_asyncio", "hypercorn")
LIBRARY_LOG: Final = "library_log"


def _utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class StreamSink:
    """Writes one JSON line per diagnostic to a text stream (stderr by default).

    A lock keeps lines whole: a logging handler emits in whichever thread logged."""

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
