"""Costs phase: the figures that must not grow with the history or with lateness.

* ``decision``: ``decide`` for an every-second ``fire_once`` trigger in Europe/Berlin (two
  DST transitions a year) whose cursor is a year old, timed call by call after a warm-up, in
  rounds of one claim budget (256) each; the passed-over count is checked against the
  seconds in the year, and the worst round's sum is how long one round would hold a
  replica's event loop.
* ``readiness``: ``check_readiness`` as the runtime role on a fresh connection each time
  (what every replica runs at start), on the bench's database.
* ``recovery``: ``recover`` with a history of terminal Attempts (10M; fewer with
  ``--quick``) written set-based into the emptied bench database (Runs and Attempts at
  once, on two connections), plus a little live work
  (half pristine, half candidates); the first call marks the candidates, later calls find
  none. The database is emptied again after.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import trio

from qlsched.core.cron import parse_cron
from qlsched.core.decide import TriggerSpec, decide
from qlsched.core.outcomes import Fire
from qlsched.postgres.pool import Connection, connect_once, open_database
from qlsched.postgres.readiness import check_readiness
from qlsched.postgres.recovery import recover
from qlsched.tools import bench_data
from qlsched.tools.bench.results import (
    CostResult,
    DecisionCost,
    ReadinessCost,
    RecoveryCost,
    percentile,
)
from qlsched.tools.bench.session import BenchSession
from qlsched.tools.queries import tool_query

DECISION_CRON = "* * * * * *"
DECISION_ZONE = "Europe/Berlin"
YEAR_MS = 365 * 86_400_000
ROUND = 256
"""Decisions per round: the replicas' claim budget (``BENCH_REPLICA.claim_budget``)."""
LIVE_ATTEMPTS = 100
RECOVERY_REPLICA = "bench-recovery"


def decision_cost(rounds: int, *, now_ms: int) -> DecisionCost:
    """Time ``rounds`` rounds of ``ROUND`` decisions, after one round of warm-up."""
    spec = TriggerSpec(
        cron=parse_cron(DECISION_CRON, DECISION_ZONE),
        misfire_policy="fire_once",
        misfire_grace_ms=60_000,
    )
    base = now_ms - now_ms % 1000
    expected = YEAR_MS // 1000
    coalesced: set[int] = set()
    timings: list[int] = []
    sums: list[int] = []
    for r in range(rounds + 1):
        total = 0
        for i in range(ROUND):
            # Each call a different second: a different interval, as in a real round.
            now = base + (r * ROUND + i) * 1000
            started = time.perf_counter_ns()
            decision = decide(spec, now - YEAR_MS, now)
            spent = time.perf_counter_ns() - started
            if r == 0:
                continue  # warm-up: zone files and transition tables loaded
            total += spent
            timings.append(spent)
            coalesced.add(decision.coalesced if isinstance(decision, Fire) else -1)
        if r:
            sums.append(total)
    us = sorted(t / 1000 for t in timings)
    (count,) = coalesced if len(coalesced) == 1 else (-1,)
    return DecisionCost(
        cron=DECISION_CRON,
        timezone=DECISION_ZONE,
        late_ms=YEAR_MS,
        calls=len(us),
        p50_us=round(percentile(us, 0.50), 1),
        p99_us=round(percentile(us, 0.99), 1),
        max_us=round(us[-1], 1),
        coalesced=count,
        expected_coalesced=expected,
        exact=count == expected,
        round_size=ROUND,
        rounds=rounds,
        round_worst_ms=round(max(sums) / 1e6, 2),
    )


async def readiness_cost(session: BenchSession, checks: int) -> ReadinessCost:
    lease_ms = session.options.replica.lease_ms
    spent: list[float] = []
    connects: list[float] = []
    ready = True
    for _ in range(checks):
        opened = time.perf_counter()

        async def fn(conn: Connection, opened: float = opened) -> tuple[float, bool]:
            connects.append((time.perf_counter() - opened) * 1000)
            started = time.perf_counter()
            result = await check_readiness(conn, lease_ms=lease_ms)
            return (time.perf_counter() - started) * 1000, result.ready

        ms, ok = await connect_once(session.runtime_dsn, fn)
        spent.append(ms)
        ready = ready and ok
    spent.sort()
    connects.sort()
    return ReadinessCost(
        checks=checks,
        p50_ms=round(percentile(spent, 0.50), 2),
        max_ms=round(spent[-1], 2),
        connect_p50_ms=round(percentile(connects, 0.50), 2),
        ready=ready,
    )


async def recovery_cost(
    session: BenchSession, history: int, calls: int, *, keep: bool = False
) -> RecoveryCost:
    session.note(f"costs: writing {history:,} terminal attempts")
    started = time.monotonic()

    now = await session.call(_emptied)

    def writer(block: str) -> Callable[[Connection], Awaitable[None]]:
        async def write(conn: Connection) -> None:
            async with conn.transaction():
                await conn.execute(tool_query("bench_fast_load"))
                await conn.execute(tool_query(block), history, LIVE_ATTEMPTS, now)

        return write

    # Runs and Attempts on two connections at once (the superuser pool's two): neither
    # checks the other's foreign key (bench_fast_load), and each backend keeps a core busy.
    async with trio.open_nursery() as nursery:
        for block in ("bench_history_runs", "bench_history_attempts"):
            nursery.start_soon(session.call, writer(block))
    await session.call(_analyze_history)
    load_s = time.monotonic() - started
    session.note(f"costs: history written in {load_s:.1f} s; timing recovery")
    spent: list[float] = []
    marked = 0
    async with open_database(
        session.runtime_dsn, max_size=1, application_name="qlsched-bench-recovery"
    ) as db:
        for _ in range(calls):
            t0 = time.perf_counter()
            report = await recover(db, replica=RECOVERY_REPLICA)
            spent.append((time.perf_counter() - t0) * 1000)
            marked += report.marked
    if not keep:  # kept: the observe phase reads status over this history
        await session.call(bench_data.reset)
    first = spent[0]
    spent.sort()
    return RecoveryCost(
        terminal_attempts=history,
        live_attempts=LIVE_ATTEMPTS,
        load_s=round(load_s, 1),
        calls=calls,
        first_ms=round(first, 2),
        p50_ms=round(percentile(spent, 0.50), 2),
        max_ms=round(spent[-1], 2),
        marked=marked,
    )


async def _emptied(conn: Connection) -> int:
    await bench_data.reset(conn)
    return await bench_data.now_ms(conn)


async def _analyze_history(conn: Connection) -> None:
    await conn.execute(tool_query("bench_analyze_history"))


async def costs(session: BenchSession, *, keep_history: bool = False) -> CostResult:
    o = session.options
    now = await session.db_now_ms()
    session.note("costs: decisions a year late")
    decision = decision_cost(o.decision_rounds, now_ms=now)
    session.note(
        f"costs: decision p50 {decision.p50_us:.0f} us, p99 {decision.p99_us:.0f} us, "
        f"worst round of {ROUND} {decision.round_worst_ms:.1f} ms, passed over "
        f"{decision.coalesced:,} (expected {decision.expected_coalesced:,})"
    )
    readiness = await readiness_cost(session, o.readiness_checks)
    session.note(f"costs: readiness p50 {readiness.p50_ms:.1f} ms, max {readiness.max_ms:.1f} ms")
    recovery = await recovery_cost(session, o.recovery_history, o.recovery_calls, keep=keep_history)
    session.note(
        f"costs: recovery over {recovery.terminal_attempts:,} terminal attempts: first "
        f"{recovery.first_ms:.1f} ms, max {recovery.max_ms:.1f} ms"
    )
    return CostResult(decision=decision, readiness=readiness, recovery=recovery)
