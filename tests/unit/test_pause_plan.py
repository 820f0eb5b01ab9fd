"""``core.pause``: what a resume does to a paused row (docs/contract.md §10). The latest
occurrence inside the pause is the one stepping ``next_after`` would reach last, across DST
transitions; the counts and the new cursor follow the module's table exactly."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from qlsched.core.cron import CronSchedule, next_after, parse_cron
from qlsched.core.pause import CatchUp, ResumePlan, latest_occurrence, plan_resume
from tests.unit.test_cron_properties import DST_ZONES, frequent_expressions, transitions

STEP_LIMIT = 20_000


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def stepped_last(schedule: CronSchedule, after_ms: int, until_ms: int) -> int | None:
    """The reference: the last occurrence in ``(after_ms, until_ms]`` by stepping (or
    ``-1`` when there are too many to step through)."""
    last, t, n = None, after_ms, 0
    while (t := next_after(schedule, t)) <= until_ms:
        last, n = t, n + 1
        if n > STEP_LIMIT:
            return -1
    return last


@given(frequent_expressions(), st.sampled_from(DST_ZONES), st.data())
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_latest_occurrence_is_the_last_one_stepping_reaches(
    expression: str, zone: str, data: st.DataObject
) -> None:
    """Rule: across DST gaps and folds, in both DST readings, ``latest_occurrence`` is the
    last occurrence a chain of ``next_after`` calls visits in the interval (None if none)."""
    schedule = parse_cron(expression, zone)
    shift = data.draw(st.sampled_from(transitions(zone)), label="transition")
    after = shift + data.draw(st.integers(-2 * 86_400, 2 * 3600), label="after_s")
    span = data.draw(st.integers(0, 3 * 86_400), label="span_s")
    extra = data.draw(st.integers(0, 999), label="ms")
    lo, hi = after * 1000 + extra, (after + span) * 1000 + extra
    expected = stepped_last(schedule, lo, hi)
    assume(expected != -1)
    assert latest_occurrence(schedule, lo, hi) == expected


def test_the_latest_of_a_year_of_seconds_costs_a_bisection() -> None:
    """Rule: an every-second schedule a year long gives its last second, without stepping
    through the 31 million before it."""
    schedule = parse_cron("* * * * * *", "Europe/Berlin")
    until = ms("2026-03-29T12:00:00.500")
    assert latest_occurrence(schedule, until - 365 * 86_400_000, until) == until - 500


def check(
    cron: str,
    *,
    cursor: str | None,
    now: str,
    catch_up: CatchUp,
    expected: ResumePlan,
    since: str = "2026-01-01T00:00:00",
    zone: str = "UTC",
) -> None:
    plan = plan_resume(
        parse_cron(cron, zone),
        cursor_ms=None if cursor is None else ms(cursor),
        since_ms=ms(since),
        now_ms=ms(now),
        catch_up=catch_up,
    )
    assert plan == expected


NOW = "2026-06-01T12:30:30"


@pytest.mark.parametrize(
    ("cron", "cursor", "catch_up", "expected"),
    [
        pytest.param(
            "0 * * * *",
            "2026-06-01T09:00:00",
            "skip",
            ResumePlan(ms("2026-06-01T13:00:00"), None, inside=4, paused=4),
            id="skip: cursor 09:00, now 12:30: 09, 10, 11, 12 counted",
        ),
        pytest.param(
            "0 * * * *",
            "2026-06-01T09:00:00",
            "fire_once",
            ResumePlan(ms("2026-06-01T12:00:00"), ms("2026-06-01T12:00:00"), inside=4, paused=3),
            id="fire_once: 12:00 left to fire, the other three counted",
        ),
        pytest.param(
            "0 * * * *",
            "2026-06-01T12:00:00",
            "fire_once",
            ResumePlan(ms("2026-06-01T12:00:00"), ms("2026-06-01T12:00:00"), inside=1, paused=0),
            id="fire_once: only the cursor itself inside",
        ),
        pytest.param(
            "0 * * * *",
            "2026-06-01T13:00:00",
            "fire_once",
            ResumePlan(ms("2026-06-01T13:00:00"), None, inside=0, paused=0),
            id="cursor still ahead: kept, nothing counted",
        ),
        pytest.param(
            "0 * * * *",
            None,
            "skip",
            ResumePlan(
                ms("2026-06-01T13:00:00"),
                None,
                inside=3,
                paused=3,
                decided_from_ms=ms("2026-06-01T10:00:00"),
            ),
            id="no cursor: from the later of pause and publish (09:30): 10, 11, 12",
        ),
        pytest.param(
            "0 0 * * *",
            None,
            "fire_once",
            ResumePlan(None, None, inside=0, paused=0),
            id="no cursor, nothing inside: left for the first round to initialise",
        ),
    ],
)
def test_resume_plans(
    cron: str, cursor: str | None, catch_up: CatchUp, expected: ResumePlan
) -> None:
    """Rule: the module's table: skip counts every occurrence from the cursor (inclusive)
    to now and moves the cursor past now; fire_once leaves the latest at the cursor, marked
    to catch up, and counts the rest; a cursor still ahead is kept; without a cursor the
    count starts after the later of the pause and the revision, and the row's accounting
    window starts at the first occurrence it counts."""
    check(
        cron,
        cursor=cursor,
        now=NOW,
        catch_up=catch_up,
        expected=expected,
        since="2026-06-01T09:30:00",
    )


def test_a_fixed_hour_in_a_fold_is_counted_once() -> None:
    """Rule: a pause over a fall-back night counts a fixed-hour job's repeated wall time
    once (the DST rule the scheduler fires by), and fire_once picks that single instant."""
    # New York, 2026-11-01: 01:30 EDT (05:30Z) happens, 01:30 EST (06:30Z) is not fired.
    check(
        "30 1 * * *",
        cursor="2026-10-31T05:30:00",
        now="2026-11-01T12:00:00",
        zone="America/New_York",
        catch_up="fire_once",
        expected=ResumePlan(
            ms("2026-11-01T05:30:00"), ms("2026-11-01T05:30:00"), inside=2, paused=1
        ),
    )
