"""What ``edge trigger`` and ``edge backfill`` share: open the file, record, answer.

Both print one line and exit 0 once the request is recorded (``edge run`` admits it; ``edge
status`` shows it), as the cluster's ``trigger`` and ``backfill`` do. Bad input (a malformed
``P/T``, note or range, an unknown trigger) is one line and exit 2, checked before the file
is opened where it can be; a request refused at once prints the reason and exits 1 (the
trigger's state refuses it) or 2 (the request must change: too many occurrences, a range
past now).
"""

from __future__ import annotations

import argparse
import sqlite3

import trio

from qlsched.commands.control.lines import recorded_line
from qlsched.commands.edge import fail
from qlsched.commands.options import add_overlap_option
from qlsched.core.control import (
    ACTOR_MAX_CHARS,
    NOTE_MAX_CHARS,
    TriggerRef,
    UnknownTrigger,
    checked_text,
)
from qlsched.core.requests import NotRecorded, RecordResult, RequestAsk
from qlsched.signals import interruptible
from qlsched.sqlite import request_record
from qlsched.sqlite.database import open_checked


def add_common(p: argparse.ArgumentParser, db_help: str) -> None:
    """The flags after ``P/T``: ``--db``, ``--note``, ``--actor``, ``--overlap`` (the
    cluster's, but the file instead of an admin DSN)."""
    p.add_argument("--db", help=db_help)
    p.add_argument("--note", help="why (kept with the request and shown by edge status)")
    p.add_argument("--actor", help="who acts, recorded beside the OS user")
    add_overlap_option(p)


def record(
    command: str,
    args: argparse.Namespace,
    db: str,
    ref: TriggerRef,
    span: tuple[int, int] | None = None,
    max_occurrences: int | None = None,
) -> int:
    """Record the request in ``db``, print its line; the exit code as the module says."""
    note = checked_text(args.note, what="--note", max_chars=NOTE_MAX_CHARS)
    actor = checked_text(args.actor, what="--actor", max_chars=ACTOR_MAX_CHARS)
    ask = RequestAsk(
        kind="trigger" if span is None else "backfill",
        note=note,
        actor=actor,
        span=span,
        max_occurrences=max_occurrences,
        overlap=args.overlap,
    )

    async def body() -> RecordResult:
        database = await trio.to_thread.run_sync(lambda: open_checked(db, create=False, apply=True))

        def record_one(conn: sqlite3.Connection) -> RecordResult:
            return request_record.record_request(conn, ref, database.clock(), ask)

        try:
            return await database.call(record_one)
        finally:
            database.close()

    result = trio.run(interruptible, body)
    if isinstance(result, NotRecorded):
        if result.reason == "trigger_missing":
            name = f"{ref} (project {ref.project_id}, id {ref.trigger_id})"
            raise UnknownTrigger(f"no trigger {name}")
        return fail(command, result.message(), 2 if result.bad_input else 1)
    print(recorded_line(result, span, edge=True))
    return 0
