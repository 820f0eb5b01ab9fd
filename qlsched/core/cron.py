"""Cron expressions evaluated in an IANA zone with Vixie cron's DST rule (docs/contract.md §3).

Role: ``parse_cron`` turns a trigger's expression into a ``CronSchedule`` once per revision;
``next_after`` answers "the first occurrence strictly after this instant" on the hot path of
every decision. Pure: the instant is passed in, nothing reads a clock or does I/O (zoneinfo
reads a zone's file once, on first use).

Grammar: 5 fields (``min hour dom mon dow``), 6 fields with seconds FIRST (``*/5 * * * * *``
is every 5 s), or ``@hourly @daily @midnight @weekly @monthly @yearly @annually``. Each field
is a comma list of ``*``, ``N``, ``A-B``, each with an optional ``/STEP`` (``A/STEP`` means
``A-max/STEP``); months and weekdays also by name (``JAN``, ``MON``); day-of-week 7 is Sunday;
``?`` is ``*`` in the two day fields. When day-of-month and day-of-week are both restricted a
day matches either; when either begins with ``*`` they are ANDed (Vixie's reading). ``L``,
``W``, ``#`` and ``H`` are rejected, as are backwards ranges (``22-2``: cron implementations
disagree on them) and expressions that can never fire (``0 0 30 2 *``).

DST: the hour field is *wildcard* when it begins with ``*`` and *fixed* otherwise.

- wildcard hour: follows real time. An instant is an occurrence iff its local wall time
  matches, so wall times in a spring-forward gap never fire and a repeated (fall-back) wall
  time fires at each of its instants, 30-minute folds (Australia/Lord_Howe) included.
- fixed hour, by default (``dst_gap="shift"``, ``dst_fold="first"``): each matching wall
  time fires once, at its first instant (``fold=0``); matching wall times in a gap all fire
  once, at the first instant after the gap (``03:00:00`` in New York: seconds and minutes
  reset). Never a missed day, never a double daily run.
- a fixed hour's policy per trigger (docs/contract.md §3): ``dst_gap="skip"`` fires no gap
  wall time (that day has none); ``dst_fold="last"`` fires a repeated wall time at its second
  instant only, ``"both"`` at both. A wildcard hour ignores the policy: it is already real
  time, which is ``skip`` and ``both``. So the stepping below knows two effective switches,
  ``shift_gap`` and ``fold_fires``, and a wildcard hour is the case (False, "both").

Why croniter only expands the fields: croniter 7.0's iterator differs from this rule (it fires
a fixed time twice in a fold, keeps the seconds when leaving a gap, reads seconds last unless
``second_at_beginning=True``, and drops repeated wildcard instants in 30-minute folds), and
it costs far more per call than the integer stepping below, on the hot path of every
decision (docs/performance.md). So croniter parses and expands each field once, behind a
gate of ours that rejects what we do not support, rewrites the forms croniter reads
differently from cron (``5-5`` is the whole field to croniter) and names the field in every
message; the expanded values become bitmasks, ``next_after`` steps through naive wall times
over them with integer arithmetic and maps each wall time to instants through zoneinfo. A
hand-written field reader was the alternative; croniter is the parser of record
(docs/contract.md §3), and the unit tests check its expansion against the grammar.

Invariant: occurrences are whole seconds; ``next_after(s, t) > t``; a sequence of
``next_after`` calls is strictly increasing and never yields an instant twice.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from typing import Literal, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
from croniter import CroniterError, croniter


class CronError(ValueError):
    """An expression or zone that cannot be used; the message names the field."""


DstGap = Literal["shift", "skip"]
"""A fixed-hour wall time inside a spring-forward gap: fire at the gap's end, or not at all."""
DstFold = Literal["first", "last", "both"]
"""A fixed-hour wall time in a repeated hour: fire at its first instant, its second, or both."""
DST_GAP_DEFAULT: DstGap = "shift"
DST_FOLD_DEFAULT: DstFold = "first"
DST_GAPS: tuple[DstGap, ...] = ("shift", "skip")
DST_FOLDS: tuple[DstFold, ...] = ("first", "last", "both")


def dst_policy_label(dst_gap: str, dst_fold: str) -> str:
    """The policy's non-default parts as ``dst_gap=skip dst_fold=both`` (empty for the
    default): what ``status`` and ``next`` show beside a trigger's zone."""
    parts = []
    if dst_gap != DST_GAP_DEFAULT:
        parts.append(f"dst_gap={dst_gap}")
    if dst_fold != DST_FOLD_DEFAULT:
        parts.append(f"dst_fold={dst_fold}")
    return " ".join(parts)


class CronSchedule(msgspec.Struct, frozen=True):
    """A parsed, validated expression; build it with ``parse_cron``, never by hand.

    The masks are the expanded fields (bit ``v`` set when value ``v`` is allowed): stepping
    through them is what keeps ``next_after`` free of re-parsing. All fields are plain data,
    so a schedule compares, hashes and encodes like any other Struct.
    """

    expression: str
    timezone: str
    second_mask: int
    minute_mask: int
    hour_mask: int
    month_mask: int
    day_masks: tuple[int, ...]
    """Days 1..31 allowed by the day-of-month/day-of-week rule, indexed by the weekday of the
    month's first day (Sunday = 0); month length is applied when stepping."""
    fixed_hour: bool
    """The hour field does not begin with ``*``: the fixed-hour DST rule applies."""
    utc_offset: int | None
    """Seconds east of UTC for a zone that never changes offset (UTC, Etc/GMT+5), else None."""
    dst_gap: DstGap
    dst_fold: DstFold
    """The trigger's DST policy as declared (shown and compared; a wildcard hour ignores it)."""
    shift_gap: bool
    """Wall times in a gap fire once at its end: a fixed hour under ``dst_gap="shift"``."""
    fold_fires: DstFold
    """Which instants of a repeated wall time fire: the policy for a fixed hour, ``"both"``
    (real time) for a wildcard hour."""


# --- parsing ----------------------------------------------------------------------------

_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTH_NAMES = {
    name: i + 1
    for i, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
    )
}
_DOW_NAMES = {name: i for i, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}


class _Field(msgspec.Struct, frozen=True):
    name: str
    low: int
    high: int
    names: dict[str, int] | None = None
    question_mark: bool = False


_SECOND = _Field("second", 0, 59)
_MINUTE = _Field("minute", 0, 59)
_HOUR = _Field("hour", 0, 23)
_DOM = _Field("day-of-month", 1, 31, question_mark=True)
_MONTH = _Field("month", 1, 12, _MONTH_NAMES)
_DOW = _Field("day-of-week", 0, 7, _DOW_NAMES, question_mark=True)
_FIELDS_5 = (_MINUTE, _HOUR, _DOM, _MONTH, _DOW)
_FIELDS_6 = (_SECOND, *_FIELDS_5)

_TERM = re.compile(r"(?:(\*)|(\w+?)(?:-(\w+))?)(?:/(\w+))?", re.ASCII)
_SPECIALS = (
    (re.compile(r".*#.*"), "'#' (nth weekday of the month)"),
    (re.compile(r"LW|\d*W|W\d+"), "'W' (nearest weekday)"),
    (re.compile(r"\d*L|L-\d+"), "'L' (last day)"),
    (re.compile(r"H(\(.*\))?(/.*)?"), "'H' (hashed value)"),
)
_DAYS_IN_MONTH = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # Feb 29 can happen


def _value(field: _Field, atom: str) -> int:
    if atom.isdigit():
        value = int(atom)
    elif field.names is not None and atom.upper() in field.names:
        return field.names[atom.upper()]
    else:
        kind = "a number or a name" if field.names is not None else "a number"
        raise CronError(f"{field.name}: {atom!r} is not {kind}")
    if not field.low <= value <= field.high:
        raise CronError(f"{field.name}: {value} is out of range {field.low}-{field.high}")
    return value


def _normalize_term(field: _Field, term: str) -> str:
    """Validate one list item; return it as ``*``, ``*/S``, ``N`` or ``A-B/S``, the forms
    croniter expands as cron does.

    Two spellings are rewritten because croniter reads them differently: an equal range
    (``5-5``, ``JAN-JAN``) is the whole field to croniter and one value to cron; and
    ``A/S`` runs to croniter's maximum, 6 for day-of-week, where cron (cronie, and cronsim)
    runs to 7, which is Sunday again: ``1/2`` is Mon, Wed, Fri and Sun.
    """
    if not term:
        raise CronError(f"{field.name}: empty list item")
    for pattern, what in _SPECIALS:
        if pattern.fullmatch(term.upper()):
            raise CronError(f"{field.name}: {what} is not supported in {term!r}")
    match = _TERM.fullmatch(term)
    if match is None:
        raise CronError(f"{field.name}: {term!r} is not a value, range or step")
    star, first, last, step_text = match.groups()
    step = 1
    if step_text is not None:
        span = field.high - field.low + (0 if field is _DOW else 1)  # dow 7 repeats 0
        if not step_text.isdigit() or not 1 <= int(step_text) <= span:
            raise CronError(f"{field.name}: step {step_text!r} is out of range 1-{span}")
        step = int(step_text)
    if star:
        return "*" if step == 1 else f"*/{step}"
    low = _value(field, first)
    if last is not None:
        high = _value(field, last)
        if high < low:
            raise CronError(
                f"{field.name}: range {first}-{last} runs backwards; split it, as in "
                f"{first}-{field.high},{field.low}-{last}"
            )
    elif step_text is not None:
        high = field.high  # A/S means A-max/S
    else:
        high = low
    if high == low:
        return str(low)
    return f"{low}-{high}" if step == 1 else f"{low}-{high}/{step}"


def _normalize_field(field: _Field, text: str) -> str:
    if text == "?" and field.question_mark:
        return "*"
    terms = [_normalize_term(field, term) for term in text.split(",")]
    # A "*" among other items is the whole field; croniter would return "*" inside a list.
    return "*" if "*" in terms else ",".join(terms)


def _mask(values: list[int | str], field: _Field) -> int:
    if values == ["*"]:
        top = 6 if field is _DOW else field.high  # day-of-week 7 is 0 again
        return sum(1 << v for v in range(field.low, top + 1))
    mask = 0
    for v in values:
        if not isinstance(v, int):  # unreachable behind the gate; a croniter change shows here
            raise CronError(f"{field.name}: croniter expanded it to {values!r}")
        mask |= 1 << (v % 7 if field is _DOW else v)
    return mask


def _day_masks(dom: int, dow: int, either_day_star: bool) -> tuple[int, ...]:
    masks = []
    for first_weekday in range(7):
        dow_days = 0
        for day in range(1, 32):
            if dow >> ((first_weekday + day - 1) % 7) & 1:
                dow_days |= 1 << day
        masks.append(dom & dow_days if either_day_star else dom | dow_days)
    return tuple(masks)


def _never_fires(dom: int, month: int) -> str | None:
    """Why an ANDed day rule can never match, or None: some allowed month must have an
    allowed day. Every real date falls on every weekday within the 400-year cycle, so the
    day-of-week field cannot make a valid date impossible."""
    for m in range(1, 13):
        if month >> m & 1 and dom & ((1 << (_DAYS_IN_MONTH[m] + 1)) - 2):
            return None
    days = ",".join(str(d) for d in range(1, 32) if dom >> d & 1)
    months = ",".join(str(m) for m in range(1, 13) if month >> m & 1)
    return f"day-of-month: day(s) {days} never occur in month(s) {months}; it would never fire"


_FIXED_OFFSET_ZONE = re.compile(
    r"(?:Etc/)?(?:UTC|UCT|Universal|Zulu|Greenwich|GMT(?:[+-]?0)?)|Etc/GMT[+-]\d{1,2}"
)
_ZONES: dict[str, ZoneInfo] = {}


def _zone(name: str) -> ZoneInfo:
    zone = _ZONES.get(name)
    if zone is None:
        zone = _ZONES[name] = ZoneInfo(name)
    return zone


def _load_zone(timezone: str) -> ZoneInfo:
    if timezone == "localtime":  # the machine's zone: replicas could disagree
        raise CronError("timezone: 'localtime' depends on the machine; name an IANA zone")
    try:
        return _zone(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise CronError(f"timezone: unknown IANA zone {timezone!r}") from None


def parse_cron(
    expression: str,
    timezone: str = "UTC",
    *,
    dst_gap: str = DST_GAP_DEFAULT,
    dst_fold: str = DST_FOLD_DEFAULT,
) -> CronSchedule:
    """Parse and validate once per trigger revision, with the trigger's DST policy.

    Raises:
        CronError: the expression, zone or policy cannot be used; the message starts with
            the field (``hour: 25 is out of range 0-23``, ``timezone: unknown IANA zone 'X'``,
            ``dst_fold: 'twice' is not one of first, last, both``).
    """
    gap = _policy("dst_gap", dst_gap, DST_GAPS)
    fold = _policy("dst_fold", dst_fold, DST_FOLDS)
    zone = _load_zone(timezone)
    text = expression.strip()
    if text.startswith("@"):
        if text.lower() not in _ALIASES:
            raise CronError(
                f"expression: unknown alias {text!r} (use one of {', '.join(_ALIASES)})"
            )
        text = _ALIASES[text.lower()]
    parts = text.split()
    if len(parts) not in (5, 6):
        raise CronError(
            f"expression: expected 5 fields (minute hour day-of-month month day-of-week) "
            f"or 6 (second first), got {len(parts)}"
        )
    fields = _FIELDS_6 if len(parts) == 6 else _FIELDS_5
    normalized = [_normalize_field(field, part) for field, part in zip(fields, parts, strict=True)]
    try:
        expanded, _nth = croniter.expand(" ".join(normalized), second_at_beginning=len(parts) == 6)
    except CroniterError as exc:  # unreachable behind the gate; say so rather than crash
        raise CronError(f"expression: croniter rejected {expression!r}: {exc}") from None
    # croniter returns (minute, hour, dom, month, dow[, second]) whatever the input order.
    minute, hour, dom, month, dow = (_mask(v, f) for v, f in zip(expanded, _FIELDS_5, strict=False))
    second = _mask(expanded[5], _SECOND) if len(parts) == 6 else 1
    dom_text, dow_text = parts[-3], parts[-1]
    either_day_star = dom_text[0] in "*?" or dow_text[0] in "*?"
    if either_day_star and (reason := _never_fires(dom, month)) is not None:
        raise CronError(reason)
    offset = None
    if _FIXED_OFFSET_ZONE.fullmatch(timezone):
        offset = _seconds(zone.utcoffset(datetime(2000, 1, 1)))
    fixed_hour = parts[-4][0] != "*"
    return CronSchedule(
        expression=expression,
        timezone=timezone,
        second_mask=second,
        minute_mask=minute,
        hour_mask=hour,
        month_mask=month,
        day_masks=_day_masks(dom, dow, either_day_star),
        fixed_hour=fixed_hour,
        utc_offset=offset,
        dst_gap=gap,
        dst_fold=fold,
        shift_gap=fixed_hour and gap == "shift",
        fold_fires=fold if fixed_hour else "both",
    )


_P = TypeVar("_P", bound=str)


def _policy(field: str, value: str, allowed: tuple[_P, ...]) -> _P:
    for choice in allowed:
        if value == choice:
            return choice
    raise CronError(f"{field}: {value!r} is not one of {', '.join(allowed)}")


# --- wall-clock stepping (pure integer arithmetic) --------------------------------------

_EPOCH_ORDINAL = 719_163  # date(1970, 1, 1).toordinal()
_MAX_YEAR = 9999
_MONTH_LENGTH_MASKS = tuple((1 << (n + 1)) - 2 for n in range(32))  # days 1..n
_MONTHS: dict[int, tuple[int, int, int]] = {}
"""``year * 12 + month`` -> (epoch day of the 1st, its weekday with Sunday = 0, mask of the
month's days). Calendar facts shared by every schedule; a dict lookup is cheaper than date
arithmetic on the hot path. Cleared when large, so it stays bounded."""

Wall = tuple[int, int, int, int, int, int, int]
"""A naive local time: year, month, day, hour, minute, second, and the same as epoch seconds
read as if it were UTC (the "naive seconds", which order wall times)."""


def _month(y: int, mo: int) -> tuple[int, int, int]:
    key = y * 12 + mo
    info = _MONTHS.get(key)
    if info is None:
        if len(_MONTHS) > 100_000:
            _MONTHS.clear()
        monday_first, length = calendar.monthrange(y, mo)
        first = date(y, mo, 1).toordinal() - _EPOCH_ORDINAL
        info = _MONTHS[key] = (first, (monday_first + 1) % 7, _MONTH_LENGTH_MASKS[length])
    return info


def _next_wall(s: CronSchedule, y: int, mo: int, d: int, h: int, mi: int, sec: int) -> Wall:
    """The first matching wall time at or after the given one.

    Each field may be one past its range (``sec == 60`` means the next minute): a field with
    no allowed value left carries into the next larger one and resets the smaller ones to 0,
    where the masks then find their first allowed value. The nested loops re-derive a month
    only when the month changes: most calls return from the innermost loop.
    """
    month_mask, hour_mask = s.month_mask, s.hour_mask
    minute_mask, second_mask = s.minute_mask, s.second_mask
    while True:
        bits = month_mask >> mo
        if not bits:
            y, mo, d, h, mi, sec = y + 1, 1, 1, 0, 0, 0
            if y > _MAX_YEAR:
                raise OverflowError("cron: no occurrence before the year 10000")
            continue
        if not bits & 1:
            mo, d, h, mi, sec = mo + (bits & -bits).bit_length() - 1, 1, 0, 0, 0
        first, weekday, length = _month(y, mo)
        days = s.day_masks[weekday] & length
        while bits := days >> d:
            if not bits & 1:
                d, h, mi, sec = d + (bits & -bits).bit_length() - 1, 0, 0, 0
            while bits := hour_mask >> h:
                if not bits & 1:
                    h, mi, sec = h + (bits & -bits).bit_length() - 1, 0, 0
                while bits := minute_mask >> mi:
                    if not bits & 1:
                        mi, sec = mi + (bits & -bits).bit_length() - 1, 0
                    bits = second_mask >> sec
                    if bits:
                        sec += (bits & -bits).bit_length() - 1
                        naive = (first + d - 1) * 86_400 + h * 3600 + mi * 60 + sec
                        return y, mo, d, h, mi, sec, naive
                    mi, sec = mi + 1, 0
                h, mi, sec = h + 1, 0, 0
            d, h, mi, sec = d + 1, 0, 0, 0
        mo, d, h, mi, sec = mo + 1, 1, 0, 0, 0


def _next_wall_from(s: CronSchedule, naive: int) -> Wall:
    """``_next_wall`` from naive seconds (off the hot path: after a transition, say)."""
    days, rest = divmod(naive, 86_400)
    day = date.fromordinal(days + _EPOCH_ORDINAL)
    hour, rest = divmod(rest, 3600)
    minute, second = divmod(rest, 60)
    return _next_wall(s, day.year, day.month, day.day, hour, minute, second)


# --- mapping wall times to instants -----------------------------------------------------


def _seconds(delta: timedelta | None) -> int:
    if delta is None:  # a ZoneInfo always answers; None would be a tzinfo we did not make
        raise TypeError("cron: the zone gave no UTC offset")
    return delta.days * 86_400 + delta.seconds


def _offset_at(zone: ZoneInfo, instant: int) -> int:
    return _seconds(zone.utcoffset(datetime.fromtimestamp(instant, zone)))


def _transition(zone: ZoneInfo, before: int, after: int) -> int:
    """The first instant in ``(before, after]`` with ``after``'s offset (they differ): the
    transition ending a gap or starting a fold. Bisection, ~12 probes for a one-hour shift;
    paid only when a step meets a transition, about twice a year per schedule."""
    target = _offset_at(zone, after)
    while after - before > 1:
        mid = (before + after) // 2
        if _offset_at(zone, mid) == target:
            after = mid
        else:
            before = mid
    return after


def _next_in_zone(s: CronSchedule, zone: ZoneInfo, after: int) -> int:
    """First occurrence, in epoch seconds, strictly after ``after`` in a zone with offsets
    that change.

    Wall times later than ``local(after)`` are tried in order, and the first with an instant
    after ``after`` gives the answer: the instants that fire grow with the wall time, except
    that ``fold_fires="both"`` fires a repeated wall time twice. One exception: when
    ``after`` is in the first pass of a fold, wall times at or before ``local(after)`` come
    round again after it, and fire there unless only first instants fire (``"last"``: the
    walk starts at the fold's first wall time; ``"both"``: the first of them is ``best``).
    Each wall time's instants come from zoneinfo's two readings of it (PEP 495): ``fold=0``
    and ``fold=1`` agree for a normal time, ``i0 < i1`` in a fold, ``i0 > i1`` in a gap.
    """
    here = datetime.fromtimestamp(after, zone)
    y, mo, d, h, mi, sec = here.year, here.month, here.day, here.hour, here.minute, here.second
    fold_fires = s.fold_fires
    best: int | None = None
    w: Wall | None = None
    if fold_fires != "first" and not here.fold:
        off_here = _seconds(zone.utcoffset(here))
        off_later = _seconds(zone.utcoffset(datetime(y, mo, d, h, mi, sec, fold=1)))
        if off_later < off_here:  # first pass of a fold: it starts within off_here - off_later
            fold_start = _transition(zone, after, after + off_here - off_later) + off_later
            w = _next_wall_from(s, fold_start)
            if fold_fires == "both":
                if w[6] <= after + off_here:
                    best = w[6] - off_later  # its second instant; its first is already past
                w = None
    if w is None:
        w = _next_wall(s, y, mo, d, h, mi, sec + 1)
    while True:
        y, mo, d, h, mi, sec, naive = w
        i0 = naive - _seconds(zone.utcoffset(datetime(y, mo, d, h, mi, sec)))
        i1 = naive - _seconds(zone.utcoffset(datetime(y, mo, d, h, mi, sec, fold=1)))
        if i0 == i1:
            candidate = i0
        elif i0 < i1:  # a fold: both instants are real
            if fold_fires == "last":
                candidate = i1
            elif i0 > after:
                candidate = i0
            elif fold_fires == "both":
                candidate = i1
            else:  # only first instants fire, and this one is past: skip the repeats
                fold_end = _transition(zone, i0, i1) + (naive - i0)
                w = _next_wall_from(s, max(fold_end, naive + 1))
                continue
        else:  # a gap: this wall time does not exist
            shift = _transition(zone, i1, i0)
            if s.shift_gap:
                candidate = shift  # the first instant after the gap, once for all its times
            else:
                w = _next_wall_from(s, shift + _offset_at(zone, shift))
                continue
        if candidate > after:
            return candidate if best is None else min(best, candidate)
        w = _next_wall_from(s, naive + 1)  # a fold's repeat already past; keeps the loop finite


def next_after(schedule: CronSchedule, after_ms: int) -> int:
    """The first occurrence strictly after ``after_ms`` (epoch ms), in epoch ms.

    Occurrences are whole seconds, so this is the first one after the second ``after_ms``
    falls in. Hot path: no parsing, integer stepping over the schedule's masks; in a zone
    whose offset changes, three zoneinfo look-ups (five when a repeated wall time's second
    instant may fire: a wildcard hour, ``dst_fold`` last or both); in a fixed-offset zone,
    none.

    Raises:
        OverflowError: no occurrence before the year 10000.
    """
    after = after_ms // 1000
    offset = schedule.utc_offset
    if offset is None:
        zone = _ZONES.get(schedule.timezone) or _zone(schedule.timezone)
        return _next_in_zone(schedule, zone, after) * 1000
    return (_next_wall_from(schedule, after + offset + 1)[6] - offset) * 1000


def iter_after(schedule: CronSchedule, after_ms: int) -> Iterator[int]:
    """Occurrences strictly after ``after_ms``, in order, without end."""
    t = after_ms
    while True:
        t = next_after(schedule, t)
        yield t
