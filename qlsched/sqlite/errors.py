"""The Edge adapter's typed errors, and the one place sqlite3 exceptions are classified.

A message is one line that names the file and the cause; it never echoes SQLite's own
message (which can carry SQL or data). ``fatal`` says whether retrying next round is pointless
(a full disk, a read-only or corrupt file): ``edge run`` then stops with exit 1.
"""

from __future__ import annotations

import sqlite3


class EdgeError(RuntimeError):
    """An expected failure of the Edge profile: one line, shown to the user as it is."""


class EdgeDatabaseError(EdgeError):
    """SQLite refused an operation; ``code`` is its result code name (``SQLITE_FULL``)."""

    def __init__(self, message: str, code: str, *, fatal: bool) -> None:
        super().__init__(message)
        self.code = code
        self.fatal = fatal


class EdgeSchemaError(EdgeError):
    """The file is not an Edge database this version can use (foreign, changed, newer)."""


class EdgeLocked(EdgeError):
    """Another ``edge run`` process holds the file."""


_CAUSES: tuple[tuple[str, str, bool], ...] = (
    ("SQLITE_FULL", "the database cannot grow: the disk is full or a size limit is reached", True),
    ("SQLITE_READONLY", "the database is read-only (file, directory or file system)", True),
    ("SQLITE_NOTADB", "not a SQLite database (corrupt or another kind of file)", True),
    ("SQLITE_CORRUPT", "the database file is corrupt", True),
    ("SQLITE_CANTOPEN", "cannot open the database file (missing directory or no access)", True),
    ("SQLITE_IOERR", "an I/O error on the database file", True),
    ("SQLITE_PERM", "no permission to open the database file", True),
    ("SQLITE_BUSY", "the database stayed locked by another process past the busy timeout", False),
    ("SQLITE_LOCKED", "the database stayed locked past the busy timeout", False),
)


def error_code(exc: sqlite3.Error) -> str:
    name = getattr(exc, "sqlite_errorname", None)
    return name if isinstance(name, str) else "SQLITE_ERROR"


def classify(exc: sqlite3.Error, path: str) -> EdgeDatabaseError:
    """The typed error for a sqlite3 exception on ``path``."""
    code = error_code(exc)
    for prefix, text, fatal in _CAUSES:
        if code == prefix or code.startswith(prefix + "_"):
            return EdgeDatabaseError(f"{path}: {text} ({code})", code, fatal=fatal)
    return EdgeDatabaseError(f"{path}: SQLite failed ({code})", code, fatal=False)
