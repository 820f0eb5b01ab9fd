"""The tools' signal watch (``qlsched.signals``): a caught signal cancels the work and
ends it as ``Interrupted``, after the work's own clean-up ran; otherwise the work's result
or its error comes back."""

from __future__ import annotations

import os
import signal

import pytest
import trio

from qlsched.signals import Interrupted, run_until_signal, single_leaf


async def test_a_caught_signal_cancels_the_work_after_its_clean_up() -> None:
    """Rule: the first signal watched cancels the work, its ``finally`` runs, and the call
    raises ``Interrupted`` naming that signal."""
    cleaned: list[str] = []

    async def work() -> int:
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            await trio.sleep_forever()
        finally:
            cleaned.append("done")
        return 0

    with pytest.raises(Interrupted) as stopped:
        await run_until_signal(work, signal.SIGUSR1)
    assert (stopped.value.signum, str(stopped.value)) == (signal.SIGUSR1, "SIGUSR1")
    assert cleaned == ["done"]


async def test_the_work_s_result_comes_back_when_no_signal_arrives() -> None:
    """Rule: without a signal the call returns what the work returned (the watch ends)."""

    async def work() -> str:
        await trio.lowlevel.checkpoint()
        return "report"

    assert await run_until_signal(work, signal.SIGUSR1) == "report"


async def test_the_work_s_error_is_the_single_leaf_of_the_group() -> None:
    """Rule: a failed work leaves as a group of one; ``single_leaf`` gives its error."""

    async def work() -> None:
        raise KeyError("boom")

    with pytest.raises(BaseExceptionGroup) as failed:
        await run_until_signal(work, signal.SIGUSR1)
    assert isinstance(single_leaf(failed.value), KeyError)
    assert single_leaf(ValueError("plain")).args == ("plain",)
