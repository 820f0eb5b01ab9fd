"""Retention phase: the cost of one prune batch must not grow with the history
(docs/contract.md §14, docs/performance.md).

The same measurement twice in one run: a small history (``FLOOR_HISTORY`` finished Runs,
the floor) and a large one (``--retention-history``, default 1,000,000; the issue's figure
is 10,000,000: run it once with ``--retention-history 10000000``). Each history is written
set-based (every finished Run past a day's horizon, with an Attempt and two events, plus
a few queued Runs), then ``BATCHES`` prune batches of ``BATCH_RUNS`` are sent one after
another as a replica sends them (the runtime role, the claim pool's settings) and timed.
The figure is the ratio of the large history's median batch to the floor's: speed is
judged only against the floor of the same run, never against wall-clock numbers. Each
batch must delete exactly its Runs with their rows, and the queued Runs must all remain.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import trio

from qlsched.postgres.claim import CLAIM_SETTINGS
from qlsched.postgres.pool import Connection, open_database
from qlsched.postgres.retention import BATCH_RUNS, prune_batch
from qlsched.tools import bench_data
from qlsched.tools.bench.results import Target, percentile
from qlsched.tools.bench.retention_results import PruneTiming, RetentionCost
from qlsched.tools.bench.session import BenchSession
from qlsched.tools.queries import tool_query

FLOOR_HISTORY = 20_000
BATCHES = 20
"""Timed batches per history (after one warm-up batch)."""
QUEUED = 100
"""Unfinished Runs beside each history (never deleted)."""
RATIO_GOAL = 2.0


async def _load(session: BenchSession, history: int) -> float:
    started = time.monotonic()
    now = await session.call(_emptied)

    def writer(*blocks: str) -> Callable[[Connection], Awaitable[None]]:
        async def write(conn: Connection) -> None:
            async with conn.transaction():
                await conn.execute(tool_query("bench_fast_load"))
                for block in blocks:
                    await conn.execute(tool_query(block), history, QUEUED, now)

        return write

    # Runs on one connection, Attempts and events on the other (the superuser pool's two):
    # bench_fast_load skips the foreign keys, so neither waits for the other.
    async with trio.open_nursery() as nursery:
        nursery.start_soon(session.call, writer("bench_retention_runs"))
        nursery.start_soon(
            session.call, writer("bench_retention_attempts", "bench_retention_events")
        )
    await session.call(_prepare)
    return time.monotonic() - started


async def _emptied(conn: Connection) -> int:
    await bench_data.reset(conn)
    await conn.execute(tool_query("bench_retention_clear"))
    return await bench_data.now_ms(conn)


async def _prepare(conn: Connection) -> None:
    await conn.execute(tool_query("bench_retention_prepare"))


async def _left(conn: Connection) -> tuple[int, int, int, int]:
    row = await conn.fetchrow(tool_query("bench_retention_left"))
    assert row is not None
    return int(row["finished"]), int(row["queued"]), int(row["attempts"]), int(row["events"])


async def prune_timing(session: BenchSession, history: int) -> PruneTiming:
    """Load ``history`` finished Runs, then time ``BATCHES`` prune batches."""
    session.note(f"retention: writing {history:,} finished Runs with their rows")
    load_s = await _load(session, history)
    spent: list[float] = []
    exact = True
    async with open_database(
        session.runtime_dsn,
        max_size=1,
        application_name="qlsched-bench-retention",
        settings=CLAIM_SETTINGS,
    ) as db:
        warm = await prune_batch(db, limit=BATCH_RUNS)
        for _ in range(BATCHES):
            t0 = time.perf_counter()
            batch = await prune_batch(db, limit=BATCH_RUNS)
            spent.append((time.perf_counter() - t0) * 1000)
            p = batch.pruned
            exact = exact and (p.runs, p.attempts, p.events) == (
                BATCH_RUNS,
                BATCH_RUNS,
                2 * BATCH_RUNS,
            )
    finished, queued, attempts, events = await session.call(_left)
    deleted = (BATCHES + 1) * BATCH_RUNS
    exact = (
        exact
        and warm.pruned.runs == BATCH_RUNS
        and (finished, queued) == (history - deleted, QUEUED)
        and (attempts, events) == (finished + queued, 2 * (finished + queued))
    )
    await session.call(_emptied)
    spent.sort()
    return PruneTiming(
        history=history,
        load_s=round(load_s, 1),
        batches=len(spent),
        p50_ms=round(percentile(spent, 0.50), 2),
        max_ms=round(spent[-1], 2),
        exact=exact,
    )


async def retention_cost(session: BenchSession) -> RetentionCost:
    """The floor, then the large history, in this run."""
    floor = await prune_timing(session, FLOOR_HISTORY)
    session.note(
        f"retention: floor {floor.p50_ms:.2f} ms a batch of {BATCH_RUNS} over {floor.history:,}"
    )
    large = await prune_timing(session, max(session.options.retention_history, FLOOR_HISTORY))
    ratio = large.p50_ms / floor.p50_ms if floor.p50_ms else None
    session.note(
        f"retention: {large.p50_ms:.2f} ms a batch over {large.history:,} finished Runs"
        f" ({ratio or 0:.2f}x the floor; loaded in {large.load_s:.0f} s)"
    )
    return RetentionCost(batch_runs=BATCH_RUNS, floor=floor, large=large, ratio=ratio)


def retention_targets(r: RetentionCost) -> dict[str, Target]:
    measured = "n/a" if r.ratio is None else f"{r.ratio:.2f}x"
    return {
        "retention_batch": Target(
            goal=f"a prune batch of {r.batch_runs} over {r.large.history:,} finished Runs <="
            f" {RATIO_GOAL:g}x the same batch over {r.floor.history:,} (same run), each exact",
            measured=f"{measured} ({r.large.p50_ms:.2f} ms vs {r.floor.p50_ms:.2f} ms)",
            met=None
            if r.ratio is None
            else r.ratio <= RATIO_GOAL and r.floor.exact and r.large.exact,
        )
    }


def retention_lines(r: RetentionCost | None) -> list[str]:
    """The phase's section of the readable report."""
    if r is None:
        return []
    lines = ["", f"retention: prune batches of {r.batch_runs} finished Runs (runtime role)"]
    for name, t in (("floor", r.floor), ("large", r.large)):
        lines.append(
            f"  {name}: {t.history:>11,} finished Runs: p50 {t.p50_ms:.2f} ms, max"
            f" {t.max_ms:.2f} ms over {t.batches} batches; exact {t.exact}; loaded in"
            f" {t.load_s:.0f} s"
        )
    ratio = "n/a" if r.ratio is None else f"{r.ratio:.2f}x"
    lines.append(f"  large / floor = {ratio} (goal <= {RATIO_GOAL:g}x)")
    return lines
