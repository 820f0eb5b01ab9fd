"""The superuser's TCP password: generated per server, set through psql's stdin.

Loopback TCP needs a password even for an ephemeral server, since any local user can reach
127.0.0.1; the Unix socket (a private directory) needs none.
"""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

from qlsched.embedded.binaries import clean_env, log_tail
from qlsched.embedded.errors import EmbeddedError

SUPERUSER = "postgres"


def generate_password() -> str:
    """A fresh superuser password for one server."""
    return secrets.token_urlsafe(24)


def set_superuser_password(bindir: Path, dsn: str, password: str) -> None:
    """``ALTER ROLE postgres PASSWORD ...`` over ``dsn`` (the trusted Unix socket)."""
    literal = "'" + password.replace("'", "''") + "'"
    # Through stdin, never the command line, which other users can read in /proc.
    result = subprocess.run(
        [str(bindir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn],
        input=f"ALTER ROLE {SUPERUSER} PASSWORD {literal};\n",
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise EmbeddedError(
            f"could not set the superuser password (psql exit {result.returncode}): "
            + log_tail(result.stderr)
        )
