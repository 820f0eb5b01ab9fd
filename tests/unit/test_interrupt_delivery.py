"""How a Ctrl-C reaches a command's code (``qlsched.interrupts``,
``qlsched.signals.interruptible``), with real signals sent to this process."""

from __future__ import annotations

import os
import signal

import pytest
import trio

from qlsched.interrupts import raising_sigint, uninterrupted
from qlsched.signals import interruptible


def _sigint() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def test_clean_up_is_not_cut_by_a_second_ctrl_c() -> None:
    """Rule: inside ``uninterrupted`` a SIGINT is ignored (a half-made data directory is
    emptied whole); the previous handler is back after it."""
    before = signal.getsignal(signal.SIGINT)
    emptied = []
    with uninterrupted():
        _sigint()
        emptied.append(True)
    assert emptied == [True]
    assert signal.getsignal(signal.SIGINT) is before


def test_blocking_code_takes_a_ctrl_c_at_once() -> None:
    """Rule: inside ``raising_sigint`` a SIGINT raises KeyboardInterrupt, whatever handler
    was in place (under Trio, a signal receiver's); that handler is back after it."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(KeyboardInterrupt), raising_sigint():
            _sigint()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_cancels_the_body_then_interrupts() -> None:
    """Rule: a SIGINT while a command's body awaits cancels it (its clean-up awaits run,
    shielded as it chooses), then the command raises KeyboardInterrupt with SIGINT ignored
    from then on; a second SIGINT during that clean-up changes nothing; a body that
    finished keeps its exit code."""
    cleaned: list[str] = []

    async def body() -> int:
        try:
            _sigint()
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                _sigint()  # the impatient second Ctrl-C
                await trio.sleep(0.01)
                cleaned.append("closed")
        return 0

    before = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(KeyboardInterrupt):
            trio.run(interruptible, body)
        # The exit is under way: a third Ctrl-C raises nowhere (one raised into the
        # unwinding printed a traceback from a garbage-collected nursery).
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        _sigint()
    finally:
        signal.signal(signal.SIGINT, before)
    assert cleaned == ["closed"]

    async def quick() -> int:
        return 7

    assert trio.run(interruptible, quick) == 7


def test_an_error_of_the_body_comes_out_as_itself() -> None:
    """Rule: the body's own exception is raised as it came (not in a group), so the
    command maps it to its exit code."""

    async def bad() -> int:
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        trio.run(interruptible, bad)
