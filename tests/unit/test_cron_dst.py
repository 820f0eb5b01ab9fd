"""DST: Vixie cron's rule (docs/contract.md §3), pinned across both transitions of 2026 and 2027.

Expected times were derived by hand from the rule and the zones' published rules:

- America/New_York: 02:00 EST -> 03:00 EDT on the second Sunday of March (2026-03-08,
  2027-03-14); 02:00 EDT -> 01:00 EST on the first Sunday of November (2026-11-01,
  2027-11-07). Gap [02:00, 03:00), fold [01:00, 02:00).
- Europe/London: at 01:00 UTC on the last Sunday of March (2026-03-29, 2027-03-28) 01:00 GMT
  -> 02:00 BST, and of October (2026-10-25, 2027-10-31) 02:00 BST -> 01:00 GMT.
  Gap [01:00, 02:00), fold [01:00, 02:00).
- Australia/Lord_Howe, a 30-minute shift: 02:00 +11:00 -> 01:30 +10:30 on the first Sunday
  of April (2026-04-05, 2027-04-04), 02:00 +10:30 -> 02:30 +11:00 on the first Sunday of
  October (2026-10-04, 2027-10-03). Fold [01:30, 02:00), gap [02:00, 02:30).
- Asia/Shanghai: +08:00 all year; its rows use the other zones' transition days.

The rule: a *fixed* hour (not beginning with ``*``) fires each wall time once, at its first
instant, and moves wall times in a gap to the first instant after it, once, seconds and
minutes reset. A *wildcard* hour (``*``, ``*/2``) follows real time: gap wall times never
fire, fold wall times fire at each instant.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from qlsched.core.cron import next_after, parse_cron

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NY, LONDON, LORD_HOWE, SHANGHAI = (
    "America/New_York",
    "Europe/London",
    "Australia/Lord_Howe",
    "Asia/Shanghai",
)


def _ms(iso: str) -> int:
    return (datetime.fromisoformat(iso) - _EPOCH) // timedelta(milliseconds=1)


def check(expression: str, zone: str, start: str, expected: list[str]) -> None:
    """The occurrences after ``start`` are exactly ``expected`` (ISO 8601, zone's offset)."""
    schedule = parse_cron(expression, zone)
    got = []
    t = _ms(start)
    for _ in expected:
        t = next_after(schedule, t)
        got.append(datetime.fromtimestamp(t / 1000, ZoneInfo(zone)).isoformat())
    assert got == expected


def case(expression: str, zone: str, start: str, *expected: str, id: str) -> object:
    return pytest.param(expression, zone, start, list(expected), id=f"{zone}-{id}")


# --- spring forward: the gap -------------------------------------------------------------

GAP = [
    # New York 2026-03-08, 2027-03-14
    case("30 2 * * *", NY, "2026-03-07T12:00:00-05:00",
         "2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00", id="2026-fixed-to-gap-end"),
    case("0,15,30 2 * * *", NY, "2026-03-07T12:00:00-05:00",
         "2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00", "2026-03-09T02:15:00-04:00",
         id="2026-fixed-three-gap-times-fire-once"),
    case("30 2,3 * * *", NY, "2026-03-08T00:00:00-05:00",
         "2026-03-08T03:00:00-04:00", "2026-03-08T03:30:00-04:00", "2026-03-09T02:30:00-04:00",
         id="2026-fixed-gap-then-next-hour"),
    case("* 2 * * *", NY, "2026-03-08T01:58:00-05:00",
         "2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00", "2026-03-09T02:01:00-04:00",
         id="2026-fixed-hour-wildcard-minute-once"),
    case("30 * * * *", NY, "2026-03-08T00:00:00-05:00",
         "2026-03-08T00:30:00-05:00", "2026-03-08T01:30:00-05:00", "2026-03-08T03:30:00-04:00",
         id="2026-wildcard-skips-gap"),
    case("0 */2 * * *", NY, "2026-03-07T23:00:00-05:00",
         "2026-03-08T00:00:00-05:00", "2026-03-08T04:00:00-04:00", id="2026-step-hour-is-wildcard"),
    case("15 30 2 * * *", NY, "2026-03-07T12:00:00-05:00",
         "2026-03-08T03:00:00-04:00", "2026-03-09T02:30:15-04:00",
         id="2026-six-fields-fixed-seconds-reset"),
    case("*/20 * * * * *", NY, "2026-03-08T01:59:30-05:00",
         "2026-03-08T01:59:40-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T03:00:20-04:00",
         id="2026-six-fields-wildcard"),
    case("30 2 * * *", NY, "2027-03-13T12:00:00-05:00",
         "2027-03-14T03:00:00-04:00", "2027-03-15T02:30:00-04:00", id="2027-fixed-to-gap-end"),
    case("30 * * * *", NY, "2027-03-14T01:00:00-05:00",
         "2027-03-14T01:30:00-05:00", "2027-03-14T03:30:00-04:00", id="2027-wildcard-skips-gap"),
    case("15 30 2 * * *", NY, "2027-03-13T12:00:00-05:00",
         "2027-03-14T03:00:00-04:00", "2027-03-15T02:30:15-04:00",
         id="2027-six-fields-fixed-seconds-reset"),
    case("*/20 * * * * *", NY, "2027-03-14T01:59:30-05:00",
         "2027-03-14T01:59:40-05:00", "2027-03-14T03:00:00-04:00", id="2027-six-fields-wildcard"),
    # London 2026-03-29, 2027-03-28
    case("30 1 * * *", LONDON, "2026-03-28T12:00:00+00:00",
         "2026-03-29T02:00:00+01:00", "2026-03-30T01:30:00+01:00", id="2026-fixed-to-gap-end"),
    case("0 1 * * *", LONDON, "2026-03-28T12:00:00+00:00",
         "2026-03-29T02:00:00+01:00", "2026-03-30T01:00:00+01:00", id="2026-fixed-gap-start"),
    case("*/30 * * * *", LONDON, "2026-03-29T00:15:00+00:00",
         "2026-03-29T00:30:00+00:00", "2026-03-29T02:00:00+01:00", "2026-03-29T02:30:00+01:00",
         id="2026-wildcard-skips-gap"),
    case("45 59 1 * * *", LONDON, "2026-03-28T12:00:00+00:00",
         "2026-03-29T02:00:00+01:00", "2026-03-30T01:59:45+01:00",
         id="2026-six-fields-fixed-seconds-reset"),
    case("30 59 * * * *", LONDON, "2026-03-29T00:00:00+00:00",
         "2026-03-29T00:59:30+00:00", "2026-03-29T02:59:30+01:00", id="2026-six-fields-wildcard"),
    case("30 1 * * *", LONDON, "2027-03-27T12:00:00+00:00",
         "2027-03-28T02:00:00+01:00", "2027-03-29T01:30:00+01:00", id="2027-fixed-to-gap-end"),
    case("*/30 * * * *", LONDON, "2027-03-28T00:15:00+00:00",
         "2027-03-28T00:30:00+00:00", "2027-03-28T02:00:00+01:00", id="2027-wildcard-skips-gap"),
    case("45 59 1 * * *", LONDON, "2027-03-27T12:00:00+00:00",
         "2027-03-28T02:00:00+01:00", "2027-03-29T01:59:45+01:00",
         id="2027-six-fields-fixed-seconds-reset"),
    case("30 59 * * * *", LONDON, "2027-03-28T00:00:00+00:00",
         "2027-03-28T00:59:30+00:00", "2027-03-28T02:59:30+01:00", id="2027-six-fields-wildcard"),
    # Lord Howe 2026-10-04, 2027-10-03: a 30-minute gap, so the gap end is 02:30, not 03:00
    case("15 2 * * *", LORD_HOWE, "2026-10-03T12:00:00+10:30",
         "2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00", id="2026-fixed-to-gap-end"),
    case("0,10,20,30 2 * * *", LORD_HOWE, "2026-10-03T12:00:00+10:30",
         "2026-10-04T02:30:00+11:00", "2026-10-05T02:00:00+11:00", "2026-10-05T02:10:00+11:00",
         id="2026-fixed-gap-times-and-gap-end-fire-once"),
    case("*/20 * * * *", LORD_HOWE, "2026-10-04T01:30:00+10:30",
         "2026-10-04T01:40:00+10:30", "2026-10-04T02:40:00+11:00", "2026-10-04T03:00:00+11:00",
         id="2026-wildcard-skips-gap"),
    case("30 15 2 * * *", LORD_HOWE, "2026-10-03T12:00:00+10:30",
         "2026-10-04T02:30:00+11:00", "2026-10-05T02:15:30+11:00",
         id="2026-six-fields-fixed-seconds-reset"),
    case("*/30 29 * * * *", LORD_HOWE, "2026-10-04T01:29:40+10:30",
         "2026-10-04T03:29:00+11:00", "2026-10-04T03:29:30+11:00", id="2026-six-fields-wildcard"),
    case("15 2 * * *", LORD_HOWE, "2027-10-02T12:00:00+10:30",
         "2027-10-03T02:30:00+11:00", "2027-10-04T02:15:00+11:00", id="2027-fixed-to-gap-end"),
    case("*/20 * * * *", LORD_HOWE, "2027-10-03T01:30:00+10:30",
         "2027-10-03T01:40:00+10:30", "2027-10-03T02:40:00+11:00", id="2027-wildcard-skips-gap"),
    case("30 15 2 * * *", LORD_HOWE, "2027-10-02T12:00:00+10:30",
         "2027-10-03T02:30:00+11:00", "2027-10-04T02:15:30+11:00",
         id="2027-six-fields-fixed-seconds-reset"),
    case("*/30 29 * * * *", LORD_HOWE, "2027-10-03T01:29:40+10:30",
         "2027-10-03T03:29:00+11:00", id="2027-six-fields-wildcard"),
]  # fmt: skip


@pytest.mark.parametrize(("expression", "zone", "start", "expected"), GAP)
def test_spring_forward_gap(expression: str, zone: str, start: str, expected: list[str]) -> None:
    """A fixed hour moves wall times in the gap to the first instant after it and fires once
    there (seconds and minutes reset); a wildcard hour skips them. Never a missed day."""
    check(expression, zone, start, expected)


# --- fall back: the fold -----------------------------------------------------------------

FOLD = [
    # New York 2026-11-01, 2027-11-07
    case("30 1 * * *", NY, "2026-10-31T12:00:00-04:00",
         "2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00", id="2026-fixed-first-instant"),
    case("*/20 1 * * *", NY, "2026-11-01T00:50:00-04:00",
         "2026-11-01T01:00:00-04:00", "2026-11-01T01:20:00-04:00", "2026-11-01T01:40:00-04:00",
         "2026-11-02T01:00:00-05:00", id="2026-fixed-no-repeat"),
    case("*/20 1 * * *", NY, "2026-11-01T01:10:00-05:00",
         "2026-11-02T01:00:00-05:00", id="2026-fixed-from-second-pass"),
    case("30 * * * *", NY, "2026-11-01T00:00:00-04:00",
         "2026-11-01T00:30:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00",
         "2026-11-01T02:30:00-05:00", id="2026-wildcard-fires-both"),
    case("0 * * * *", NY, "2026-11-01T01:50:00-04:00",
         "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00",
         id="2026-wildcard-from-first-pass"),
    case("10 30 1 * * *", NY, "2026-10-31T12:00:00-04:00",
         "2026-11-01T01:30:10-04:00", "2026-11-02T01:30:10-05:00",
         id="2026-six-fields-fixed-first-instant"),
    case("0 0/30 * * * *", NY, "2026-11-01T00:45:00-04:00",
         "2026-11-01T01:00:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:00:00-05:00",
         "2026-11-01T01:30:00-05:00", "2026-11-01T02:00:00-05:00", id="2026-six-fields-wildcard"),
    case("30 1 * * *", NY, "2027-11-06T12:00:00-04:00",
         "2027-11-07T01:30:00-04:00", "2027-11-08T01:30:00-05:00", id="2027-fixed-first-instant"),
    case("30 * * * *", NY, "2027-11-07T01:00:00-04:00",
         "2027-11-07T01:30:00-04:00", "2027-11-07T01:30:00-05:00", "2027-11-07T02:30:00-05:00",
         id="2027-wildcard-fires-both"),
    case("10 30 1 * * *", NY, "2027-11-06T12:00:00-04:00",
         "2027-11-07T01:30:10-04:00", "2027-11-08T01:30:10-05:00",
         id="2027-six-fields-fixed-first-instant"),
    case("0 0/30 * * * *", NY, "2027-11-07T01:15:00-04:00",
         "2027-11-07T01:30:00-04:00", "2027-11-07T01:00:00-05:00", "2027-11-07T01:30:00-05:00",
         id="2027-six-fields-wildcard"),
    # London 2026-10-25, 2027-10-31
    case("30 1 * * *", LONDON, "2026-10-24T12:00:00+01:00",
         "2026-10-25T01:30:00+01:00", "2026-10-26T01:30:00+00:00", id="2026-fixed-first-instant"),
    case("15 * * * *", LONDON, "2026-10-25T00:30:00+01:00",
         "2026-10-25T01:15:00+01:00", "2026-10-25T01:15:00+00:00", "2026-10-25T02:15:00+00:00",
         id="2026-wildcard-fires-both"),
    case("0 0 1 * * *", LONDON, "2026-10-24T12:00:00+01:00",
         "2026-10-25T01:00:00+01:00", "2026-10-26T01:00:00+00:00",
         id="2026-six-fields-fixed-first-instant"),
    case("0 */30 * * * *", LONDON, "2026-10-25T01:40:00+01:00",
         "2026-10-25T01:00:00+00:00", "2026-10-25T01:30:00+00:00", "2026-10-25T02:00:00+00:00",
         id="2026-six-fields-wildcard-from-first-pass"),
    case("30 1 * * *", LONDON, "2027-10-30T12:00:00+01:00",
         "2027-10-31T01:30:00+01:00", "2027-11-01T01:30:00+00:00", id="2027-fixed-first-instant"),
    case("15 * * * *", LONDON, "2027-10-31T00:30:00+01:00",
         "2027-10-31T01:15:00+01:00", "2027-10-31T01:15:00+00:00", id="2027-wildcard-fires-both"),
    case("0 0 1 * * *", LONDON, "2027-10-30T12:00:00+01:00",
         "2027-10-31T01:00:00+01:00", "2027-11-01T01:00:00+00:00",
         id="2027-six-fields-fixed-first-instant"),
    case("0 */30 * * * *", LONDON, "2027-10-31T01:40:00+01:00",
         "2027-10-31T01:00:00+00:00", id="2027-six-fields-wildcard-from-first-pass"),
    # Lord Howe 2026-04-05, 2027-04-04: a 30-minute fold [01:30, 02:00)
    case("45 1 * * *", LORD_HOWE, "2026-04-04T12:00:00+11:00",
         "2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30", id="2026-fixed-first-instant"),
    case("0 2 * * *", LORD_HOWE, "2026-04-04T12:00:00+11:00",
         "2026-04-05T02:00:00+10:30", "2026-04-06T02:00:00+10:30", id="2026-fixed-after-fold"),
    case("*/15 * * * *", LORD_HOWE, "2026-04-05T01:10:00+11:00",
         "2026-04-05T01:15:00+11:00", "2026-04-05T01:30:00+11:00", "2026-04-05T01:45:00+11:00",
         "2026-04-05T01:30:00+10:30", "2026-04-05T01:45:00+10:30", "2026-04-05T02:00:00+10:30",
         id="2026-wildcard-fires-both-halves-of-30-min-fold"),
    case("0 * * * *", LORD_HOWE, "2026-04-05T00:30:00+11:00",
         "2026-04-05T01:00:00+11:00", "2026-04-05T02:00:00+10:30",
         id="2026-wildcard-hourly-90-real-minutes-apart"),
    case("40 * * * *", LORD_HOWE, "2026-04-05T01:50:00+11:00",
         "2026-04-05T01:40:00+10:30", "2026-04-05T02:40:00+10:30",
         id="2026-wildcard-from-first-pass"),
    case("30 45 1 * * *", LORD_HOWE, "2026-04-04T12:00:00+11:00",
         "2026-04-05T01:45:30+11:00", "2026-04-06T01:45:30+10:30",
         id="2026-six-fields-fixed-first-instant"),
    case("0 */15 * * * *", LORD_HOWE, "2026-04-05T01:20:00+11:00",
         "2026-04-05T01:30:00+11:00", "2026-04-05T01:45:00+11:00", "2026-04-05T01:30:00+10:30",
         "2026-04-05T01:45:00+10:30", "2026-04-05T02:00:00+10:30", id="2026-six-fields-wildcard"),
    case("45 1 * * *", LORD_HOWE, "2027-04-03T12:00:00+11:00",
         "2027-04-04T01:45:00+11:00", "2027-04-05T01:45:00+10:30", id="2027-fixed-first-instant"),
    case("*/15 * * * *", LORD_HOWE, "2027-04-04T01:40:00+11:00",
         "2027-04-04T01:45:00+11:00", "2027-04-04T01:30:00+10:30", "2027-04-04T01:45:00+10:30",
         "2027-04-04T02:00:00+10:30", id="2027-wildcard-fires-both-halves-of-30-min-fold"),
    case("30 45 1 * * *", LORD_HOWE, "2027-04-03T12:00:00+11:00",
         "2027-04-04T01:45:30+11:00", "2027-04-05T01:45:30+10:30",
         id="2027-six-fields-fixed-first-instant"),
    case("0 */15 * * * *", LORD_HOWE, "2027-04-04T01:50:00+11:00",
         "2027-04-04T01:30:00+10:30", "2027-04-04T01:45:00+10:30", "2027-04-04T02:00:00+10:30",
         id="2027-six-fields-wildcard-from-first-pass"),
]  # fmt: skip


@pytest.mark.parametrize(("expression", "zone", "start", "expected"), FOLD)
def test_fall_back_fold(expression: str, zone: str, start: str, expected: list[str]) -> None:
    """A fixed hour fires a repeated wall time once, at its first instant; a wildcard hour
    fires it at each real instant, also in Lord Howe's 30-minute fold. Never a double run."""
    check(expression, zone, start, expected)


SHANGHAI_ROWS = [
    case("30 2 * * *", SHANGHAI, "2026-03-07T12:00:00+08:00",
         "2026-03-08T02:30:00+08:00", "2026-03-09T02:30:00+08:00", id="2026-03-08"),
    case("30 1 * * *", SHANGHAI, "2026-10-31T12:00:00+08:00",
         "2026-11-01T01:30:00+08:00", "2026-11-02T01:30:00+08:00", id="2026-11-01"),
    case("30 * * * *", SHANGHAI, "2026-03-29T00:00:00+08:00",
         "2026-03-29T00:30:00+08:00", "2026-03-29T01:30:00+08:00", "2026-03-29T02:30:00+08:00",
         id="2026-03-29"),
    case("*/15 * * * *", SHANGHAI, "2026-04-05T01:20:00+08:00",
         "2026-04-05T01:30:00+08:00", "2026-04-05T01:45:00+08:00", "2026-04-05T02:00:00+08:00",
         id="2026-04-05"),
    case("15 30 2 * * *", SHANGHAI, "2026-10-03T12:00:00+08:00",
         "2026-10-04T02:30:15+08:00", "2026-10-05T02:30:15+08:00", id="2026-10-04-six-fields"),
    case("*/20 * * * * *", SHANGHAI, "2027-03-14T01:59:30+08:00",
         "2027-03-14T01:59:40+08:00", "2027-03-14T02:00:00+08:00", "2027-03-14T02:00:20+08:00",
         id="2027-03-14-six-fields"),
    case("30 1 * * *", SHANGHAI, "2027-11-06T12:00:00+08:00",
         "2027-11-07T01:30:00+08:00", "2027-11-08T01:30:00+08:00", id="2027-11-07"),
    case("0 */30 * * * *", SHANGHAI, "2027-10-31T00:50:00+08:00",
         "2027-10-31T01:00:00+08:00", "2027-10-31T01:30:00+08:00", "2027-10-31T02:00:00+08:00",
         id="2027-10-31-six-fields"),
    case("45 1 * * *", SHANGHAI, "2027-04-03T12:00:00+08:00",
         "2027-04-04T01:45:00+08:00", "2027-04-05T01:45:00+08:00", id="2027-04-04"),
    case("15 2 * * *", SHANGHAI, "2027-10-02T12:00:00+08:00",
         "2027-10-03T02:15:00+08:00", "2027-10-04T02:15:00+08:00", id="2027-10-03"),
]  # fmt: skip


@pytest.mark.parametrize(("expression", "zone", "start", "expected"), SHANGHAI_ROWS)
def test_zone_without_dst(expression: str, zone: str, start: str, expected: list[str]) -> None:
    """In a zone without DST the other zones' transition days are ordinary days."""
    check(expression, zone, start, expected)


# --- whole years: never a missed day, never a double daily run --------------------------


def _local_dates(expression: str, zone: str) -> Counter[date]:
    """How many occurrences fall on each local calendar date of 2026 and 2027."""
    tz = ZoneInfo(zone)
    schedule = parse_cron(expression, zone)
    t = _ms(datetime(2026, 1, 1, tzinfo=tz).isoformat()) - 1
    end = _ms(datetime(2028, 1, 1, tzinfo=tz).isoformat())
    counts: Counter[date] = Counter()
    while (t := next_after(schedule, t)) < end:
        counts[datetime.fromtimestamp(t / 1000, tz).date()] += 1
    return counts


@pytest.mark.parametrize("zone", [NY, LONDON, LORD_HOWE, SHANGHAI])
@pytest.mark.parametrize(
    "expression",
    ["30 0 * * *", "0 1 * * *", "30 1 * * *", "45 1 * * *", "0 2 * * *", "15 2 * * *",
     "30 2 * * *", "0 3 * * *", "30 59 1 * * *", "0 30 2 * * *"],
)  # fmt: skip
def test_fixed_daily_fires_once_every_day(expression: str, zone: str) -> None:
    """A fixed-hour daily expression fires exactly once on each of the 730 local dates of
    2026-2027, whatever the transitions (docs/contract.md §3: never a missed day, never a double
    daily run)."""
    counts = _local_dates(expression, zone)
    assert len(counts) == 730
    assert set(counts.values()) == {1}


# Local dates whose hour count differs from 24 under a wildcard hour.
HOURS = {
    (NY, "0 * * * *"): {
        date(2026, 3, 8): 23, date(2026, 11, 1): 25, date(2027, 3, 14): 23, date(2027, 11, 7): 25
    },
    (LONDON, "0 * * * *"): {
        date(2026, 3, 29): 23, date(2026, 10, 25): 25, date(2027, 3, 28): 23, date(2027, 10, 31): 25
    },
    # 02:00 is in the gap [02:00, 02:30); the fold [01:30, 02:00) holds no :00.
    (LORD_HOWE, "0 * * * *"): {date(2026, 10, 4): 23, date(2027, 10, 3): 23},
    # 02:30 is the gap's end, so it exists; 01:30 is in the fold, so it comes twice.
    (LORD_HOWE, "30 * * * *"): {date(2026, 4, 5): 25, date(2027, 4, 4): 25},
    (SHANGHAI, "0 * * * *"): {},
}  # fmt: skip


@pytest.mark.parametrize(("zone", "expression"), list(HOURS))
def test_wildcard_hour_follows_real_time(zone: str, expression: str) -> None:
    """A wildcard-hour expression fires once per real hour: 23 times on a spring-forward day,
    25 on a fall-back day (fewer in Lord Howe, where the shift is 30 minutes), 24 otherwise."""
    counts = _local_dates(expression, zone)
    assert len(counts) == 730
    assert {d: n for d, n in counts.items() if n != 24} == HOURS[zone, expression]
