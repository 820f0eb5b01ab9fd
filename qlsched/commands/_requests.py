"""What ``qlsched trigger`` and ``qlsched backfill`` share: the target, the DSN, the answer.

Both record a request with the admin role (the local database's when no DSN is given, as
``publish`` does), print one line and exit 0; a request refused at once prints the reason
on stderr and exits 1 (the trigger's state refuses it) or 2 (the request must change).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from qlsched.admin.requests import RequestInputError
from qlsched.commands._common import fail, run_command
from qlsched.commands._local import local_dsn
from qlsched.settings import load_config
from qlsched.core.requests import NotRecorded, RecordResult


def target(text: str) -> tuple[str, str]:
    """``PROJECT/TRIGGER`` as its two ids."""
    project, sep, trigger = text.partition("/")
    if not sep or not project or not trigger:
        raise RequestInputError(f"{text!r}: name the trigger as PROJECT/TRIGGER")
    return project, trigger


def iso_ms(flag: str, text: str) -> int:
    """An ISO 8601 date or date-time as epoch ms; without an offset it is UTC."""
    try:
        instant = datetime.fromisoformat(text)
    except ValueError:
        raise RequestInputError(f"{flag}: {text!r} is not an ISO 8601 date or date-time") from None
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return int(instant.timestamp() * 1000)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def record(
    command: str,
    args: argparse.Namespace,
    prepare: Callable[[], Callable[[str], Awaitable[RecordResult]]],
    describe: Callable[[RecordResult], str],
) -> int:
    """Check the arguments (``prepare``, before anything connects or starts), resolve the
    admin DSN, record, print; exit codes as the module says."""
    outcome: list[NotRecorded] = []

    async def body() -> int:
        call = prepare()
        config = load_config(
            file=args.config or os.environ.get("QLSCHED_CONFIG"), flags={"dsn": args.dsn}
        )
        dsn = config.dsn or await local_dsn(command, args.data_dir, args.pg_bindir, "qlsched_admin")
        result = await call(dsn)
        if isinstance(result, NotRecorded):
            outcome.append(result)
            return 2 if result.bad_input else 1
        print(describe(result))
        return 0

    code = run_command(command, body)
    if outcome:
        return fail(command, outcome[0].message(), code)
    return code
