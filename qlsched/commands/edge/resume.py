"""``qlsched edge resume P/T [--catch-up skip|fire_once] [--actor TEXT] --db PATH``:
schedule a paused trigger of the Edge file again, as ``qlsched resume`` does on the
cluster: the occurrences that fell inside the pause are counted into ``paused_total``
(``skip``, the default), or the latest of them fires once and the rest are counted
(``fire_once``). Works beside ``edge run``."""

from __future__ import annotations

import argparse

import trio

from qlsched.core.control import ResumeOutcome, checked_text, trigger_ref
from qlsched.core.control_lines import outcome_line
from qlsched.core.pause import CATCH_UPS
from qlsched.signals import interruptible
from qlsched.sqlite import control
from qlsched.sqlite.database import open_checked


def add_arguments(p: argparse.ArgumentParser, db_help: str) -> None:
    p.add_argument("trigger", metavar="P/T", help="PROJECT/TRIGGER")
    p.add_argument("--db", help=db_help)
    p.add_argument(
        "--catch-up",
        choices=CATCH_UPS,
        default="skip",
        help="skip: count what fell inside the pause (default); fire_once: fire its latest",
    )
    p.add_argument("--actor", help="who acts, recorded beside the OS user")


def run(args: argparse.Namespace, db: str) -> int:
    ref = trigger_ref(args.trigger)  # bad input fails before the file is touched
    actor = checked_text(args.actor, what="--actor", max_chars=200)

    async def body() -> ResumeOutcome:
        database = await trio.to_thread.run_sync(lambda: open_checked(db, create=False, apply=True))
        try:
            return await database.call(
                lambda conn: control.resume(
                    conn, ref, database.clock(), catch_up=args.catch_up, actor=actor
                )
            )
        finally:
            database.close()

    print(outcome_line(trio.run(interruptible, body)))
    return 0
