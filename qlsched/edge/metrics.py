"""The Edge scheduler's counters and lag histograms, in the Prometheus text format."""

from __future__ import annotations

from typing import Final

from qlsched.core.outcomes import OUTCOME_CODES
from qlsched.engine.round import SPEC_INVALID
from qlsched.engine.stats import RoundStats

LAG_BUCKETS_S: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class LagHistogram:
    """One lag histogram in the text format (cumulative buckets, as Prometheus reads them)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.buckets = [0] * len(LAG_BUCKETS_S)
        self.count = 0
        self.sum_s = 0.0

    def observe(self, lag_ms: int) -> None:
        lag_s = max(0, lag_ms) / 1000
        for i, bound in enumerate(LAG_BUCKETS_S):
            if lag_s <= bound:
                self.buckets[i] += 1
        self.count += 1
        self.sum_s += lag_s

    def render(self) -> list[str]:
        n = self.name
        return [
            f"# TYPE {n} histogram",
            *(
                f'{n}_bucket{{le="{bound}"}} {k}'
                for bound, k in zip(LAG_BUCKETS_S, self.buckets, strict=True)
            ),
            f'{n}_bucket{{le="+Inf"}} {self.count}',
            f"{n}_sum {self.sum_s:.3f}",
            f"{n}_count {self.count}",
        ]


class EdgeMetrics:
    """Counters of one scheduler, rendered in the Prometheus text format (no client library:
    the Edge process stays small)."""

    def __init__(self) -> None:
        self.rounds = 0
        self.round_failures = 0
        self.claimed = 0
        self.outcomes: dict[str, int] = {}
        self.skipped_occurrences = 0
        self.coalesced_occurrences = 0
        self.invalid_specs = 0
        self.lag = LagHistogram("qlsched_edge_schedule_lag_seconds")
        """Admission minus the occurrence's due time (scheduled time plus its jitter)."""
        self.lag_from_scheduled = LagHistogram("qlsched_edge_schedule_lag_from_scheduled_seconds")
        """Admission minus the occurrence's scheduled time (the same without jitter)."""
        self.round_seconds_sum = 0.0
        self.refused: dict[tuple[str, str], int] = {}

    def observe_round(self, stats: RoundStats) -> None:
        """Add one round's counts (the engine calls it once per round, failed ones too)."""
        self.rounds += 1
        self.claimed += stats.claimed
        self.round_seconds_sum += stats.duration_ms / 1000
        self.skipped_occurrences += stats.skipped_occurrences
        self.coalesced_occurrences += stats.coalesced
        self.invalid_specs += stats.errors.get(SPEC_INVALID, 0)
        for code in OUTCOME_CODES:
            n = stats.races_lost if code == "fence_lost" else getattr(stats, code)
            if n:
                self.outcomes[code] = self.outcomes.get(code, 0) + n

    def summary_counts(self) -> dict[str, float]:
        """The summary line's counts (``qlsched.summary.SUMMARY_KEYS``), since start."""
        return {
            "rounds": self.rounds,
            "failed": self.round_failures,
            "claimed": self.claimed,
            "admitted": self.outcomes.get("admitted", 0),
            "skipped": self.skipped_occurrences,
            "coalesced": self.coalesced_occurrences,
            "lag_sum_s": self.lag.sum_s,
            "lag_count": self.lag.count,
        }

    def count_refused(self, outcome: str, part: str) -> None:
        """An admit refused until a re-publish (reported as a diagnostic by the engine)."""
        key = (outcome, part)
        self.refused[key] = self.refused.get(key, 0) + 1

    def observe_lag_ms(self, from_due_ms: int, from_scheduled_ms: int) -> None:
        """One admitted Run's lag from its due time and from its scheduled time."""
        self.lag.observe(from_due_ms)
        self.lag_from_scheduled.observe(from_scheduled_ms)

    def render(self, backlog: int | None) -> str:
        lines = [
            "# TYPE qlsched_edge_rounds_total counter",
            f"qlsched_edge_rounds_total {self.rounds}",
            "# TYPE qlsched_edge_round_failures_total counter",
            f"qlsched_edge_round_failures_total {self.round_failures}",
            "# TYPE qlsched_edge_round_seconds_total counter",
            f"qlsched_edge_round_seconds_total {self.round_seconds_sum:.6f}",
            "# TYPE qlsched_edge_claims_total counter",
            f"qlsched_edge_claims_total {self.claimed}",
            "# TYPE qlsched_edge_outcomes_total counter",
        ]
        lines += [
            f'qlsched_edge_outcomes_total{{outcome="{code}"}} {n}'
            for code, n in sorted(self.outcomes.items())
        ]
        lines += [
            "# TYPE qlsched_edge_skipped_total counter",
            f"qlsched_edge_skipped_total {self.skipped_occurrences}",
            "# TYPE qlsched_edge_coalesced_total counter",
            f"qlsched_edge_coalesced_total {self.coalesced_occurrences}",
            "# TYPE qlsched_edge_invalid_specs_total counter",
            f"qlsched_edge_invalid_specs_total {self.invalid_specs}",
        ]
        lines += self.lag.render() + self.lag_from_scheduled.render()
        if backlog is not None:
            lines += ["# TYPE qlsched_edge_backlog gauge", f"qlsched_edge_backlog {backlog}"]
        return "\n".join(lines) + "\n"
