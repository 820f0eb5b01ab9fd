"""``qlsched edge backfill P/T --from ISO --to ISO [--max N] --db PATH``: Runs for a past
range, as ``qlsched backfill`` does on the cluster.

The range's occurrences are the trigger's own (cron, zone, DST rule), counted exactly
before anything is written: more than ``--max`` (default 10,000, at most 1,000,000) is
refused with the count (exit 2). ``edge run`` admits them in chunks within its claim budget
per round, each under its cron key, so an occurrence that already has a Run is counted,
never repeated; ``edge status`` shows the progress. Works beside ``edge run``.
"""

from __future__ import annotations

import argparse

from qlsched.commands.control.lines import iso_ms
from qlsched.commands.edge._requests import add_common, record
from qlsched.core.control import trigger_ref
from qlsched.core.requests import BACKFILL_MAX_DEFAULT, check_range


def add_arguments(p: argparse.ArgumentParser, db_help: str) -> None:
    p.add_argument("trigger", metavar="P/T", help="PROJECT/TRIGGER")
    p.add_argument("--from", dest="start", required=True, help="ISO 8601 (UTC if bare)")
    p.add_argument("--to", dest="end", required=True, help="ISO 8601 (UTC if bare)")
    p.add_argument(
        "--max",
        type=int,
        default=BACKFILL_MAX_DEFAULT,
        help="refuse a range of more occurrences (default 10000, at most 1000000)",
    )
    add_common(p, db_help)


def run(args: argparse.Namespace, db: str) -> int:
    ref = trigger_ref(args.trigger)  # bad input fails before the file is touched
    span = (iso_ms("--from", args.start), iso_ms("--to", args.end))
    check_range(*span, args.max)
    return record("backfill", args, db, ref, span, args.max)
