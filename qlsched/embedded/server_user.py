"""The server's OS user: as root, PostgreSQL runs as the unprivileged ``qlsched-pg``.

Created with ``useradd --system`` if missing. ``blocked_at`` tells which component of a path
that user cannot pass, so an error can name it instead of chmodding anyone's directory.
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

from qlsched.embedded.errors import EmbeddedError

logger = logging.getLogger("qlsched.embedded")

SERVER_USER = "qlsched-pg"
"""The OS user the server runs as when qlsched runs as root."""


class ServerUser(NamedTuple):
    name: str
    uid: int
    gid: int
    gids: frozenset[int]


def server_user() -> ServerUser | None:
    """The user to run the server as, created if missing; None unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        entry = _create_server_user()
    gids = frozenset(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return ServerUser(entry.pw_name, entry.pw_uid, entry.pw_gid, gids)


def _create_server_user() -> pwd.struct_passwd:
    shell = "/usr/sbin/nologin" if os.path.exists("/usr/sbin/nologin") else "/bin/false"
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    cmd = [
        useradd,
        "--system",
        "--user-group",
        "--no-create-home",
        "--home-dir",
        "/nonexistent",
        "--shell",
        shell,
        "--comment",
        "qlsched embedded PostgreSQL",
        SERVER_USER,
    ]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        detail = result.stderr.strip().splitlines()[-1:] if result.returncode else []
    except OSError as exc:
        detail = [str(exc)]
    try:
        # Also when useradd failed: a concurrent start may have created the user first.
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise EmbeddedError(
            f"running as root needs the system user {SERVER_USER} and useradd could not "
            f"create it ({'; '.join(detail) or 'no reason given'}); create it yourself"
        ) from None
    logger.info("created system user %s (uid %d)", SERVER_USER, entry.pw_uid)
    return entry


def _permits(st: os.stat_result, user: ServerUser, bits: int) -> bool:
    if st.st_uid == user.uid:
        granted = st.st_mode >> 6
    elif st.st_gid in user.gids:
        granted = st.st_mode >> 3
    else:
        granted = st.st_mode
    return granted & bits == bits


def blocked_at(path: Path, user: ServerUser, bits: int) -> Path | None:
    """The first component of ``path`` that ``user`` may not pass (x) or use (``bits``).

    Both the path as written and its symlink-free form are checked: the kernel walks the
    first and then, through each symlink, the second.
    """
    for form in dict.fromkeys((path.absolute(), path.resolve())):
        for ancestor in reversed(form.parents):
            try:
                if not _permits(ancestor.stat(), user, 0o1):
                    return ancestor
            except OSError:
                return ancestor
        try:
            if not _permits(form.stat(), user, bits):
                return form
        except OSError:
            return form
    return None
