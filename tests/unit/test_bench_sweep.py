"""``qlsched bench --sweep``: its replica counts and its no-cliff targets."""

from __future__ import annotations

import msgspec
import pytest

from qlsched.tools.bench.results import CeilingResult, DrainResult
from qlsched.tools.bench.sweep import SweepPoint, parse_counts, sweep_targets


def _drain(rate: float, retries: float = 0.0) -> DrainResult:
    return msgspec.convert(
        {
            "triggers": 1000,
            "cron": "0 0 1 1 *",
            "admitted": 1000,
            "occurrences_per_s": rate,
            "seconds": 1.0,
            "seconds_from_due": 1.0,
            "duplicates": 0,
            "lost": 0,
            "malformed": 0,
            "ssi_retries": round(retries * 100),
            "admit_statements": 100,
            "ssi_retry_ratio": retries,
            "lag_ms": None,
            "diagnostics": {},
            "stop_problems": [],
        },
        DrainResult,
    )


def _point(replicas: int, rate: float, retries: float = 0.0) -> SweepPoint:
    ceiling = msgspec.convert(
        {
            "pair_occurrences_per_s": 1.0,
            "ratio": None,
            "clients": replicas,
            "threads": 1,
            "seconds": 1,
            "transactions": 1,
            "failed": 0,
            "retried": 0,
            "retries": 0,
            "ssi_retry_ratio": None,
            "runs": [],
            "batch": None,
        },
        CeilingResult,
    )
    return SweepPoint(
        replicas=replicas, drain=_drain(rate, retries), ceiling=ceiling, retries_exhausted=0
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1,2,4", [1, 2, 4]), ("16, 4,4,1", [1, 4, 16]), ("8", [8])],
)
def test_counts_are_sorted_and_distinct(text: str, expected: list[int]) -> None:
    """Rule: a sweep's counts come sorted, each once."""
    assert parse_counts(text) == expected


@pytest.mark.parametrize("text", ["", "a,b", "0,2", "1,2,3,4,5,6,7,8,9"])
def test_bad_counts_are_one_line(text: str) -> None:
    """Rule: no count, a non-number, a count below 1 or more than 8 counts is a reason
    (one line, the command exits 2 with it), never a traceback."""
    reason = parse_counts(text)
    assert isinstance(reason, str)
    assert "\n" not in reason


def test_a_fall_when_the_replicas_double_is_a_cliff() -> None:
    """Rule: the drain of R replicas below that of R/2 misses the no-cliff target and names
    the pair; 16 replicas below 0.9x the rate of 4 misses its own; retries of 1 % or more
    at any count miss theirs."""
    good = sweep_targets([_point(2, 100), _point(4, 200), _point(8, 210), _point(16, 190)])
    assert good["no_cliff"].met is False
    assert "16" in good["no_cliff"].measured
    assert good["largest_vs_4"].met is True
    flat = sweep_targets([_point(4, 100), _point(8, 100), _point(16, 89, retries=0.02)])
    assert flat["no_cliff"].met is False
    assert flat["largest_vs_4"].met is False
    assert flat["sweep_ssi_retries"].met is False
    rising = sweep_targets([_point(4, 100), _point(8, 150), _point(16, 160)])
    assert (rising["no_cliff"].met, rising["largest_vs_4"].met) == (True, True)
    assert rising["sweep_ssi_retries"].met is True


def test_each_count_is_judged_on_the_better_of_its_two_drains() -> None:
    """Rule: a count's point keeps its faster drain as the judged one and the other beside
    it, whichever pass was faster; retries count over both drains; a slow second drain of
    8 does not make a cliff that its first drain does not show."""
    from qlsched.tools.bench.sweep import judged_point as point

    four = _point(4, 100)
    slow_first = point(8, _drain(90), four.ceiling, _drain(120, retries=0.02))
    assert slow_first.drain.occurrences_per_s == 120
    assert slow_first.other is not None
    assert slow_first.other.occurrences_per_s == 90
    fast_first = point(8, _drain(120), four.ceiling, _drain(90))
    assert fast_first.drain.occurrences_per_s == 120
    judged = sweep_targets([four, fast_first])
    assert judged["no_cliff"].met is True
    assert judged["sweep_ssi_retries"].met is True
    retried = sweep_targets([four, slow_first])
    assert retried["sweep_ssi_retries"].met is False
    assert "8: 1.00%" in retried["sweep_ssi_retries"].measured
