"""``qlsched cancel RUN_ID [--note TEXT] [--actor TEXT]``: cancel one Run (admin DSN).

A queued Run is cancelled at once; a running one is stopped by its worker at the next
heartbeat (SIGTERM, then SIGKILL after the grace) and finished ``cancelled``. Recorded in
``qlsched.schedule_actions`` (kind ``cancel``). One line on stdout; a finished or unknown
Run changes nothing (exit 0 and 1).
"""

from __future__ import annotations

import argparse
from typing import assert_never

from qlsched.admin.runs import cancel, checked_run_id
from qlsched.commands._common import run_command
from qlsched.commands.control.common import admin_dsn
from qlsched.commands.options import add_database_options
from qlsched.core.work import (
    AlreadyFinished,
    CancelledQueued,
    CancelOutcome,
    CancelRequested,
    UnknownRun,
)


def outcome_line(outcome: CancelOutcome) -> tuple[str, int]:
    match outcome:
        case CancelledQueued(run_id=run_id):
            return f"cancelled run {run_id} (it was queued)", 0
        case CancelRequested(run_id=run_id):
            return f"asked the worker of run {run_id} to stop it (cancel at its next heartbeat)", 0
        case AlreadyFinished(run_id=run_id, state=state):
            return f"run {run_id} is {state}: nothing changed", 0
        case UnknownRun(run_id=run_id):
            return f"no run {run_id}", 1
        case _:
            assert_never(outcome)


def main(args: argparse.Namespace) -> int:
    async def body() -> int:
        checked_run_id(args.run_id)  # bad input fails before any database is touched
        dsn = await admin_dsn("cancel", args)
        line, code = outcome_line(await cancel(dsn, args.run_id, note=args.note, actor=args.actor))
        print(line)
        return code

    return run_command("cancel", body)


def add_arguments(cancel: argparse.ArgumentParser) -> None:
    cancel.add_argument("run_id", metavar="RUN_ID", help="the Run (a UUID, as `runs` shows)")
    cancel.add_argument("--note", help="why (recorded in the audit)")
    cancel.add_argument("--actor", help="who, recorded beside the database role")
    add_database_options(cancel, role="admin")
