"""The demo's last act: a worker (``qlsched work``'s service, in this process) runs the
queued Runs the replicas admitted, so the demo ends with its jobs actually run. Runs only
after the exactly-once audit (which reads the admission shape the worker then changes)."""

from __future__ import annotations

from functools import partial

import msgspec
import trio

from qlsched.postgres.pool import Connection, Database
from qlsched.worker import WorkerConfig, WorkerMetrics, serve_worker

RUN_JOBS_TIMEOUT_S = 120.0
COUNT_SQL = "SELECT state, count(*)::int AS n FROM qlsched.runs GROUP BY state"


class JobsReport(msgspec.Struct, frozen=True):
    by_state: dict[str, int]
    """Runs by state once the worker stopped (succeeded, failed, ... still queued)."""
    claims: int
    seconds: float

    @property
    def unfinished(self) -> int:
        return self.by_state.get("queued", 0) + self.by_state.get("running", 0)


async def _counts(db: Database) -> dict[str, int]:
    async def fn(conn: Connection) -> dict[str, int]:
        return {r["state"]: r["n"] for r in await conn.fetch(COUNT_SQL)}

    return await db.run(fn)


async def run_jobs(worker_dsn: str, observer: Database, *, concurrency: int = 8) -> JobsReport:
    """Work until no Run is queued or running (or the timeout), then stop the worker."""
    stop = trio.Event()
    metrics = WorkerMetrics()
    config = WorkerConfig(
        dsn=worker_dsn, concurrency=concurrency, poll_ms=50, stop_timeout_ms=5_000
    )
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(serve_worker, config, stop=stop, metrics=metrics))
        with trio.move_on_after(RUN_JOBS_TIMEOUT_S):
            while True:
                counts = await _counts(observer)
                if not counts.get("queued", 0) and not counts.get("running", 0):
                    break
                await trio.sleep(0.2)
        stop.set()
    return JobsReport(
        by_state=await _counts(observer),
        claims=metrics.statistics().claims,
        seconds=trio.current_time() - start,
    )


def jobs_lines(report: JobsReport) -> list[str]:
    states = ", ".join(f"{n} {state}" for state, n in sorted(report.by_state.items()))
    return [
        "",
        "Jobs (a worker, as `qlsched work` runs them)",
        f"  ran {report.claims} queued Runs' commands in {report.seconds:.1f} s: {states}",
    ]
