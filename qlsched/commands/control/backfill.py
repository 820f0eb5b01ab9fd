"""``qlsched backfill P/T --from ISO --to ISO [--max N]``: Runs for a past range (admin DSN).

The range's occurrences are the trigger's own (cron, zone, DST rule), counted exactly
before anything is written: more than ``--max`` (default 10,000, at most 1,000,000) is
refused with the count (exit 2). Replicas admit them in chunks of at most the claim budget
per round, each under its cron key, so an occurrence that already has a Run is counted,
never repeated; ``qlsched status`` shows the progress.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable

from qlsched.admin.requests import backfill, check_range
from qlsched.commands.control.lines import iso_ms, recorded_line
from qlsched.commands.control.requests import record
from qlsched.commands.options import (
    add_actor_options,
    add_overlap_option,
    add_trigger_argument,
)
from qlsched.core.control import trigger_ref
from qlsched.core.requests import Recorded, RecordResult


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_trigger_argument(p)
    p.add_argument("--from", dest="start", required=True, help="ISO 8601 (UTC if bare)")
    p.add_argument("--to", dest="end", required=True, help="ISO 8601 (UTC if bare)")
    p.add_argument(
        "--max",
        type=int,
        default=10_000,
        help="refuse a range of more occurrences (default 10000, at most 1000000)",
    )
    add_overlap_option(p)
    add_actor_options(p, "why (kept with the request and shown by status)")


def main(args: argparse.Namespace) -> int:
    span: list[int] = []

    def describe(result: RecordResult) -> str:
        assert isinstance(result, Recorded)
        return recorded_line(result, (span[0], span[1]), edge=False)

    def prepare() -> Callable[[str], Awaitable[RecordResult]]:
        ref = trigger_ref(args.trigger)
        span.extend((iso_ms("--from", args.start), iso_ms("--to", args.end)))
        check_range(span[0], span[1], args.max)

        async def call(dsn: str) -> RecordResult:
            return await backfill(
                dsn,
                ref,
                start=span[0],
                end=span[1],
                max_occurrences=args.max,
                note=args.note,
                actor=args.actor,
                overlap=args.overlap,
            )

        return call

    return record("backfill", args, prepare, describe)
