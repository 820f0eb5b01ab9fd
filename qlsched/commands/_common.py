"""What the commands share: one-line errors, exit codes, the embedded database.

Expected failures print ``qlsched COMMAND: message`` on stderr and return an exit code
(1 failed or not ready, 2 bad input or configuration); a traceback means a bug.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import trio

from qlsched.core.config import ConfigError
from qlsched.core.specs import SpecError
from qlsched.embedded import EmbeddedError, EmbeddedPostgres, open_embedded
from qlsched.postgres.dsn import DsnError
from qlsched.postgres.errors import DatabaseUnavailable, SchemaNotReady, describe_server_error
from qlsched.postgres.migrate import MigrationError

BAD_INPUT = (ConfigError, SpecError, DsnError)
FAILED = (DatabaseUnavailable, SchemaNotReady, MigrationError, EmbeddedError)


def fail(command: str, message: str, code: int = 1) -> int:
    print(f"qlsched {command}: {message}", file=sys.stderr)
    return code


def run_command(command: str, fn: Callable[[], Awaitable[int]]) -> int:
    """Run an async command body under Trio and map expected errors to exit codes."""
    try:
        return trio.run(fn)
    except BAD_INPUT as exc:
        return fail(command, str(exc), 2)
    except FAILED as exc:
        return fail(command, str(exc), 1)
    except asyncpg.PostgresError as exc:
        return fail(command, describe_server_error(exc), 1)


def default_data_dir() -> Path:
    """Where ``run``/``status`` keep the embedded database when no DSN is given.

    As root the server runs as an unprivileged user who cannot enter ``/root``, so the data
    lives under ``/var/lib``; otherwise under the user's XDG data directory.
    """
    if os.geteuid() == 0:
        return Path("/var/lib/qlsched/pgdata")
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "qlsched" / "pgdata"


@contextmanager
def embedded_database(
    data_dir: str | None, bindir: str | None, *, ephemeral: bool = False
) -> Iterator[EmbeddedPostgres]:
    """A running embedded server (persistent unless ``ephemeral``), stopped on exit."""
    target: Path | None = None
    if not ephemeral:
        target = Path(data_dir) if data_dir else default_data_dir()
        target.parent.mkdir(parents=True, exist_ok=True)
    with open_embedded(target, bindir=bindir) as server:
        yield server
