"""The periodic one-line summary ``qlsched run`` prints for a person watching the terminal.

It reads the replica's own Prometheus registry (the counters the coordinator already keeps),
so printing it costs the scheduler nothing: no store call, nothing in a round's path.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry

_SAMPLES: Final = {
    "rounds": "qlsched_rounds_total",
    "failed": "qlsched_round_failures_total",
    "claimed": "qlsched_claims_total",
    "admitted": "qlsched_admits_total",
    "skipped": "qlsched_skipped_occurrences_total",
    "coalesced": "qlsched_coalesced_occurrences_total",
    "lag_sum_s": "qlsched_schedule_lag_seconds_sum",
    "lag_count": "qlsched_schedule_lag_seconds_count",
}


class Summary:
    """Counts since the previous line, from one replica's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._last = self._read()

    def _read(self) -> dict[str, float]:
        return {k: self._registry.get_sample_value(v) or 0.0 for k, v in _SAMPLES.items()}

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
