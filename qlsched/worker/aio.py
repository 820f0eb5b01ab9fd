"""The worker for asyncio services: ``await qlsched.worker.aio.serve(config, handlers=...,
stop=event)`` with asyncio handlers per ``project/task``.

The worker itself runs under ``trio.run`` on a thread of its own (its pool and leases are
Trio's, as in ``serve_worker``); each handler is scheduled on the caller's asyncio loop
(``run_coroutine_threadsafe``) and awaited from the worker's thread. A cancel of the Run or
its task's timeout cancels the handler's asyncio task. Setting ``stop`` is the worker's
SIGTERM: no more claims, running handlers may finish within ``stop_timeout_ms``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Mapping

import trio

from qlsched.worker.metrics import WorkerMetrics
from qlsched.worker.service import Handler, JobContext, WorkerConfig, serve_worker

AioHandler = Callable[[JobContext], Awaitable[None]]


def _on_loop(handler: AioHandler, loop: asyncio.AbstractEventLoop) -> Handler:
    async def run(ctx: JobContext) -> None:
        async def job() -> None:
            await handler(ctx)

        future = asyncio.run_coroutine_threadsafe(job(), loop)
        try:
            await trio.to_thread.run_sync(future.result, abandon_on_cancel=True)
        except BaseException:
            future.cancel()
            raise

    return run


async def serve(
    config: WorkerConfig,
    *,
    handlers: Mapping[str, AioHandler] | None = None,
    stop: asyncio.Event,
    metrics: WorkerMetrics | None = None,
) -> None:
    """Work until ``stop`` is set; returns when every job has ended or been stopped."""
    loop = asyncio.get_running_loop()
    wrapped = {name: _on_loop(h, loop) for name, h in (handlers or {}).items()}
    ready = threading.Event()
    holder: dict[str, object] = {}

    async def main() -> None:
        stopping = trio.Event()
        holder.update(token=trio.lowlevel.current_trio_token(), stop=stopping)
        ready.set()
        await serve_worker(config, handlers=wrapped, stop=stopping, metrics=metrics)

    worker = asyncio.ensure_future(asyncio.to_thread(trio.run, main))
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({worker, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if not worker.done():
        await asyncio.to_thread(ready.wait)
        stopping = holder["stop"]
        assert isinstance(stopping, trio.Event)
        token = holder["token"]
        assert isinstance(token, trio.lowlevel.TrioToken)
        # Thread-safe and non-blocking: this thread may itself run a Trio loop (an asyncio
        # loop under trio-asyncio's policy), where a blocking from_thread call would hang.
        token.run_sync_soon(stopping.set)
    await worker
