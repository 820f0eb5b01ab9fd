"""The ``profile`` label (``qlsched.metrics.ProfileRegistry``): one family per measure for
both profiles, each series saying which profile served it, added in one place."""

from __future__ import annotations

import pytest
from prometheus_client import Counter

from qlsched.engine.stats import RoundStats
from qlsched.metrics import Metrics, Profile
from qlsched.worker.metrics import WorkerMetrics
from tests.support.exposition import profile_problems, qlsched_samples, without_profile


@pytest.mark.parametrize("profile", ["cluster", "edge"])
def test_every_series_carries_the_profile_a_later_family_too(profile: Profile) -> None:
    """Rule: every sample of every family is labelled with the registry's profile, a
    family registered after the fact (as the cluster's passes and pruner do) included,
    while ``target_info`` keeps its one label; the summary line still reads the counts."""
    metrics = Metrics(profile=profile)
    late = Counter("qlsched_late", "A family no list names.", ["kind"], registry=metrics.registry)
    late.labels("a").inc()
    metrics.observe_round(RoundStats(budget=16, claimed=2, admitted=1))
    metrics.observe_lag_ms(50, 50)
    metrics.count_error("round_failed")
    text = metrics.render().decode()
    assert profile_problems(text, profile) == []
    names = {s.name for s in qlsched_samples(text)}
    assert {"qlsched_late_total", "qlsched_errors_total", "qlsched_claims_total"} <= names
    assert f'target_info{{profile="{profile}"}} 1.0' in text
    assert metrics.summary_counts()["admitted"] == 1
    assert metrics.registry.get_sample_value("qlsched_claims_total") is None  # no bare series


def test_a_worker_is_labelled_as_part_of_the_cluster() -> None:
    """Rule: the worker's series carry ``profile="cluster"`` (workers exist only there)."""
    metrics = WorkerMetrics()
    metrics.claimed()
    metrics.finished("succeeded", 0.5)
    text = metrics.render().decode()
    assert profile_problems(text, "cluster") == []
    assert {s.name for s in qlsched_samples(text)} >= {"qlsched_worker_claims_total"}


def test_the_reader_checks_and_drops_the_label() -> None:
    """Rule: ``without_profile`` gives the series as before the label, and fails on a qlsched
    series without it (a test reading a scrape checks the label by the way)."""
    assert without_profile('a_total{code="x",profile="edge"}', "edge") == 'a_total{code="x"}'
    assert without_profile('qlsched_x{profile="edge"}', "edge") == "qlsched_x"
    assert without_profile("process_cpu", "edge") == "process_cpu"
    with pytest.raises(AssertionError):
        without_profile('qlsched_x{code="x"}', "edge")
    with pytest.raises(AssertionError):
        without_profile('qlsched_x{profile="cluster"}', "edge")
