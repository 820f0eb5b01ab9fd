"""``count_between`` counts exactly what a chain of ``next_after`` calls visits (issue #14,
hole 3): the passed-over count a late ``fire_once`` Fire records is exact, and its cost does
not grow with how many occurrences it passes over."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from qlsched.core.cron import CronSchedule, next_after, parse_cron
from qlsched.core.cron_count import count_between
from tests.unit.test_cron_properties import (
    DST_FOLD_POLICIES,
    DST_GAP_POLICIES,
    DST_ZONES,
    FIXED_ZONES,
    INSTANTS,
    Reference,
    _parse_or_skip,
    expressions,
    fires_at,
    frequent_expressions,
    transitions,
)

STEP_LIMIT = 20_000


def stepped(schedule: CronSchedule, after_ms: int, until_ms: int) -> int | None:
    """The reference: occurrences in ``(after_ms, until_ms]`` by stepping, or None when
    there are too many to step through."""
    n, t = 0, after_ms
    while (t := next_after(schedule, t)) <= until_ms:
        n += 1
        if n > STEP_LIMIT:
            return None
    return n


def check(schedule: CronSchedule, after_ms: int, until_ms: int) -> None:
    expected = stepped(schedule, after_ms, until_ms)
    assume(expected is not None)
    assert count_between(schedule, after_ms, until_ms) == expected


@given(frequent_expressions(), st.sampled_from(DST_ZONES), st.data())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_counts_across_real_transitions(expression: str, zone: str, data: st.DataObject) -> None:
    """Rule: across DST transitions (gaps, folds, 30-minute and 2-hour shifts, negative DST,
    a skipped day), in both DST readings (wildcard and fixed hour), the count equals the
    number of occurrences ``next_after`` steps through."""
    schedule = parse_cron(expression, zone)
    shift = data.draw(st.sampled_from(transitions(zone)), label="transition")
    after = shift + data.draw(st.integers(-2 * 86_400, 2 * 3600), label="after_s")
    span = data.draw(st.integers(0, 3 * 86_400), label="span_s")
    ms = data.draw(st.integers(0, 999), label="ms")
    check(schedule, after * 1000 + ms, (after + span) * 1000 + ms)


POLICY_ZONES = ["America/New_York", "Europe/London", "Australia/Lord_Howe"]


@given(
    frequent_expressions(),
    st.sampled_from(POLICY_ZONES),
    DST_GAP_POLICIES,
    DST_FOLD_POLICIES,
    st.data(),
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_counts_under_every_dst_policy(
    expression: str, zone: str, gap: str, fold: str, data: st.DataObject
) -> None:
    """Rule (docs/contract.md §3): under every ``dst_gap`` x ``dst_fold`` policy, over a
    range across a real transition, ``count_between`` equals both the occurrences
    ``next_after`` steps through and a brute-force walk over instants applying the policy
    literally (``fires_at``), so the passed-over count ``decide`` records is exact."""
    schedule = parse_cron(expression, zone, dst_gap=gap, dst_fold=fold)
    shift = data.draw(st.sampled_from(transitions(zone)), label="transition")
    six_fields = len(expression.split()) == 6
    step, reach = (1, 2 * 3600) if six_fields else (60, 36 * 3600)
    after = shift - data.draw(st.integers(0, reach), label="before_s")
    until = after + data.draw(st.integers(0, reach), label="span_s")
    ms = data.draw(st.integers(0, 999), label="ms")
    counted = count_between(schedule, after * 1000 + ms, until * 1000 + ms)
    assert counted == stepped(schedule, after * 1000 + ms, until * 1000 + ms)
    first = after - after % step + step
    ref, tz = Reference(expression), ZoneInfo(zone)
    brute = sum(fires_at(ref, tz, u, step, gap, fold) for u in range(first, until + 1, step))
    assert counted == brute


@given(expressions(), st.sampled_from(DST_ZONES + FIXED_ZONES), INSTANTS, st.data())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_counts_any_expression_over_long_spans(
    expression: str, zone: str, start: int, data: st.DataObject
) -> None:
    """Rule: for any grammatical expression, zone and span (up to two years, month and year
    boundaries, leap days), the count equals the stepped count whenever stepping is
    affordable."""
    schedule = _parse_or_skip(expression, zone)
    span = data.draw(st.integers(0, 2 * 366 * 86_400_000), label="span_ms")
    check(schedule, start, start + span)


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/New_York"])
def test_a_year_of_every_second_is_counted_exactly(zone: str) -> None:
    """Rule: an every-second schedule a year late counts every second of the year; the
    real-time reading means DST changes neither the count nor the seconds (365 days of
    31,536,000 seconds), where stepping would take 31 million calls."""
    schedule = parse_cron("* * * * * *", zone)
    start = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    assert count_between(schedule, start, start + 365 * 86_400_000) == 365 * 86_400


def test_a_fixed_hour_counts_a_fold_once_and_a_gap_once() -> None:
    """Rule (docs/contract.md §3, fixed hour): in New York, ``*/15 1 * * *`` fires its four
    times once on the fall-back day (not eight), and ``30 2 * * *`` fires once on the
    spring-forward day (at 03:00, its wall time being in the gap)."""
    fold_day = 1_793_505_600_000  # 2026-11-01T04:00:00Z, midnight in New York
    assert (
        count_between(
            parse_cron("*/15 1 * * *", "America/New_York"), fold_day, fold_day + 86_400_000
        )
        == 4
    )
    gap_day = 1_772_946_000_000  # 2026-03-08T05:00:00Z, midnight in New York
    assert (
        count_between(parse_cron("30 2 * * *", "America/New_York"), gap_day, gap_day + 86_400_000)
        == 1
    )
