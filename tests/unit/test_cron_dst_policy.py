"""DST policy per trigger (docs/contract.md §3), every combination pinned.

``dst_gap`` decides a fixed-hour wall time inside a spring-forward gap (``shift``: at the
first instant after the gap; ``skip``: not that day) and ``dst_fold`` one in a repeated hour
(``first``, ``last`` or ``both`` of its instants). The two are independent, so each of the
2 x 3 combinations must give the gap row of its ``dst_gap`` and the fold row of its
``dst_fold``; a wildcard-hour expression follows real time under all six. The transitions
are the ones test_cron_dst.py describes: New York (gap [02:00, 03:00) on 2026-03-08, fold
[01:00, 02:00) on 2026-11-01), London (gap [01:00, 02:00) on 2026-03-29, fold [01:00, 02:00)
on 2026-10-25), Lord Howe, a 30-minute shift (fold [01:30, 02:00) on 2026-04-05, gap
[02:00, 02:30) on 2026-10-04).
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime, timedelta
from itertools import product
from zoneinfo import ZoneInfo

import pytest

from qlsched.core.cron import CronError, next_after, parse_cron
from qlsched.core.cron_count import count_between
from qlsched.core.decide import TriggerSpec, decide
from qlsched.core.outcomes import Fire

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NY, LONDON, LORD_HOWE = "America/New_York", "Europe/London", "Australia/Lord_Howe"
POLICIES = list(product(("shift", "skip"), ("first", "last", "both")))


def _ms(iso: str) -> int:
    return (datetime.fromisoformat(iso) - _EPOCH) // timedelta(milliseconds=1)


def check(expression: str, zone: str, gap: str, fold: str, start: str, expected: list[str]) -> None:
    """Under policy (gap, fold) the occurrences after ``start`` are exactly ``expected``
    (ISO 8601 with the zone's offset), and ``count_between`` counts exactly them."""
    schedule = parse_cron(expression, zone, dst_gap=gap, dst_fold=fold)
    got = []
    t = _ms(start)
    for _ in expected:
        t = next_after(schedule, t)
        got.append(datetime.fromtimestamp(t / 1000, ZoneInfo(zone)).isoformat())
    assert got == expected
    assert count_between(schedule, _ms(start), _ms(expected[-1])) == len(expected)
    assert count_between(schedule, _ms(start), _ms(expected[-1]) - 1) == len(expected) - 1


# zone -> (expression, start, {dst_gap: occurrences}): a fixed hour whose wall time is in the gap.
GAP = {
    NY: ("30 2 * * *", "2026-03-07T12:00:00-05:00", {
        "shift": ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"],
        "skip": ["2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00"],
    }),
    LONDON: ("30 1 * * *", "2026-03-28T12:00:00+00:00", {
        "shift": ["2026-03-29T02:00:00+01:00", "2026-03-30T01:30:00+01:00"],
        "skip": ["2026-03-30T01:30:00+01:00", "2026-03-31T01:30:00+01:00"],
    }),
    LORD_HOWE: ("15 2 * * *", "2026-10-03T12:00:00+10:30", {
        "shift": ["2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"],
        "skip": ["2026-10-05T02:15:00+11:00", "2026-10-06T02:15:00+11:00"],
    }),
}  # fmt: skip

# zone -> (expression, start, {dst_fold: occurrences}): a fixed hour whose wall time repeats.
FOLD = {
    NY: ("30 1 * * *", "2026-10-31T12:00:00-04:00", {
        "first": ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"],
        "last": ["2026-11-01T01:30:00-05:00", "2026-11-02T01:30:00-05:00"],
        "both": ["2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00",
                 "2026-11-02T01:30:00-05:00"],
    }),
    LONDON: ("30 1 * * *", "2026-10-24T12:00:00+01:00", {
        "first": ["2026-10-25T01:30:00+01:00", "2026-10-26T01:30:00+00:00"],
        "last": ["2026-10-25T01:30:00+00:00", "2026-10-26T01:30:00+00:00"],
        "both": ["2026-10-25T01:30:00+01:00", "2026-10-25T01:30:00+00:00",
                 "2026-10-26T01:30:00+00:00"],
    }),
    LORD_HOWE: ("45 1 * * *", "2026-04-04T12:00:00+11:00", {
        "first": ["2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"],
        "last": ["2026-04-05T01:45:00+10:30", "2026-04-06T01:45:00+10:30"],
        "both": ["2026-04-05T01:45:00+11:00", "2026-04-05T01:45:00+10:30",
                 "2026-04-06T01:45:00+10:30"],
    }),
}  # fmt: skip

# zone -> (expression, start, {dst_fold: occurrences}) starting inside the fold's first pass:
# wall times already passed come round again, and fire there under "last" and "both".
FROM_FIRST_PASS = {
    NY: ("*/20 1 * * *", "2026-11-01T01:10:00-04:00", {
        "first": ["2026-11-01T01:20:00-04:00", "2026-11-01T01:40:00-04:00",
                  "2026-11-02T01:00:00-05:00"],
        "last": ["2026-11-01T01:00:00-05:00", "2026-11-01T01:20:00-05:00",
                 "2026-11-01T01:40:00-05:00", "2026-11-02T01:00:00-05:00"],
        "both": ["2026-11-01T01:20:00-04:00", "2026-11-01T01:40:00-04:00",
                 "2026-11-01T01:00:00-05:00", "2026-11-01T01:20:00-05:00",
                 "2026-11-01T01:40:00-05:00", "2026-11-02T01:00:00-05:00"],
    }),
    LONDON: ("15,45 1 * * *", "2026-10-25T01:30:00+01:00", {
        "first": ["2026-10-25T01:45:00+01:00", "2026-10-26T01:15:00+00:00"],
        "last": ["2026-10-25T01:15:00+00:00", "2026-10-25T01:45:00+00:00",
                 "2026-10-26T01:15:00+00:00"],
        "both": ["2026-10-25T01:45:00+01:00", "2026-10-25T01:15:00+00:00",
                 "2026-10-25T01:45:00+00:00", "2026-10-26T01:15:00+00:00"],
    }),
    LORD_HOWE: ("*/10 1 * * *", "2026-04-05T01:35:00+11:00", {
        "first": ["2026-04-05T01:40:00+11:00", "2026-04-05T01:50:00+11:00",
                  "2026-04-06T01:00:00+10:30"],
        "last": ["2026-04-05T01:30:00+10:30", "2026-04-05T01:40:00+10:30",
                 "2026-04-05T01:50:00+10:30", "2026-04-06T01:00:00+10:30"],
        "both": ["2026-04-05T01:40:00+11:00", "2026-04-05T01:50:00+11:00",
                 "2026-04-05T01:30:00+10:30", "2026-04-05T01:40:00+10:30",
                 "2026-04-05T01:50:00+10:30", "2026-04-06T01:00:00+10:30"],
    }),
}  # fmt: skip

# zone -> [(expression, start, occurrences)]: wildcard hours through the gap and the fold,
# the same under every policy (real time: gap wall times never fire, fold ones twice).
WILDCARD = {
    NY: [
        ("30 * * * *", "2026-03-08T00:00:00-05:00",
         ["2026-03-08T00:30:00-05:00", "2026-03-08T01:30:00-05:00", "2026-03-08T03:30:00-04:00"]),
        ("30 * * * *", "2026-11-01T00:00:00-04:00",
         ["2026-11-01T00:30:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00",
          "2026-11-01T02:30:00-05:00"]),
    ],
    LONDON: [
        ("*/30 * * * *", "2026-03-29T00:15:00+00:00",
         ["2026-03-29T00:30:00+00:00", "2026-03-29T02:00:00+01:00", "2026-03-29T02:30:00+01:00"]),
        ("15 * * * *", "2026-10-25T00:30:00+01:00",
         ["2026-10-25T01:15:00+01:00", "2026-10-25T01:15:00+00:00", "2026-10-25T02:15:00+00:00"]),
    ],
    LORD_HOWE: [
        ("*/20 * * * *", "2026-10-04T01:30:00+10:30",
         ["2026-10-04T01:40:00+10:30", "2026-10-04T02:40:00+11:00", "2026-10-04T03:00:00+11:00"]),
        ("*/15 * * * *", "2026-04-05T01:10:00+11:00",
         ["2026-04-05T01:15:00+11:00", "2026-04-05T01:30:00+11:00", "2026-04-05T01:45:00+11:00",
          "2026-04-05T01:30:00+10:30", "2026-04-05T01:45:00+10:30", "2026-04-05T02:00:00+10:30"]),
    ],
}  # fmt: skip

ROWS = [
    pytest.param(zone, gap, fold, id=f"{zone}-{gap}-{fold}")
    for zone in (NY, LONDON, LORD_HOWE)
    for gap, fold in POLICIES
]


@pytest.mark.parametrize(("zone", "gap", "fold"), ROWS)
def test_fixed_hour_in_the_gap(zone: str, gap: str, fold: str) -> None:
    """A fixed-hour wall time in the gap fires at the gap's end under ``shift`` (seconds and
    minutes reset, Lord Howe's ends at 02:30) and not that day under ``skip``; ``dst_fold``
    has no say in a gap."""
    expression, start, expected = GAP[zone]
    check(expression, zone, gap, fold, start, expected[gap])


@pytest.mark.parametrize(("zone", "gap", "fold"), ROWS)
def test_fixed_hour_in_the_fold(zone: str, gap: str, fold: str) -> None:
    """A fixed-hour wall time in the repeated hour fires at its first instant (``first``),
    its second (``last``) or both; ``dst_gap`` has no say in a fold."""
    expression, start, expected = FOLD[zone]
    check(expression, zone, gap, fold, start, expected[fold])


@pytest.mark.parametrize(("zone", "gap", "fold"), ROWS)
def test_fixed_hour_from_inside_the_first_pass(zone: str, gap: str, fold: str) -> None:
    """Deciding from inside a fold's first pass: the wall times already passed fire again on
    the second pass under ``last`` and ``both``, never under ``first``."""
    expression, start, expected = FROM_FIRST_PASS[zone]
    check(expression, zone, gap, fold, start, expected[fold])


@pytest.mark.parametrize(("zone", "gap", "fold"), ROWS)
def test_wildcard_hour_ignores_the_policy(zone: str, gap: str, fold: str) -> None:
    """A wildcard-hour expression follows real time whatever the policy: its gap wall times
    never fire and its fold wall times fire at each instant."""
    for expression, start, expected in WILDCARD[zone]:
        check(expression, zone, gap, fold, start, expected)


def _per_date(expression: str, zone: str, gap: str, fold: str) -> Counter[int]:
    """How many local dates of 2026-2027 have 0, 1, 2... occurrences."""
    tz = ZoneInfo(zone)
    schedule = parse_cron(expression, zone, dst_gap=gap, dst_fold=fold)
    t = _ms(datetime(2026, 1, 1, tzinfo=tz).isoformat()) - 1
    end = _ms(datetime(2028, 1, 1, tzinfo=tz).isoformat())
    counts: Counter[date] = Counter()
    while (t := next_after(schedule, t)) < end:
        counts[datetime.fromtimestamp(t / 1000, tz).date()] += 1
    return Counter([*counts.values(), *[0] * (730 - len(counts))])


@pytest.mark.parametrize(("zone", "gap", "fold"), ROWS)
def test_two_years_of_a_daily_run(zone: str, gap: str, fold: str) -> None:
    """Over 2026-2027 a daily gap-hour run misses exactly the two spring-forward days under
    ``skip`` and none under ``shift``; a daily fold-hour run fires twice on exactly the two
    fall-back days under ``both`` and once every day under ``first`` and ``last``. (London's
    gap and fold are the same wall hour, so its one expression is in both.)"""
    missed = 2 if gap == "skip" else 0
    doubled = 2 if fold == "both" else 0
    both = zone == LONDON  # "30 1" is in London's gap and in its fold
    gap_expression, fold_expression = GAP[zone][0], FOLD[zone][0]
    extra = doubled if both else 0
    expected = Counter({1: 730 - missed - extra, 0: missed, 2: extra})
    assert _per_date(gap_expression, zone, gap, fold) == +expected
    extra = missed if both else 0
    expected = Counter({1: 730 - doubled - extra, 2: doubled, 0: extra})
    assert _per_date(fold_expression, zone, gap, fold) == +expected


def test_policy_defaults_are_the_vixie_rule() -> None:
    """The defaults, ``shift`` and ``first``, are docs/contract.md §3's rule: a schedule parsed
    without a policy equals one parsed with the defaults spelled out."""
    assert parse_cron("30 2 * * *", NY) == parse_cron(
        "30 2 * * *", NY, dst_gap="shift", dst_fold="first"
    )
    assert parse_cron("30 2 * * *", NY) != parse_cron("30 2 * * *", NY, dst_gap="skip")


@pytest.mark.parametrize(
    ("gap", "fold", "message"),
    [
        ("later", "first", "dst_gap: 'later' is not one of shift, skip"),
        ("shift", "twice", "dst_fold: 'twice' is not one of first, last, both"),
        ("Shift", "first", "dst_gap: 'Shift' is not one of shift, skip"),
    ],
)
def test_bad_policy_names_its_field(gap: str, fold: str, message: str) -> None:
    """An unknown policy is a ``CronError`` whose one-line message names the field."""
    with pytest.raises(CronError) as caught:
        parse_cron("30 2 * * *", NY, dst_gap=gap, dst_fold=fold)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("fold", "next_iso", "passed"),
    [
        ("first", "2026-11-01T01:30:00-04:00", 1),
        ("last", "2026-11-01T01:30:00-05:00", 1),
        ("both", "2026-11-01T01:30:00-04:00", 2),
    ],
)
def test_decide_uses_the_specs_policy(fold: str, next_iso: str, passed: int) -> None:
    """``decide`` follows the policy its spec's cron was parsed with: the cursor after the
    day before's 01:30 is the fall-back day's first, second or first 01:30, and a
    ``fire_once`` Fire found after both passes over one, one or two occurrences."""
    spec = TriggerSpec(cron=parse_cron("30 1 * * *", NY, dst_fold=fold), misfire_policy="fire_once")
    day_before = _ms("2026-10-31T01:30:00-04:00")
    on_time = decide(spec, day_before, day_before)
    assert on_time == Fire(scheduled_for_ms=day_before, next_ms=_ms(next_iso), coalesced=0)
    late = decide(spec, day_before, _ms("2026-11-01T01:45:00-05:00"))
    assert late == Fire(
        scheduled_for_ms=day_before, next_ms=_ms("2026-11-02T01:30:00-05:00"), coalesced=passed
    )
