"""When a replica's pruner looks again (``cluster.retention.next_pass_delay_s``): at once
while Runs past the horizon are left, on its interval otherwise, and backing off while its
batches fail, so a database outage costs a few connection attempts, not one per interval
(tests/faults/test_outage_backoff.py counts them on a real outage)."""

from __future__ import annotations

from qlsched.cluster.retention import FAILED_BACKOFF_MAX_S, next_pass_delay_s


def test_more_to_prune_comes_back_after_a_cadence() -> None:
    """Rule: a full last batch: the next pass after one cadence; else after the interval."""
    assert next_pass_delay_s(1.0, 0.1, more=True, failures=0) == 0.1
    assert next_pass_delay_s(1.0, 0.1, more=False, failures=0) == 1.0


def test_failures_double_the_wait_up_to_the_cap() -> None:
    """Rule: each failed batch in a row doubles the wait, never past the cap; an 8-second
    outage then gets three passes at most, not eight."""
    waits = [next_pass_delay_s(1.0, 0.1, more=False, failures=n) for n in range(1, 9)]
    assert waits[:4] == [2.0, 4.0, 8.0, 16.0]
    assert max(waits) == FAILED_BACKOFF_MAX_S
    t, passes = 1.0, 1  # the first pass one interval after start, then after each failure
    failures = 1
    while (t := t + next_pass_delay_s(1.0, 0.1, more=False, failures=failures)) < 9.0:
        passes += 1
        failures += 1
    assert passes == 3


def test_an_interval_above_the_cap_is_kept() -> None:
    """Rule: a replica whose interval is already longer than the cap waits its interval."""
    assert next_pass_delay_s(60.0, 6.0, more=False, failures=3) == 60.0
