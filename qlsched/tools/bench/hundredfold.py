"""Hundredfold phases (``--scale``, issue #20 items 2 and 3): the burst and the steady load
at a hundred times the default size.

* ``big_burst``: a million triggers due at one instant, drained by the replicas as the
  10,000-trigger burst is (``drain.burst``), judged against that burst's rate from the same
  run. Its progress is read from the replicas' ``/metrics`` (counting a million Runs in the
  database at every poll would load the server being measured); the figures still come
  from the Runs' queue times and ``verify_exactly_once``. Each replica's RSS is sampled
  as the drain goes. Before the replicas start, the claim's plan over the million rows
  (the replicas' generic plan, EXPLAIN ANALYZE rolled back) must walk the claim index.
* ``big_steady``: 100,000 triggers spread over the minute for 60 s (``steady.steady``),
  with the lag distribution of every Run.
"""

from __future__ import annotations

import time

from qlsched.postgres.pool import Connection, open_database
from qlsched.postgres.store import CLAIM_SETTINGS
from qlsched.tools import bench_data
from qlsched.tools.bench.drain import DrainHooks, burst
from qlsched.tools.bench.replicas import Replica, metrics
from qlsched.tools.bench.results import DrainResult, Target, ratio
from qlsched.tools.bench.scale_results import (
    BigBurst,
    BigSteady,
    LagHistogram,
    RssSample,
    ScaleResult,
)
from qlsched.tools.bench.session import BenchSession
from qlsched.tools.bench.steady import steady
from qlsched.tools.queries import tool_query

RATE_FLOOR = 0.8
"""The million-trigger drain rate over the 10,000-trigger one: at most 20 % slower."""
RSS_FLAT = 0.10
STEADY_SLACK_MS = 250
POLL_S = 0.5
RSS_STEPS = 20
"""RSS samples over the drain: one each time another 1/RSS_STEPS of the rows is admitted."""
LAG_EDGES_MS = [0, 25, 50, 75, 100, 150, 200, 250, 300, 400, 500, 750, 1000, 2000, 5000]
PROBE_OWNER = "bench-probe"


class _Rss:
    """Samples of every replica's RSS as the drain goes (read from ``/proc``)."""

    def __init__(self, triggers: int) -> None:
        self.step = max(1, triggers // RSS_STEPS)
        self.samples: list[RssSample] = []
        self.peaks: list[float | None] = []

    def polled(self, replicas: list[Replica], admitted: int) -> None:
        last = self.samples[-1].admitted if self.samples else None
        if last is None or admitted - last >= self.step:
            rss = [round((r.rss_kib() or 0) / 1024, 1) for r in replicas]
            self.samples.append(RssSample(admitted=admitted, rss_mb=rss))
        peaks = [r.peak_kib() for r in replicas]
        self.peaks = [None if p is None else round(p / 1024, 1) for p in peaks]


async def _admitted(replicas: list[Replica]) -> int:
    total = 0.0
    for r in replicas:
        total += (await metrics(r)).get("qlsched_admits_total", 0.0)
    return int(total)


async def big_burst(session: BenchSession, small: DrainResult) -> BigBurst:
    o = session.options
    n = o.big_burst_triggers
    rss = _Rss(n)
    plan: list[str] = []

    async def check_plan() -> None:
        async def explain(conn: Connection) -> bench_data.ClaimPlan:
            return await bench_data.explain_claim(
                conn,
                owner=PROBE_OWNER,
                limit=o.replica.claim_budget,
                lease_ms=o.replica.lease_ms,
            )

        async with open_database(
            session.runtime_dsn,
            max_size=1,
            application_name="qlsched-bench-plan",
            settings=CLAIM_SETTINGS,
        ) as runtime:
            plan.extend((await runtime.run(explain)).nodes)

    started = time.monotonic()
    session.note(f"hundredfold: a burst of {n:,} triggers")
    d = await burst(
        session,
        DrainHooks(
            triggers=n,
            loaded=check_plan,
            count=_admitted,
            polled=rss.polled,
            poll_s=POLL_S,
            reuse_triggers=True,
        ),
    )
    start = rss.samples[0].rss_mb if rss.samples else []
    end = rss.samples[-1].rss_mb if rss.samples else []
    changes: list[float] = [e / s - 1 for s, e in zip(start, end, strict=True) if s > 0]
    changes += [p / s - 1 for s, p in zip(start, rss.peaks, strict=False) if s > 0 and p]
    worst = max(changes, key=abs) if changes else None
    ordered = any(step == "Index Scan (trigger_schedules_claim_idx)" for step in plan) and not any(
        step.startswith("Seq Scan") for step in plan
    )
    result = BigBurst(
        triggers=n,
        occurrences_per_s=d.occurrences_per_s,
        small_occurrences_per_s=small.occurrences_per_s,
        rate_ratio=_ratio(d.occurrences_per_s, small.occurrences_per_s),
        seconds=d.seconds,
        admitted=d.admitted,
        duplicates=d.duplicates,
        lost=d.lost,
        malformed=d.malformed,
        ssi_retry_ratio=d.ssi_retry_ratio,
        replica_cpu_us_per_occurrence=d.replica_cpu_us_per_occurrence,
        rss_start_mb=start,
        rss_end_mb=end,
        rss_peak_mb=rss.peaks,
        rss_change=None if worst is None else round(worst, 4),
        rss_samples=rss.samples,
        claim_plan=plan,
        claim_index_ordered=ordered,
        phase_s=round(time.monotonic() - started, 1),
        progress=d.progress,
    )
    session.note(
        f"hundredfold: burst of {n:,} at {d.occurrences_per_s or 0:,.0f}/s "
        f"({_maybe(result.rate_ratio)}x the {small.triggers:,}-trigger burst); RSS "
        f"{start} -> {end} MB; claim plan index-ordered: {ordered}"
    )
    return result


async def big_steady(session: BenchSession) -> BigSteady:
    o = session.options
    s = await steady(session, triggers=o.big_steady_triggers, seconds=o.big_steady_seconds)

    async def histogram(conn: Connection) -> list[int]:
        counts = await conn.fetchval(tool_query("bench_lag_histogram"), LAG_EDGES_MS)
        return [int(c) for c in counts]

    counts = await session.call(histogram)
    return BigSteady(
        triggers=s.triggers,
        seconds=s.seconds,
        expected_occurrences=s.expected_occurrences,
        occurrences=s.occurrences,
        duplicates=s.duplicates,
        lost=s.lost,
        malformed=s.malformed,
        lag_p50_ms=s.lag_ms.p50,
        lag_p95_ms=s.lag_ms.p95,
        lag_p99_ms=s.lag_ms.p99,
        lag_max_ms=s.lag_ms.max,
        cadence_ms=s.cadence_ms,
        ssi_retry_ratio=s.ssi_retry_ratio,
        histogram=LagHistogram(edges_ms=LAG_EDGES_MS, counts=counts),
    )


def scale_exactly_once(result: ScaleResult | None) -> bool:
    if result is None:
        return True
    b, s = result.burst, result.steady
    return all(p.duplicates == 0 and p.lost == 0 and p.malformed == 0 for p in (b, s))


def scale_targets(result: ScaleResult) -> dict[str, Target]:
    """One target per figure of items 2 and 3."""
    b, s = result.burst, result.steady
    bound = s.cadence_ms + STEADY_SLACK_MS
    return {
        "burst_1m_rate": Target(
            goal=f"a burst of {b.triggers:,} drains no more than 20 % slower than the "
            f"same run's burst of 10,000 (>= {RATE_FLOOR:g}x its rate)",
            measured=f"{_rate(b.occurrences_per_s)} vs {_rate(b.small_occurrences_per_s)} "
            f"= {_maybe(b.rate_ratio)}x ({b.admitted:,} admitted in {b.seconds:.1f} s)",
            met=None if b.rate_ratio is None else b.rate_ratio >= RATE_FLOOR,
        ),
        "burst_1m_exactly_once": Target(
            goal=f"a burst of {b.triggers:,}: 0 duplicates, 0 lost",
            measured=f"duplicates {b.duplicates}, lost {b.lost}, malformed {b.malformed}",
            met=b.duplicates == 0 and b.lost == 0 and b.malformed == 0,
        ),
        "burst_1m_rss": Target(
            goal=f"replica RSS flat within {RSS_FLAT:.0%} over a burst of {b.triggers:,} "
            "(start to end, and to the peak)",
            measured=f"{b.rss_start_mb} -> {b.rss_end_mb} MB, peak {b.rss_peak_mb} MB "
            f"({_maybe(b.rss_change, '{:+.1%}')})",
            met=None if b.rss_change is None else abs(b.rss_change) <= RSS_FLAT,
        ),
        "burst_1m_claim_plan": Target(
            goal=f"the claim over {b.triggers:,} rows walks trigger_schedules_claim_idx, "
            "no sequential scan",
            measured=" > ".join(b.claim_plan) or "no plan",
            met=b.claim_index_ordered,
        ),
        "steady_100k_lag": Target(
            goal=f"steady, {s.triggers:,} triggers over a minute for {s.seconds} s: p99 "
            f"schedule lag <= cadence + {STEADY_SLACK_MS} ms ({bound} ms)",
            measured=f"p50 {s.lag_p50_ms} ms, p95 {s.lag_p95_ms} ms, p99 {s.lag_p99_ms} ms, "
            f"max {s.lag_max_ms} ms over {s.occurrences:,} occurrences",
            met=None if s.lag_p99_ms is None else s.lag_p99_ms <= bound,
        ),
        "steady_100k_exactly_once": Target(
            goal=f"steady, {s.triggers:,} triggers: 0 duplicates, 0 lost",
            measured=f"duplicates {s.duplicates}, lost {s.lost}, malformed {s.malformed} "
            f"({s.occurrences:,} of {s.expected_occurrences:,} expected)",
            met=s.duplicates == 0 and s.lost == 0 and s.malformed == 0,
        ),
    }


def _ratio(part: float | None, whole: float | None) -> float | None:
    value = ratio(part, whole or 0.0)
    return None if value is None else round(value, 3)


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}/s"


def _maybe(value: float | None, fmt: str = "{:.2f}") -> str:
    return "n/a" if value is None else fmt.format(value)
