"""Jitter: an occurrence scheduled for S becomes due at S + h (docs/contract.md §10).

``h`` is the first 56 bits of SHA-256 over ``ql3:jitter:v1:<project>:<trigger>:<revision>:<S>``
(ASCII: ids are ``[a-z0-9_.-]``, numbers are decimal) modulo the trigger's ``jitter_ms``, and
0 when ``jitter_ms`` is 0. Nothing in it depends on a clock, a process or a replica, so every
replica and every takeover computes the same due time. PostgreSQL computes the same value in
``qlsched.jitter_offset_ms`` (migration 0008), which its generated ``due_at_ms`` column uses;
a test on real PostgreSQL holds the two equal.

``jitter_ms`` must stay below the trigger's shortest period between two consecutive
occurrences (``shortest_period_ms``): then ``S + h`` comes before the next occurrence, so
occurrences stay due in order and at most one occurrence is both past and not yet due at
any instant (what ``decide`` relies on to keep such an occurrence as the cursor).
"""

from __future__ import annotations

import hashlib
import itertools
from datetime import UTC, datetime
from functools import lru_cache
from typing import Final

import msgspec

from qlsched.core.cron import CronSchedule, _month, _zone, next_after
from qlsched.core.cron_count import _transitions

JITTER_MS_MAX: Final = 3_600_000
"""One hour: the largest ``jitter_ms`` a trigger may have (the schema's CHECK too)."""
_DAY_S: Final = 86_400
_SAMPLE_FROM_S: Final = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp())
_SAMPLE_TO_S: Final = int(datetime(2054, 1, 1, tzinfo=UTC).timestamp())
"""28 years of a zone's transitions: weekdays and leap years repeat every 28 years between
1901 and 2099, so a rule-based zone's transitions fall here on every date and weekday they
ever will (a tzdata rule change is re-checked at the next publish, which validates again)."""


def jitter_offset_ms(
    project_id: str, trigger_id: str, trigger_revision: int, scheduled_for_ms: int, jitter_ms: int
) -> int:
    """``h`` of one occurrence: 0 <= h < jitter_ms (0 when jitter_ms is 0)."""
    if jitter_ms <= 0:
        return 0
    text = f"ql3:jitter:v1:{project_id}:{trigger_id}:{trigger_revision}:{scheduled_for_ms}"
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:7], "big") % jitter_ms


class Jitter(msgspec.Struct, frozen=True):
    """A trigger revision's jitter: what ``decide`` needs to find an occurrence's due time."""

    project_id: str
    trigger_id: str
    trigger_revision: int
    jitter_ms: int

    def offset_ms(self, scheduled_for_ms: int) -> int:
        return jitter_offset_ms(
            self.project_id,
            self.trigger_id,
            self.trigger_revision,
            scheduled_for_ms,
            self.jitter_ms,
        )


def _values(mask: int) -> list[int]:
    return [v for v in range(mask.bit_length()) if mask >> v & 1]


def _min_step(values: list[int]) -> int | None:
    steps = [b - a for a, b in itertools.pairwise(values)]
    return min(steps) if steps else None


def _consecutive_days(s: CronSchedule) -> bool:
    """Whether two consecutive calendar days both match, in one 400-year Gregorian cycle
    (the calendar repeats after it, weekdays included)."""
    previous_last = False  # the last day of the month before matched (and is adjacent)
    for y in range(2000, 2400):
        for mo in range(1, 13):
            if not s.month_mask >> mo & 1:
                previous_last = False
                continue
            _first, weekday, length = _month(y, mo)
            days = s.day_masks[weekday] & length
            if days & (days >> 1) or (previous_last and days & 2):
                return True
            previous_last = bool(days >> (length.bit_length() - 1) & 1)
    return False


def _wall_period_s(s: CronSchedule) -> int:
    """The shortest step between consecutive matching wall times (naive local seconds),
    exact up to ``JITTER_MS_MAX`` (a longer one may be reported shorter, still above it)."""
    seconds, minutes, hours = _values(s.second_mask), _values(s.minute_mask), _values(s.hour_mask)
    first = hours[0] * 3600 + minutes[0] * 60 + seconds[0]
    last = hours[-1] * 3600 + minutes[-1] * 60 + seconds[-1]
    steps: list[int] = []
    if (ds := _min_step(seconds)) is not None:
        steps.append(ds)
    if (dm := _min_step(minutes)) is not None:
        steps.append(dm * 60 + seconds[0] - seconds[-1])
    if (dh := _min_step(hours)) is not None:
        steps.append(dh * 3600 + minutes[0] * 60 + seconds[0] - minutes[-1] * 60 - seconds[-1])
    # Across midnight: from a day's last time to the next matching day's first. Only
    # consecutive matching days can make it shorter than a day, and only a step within the
    # largest jitter matters: the calendar is searched for such days only then.
    across = _DAY_S - (last - first)
    if across * 1000 > JITTER_MS_MAX or _consecutive_days(s):
        steps.append(across)
    else:
        steps.append(across + _DAY_S)
    return min(steps)


@lru_cache(maxsize=1024)
def shortest_period_ms(schedule: CronSchedule, limit_ms: int = JITTER_MS_MAX + 1) -> int:
    """The shortest real time between two consecutive occurrences, exact when below
    ``limit_ms`` (else ``limit_ms``): what ``jitter_ms`` must stay below.

    Why it is sound: away from a UTC-offset change, consecutive occurrences are consecutive
    matching wall times (or further apart, when a fold's repeats do not fire), so their
    distance is at least the shortest step between matching wall times, which the fields
    give exactly (``_wall_period_s``). A pair closer than that must straddle an offset
    change (a shifted gap time, a fold's repeat), so both occurrences lie within that much
    of the change: around each change of the sample those few occurrences are enumerated
    with ``next_after``, the function the decisions use, so the DST policy is the trigger's.
    """
    period = min(_wall_period_s(schedule) * 1000, limit_ms)
    if schedule.utc_offset is not None:
        return period
    zone = _zone(schedule.timezone)
    for instant, _before, _after in _transitions(
        zone, schedule.timezone, _SAMPLE_FROM_S, _SAMPLE_TO_S
    ):
        change_ms = instant * 1000
        t = next_after(schedule, change_ms - period - 1000)
        while t <= change_ms + period:
            later = next_after(schedule, t)
            period = min(period, later - t)
            t = later
    return period


def jitter_problem(jitter_ms: int, schedule: CronSchedule) -> str | None:
    """Why ``jitter_ms`` cannot be a jitter of a trigger on ``schedule`` (a phrase for an
    error line), or None when it can: within 0..``JITTER_MS_MAX`` and, unless 0, below the
    shortest period between occurrences. The one check of publish (both profiles) and of
    ``next --jitter-ms``; what passes it is trusted downstream."""
    if not 0 <= jitter_ms <= JITTER_MS_MAX:
        return f"must be 0..{JITTER_MS_MAX}, got {jitter_ms}"
    if jitter_ms and jitter_ms >= (period := shortest_period_ms(schedule)):
        return (
            f"{jitter_ms} is not below the trigger's shortest period between occurrences,"
            f" {period_text(period)}"
        )
    return None


def period_text(period_ms: int) -> str:
    """``90000 ms (1 min 30 s)``: a period for an error line."""
    seconds = period_ms // 1000
    parts = []
    for unit, size in (("h", 3600), ("min", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size} {unit}")
            seconds %= size
    return f"{period_ms} ms ({' '.join(parts) or 'under 1 s'})"
