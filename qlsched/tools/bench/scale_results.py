"""What the bench's phases at scale measured (issue #20 items 2, 3, 7), and the series its
charts draw: plain structs, so ``report`` can carry them without importing the phases.

JSON keys (``--json``): ``observe`` (status, a ``/metrics`` scrape and ``/v1/schedules``
at 1M triggers and 10M Runs), ``burst_1m`` (a million due triggers drained), ``steady_100k``
(100,000 triggers over a minute), and ``progress`` (drain progress per phase, for charts).
"""

from __future__ import annotations

import msgspec

from qlsched.tools.bench.window_results import WindowCounts


class EndpointTiming(msgspec.Struct, frozen=True, kw_only=True):
    """One read timed from this process, milliseconds."""

    calls: int
    p50_ms: float
    p99_ms: float
    max_ms: float


class ObserveResult(msgspec.Struct, frozen=True, kw_only=True):
    """Observability at scale: the three reads an operator makes, over big tables."""

    triggers: int
    runs: int
    """Runs in the history the reads ran over."""
    load_s: float
    """Writing the triggers (the Runs come from the costs phase's history)."""
    status: EndpointTiming
    """``read_status`` on an open observer connection (what ``qlsched status`` reads)."""
    metrics: EndpointTiming
    """``GET /metrics`` of a running replica (its bounded due-backlog count included)."""
    schedules: EndpointTiming
    """``GET /v1/schedules`` pages of 1,000 rows at cursors spread over the key space."""
    due_backlog: int
    due_backlog_capped: bool
    dashboard: dict[str, EndpointTiming] = {}
    """``qlsched ui``'s pages (its own process, observer role) by name: overview, schedules,
    one schedule, runs, one Run, requests, audit (``observe_ui.pages``)."""


class Progress(msgspec.Struct, frozen=True):
    """Runs admitted so far at each poll of a drain (seconds since the rows fell due)."""

    seconds: list[float]
    admitted: list[int]


class RssSample(msgspec.Struct, frozen=True):
    admitted: int
    """Runs admitted when the sample was taken (all replicas)."""
    rss_mb: list[float]
    """Per replica."""


class BigBurst(msgspec.Struct, frozen=True, kw_only=True):
    """A million due triggers drained by the replicas, beside the 10,000-trigger burst."""

    triggers: int
    occurrences_per_s: float | None
    small_occurrences_per_s: float | None
    """The same run's 10,000-trigger burst."""
    rate_ratio: float | None
    """occurrences_per_s / small_occurrences_per_s."""
    seconds: float
    admitted: int
    duplicates: int
    lost: int
    malformed: int
    ssi_retry_ratio: float | None
    replica_cpu_us_per_occurrence: float | None
    rss_start_mb: list[float]
    """Per replica, when the rows fell due (after their warm-up rounds)."""
    rss_end_mb: list[float]
    """Per replica, at the last admit."""
    rss_peak_mb: list[float | None]
    rss_change: float | None
    """The largest relative change, start to end or to the peak, over the replicas."""
    rss_samples: list[RssSample]
    claim_plan: list[str]
    """The claim's executed plan over the million due rows (EXPLAIN ANALYZE, rolled back)."""
    claim_index_ordered: bool
    """The plan walks the claim index and reads no table by a sequential scan."""
    phase_s: float
    """The whole phase: load, drain, audit."""
    progress: Progress | None


class LagHistogram(msgspec.Struct, frozen=True):
    """Runs per lag bucket: ``counts[i]`` Runs with lag in ``[edges_ms[i], edges_ms[i+1])``;
    the last bucket is open-ended."""

    edges_ms: list[int]
    counts: list[int]


class BigSteady(WindowCounts, frozen=True, kw_only=True):
    """100,000 triggers, each once a minute, spread over the minute."""

    lag_p50_ms: int | None
    lag_p95_ms: int | None
    lag_p99_ms: int | None
    lag_max_ms: int | None
    cadence_ms: int
    ssi_retry_ratio: float | None
    histogram: LagHistogram


class ScaleResult(msgspec.Struct, frozen=True, kw_only=True):
    burst: BigBurst
    steady: BigSteady
