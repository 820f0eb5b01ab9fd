"""One SQLite connection and the thread it runs on: the Edge adapter's only way to the file.

sqlite3 blocks, so every call runs in a worker thread (``trio.to_thread.run_sync``) under a
capacity limiter of one: calls on a connection never overlap and the Trio thread never waits
on disk. A call is never abandoned on cancellation: SQLite finishes or rolls back the
transaction it is in, so nothing is left half-done (a round is short and bounded).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import unquote, urlsplit

import trio

from qlsched.sqlite.errors import EdgeError, classify
from qlsched.sqlite.migrate import check_schema
from qlsched.sqlite.queries import query

T = TypeVar("T")


def wall_clock_ms() -> int:
    """The Edge profile's clock: this machine's, since the file and the process share it."""
    return time.time_ns() // 1_000_000


def file_path(db: str) -> str:
    """The file system path of ``db`` (a path, or a ``file:`` URI such as ``?mode=ro``)."""
    if db.startswith("file:"):
        return unquote(urlsplit(db).path)
    return db


def _uri(db: str, *, create: bool) -> str:
    if db.startswith("file:"):
        return db
    return Path(db).absolute().as_uri() + ("?mode=rwc" if create else "?mode=rw")


def require_file(path: str) -> None:
    """Raise ``EdgeError`` unless ``path`` exists (commands other than publish never create
    the file: a mistyped path must not become a new, empty scheduler)."""
    if not os.path.exists(path):
        raise EdgeError(
            f"{path}: no Edge database here (create it with `qlsched edge publish FILE --db"
            f" {path}`)"
        )


FILE_MODE = 0o600
"""A new Edge file's mode: task commands (tokens in them) are for its owner alone. SQLite
gives the ``-wal`` and ``-shm`` files the database file's mode."""
DIR_MODE = 0o700
"""The mode of a directory ``edge publish`` creates for the file."""


def create_private(path: str) -> None:
    """Create the file at ``path`` (mode 0600) and its directory (0700) unless they exist,
    before SQLite does with the umask's modes (0644 and 0755 on most systems). An existing
    file or directory keeps its mode: an operator may have chosen it."""
    parent = Path(path).parent
    try:
        if not parent.is_dir():
            parent.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                parent.mkdir(mode=DIR_MODE)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, flags, FILE_MODE))
    except OSError as exc:
        raise EdgeError(f"{path}: cannot create the Edge file ({exc.strerror})") from None


def connect(db: str, *, create: bool = False, query_only: bool = False) -> sqlite3.Connection:
    """Open ``db`` with ``synchronous=FULL`` and foreign keys on (WAL comes once the file is
    known to be an Edge file: ``open_checked``; a foreign file is never modified).

    Raises:
        EdgeError: the file is missing (and not ``create``), or SQLite refused to open it.
    """
    path = file_path(db)
    if not create:
        require_file(path)
    else:
        create_private(path)
    try:
        conn = sqlite3.connect(
            _uri(db, create=create), uri=True, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise classify(exc, path) from None
    try:
        conn.execute(query("pragma_busy_timeout"))
        conn.execute(query("pragma_foreign_keys"))
        conn.execute(query("pragma_synchronous_full"))
        if query_only:
            conn.execute(query("pragma_query_only"))
    except sqlite3.Error as exc:
        conn.close()
        raise classify(exc, path) from None
    return conn


def rollback(conn: sqlite3.Connection) -> None:
    """Roll back an open transaction; a failure here (the disk went away) leaves it to
    SQLite, which rolls back an uncommitted transaction when the connection closes."""
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute(query("rollback"))


def open_checked(
    db: str,
    *,
    create: bool,
    apply: bool,
    query_only: bool = False,
    clock: Callable[[], int] = wall_clock_ms,
) -> EdgeDatabase:
    """Open ``db``, check its schema (creating or migrating it when ``apply``), then switch
    it to WAL. Blocking: commands call it in a worker thread.

    Raises:
        EdgeError: missing file, foreign or changed schema, or SQLite refused (classified).
    """
    path = file_path(db)
    conn = connect(db, create=create, query_only=query_only)
    try:
        check_schema(conn, path, apply=apply, now_ms=clock())
        if not query_only:
            conn.execute(query("pragma_wal")).fetchall()
            conn.execute(query("begin_immediate"))
            try:
                conn.execute(query("write_probe"))
            finally:
                rollback(conn)
    except sqlite3.Error as exc:
        conn.close()
        raise classify(exc, path) from None
    except BaseException:
        conn.close()
        raise
    return EdgeDatabase(conn, path, clock)


class EdgeDatabase:
    """A connection with its limiter. Ownership: the opener closes it (``close``)."""

    def __init__(
        self, conn: sqlite3.Connection, path: str, clock: Callable[[], int] = wall_clock_ms
    ) -> None:
        self.conn = conn
        self.path = path
        self.clock = clock
        self._limiter = trio.CapacityLimiter(1)

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in a worker thread, one call at a time; sqlite3 errors come back
        classified (``EdgeDatabaseError``)."""

        def run() -> T:
            try:
                return fn(self.conn)
            except sqlite3.Error as exc:
                rollback(self.conn)
                raise classify(exc, self.path) from None

        return await trio.to_thread.run_sync(run, limiter=self._limiter)

    def close(self) -> None:
        self.conn.close()
