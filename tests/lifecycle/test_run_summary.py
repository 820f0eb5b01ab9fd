"""``qlsched run``'s periodic summary line, from the replica's own metrics registry."""

from __future__ import annotations

from qlsched.cluster.metrics import Metrics, registry_reader
from qlsched.engine.stats import RoundStats
from qlsched.summary import Summary


def test_each_line_counts_since_the_previous_one() -> None:
    """Rule: a line gives rounds, claims, admits, skips, coalesced and the mean lag of the
    interval since the previous line, plus admits since start; a quiet interval says 0."""
    metrics = Metrics()
    summary = Summary(registry_reader(metrics.registry))
    metrics.observe_round(
        RoundStats(budget=16, claimed=3, admitted=2, skipped=1, skipped_occurrences=4, coalesced=5)
    )
    metrics.observe_round(RoundStats(budget=16))
    metrics.observe_lag_ms(100, 100)
    metrics.observe_lag_ms(300, 300)
    assert summary.line(10) == (
        "last 10s: 2 rounds, 3 claimed, 2 admitted, 4 skipped, 5 coalesced, mean lag 0.20s; "
        "2 admitted since start"
    )
    metrics.observe_round(RoundStats(budget=16))
    metrics.round_failures.inc()
    assert summary.line(10) == (
        "last 10s: 1 rounds, 1 failed, 0 claimed, 0 admitted, 0 skipped, 0 coalesced, "
        "mean lag -; 2 admitted since start"
    )
