"""``qlsched resume P/T [--catch-up skip|fire_once] [--actor TEXT]``: schedule a paused
trigger again from the database's time (admin).

The occurrences that fell inside the pause are counted into ``paused_total`` (``skip``, the
default), or the latest of them fires once and the rest are counted (``fire_once``). The
action is recorded in ``qlsched.schedule_actions``. Without a DSN it acts on the local
database, as ``publish`` does.
"""

from __future__ import annotations

import argparse

from qlsched.admin.schedules import resume
from qlsched.commands._common import run_command
from qlsched.commands.control.common import admin_dsn
from qlsched.commands.options import add_database_options, add_trigger_argument
from qlsched.core.control import trigger_ref
from qlsched.core.control_lines import outcome_line


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_trigger_argument(p)
    p.add_argument(
        "--catch-up",
        choices=("skip", "fire_once"),
        default="skip",
        help="skip: count what fell inside the pause (default); fire_once: fire its latest",
    )
    p.add_argument("--actor", help="who acts, recorded beside the database role")
    add_database_options(p, role="admin")


def main(args: argparse.Namespace) -> int:
    async def body() -> int:
        ref = trigger_ref(args.trigger)  # bad input fails before any database is touched
        outcome = await resume(
            await admin_dsn("resume", args), ref, catch_up=args.catch_up, actor=args.actor
        )
        print(outcome_line(outcome))
        return 0

    return run_command("resume", body)
