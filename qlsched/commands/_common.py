"""What the commands share: one-line errors and exit codes.

Expected failures print ``qlsched COMMAND: message`` on stderr and return an exit code
(1 failed or not ready, 2 bad input or configuration); a traceback means a bug.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable

import asyncpg
import trio

from qlsched.core.config import ConfigError
from qlsched.core.control import ControlError
from qlsched.core.specs import SpecError
from qlsched.core.tomlfile import printable
from qlsched.embedded import EmbeddedError
from qlsched.postgres.dsn import DsnError
from qlsched.postgres.errors import DatabaseUnavailable, SchemaNotReady, describe_server_error
from qlsched.postgres.migrate import MigrationError
from qlsched.signals import interruptible

BAD_INPUT = (ConfigError, SpecError, DsnError, ControlError)
FAILED = (DatabaseUnavailable, SchemaNotReady, MigrationError, EmbeddedError)


def fail(command: str, message: str, code: int = 1) -> int:
    # One line whatever a message quotes: its control characters escaped (core/shown.py).
    print(f"qlsched {command}: {printable(message)}", file=sys.stderr)
    return code


def run_command(command: str, fn: Callable[[], Awaitable[int]]) -> int:
    """Run an async command body under Trio (``interruptible``) and map expected errors to
    exit codes."""
    try:
        return trio.run(interruptible, fn)
    except BAD_INPUT as exc:
        return fail(command, str(exc), 2)
    except FAILED as exc:
        return fail(command, str(exc), 1)
    except asyncpg.PostgresError as exc:
        return fail(command, describe_server_error(exc), 1)
