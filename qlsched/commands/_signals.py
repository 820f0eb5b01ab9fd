"""SIGINT and SIGTERM for the long-running commands (``run``, ``edge run``, and the tools'
``run_until_signal``): one watcher, started with ``nursery.start`` so its handlers are in
place before the command says it is ready."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import trio


async def watch_signals(
    signums: Sequence[int],
    on_signal: Callable[[int], None],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Call ``on_signal`` with the first of ``signums`` to arrive; until cancelled, the
    ones after it are received and ignored, so a second Ctrl-C cannot cut the stop short.
    (Received, not left pending: Trio re-raises a pending signal when the receiver closes,
    and a second Ctrl-C would then end the process with an exception group.)"""
    with trio.open_signal_receiver(*signums) as signals:
        task_status.started()
        first = True
        async for signum in signals:
            if first:
                on_signal(signum)
                first = False
