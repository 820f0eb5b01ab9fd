"""The retention's durations (docs/contract.md §14): what `qlsched retention set` accepts,
what it refuses before anything connects, and how `show` writes a value back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qlsched.core.retention import (
    RETENTION_MAX_MS,
    RETENTION_MIN_MS,
    RetentionError,
    format_retention,
    parse_retention,
)

H = 3_600_000
D = 24 * H


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("30d", 30 * D),
        ("12h", 12 * H),
        ("90m", 90 * 60_000),
        ("1d12h", 36 * H),
        ("2w", 14 * D),
        ("3600s", H),
        (" 30D ", 30 * D),
        ("1m", RETENTION_MIN_MS),
        ("36500d", RETENTION_MAX_MS),
        ("off", None),
        ("none", None),
        ("OFF", None),
    ],
)
def test_durations_and_off_parse(text: str, ms: int | None) -> None:
    """Rule: d, h, m (minutes), s and w, alone or added up, in any case; off/none: None."""
    assert parse_retention(text) == ms


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("30", "give a unit"),
        ("", "expected a duration"),
        ("30x", "expected a duration"),
        ("1.5d", "expected a duration"),
        ("-1d", "expected a duration"),
        ("d", "expected a duration"),
        ("30 d", "expected a duration"),
        ("30ms", "expected a duration"),
        ("59s", "must be from 1m to 36500d"),
        ("0d", "must be from 1m to 36500d"),
        ("36501d", "must be from 1m to 36500d"),
    ],
)
def test_bad_durations_are_refused_naming_the_value(text: str, why: str) -> None:
    """Rule: anything else is a RetentionError (bad input, exit 2) that quotes the value."""
    with pytest.raises(RetentionError) as caught:
        parse_retention(text)
    assert str(caught.value).startswith(f"retention {text!r}: ")
    assert why in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("ms", "text"),
    [(None, "off"), (30 * D, "30d"), (36 * H, "1d12h"), (90 * 60_000, "1h30m"), (61_000, "1m1s")],
)
def test_values_are_shown_in_the_largest_exact_units(ms: int | None, text: str) -> None:
    assert format_retention(ms) == text


@given(st.integers(min_value=RETENTION_MIN_MS // 1000, max_value=RETENTION_MAX_MS // 1000))
def test_what_show_writes_parses_back_to_the_same_value(seconds: int) -> None:
    """Rule: `show`'s text of any whole-second retention is accepted by `set` as itself."""
    assert parse_retention(format_retention(seconds * 1000)) == seconds * 1000
