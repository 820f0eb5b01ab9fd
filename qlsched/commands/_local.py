"""The local database behind every command run without a DSN (``qlsched.embedded.local``).

The first such command starts the server and initialises the database ``qlsched`` (roles,
schema: what ``init-db`` does), holding the start lock so that no other command attaches
to it half-made; later commands attach. The server keeps running until ``local stop``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from qlsched.embedded.local import (
    DATA_DIR_ENV,
    LocalServer,
    attach_or_start,
    default_data_dir,
    start_lock,
)
from qlsched.interrupts import raising_sigint
from qlsched.postgres.initdb import LOGIN_ROLES, init_db

DATABASE = "qlsched"
SUPERUSER = "postgres"
ROLES: dict[str, str] = {
    "superuser": SUPERUSER,
    **{role.removeprefix("qlsched_"): role for role in LOGIN_ROLES},
}
"""What ``local dsn ROLE`` accepts: the short names, each for its ``qlsched_*`` role."""


def local_data_dir(given: str | None) -> Path:
    """``given`` (``--data-dir``), else ``$QLSCHED_DATA_DIR``, else the default."""
    chosen = given or os.environ.get(DATA_DIR_ENV)
    return Path(chosen).expanduser().absolute() if chosen else default_data_dir()


def initialised_marker(data_dir: Path) -> Path:
    """The file beside the data directory that says its database ``qlsched`` was made
    whole (init-db finished) on the server running there."""
    return data_dir.parent / f".{data_dir.name}.initialised"


async def open_local(command: str, data_dir: Path, bindir: str | None) -> LocalServer:
    """The running local server, started and initialised on first use.

    The start runs on the Trio thread itself, not in a worker thread: a Ctrl-C (or SIGTERM,
    ``qlsched.entry``) then interrupts initdb or the server's start at once, and the start
    unwinds (the half-made data directory removed, the server stopped) with the lock
    released. An initialisation cut after the server started leaves no marker, so the next
    command finishes it (init-db is idempotent) instead of failing on a half-made database.
    """
    # A blocking lock on the Trio thread: a command has nothing else to do meanwhile. The
    # lock's wait and the start have no checkpoint, so a Ctrl-C there raises at once;
    # init-db awaits, so there it cancels (qlsched.interrupts).
    with contextlib.ExitStack() as held:
        with raising_sigint():
            held.enter_context(start_lock(data_dir))
            server = attach_or_start(data_dir, bindir)
        marker = initialised_marker(data_dir)
        if server.started or not marker.exists():
            marker.unlink(missing_ok=True)
            await init_db(server.dsn(), database=DATABASE, want_passwords=False)
            marker.touch(mode=0o600)
        if server.started:
            print(
                f"qlsched {command}: started the local database in {data_dir}; "
                "it keeps running until `qlsched local stop`",
                file=sys.stderr,
                flush=True,
            )
    return server


async def local_dsn(command: str, data_dir: str | None, bindir: str | None, role: str) -> str:
    """A DSN for ``role`` (a ``qlsched_*`` role or ``postgres``) on the local database."""
    server = await open_local(command, local_data_dir(data_dir), bindir)
    return server.dsn(DATABASE, role)
