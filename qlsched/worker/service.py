"""The worker service (docs/contract.md §13): claims Runs, runs each job, heartbeats its
lease, finishes it. A second authority beside the scheduler, with its own role
(``qlsched_worker``) and its own lease; the scheduler never starts a process.

Ownership: ``serve_worker`` owns its pool and one nursery of jobs; each job task owns its
heartbeat and its child (or handler). States of one job: claimed -> running (heartbeats
every third of the lease; a heartbeat that says ``cancel_requested`` stops the job, SIGTERM
then SIGKILL after the grace) -> finished (one fenced statement, never re-sent when its
reply was lost). A heartbeat refused by the fence (the lease expired) stops the job too:
another worker may already be running it again.

Stop (``stop`` set, or SIGTERM in ``qlsched work``): claiming ends at once; running jobs may
finish within ``stop_timeout_ms``; then they are stopped and their leases left to expire
(the replica's stop shape): those Attempts become ``lost`` and the retry policy decides.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import msgspec
import trio

from qlsched.core.work import (
    ClaimedRun,
    Extended,
    FenceRefused,
    Finished,
    FinishUnknown,
    JobResult,
    LeaseLost,
    TaskPayload,
    decode_payload,
)
from qlsched.postgres import worker as store
from qlsched.postgres.errors import describe_database_error, is_database_error
from qlsched.postgres.pool import Database, open_database
from qlsched.worker.metrics import WorkerMetrics
from qlsched.worker.process import job_environment, run_job

REAP_BATCH = 16


@dataclass
class JobContext:
    """What a handler gets: the Run, the key to deduplicate on, the payload, and the
    request to stop (a handler is cancelled when it is set; it may also watch it)."""

    run: ClaimedRun
    payload: TaskPayload
    cancel_requested: trio.Event = field(default_factory=trio.Event)

    @property
    def idempotency_key(self) -> str:
        return self.run.idempotency_key


Handler = Callable[[JobContext], Awaitable[None]]
"""An async job for one ``project/task``: returns = succeeded, raises = failed."""


class WorkerConfig(msgspec.Struct, frozen=True, kw_only=True):
    dsn: str
    worker_id: str = ""
    """Recorded on each Attempt and event (default: ``worker-<random>``)."""
    concurrency: int = 4
    lease_ms: int = 30_000
    poll_ms: int = 500
    stop_timeout_ms: int = 10_000
    kill_grace_ms: int = 5_000
    """Between SIGTERM and SIGKILL when a job is cancelled, timed out or stopped."""
    run_commands: bool = True
    """Run a task's command when no handler is registered for it (``qlsched work``)."""
    tasks: tuple[str, ...] | None = None
    """Take only these tasks' Runs (``project/task``; ``qlsched work --task``); None: every
    task this worker can run (all when it runs commands, else its handlers')."""


class _Worker:
    def __init__(
        self,
        config: WorkerConfig,
        db: Database,
        handlers: Mapping[str, Handler],
        metrics: WorkerMetrics,
        log: Callable[[str], None],
    ) -> None:
        self.log = log
        self.config = config
        self.db = db
        self.handlers = dict(handlers)
        self.metrics = metrics
        self.worker_id = config.worker_id or f"worker-{uuid.uuid4().hex[:8]}"
        self.session_id = uuid.uuid4().hex
        self.running = 0
        self.slot_freed = trio.Event()
        self._tasks = self._chosen_tasks()

    def tasks(self) -> list[str] | None:
        """The tasks this worker takes (None: all), fixed for its life."""
        return self._tasks

    def _chosen_tasks(self) -> list[str] | None:
        """Those it can run (all when it runs commands, else its handlers'), narrowed to
        ``config.tasks`` when set."""
        chosen = None if self.config.run_commands else set(self.handlers)
        if self.config.tasks is not None:
            wanted = set(self.config.tasks)
            chosen = wanted if chosen is None else chosen & wanted
        return None if chosen is None else sorted(chosen)

    async def poll_once(self, nursery: trio.Nursery) -> int:
        """Reap expired leases, then claim what the free slots allow; returns claims."""
        reaped = await store.reap(self.db, limit=REAP_BATCH, actor=self.worker_id)
        for r in reaped:
            self.metrics.lost(retried=r.run_state == "queued")
        free = self.config.concurrency - self.running
        if free <= 0:
            return 0
        claimed = await store.claim(
            self.db,
            worker_id=self.worker_id,
            session_id=self.session_id,
            limit=free,
            lease_ms=self.config.lease_ms,
            tasks=self.tasks(),
        )
        for run in claimed:
            self.running += 1
            self.metrics.claimed()
            nursery.start_soon(self.execute, run)
        return len(claimed)

    async def execute(self, run: ClaimedRun) -> None:
        """Run one job under its lease and finish it (or leave it to expire when stopped)."""
        start = trio.current_time()
        try:
            result = await self._job_under_lease(run)
            outcome = await store.finish(
                self.db,
                attempt_id=run.attempt_id,
                lease_token=run.lease_token,
                result=result,
                actor=self.worker_id,
            )
            self.metrics.finished(result.code, trio.current_time() - start)
            match outcome:
                case Finished(run_state=state):
                    if state == "queued":
                        self.metrics.retried()
                    self.log(f"run {run.run_id} attempt {run.attempt_no}: {result.code} -> {state}")
                case FenceRefused():
                    self.metrics.refused()
                    self.log(f"run {run.run_id} attempt {run.attempt_no}: finish refused (lease)")
                case FinishUnknown(exception=name):
                    self.metrics.unknown()
                    self.log(f"run {run.run_id}: finish commit_unknown ({name}); not re-sent")
        except Exception as exc:
            # One job's failure never stops the others: logged (no message text, which may
            # echo data), its lease left to expire.
            why = describe_database_error(exc) if is_database_error(exc) else type(exc).__name__
            self.log(f"run {run.run_id}: {why}; its lease will expire")
        finally:
            self.running -= 1
            self.slot_freed.set()

    async def _job_under_lease(self, run: ClaimedRun) -> JobResult:
        try:
            payload = decode_payload(run.payload)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return JobResult(end="failed", code="bad_payload")
        ctx = JobContext(run=run, payload=payload)
        lease_lost = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._heartbeats, run, ctx.cancel_requested, lease_lost)
            result = await self._job(ctx)
            nursery.cancel_scope.cancel()
        return result

    async def _job(self, ctx: JobContext) -> JobResult:
        grace = self.config.kill_grace_ms / 1000
        handler = self.handlers.get(f"{ctx.run.project_id}/{ctx.run.task_id}")
        if handler is None:
            if not self.config.run_commands:
                return JobResult(end="failed", code="no_handler")
            env = job_environment(ctx.run)
            return await run_job(ctx.payload, env, cancel=ctx.cancel_requested, grace_s=grace)
        return await _handle(handler, ctx)

    async def _heartbeats(self, run: ClaimedRun, cancel: trio.Event, lost: trio.Event) -> None:
        every = self.config.lease_ms / 3000
        while True:
            await trio.sleep(every)
            try:
                beat = await store.heartbeat(
                    self.db,
                    attempt_id=run.attempt_id,
                    lease_token=run.lease_token,
                    lease_ms=self.config.lease_ms,
                )
            except Exception as exc:
                if not is_database_error(exc):
                    raise
                continue  # the next beat may get through while the lease lasts
            match beat:
                case Extended(cancel_requested=True):
                    cancel.set()
                case Extended():
                    pass
                case LeaseLost():
                    self.metrics.lease_lost()
                    lost.set()
                    cancel.set()  # another worker may run it again: stop this copy
                    return


async def _handle(handler: Handler, ctx: JobContext) -> JobResult:
    timeout_s = ctx.payload.timeout_ms / 1000 if ctx.payload.timeout_ms else float("inf")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_cancel_on, ctx.cancel_requested, nursery.cancel_scope)
        with trio.move_on_after(timeout_s) as timer:
            try:
                await handler(ctx)
            except Exception:
                nursery.cancel_scope.cancel()
                return JobResult(end="failed", code="handler_error")
        nursery.cancel_scope.cancel()
    if ctx.cancel_requested.is_set():
        return JobResult(end="cancelled", code="cancelled")
    if timer.cancelled_caught:
        return JobResult(end="failed", code="timeout")
    return JobResult(end="succeeded", code="succeeded")


async def _cancel_on(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def _no_log(line: str) -> None:
    return None


async def serve_worker(
    config: WorkerConfig,
    *,
    handlers: Mapping[str, Handler] | None = None,
    stop: trio.Event | None = None,
    metrics: WorkerMetrics | None = None,
    log: Callable[[str], None] = _no_log,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Work until ``stop`` is set (or the caller cancels); reports the worker id. ``log``
    gets one line per finished job and per database problem (no payload, no DSN).

    Ownership: the pool and every job task live inside this call; when it returns, no
    child process it started is left running.
    """
    stop = trio.Event() if stop is None else stop
    async with open_database(
        config.dsn, max_size=config.concurrency + 2, application_name="qlsched-worker"
    ) as db:
        w = _Worker(config, db, handlers or {}, metrics or WorkerMetrics(), log)
        async with trio.open_nursery() as jobs:
            task_status.started(w.worker_id)
            while not stop.is_set():
                try:
                    claimed = await w.poll_once(jobs)
                except Exception as exc:
                    if not is_database_error(exc):
                        raise
                    w.log(f"poll: {describe_database_error(exc)}")
                    claimed = 0
                if claimed and w.running < config.concurrency:
                    continue  # more may be queued: poll again at once
                w.slot_freed = trio.Event()
                with trio.move_on_after(config.poll_ms / 1000):
                    await _first_of(stop, w.slot_freed)
            jobs.cancel_scope.deadline = trio.current_time() + config.stop_timeout_ms / 1000


async def _first_of(*events: trio.Event) -> None:
    async with trio.open_nursery() as nursery:
        for event in events:
            nursery.start_soon(_set_then_cancel, event, nursery.cancel_scope)


async def _set_then_cancel(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
