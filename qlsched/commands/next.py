"""``qlsched next EXPR [--tz ZONE] [--from ISO] [-n N] [--dst-gap G] [--dst-fold F]
[--jitter-ms N --trigger P/T [--revision N]]``: preview the next N fire times.

The times come from ``qlsched.core.cron.next_after``, the function every decision uses, so
the preview is what the scheduler will do, DST included: ``--dst-gap``/``--dst-fold`` are a
trigger's ``dst_gap``/``dst_fold`` (docs/contract.md §3), and a policy other than the
default is named on a first line starting ``#``, so the default output stays one time a
line. Each time is ISO 8601 with the UTC offset the trigger's zone has at that instant
(``2026-03-08T03:00:00-04:00``). A ``--from`` without an offset is read in ``--tz``;
without ``--from`` the preview starts at this machine's clock, the one place a process clock
is fine: nothing durable depends on it.
With ``--jitter-ms`` (a trigger's ``jitter_ms``, docs/contract.md §10) each line also shows
the occurrence's due time, ``S + h``, after `` due ``; ``h`` hashes the trigger and its
revision, so ``--trigger P/T`` (and ``--revision``, default 1) name them, and a first ``#``
line says so. The jitter is checked as publish checks it (at most an hour, below the
shortest period).
Bad input prints one line starting ``qlsched next: `` to stderr and exits 2.
"""

from __future__ import annotations

import argparse
import re
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
    CronSchedule,
    next_after,
    parse_cron,
)
from qlsched.core.jitter import Jitter, jitter_problem
from qlsched.core.specs import ID_PATTERN

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


N_MAX = 100_000
"""The most fire times one ``next`` prints (a few MB of text): a bigger ``-n`` is refused
at once rather than computed until memory runs out."""


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


def _jitter(args: argparse.Namespace, schedule: CronSchedule) -> Jitter | None:
    """The trigger's jitter from ``--jitter-ms``/``--trigger``/``--revision``, validated as
    publish validates it; None without jitter."""
    if not args.jitter_ms:
        return None
    if (problem := jitter_problem(args.jitter_ms, schedule)) is not None:
        raise _BadInput(f"--jitter-ms: {problem}")
    if args.trigger is None:
        raise _BadInput("--jitter-ms needs --trigger P/T: the due times hash the trigger")
    project, _, trigger = args.trigger.partition("/")
    if not (re.match(ID_PATTERN, project) and re.match(ID_PATTERN, trigger)):
        raise _BadInput(f"--trigger: {args.trigger!r} is not PROJECT/TRIGGER")
    if args.revision < 1:
        raise _BadInput(f"--revision: must be at least 1, got {args.revision}")
    return Jitter(project, trigger, args.revision, args.jitter_ms)


def _instant(ms: int, zone: ZoneInfo) -> str:
    """ISO 8601 in ``zone``, with milliseconds only when there are some."""
    moment = datetime.fromtimestamp(ms // 1000, zone).replace(microsecond=ms % 1000 * 1000)
    return moment.isoformat(timespec="milliseconds" if ms % 1000 else "seconds")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("expression", metavar="EXPR", help="cron expression (5 or 6 fields, or @daily)")
    p.add_argument("--tz", default="UTC", help="IANA time zone (default UTC)")
    p.add_argument("--from", dest="start", help="ISO 8601 instant (default now)")
    p.add_argument("-n", type=int, default=5, help="how many (default 5)")
    p.add_argument(
        "--dst-gap",
        default="shift",
        metavar="shift|skip",
        help="a fixed-hour time in a spring-forward gap: at the gap's end, or not that day",
    )
    p.add_argument(
        "--dst-fold",
        default="first",
        metavar="first|last|both",
        help="a fixed-hour time in a repeated hour: its first instant, its last, or both",
    )
    p.add_argument(
        "--jitter-ms",
        type=int,
        default=0,
        metavar="N",
        help="the trigger's jitter_ms: also print each occurrence's due time (needs --trigger)",
    )
    p.add_argument(
        "--trigger",
        metavar="P/T",
        help="the trigger (project/id) whose due times to show; the hash names it",
    )
    p.add_argument(
        "--revision",
        type=int,
        default=1,
        metavar="N",
        help="the trigger's revision (default 1; `status` shows it), part of the hash",
    )


def main(args: argparse.Namespace) -> int:
    """Print ``args.n`` fire times strictly after ``args.start``; 0, or 2 on bad input."""
    try:
        if not 1 <= args.n <= N_MAX:
            raise _BadInput(f"-n: must be 1..{N_MAX}, got {args.n}")
        for flag, value, allowed in (
            ("--dst-gap", args.dst_gap, DST_GAPS),
            ("--dst-fold", args.dst_fold, DST_FOLDS),
        ):
            if value not in allowed:
                raise _BadInput(f"{flag}: {value!r} is not one of {', '.join(allowed)}")
        schedule = parse_cron(
            args.expression, args.tz, dst_gap=args.dst_gap, dst_fold=args.dst_fold
        )
        jitter = _jitter(args, schedule)
        zone = ZoneInfo(schedule.timezone)
        t = _start_ms(args.start, zone)
        lines = []
        if (schedule.dst_gap, schedule.dst_fold) != (DST_GAP_DEFAULT, DST_FOLD_DEFAULT):
            lines.append(f"# dst_gap = {schedule.dst_gap}, dst_fold = {schedule.dst_fold}")
        if jitter is not None:
            lines.append(
                f"# jitter_ms = {jitter.jitter_ms} (trigger {jitter.project_id}/"
                f"{jitter.trigger_id} revision {jitter.trigger_revision}): scheduled, then due"
            )
        for _ in range(args.n):
            t = next_after(schedule, t)
            line = _instant(t, zone)
            if jitter is not None:
                line += f" due {_instant(t + jitter.offset_ms(t), zone)}"
            lines.append(line)
    except (CronError, _BadInput) as exc:
        print(f"qlsched next: {exc}", file=sys.stderr)
        return 2
    except (OverflowError, ValueError):  # datetime's range: years 1 to 9999
        print("qlsched next: the fire times fall outside the years 1-9999", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0
