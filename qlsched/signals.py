"""SIGINT and SIGTERM, in one module: how a one-shot command's body meets them
(``interruptible``, for both profiles' commands), the watcher of the long-running commands
(``run``, ``edge run``) and the way a tool's Trio program (``bench``, ``demo``) meets them.

``watch_signals`` is started with ``nursery.start``, so its handlers are in place before the
command says it is ready. ``run_until_signal`` runs a tool's work in a nursery beside that
watch; the first signal caught cancels the work (its own ``finally`` blocks clean up:
replicas killed, a database dropped) and ends it as ``Interrupted``, which the command turns
into exit 128 + the signal number. A failure of the work leaves the nursery as a group of
one; ``single_leaf`` gives the command that one error to report.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable, Sequence
from types import FrameType
from typing import TypeVar

import trio

from qlsched import exception_groups

T = TypeVar("T")


async def interruptible(fn: Callable[[], Awaitable[T]]) -> T:
    """A one-shot command's body, with a SIGINT (or SIGTERM, made one by ``qlsched.entry``)
    cancelling it instead of raising KeyboardInterrupt wherever it lands
    (``qlsched.interrupts``); the KeyboardInterrupt comes after its work unwound, with
    SIGINT ignored from then on: the exit is under way (a second Ctrl-C raised into the
    unwinding printed a traceback from a garbage-collected nursery). Later signals are
    received and ignored meanwhile. A body that finished first keeps its result. A command
    that watches its own signals (``run``, ``work``, ``ui``) opens its receiver inside this
    one and gets them first."""
    done: list[T] = []
    failed: list[BaseException] = []
    interrupted = False
    try:
        with trio.open_signal_receiver(signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    nonlocal interrupted
                    async for _ in signals:
                        if not interrupted:
                            interrupted = True
                            nursery.cancel_scope.cancel()

                async def body() -> None:
                    try:
                        done.append(await fn())
                    except trio.Cancelled:
                        raise
                    except BaseException as exc:  # raised below as it came, not in a group
                        failed.append(exc)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(watch)
                nursery.start_soon(body)
    finally:
        if interrupted:  # also when the receiver re-raises a signal left pending at its close
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    if failed:
        raise failed[0]
    if done:
        return done[0]
    raise KeyboardInterrupt


_early: list[int] = []
"""SIGINTs noted before a watch was in place (``qlsched.entry``'s watching commands)."""


def note_early_signal(signum: int, frame: FrameType | None) -> None:
    """SIGINT's handler until a command's watch replaces it (``qlsched.entry``)."""
    _early.append(signum)


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
        if _early:  # it came before the watch: handled as if it came now
            on_signal(_early[0])
            first = False
        async for signum in signals:
            if first:
                on_signal(signum)
                first = False


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
