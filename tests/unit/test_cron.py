"""Cron syntax and its meaning (docs/contract.md §3), away from DST: pinned by hand-computed tables.

Every expected time below was worked out from the rule and a calendar (2026-01-01 is a
Thursday), not copied from the code's output. DST lives in ``test_cron_dst.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import msgspec
import pytest

from qlsched.core.cron import CronError, iter_after, next_after, parse_cron

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ms(iso: str) -> int:
    return (datetime.fromisoformat(iso) - _EPOCH) // timedelta(milliseconds=1)


def check(expression: str, zone: str, start: str, expected: list[str]) -> None:
    """The occurrences after ``start`` are exactly ``expected``, in order (ISO 8601 with the
    offset the zone has at each)."""
    schedule = parse_cron(expression, zone)
    got = []
    t = _ms(start)
    for _ in expected:
        t = next_after(schedule, t)
        got.append(datetime.fromtimestamp(t / 1000, ZoneInfo(zone)).isoformat())
    assert got == expected


JAN1 = "2026-01-01T00:00:00+00:00"  # a Thursday
DEC31 = "2025-12-31T12:00:00+00:00"

SYNTAX = [
    pytest.param(
        "* * * * *",
        JAN1,
        ["2026-01-01T00:01:00+00:00", "2026-01-01T00:02:00+00:00"],
        id="every-minute",
    ),
    pytest.param(
        "*/5 * * * * *",
        JAN1,
        ["2026-01-01T00:00:05+00:00", "2026-01-01T00:00:10+00:00", "2026-01-01T00:00:15+00:00"],
        id="six-fields-every-5s",
    ),
    pytest.param(
        "30 * * * * *",
        JAN1,
        ["2026-01-01T00:00:30+00:00", "2026-01-01T00:01:30+00:00"],
        id="six-fields-seconds-first-not-last",
    ),
    pytest.param(
        "0 30 * * * *",
        JAN1,
        ["2026-01-01T00:30:00+00:00", "2026-01-01T01:30:00+00:00"],
        id="six-fields-minute-second",
    ),
    pytest.param(
        "0 0 12 * * 1-5/2",
        JAN1,
        ["2026-01-02T12:00:00+00:00", "2026-01-05T12:00:00+00:00", "2026-01-07T12:00:00+00:00"],
        id="six-fields-weekday-step",
    ),
    pytest.param(
        "@hourly", JAN1, ["2026-01-01T01:00:00+00:00", "2026-01-01T02:00:00+00:00"], id="@hourly"
    ),
    pytest.param(
        "@daily", JAN1, ["2026-01-02T00:00:00+00:00", "2026-01-03T00:00:00+00:00"], id="@daily"
    ),
    pytest.param("@DAILY", JAN1, ["2026-01-02T00:00:00+00:00"], id="@daily-any-case"),
    pytest.param("@midnight", JAN1, ["2026-01-02T00:00:00+00:00"], id="@midnight"),
    pytest.param(
        "@weekly",
        JAN1,
        ["2026-01-04T00:00:00+00:00", "2026-01-11T00:00:00+00:00"],
        id="@weekly-sunday",
    ),
    pytest.param(
        "@monthly", JAN1, ["2026-02-01T00:00:00+00:00", "2026-03-01T00:00:00+00:00"], id="@monthly"
    ),
    pytest.param(
        "@yearly", JAN1, ["2027-01-01T00:00:00+00:00", "2028-01-01T00:00:00+00:00"], id="@yearly"
    ),
    pytest.param("@annually", JAN1, ["2027-01-01T00:00:00+00:00"], id="@annually"),
    pytest.param(
        "0 9 * JAN,jul mon-FRI",
        JAN1,
        ["2026-01-01T09:00:00+00:00", "2026-01-02T09:00:00+00:00", "2026-01-05T09:00:00+00:00"],
        id="names-any-case",
    ),
    pytest.param(
        "0 1-5/2 * * *",
        JAN1,
        [
            "2026-01-01T01:00:00+00:00",
            "2026-01-01T03:00:00+00:00",
            "2026-01-01T05:00:00+00:00",
            "2026-01-02T01:00:00+00:00",
        ],
        id="range-step",
    ),
    pytest.param(
        "5/20 * * * *",
        JAN1,
        [
            "2026-01-01T00:05:00+00:00",
            "2026-01-01T00:25:00+00:00",
            "2026-01-01T00:45:00+00:00",
            "2026-01-01T01:05:00+00:00",
        ],
        id="start-step",
    ),
    pytest.param(
        "59/15 * * * *",
        JAN1,
        ["2026-01-01T00:59:00+00:00", "2026-01-01T01:59:00+00:00"],
        id="start-step-at-field-max",
    ),
    pytest.param(
        "5-5 * * * *",
        JAN1,
        ["2026-01-01T00:05:00+00:00", "2026-01-01T01:05:00+00:00"],
        id="equal-range-is-one-value",
    ),
    pytest.param(
        "0 0 * JAN-JAN *",
        "2026-01-31T12:00:00+00:00",
        ["2027-01-01T00:00:00+00:00", "2027-01-02T00:00:00+00:00"],
        id="equal-name-range-is-one-month",
    ),
    pytest.param(
        "0 0 1,15 * *",
        JAN1,
        ["2026-01-15T00:00:00+00:00", "2026-02-01T00:00:00+00:00", "2026-02-15T00:00:00+00:00"],
        id="list",
    ),
    pytest.param(
        "0 0 * * 7",
        JAN1,
        ["2026-01-04T00:00:00+00:00", "2026-01-11T00:00:00+00:00"],
        id="dow-7-sunday",
    ),
    pytest.param("0 0 * * 0", JAN1, ["2026-01-04T00:00:00+00:00"], id="dow-0-sunday"),
    pytest.param(
        "0 0 * * 5-7",
        JAN1,
        [
            "2026-01-02T00:00:00+00:00",
            "2026-01-03T00:00:00+00:00",
            "2026-01-04T00:00:00+00:00",
            "2026-01-09T00:00:00+00:00",
        ],
        id="dow-range-to-7",
    ),
]


@pytest.mark.parametrize(("expression", "start", "expected"), SYNTAX)
def test_syntax(expression: str, start: str, expected: list[str]) -> None:
    """Fields, names, lists, ranges, steps, aliases and seconds-first six-field expressions
    mean what cron means (docs/contract.md §3), with two croniter readings corrected: ``5-5`` is
    minute 5, not every minute, and ``JAN-JAN`` is January."""
    check(expression, "UTC", start, expected)


DAY_RULE = [
    pytest.param(
        "0 0 13 * 5",
        JAN1,
        [
            "2026-01-02T00:00:00+00:00",
            "2026-01-09T00:00:00+00:00",
            "2026-01-13T00:00:00+00:00",
            "2026-01-16T00:00:00+00:00",
        ],
        id="both-restricted-or",
    ),
    pytest.param(
        "0 0 1-7 * 1",
        DEC31,
        [f"2026-01-0{d}T00:00:00+00:00" for d in range(1, 8)] + ["2026-01-12T00:00:00+00:00"],
        id="days-1-7-or-monday-is-not-first-monday",
    ),
    pytest.param(
        "0 0 */2 * 1",
        JAN1,
        ["2026-01-05T00:00:00+00:00", "2026-01-19T00:00:00+00:00", "2026-02-09T00:00:00+00:00"],
        id="dom-star-step-ands",
    ),
    pytest.param(
        "0 0 1 * */2",
        DEC31,
        [
            "2026-01-01T00:00:00+00:00",
            "2026-02-01T00:00:00+00:00",
            "2026-03-01T00:00:00+00:00",
            "2026-08-01T00:00:00+00:00",
        ],
        id="dow-star-step-ands",
    ),
    pytest.param(
        "0 0 ? * MON",
        JAN1,
        ["2026-01-05T00:00:00+00:00", "2026-01-12T00:00:00+00:00"],
        id="question-mark-dom",
    ),
    pytest.param(
        "0 0 1 * ?",
        JAN1,
        ["2026-02-01T00:00:00+00:00", "2026-03-01T00:00:00+00:00"],
        id="question-mark-dow",
    ),
    pytest.param(
        "0 0 30 2 1",
        JAN1,
        ["2026-02-02T00:00:00+00:00", "2026-02-09T00:00:00+00:00"],
        id="impossible-dom-still-fires-by-dow",
    ),
    pytest.param(
        "0 0 29 2 *",
        JAN1,
        ["2028-02-29T00:00:00+00:00", "2032-02-29T00:00:00+00:00"],
        id="feb-29-leap-years",
    ),
    pytest.param(
        "0 0 29 2 *",
        "2097-01-01T00:00:00+00:00",
        ["2104-02-29T00:00:00+00:00"],
        id="feb-29-skips-2100",
    ),
]


@pytest.mark.parametrize(("expression", "start", "expected"), DAY_RULE)
def test_day_of_month_and_day_of_week(expression: str, start: str, expected: list[str]) -> None:
    """Both day fields restricted: a day matches either; either begins with ``*`` (or is
    ``?``): both must match (Vixie's reading, docs/contract.md §3)."""
    check(expression, "UTC", start, expected)


INSTANTS = [
    pytest.param(
        "0 * * * *", "2026-01-01T01:00:00+00:00", ["2026-01-01T02:00:00+00:00"], id="at-occurrence"
    ),
    pytest.param(
        "0 * * * *",
        "2026-01-01T00:59:59.999+00:00",
        ["2026-01-01T01:00:00+00:00"],
        id="one-ms-before",
    ),
    pytest.param(
        "0 * * * *",
        "2026-01-01T01:00:00.001+00:00",
        ["2026-01-01T02:00:00+00:00"],
        id="one-ms-after",
    ),
    pytest.param(
        "* * * * * *",
        "1969-12-31T23:59:59.500+00:00",
        ["1970-01-01T00:00:00+00:00", "1970-01-01T00:00:01+00:00"],
        id="negative-ms-floor",
    ),
    pytest.param(
        "0 0 1 1 *", "1960-06-01T00:00:00+00:00", ["1961-01-01T00:00:00+00:00"], id="before-1970"
    ),
    pytest.param(
        "  0  12 * *\t*  ",
        JAN1,
        ["2026-01-01T12:00:00+00:00", "2026-01-02T12:00:00+00:00"],
        id="whitespace",
    ),
]


@pytest.mark.parametrize(("expression", "start", "expected"), INSTANTS)
def test_strictly_after(expression: str, start: str, expected: list[str]) -> None:
    """``next_after(t)`` is the first occurrence strictly after ``t``, to the millisecond;
    occurrences are whole seconds, before the epoch too."""
    check(expression, "UTC", start, expected)


ZONES = [
    pytest.param(
        "0 0 * * *",
        "Etc/GMT-14",
        JAN1,
        ["2026-01-02T00:00:00+14:00", "2026-01-03T00:00:00+14:00"],
        id="Etc/GMT-14-is-UTC+14",
    ),
    pytest.param(
        "30 2 * * *",
        "Asia/Kolkata",
        JAN1,
        ["2026-01-02T02:30:00+05:30", "2026-01-03T02:30:00+05:30"],
        id="Asia/Kolkata-half-hour",
    ),
    pytest.param(
        "0 3 * * *",
        "Asia/Shanghai",
        JAN1,
        ["2026-01-02T03:00:00+08:00", "2026-01-03T03:00:00+08:00"],
        id="Asia/Shanghai",
    ),
]


@pytest.mark.parametrize(("expression", "zone", "start", "expected"), ZONES)
def test_wall_time_in_zone(expression: str, zone: str, start: str, expected: list[str]) -> None:
    """Fields are read on the wall clock of the trigger's IANA zone, not UTC."""
    check(expression, zone, start, expected)


REJECTED = [
    pytest.param("60 * * * *", "UTC", "minute: 60 is out of range 0-59", id="minute-60"),
    pytest.param("0 24 * * *", "UTC", "hour: 24 is out of range 0-23", id="hour-24"),
    pytest.param("0 25 * * *", "UTC", "hour: 25 is out of range 0-23", id="hour-25"),
    pytest.param("0 0 0 * *", "UTC", "day-of-month: 0 is out of range 1-31", id="dom-0"),
    pytest.param("0 0 32 * *", "UTC", "day-of-month: 32 is out of range 1-31", id="dom-32"),
    pytest.param("0 0 * 0 *", "UTC", "month: 0 is out of range 1-12", id="month-0"),
    pytest.param("0 0 * 13 *", "UTC", "month: 13 is out of range 1-12", id="month-13"),
    pytest.param("0 0 * * 8", "UTC", "day-of-week: 8 is out of range 0-7", id="dow-8"),
    pytest.param("60 * * * * *", "UTC", "second: 60 is out of range 0-59", id="second-60"),
    pytest.param("0 1-24 * * *", "UTC", "hour: 24 is out of range 0-23", id="range-end"),
    pytest.param("* * * *", "UTC", "expression: expected 5 fields", id="4-fields"),
    pytest.param("* * * * * * *", "UTC", "expression: expected 5 fields", id="7-fields"),
    pytest.param("", "UTC", "expression: expected 5 fields", id="empty"),
    pytest.param("@reboot", "UTC", "expression: unknown alias '@reboot'", id="@reboot"),
    pytest.param("0 0 L * *", "UTC", "day-of-month: 'L'", id="L-dom"),
    pytest.param("0 0 * * 5L", "UTC", "day-of-week: 'L'", id="L-dow"),
    pytest.param("0 0 15W * *", "UTC", "day-of-month: 'W'", id="W"),
    pytest.param("0 0 LW * *", "UTC", "day-of-month: 'W'", id="LW"),
    pytest.param("0 0 * * 1#2", "UTC", "day-of-week: '#'", id="hash-nth"),
    pytest.param("0 0 * * MON#2", "UTC", "day-of-week: '#'", id="hash-nth-name"),
    pytest.param("H * * * *", "UTC", "minute: 'H'", id="H"),
    pytest.param("0 H(0-5)/2 * * *", "UTC", "hour: 'H'", id="H-range-step"),
    pytest.param("0 0 30 2 *", "UTC", "day-of-month: day(s) 30 never occur", id="feb-30"),
    pytest.param("0 0 31 4 *", "UTC", "day-of-month: day(s) 31 never occur", id="apr-31"),
    pytest.param("0 0 31 4,6,9,11 ?", "UTC", "day-of-month: day(s) 31 never", id="31-short"),
    pytest.param("0 0 30,31 FEB *", "UTC", "day-of-month: day(s) 30,31 never", id="feb-30-31"),
    pytest.param("*/0 * * * *", "UTC", "minute: step '0' is out of range 1-60", id="step-0"),
    pytest.param("0 */25 * * *", "UTC", "hour: step '25' is out of range 1-24", id="step-big"),
    pytest.param("22-2 * * * *", "UTC", "minute: range 22-2 runs backwards", id="backwards"),
    pytest.param("0 0 * * FRI-MON", "UTC", "day-of-week: range FRI-MON runs", id="backwards-name"),
    pytest.param("MON * * * *", "UTC", "minute: 'MON' is not a number", id="name-wrong-field"),
    pytest.param("0 0 * FOO *", "UTC", "month: 'FOO' is not a number or a name", id="bad-name"),
    pytest.param("1,,2 * * * *", "UTC", "minute: empty list item", id="empty-item"),
    pytest.param("-1 * * * *", "UTC", "minute: '-1' is not a value", id="negative"),
    pytest.param("1-2-3 * * * *", "UTC", "minute: '1-2-3' is not a value", id="double-range"),
    pytest.param("? * * * *", "UTC", "minute: '?' is not a value", id="question-mark-minute"),
    pytest.param("* * * * *", "Mars/Olympus_Mons", "timezone: unknown IANA zone", id="zone"),
    pytest.param("* * * * *", "", "timezone: unknown IANA zone", id="zone-empty"),
    pytest.param("* * * * *", "America", "timezone: unknown IANA zone", id="zone-directory"),
    pytest.param("* * * * *", "utc", "timezone: unknown IANA zone", id="zone-case"),
    pytest.param("* * * * *", "../etc/passwd", "timezone: unknown IANA zone", id="zone-path"),
    pytest.param("* * * * *", "localtime", "timezone: 'localtime' depends on", id="localtime"),
]


@pytest.mark.parametrize(("expression", "zone", "message"), REJECTED)
def test_rejected(expression: str, zone: str, message: str) -> None:
    """What cannot be used is refused at parse time with a ``CronError`` whose message
    starts with the field at fault: out-of-range values, wrong field counts, ``L W # H``,
    expressions that can never fire, unknown zones (docs/contract.md §3)."""
    with pytest.raises(CronError) as caught:
        parse_cron(expression, zone)
    assert str(caught.value).startswith(message)
    assert isinstance(caught.value, ValueError)


def test_parse_once_value_semantics() -> None:
    """A schedule is a frozen value: the same input parses equal (and hashes equal), it
    survives a msgspec round trip, and it keeps the expression and zone it was given."""
    a = parse_cron("*/15 9-17 * * MON-FRI", "Europe/London")
    b = parse_cron("*/15 9-17 * * MON-FRI", "Europe/London")
    assert a == b
    assert hash(a) == hash(b)
    assert (a.expression, a.timezone) == ("*/15 9-17 * * MON-FRI", "Europe/London")
    assert msgspec.json.decode(msgspec.json.encode(a), type=type(a)) == a
    assert parse_cron("*/15 9-17 * * MON-FRI").timezone == "UTC"
    with pytest.raises(AttributeError):
        a.expression = "* * * * *"  # type: ignore[misc]


def test_iter_after_matches_next_after() -> None:
    """``iter_after`` is ``next_after`` applied repeatedly, nothing more."""
    schedule = parse_cron("*/7 * * * * *", "UTC")
    it = iter_after(schedule, _ms(JAN1))
    t = _ms(JAN1)
    for _ in range(20):
        t = next_after(schedule, t)
        assert next(it) == t
