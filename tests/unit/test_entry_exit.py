"""``qlsched.entry.main``: how the process ends once the command has returned."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import qlsched.cli
from qlsched import entry


@pytest.fixture
def handlers() -> Iterator[None]:
    """SIGINT's and SIGTERM's handlers as they were (``entry.main`` sets both)."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def _interrupt_at_first_ignore(real: Callable[..., Any]) -> Callable[..., Any]:
    """``signal.signal`` whose first SIG_IGN for SIGINT raises KeyboardInterrupt instead: the
    handler of a SIGINT that arrived as the command returned, run at the next line."""
    landed: list[int] = []

    def signal_(signum: int, handler: Any) -> Any:
        if signum == signal.SIGINT and handler is signal.SIG_IGN and not landed:
            landed.append(signum)
            raise KeyboardInterrupt
        return real(signum, handler)

    return signal_


def test_a_ctrl_c_as_the_command_returns_is_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], handlers: None
) -> None:
    """Rule: a SIGINT whose handler runs between the command's return and the ignoring of
    signals still ends as ``qlsched: interrupted``, exit 130; it never leaves ``main`` as a
    bare KeyboardInterrupt, which Python turns into death by SIGINT (exit -2, seen once in
    CI after an Edge command had printed its interrupted line)."""
    monkeypatch.setattr(entry, "_load_command", lambda: (False, "status"))
    monkeypatch.setattr(qlsched.cli, "main", lambda: 0)
    monkeypatch.setattr(signal, "signal", _interrupt_at_first_ignore(signal.signal))

    try:
        code = entry.main()
    except KeyboardInterrupt:
        pytest.fail("a KeyboardInterrupt left qlsched.entry.main")
    assert code == 130
    assert capsys.readouterr().err == "qlsched: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_a_command_that_returns_keeps_its_code_and_ignores_signals_after(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], handlers: None
) -> None:
    """Rule: without a signal, the command's own code is the exit code, nothing is printed,
    and SIGINT and SIGTERM are ignored from then on (the exit is under way)."""
    monkeypatch.setattr(entry, "_load_command", lambda: (False, "status"))
    monkeypatch.setattr(qlsched.cli, "main", lambda: 3)

    assert entry.main() == 3
    assert capsys.readouterr().err == ""
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN


class _Unraisable:
    """An object whose finaliser raises ``exc``: Python cannot raise it, so it reports it
    through ``sys.unraisablehook``, as it does a SIGINT handled inside a weakref callback."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __del__(self) -> None:
        raise self.exc


def _command_dropping(exc: BaseException) -> Callable[[], int]:
    def command() -> int:
        _Unraisable(exc)  # collected at once: its finaliser runs here
        return 0

    return command


def test_an_interrupt_landing_in_a_finaliser_prints_no_report(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], handlers: None
) -> None:
    """Rule: a KeyboardInterrupt Python cannot raise (a second Ctrl-C landed in a garbage-
    collected import lock's callback, seen once in CI) prints nothing: no "Exception
    ignored" report beside the command's own lines. Other unraisable errors still reach
    the hook that was in place, and it is in place again after ``main``."""
    seen: list[type[BaseException] | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_type))
    before = sys.unraisablehook
    monkeypatch.setattr(entry, "_load_command", lambda: (False, "status"))

    monkeypatch.setattr(qlsched.cli, "main", _command_dropping(KeyboardInterrupt()))
    assert entry.main() == 0
    assert seen == []
    assert capsys.readouterr().err == ""

    monkeypatch.setattr(qlsched.cli, "main", _command_dropping(ValueError("kept")))
    assert entry.main() == 0
    assert seen == [ValueError]
    assert sys.unraisablehook is before
