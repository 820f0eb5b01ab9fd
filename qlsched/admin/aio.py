"""``qlsched.admin`` for asyncio services (FastAPI, Jupyter, aiohttp): the same functions,
awaitable from a running asyncio loop.

``qlsched.admin.sync`` calls ``trio.run``, which refuses to start inside a running event
loop ("Attempted to call run() from inside a run()" from asyncio's own). Each function here
runs its Trio twin under ``trio.run`` on a worker thread (``asyncio.to_thread``) and awaits
it, so the caller's loop keeps running. Same arguments, results, errors and docstrings (the
async function wrapped, so they cannot drift). Cancellation: cancelling the awaiting task
does not cut the call already on its thread; it finishes (one short transaction) and its
result is dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from functools import partial, wraps
from typing import Any, ParamSpec, TypeVar

import trio

from qlsched.admin import requests, runs, schedules
from qlsched.admin._calls import CALLS

P = ParamSpec("P")
R = TypeVar("R")

__all__ = [call.__name__ for call in CALLS]


def threaded(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """``fn`` as an asyncio coroutine function: ``trio.run`` on a thread of its own."""

    @wraps(fn)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(trio.run, partial(fn, *args, **kwargs))

    return call


publish = threaded(schedules.publish)
pause = threaded(schedules.pause)
resume = threaded(schedules.resume)
list_schedules = threaded(schedules.list_schedules)
trigger_now = threaded(requests.trigger_now)
backfill = threaded(requests.backfill)
cancel = threaded(runs.cancel)
list_runs = threaded(runs.list_runs)
