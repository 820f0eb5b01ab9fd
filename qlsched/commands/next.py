"""``qlsched next EXPR [--tz ZONE] [--from ISO] [-n N] [--dst-gap G] [--dst-fold F]``: preview
the next N fire times.

The times come from ``qlsched.core.cron.next_after``, the function every decision uses, so
the preview is what the scheduler will do, DST included: ``--dst-gap``/``--dst-fold`` are a
trigger's ``dst_gap``/``dst_fold`` (docs/contract.md §3), and a policy other than the
default is named on a first line starting ``#``, so the default output stays one time a
line. Each time is ISO 8601 with the UTC offset the trigger's zone has at that instant
(``2026-03-08T03:00:00-04:00``). A ``--from`` without an offset is read in ``--tz``;
without ``--from`` the preview starts at this machine's clock, the one place a process clock
is fine: nothing durable depends on it.
Bad input prints one line starting ``qlsched next: `` to stderr and exits 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from qlsched.core.cron import (
    DST_FOLD_DEFAULT,
    DST_FOLDS,
    DST_GAP_DEFAULT,
    DST_GAPS,
    CronError,
    next_after,
    parse_cron,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


class _BadInput(Exception):
    pass


def _start_ms(start: str | None, zone: ZoneInfo) -> int:
    if start is None:
        return time.time_ns() // 1_000_000
    try:
        instant = datetime.fromisoformat(start)
    except ValueError:
        raise _BadInput(f"--from: {start!r} is not an ISO 8601 date or date-time") from None
    if instant.tzinfo is None:
        # A wall time in a gap or fold reads as zoneinfo's fold=0 does (PEP 495): the
        # offset in force before the transition.
        instant = instant.replace(tzinfo=zone)
    return (instant - _EPOCH) // _ONE_MS


def main(args: argparse.Namespace) -> int:
    """Print ``args.n`` fire times strictly after ``args.start``; 0, or 2 on bad input."""
    try:
        if args.n < 1:
            raise _BadInput(f"-n: must be at least 1, got {args.n}")
        for flag, value, allowed in (
            ("--dst-gap", args.dst_gap, DST_GAPS),
            ("--dst-fold", args.dst_fold, DST_FOLDS),
        ):
            if value not in allowed:
                raise _BadInput(f"{flag}: {value!r} is not one of {', '.join(allowed)}")
        schedule = parse_cron(
            args.expression, args.tz, dst_gap=args.dst_gap, dst_fold=args.dst_fold
        )
        zone = ZoneInfo(schedule.timezone)
        t = _start_ms(args.start, zone)
        lines = []
        if (schedule.dst_gap, schedule.dst_fold) != (DST_GAP_DEFAULT, DST_FOLD_DEFAULT):
            lines.append(f"# dst_gap = {schedule.dst_gap}, dst_fold = {schedule.dst_fold}")
        for _ in range(args.n):
            t = next_after(schedule, t)
            lines.append(datetime.fromtimestamp(t // 1000, zone).isoformat())
    except (CronError, _BadInput) as exc:
        print(f"qlsched next: {exc}", file=sys.stderr)
        return 2
    except (OverflowError, ValueError):  # datetime's range: years 1 to 9999
        print("qlsched next: the fire times fall outside the years 1-9999", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0
