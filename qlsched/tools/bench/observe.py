"""Observe phase: ``status``, a ``/metrics`` scrape and ``/v1/schedules`` over big tables.

It runs on the costs phase's history (10M terminal Runs and their Attempts; fewer with
``--quick``), to which it adds ``observe_triggers`` triggers (1M), every one due and
validly claimed by another owner (an hour's lease): the largest backlog there can be, and
one a running replica leaves alone, so the timings are the reads' own. The triggers are
the burst's (yearly, ``fire_once``: what the reads show does not depend on the cron), so
the million-trigger burst of ``--scale`` that follows reuses them instead of loading its
own. Then, each timed from this process, one call at a time:

* ``status``: ``read_status`` on an open observer connection (what ``qlsched status``
  reads: schedules, the bounded backlog, recent Runs, refused triggers);
* ``/metrics``: ``GET`` on one ``qlsched run`` replica (its bounded backlog count);
* ``/v1/schedules``: ``GET`` of 1,000-row pages, the first and then at cursors spread over
  the whole key space (keyset pagination);
* the dashboard: every page of ``qlsched ui`` (``observe_ui``), its own process.

The history is emptied at the end; the triggers stay.
"""

from __future__ import annotations

import random
import time
import urllib.request

import trio

from qlsched.postgres.pool import Connection, open_database
from qlsched.postgres.status import StatusReport, read_status
from qlsched.tools import bench_data
from qlsched.tools.bench.drain import LARGEST_GRACE_MS, YEARLY
from qlsched.tools.bench.observe_ui import time_dashboard
from qlsched.tools.bench.results import Target, percentile
from qlsched.tools.bench.scale_results import EndpointTiming, ObserveResult
from qlsched.tools.bench.session import BenchSession
from qlsched.tools.bench_data import RowState

ENDPOINT_MS = 100.0
HTTP_TIMEOUT_S = 10.0
PAGE = 1000


def timing(samples_ms: list[float]) -> EndpointTiming:
    ordered = sorted(samples_ms)
    return EndpointTiming(
        calls=len(ordered),
        p50_ms=round(percentile(ordered, 0.50), 2),
        p99_ms=round(percentile(ordered, 0.99), 2),
        max_ms=round(ordered[-1], 2),
    )


async def observe(session: BenchSession, runs: int) -> ObserveResult:
    """Time the three reads over ``runs`` Runs (already written) and the phase's triggers."""
    o = session.options
    n = o.observe_triggers
    session.note(f"observe: loading {n:,} triggers, all due and validly claimed")
    started = time.monotonic()

    async def load(conn: Connection) -> None:
        now = await bench_data.now_ms(conn)
        await bench_data.load_triggers(
            conn, n, crons=[YEARLY], misfire="fire_once", grace_ms=LARGEST_GRACE_MS, now_ms=now
        )
        state = RowState(due_pct=100, claimed_from=0, due_at_ms=now - 1_000)
        await bench_data.load_schedules(conn, n, state, now_ms=now)
        await bench_data.vacuum(conn)

    await session.call(load)
    load_s = time.monotonic() - started
    status_ms, report = await _time_status(session, o.observe_calls)
    session.note(
        f"observe: status p50 {percentile(sorted(status_ms), 0.5):.1f} ms; "
        f"starting a replica for /metrics and /v1/schedules"
    )
    (replica,) = await session.start_replicas(1)
    try:
        assert replica.http is not None
        base = replica.http
        # Untimed first calls: the reader's pool opens its connection on first use.
        await _get_ms(base + "/metrics")
        await _get_ms(base + "/v1/schedules")
        metrics_ms = [await _get_ms(base + "/metrics") for _ in range(o.observe_calls)]
        pick = random.Random(20).randrange
        paths = ["/v1/schedules"] + [
            f"/v1/schedules?cursor={bench_data.PROJECT}/{bench_data.trigger_id(pick(1, n + 1))}"
            for _ in range(o.observe_calls - 1)
        ]
        schedules_ms = [await _get_ms(base + p) for p in paths]
    finally:
        for problem in await session.stop_replicas([replica]):
            session.note(f"observe: {problem}")
    session.note("observe: timing the dashboard's pages (qlsched ui)")
    dashboard = await time_dashboard(session.observer_dsn, n, o.observe_calls, _get_ms)
    await session.call(bench_data.reset_runs)
    result = ObserveResult(
        triggers=n,
        runs=runs,
        load_s=round(load_s, 1),
        status=timing(status_ms),
        metrics=timing(metrics_ms),
        schedules=timing(schedules_ms),
        due_backlog=report.due_backlog,
        due_backlog_capped=report.due_backlog_capped,
        dashboard=dashboard,
    )
    session.note(
        f"observe: p99 status {result.status.p99_ms:.1f} ms, /metrics "
        f"{result.metrics.p99_ms:.1f} ms, /v1/schedules {result.schedules.p99_ms:.1f} ms"
    )
    return result


async def _time_status(session: BenchSession, calls: int) -> tuple[list[float], StatusReport]:
    spent: list[float] = []
    report: StatusReport | None = None

    async def once(conn: Connection) -> StatusReport:
        return await read_status(conn)

    async with open_database(
        session.observer_dsn, max_size=1, application_name="qlsched-bench-status"
    ) as db:
        await db.run(once)  # warm-up: the connection's prepared statements
        for _ in range(calls):
            t0 = time.perf_counter()
            report = await db.run(once)
            spent.append((time.perf_counter() - t0) * 1000)
    assert report is not None
    return spent, report


async def _get_ms(url: str) -> float:
    """One GET of the replica's own loopback address, ms (the thread hop included)."""

    def get() -> float:
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
            response.read()
            if response.status != 200:
                raise RuntimeError(f"{url}: HTTP {response.status}")
        return (time.perf_counter() - t0) * 1000

    return await trio.to_thread.run_sync(get)


def observe_targets(r: ObserveResult) -> dict[str, Target]:
    """One target per read: its p99 within ``ENDPOINT_MS``."""
    size = f"{r.triggers:,} triggers and {r.runs:,} Runs"
    judged: list[tuple[str, str, EndpointTiming]] = [
        ("observe_status", "status (read_status, observer)", r.status),
        ("observe_metrics", "a /metrics scrape", r.metrics),
        ("observe_schedules", "/v1/schedules, 1,000-row pages by cursor", r.schedules),
    ]
    out: dict[str, Target] = {}
    for key, what, t in judged:
        out[key] = Target(
            goal=f"{what} p99 <= {ENDPOINT_MS:g} ms at {size}",
            measured=f"p50 {t.p50_ms:.1f} ms, p99 {t.p99_ms:.1f} ms over {t.calls} calls",
            met=t.p99_ms <= ENDPOINT_MS,
        )
    if r.dashboard:
        worst_name, worst = max(r.dashboard.items(), key=lambda item: item[1].p99_ms)
        out["observe_dashboard"] = Target(
            goal=f"every qlsched ui page p99 <= {ENDPOINT_MS:g} ms at {size}",
            measured=f"slowest: {worst_name} p50 {worst.p50_ms:.1f} ms, p99 {worst.p99_ms:.1f} ms"
            f" over {worst.calls} calls ({len(r.dashboard)} pages)",
            met=worst.p99_ms <= ENDPOINT_MS,
        )
    return out
