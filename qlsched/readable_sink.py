"""Diagnostics as a person at a terminal reads them: one short line each, repeats folded.

``StreamSink``'s JSON lines are for a log collector; on a terminal they bury the one-line
errors and the summary, and an outage (the local database stopped under a running replica)
repeats the same failure every round. When diagnostics would go to a terminal (stderr is a
tty and no ``diagnostics`` file was configured), ``diagnostics_sink`` gives this sink
instead: ``qlsched run: 12:00:03 error round_failed (ConnectionRefusedError)``, and the same
code, exception and SQLSTATE again within ``FOLD_S`` are counted, not printed, then told in
one line (``… 41 more like it in the last 30 s``). The fields are the same fixed ones, so no
free text reaches the terminal. Profile-neutral, as ``sinks`` is.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Final

from qlsched.core.diagnostics import Diagnostic, DiagnosticSink, level_of
from qlsched.core.shown import shown
from qlsched.sinks import StreamSink

FOLD_S: Final = 30.0
"""A repeat of the last-shown kind of line within this many seconds is counted, not shown."""


def _fields(d: Diagnostic) -> str:
    parts = []
    if d.project_id is not None:
        parts.append(f"{d.project_id}/{d.trigger_id or ''}".rstrip("/"))
    for name, value in (
        ("part", d.part),
        ("logger", d.logger),
        ("count", d.count),
        ("ms", None if d.duration_ms is None else f"{d.duration_ms:.0f}"),
    ):
        if value is not None:
            parts.append(f"{name}={value}")
    cause = ", ".join(x for x in (d.exception, d.sqlstate and f"SQLSTATE {d.sqlstate}") if x)
    if cause:
        parts.append(f"({cause})")
    return shown(" ".join(parts)) if parts else ""


class ReadableSink:
    """One line per diagnostic, ``PREFIX HH:MM:SS LEVEL CODE fields``; repeats folded."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        *,
        prefix: str = "qlsched run:",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._prefix = prefix
        self._clock = clock
        self._lock = threading.Lock()
        self._key: tuple[object, ...] | None = None
        self._since = 0.0
        self._folded = 0
        self.emitted = 0

    def _write(self, line: str) -> None:
        stream = self._stream if self._stream is not None else sys.stderr
        stream.write(f"{self._prefix} {line}\n")
        stream.flush()

    def _flush_folded(self, now: float) -> None:
        if self._folded:
            self._write(
                f"{time.strftime('%H:%M:%S')} … {self._folded} more like it in the last"
                f" {now - self._since:.0f} s"
            )
            self._folded = 0

    def emit(self, diagnostic: Diagnostic) -> None:
        key = (diagnostic.code, diagnostic.exception, diagnostic.sqlstate, diagnostic.logger)
        with self._lock:
            now = self._clock()
            if key == self._key and now - self._since < FOLD_S:
                self._folded += 1
                return
            self._flush_folded(now)
            self._key, self._since = key, now
            level = level_of(diagnostic)
            text = f"{time.strftime('%H:%M:%S')} {level} {diagnostic.code} {_fields(diagnostic)}"
            self._write(text.rstrip())
            self.emitted += 1

    def close(self) -> None:
        """Tell what is still folded (at exit)."""
        with self._lock:
            self._flush_folded(self._clock())


def diagnostics_sink(
    stream: IO[str] | None, *, replica: str, prefix: str
) -> StreamSink | ReadableSink:
    """JSON lines to ``stream`` (a configured diagnostics file) or to a stderr that is not
    a terminal; readable lines when they would reach a person's terminal."""
    if stream is None and sys.stderr.isatty():
        return ReadableSink(prefix=prefix)
    return StreamSink(stream, replica=replica)


__all__ = ["FOLD_S", "DiagnosticSink", "ReadableSink", "diagnostics_sink"]
