"""Properties of cron evaluation over random expressions, zones and instants (hypothesis).

Three independent references judge ``qlsched.core.cron``:

- a field reader written here from the grammar (``Reference``), so croniter's expansion,
  which the module relies on, is checked rather than trusted;
- a brute-force evaluator that walks real instants one by one and applies docs/contract.md §3's
  rule to each, near the DST transitions of zones with 30-minute shifts, negative DST,
  Ramadan breaks and a skipped day;
- cronsim (an independent cron evaluator, Debian cron semantics) in zones without DST.
"""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import cronsim
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from qlsched.core.cron import CronError, CronSchedule, next_after, parse_cron

MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
# name, low, high, names (first name's value), accepts "?"
SECOND = ("second", 0, 59, None, 0, False)
MINUTE = ("minute", 0, 59, None, 0, False)
HOUR = ("hour", 0, 23, None, 0, False)
DOM = ("day-of-month", 1, 31, None, 0, True)
MONTH = ("month", 1, 12, MONTHS, 1, False)
DOW = ("day-of-week", 0, 7, DAYS, 0, True)
FIELD_NAMES = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")

DST_ZONES = [
    "America/New_York",
    "Europe/London",
    "Australia/Lord_Howe",  # 30-minute shift
    "Pacific/Chatham",  # +12:45 / +13:45
    "America/Santiago",  # transitions at midnight
    "Africa/Casablanca",  # negative DST during Ramadan
    "Europe/Dublin",  # negative DST in tzdata
    "Antarctica/Troll",  # a 2-hour shift
    "Pacific/Apia",  # skipped 2011-12-30 entirely
    "America/St_Johns",
    "Asia/Tehran",
]
FIXED_ZONES = ["UTC", "Asia/Shanghai", "Asia/Kolkata", "Asia/Kathmandu", "Etc/GMT+5"]


# --- the reference reading of an expression ---------------------------------------------


class Reference:
    """The expression's meaning, read straight from the grammar in docs/contract.md §3."""

    def __init__(self, expression: str) -> None:
        parts = expression.split()
        if len(parts) == 5:
            parts = ["0", *parts]
        specs = (SECOND, MINUTE, HOUR, DOM, MONTH, DOW)
        self.sets = [self._read(text, spec) for text, spec in zip(parts, specs, strict=True)]
        self.sets[5] = {v % 7 for v in self.sets[5]}
        self.wildcard_hour = parts[2].startswith("*")
        self.day_and = parts[3][0] in "*?" or parts[5][0] in "*?"

    @staticmethod
    def _read(text: str, spec: tuple[str, int, int, list[str] | None, int, bool]) -> set[int]:
        _, low, high, names, base, _ = spec

        def value(atom: str) -> int:
            return names.index(atom.upper()) + base if names and atom.isalpha() else int(atom)

        if text == "?":
            return set(range(low, high + 1))
        values: set[int] = set()
        for term in text.split(","):
            body, slash, step = term.partition("/")
            if body == "*":
                a, b = low, high
            elif "-" in body:
                a, b = (value(x) for x in body.split("-"))
            else:
                a = value(body)
                b = high if slash else a
            values.update(range(a, b + 1, int(step) if slash else 1))
        return values

    def day_ok(self, day: int, weekday: int) -> bool:
        """Day-of-month ``day`` falling on ``weekday`` (Sunday = 0)."""
        dom = day in self.sets[3]
        dow = weekday in self.sets[5]
        return (dom and dow) if self.day_and else (dom or dow)

    def day_matches(self, d: date) -> bool:
        return self.day_ok(d.day, d.isoweekday() % 7)

    def matches(self, w: datetime) -> bool:
        return (
            w.second in self.sets[0]
            and w.minute in self.sets[1]
            and w.hour in self.sets[2]
            and w.month in self.sets[4]
            and self.day_matches(w.date())
        )

    def can_fire(self) -> bool:
        longest = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
        if not self.day_and:
            return True
        return any(d <= longest[m] for m in self.sets[4] for d in self.sets[3])


# --- strategies ----------------------------------------------------------------------------


@st.composite
def terms(
    draw: st.DrawFn,
    spec: tuple[str, int, int, list[str] | None, int, bool],
    equal_range_step: bool = True,
) -> str:
    _, low, high, names, base, _ = spec

    def atom(v: int) -> str:
        if names and v - base < len(names) and draw(st.booleans()):
            name = names[v - base]
            return draw(st.sampled_from([name, name.lower(), name.capitalize()]))
        return str(v)

    span = high - low + (0 if spec is DOW else 1)
    kind = draw(
        st.sampled_from(["star", "star-step", "value", "range", "range-step", "start-step"])
    )
    step = draw(st.integers(1, span))
    a = draw(st.integers(low, high))
    b = draw(st.integers(a, high))
    if kind == "range-step" and a == b and not equal_range_step:
        kind = "range"
    return {
        "star": "*",
        "star-step": f"*/{step}",
        "value": atom(a),
        "range": f"{atom(a)}-{atom(b)}",
        "range-step": f"{atom(a)}-{atom(b)}/{step}",
        "start-step": f"{atom(a)}/{step}",
    }[kind]


@st.composite
def fields(
    draw: st.DrawFn, spec: tuple[str, int, int, list[str] | None, int, bool], equal: bool
) -> str:
    if spec[5] and draw(st.integers(0, 9)) == 0:
        return "?"
    return ",".join(draw(st.lists(terms(spec, equal), min_size=1, max_size=3)))


@st.composite
def expressions(draw: st.DrawFn, equal_range_step: bool = True) -> str:
    """Grammatical expressions. ``equal_range_step=False`` leaves out ``5-5/3``, which
    cronsim reads as ``5/3`` (5 to the end by 3) where cron reads the one value 5."""
    parts = [draw(fields(spec, equal_range_step)) for spec in (MINUTE, HOUR, DOM, MONTH, DOW)]
    if draw(st.booleans()):
        parts.insert(0, draw(fields(SECOND, equal_range_step)))
    return " ".join(parts)


# Expressions that fire often enough for a brute-force walk to meet them near a transition.
SECONDS = st.sampled_from(["0", "*/15", "30", "0,20,40", "*", "59"])
FREQUENT_MINUTES = st.sampled_from(["*", "*/5", "0", "30", "15,45", "0-10", "*/20", "59", "*/7"])
FREQUENT_HOURS = st.sampled_from(
    ["*", "*/2", "*/3", "*/1", "0", "1", "2", "3", "23", "0-3", "1-2", "2,3", "1/2", "22-23"]
)
FREQUENT_DAYS = st.sampled_from(["* * *", "* * ?", "? * *", "* * 0-5", "1-15 * *", "* * SUN"])


@st.composite
def frequent_expressions(draw: st.DrawFn) -> str:
    text = f"{draw(FREQUENT_MINUTES)} {draw(FREQUENT_HOURS)} {draw(FREQUENT_DAYS)}"
    if draw(st.booleans()):
        text = f"{draw(SECONDS)} {text}"
    return text


INSTANTS = st.integers(  # 1972 .. 2090, in ms
    int(datetime(1972, 1, 1, tzinfo=UTC).timestamp()) * 1000,
    int(datetime(2090, 1, 1, tzinfo=UTC).timestamp()) * 1000,
)


def _parse_or_skip(expression: str, zone: str = "UTC") -> CronSchedule:
    """Parse; only the never-fires rule may refuse a grammatical expression."""
    try:
        return parse_cron(expression, zone)
    except CronError as exc:
        error = str(exc)
    assert error.startswith("day-of-month:")
    assert not Reference(expression).can_fire()
    assume(False)
    raise AssertionError("unreachable")


def _offset(zone: ZoneInfo, instant: int) -> timedelta:
    offset = datetime.fromtimestamp(instant, zone).utcoffset()
    assert offset is not None
    return offset


# --- properties -----------------------------------------------------------------------------


@given(expressions())
@settings(max_examples=400, deadline=None)
def test_fields_expand_as_the_grammar_says(expression: str) -> None:
    """Every grammatical expression parses (unless it can never fire) to exactly the values
    the grammar gives each field, and the day rule ORs two restricted day fields and ANDs
    when either begins with ``*``: croniter's expansion, as the module uses it, is cron's."""
    schedule = _parse_or_skip(expression)
    ref = Reference(expression)

    def bits(mask: int, low: int, high: int) -> set[int]:
        return {v for v in range(low, high + 1) if mask >> v & 1}

    assert bits(schedule.second_mask, 0, 59) == ref.sets[0]
    assert bits(schedule.minute_mask, 0, 59) == ref.sets[1]
    assert bits(schedule.hour_mask, 0, 23) == ref.sets[2]
    assert bits(schedule.month_mask, 1, 12) == ref.sets[4]
    assert schedule.fixed_hour is not ref.wildcard_hour
    # Day masks are indexed by the weekday (Sunday = 0) of the month's first day.
    for first_weekday in range(7):
        expected = {d for d in range(1, 32) if ref.day_ok(d, (first_weekday + d - 1) % 7)}
        assert bits(schedule.day_masks[first_weekday], 1, 31) == expected


@given(expressions(), st.sampled_from(DST_ZONES + FIXED_ZONES), INSTANTS)
@settings(max_examples=300, deadline=None)
def test_occurrences_advance_and_match(expression: str, zone: str, start: int) -> None:
    """``next_after(t) > t`` on whole seconds; five steps increase strictly (no instant
    twice); each occurrence's local wall time matches the fields, except a fixed-hour
    occurrence moved to the first instant after a gap; a fixed hour never fires on the
    second pass of a fold."""
    schedule = _parse_or_skip(expression, zone)
    ref = Reference(expression)
    tz = ZoneInfo(zone)
    t = start
    seen: list[int] = []
    for _ in range(5):
        nxt = next_after(schedule, t)
        assert nxt > t
        assert nxt % 1000 == 0
        seen.append(nxt)
        local = datetime.fromtimestamp(nxt // 1000, tz)
        if ref.matches(local.replace(tzinfo=None)):
            assert ref.wildcard_hour or local.fold == 0
        else:
            assert not ref.wildcard_hour
            assert _offset(tz, nxt // 1000 - 1) < _offset(tz, nxt // 1000)  # just after a gap
        t = nxt
    assert seen == sorted(set(seen))


@given(expressions(), st.sampled_from(DST_ZONES + FIXED_ZONES))
@settings(max_examples=100, deadline=None)
def test_parse_is_deterministic(expression: str, zone: str) -> None:
    """Parsing the same input twice gives equal (and equally hashed) schedules."""
    a = _parse_or_skip(expression, zone)
    b = parse_cron(expression, zone)
    assert a == b
    assert hash(a) == hash(b)


@given(st.text(alphabet="0123456789*/,-? \tLWH#()@JANMONFRIxyz", max_size=30))
@settings(max_examples=400, deadline=None)
def test_any_text_parses_or_names_its_field(text: str) -> None:
    """Any string either parses into a schedule that computes, or raises ``CronError``
    whose message starts with the field at fault; nothing else escapes."""
    try:
        schedule = parse_cron(text)
    except CronError as exc:
        error = str(exc)
    else:
        assert next_after(schedule, 1_780_000_000_000) > 1_780_000_000_000
        return
    assert error.split(":")[0] in {*FIELD_NAMES, "expression"}


# --- brute force near real transitions ------------------------------------------------------


@functools.cache
def transitions(zone: str) -> list[int]:
    """The zone's offset changes in 2008-2032 (instants, seconds), found by probing every
    six hours and bisecting: tzdata has no two changes that close."""
    tz = ZoneInfo(zone)
    found = []
    t = int(datetime(2008, 1, 1, tzinfo=UTC).timestamp())
    end = int(datetime(2033, 1, 1, tzinfo=UTC).timestamp())
    step = 6 * 3600
    while t < end:
        if _offset(tz, t) != _offset(tz, t + step):
            lo, hi = t, t + step
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if _offset(tz, mid) == _offset(tz, hi) else (mid, hi)
            found.append(hi)
        t += step
    return found


def brute_next(ref: Reference, tz: ZoneInfo, after: int, horizon: int, step: int) -> int | None:
    """The first instant in ``(after, after + horizon]`` that docs/contract.md §3 fires, walking
    instants ``step`` seconds apart (60 when seconds are always 0), or None."""
    u = after - after % step + step
    while u <= after + horizon:
        local = datetime.fromtimestamp(u, tz)
        if ref.matches(local.replace(tzinfo=None)) and (ref.wildcard_hour or local.fold == 0):
            return u
        if not ref.wildcard_hour and _offset(tz, u - 1) < _offset(tz, u):
            # u ends a gap: it fires if any wall time inside the gap matches.
            wall = datetime.fromtimestamp(u - 1, tz).replace(tzinfo=None) + timedelta(seconds=1)
            wall += timedelta(seconds=-wall.second % step)
            end = local.replace(tzinfo=None)
            while wall < end:
                if ref.matches(wall):
                    return u
                wall += timedelta(seconds=step)
        u += step
    return None


def fires_at(ref: Reference, tz: ZoneInfo, u: int, step: int, gap: str, fold: str) -> bool:
    """Whether docs/contract.md §3 fires instant ``u`` under a DST policy, read
    literally: a matching wall time fires at an instant of it unless it is a fold's first
    pass and only second instants fire (``last``) or its second pass and only first ones do
    (``first``); under ``shift`` the instant ending a gap fires when a gap wall time matches.
    A wildcard hour is real time whatever the policy."""
    local = datetime.fromtimestamp(u, tz)
    wall = local.replace(tzinfo=None)
    if ref.matches(wall):
        if ref.wildcard_hour:
            return True
        other = wall.replace(fold=1 - local.fold, tzinfo=tz).utcoffset()
        repeated = other != _offset(tz, u)  # a real wall time read two ways: a fold
        if not repeated or fold == "both":
            return True
        if (fold == "first") == (local.fold == 0):
            return True
    if not ref.wildcard_hour and gap == "shift" and _offset(tz, u - 1) < _offset(tz, u):
        w = datetime.fromtimestamp(u - 1, tz).replace(tzinfo=None) + timedelta(seconds=1)
        w += timedelta(seconds=-w.second % step)
        while w < wall:
            if ref.matches(w):
                return True
            w += timedelta(seconds=step)
    return False


DST_GAP_POLICIES = st.sampled_from(["shift", "skip"])
DST_FOLD_POLICIES = st.sampled_from(["first", "last", "both"])


@given(
    frequent_expressions(),
    st.sampled_from(DST_ZONES),
    DST_GAP_POLICIES,
    DST_FOLD_POLICIES,
    st.data(),
)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_policies_agree_with_brute_force_near_transitions(
    expression: str, zone: str, gap: str, fold: str, data: st.DataObject
) -> None:
    """Under every DST policy, near a real transition, the chain of ``next_after`` calls
    visits exactly the instants ``fires_at`` accepts, walking instants one by one."""
    schedule = parse_cron(expression, zone, dst_gap=gap, dst_fold=fold)
    ref = Reference(expression)
    tz = ZoneInfo(zone)
    step, span = (1, 2 * 3600) if len(expression.split()) == 6 else (60, 30 * 3600)
    shift = data.draw(st.sampled_from(transitions(zone)), label="transition")
    after = shift - data.draw(st.integers(0, span), label="before_s")
    after -= after % step
    expected = [u for u in range(after + step, after + span + 1, step)
                if fires_at(ref, tz, u, step, gap, fold)]  # fmt: skip
    got = []
    t = after * 1000 + data.draw(st.integers(0, 999), label="ms")
    while (t := next_after(schedule, t)) <= (after + span) * 1000:
        got.append(t // 1000)
    assert got == expected


@given(frequent_expressions(), st.sampled_from(DST_ZONES), st.data())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_agrees_with_brute_force_near_transitions(
    expression: str, zone: str, data: st.DataObject
) -> None:
    """Near real DST transitions (2008-2032), ``next_after`` equals a brute-force walk over
    instants that applies the rule literally: wildcard hours fire every instant whose wall
    time matches; fixed hours fire the first instant of each matching wall time and the
    first instant after a gap holding a matching wall time."""
    schedule = parse_cron(expression, zone)
    ref = Reference(expression)
    tz = ZoneInfo(zone)
    shift = data.draw(st.sampled_from(transitions(zone)), label="transition")
    after = shift + data.draw(st.integers(-3 * 3600, 3 * 3600), label="offset_s")
    six_fields = len(expression.split()) == 6
    step, horizon = (1, 4 * 3600) if six_fields else (60, 36 * 3600)
    expected = brute_next(ref, tz, after, horizon, step)
    got = next_after(schedule, after * 1000 + data.draw(st.integers(0, 999), label="ms")) // 1000
    if expected is None:
        assert got > after + horizon
    else:
        assert got == expected


# --- cronsim, an independent evaluator, where there is no DST ---------------------------------


@given(expressions(equal_range_step=False), st.sampled_from(FIXED_ZONES), INSTANTS)
@settings(max_examples=300, deadline=None)
def test_agrees_with_cronsim_without_dst(expression: str, zone: str, start: int) -> None:
    """In zones with one offset since 1992, the next three fire times equal cronsim's, an
    independent evaluator of Debian cron's semantics (six fields read seconds first)."""
    schedule = _parse_or_skip(expression, zone)
    tz = ZoneInfo(zone)
    start = max(start, int(datetime(1992, 1, 1, tzinfo=UTC).timestamp()) * 1000)
    other = cronsim.CronSim(expression.replace("?", "*"), datetime.fromtimestamp(start / 1000, tz))
    t = start
    for _ in range(3):
        try:
            theirs = next(other)
        except StopIteration:  # cronsim gives up after 50 years
            return
        t = next_after(schedule, t)
        assert t == int(theirs.timestamp()) * 1000


def test_cronsim_is_installed() -> None:
    """The oracle above is a test dependency (the ``test`` extra), not an optional one."""
    assert cronsim.CronSim("0 0 * * *", datetime(2026, 1, 1, tzinfo=UTC)) is not None


@pytest.mark.parametrize("zone", DST_ZONES)
def test_transition_table_is_not_empty(zone: str) -> None:
    """Each DST zone above does change offset in 2008-2032, so the brute-force property
    really exercises transitions there."""
    assert transitions(zone)
