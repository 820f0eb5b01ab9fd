"""The bench's targets: each figure judged against its goal in docs/contract.md §10 (and
issue #20's claim against the machine). A missed target is reported, never hidden, and does
not change the exit code (exactly once does).
"""

from __future__ import annotations

from qlsched.tools.bench.results import (
    CeilingResult,
    ClaimLatency,
    CostResult,
    DrainResult,
    OnTimeResult,
    PublishCost,
    PublishUnderLoad,
    RssResult,
    SteadyResult,
    Target,
    ratio,
)


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
        measured=maybe(ceiling.ratio, "{:.2f}x"),
        met=None if ceiling.ratio is None else ceiling.ratio >= 2.0,
    )
    if ceiling.batch is not None:
        b = ceiling.batch
        out["drain_vs_batch_ceiling"] = Target(
            goal=f"burst drain >= 0.8x the same-run pgbench batch ceiling (claim {b.k}, admit "
            f"{b.k}, {b.clients} clients)",
            measured=maybe(b.ratio, "{:.2f}x")
            + f" ({rate(drain.occurrences_per_s)} vs {rate(b.occurrences_per_s)})",
            met=None if b.ratio is None else b.ratio >= 0.8,
        )
    tick_ratio = ratio(same_tick.occurrences_per_s, ceiling.pair_occurrences_per_s)
    out["same_tick_vs_ceiling"] = Target(
        goal="one-cron-tick drain >= 2x the same-run pgbench per-occurrence pair",
        measured=maybe(tick_ratio, "{:.2f}x"),
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
        measured=", ".join(f"{k} {maybe(v, '{:.2%}')}" for k, v in ratios.items()),
        met=all(r < 0.01 for r in known) if known else None,
    )
    bound = steady.cadence_ms + 250
    out["steady_lag"] = Target(
        goal=f"steady p99 schedule lag <= cadence + 250 ms ({bound} ms)",
        measured=maybe(steady.lag_ms.p99, "{} ms"),
        met=None if steady.lag_ms.p99 is None else steady.lag_ms.p99 <= bound,
    )
    out.update(_claim_latency_targets(claims, claim_limit))
    if len(rss) >= 2:
        low, high = min(rss, key=lambda r: r.triggers), max(rss, key=lambda r: r.triggers)
        change = high.rss_mb / low.rss_mb - 1
        out["rss_flat"] = Target(
            goal=f"replica RSS flat within 10 % from {low.triggers:,} to {high.triggers:,}",
            measured=f"{low.rss_mb:.1f} -> {high.rss_mb:.1f} MB ({change:+.1%})",
            met=abs(change) <= 0.10,
        )
    return out


def _claim_latency_targets(
    claims: dict[int, dict[str, ClaimLatency]], claim_limit: int
) -> dict[str, Target]:
    """The claim's p99 at the largest table, k rows and 1 row per claim, and per state."""
    out: dict[str, Target] = {}
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
        out.update(claim_targets(claims, claim_limit))
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
CLAIMING_STATES = ("one_pct_due", "most_due_claimed", "ten_pct_inactive", "ten_pct_paused")
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


def on_time_targets(r: OnTimeResult) -> dict[str, Target]:
    """Every-second triggers at the default settings: due rows wait milliseconds. The
    measured text also gives this machine's burst reference (the tick's rows claimed and
    admitted at the same run's burst rate: its median row waits for half the tick) and the
    lag as a ratio to it, so a run on a small machine shows how much of the lag is the
    machine's. Not a bound: with the lookahead the claims are taken before the due time,
    so only the admits are left in the tick's lag."""
    lag = r.lag_ms
    measured = f"p50 {maybe(lag.p50, '{} ms')}, p99 {maybe(lag.p99, '{} ms')}"
    low, high = r.floor_ms(0.5), r.floor_ms(0.99)
    if low is not None and high is not None and lag.p50 is not None and lag.p99 is not None:
        measured += (
            f"; a {r.triggers:,}-row tick at the run's burst rate ({rate(r.burst_per_s)},"
            f" claims and admits): p50 {low:.0f} ms, p99 {high:.0f} ms, so"
            f" {lag.p50 / max(low, 1.0):.2f}x and {lag.p99 / max(high, 1.0):.2f}x of it"
        )
    return {
        "on_time": Target(
            goal=(
                f"default settings, {r.replicas} replicas, {r.triggers:,} every-second"
                " triggers: lag from due p50 <= 20 ms and p99 <= 100 ms"
            ),
            measured=measured,
            met=None if lag.p50 is None or lag.p99 is None else lag.p50 <= 20 and lag.p99 <= 100,
        )
    }


def publish_load_targets(p: PublishUnderLoad) -> dict[str, Target]:
    """The existing triggers while a large publish initialises: no worse than steady."""
    s = p.steady
    bound = s.cadence_ms + 250
    return {
        "publish_under_load": Target(
            goal=(
                f"while {p.published:,} new triggers initialise, the existing triggers' p99 lag"
                f" <= cadence + 250 ms ({bound} ms) and nothing skipped or coalesced"
            ),
            measured=(
                f"p99 {maybe(s.lag_ms.p99, '{} ms')}, {p.missed} missed; publish"
                f" {p.publish_s:.2f} s, {p.initialised:,} of {p.published:,} initialised"
                " in the window"
            ),
            met=None if s.lag_ms.p99 is None else s.lag_ms.p99 <= bound and p.missed == 0,
        )
    }


def maybe(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}/s"
