"""What ``qlsched trigger`` and ``qlsched backfill`` share: the arguments, the DSN, the answer.

Both record a request with the admin role (the local database's when no DSN is given, as
``publish`` and ``pause`` do), print one line and exit 0. Bad input (a malformed ``P/T``,
note or range, an unknown trigger) is one line on stderr and exit 2, checked before
anything connects where it can be; a request refused at once prints the reason and exits 1
(the trigger's state refuses it) or 2 (the request must change: too many occurrences, a
range past now).
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable

from qlsched.commands._common import fail, run_command
from qlsched.commands.control.common import admin_dsn
from qlsched.core.requests import NotRecorded, RecordResult


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
        result = await call(await admin_dsn(command, args))
        if isinstance(result, NotRecorded):
            outcome.append(result)
            return 2 if result.bad_input else 1
        print(describe(result))
        return 0

    code = run_command(command, body)
    if outcome:
        return fail(command, outcome[0].message(), code)
    return code
