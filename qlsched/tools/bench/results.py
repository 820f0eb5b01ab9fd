"""The bench's results: what each phase measured, as one ``BenchReport``.

``--json`` prints the report as one JSON object (the key names below are a contract:
``machine``, ``postgres_version``, ``drain``, ``drain_same_tick``, ``steady``,
``claim_latency_us``, ``rss_mb``, ``ceiling``); ``render`` prints it for a reader, and
``targets`` judges its figures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec

from qlsched.tools.bench.machine import CpuUse, Load, Machine
from qlsched.tools.bench.retention_results import RetentionCost
from qlsched.tools.bench.scale_results import ObserveResult, Progress, ScaleResult
from qlsched.tools.bench.window_results import WindowCounts
from qlsched.tools.bench.worker_results import WorkerThroughput


class Lag(msgspec.Struct, frozen=True):
    """Schedule lag (queued_at_ms - scheduled_for_ms, database time), ms."""

    p50: int | None
    p95: int | None
    p99: int | None
    max: int | None


class DrainResult(msgspec.Struct, frozen=True, kw_only=True):
    """N occurrences due at one instant, drained by the replicas."""

    triggers: int
    cron: str
    admitted: int
    occurrences_per_s: float | None
    """Admitted / (last - first queue time), database time."""
    seconds: float
    """First to last queue time."""
    seconds_from_due: float | None
    """From the instant all rows were due to the last queue time."""
    duplicates: int
    lost: int
    malformed: int
    """Runs not in their admission shape, or at no expected occurrence (verify)."""
    ssi_retries: int
    admit_statements: int
    ssi_retry_ratio: float | None
    """Retries per admit statement sent (failed ones included)."""
    lag_ms: Lag | None
    """From the shared tick (same-tick drain only: the burst's occurrence is months old)."""
    diagnostics: dict[str, int]
    stop_problems: list[str]
    replica_cpu_us_per_occurrence: float | None = None
    """The replicas' user + system CPU (``/proc/<pid>/stat``) from just before the rows
    were due to the last admit, idle rounds included, per admitted occurrence."""
    progress: Progress | None = None
    """Runs admitted at each poll, from when the rows fell due (for ``--plot``)."""


class SteadyResult(WindowCounts, frozen=True, kw_only=True):
    """N triggers, one occurrence each per minute, spread over the minute's 60 seconds."""

    lag_ms: Lag
    cadence_ms: int
    ssi_retries: int
    admit_statements: int
    ssi_retry_ratio: float | None
    diagnostics: dict[str, int]
    stop_problems: list[str]
    http_clients: int = 0
    """Clients flooding one replica's /healthz through the window (0: none)."""
    http_answered: int = 0
    http_busy: int = 0
    http_errors: int = 0


class OnTimeResult(WindowCounts, frozen=True, kw_only=True):
    """Every-second triggers on two replicas at ``qlsched run``'s default settings."""

    replicas: int
    cadence_ms: int
    claim_budget: int
    lag_ms: Lag
    """Admitted minus due (database time), over the window's occurrences."""
    stop_problems: list[str]
    catch_up_budget: int | None = None
    lookahead_ms: int | None = None
    """How far ahead the replicas claimed (None: a report from before the lookahead)."""
    burst_per_s: float | None = None
    """The same run's burst drain (as many replicas, tuned): a tick of ``triggers`` rows
    claimed and admitted at that rate has its k-th row wait ``k / burst_per_s``
    (``floor_ms``); claimed ahead, only the admits are left, so the lag can beat it."""

    def floor_ms(self, share: float) -> float | None:
        """The lag of the row at ``share`` (0.5: the median) of one tick claimed and
        admitted at the burst rate."""
        if not self.burst_per_s:
            return None
        return share * self.triggers / self.burst_per_s * 1000


class PublishUnderLoad(msgspec.Struct, frozen=True, kw_only=True):
    """The steady load while a large file of new triggers is published and initialised."""

    steady: SteadyResult
    """The existing triggers' window (their lag is the phase's figure)."""
    published: int
    """New triggers in the file (yearly: initialised, never due in the window)."""
    publish_s: float
    """The publish transaction alone."""
    initialised: int
    """Of the new triggers, those with a cursor when the window ended."""
    missed: int
    """Occurrences of the existing triggers skipped or coalesced during the phase."""


class ClaimLatency(msgspec.Struct, frozen=True, kw_only=True):
    """One claim statement of k rows (``config.claim_limit``), microseconds, this process's
    clock; ``k1_*`` the same statement claiming one row."""

    p50: float
    p99: float
    max: float
    k1_p50: float
    k1_p99: float
    round_trip_p50: float
    round_trip_p99: float
    """A bare ``SELECT 1`` on the same connection, timed in turn with the claims: the floor
    this machine puts under every statement at those moments."""
    repetitions: int
    planning_ms: float
    """The planning time of the EXPLAIN ANALYZE that gave ``plan`` (the replicas' prepared
    claim runs a cached generic plan and is not planned again)."""
    execution_ms: float
    plan: list[str]
    """EXPLAIN (ANALYZE, FORMAT JSON) node types, pre-order."""


class RssResult(msgspec.Struct, frozen=True, kw_only=True):
    triggers: int
    rss_mb: float
    peak_mb: float | None
    rounds: int
    admitted: int


class PgbenchRun(msgspec.Struct, frozen=True, kw_only=True):
    """One pgbench run of the pair."""

    clients: int
    threads: int
    pairs_per_s: float
    transactions: int
    failed: int
    retried: int
    retries: int
    ssi_retry_ratio: float | None


class BatchCeiling(msgspec.Struct, frozen=True, kw_only=True):
    """The replicas' round under pgbench: claim up to k, one batch admit of those rows."""

    occurrences_per_s: float
    """Runs admitted (counted in the database) per second of the run."""
    rounds_per_s: float
    k: int
    clients: int
    admitted: int
    ratio: float | None
    """drain.occurrences_per_s / occurrences_per_s (target >= 0.8)."""
    failed: int
    retries: int
    ssi_retry_ratio: float | None


class CeilingResult(msgspec.Struct, frozen=True, kw_only=True):
    """The per-occurrence pair (claim 1, admit 1) under pgbench, same server, same run."""

    pair_occurrences_per_s: float
    ratio: float | None
    """drain.occurrences_per_s / pair_occurrences_per_s."""
    clients: int
    threads: int
    seconds: int
    transactions: int
    failed: int
    retried: int
    retries: int
    ssi_retry_ratio: float | None
    """Retries per admit statement sent."""
    runs: list[PgbenchRun]
    """Every pgbench run; the best one is the ceiling."""
    batch: BatchCeiling | None = None
    """The batch ceiling: the limit the drain should approach."""


class DecisionCost(msgspec.Struct, frozen=True, kw_only=True):
    """One decision, microseconds (this process's clock, one call each)."""

    cron: str
    timezone: str
    late_ms: int
    calls: int
    p50_us: float
    p99_us: float
    max_us: float
    coalesced: int
    """The passed-over count the decision reported (the same in every call)."""
    expected_coalesced: int
    """Seconds in ``(cursor, now]``: every one is an occurrence of a wildcard-hour trigger."""
    exact: bool
    round_size: int
    rounds: int
    round_worst_ms: float
    """The slowest round of ``round_size`` consecutive decisions, summed."""


class ReadinessCost(msgspec.Struct, frozen=True, kw_only=True):
    """``check_readiness`` on a fresh runtime connection, ms (connecting not included)."""

    checks: int
    p50_ms: float
    max_ms: float
    connect_p50_ms: float
    ready: bool


class RecoveryCost(msgspec.Struct, frozen=True, kw_only=True):
    """``recover`` over a history of terminal Attempts, ms (one call each)."""

    terminal_attempts: int
    live_attempts: int
    load_s: float
    calls: int
    first_ms: float
    """The first call: reads the candidates and marks them."""
    p50_ms: float
    max_ms: float
    marked: int


class PublishCost(msgspec.Struct, frozen=True, kw_only=True):
    """The product's publish of one file of ``triggers`` triggers, seconds."""

    triggers: int
    tasks: int
    added_s: float
    """Into the empty tables: every trigger added."""
    unchanged_s: float
    """The same file again: every trigger unchanged, nothing written."""
    added: int
    unchanged: int


class CostResult(msgspec.Struct, frozen=True, kw_only=True):
    decision: DecisionCost
    readiness: ReadinessCost
    recovery: RecoveryCost


class Target(msgspec.Struct, frozen=True, kw_only=True):
    goal: str
    measured: str
    met: bool | None
    """None: not measurable in this run."""


class PostgresInfo(msgspec.Struct, frozen=True, kw_only=True):
    embedded: bool
    shared_buffers: str
    fsync: str
    synchronous_commit: str


class BenchConfig(msgspec.Struct, frozen=True, kw_only=True):
    triggers: int
    replicas: int
    seconds: int
    quick: bool
    claim_budget: int
    cadence_ms: int
    lease_ms: int
    claim_limit: int
    pgbench_clients: list[int]


class BenchReport(msgspec.Struct, frozen=True, kw_only=True):
    machine: Machine
    load: dict[str, Load]
    """Load averages at ``start`` and ``end``."""
    cpu: CpuUse | None
    """How all CPUs were used during the run (this bench included), steal included."""
    postgres_version: str
    postgres: PostgresInfo
    config: BenchConfig
    drain: DrainResult
    drain_same_tick: DrainResult
    steady: SteadyResult
    steady_http: SteadyResult | None = None
    """The steady phase again with ``flood.CLIENTS`` clients on one replica's /healthz."""
    claim_latency_us: dict[int, dict[str, ClaimLatency]]
    """Schedule rows -> state -> latency."""
    rss_mb: dict[int, float]
    """Triggers -> a replica's RSS after its rounds over them."""
    rss: list[RssResult]
    ceiling: CeilingResult
    targets: dict[str, Target]
    decision_cost: DecisionCost | None = None
    """A decision for an every-second trigger a year late (costs phase)."""
    recovery_cost: RecoveryCost | None = None
    """Startup recovery over a history of terminal Attempts (costs phase)."""
    readiness_cost: ReadinessCost | None = None
    """Readiness on a fresh connection (costs phase)."""
    publish: PublishCost | None = None
    """Publish of a large file, then again unchanged (publish phase)."""
    on_time: OnTimeResult | None = None
    """Every-second triggers at the default settings (on_time phase)."""
    publish_under_load: PublishUnderLoad | None = None
    """The steady load while a large publish initialises (publish_load phase)."""
    observe: ObserveResult | None = None
    """status, /metrics and /v1/schedules over big tables (observe phase)."""
    scale: ScaleResult | None = None
    """The million-trigger burst and the 100,000-trigger steady load (``--scale``)."""
    worker: WorkerThroughput | None = None
    """No-op jobs per second a worker runs, at concurrency 1 and N (worker phase)."""
    retention: RetentionCost | None = None
    """A prune batch's cost over a large history against the floor (retention phase)."""
    exactly_once: bool
    """No duplicate, lost or malformed Run in any replica phase."""
    seconds: float
    """Wall time of the whole run."""
    phase_seconds: dict[str, float] = msgspec.field(default_factory=dict)
    """Wall time of each phase, loads and audits included, in run order."""


def exactly_once(*phases: DrainResult | SteadyResult | OnTimeResult) -> bool:
    return all(p.duplicates == 0 and p.lost == 0 and p.malformed == 0 for p in phases)


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (``fraction`` in (0, 1])."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def ratio(part: float | None, whole: float | None) -> float | None:
    return part / whole if part is not None and whole else None
