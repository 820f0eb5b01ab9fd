"""One ``edge run`` per file: an OS lock on a sidecar file, not a lease in the rows.

``flock`` on ``<db>.run-lock`` is held for the life of the process and released by the
kernel when the process dies, however it dies (a SIGKILL never leaves the file locked, and
no stale lock needs breaking by hand). The holder writes its pid into the sidecar so the
refusal can name it. ``edge publish`` and ``edge status`` never take this lock: SQLite's own
write lock serialises a publish with the running scheduler's rounds.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

from qlsched.sqlite.errors import EdgeError, EdgeLocked

LOCK_SUFFIX = ".run-lock"


def lock_path(db_path: str) -> str:
    return db_path + LOCK_SUFFIX


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


@contextmanager
def hold_run_lock(db_path: str) -> Iterator[None]:
    """Hold the file's run lock, or refuse at once (never wait).

    Raises:
        EdgeLocked: another process holds it; the message names its pid.
        EdgeError: the lock file cannot be created (the directory is missing or read-only).
    """
    path = lock_path(db_path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise EdgeError(f"{path}: cannot open the run lock ({exc.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EdgeLocked(
                f"{db_path}: another `qlsched edge run` (pid {_holder(fd)}) holds this file;"
                " one scheduler per file"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
