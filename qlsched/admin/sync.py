"""``qlsched.admin`` for plain scripts: each function runs its async twin under ``trio.run``.

Same arguments, results, errors and docstrings as the async functions (each is the async
function wrapped, so the two cannot drift apart). Not for code already inside a Trio (or
asyncio) event loop: ``trio.run`` refuses to nest there. From Trio, await the async
functions; from asyncio (FastAPI, Jupyter), await ``qlsched.admin.aio``'s.
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


def blocking(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, R]:
    """``fn`` as a blocking call: a fresh ``trio.run`` for each call."""

    @wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return trio.run(partial(fn, *args, **kwargs))
        # Inside a running asyncio loop trio.run would nest (and block the loop): say what
        # works there instead of Trio's "Attempted to call run() from inside a run()".
        raise RuntimeError(
            f"qlsched.admin.sync.{fn.__name__} cannot run inside a running asyncio loop:"
            f" await qlsched.admin.aio.{fn.__name__}(...) instead"
        )

    return run


publish = blocking(schedules.publish)
pause = blocking(schedules.pause)
resume = blocking(schedules.resume)
list_schedules = blocking(schedules.list_schedules)
trigger_now = blocking(requests.trigger_now)
backfill = blocking(requests.backfill)
cancel = blocking(runs.cancel)
list_runs = blocking(runs.list_runs)
