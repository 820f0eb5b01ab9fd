"""``qlsched pause P/T [--note TEXT] [--actor TEXT]``: stop scheduling one trigger (admin).

No round claims it until ``qlsched resume``; its revision and cursor are kept, re-publishing
does not unpause it, and the action is recorded in ``qlsched.schedule_actions``. Without a
DSN it acts on the local database, as ``publish`` does.
"""

from __future__ import annotations

import argparse

from qlsched.admin.schedules import pause
from qlsched.commands._common import run_command
from qlsched.commands.control.common import admin_dsn
from qlsched.commands.options import add_actor_options, add_trigger_argument
from qlsched.core.control import trigger_ref
from qlsched.core.control_lines import outcome_line


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_trigger_argument(p)
    add_actor_options(p, "why (shown by status and /v1/schedules)")


def main(args: argparse.Namespace) -> int:
    async def body() -> int:
        ref = trigger_ref(args.trigger)  # bad input fails before any database is touched
        outcome = await pause(await admin_dsn("pause", args), ref, note=args.note, actor=args.actor)
        print(outcome_line(outcome))
        return 0

    return run_command("pause", body)
