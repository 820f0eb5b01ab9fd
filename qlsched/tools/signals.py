"""How a tool's Trio program (``bench``, ``demo``) meets SIGINT and SIGTERM.

The work runs in a nursery beside a watch for the signals; the first one caught cancels
the work (its own ``finally`` blocks clean up: replicas killed, a database dropped) and
ends it as ``Interrupted``, which the command turns into exit 128 + the signal number.
A failure of the work leaves the nursery as a group of one; ``single_leaf`` gives the
command that one error to report.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from qlsched import exception_groups
from qlsched.commands._signals import watch_signals

T = TypeVar("T")


class Interrupted(Exception):
    """The work was cancelled by ``signum``; the message is the signal's name."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


async def run_until_signal(work: Callable[[], Awaitable[T]], *signums: int) -> T:
    """``work()`` beside a watch for ``signums``; the first one caught cancels it.

    Raises:
        Interrupted: a signal was caught (the work was cancelled and cleaned up).
        BaseExceptionGroup: the work failed (``single_leaf`` finds its error).
    """
    caught: list[int] = []
    done: list[T] = []
    async with trio.open_nursery() as nursery:

        def cut(signum: int) -> None:
            caught.append(signum)
            nursery.cancel_scope.cancel()

        await nursery.start(watch_signals, signums, cut, name="qlsched.tools.watch_signals")
        try:
            done.append(await work())
        finally:
            nursery.cancel_scope.cancel()
    if caught:
        raise Interrupted(caught[0])
    return done[0]


def single_leaf(exc: BaseException) -> BaseException:
    """The one error inside nested groups of one (``exc`` itself when it is not one)."""
    if isinstance(exc, BaseExceptionGroup):
        return exception_groups.single_leaf(exc) or exc
    return exc
