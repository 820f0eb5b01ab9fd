"""One ``edge run`` per file: an OS lock on the database file itself, not a lease in the rows.

``flock`` is taken on the SQLite file's own inode, so the lock names the file, not the path
typed: a symlink, a second hard link, a bind mount or a relative path all reach the same
lock. It is held for the life of the process and released by the kernel when the process
dies, however it dies (a SIGKILL never leaves the file locked, and no stale lock needs
breaking by hand). On Linux ``flock`` and the POSIX byte-range locks SQLite takes on the same
file are independent, so the lock never blocks SQLite's own locking (``edge publish`` and
``edge status`` never take it: SQLite's write lock serialises a publish with the running
scheduler's rounds). The holder's pid is read back from ``/proc/locks`` by the file's
device and inode, so every name of the file reports the same holder.

The descriptor is closed only after the scheduler's SQLite connections are (``edge run``
opens them inside the lock's block): closing any descriptor of a file drops the POSIX locks
the process holds on it, which would pull SQLite's locks from under an open connection.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

from qlsched.sqlite.errors import EdgeError, EdgeLocked

PROC_LOCKS = "/proc/locks"


def _identity(st: os.stat_result) -> tuple[int, int, int]:
    return os.major(st.st_dev), os.minor(st.st_dev), st.st_ino


def holder_pid(db_path: str, *, proc_locks: str = PROC_LOCKS) -> int | None:
    """The pid holding the run lock of the file ``db_path`` names, or None.

    Reads the kernel's table of locks (``/proc/locks``: ``FLOCK ADVISORY WRITE <pid>
    <major>:<minor>:<inode>``, major and minor in hex) for an exclusive ``flock`` on the
    file's device and inode; None when the file or the table cannot be read, or nobody
    holds it (a dead holder's lock is gone with it)."""
    try:
        wanted = _identity(os.stat(db_path))
        with open(proc_locks, encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or "->" in fields or fields[1:4] != ["FLOCK", "ADVISORY", "WRITE"]:
            continue
        try:
            major, minor, inode = fields[5].split(":")
            seen = (int(major, 16), int(minor, 16), int(inode))
            pid = int(fields[4])
        except ValueError:
            continue
        if seen == wanted and pid > 0:
            return pid
    return None


@contextmanager
def hold_run_lock(db_path: str) -> Iterator[None]:
    """Hold the file's run lock, or refuse at once (never wait).

    Raises:
        EdgeLocked: another process holds it; the message names its pid.
        EdgeError: the file cannot be opened.
    """
    try:
        fd = os.open(db_path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise EdgeError(f"{db_path}: cannot open the file to lock it ({exc.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = holder_pid(db_path)
            raise EdgeLocked(
                f"{db_path}: another `qlsched edge run` (pid {pid or 'unknown'}) holds this"
                " file; one scheduler per file"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
