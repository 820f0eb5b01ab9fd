"""The local server: one persistent embedded PostgreSQL that every command without a DSN shares.

It lives in one data directory (``default_data_dir()``, or ``--data-dir`` /
``QLSCHED_DATA_DIR``). The first command that needs it starts it, detached (it outlives
that command, with its socket in the data directory); every later command attaches to it
through what ``postmaster.pid`` records (pid, port, socket directory), once the pid is
checked in ``/proc`` and the socket answers.

Who stops it: nobody but ``qlsched local stop`` (``stop_local``). A server started on first
use keeps running when the command that started it ends, so no command can pull the
database from under another terminal's ``run``.

Starts are serialised by a lock file beside the data directory: two commands started at
once never both run ``initdb`` or launch a postmaster; the second attaches.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from qlsched.embedded.data_dir import make_dirs
from qlsched.embedded.errors import EmbeddedError
from qlsched.embedded.guardian import start_ticks, terminate
from qlsched.embedded.openers import start_embedded
from qlsched.embedded.password import SUPERUSER
from qlsched.embedded.pids import OWNER_FILE, STOP_TIMEOUT_S, Postmaster, find_postmaster
from qlsched.embedded.postmaster import socket_dsn

DATA_DIR_ENV = "QLSCHED_DATA_DIR"


def default_data_dir() -> Path:
    """Where the local server keeps its data when no directory is given.

    As root the server runs as an unprivileged user who cannot enter ``/root``, so the data
    lives under ``/var/lib``; otherwise under the user's XDG data directory.
    """
    if os.geteuid() == 0:
        return Path("/var/lib/qlsched/pgdata")
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "qlsched" / "pgdata"


class LocalServer(NamedTuple):
    """A running local server, as a client reaches it."""

    data_dir: Path
    pid: int
    socket_dir: Path
    port: int
    started: bool
    """This call started it (then it is fresh: the caller initialises the database)."""

    def dsn(self, database: str = "postgres", user: str = SUPERUSER) -> str:
        """A URI over the server's socket (trust: the socket's directory is private)."""
        return socket_dsn(self.socket_dir, self.port, database, user)


def _answers(running: Postmaster) -> bool:
    path = running.socket_dir / f".s.PGSQL.{running.port}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(5)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def find_local(data_dir: Path) -> LocalServer | None:
    """The server running on ``data_dir`` that a command can attach to, or None.

    Raises:
        EmbeddedError: a server runs there that qlsched did not start.
    """
    running = find_postmaster(data_dir)
    if running is None:
        return None
    if not running.by_qlsched:
        raise EmbeddedError(
            f"the data directory {data_dir} belongs to a running PostgreSQL server "
            f"(pid {running.pid}) that qlsched did not start; stop it first"
        )
    if running.status not in ("ready", "standby") or not _answers(running):
        return None
    return LocalServer(data_dir, running.pid, running.socket_dir, running.port, started=False)


@contextlib.contextmanager
def start_lock(data_dir: Path) -> Iterator[None]:
    """Hold the lock that serialises starts on ``data_dir`` (a file beside it)."""
    make_dirs(data_dir.parent)
    path = data_dir.parent / f".{data_dir.name}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def attach_or_start(data_dir: Path, bindir: str | None) -> LocalServer:
    """The local server on ``data_dir``: attached to when it runs, else started, detached.

    Call it under ``start_lock(data_dir)``, and keep the lock while initialising a server
    it started, so that no other command attaches to an uninitialised database.

    Raises:
        EmbeddedError: as ``start_embedded``; or a server qlsched did not start runs there.
    """
    found = find_local(data_dir)
    if found is not None:
        return found
    start_embedded(data_dir, bindir=bindir, detached=True)
    found = find_local(data_dir)
    if found is None:
        raise EmbeddedError(f"the local PostgreSQL in {data_dir} stopped right after starting")
    return found._replace(started=True)


def stop_local(data_dir: Path) -> int | None:
    """Stop the local server on ``data_dir`` (fast: sessions are ended) and wait until it is
    gone. Returns its pid, or None when none was running.

    Raises:
        EmbeddedError: the server there is not the local one (qlsched did not start it, or a
            live process started it for itself and will stop it).
    """
    with start_lock(data_dir):
        running = find_postmaster(data_dir)
        if running is None:
            return None
        if not running.by_qlsched:
            raise EmbeddedError(
                f"the PostgreSQL server on {data_dir} (pid {running.pid}) was not started by "
                "qlsched; stop it with pg_ctl"
            )
        if not running.detached and running.starter_alive():
            raise EmbeddedError(
                f"the PostgreSQL server on {data_dir} (pid {running.pid}) belongs to process "
                f"{running.owner_pid}, which stops it when it ends"
            )
        terminate(running.pid, start_ticks(running.pid), signal.SIGINT, STOP_TIMEOUT_S)
        (data_dir / OWNER_FILE).unlink(missing_ok=True)
        return running.pid
