"""The periodic one-line summary ``qlsched run`` and ``qlsched edge run`` print for a
person watching the terminal, and how often (``--summary``, ``QLSCHED_SUMMARY``).

It reads the scheduler's own counters (the cluster's Prometheus registry, the Edge's
metrics) through a reader each profile gives, so printing it costs the scheduler nothing:
no store call, nothing in a round's path. Neutral ground: no profile, no metrics library.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Final

from qlsched.core.config import ConfigError
from qlsched.engine.stats import RoundStats

SUMMARY_ON_TERMINAL_S: Final = 10.0
SUMMARY_KEYS: Final = (
    "rounds",
    "failed",
    "claimed",
    "admitted",
    "skipped",
    "coalesced",
    "lag_sum_s",
    "lag_count",
)
"""What a reader gives, each a cumulative count since start."""

PROMETHEUS_SAMPLES: Final = {
    "rounds": "qlsched_rounds_total",
    "failed": "qlsched_round_failures_total",
    "claimed": "qlsched_claims_total",
    "admitted": "qlsched_admits_total",
    "skipped": "qlsched_skipped_occurrences_total",
    "coalesced": "qlsched_coalesced_occurrences_total",
    "lag_sum_s": "qlsched_schedule_lag_seconds_sum",
    "lag_count": "qlsched_schedule_lag_seconds_count",
}


"""The cluster's sample for each of ``SUMMARY_KEYS`` in its Prometheus registry."""

Reader = Callable[[], Mapping[str, float]]


class SummaryCounts:
    """The summary line's counts kept as plain numbers: the metrics of an ``edge run``
    that serves no ``/metrics`` (no metrics library loaded, so the process stays small).
    The same engine feeds it as it feeds ``qlsched.metrics.Metrics``."""

    def __init__(self) -> None:
        self._counts = dict.fromkeys(SUMMARY_KEYS, 0.0)

    def observe_round(self, stats: RoundStats) -> None:
        c = self._counts
        c["rounds"] += 1
        c["claimed"] += stats.claimed
        c["admitted"] += stats.admitted
        c["skipped"] += stats.skipped_occurrences
        c["coalesced"] += stats.coalesced

    def observe_lag_ms(self, from_due_ms: int, from_scheduled_ms: int) -> None:
        self._counts["lag_sum_s"] += max(from_due_ms, 0) / 1000
        self._counts["lag_count"] += 1

    def count_refused(self, outcome: str, part: str) -> None:
        """Reported as a diagnostic by the engine; the summary line has no column for it."""

    def count_round_failure(self) -> None:
        self._counts["failed"] += 1

    def count_request(self, code: str, occurrences: dict[str, int]) -> None:
        """Shown by ``edge status`` from the file; the summary line has no column for it."""

    def count_runs_pass(self, deadline_cancelled: int, released: int) -> None:
        """Shown by ``edge status`` from the file; the summary line has no column for it."""

    def summary_counts(self) -> dict[str, float]:
        return dict(self._counts)


class Summary:
    """Counts since the previous line, from one scheduler's counters."""

    def __init__(self, read: Reader) -> None:
        self._source = read
        self._last = self._read()

    def _read(self) -> dict[str, float]:
        counts = self._source()
        return {k: float(counts.get(k, 0.0)) for k in SUMMARY_KEYS}

    def line(self, interval_s: float) -> str:
        now = self._read()
        d = {k: now[k] - self._last[k] for k in now}
        self._last = now
        lag = "-"
        if d["lag_count"]:
            lag = f"{d['lag_sum_s'] / d['lag_count']:.2f}s"
        failed = f", {d['failed']:.0f} failed" if d["failed"] else ""
        return (
            f"last {interval_s:g}s: {d['rounds']:.0f} rounds{failed}, "
            f"{d['claimed']:.0f} claimed, {d['admitted']:.0f} admitted, "
            f"{d['skipped']:.0f} skipped, {d['coalesced']:.0f} coalesced, mean lag {lag}; "
            f"{now['admitted']:.0f} admitted since start"
        )


def summary_interval(flag: str | None) -> float:
    """Seconds between summary lines: ``--summary``, else ``QLSCHED_SUMMARY`` (a service
    manager's environment file), else every 10 s on a terminal and never otherwise.

    Raises:
        ConfigError: not a number of seconds in 0..86400 (exit 2).
    """
    text, source = flag, "flag --summary"
    if text is None and (text := os.environ.get("QLSCHED_SUMMARY")) is not None:
        source = "environment QLSCHED_SUMMARY"
    if text is None:
        return SUMMARY_ON_TERMINAL_S if sys.stderr.isatty() else 0.0
    try:
        given = float(text)
    except ValueError:
        raise ConfigError(f"summary: expected seconds, got {text!r} (from {source})") from None
    if not 0 <= given <= 86_400:
        raise ConfigError(f"summary={given:g} is out of bounds 0..86400 (from {source})")
    return given
