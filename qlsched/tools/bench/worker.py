"""Worker phase: how many no-op jobs a worker runs per second (docs/performance.md).

Each job is the bench task's command, ``true``, as a child process: the figure is the
protocol (claim, heartbeat-free short jobs, fenced finish with its events) plus a process
start per job. Measured at concurrency 1 (the floor, same run) and at ``concurrency``; the
ratio shows what concurrency buys on this machine. The database is emptied before and after.
"""

from __future__ import annotations

import time
from functools import partial

import trio

from qlsched.postgres.pool import Connection
from qlsched.tools import bench_data
from qlsched.tools.bench.session import BenchSession
from qlsched.tools.bench.worker_results import WorkerRate, WorkerThroughput
from qlsched.tools.queries import tool_query
from qlsched.worker import WorkerConfig, serve_worker

CONCURRENCY = 8
TIMEOUT_S = 300.0


async def _rate(session: BenchSession, jobs: int, concurrency: int) -> WorkerRate:
    await session.call(bench_data.reset)
    now = await session.db_now_ms()

    async def load(conn: Connection) -> None:
        await bench_data.load_triggers(
            conn, 1, crons=["0 0 1 1 *"], misfire="skip", grace_ms=60_000, now_ms=now
        )
        await conn.execute(tool_query("bench_worker_runs"), jobs, bench_data.trigger_id(1), now)

    await session.call(load)

    async def done(conn: Connection) -> tuple[int, int]:
        row = await conn.fetchrow(tool_query("bench_worker_done"))
        assert row is not None
        return int(row["succeeded"]), int(row["other"])

    config = WorkerConfig(
        dsn=session.worker_dsn, concurrency=concurrency, poll_ms=20, stop_timeout_ms=5_000
    )
    stop = trio.Event()
    t0 = time.monotonic()
    succeeded = 0
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(serve_worker, config, stop=stop))
        with trio.move_on_after(TIMEOUT_S):
            while True:
                succeeded, other = await session.call(done)
                if succeeded + other >= jobs:
                    break
                await trio.sleep(0.05)
        seconds = time.monotonic() - t0
        stop.set()
    await session.call(bench_data.reset)
    return WorkerRate(
        concurrency=concurrency,
        jobs=jobs,
        succeeded=succeeded,
        seconds=round(seconds, 2),
        jobs_per_s=round(succeeded / seconds, 1) if seconds > 0 else 0.0,
    )


async def worker_throughput(
    session: BenchSession, *, concurrency: int = CONCURRENCY
) -> WorkerThroughput:
    jobs = 100 if session.options.quick else 1000
    floor = await _rate(session, max(20, jobs // 4), 1)
    session.note(f"worker: {floor.jobs_per_s} no-op jobs/s at concurrency 1")
    concurrent = await _rate(session, jobs, concurrency)
    session.note(f"worker: {concurrent.jobs_per_s} no-op jobs/s at concurrency {concurrency}")
    ratio = concurrent.jobs_per_s / floor.jobs_per_s if floor.jobs_per_s else 0.0
    return WorkerThroughput(floor=floor, concurrent=concurrent, ratio=round(ratio, 2))
