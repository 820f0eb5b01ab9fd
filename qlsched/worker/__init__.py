"""The worker (docs/contract.md §13): claims queued Runs as ``qlsched_worker``, runs each
job, heartbeats its lease and finishes it. ``qlsched work`` runs each task's command; a Trio
service registers async handlers per ``project/task`` on the same protocol::

    async def nightly(ctx: qlsched.worker.JobContext) -> None:
        await reindex(dedupe_key=ctx.idempotency_key)

    config = qlsched.worker.WorkerConfig(dsn=WORKER_DSN, run_commands=False)
    await nursery.start(partial(qlsched.worker.serve_worker, config,
                                handlers={"app/reindex": nightly}))

A handler that returns succeeded; one that raises failed (``handler_error``); it is
cancelled when an operator cancels its Run or its task's ``timeout_ms`` passes. Execution
is at least once per Attempt: deduplicate on ``ctx.idempotency_key``. asyncio services use
``qlsched.worker.aio``.
"""

from __future__ import annotations

from qlsched.core.work import ClaimedRun, JobResult, TaskPayload
from qlsched.worker.metrics import WorkerMetrics, WorkerStatistics
from qlsched.worker.service import Handler, JobContext, WorkerConfig, serve_worker

__all__ = [
    "ClaimedRun",
    "Handler",
    "JobContext",
    "JobResult",
    "TaskPayload",
    "WorkerConfig",
    "WorkerMetrics",
    "WorkerStatistics",
    "serve_worker",
]
