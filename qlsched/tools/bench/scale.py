"""Scale phase: claim latency at 1k, 100k and 1M schedule rows, and a replica's RSS.

For each size the triggers are bulk-loaded once (every-second cron, so a replica always has
work), then the schedule table is rewritten in each state and vacuumed:

* ``none_due``: no row due;
* ``one_pct_due``: 1 % due, spread over the claim order;
* ``most_due_claimed``: every row due, 99 % of them under a valid claim of another owner;
* ``ten_pct_inactive``: 10 % inactive (and due: they must not be walked), 1 % active due;
* ``ten_pct_paused``: the same with 10 % paused (``qlsched pause``) instead of inactive.

The claim statement (k rows, the runtime role, prepared) is timed alone many times in this
process (``bench_data.claim_timings``: each run rolled back, so the state holds; a claim of
one row and a bare round trip are timed in turn with it), and its executed plan is recorded.
For the smallest and the largest size, one ``qlsched run`` replica then works over the table
(every row due) for a number of rounds, and its RSS is read from ``/proc``.
"""

from __future__ import annotations

import trio

from qlsched.postgres.pool import Connection, open_database
from qlsched.postgres.store import CLAIM_SETTINGS
from qlsched.tools import bench_data
from qlsched.tools.bench.replicas import Replica, metrics
from qlsched.tools.bench.results import ClaimLatency, RssResult, percentile
from qlsched.tools.bench.session import BenchSession
from qlsched.tools.bench_data import ClaimPlan, RowState
from qlsched.tools.fleet import check_alive

STATES: dict[str, RowState] = {
    "none_due": RowState(),
    "one_pct_due": RowState(due_pct=1),
    "most_due_claimed": RowState(due_pct=100, claimed_from=1),
    "ten_pct_inactive": RowState(due_pct=11, inactive_pct=10),
    "ten_pct_paused": RowState(due_pct=11, paused_pct=10),
}
EVERY_SECOND = "* * * * * *"
PROBE_OWNER = "bench-probe"
RSS_TIMEOUT_S = 180.0


async def scale(
    session: BenchSession,
) -> tuple[dict[int, dict[str, ClaimLatency]], list[RssResult]]:
    o = session.options
    latencies: dict[int, dict[str, ClaimLatency]] = {}
    rss: list[RssResult] = []
    rss_sizes = {min(o.scale_rows), max(o.scale_rows)}
    for rows in o.scale_rows:
        session.note(f"scale: loading {rows:,} triggers")

        async def load(conn: Connection, rows: int = rows) -> None:
            await bench_data.reset(conn)
            now = await bench_data.now_ms(conn)
            await bench_data.load_triggers(
                conn, rows, crons=[EVERY_SECOND], misfire="skip", grace_ms=60_000, now_ms=now
            )

        await session.call(load)
        latencies[rows] = await _latencies(session, rows)
        if rows in rss_sizes:
            rss.append(await _rss(session, rows))
    return latencies, rss


async def _latencies(session: BenchSession, rows: int) -> dict[str, ClaimLatency]:
    """The claim statement timed in each state, on a runtime-role connection of our own
    (closed before any replica starts, so the replicas' sessions can be told apart)."""
    o = session.options
    out: dict[str, ClaimLatency] = {}

    async def measure(conn: Connection) -> tuple[bench_data.ClaimTimings, ClaimPlan]:
        timings = await bench_data.claim_timings(
            conn,
            owner=PROBE_OWNER,
            limit=o.claim_limit,
            lease_ms=o.replica.lease_ms,
            repetitions=o.claim_repetitions,
        )
        plan = await bench_data.explain_claim(
            conn, owner=PROBE_OWNER, limit=o.claim_limit, lease_ms=o.replica.lease_ms
        )
        return timings, plan

    async with open_database(
        session.runtime_dsn,
        max_size=1,
        application_name="qlsched-bench-claim",
        settings=CLAIM_SETTINGS,  # what a replica's claim pool runs with
    ) as runtime:
        for name, state in STATES.items():
            await _load_state(session, rows, state)
            timings, plan = await runtime.run(measure)
            us = sorted(s / 1000 for s in timings.claims)
            us1 = sorted(s / 1000 for s in timings.single)
            floor = sorted(s / 1000 for s in timings.round_trip)
            latency = ClaimLatency(
                p50=round(percentile(us, 0.50), 1),
                p99=round(percentile(us, 0.99), 1),
                max=round(us[-1], 1),
                k1_p50=round(percentile(us1, 0.50), 1),
                k1_p99=round(percentile(us1, 0.99), 1),
                round_trip_p50=round(percentile(floor, 0.50), 1),
                round_trip_p99=round(percentile(floor, 0.99), 1),
                repetitions=len(us),
                planning_ms=round(plan.planning_ms, 3),
                execution_ms=round(plan.execution_ms, 3),
                plan=plan.nodes,
            )
            out[name] = latency
            session.note(
                f"scale: {rows:,} rows, {name}: claim p50 {latency.p50:.0f} us, "
                f"p99 {latency.p99:.0f} us (k=1: p50 {latency.k1_p50:.0f}, "
                f"p99 {latency.k1_p99:.0f}; SELECT 1: p50 {latency.round_trip_p50:.0f}, "
                f"p99 {latency.round_trip_p99:.0f})"
            )
    return out


async def _load_state(session: BenchSession, rows: int, state: RowState) -> None:
    async def fn(conn: Connection) -> None:
        now = await bench_data.now_ms(conn)
        placed = RowState(
            due_pct=state.due_pct,
            claimed_from=state.claimed_from,
            inactive_pct=state.inactive_pct,
            paused_pct=state.paused_pct,
            due_at_ms=now - 1_000,
            later_ms=now + 86_400_000,
        )
        await bench_data.load_schedules(conn, rows, placed, now_ms=now)
        await bench_data.vacuum(conn)

    await session.call(fn)


async def _rss(session: BenchSession, rows: int) -> RssResult:
    """One replica over ``rows`` due triggers for ``rss_rounds`` rounds; its RSS then."""
    o = session.options
    await _load_state(session, rows, RowState(due_pct=100))
    session.note(f"scale: one replica over {rows:,} due triggers for {o.rss_rounds} rounds")
    (replica,) = await session.start_replicas(1)
    try:
        samples = await _wait_rounds(replica, o.rss_rounds)
        rss_kib = replica.rss_kib() or 0
        peak = replica.peak_kib()
    finally:
        problems = await session.stop_replicas([replica])
    for problem in problems:
        session.note(f"scale: {problem}")
    result = RssResult(
        triggers=rows,
        rss_mb=round(rss_kib / 1024, 1),
        peak_mb=None if peak is None else round(peak / 1024, 1),
        rounds=int(samples.get("qlsched_rounds_total", 0)),
        admitted=int(samples.get("qlsched_admits_total", 0)),
    )
    session.note(
        f"scale: replica RSS {result.rss_mb:.1f} MB over {rows:,} triggers "
        f"({result.rounds} rounds, {result.admitted:,} admitted)"
    )
    return result


async def _wait_rounds(replica: Replica, rounds: int) -> dict[str, float]:
    samples: dict[str, float] = {}
    with trio.move_on_after(RSS_TIMEOUT_S):
        while samples.get("qlsched_rounds_total", 0) < rounds:
            check_alive([replica])
            await trio.sleep(0.2)
            samples = await metrics(replica)
    return samples
