"""The bench's report: what each phase measured, the targets, and the readable rendering.

One ``BenchReport`` is the whole result; ``--json`` prints it as one JSON object (the key
names below are a contract: ``machine``, ``postgres_version``, ``drain``,
``drain_same_tick``, ``steady``, ``claim_latency_us``, ``rss_mb``, ``ceiling``), otherwise
``render`` prints it for a reader. Targets compare figures with the goals of docs/contract.md §10; a
missed target is reported, never hidden, and does not change the exit code (exactly once
does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec

from qlsched.tools.bench.machine import CpuUse, Load, Machine


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


class SteadyResult(msgspec.Struct, frozen=True, kw_only=True):
    """N triggers, one occurrence each per minute, spread over the minute's 60 seconds."""

    triggers: int
    seconds: int
    expected_occurrences: int
    """Occurrences due in the measured window."""
    occurrences: int
    """Runs admitted for them."""
    duplicates: int
    lost: int
    malformed: int
    lag_ms: Lag
    cadence_ms: int
    ssi_retries: int
    admit_statements: int
    ssi_retry_ratio: float | None
    diagnostics: dict[str, int]
    stop_problems: list[str]


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
    exactly_once: bool
    """No duplicate, lost or malformed Run in any replica phase."""
    seconds: float
    """Wall time of the whole run."""


def exactly_once(*phases: DrainResult | SteadyResult) -> bool:
    return all(p.duplicates == 0 and p.lost == 0 and p.malformed == 0 for p in phases)


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (``fraction`` in (0, 1])."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def ratio(part: float | None, whole: float) -> float | None:
    return part / whole if part is not None and whole else None


def targets(
    *,
    drain: DrainResult,
    same_tick: DrainResult,
    steady: SteadyResult,
    claims: dict[int, dict[str, ClaimLatency]],
    claim_limit: int,
    rss: list[RssResult],
    ceiling: CeilingResult,
    costs: CostResult | None = None,
    publishing: PublishCost | None = None,
) -> dict[str, Target]:
    out: dict[str, Target] = {}
    if publishing is not None:
        out.update(publish_targets(publishing))
    if costs is not None:
        out.update(cost_targets(costs))
    out["drain_vs_ceiling"] = Target(
        goal="burst drain >= 2x the same-run pgbench per-occurrence pair",
        measured=_maybe(ceiling.ratio, "{:.2f}x"),
        met=None if ceiling.ratio is None else ceiling.ratio >= 2.0,
    )
    if ceiling.batch is not None:
        b = ceiling.batch
        out["drain_vs_batch_ceiling"] = Target(
            goal=f"burst drain >= 0.8x the same-run pgbench batch ceiling (claim {b.k}, admit "
            f"{b.k}, {b.clients} clients)",
            measured=_maybe(b.ratio, "{:.2f}x")
            + f" ({_rate(drain.occurrences_per_s)} vs {_rate(b.occurrences_per_s)})",
            met=None if b.ratio is None else b.ratio >= 0.8,
        )
    tick_ratio = ratio(same_tick.occurrences_per_s, ceiling.pair_occurrences_per_s)
    out["same_tick_vs_ceiling"] = Target(
        goal="one-cron-tick drain >= 2x the same-run pgbench per-occurrence pair",
        measured=_maybe(tick_ratio, "{:.2f}x"),
        met=None if tick_ratio is None else tick_ratio >= 2.0,
    )
    ratios = {
        "drain": drain.ssi_retry_ratio,
        "same tick": same_tick.ssi_retry_ratio,
        "steady": steady.ssi_retry_ratio,
    }
    known = [r for r in ratios.values() if r is not None]
    out["ssi_retries"] = Target(
        goal="SSI retries < 1 % of admit statements",
        measured=", ".join(f"{k} {_maybe(v, '{:.2%}')}" for k, v in ratios.items()),
        met=all(r < 0.01 for r in known) if known else None,
    )
    bound = steady.cadence_ms + 250
    out["steady_lag"] = Target(
        goal=f"steady p99 schedule lag <= cadence + 250 ms ({bound} ms)",
        measured=_maybe(steady.lag_ms.p99, "{} ms"),
        met=None if steady.lag_ms.p99 is None else steady.lag_ms.p99 <= bound,
    )
    largest = max(claims) if claims else None
    if largest is not None:
        # Both claim sizes are judged: the replicas' k rows per statement, and the ADR's
        # claim of one row (LIMIT 1), which is what the design's ~0.3 ms figure measured.
        # The bare round trip timed in the same loop is shown beside them, not subtracted.
        worst = max(c.p99 for c in claims[largest].values())
        worst_k1 = max(c.k1_p99 for c in claims[largest].values())
        floor = max(c.round_trip_p99 for c in claims[largest].values())
        beside = f" (a bare SELECT 1 in the same loops: worst p99 {floor / 1000:.3f} ms)"
        out["claim_latency"] = Target(
            goal=(
                f"claim p99 <= 1 ms at {largest:,} rows in every state, "
                f"{claim_limit} rows per claim"
            ),
            measured=f"worst p99 {worst / 1000:.3f} ms{beside}",
            met=worst <= 1000,
        )
        out["claim_latency_k1"] = Target(
            goal=f"claim p99 <= 1 ms at {largest:,} rows in every state, 1 row per claim",
            measured=f"worst p99 {worst_k1 / 1000:.3f} ms{beside}",
            met=worst_k1 <= 1000,
        )
    if largest is not None:
        out.update(claim_targets(claims, claim_limit))
    if len(rss) >= 2:
        low, high = min(rss, key=lambda r: r.triggers), max(rss, key=lambda r: r.triggers)
        change = high.rss_mb / low.rss_mb - 1
        out["rss_flat"] = Target(
            goal=f"replica RSS flat within 10 % from {low.triggers:,} to {high.triggers:,}",
            measured=f"{low.rss_mb:.1f} -> {high.rss_mb:.1f} MB ({change:+.1%})",
            met=abs(change) <= 0.10,
        )
    return out


DECISION_P99_MS = 1.0
ROUND_HOLD_MS = 50.0
RECOVERY_MS = 100.0
READINESS_MS = 50.0
COST_KEYS = frozenset({"decision_year_late", "decision_round", "recovery", "readiness"})


def cost_targets(costs: CostResult) -> dict[str, Target]:
    """The costs that must not grow, one target each; the worst figure is judged."""
    d, rec, ready = costs.decision, costs.recovery, costs.readiness
    late = f"{d.late_ms // 86_400_000} days late"
    return {
        "decision_year_late": Target(
            goal=(
                f"a decision ({d.cron!r} {d.timezone}, fire_once, {late}) p99 <= "
                f"{DECISION_P99_MS:g} ms, passed-over count exact"
            ),
            measured=(
                f"p50 {d.p50_us / 1000:.3f} ms, p99 {d.p99_us / 1000:.3f} ms over {d.calls:,} "
                f"calls; passed over {d.coalesced:,} of {d.expected_coalesced:,} "
                + ("(exact)" if d.exact else "(WRONG)")
            ),
            met=d.p99_us <= DECISION_P99_MS * 1000 and d.exact,
        ),
        "decision_round": Target(
            goal=(
                f"a round of {d.round_size} such decisions holds the event loop "
                f"<= {ROUND_HOLD_MS:g} ms"
            ),
            measured=f"worst of {d.rounds} rounds {d.round_worst_ms:.1f} ms",
            met=d.round_worst_ms <= ROUND_HOLD_MS,
        ),
        "recovery": Target(
            goal=(
                f"startup recovery with {rec.terminal_attempts:,} terminal attempts "
                f"<= {RECOVERY_MS:g} ms"
            ),
            measured=(
                f"first {rec.first_ms:.1f} ms (marked {rec.marked}), p50 {rec.p50_ms:.1f} ms, "
                f"worst {rec.max_ms:.1f} ms of {rec.calls}"
            ),
            met=rec.max_ms <= RECOVERY_MS and rec.marked == rec.live_attempts // 2,
        ),
        "readiness": Target(
            goal=f"readiness at start (fresh connection) <= {READINESS_MS:g} ms",
            measured=(
                f"p50 {ready.p50_ms:.1f} ms, worst {ready.max_ms:.1f} ms of {ready.checks}"
                + ("" if ready.ready else " (NOT READY)")
            ),
            met=ready.max_ms <= READINESS_MS and ready.ready,
        ),
    }


PUBLISH_RATE = 10_000.0
"""Triggers per second a first publish must reach: 100,000 in 10 s."""
UNCHANGED_RATE = 50_000.0
"""Triggers per second an unchanged publish must reach: 100,000 in 2 s."""


CLAIM_OVER_ROUND_TRIP_US = 500.0
CLAIM_SERVER_US_PER_ROW = 30.0
CLAIM_P50_GROWTH = 1.2
CLAIMING_STATES = ("one_pct_due", "most_due_claimed", "ten_pct_inactive")
"""The states in which the claim takes its k rows (none are due in ``none_due``)."""


def claim_targets(claims: dict[int, dict[str, ClaimLatency]], k: int) -> dict[str, Target]:
    """The claim judged against the machine (issue #20): its p99 over the same loop's bare
    round trip, its server time per claimed row (EXPLAIN ANALYZE execution beyond the
    none-due claim's, / k, EXPLAIN's own overhead included), and how its p50 grows from the
    smallest size to the largest."""
    smallest, largest = min(claims), max(claims)
    at = claims[largest]
    excess = max(c.p99 - c.round_trip_p99 for c in at.values())
    # The statement's fixed part is what it costs when it claims nothing (``none_due``).
    fixed = at["none_due"].execution_ms if "none_due" in at else 0.0
    per_row = [(at[s].execution_ms - fixed) * 1000 / k for s in CLAIMING_STATES if s in at]
    growth = [
        c.p50 / claims[smallest][s].p50
        for s, c in at.items()
        if s in claims[smallest] and claims[smallest][s].p50 > 0
    ]
    out = {
        "claim_p99_over_round_trip": Target(
            goal=f"claim p99 <= the same loop's SELECT 1 p99 + 0.5 ms at {largest:,} rows in "
            f"every state, {k} rows per claim",
            measured=f"worst excess {excess / 1000:+.3f} ms",
            met=excess <= CLAIM_OVER_ROUND_TRIP_US,
        )
    }
    if per_row:
        out["claim_server_us_per_row"] = Target(
            goal=f"claim server time <= {CLAIM_SERVER_US_PER_ROW:g} us per claimed row at "
            f"{largest:,} rows",
            measured=f"worst {max(per_row):.1f} us per row (EXPLAIN ANALYZE execution over "
            f"the none-due one's, / {k})",
            met=max(per_row) <= CLAIM_SERVER_US_PER_ROW,
        )
    if growth and smallest != largest:
        out["claim_p50_growth"] = Target(
            goal=f"claim p50 at {largest:,} rows <= {CLAIM_P50_GROWTH:g}x its p50 at "
            f"{smallest:,} rows, every state",
            measured=f"worst {max(growth):.2f}x",
            met=max(growth) <= CLAIM_P50_GROWTH,
        )
    return out


PUBLISH_TARGET_TRIGGERS = 100_000


def publish_targets(p: PublishCost) -> dict[str, Target]:
    """Judged at the goal's size only: a smaller (``--quick``) file is shown, not judged
    (a fixed cost per publish would dominate its rate)."""
    first, again = p.triggers / p.added_s, p.triggers / p.unchanged_s
    judged = p.triggers >= PUBLISH_TARGET_TRIGGERS
    return {
        "publish": Target(
            goal="a 100,000-trigger file publishes in <= 10 s (>= 10,000 triggers/s)",
            measured=f"{p.triggers:,} triggers in {p.added_s:.2f} s ({first:,.0f}/s)",
            met=(first >= PUBLISH_RATE and p.added == p.triggers) if judged else None,
        ),
        "publish_unchanged": Target(
            goal="the same file again, unchanged, in <= 2 s (>= 50,000 triggers/s)",
            measured=f"{p.triggers:,} triggers in {p.unchanged_s:.2f} s ({again:,.0f}/s)",
            met=(again >= UNCHANGED_RATE and p.unchanged == p.triggers) if judged else None,
        ),
    }


def _maybe(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}/s"


def _lag(lag: Lag) -> str:
    return f"p50 {_maybe(lag.p50, '{} ms')}, p95 {_maybe(lag.p95, '{} ms')}, p99 " + _maybe(
        lag.p99, "{} ms"
    )


def _drain_lines(title: str, d: DrainResult) -> list[str]:
    lines = [
        f"{title}: {d.triggers:,} triggers due at one instant (cron {d.cron!r})",
        f"  {d.admitted:,} admitted at {_rate(d.occurrences_per_s)} (first to last admit "
        f"{d.seconds:.2f} s, from due {_maybe(d.seconds_from_due, '{:.2f} s')})",
        f"  duplicates {d.duplicates}, lost {d.lost}, malformed {d.malformed}",
        f"  SSI retries {d.ssi_retries} of {d.admit_statements} admit statements "
        f"({_maybe(d.ssi_retry_ratio, '{:.2%}')})",
        f"  replica CPU per admitted occurrence "
        f"{_maybe(d.replica_cpu_us_per_occurrence, '{:.0f} us')} (user + system, all replicas)",
    ]
    if d.lag_ms is not None:
        lines.append(f"  schedule lag from the tick {_lag(d.lag_ms)}")
    if d.diagnostics:
        lines.append("  diagnostics: " + ", ".join(f"{k} x{v}" for k, v in d.diagnostics.items()))
    lines += [f"  note: {p}" for p in d.stop_problems]
    return lines


def render(report: BenchReport) -> str:
    """The report for a reader."""
    m, c = report.machine, report.config
    start, end = report.load.get("start"), report.load.get("end")
    where = "embedded" if report.postgres.embedded else "server"
    out = [
        "qlsched bench",
        f"machine: {m.cpu_count} CPUs ({m.cpu_model}), {m.memory_mb or '?'} MB, {m.system}, "
        f"Python {m.python}",
        f"load average: start {_load(start)}, end {_load(end)}; during the run the CPUs were "
        + (
            "?"
            if report.cpu is None
            else f"{report.cpu.busy_pct:.0f} % busy, {report.cpu.steal_pct:.0f} % stolen"
        ),
        f"PostgreSQL {report.postgres_version} ({where}, shared_buffers "
        f"{report.postgres.shared_buffers}, fsync {report.postgres.fsync}, "
        f"synchronous_commit {report.postgres.synchronous_commit})",
        f"replicas: {c.replicas} x `qlsched run` (claim budget {c.claim_budget}, cadence "
        f"{c.cadence_ms} ms, lease {c.lease_ms} ms)" + ("   [--quick]" if c.quick else ""),
        "",
    ]
    out += _drain_lines("burst drain", report.drain)
    out.append("")
    out += _drain_lines("same cron tick", report.drain_same_tick)
    s = report.steady
    out += [
        "",
        f"steady: {s.triggers:,} triggers, each once a minute, spread over the minute, "
        f"for {s.seconds} s",
        f"  {s.occurrences:,} of {s.expected_occurrences:,} occurrences admitted in the window; "
        f"duplicates {s.duplicates}, lost {s.lost}, malformed {s.malformed}",
        f"  schedule lag {_lag(s.lag_ms)}, max {_maybe(s.lag_ms.max, '{} ms')}",
        f"  SSI retries {s.ssi_retries} of {s.admit_statements} admit statements "
        f"({_maybe(s.ssi_retry_ratio, '{:.2%}')})",
    ]
    if s.diagnostics:
        out.append("  diagnostics: " + ", ".join(f"{k} x{v}" for k, v in s.diagnostics.items()))
    out += [
        "",
        f"claim latency (one statement, microseconds; k = {c.claim_limit} rows, k = 1, and a "
        "bare SELECT 1 timed in turn with them; EXPLAIN ANALYZE planning + execution, ms)",
    ]
    for rows, states in report.claim_latency_us.items():
        for state, lat in states.items():
            out.append(
                f"  {rows:>9,} rows  {state:<18} p50 {lat.p50:6.0f}  p99 {lat.p99:6.0f}  "
                f"max {lat.max:6.0f}   k=1 p50 {lat.k1_p50:5.0f} p99 {lat.k1_p99:5.0f}   "
                f"SELECT 1 p50 {lat.round_trip_p50:4.0f} p99 {lat.round_trip_p99:5.0f}   "
                f"plan {lat.planning_ms:.2f} + exec {lat.execution_ms:.2f}"
            )
    plans = {
        " > ".join(lat.plan)
        for states in report.claim_latency_us.values()
        for lat in states.values()
    }
    out.append(f"  plans ({len(plans)} distinct, pre-order):")
    for plan in sorted(plans):
        out.append(f"    {plan}")
    out += ["", "replica RSS after its rounds over the table"]
    for r in report.rss:
        peak = _maybe(r.peak_mb, "{:.1f} MB")
        out.append(
            f"  {r.triggers:>9,} triggers: {r.rss_mb:.1f} MB (peak {peak}) after "
            f"{r.rounds} rounds, {r.admitted:,} admitted"
        )
    g = report.ceiling
    out += ["", f"ceiling: pgbench, claim 1 + admit 1 per occurrence, {g.seconds} s per run"]
    for run in g.runs:
        out.append(
            f"  {run.clients} clients, {run.threads} threads: {_rate(run.pairs_per_s)} "
            f"({run.transactions:,} pairs, {run.failed} failed, {run.retries} retries = "
            f"{_maybe(run.ssi_retry_ratio, '{:.2%}')} of admits)"
        )
    out += [
        f"  ceiling (the best) {_rate(g.pair_occurrences_per_s)}; burst drain / ceiling = "
        f"{_maybe(g.ratio, '{:.2f}x')}",
    ]
    if g.batch is not None:
        b = g.batch
        out.append(
            f"  batch ceiling (claim {b.k} + one batch admit, {b.clients} clients): "
            f"{_rate(b.occurrences_per_s)} ({b.rounds_per_s:,.1f} rounds/s, {b.admitted:,} "
            f"admitted, {b.failed} failed, {b.retries} retries); burst drain / batch ceiling = "
            f"{_maybe(b.ratio, '{:.2f}x')}"
        )
    out += _publish_lines(report)
    out += _cost_lines(report)
    out += [
        "",
        "targets",
    ]
    for key, t in report.targets.items():
        if key in COST_KEYS or key in PUBLISH_KEYS:
            continue  # each has its line in its own section above
        verdict = {True: "met", False: "MISSED", None: "n/a"}[t.met]
        out.append(f"  [{verdict:>6}] {t.goal}: {t.measured}")
    verdict = "held" if report.exactly_once else "VIOLATED"
    out += ["", f"exactly once: {verdict}; wall time {report.seconds:.0f} s"]
    return "\n".join(out)


PUBLISH_KEYS = frozenset({"publish", "publish_unchanged"})


def _publish_lines(report: BenchReport) -> list[str]:
    p = report.publish
    if p is None:
        return []
    out = ["", f"publish: one file, {p.triggers:,} triggers over {p.tasks} tasks"]
    for t in publish_targets(p).values():
        verdict = {True: "met", False: "MISSED", None: "n/a"}[t.met]
        out.append(f"  [{verdict:>6}] {t.goal}: {t.measured}")
    return out


def _cost_lines(report: BenchReport) -> list[str]:
    """Cost that must not grow: one line per figure, with its verdict."""
    d, rec, ready = report.decision_cost, report.recovery_cost, report.readiness_cost
    if d is None or rec is None or ready is None:
        return []
    out = ["", "cost that must not grow"]
    judged = cost_targets(CostResult(decision=d, readiness=ready, recovery=rec))
    for t in judged.values():
        verdict = {True: "met", False: "MISSED", None: "n/a"}[t.met]
        out.append(f"  [{verdict:>6}] {t.goal}: {t.measured}")
    out.append(
        f"  (history of {rec.terminal_attempts:,} terminal attempts written in {rec.load_s:.0f} "
        f"s; readiness connect p50 {ready.connect_p50_ms:.1f} ms, not counted)"
    )
    return out


def _load(load: Load | None) -> str:
    return "?" if load is None else f"{load.one:.2f} {load.five:.2f} {load.fifteen:.2f}"
