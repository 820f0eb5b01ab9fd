"""A backfill's occurrences (core.requests): counted exactly and chunked by the trigger's own
cron, DST rule included, so the Runs a backfill admits are the occurrences cron itself would
have fired, each once."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from qlsched.core.cron import next_after, parse_cron
from qlsched.core.requests import NotRecorded, backfill_chunk, backfill_count


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).astimezone(UTC).timestamp() * 1000)


def _chain(cron: str, zone: str, from_ms: int, to_ms: int) -> list[int]:
    """Every occurrence in [from_ms, to_ms] by stepping ``next_after`` (the reference)."""
    s, out, t = parse_cron(cron, zone), [], from_ms - 1
    while (t := next_after(s, t)) <= to_ms:
        out.append(t)
    return out


CASES = [
    ("30 2 * * *", "America/New_York", "2026-03-01T00:00:00Z", "2026-03-20T00:00:00Z"),
    ("30 1 * * *", "Europe/London", "2026-10-20T00:00:00Z", "2026-10-30T00:00:00Z"),
    ("*/15 * * * *", "Australia/Lord_Howe", "2026-04-04T12:00:00Z", "2026-04-05T12:00:00Z"),
    ("*/10 * * * * *", "UTC", "2026-01-01T00:00:00Z", "2026-01-01T00:20:00Z"),
    ("0 0 1 1 *", "Asia/Shanghai", "2020-01-01T00:00:00Z", "2026-01-01T00:00:00Z"),
]


@pytest.mark.parametrize(("cron", "zone", "start", "end"), CASES)
def test_count_and_chunks_follow_the_cron_path(cron: str, zone: str, start: str, end: str) -> None:
    """Rule: ``backfill_count`` is the number of occurrences ``next_after`` visits in
    [from, to] (ends included), and chunks of at most ``limit`` taken cursor after cursor
    give exactly those occurrences, in order, the last chunk saying done."""
    from_ms, to_ms = _ms(start), _ms(end)
    want = _chain(cron, zone, from_ms, to_ms)
    s = parse_cron(cron, zone)
    assert backfill_count(s, from_ms, to_ms) == len(want)
    got: list[int] = []
    cursor = None
    for _ in range(len(want) + 2):
        chunk = backfill_chunk(
            s, from_ms=from_ms, to_ms=to_ms, cursor_ms=cursor, below_ms=2**62, limit=7
        )
        assert len(chunk.occurrences) <= 7
        got += chunk.occurrences
        cursor = chunk.cursor_ms
        if chunk.done:
            break
    assert got == want
    assert chunk.done


def test_an_occurrence_on_either_end_is_inside_the_range() -> None:
    """Rule: the range is closed: occurrences at exactly ``from`` and ``to`` count."""
    s = parse_cron("0 * * * *")
    t = _ms("2026-05-01T10:00:00Z")
    assert backfill_count(s, t, t + 3_600_000) == 2
    assert backfill_count(s, t + 1, t + 3_600_000 - 1) == 0


def test_a_chunk_stops_before_the_cron_cursor_and_is_not_done() -> None:
    """Rule: a chunk never holds an occurrence at or after ``below`` (the cron cursor); it
    then says not done, and its cursor is its last occurrence (or the old cursor)."""
    s = parse_cron("0 * * * *")
    t = _ms("2026-05-01T00:00:00Z")
    hour = 3_600_000
    chunk = backfill_chunk(
        s, from_ms=t, to_ms=t + 9 * hour, cursor_ms=None, below_ms=t + 3 * hour, limit=16
    )
    assert (chunk.occurrences, chunk.cursor_ms, chunk.done) == (
        [t, t + hour, t + 2 * hour],
        t + 2 * hour,
        False,
    )
    empty = backfill_chunk(
        s, from_ms=t, to_ms=t + 9 * hour, cursor_ms=t + 2 * hour, below_ms=t + 3 * hour, limit=16
    )
    assert (empty.occurrences, empty.cursor_ms, empty.done) == ([], t + 2 * hour, False)


def test_a_full_last_chunk_says_done() -> None:
    """Rule: a chunk that ends exactly on the range's last occurrence is done (no extra
    round for an empty chunk)."""
    s = parse_cron("0 * * * *")
    t = _ms("2026-05-01T00:00:00Z")
    chunk = backfill_chunk(
        s, from_ms=t, to_ms=t + 3 * 3_600_000, cursor_ms=None, below_ms=2**62, limit=4
    )
    assert (len(chunk.occurrences), chunk.done) == (4, True)


def test_refusal_messages_name_the_count_and_the_reason() -> None:
    """Rule: a refusal is one line naming the trigger and why; too many gives the count."""
    too = NotRecorded("p", "t", "too_many", count=86_400, max=10_000)
    assert (
        too.message() == "p/t: refused: the range holds 86,400 occurrences, more than --max 10,000"
    )
    assert too.bad_input
    off = NotRecorded("p", "t", "trigger_disabled")
    assert not off.bad_input
    assert "disabled" in off.message()
