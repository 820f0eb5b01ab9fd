"""SIGINT and SIGTERM for the long-running commands: one watcher, started with
``nursery.start`` so its handlers are in place before the command says it is ready."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import trio


async def watch_signals(
    signums: Sequence[int],
    on_signal: Callable[[int], None],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Call ``on_signal`` with the first of ``signums`` to arrive; until cancelled, the
    ones after it are caught and ignored, so a second Ctrl-C cannot cut the stop short."""
    with trio.open_signal_receiver(*signums) as signals:
        task_status.started()
        async for signum in signals:
            on_signal(signum)
            break
        await trio.sleep_forever()


@asynccontextmanager
async def cancelled_on_signal(*signums: int) -> AsyncIterator[list[int]]:
    """Run the block until it ends or the first of ``signums`` cancels it; the yielded list
    then holds that signal."""
    caught: list[int] = []
    async with trio.open_nursery() as nursery:

        def cut(signum: int) -> None:
            caught.append(signum)
            nursery.cancel_scope.cancel()

        await nursery.start(watch_signals, signums, cut, name="qlsched.watch_signals")
        try:
            yield caught
        finally:
            nursery.cancel_scope.cancel()
