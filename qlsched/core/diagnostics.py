"""The low-sensitivity diagnostic sink: msgspec Structs written as JSON lines.

What may be written is fixed by the Struct: a code, counts, a SQLSTATE, an exception's class
name, the replica, project and trigger ids, a duration. There is no free-text field, so a
DSN, password, payload, SQL parameter or driver message (which can echo row data) has no way
in. Exceptions enter only through ``from_exception``, which keeps the class name and the
SQLSTATE and drops the message.
"""

from __future__ import annotations

import sys
import threading
from typing import IO

import msgspec


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
        line = self._encoder.encode(diagnostic).decode() + "\n"
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
