"""The data directory and the private directories beside it: checked, created, owned by
the server's OS user, and written by root without following a planted link."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from qlsched.embedded.errors import EmbeddedError
from qlsched.embedded.server_user import ServerUser, blocked_at

TEMP_PREFIX = "qlsched-pg-"
SOCKET_PREFIX = "qlsched-pg-sock-"
PG_HBA = """\
# Written by qlsched.embedded. The Unix socket lives in a private directory (0700, owned by
# the server's OS user), so trust there reaches only that user and root. Loopback TCP, when
# enabled, needs a password. The server listens on nothing else.
# TYPE  DATABASE     USER  ADDRESS        METHOD
local   all          all                  trust
local   replication  all                  trust
host    all          all   127.0.0.1/32   scram-sha-256
host    replication  all   127.0.0.1/32   scram-sha-256
"""


def open_in_server_dir(path: Path, flags: int, mode: int = 0o600) -> int:
    """Open, as root, a file in a directory the server's user owns and could have planted a
    symlink or hard link in: follow neither."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        raise EmbeddedError(f"cannot open {path}: {exc.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise EmbeddedError(f"{path} is not a plain file; remove it")
    return fd


def make_dirs(path: Path) -> None:
    """Create the missing directories of ``path`` as 0755; existing ones are left as they are."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir()
            # Ours alone, so we may set its mode; umask could otherwise hide it from the server.
            directory.chmod(0o755)


def temp_base(user: ServerUser | None) -> Path:
    # Socket paths are limited to 107 bytes: base + /qlsched-pg-sock-XXXXXXXX/.s.PGSQL.NNNNN
    for base in (Path(tempfile.gettempdir()), Path("/tmp")):
        if len(str(base)) > 60 or not base.is_dir():
            continue
        if user is None or blocked_at(base, user, 0o1) is None:
            return base
    raise EmbeddedError(
        f"no temporary directory usable by {user.name if user else 'the server'}: "
        "set TMPDIR to a short, world-searchable directory"
    )


def private_dir(prefix: str, base: Path, user: ServerUser | None) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    if user is not None:
        os.chown(path, user.uid, user.gid)
    return path


def prepare_data_dir(data_dir: Path, user: ServerUser | None, major: int) -> bool:
    """Check or create a persistent data directory; True when it still needs ``initdb``."""
    if user is not None:
        existing = next(p for p in (data_dir, *data_dir.parents) if p.exists())
        if existing == data_dir:
            existing = data_dir.parent
        blocked = blocked_at(existing, user, 0o1)
        if blocked is not None:
            raise EmbeddedError(
                f"the data directory {data_dir} is not reachable by OS user {user.name}: "
                f"{blocked} is not searchable by it; choose a directory outside private homes"
            )
    if not data_dir.exists():
        make_dirs(data_dir.parent)
        data_dir.mkdir(mode=0o700)
    if not data_dir.is_dir():
        raise EmbeddedError(f"the data directory {data_dir} is not a directory")
    if not any(data_dir.iterdir()):
        if user is not None:
            os.chown(data_dir, user.uid, user.gid)
        data_dir.chmod(0o700)
        return True
    version_file = data_dir / "PG_VERSION"
    if version_file.is_symlink() or not version_file.is_file():
        raise EmbeddedError(
            f"the data directory {data_dir} is not empty and is not a PostgreSQL data directory"
        )
    if not (data_dir / "global" / "pg_control").is_file():
        raise EmbeddedError(
            f"the data directory {data_dir} is incomplete (an interrupted initdb?); remove it"
        )
    found = version_file.read_text()[:8].strip()
    if found != str(major):
        raise EmbeddedError(
            f"the data directory {data_dir} is for PostgreSQL {found} but the binaries are "
            f"PostgreSQL {major}; pass --pg-bindir for a {found} install or use another directory"
        )
    owner = data_dir.stat().st_uid
    if user is not None and owner != user.uid:
        raise EmbeddedError(
            f"the data directory {data_dir} belongs to uid {owner}, not to {user.name}; "
            f"chown -R {user.name}: it or use another directory"
        )
    return False
