"""Counting a schedule's occurrences in an interval without visiting them.

Why: ``fire_once`` records how many occurrences a late Fire passed over, exactly, and an
every-second trigger a year late passes over 31 million of them: stepping through each (the
old way) made a decision's cost grow with its lateness, until a round outlived its lease.
Here the cost grows with the number of months and zone transitions in the interval only.

How: between two transitions of the zone the UTC offset is constant, so occurrences there are
the matching wall times of a stretch of naive local time, counted per day from the
schedule's masks (whole days by popcount, the partial first and last day by time of day).
The transitions split the interval, and ``cron``'s DST rule decides what each adds: real
time (a wildcard hour; ``dst_fold="both"``, ``dst_gap="skip"``) adds nothing; a fold whose
first instants only fire does not count its second pass (``"first"``), one whose second
instants only fire does not count its first pass (``"last"``); ``dst_gap="shift"`` fires once
at the end of a gap that held matching wall times (unless the first wall time after the gap
matches, which is the same instant).
``count_between`` must agree with stepping through ``next_after``; a property test holds it.
"""

from __future__ import annotations

from datetime import date
from zoneinfo import ZoneInfo

from qlsched.core.cron import CronSchedule, _month, _offset_at, _transition, _zone

_DAY = 86_400
_EPOCH_ORDINAL = 719_163  # date(1970, 1, 1).toordinal()
_MAX_ORDINAL = date.max.toordinal()
_PROBE_S = 6 * 3600
"""Transitions are found by comparing offsets this far apart: zones change offset at most
a few times a year, never twice within six hours."""

_TRANSITIONS: dict[tuple[str, int], tuple[tuple[int, int, int], ...]] = {}
"""(zone, UTC year) -> transitions ``(instant, offset before, offset after)`` in that year:
shared by every schedule of the zone, so the probing is paid once per zone and year."""


def _year_transitions(zone: ZoneInfo, name: str, year: int) -> tuple[tuple[int, int, int], ...]:
    key = (name, year)
    found = _TRANSITIONS.get(key)
    if found is None:
        if len(_TRANSITIONS) > 10_000:
            _TRANSITIONS.clear()
        start = (date(year, 1, 1).toordinal() - _EPOCH_ORDINAL) * _DAY
        end = (date(year + 1, 1, 1).toordinal() - _EPOCH_ORDINAL) * _DAY
        out: list[tuple[int, int, int]] = []
        t, off = start, _offset_at(zone, start)
        while t < end:
            nxt = min(t + _PROBE_S, end)
            nxt_off = _offset_at(zone, nxt)
            if nxt_off != off:
                out.append((_transition(zone, t, nxt), off, nxt_off))
            t, off = nxt, nxt_off
        found = _TRANSITIONS[key] = tuple(out)
    return found


def _year_of(instant: int) -> int:
    # Clamped: the look-ahead past ``b`` may reach beyond 9999-12-31, which has no date.
    return date.fromordinal(min(instant // _DAY + _EPOCH_ORDINAL, _MAX_ORDINAL)).year


def _transitions(zone: ZoneInfo, name: str, lo: int, hi: int) -> list[tuple[int, int, int]]:
    """Transitions at instants in ``(lo, hi]``, in order."""
    first, last = _year_of(lo), _year_of(hi)
    return [
        tr
        for year in range(max(first, 1), min(last, 9998) + 1)
        for tr in _year_transitions(zone, name, year)
        if lo < tr[0] <= hi
    ]


def _before(s: CronSchedule, tod: int) -> int:
    """Matching times of day (seconds since midnight) earlier than ``tod`` (0..86400)."""
    h, rest = divmod(tod, 3600)
    m, sec = divmod(rest, 60)
    per_minute = s.second_mask.bit_count()
    per_hour = s.minute_mask.bit_count() * per_minute
    n = (s.hour_mask & ((1 << h) - 1)).bit_count() * per_hour
    if s.hour_mask >> h & 1:
        n += (s.minute_mask & ((1 << m) - 1)).bit_count() * per_minute
        if s.minute_mask >> m & 1:
            n += (s.second_mask & ((1 << sec) - 1)).bit_count()
    return n


def _day_matches(s: CronSchedule, day: int) -> bool:
    d = date.fromordinal(day + _EPOCH_ORDINAL)
    if not s.month_mask >> d.month & 1:
        return False
    _first, weekday, length = _month(d.year, d.month)
    return bool((s.day_masks[weekday] & length) >> d.day & 1)


def _matching_days(s: CronSchedule, first_day: int, last_day: int) -> int:
    """Matching dates among epoch days ``first_day..last_day``, one step per month."""
    if last_day < first_day:
        return 0
    d = date.fromordinal(first_day + _EPOCH_ORDINAL)
    y, mo = d.year, d.month
    total = 0
    while True:
        first, weekday, length = _month(y, mo)
        if first > last_day:
            return total
        if s.month_mask >> mo & 1:
            days = s.day_masks[weekday] & length
            lo, hi = max(first_day - first + 1, 1), last_day - first + 1
            if hi < 31:
                days &= (1 << (hi + 1)) - 1
            total += (days >> lo).bit_count()
        y, mo = (y + 1, 1) if mo == 12 else (y, mo + 1)


def _wall_count(s: CronSchedule, lo: int, hi: int) -> int:
    """Matching naive wall times ``w`` (seconds) with ``lo < w <= hi``."""
    if hi <= lo:
        return 0
    d_lo, t_lo = divmod(lo, _DAY)
    d_hi, t_hi = divmod(hi, _DAY)
    if d_lo == d_hi:
        if not _day_matches(s, d_lo):
            return 0
        return _before(s, t_hi + 1) - _before(s, t_lo + 1)
    per_day = _before(s, _DAY)
    n = per_day * _matching_days(s, d_lo + 1, d_hi - 1)
    if _day_matches(s, d_lo):
        n += per_day - _before(s, t_lo + 1)
    if _day_matches(s, d_hi):
        n += _before(s, t_hi + 1)
    return n


def count_between(s: CronSchedule, after_ms: int, until_ms: int) -> int:
    """Occurrences ``t`` (epoch ms) with ``after_ms < t <= until_ms``; the same set a chain
    of ``next_after`` calls from ``after_ms`` visits, counted without visiting it."""
    a, b = after_ms // 1000, until_ms // 1000  # occurrences are whole seconds
    if b <= a:
        return 0
    if s.utc_offset is not None:
        return _wall_count(s, a + s.utc_offset, b + s.utc_offset)
    zone = _zone(s.timezone)
    # A transition up to a day before ``a`` still matters: ``"first"`` must not fire the
    # second pass of a fold whose first pass came before ``a``; and one after ``b``:
    # ``"last"`` must not fire the first pass of a fold that ends after ``b``.
    cuts = _transitions(zone, s.timezone, a - _DAY, b + _DAY)
    earlier = [c for c in cuts if c[0] <= a]
    later = [c for c in cuts if a < c[0] <= b]
    beyond = next((c for c in cuts if c[0] > b), None)
    prev = earlier[-1] if earlier else None
    fold_fires = s.fold_fires
    total, lo, off = 0, a, _offset_at(zone, a)
    for cut in [*later, (b + 1, 0, 0)]:  # the last stretch ends at b
        t, before, after = cut
        wall_lo, wall_hi = lo + off, t - 1 + off
        if fold_fires == "first" and prev is not None and prev[1] > prev[2]:
            wall_lo = max(wall_lo, prev[0] - 1 + prev[1])  # the fold's second pass repeats
        if fold_fires == "last":
            ahead = cut if t <= b else beyond
            if ahead is not None and ahead[1] > ahead[2]:
                # the fold's first pass: its wall times fire on the second
                wall_hi = min(wall_hi, ahead[0] - 1 + ahead[2])
        total += _wall_count(s, wall_lo, wall_hi)
        if s.shift_gap and after > before:
            gap_lo, gap_hi = t + before - 1, t + after - 1
            if _wall_count(s, gap_lo, gap_hi) and not _wall_count(s, gap_hi, gap_hi + 1):
                total += 1  # the gap's wall times fire once, at its end
        prev, lo, off = cut, t - 1, after
    return total
