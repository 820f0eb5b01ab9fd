"""The bench's report for a reader: every phase's figures, then the targets' verdicts."""

from __future__ import annotations

from qlsched.tools.bench.machine import Load
from qlsched.tools.bench.results import BenchReport, CostResult, DrainResult, Lag, Target
from qlsched.tools.bench.retention import retention_lines
from qlsched.tools.bench.targets import (
    COST_KEYS,
    cost_targets,
    maybe,
    on_time_targets,
    publish_load_targets,
    publish_targets,
    rate,
)


def _lag(lag: Lag) -> str:
    return f"p50 {maybe(lag.p50, '{} ms')}, p95 {maybe(lag.p95, '{} ms')}, p99 " + maybe(
        lag.p99, "{} ms"
    )


def _judged(t: Target) -> str:
    verdict = {True: "met", False: "MISSED", None: "n/a"}[t.met]
    return f"  [{verdict:>6}] {t.goal}: {t.measured}"


def _drain_lines(title: str, d: DrainResult) -> list[str]:
    lines = [
        f"{title}: {d.triggers:,} triggers due at one instant (cron {d.cron!r})",
        f"  {d.admitted:,} admitted at {rate(d.occurrences_per_s)} (first to last admit "
        f"{d.seconds:.2f} s, from due {maybe(d.seconds_from_due, '{:.2f} s')})",
        f"  duplicates {d.duplicates}, lost {d.lost}, malformed {d.malformed}",
        f"  SSI retries {d.ssi_retries} of {d.admit_statements} admit statements "
        f"({maybe(d.ssi_retry_ratio, '{:.2%}')})",
        f"  replica CPU per admitted occurrence "
        f"{maybe(d.replica_cpu_us_per_occurrence, '{:.0f} us')} (user + system, all replicas)",
    ]
    if d.lag_ms is not None:
        lines.append(f"  schedule lag from the tick {_lag(d.lag_ms)}")
    if d.diagnostics:
        lines.append("  diagnostics: " + ", ".join(f"{k} x{v}" for k, v in d.diagnostics.items()))
    lines += [f"  note: {p}" for p in d.stop_problems]
    return lines


def ratio_text(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "-"


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
    if report.worker is not None:
        w = report.worker
        out += [
            "",
            f"worker: no-op jobs (`true` as a child process), {w.concurrent.jobs} Runs",
            f"  {w.concurrent.jobs_per_s} jobs/s at concurrency {w.concurrent.concurrency};"
            f" {w.floor.jobs_per_s} jobs/s at concurrency 1 (the floor); ratio {w.ratio}",
        ]
    s = report.steady
    out += [
        "",
        f"steady: {s.triggers:,} triggers, each once a minute, spread over the minute, "
        f"for {s.seconds} s",
        f"  {s.occurrences:,} of {s.expected_occurrences:,} occurrences admitted in the window; "
        f"duplicates {s.duplicates}, lost {s.lost}, malformed {s.malformed}",
        f"  schedule lag {_lag(s.lag_ms)}, max {maybe(s.lag_ms.max, '{} ms')}",
        f"  SSI retries {s.ssi_retries} of {s.admit_statements} admit statements "
        f"({maybe(s.ssi_retry_ratio, '{:.2%}')})",
    ]
    if s.diagnostics:
        out.append("  diagnostics: " + ", ".join(f"{k} x{v}" for k, v in s.diagnostics.items()))
    h = report.steady_http
    if h is not None:
        out += [
            f"steady again, {h.http_clients} HTTP clients on one replica's /healthz throughout:",
            f"  {h.occurrences:,} of {h.expected_occurrences:,} occurrences admitted"
            f" ({ratio_text(h.occurrences, s.occurrences)} of the idle window's);"
            f" duplicates {h.duplicates}, lost {h.lost}",
            f"  schedule lag {_lag(h.lag_ms)} (idle p99 {maybe(s.lag_ms.p99, '{} ms')});"
            f" HTTP answered {h.http_answered:,}, busy {h.http_busy:,}, errors {h.http_errors:,}",
        ]
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
        peak = maybe(r.peak_mb, "{:.1f} MB")
        out.append(
            f"  {r.triggers:>9,} triggers: {r.rss_mb:.1f} MB (peak {peak}) after "
            f"{r.rounds} rounds, {r.admitted:,} admitted"
        )
    g = report.ceiling
    out += ["", f"ceiling: pgbench, claim 1 + admit 1 per occurrence, {g.seconds} s per run"]
    for run in g.runs:
        out.append(
            f"  {run.clients} clients, {run.threads} threads: {rate(run.pairs_per_s)} "
            f"({run.transactions:,} pairs, {run.failed} failed, {run.retries} retries = "
            f"{maybe(run.ssi_retry_ratio, '{:.2%}')} of admits)"
        )
    out += [
        f"  ceiling (the best) {rate(g.pair_occurrences_per_s)}; burst drain / ceiling = "
        f"{maybe(g.ratio, '{:.2f}x')}",
    ]
    if g.batch is not None:
        b = g.batch
        out.append(
            f"  batch ceiling (claim {b.k} + one batch admit, {b.clients} clients): "
            f"{rate(b.occurrences_per_s)} ({b.rounds_per_s:,.1f} rounds/s, {b.admitted:,} "
            f"admitted, {b.failed} failed, {b.retries} retries); burst drain / batch ceiling = "
            f"{maybe(b.ratio, '{:.2f}x')}"
        )
    out += _publish_lines(report)
    out += _cost_lines(report)
    out += retention_lines(report.retention)
    out += [
        "",
        "targets",
    ]
    for key, t in report.targets.items():
        if key in COST_KEYS or key in PUBLISH_KEYS:
            continue  # each has its line in its own section above
        out.append(_judged(t))
    verdict = "held" if report.exactly_once else "VIOLATED"
    out += ["", f"exactly once: {verdict}; wall time {report.seconds:.0f} s"]
    if report.phase_seconds:
        out.append(
            "phases: " + ", ".join(f"{k} {v:.0f} s" for k, v in report.phase_seconds.items())
        )
    return "\n".join(out)


PUBLISH_KEYS = frozenset({"publish", "publish_unchanged", "publish_under_load", "on_time"})


def _publish_lines(report: BenchReport) -> list[str]:
    p = report.publish
    if p is None:
        return []
    out = ["", f"publish: one file, {p.triggers:,} triggers over {p.tasks} tasks"]
    for t in publish_targets(p).values():
        out.append(_judged(t))
    if report.on_time is not None:
        punctual = report.on_time
        out.append(
            f"on time: {punctual.occurrences:,} of {punctual.expected_occurrences:,}"
            f" occurrences, lag from due {_lag(punctual.lag_ms)}, max"
            f" {maybe(punctual.lag_ms.max, '{} ms')}"
        )
        for judged in on_time_targets(punctual).values():
            out.append(_judged(judged))
    if report.publish_under_load is not None:
        for t in publish_load_targets(report.publish_under_load).values():
            out.append(_judged(t))
    return out


def _cost_lines(report: BenchReport) -> list[str]:
    """Cost that must not grow: one line per figure, with its verdict."""
    d, rec, ready = report.decision_cost, report.recovery_cost, report.readiness_cost
    if d is None or rec is None or ready is None:
        return []
    out = ["", "cost that must not grow"]
    judged = cost_targets(CostResult(decision=d, readiness=ready, recovery=rec))
    for t in judged.values():
        out.append(_judged(t))
    out.append(
        f"  (history of {rec.terminal_attempts:,} terminal attempts written in {rec.load_s:.0f} "
        f"s; readiness connect p50 {ready.connect_p50_ms:.1f} ms, not counted)"
    )
    return out


def _load(load: Load | None) -> str:
    return "?" if load is None else f"{load.one:.2f} {load.five:.2f} {load.fifteen:.2f}"
