"""The Prometheus exposition carries no ``_created`` series."""

from __future__ import annotations

from qlsched.cluster.metrics import Metrics
from qlsched.engine.stats import RoundStats


def test_no_created_series_in_the_exposition() -> None:
    """Rule: counters and histograms expose their values only; the ``*_created`` timestamp
    series prometheus_client adds by default are switched off."""
    metrics = Metrics()
    metrics.observe_round(RoundStats(budget=16, claimed=1, admitted=1))
    metrics.observe_lag_ms(50, 50)
    text = metrics.render().decode()
    assert 'qlsched_admits_total{profile="cluster"} 1.0' in text
    assert "_created" not in text
