"""Servers by pid, checked through ``/proc``: a stale server a dead qlsched process left
on a data directory is stopped; anyone else's is refused."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
from pathlib import Path
from typing import NamedTuple

from qlsched.embedded.data_dir import SOCKET_PREFIX
from qlsched.embedded.errors import EmbeddedError
from qlsched.embedded.guardian import postmaster_state, read_pidfile, start_ticks, terminate

logger = logging.getLogger("qlsched.embedded")

OWNER_FILE = "qlsched.owner"
"""Who started the running postmaster: the starter's pid and start time, and the server's."""
STOP_TIMEOUT_S = 60.0
"""For smart and fast stops; then immediate, then SIGKILL."""


class Postmaster(NamedTuple):
    """A live postmaster on a data directory, from its ``postmaster.pid`` and our record."""

    pid: int
    port: int
    socket_dir: Path
    status: str
    """``postmaster.pid``'s last line: ``starting``, ``ready``, ``stopping``, ``standby``."""
    by_qlsched: bool
    """Our owner record names this postmaster: qlsched started it."""
    owner_pid: int
    owner_start: int
    detached: bool
    """Started to outlive its starter (the local server): it is its own owner."""

    def starter_alive(self) -> bool:
        return self.by_qlsched and start_ticks(self.owner_pid) == self.owner_start


def find_postmaster(data_dir: Path) -> Postmaster | None:
    """The postmaster running on ``data_dir`` (checked in ``/proc``), or None."""
    lines = read_pidfile(data_dir)
    if not lines:
        return None
    pid = int(lines[0]) if lines[0].strip().isdigit() else 0
    if postmaster_state(pid, data_dir) != "ours":
        return None
    try:
        owner = json.loads((data_dir / OWNER_FILE).read_text())
        owner_pid, owner_start = int(owner["owner_pid"]), int(owner["owner_start"])
        by_qlsched = int(owner["postmaster_pid"]) == pid
        detached = bool(owner.get("detached", False))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        owner_pid = owner_start = -1
        by_qlsched = detached = False
    field = dict(enumerate(line.strip() for line in lines))
    port = int(field[3]) if field.get(3, "").isdigit() else 0
    return Postmaster(
        pid=pid,
        port=port,
        socket_dir=Path(field.get(4, "")),
        status=field.get(7, ""),
        by_qlsched=by_qlsched,
        owner_pid=owner_pid,
        owner_start=owner_start,
        detached=detached,
    )


def clear_stale(data_dir: Path) -> None:
    """Stop a server a dead qlsched process left on ``data_dir``; refuse anyone else's."""
    running = find_postmaster(data_dir)
    if running is not None:
        pid = running.pid
        if not running.by_qlsched:
            raise EmbeddedError(
                f"the data directory {data_dir} belongs to a running PostgreSQL server "
                f"(pid {pid}) that qlsched did not start; stop it first (pg_ctl stop -D ...)"
            )
        if running.detached:
            raise EmbeddedError(
                f"the data directory {data_dir} is in use by the local PostgreSQL server "
                f"(pid {pid}); stop it first with qlsched local stop"
            )
        if running.starter_alive():
            owner_pid = running.owner_pid
            who = "this process" if owner_pid == os.getpid() else f"process {owner_pid}"
            raise EmbeddedError(
                f"the data directory {data_dir} is in use by a PostgreSQL server (pid {pid}) "
                f"started by {who}, which is still running"
            )
        logger.warning(
            "stopping stale PostgreSQL server pid %d on %s: the process that started it "
            "(pid %d) is gone",
            pid,
            data_dir,
            running.owner_pid,
        )
        terminate(pid, start_ticks(pid), signal.SIGINT, STOP_TIMEOUT_S)
        if running.socket_dir.name.startswith(SOCKET_PREFIX):
            with contextlib.suppress(OSError):
                running.socket_dir.rmdir()
    lines = read_pidfile(data_dir)
    pid = int(lines[0]) if lines and lines[0].strip().isdigit() else 0
    if lines is not None and postmaster_state(pid, data_dir) == "other":
        # Left by a server that died without cleanup (SIGKILL). PostgreSQL would refuse to
        # start if the recorded pid now belongs to another live process, so remove it. When
        # in doubt (an unreadable /proc entry) we leave it to PostgreSQL's own interlocks.
        logger.info(
            "removing stale %s (pid %d is not its server)", data_dir / "postmaster.pid", pid
        )
        (data_dir / "postmaster.pid").unlink(missing_ok=True)
