"""``qlsched.admin`` for plain scripts: each function runs its async twin under ``trio.run``.

Same arguments, results, errors and docstrings as the async functions (each is the async
function wrapped, so the two cannot drift apart). Not for code already inside a Trio (or
asyncio) event loop: ``trio.run`` refuses to nest there; await the async functions instead.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from functools import partial, wraps
from typing import Any, ParamSpec, TypeVar

import trio

from qlsched.admin import requests, schedules

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["backfill", "list_schedules", "pause", "publish", "resume", "trigger_now"]


def blocking(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, R]:
    """``fn`` as a blocking call: a fresh ``trio.run`` for each call."""

    @wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        return trio.run(partial(fn, *args, **kwargs))

    return run


publish = blocking(schedules.publish)
pause = blocking(schedules.pause)
resume = blocking(schedules.resume)
list_schedules = blocking(schedules.list_schedules)
trigger_now = blocking(requests.trigger_now)
backfill = blocking(requests.backfill)
