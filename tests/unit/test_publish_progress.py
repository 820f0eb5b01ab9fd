"""``qlsched publish`` progress: shown on a terminal once a publish runs past a second,
never on a pipe, and never in the way of the body's own error."""

from __future__ import annotations

import io

import pytest
import trio
import trio.testing

from qlsched.commands.publish import _progress
from qlsched.core.specs import SpecError


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def _publish_for(seconds: float) -> None:
    async with _progress() as steps:
        steps.append("100,000 triggers")
        await trio.sleep(seconds)


def _run(seconds: float, stream: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr("sys.stderr", stream)
    trio.run(_publish_for, seconds, clock=trio.testing.MockClock(autojump_threshold=0))
    return stream.getvalue()


def test_a_long_publish_shows_its_step_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past a second, the latest step is shown on a terminal's stderr, ended by a newline."""
    shown = _run(2.5, _Terminal(), monkeypatch)
    assert "qlsched publish: 100,000 triggers" in shown
    assert shown.endswith("\n")


def test_a_short_publish_or_a_pipe_shows_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a second on a terminal, or any time on a pipe, stderr stays empty."""
    assert _run(0.5, _Terminal(), monkeypatch) == ""
    assert _run(5.0, io.StringIO(), monkeypatch) == ""


def test_the_body_error_passes_through_as_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """A SpecError raised while progress is shown reaches the caller as a SpecError (so it
    becomes one line and exit 2), not wrapped in an exception group."""
    monkeypatch.setattr("sys.stderr", _Terminal())

    async def failing() -> None:
        async with _progress():
            await trio.sleep(1.5)
            raise SpecError("trigger p/x: id: taken")

    with pytest.raises(SpecError, match="taken"):
        trio.run(failing, clock=trio.testing.MockClock(autojump_threshold=0))
