"""``qlsched edge pause P/T [--note TEXT] [--actor TEXT] --db PATH``: stop scheduling one
trigger of the Edge file, as ``qlsched pause`` does on the cluster: no round reads it until
``edge resume``; its revision and cursor are kept, re-publishing does not unpause it, and
the action is recorded in the file's ``schedule_actions``. Works beside ``edge run``."""

from __future__ import annotations

import argparse

import trio

from qlsched.core.control import PauseOutcome, checked_text, trigger_ref
from qlsched.core.control_lines import outcome_line
from qlsched.signals import interruptible
from qlsched.sqlite import control
from qlsched.sqlite.database import open_checked


def add_arguments(p: argparse.ArgumentParser, db_help: str) -> None:
    p.add_argument("trigger", metavar="P/T", help="PROJECT/TRIGGER")
    p.add_argument("--db", help=db_help)
    p.add_argument("--note", help="why (shown by edge status)")
    p.add_argument("--actor", help="who acts, recorded beside the OS user")


def run(args: argparse.Namespace, db: str) -> int:
    ref = trigger_ref(args.trigger)  # bad input fails before the file is touched
    note = checked_text(args.note, what="--note", max_chars=1000)
    actor = checked_text(args.actor, what="--actor", max_chars=200)

    async def body() -> PauseOutcome:
        database = await trio.to_thread.run_sync(lambda: open_checked(db, create=False, apply=True))
        try:
            return await database.call(
                lambda conn: control.pause(conn, ref, database.clock(), note=note, actor=actor)
            )
        finally:
            database.close()

    print(outcome_line(trio.run(interruptible, body)))
    return 0
