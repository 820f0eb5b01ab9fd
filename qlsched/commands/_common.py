"""What the commands share: one-line errors and exit codes.

Expected failures print ``qlsched COMMAND: message`` on stderr and return an exit code
(1 failed or not ready, 2 bad input or configuration); a traceback means a bug.
"""

from __future__ import annotations

import signal
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

BAD_INPUT = (ConfigError, SpecError, DsnError, ControlError)
FAILED = (DatabaseUnavailable, SchemaNotReady, MigrationError, EmbeddedError)


def fail(command: str, message: str, code: int = 1) -> int:
    # One line whatever a message quotes: its control characters escaped (core/shown.py).
    print(f"qlsched {command}: {printable(message)}", file=sys.stderr)
    return code


async def interruptible(fn: Callable[[], Awaitable[int]]) -> int:
    """``fn``, with a SIGINT (or SIGTERM, made one by ``qlsched.entry``) cancelling it instead
    of raising KeyboardInterrupt wherever it lands (``qlsched.interrupts``); the
    KeyboardInterrupt comes after its work unwound. Later signals are received and ignored:
    the unwinding is already under way. A body that finished first keeps its exit code.
    A command that watches its own signals (``run``, ``work``, ``ui``) opens its receiver
    inside this one and gets them first."""
    done: list[int] = []
    failed: list[BaseException] = []
    interrupted = False
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                nonlocal interrupted
                async for _ in signals:
                    if not interrupted:
                        interrupted = True
                        nursery.cancel_scope.cancel()

            async def body() -> None:
                try:
                    done.append(await fn())
                except trio.Cancelled:
                    raise
                except BaseException as exc:  # raised below as it came, not in a group
                    failed.append(exc)
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            nursery.start_soon(body)
    if failed:
        raise failed[0]
    if done:
        return done[0]
    raise KeyboardInterrupt


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
