"""Embedding the worker and the admin API (docs/contract.md §13): a Trio service registers
async handlers per project/task on the worker's protocol; an asyncio service (a running
asyncio loop, as in FastAPI or Jupyter) uses ``qlsched.admin.aio`` and
``qlsched.worker.aio`` where ``qlsched.admin.sync`` cannot run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import partial

import pytest
import trio

from qlsched import admin
from qlsched.core.specs import TaskEntry
from qlsched.core.work import CancelledQueued
from qlsched.worker import JobContext, WorkerConfig, WorkerMetrics, serve_worker
from qlsched.worker import aio as worker_aio
from tests.integration.adapter_support import Env, open_env
from tests.support.pg import TestDatabase
from tests.worker.support import admitted, attempts, run_row, wait_until


@pytest.fixture
async def env(pg_db: TestDatabase) -> AsyncIterator[Env]:
    async with open_env(pg_db) as opened:
        yield opened


async def test_trio_handlers_run_on_the_protocol(env: Env) -> None:
    """Rule: a handler registered for project/task runs each of its Runs with the key; one
    that returns succeeds, one that raises fails (handler_error) and is retried under the
    policy; a worker without run_commands claims only the tasks it has handlers for."""
    task = TaskEntry(project="p", id="task", command="unused", max_attempts=2)
    [run] = await admitted(env, 1, task)
    keys: list[tuple[str, int]] = []

    async def flaky(ctx: JobContext) -> None:
        keys.append((ctx.idempotency_key, ctx.run.attempt_no))
        if ctx.run.attempt_no == 1:
            raise RuntimeError("first try fails")

    stop = trio.Event()
    metrics = WorkerMetrics()
    config = WorkerConfig(dsn=env.db.worker_dsn, run_commands=False, poll_ms=50)
    async with trio.open_nursery() as nursery:
        await nursery.start(
            partial(serve_worker, config, handlers={"p/task": flaky}, stop=stop, metrics=metrics)
        )
        await wait_until(
            env, "SELECT state = 'succeeded' FROM qlsched.runs WHERE run_id = $1", run.run_id
        )
        stop.set()
    first, second = await attempts(env, str(run.run_id))
    assert (first["state"], first["error"]) == ("failed", "handler_error")
    assert second["state"] == "succeeded"
    row = await run_row(env, str(run.run_id))
    assert keys == [(row["idempotency_key"], 1), (row["idempotency_key"], 2)]
    stats = metrics.statistics()
    assert (stats.claims, stats.retries) == (2, 1)
    assert stats.outcomes == {"handler_error": 1, "succeeded": 1}


async def test_a_worker_takes_only_tasks_it_has_handlers_for(env: Env) -> None:
    """Rule: with run_commands off, Runs of other tasks stay queued for another worker."""
    [run] = await admitted(env, 1)
    stop = trio.Event()
    config = WorkerConfig(dsn=env.db.worker_dsn, run_commands=False, poll_ms=50)

    async def never(ctx: JobContext) -> None:
        raise AssertionError("not this task")

    metrics = WorkerMetrics()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            partial(serve_worker, config, handlers={"p/other": never}, stop=stop, metrics=metrics)
        )
        await trio.sleep(0.3)  # several polls; nothing may be claimed
        stop.set()
    assert metrics.statistics().claims == 0
    assert (await run_row(env, str(run.run_id)))["state"] == "queued"


def test_asyncio_services_use_admin_aio_and_worker_aio(pg_db: TestDatabase) -> None:
    """Rule: inside a running asyncio loop (where `qlsched.admin.sync` cannot run: trio.run
    must not nest in the loop's thread), `qlsched.admin.aio` and `qlsched.worker.aio` work:
    cancel a queued Run, run another with an asyncio handler, list them, and the loop keeps
    serving its own tasks meanwhile."""

    async def setup() -> list[str]:
        async with open_env(pg_db) as env:
            return [str(r.run_id) for r in await admitted(env, 2)]

    cancelled, worked = trio.run(setup)
    seen: list[str] = []

    async def handler(ctx: JobContext) -> None:
        await asyncio.sleep(0)  # a real asyncio await, on the service's own loop
        seen.append(ctx.run.run_id)

    async def service() -> dict[str, str]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticking = asyncio.ensure_future(ticker())
        before = ticks
        with pytest.raises(RuntimeError, match=r"await qlsched\.admin\.aio\.list_runs"):
            admin.sync.list_runs(pg_db.observer_dsn)
        outcome = await admin.aio.cancel(pg_db.admin_dsn, cancelled, note="asyncio")
        assert isinstance(outcome, CancelledQueued)
        stop = asyncio.Event()
        config = WorkerConfig(dsn=pg_db.worker_dsn, run_commands=False, poll_ms=50)
        serving = asyncio.ensure_future(
            worker_aio.serve(config, handlers={"p/task": handler}, stop=stop)
        )
        for _ in range(400):
            runs = await admin.aio.list_runs(pg_db.observer_dsn, "p")
            if {r.run_id: r.state for r in runs}.get(worked) == "succeeded":
                break
            await asyncio.sleep(0.05)
        stop.set()
        await serving
        assert ticks > before + 5  # the loop was never blocked
        ticking.cancel()
        return {r.run_id: r.state for r in await admin.aio.list_runs(pg_db.observer_dsn)}

    states = asyncio.run(service())
    assert states == {cancelled: "cancelled", worked: "succeeded"}
    assert seen == [worked]
