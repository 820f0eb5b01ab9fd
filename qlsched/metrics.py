"""Prometheus metrics of one scheduler, in a registry of its own: the cluster's replicas
and the Edge's ``edge run`` alike.

Both profiles run the same round engine and expose the same families under the same
names (``qlsched_rounds_total``, ``qlsched_schedule_lag_seconds``, ...), rendered by
prometheus_client. Every series carries the target's profile as a label,
``profile="cluster"`` or ``profile="edge"``, so a dashboard splits or sums by profile with
no join; ``target_info{profile=...}`` stays for the joins written before. The label is
added in one place, ``ProfileRegistry.collect``: no family declares it, and a new family
(here, in the cluster's passes, in the worker) gets it by being in the registry. Families
a profile does not feed stay at 0 (the Edge has no leases to lose).

Each ``Metrics`` owns one ``ProfileRegistry``: several replicas can share a process (the
demo runs three) without their series colliding, and nothing is ever registered in the
library's global registry. The coordinator feeds it once per round (``observe_round``) plus
two schedule-lag samples per admitted Run (from its due time and from its scheduled time);
the HTTP ``/metrics`` endpoint refreshes the due backlog gauge from the store at most once
per scrape and renders the text exposition.

The store's own counts (admit statements sent, serialization retries among them) are read
from the store at each scrape (``AdmitCounts``): they are cumulative since the replica
started and never reset, so their ratio is the SERIALIZABLE retry rate.

Every label value is a closed code (an outcome tag, a fence part, a diagnostic code, the
profile), never free text, so a scrape can carry no payload or driver message.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from typing import Final, Literal, Protocol, get_args

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector

from qlsched.core.control import ACTION_KINDS, ActionTotal
from qlsched.core.outcomes import OUTCOME_CODES, FencePart
from qlsched.core.store import DUE_BACKLOG_LIMIT, FailingCounts
from qlsched.engine.request_outcomes import OCCURRENCE_RESULTS, REQUEST_CODES
from qlsched.engine.stats import RoundStats
from qlsched.summary import PROMETHEUS_SAMPLES

# The `_created` series (a timestamp per counter and histogram) double the exposition and say
# nothing a restart counter does not; the switch is process-wide in prometheus_client.
disable_created_metrics()  # type: ignore[no-untyped-call]

CONTENT_TYPE: Final = CONTENT_TYPE_PLAIN_0_0_4
"""The media type of ``Metrics.render()`` (the classic text format, version 0.0.4)."""


# A round is a claim statement, a handful of short writes and one batch admit: milliseconds
# normally, seconds when the database struggles, up to the stop deadline at worst.
ROUND_BUCKETS_S: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# Lag = admitted_at - due (scheduled_for + jitter): one cadence (1 s) normally, the misfire
# grace (60 s) or a lease (30 s, a takeover) when something went wrong, far more under
# ``fire_once``.
LAG_BUCKETS_S: Final = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600)


Profile = Literal["cluster", "edge"]
"""The value of every series' ``profile`` label (the worker is part of the cluster)."""


class ProfileRegistry(CollectorRegistry):
    """A registry whose every series carries ``profile``, added as it is collected.

    Collecting is the one path to the exposition and to ``get_sample_value``, so no family
    can miss the label nor needs to declare it (``target_info`` has it already: unchanged).
    Not ``restricted_registry``, which collects behind this: render the whole registry.
    """

    def __init__(self, profile: Profile) -> None:
        super().__init__(auto_describe=True, target_info={"profile": profile})
        self.profile: Final = profile

    def collect(self) -> Iterable[Metric]:
        for metric in super().collect():
            # A copy: a collector may hand out the same Metric again at the next scrape.
            labelled = copy.copy(metric)
            labelled.samples = [
                s._replace(labels={"profile": self.profile, **s.labels}) for s in metric.samples
            ]
            yield labelled


class AdmitCounts(Protocol):
    """What the store counts itself (``PostgresStore`` has both, cumulative)."""

    @property
    def admit_statements(self) -> int:
        """Admit statements sent (batches, row-by-row fallbacks, retries included)."""
        ...

    @property
    def early_sends(self) -> int:
        """Times rows claimed ahead and sent before they were due were sent again."""
        ...

    @property
    def ssi_retries(self) -> int:
        """Admit statements re-sent after a serialization failure or deadlock."""
        ...


class _AdmitCountsCollector(Collector):
    """Reads the store's counts at scrape time, so they can never drift from the store."""

    def __init__(self, source: AdmitCounts) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "qlsched_admit_statements",
            "Admit statements sent to PostgreSQL (retries and row-by-row fallbacks included).",
            value=self._source.admit_statements,
        )
        yield CounterMetricFamily(
            "qlsched_admit_serialization_retries",
            "Admit statements retried after a serialization failure or deadlock"
            " (SQLSTATE 40001 or 40P01).",
            value=self._source.ssi_retries,
        )
        yield CounterMetricFamily(
            "qlsched_admit_early_resends",
            "Admits of rows claimed ahead that reached the database before the rows were due"
            " by its clock, wrote nothing, and were sent again when due.",
            value=self._source.early_sends,
        )


class _ActionTotalsCollector(Collector):
    """Control actions and paused occurrences as the last scrape read them from the
    database (``schedule_action_totals``); nothing until a first read succeeded.

    Database-wide, not this replica's: actions are taken by admin processes, which serve
    no metrics, and every replica reports the same values (aggregate with ``max``).
    """

    def __init__(self) -> None:
        self.totals: list[ActionTotal] | None = None

    def collect(self) -> Iterator[Metric]:
        if self.totals is None:
            return
        by_kind = {kind: ActionTotal(kind, 0, 0) for kind in ACTION_KINDS}
        by_kind.update({t.kind: t for t in self.totals})
        actions = CounterMetricFamily(
            "qlsched_schedule_actions",
            "Schedule control actions recorded, by kind, database-wide (every replica reports"
            " the same count).",
            labels=["kind"],
        )
        for kind in sorted(by_kind):
            actions.add_metric([kind], by_kind[kind].actions)
        yield actions
        yield CounterMetricFamily(
            "qlsched_paused",
            "Occurrences that fell inside pauses and did not run (the sum of"
            " trigger_schedules.paused_total), database-wide.",
            value=by_kind["resume"].occurrences,
        )


def _histograms(r: CollectorRegistry) -> tuple[Histogram, Histogram, Histogram]:
    """A round's duration and an admitted Run's lag, from its due and its scheduled time."""
    duration = Histogram(
        "qlsched_round_duration_seconds",
        "Wall time of one coordinator round.",
        buckets=ROUND_BUCKETS_S,
        registry=r,
    )
    lag = Histogram(
        "qlsched_schedule_lag_seconds",
        "Database time of admission minus the occurrence's due time (its scheduled time"
        " plus its jitter; the scheduled time when the trigger has none).",
        buckets=LAG_BUCKETS_S,
        registry=r,
    )
    lag_from_scheduled = Histogram(
        "qlsched_schedule_lag_from_scheduled_seconds",
        "Database time of admission minus the occurrence's scheduled time (jitter"
        " included: equal to qlsched_schedule_lag_seconds for triggers without jitter).",
        buckets=LAG_BUCKETS_S,
        registry=r,
    )
    return duration, lag, lag_from_scheduled


def _gauges(r: CollectorRegistry) -> tuple[Gauge, Gauge, Gauge]:
    """The bounded due backlog, where its count stops, and the failing rows by kind."""
    backlog = Gauge(
        "qlsched_due_backlog",
        "Active schedule rows due now, claimed or not, counted up to"
        " qlsched_due_backlog_limit (a bounded count: a value equal to the limit means"
        " at least that many).",
        registry=r,
    )
    limit = Gauge(
        "qlsched_due_backlog_limit",
        "Where the qlsched_due_backlog count stops: each scrape reads at most this many rows.",
        registry=r,
    )
    limit.set(DUE_BACKLOG_LIMIT)
    failing = Gauge(
        "qlsched_failing",
        "Database-wide, as of the last scrape: schedule rows whose last admits failed"
        " (each gave its claim back; the next admit clears it), those that failed three"
        " or more times in a row (stuck_schedule), and pending requests whose last"
        " admits failed.",
        ["kind"],
        registry=r,
    )
    return backlog, limit, failing


def _ahead(r: CollectorRegistry) -> tuple[Counter, Gauge]:
    """The Fires decided ahead of their due time (the lookahead), and those still held."""
    decided = Counter(
        "qlsched_fires_decided_ahead",
        "Fires decided before their due time (claimed within lookahead_ms) and held by the"
        " replica until due.",
        registry=r,
    )
    held = Gauge(
        "qlsched_fires_held",
        "Fires decided ahead that this replica holds, waiting for their due time, as of"
        " its last round.",
        registry=r,
    )
    return decided, held


class Metrics:
    """The counters, histograms and gauge of one replica, and their text exposition.

    Ownership: the instance owns its registry; the composition root creates one per replica
    and hands it to the coordinator (writer) and the HTTP app (reader). ``admit_counts``
    (the store) is only read, at each scrape.
    """

    def __init__(
        self, admit_counts: AdmitCounts | None = None, *, profile: Profile = "cluster"
    ) -> None:
        self.registry: Final = ProfileRegistry(profile)
        r = self.registry
        if admit_counts is not None:
            r.register(_AdmitCountsCollector(admit_counts))
        self._action_totals: Final = _ActionTotalsCollector()
        r.register(self._action_totals)

        def counter(name: str, documentation: str, *labels: str) -> Counter:
            return Counter(name, documentation, labels, registry=r)

        self.rounds: Final = counter("qlsched_rounds", "Coordinator rounds completed.")
        self.round_failures: Final = counter(
            "qlsched_round_failures", "Rounds that ended in an exception."
        )
        self.claims: Final = counter("qlsched_claims", "Schedule rows claimed.")
        self.admits: Final = counter("qlsched_admits", "Runs admitted.")
        self.outcomes: Final = counter("qlsched_outcomes", "Store outcomes by code.", "code")
        self.skips: Final = counter(
            "qlsched_skipped_occurrences", "Occurrences skipped by the misfire policy 'skip'."
        )
        self.coalesced: Final = counter(
            "qlsched_coalesced_occurrences",
            "Occurrences passed over (not run) by an admitted late Fire, under either policy.",
        )
        self.races_lost: Final = counter(
            "qlsched_races_lost", "Claim-scoped writes refused because the fence was lost."
        )
        self.fence_lost: Final = counter(
            "qlsched_fence_lost", "Lost fences by the first part that failed.", "part"
        )
        self.errors: Final = counter("qlsched_errors", "Errors by diagnostic code.", "code")
        self.decided_ahead, self.fires_held = _ahead(r)
        self.refused: Final = counter(
            "qlsched_admits_refused",
            "Admits refused for a reason that lasts until a re-publish (a pin that moved, a"
            " digest that does not verify, an inactive project or trigger).",
            "outcome",
            "part",
        )
        self.deadline_cancelled: Final = counter(
            "qlsched_runs_deadline_cancelled",
            "Queued Runs nobody started by their trigger's start deadline, cancelled.",
        )
        self.released: Final = counter(
            "qlsched_runs_released", "Held Runs (overlap buffer_one) released by this process."
        )
        self.request_outcomes: Final = counter(
            "qlsched_request_outcomes",
            "Trigger-now and backfill request admits by outcome.",
            "code",
        )
        self.request_occurrences: Final = counter(
            "qlsched_request_occurrences",
            "Occurrences of requests: admitted, already admitted (refused by the key), or"
            " skipped by the trigger's overlap policy.",
            "result",
        )
        for code in REQUEST_CODES:
            self.request_outcomes.labels(code)
        for result in OCCURRENCE_RESULTS:
            self.request_occurrences.labels(result)
        duration, lag, lag_from_scheduled = _histograms(r)
        self.round_duration: Final = duration
        self.schedule_lag: Final = lag
        self.schedule_lag_from_scheduled: Final = lag_from_scheduled
        backlog, backlog_limit, failing = _gauges(r)
        self.due_backlog: Final = backlog
        self.due_backlog_limit: Final = backlog_limit
        self.failing: Final = failing
        for code in OUTCOME_CODES:
            self.outcomes.labels(code)
        for part in get_args(FencePart):
            self.fence_lost.labels(part)

    def observe_round(self, stats: RoundStats) -> None:
        """Add one round's counts (called once per round, even a round cut by the deadline)."""
        self.rounds.inc()
        self.round_duration.observe(stats.duration_ms / 1000)
        self.claims.inc(stats.claimed)
        self.admits.inc(stats.admitted)
        self.skips.inc(stats.skipped_occurrences)
        self.coalesced.inc(stats.coalesced)
        self.decided_ahead.inc(stats.decided_ahead)
        self.fires_held.set(stats.held_ahead)
        by_code = {
            code: stats.races_lost if code == "fence_lost" else getattr(stats, code)
            for code in OUTCOME_CODES
        }
        for code, n in by_code.items():
            if n:
                self.outcomes.labels(code).inc(n)
        if stats.races_lost:
            self.races_lost.inc(stats.races_lost)
        for part, n in stats.fence_lost.items():
            self.fence_lost.labels(part).inc(n)
        for code, n in stats.errors.items():
            self.errors.labels(code).inc(n)

    def observe_lag_ms(self, from_due_ms: int, from_scheduled_ms: int) -> None:
        """One admitted Run's lag from its due time and from its scheduled time (the same
        without jitter); negative values (impossible with one clock) count as 0."""
        self.schedule_lag.observe(max(from_due_ms, 0) / 1000)
        self.schedule_lag_from_scheduled.observe(max(from_scheduled_ms, 0) / 1000)

    def count_refused(self, outcome: str, part: str) -> None:
        self.refused.labels(outcome, part).inc()

    def count_round_failure(self) -> None:
        self.round_failures.inc()

    def count_request(self, code: str, occurrences: dict[str, int]) -> None:
        """One request admit's outcome, and its occurrences by result."""
        self.request_outcomes.labels(code).inc()
        for result, n in occurrences.items():
            self.request_occurrences.labels(result).inc(n)

    def count_runs_pass(self, deadline_cancelled: int, released: int) -> None:
        """A runs pass's work (start deadlines, held Runs released)."""
        self.deadline_cancelled.inc(deadline_cancelled)
        self.released.inc(released)

    def summary_counts(self) -> dict[str, float]:
        """The summary line's counts (``qlsched.summary.SUMMARY_KEYS``), since start."""
        return registry_reader(self.registry)()

    def count_error(self, code: str, n: int = 1) -> None:
        self.errors.labels(code).inc(n)

    def set_due_backlog(self, rows: int) -> None:
        """A reader's count, clamped to the limit the help names (one that counts further
        must not make the gauge mean two things)."""
        self.due_backlog.set(min(rows, DUE_BACKLOG_LIMIT))

    def set_failing(self, counts: FailingCounts) -> None:
        """What is failing again and again, as a scrape just read it from the database."""
        self.failing.labels("schedule").set(counts.schedules)
        self.failing.labels("stuck_schedule").set(counts.stuck_schedules)
        self.failing.labels("request").set(counts.requests)

    def set_action_totals(self, totals: list[ActionTotal]) -> None:
        """The control actions' totals as a scrape just read them from the database."""
        self._action_totals.totals = totals

    def render(self) -> bytes:
        """The Prometheus text exposition (``CONTENT_TYPE``) of this replica only."""
        return generate_latest(self.registry)


def registry_reader(registry: ProfileRegistry) -> Callable[[], dict[str, float]]:
    """The summary line's counts (``qlsched.summary.SUMMARY_KEYS``) from a registry."""
    labels: dict[str, str] = {"profile": registry.profile}

    def read() -> dict[str, float]:
        return {
            k: registry.get_sample_value(v, labels) or 0.0 for k, v in PROMETHEUS_SAMPLES.items()
        }

    return read
