"""Steady phase: N triggers, each once a minute, spread evenly over the minute's seconds.

Trigger i gets the 6-field cron ``S * * * * *`` with S = (i - 1) % 60, so about N/60
occurrences fall due every second. Its cursor moves to its first occurrence at least a second
ahead (computed by core's cron, as Initialize would), the replicas run for ``--seconds``, and
the schedule lag of every occurrence in that window (queued_at_ms - scheduled_for_ms, both
database time) gives p50/p95/p99. After the window the replicas get a cadence and a second to
finish, then stop; exactly once is audited from each trigger's first cursor.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec
import trio

from qlsched.core.cron import next_after, parse_cron
from qlsched.postgres.pool import Connection
from qlsched.tools import bench_data
from qlsched.tools.bench.flood import FloodCount, flood
from qlsched.tools.bench.results import SteadyResult, ratio
from qlsched.tools.bench.session import BenchSession
from qlsched.tools.bench_data import PROJECT
from qlsched.tools.fleet import check_alive

OFFSETS = 60
LEAD_MS = 1_000
SETTLE_MS = 1_000
PROGRESS_S = 5.0


def crons() -> list[str]:
    return [f"{second} * * * * *" for second in range(OFFSETS)]


def expected_occurrences(n: int, first_ms: int, end_ms: int) -> int:
    """Occurrences of triggers 1..n in ``[first_ms, end_ms)``: trigger i fires at every
    whole second s with s % 60 == (i - 1) % 60."""
    total = 0
    for second_ms in range(-(-first_ms // 1000) * 1000, end_ms, 1000):
        offset = (second_ms // 1000) % OFFSETS
        total += n // OFFSETS + (1 if offset < n % OFFSETS else 0)
    return total


async def steady(
    session: BenchSession,
    *,
    triggers: int | None = None,
    seconds: int | None = None,
    http_clients: int = 0,
    during: Callable[[], Awaitable[None]] | None = None,
) -> SteadyResult:
    """``triggers`` and ``seconds`` instead of ``--triggers`` and ``--seconds``
    (``hundredfold``'s 100,000 triggers for a minute); ``http_clients`` flood the first
    replica's /healthz through the window; ``during`` runs beside the replicas once the
    window has begun (the publish-under-load phase's large publish)."""
    o = session.options
    n = triggers or o.triggers
    if seconds is not None:
        o = msgspec.structs.replace(o, seconds=seconds)
    expressions = crons()
    session.note(f"steady: loading {n:,} triggers ('S * * * * *', S = 0..59)")

    async def load(conn: Connection) -> None:
        await bench_data.load_not_due(conn, n, crons=expressions, misfire="skip", grace_ms=60_000)

    await session.call(load)
    replicas = await session.start_warm_replicas(o.replicas)
    before = await session.admit_counts(replicas)
    start = await session.db_now_ms() + LEAD_MS
    cursors = [next_after(parse_cron(c), start - 1) for c in expressions]

    async def move(conn: Connection) -> int:
        return await bench_data.set_cursors(conn, cursors)

    await session.call(move)
    end = start + o.seconds * 1000
    session.note(
        f"steady: {n:,} triggers, ~{n / OFFSETS:,.0f} occurrences/s, for {o.seconds} s "
        f"on {o.replicas} replicas"
    )

    async def count(conn: Connection) -> int:
        return await bench_data.run_count(conn, start, end - 1)

    now = await session.db_now_ms()
    finish = trio.current_time() + (end + SETTLE_MS + o.replica.cadence_ms - now) / 1000
    flooded = FloodCount(clients=http_clients)
    flooding = trio.CancelScope()

    async def flood_until_cancelled(address: str) -> None:
        with flooding:
            await flood(address, flooded)

    async with trio.open_nursery() as nursery:
        if http_clients and replicas[0].http is not None:
            nursery.start_soon(flood_until_cancelled, replicas[0].http)
        if during is not None:
            await trio.sleep(max(0.0, (start - now) / 1000) + LEAD_MS / 1000)
            nursery.start_soon(during)
        while trio.current_time() < finish:
            await trio.sleep(min(PROGRESS_S, max(0.0, finish - trio.current_time())))
            check_alive(replicas)
            if trio.current_time() < finish:
                session.note(f"steady: {await session.call(count):,} admitted so far")
        flooding.cancel()  # the flood ends with the window; a `during` task runs to its end
    after = await session.admit_counts(replicas)
    retries, statements = after[0] - before[0], after[1] - before[1]
    problems = await session.stop_replicas(replicas)
    first = {
        (PROJECT, bench_data.trigger_id(i)): cursors[(i - 1) % OFFSETS] for i in range(1, n + 1)
    }
    expected = expected_occurrences(n, start, end)
    counts, lag = await session.audit_window((start, end), first, triggers=n, expected=expected)
    diagnostics: dict[str, int] = {}
    for r in replicas:
        for code, k in r.diagnostic_codes().items():
            diagnostics[code] = diagnostics.get(code, 0) + k
    session.note(
        f"steady: {counts.occurrences:,} of {expected:,} occurrences; lag p50 {lag.p50} ms, "
        f"p99 {lag.p99} ms; duplicates {counts.duplicates}, lost {counts.lost}"
    )
    return SteadyResult(
        **msgspec.structs.asdict(counts),
        lag_ms=lag,
        cadence_ms=o.replica.cadence_ms,
        ssi_retries=retries,
        admit_statements=statements,
        ssi_retry_ratio=ratio(retries, statements),
        diagnostics=diagnostics,
        stop_problems=problems,
        http_clients=http_clients,
        http_answered=flooded.answered,
        http_busy=flooded.busy,
        http_errors=flooded.errors,
    )
