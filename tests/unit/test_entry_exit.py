"""``qlsched.entry.main``: how the process ends once the command has returned."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
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


def _interrupted_command() -> int:
    raise KeyboardInterrupt


def _ends_as_one_interrupt(capsys: pytest.CaptureFixture[str]) -> None:
    """``entry.main`` returns 130 with one ``qlsched: interrupted``: no KeyboardInterrupt
    leaves it (Python would print it and die by SIGINT, exit -2)."""
    try:
        code = entry.main()
    except KeyboardInterrupt:
        pytest.fail("a KeyboardInterrupt left qlsched.entry.main")
    assert code == 130
    assert capsys.readouterr().err == "qlsched: interrupted\n"


@pytest.mark.parametrize(
    "command",
    [lambda: 0, _interrupted_command],
    ids=["as-the-command-returns", "while-the-first-is-handled"],
)
def test_a_ctrl_c_before_signals_are_ignored_is_exit_130(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    handlers: None,
    command: Callable[[], int],
) -> None:
    """Rule: a SIGINT whose handler runs before ``main`` has ignored signals, as the command
    returns or while a first Ctrl-C's KeyboardInterrupt is being handled (0.1 ms apart,
    twice in 300 tries), still ends as one ``qlsched: interrupted``, exit 130; it never
    leaves ``main`` as a bare KeyboardInterrupt, which Python prints and turns into death
    by SIGINT (exit -2)."""
    monkeypatch.setattr(entry, "_load_command", lambda: (False, "status"))
    monkeypatch.setattr(qlsched.cli, "main", command)
    monkeypatch.setattr(signal, "signal", _interrupt_at_first_ignore(signal.signal))

    _ends_as_one_interrupt(capsys)
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


CAUGHT_IN_EXEC = """
import sys
import qlsched.cli
from qlsched import entry

def command() -> int:
    try:
        exec("raise KeyboardInterrupt")  # a Ctrl-C inside a dataclass's generated code
    except KeyboardInterrupt:
        print("qlsched: interrupted", file=sys.stderr)
        return 130
    return 0

entry._load_command = lambda: (False, "status")
qlsched.cli.main = command
entry.script()
"""


def test_an_interrupt_caught_after_it_left_a_string_exec_still_exits_130(
    tmp_path: Path,
) -> None:
    """Rule: an interrupted command exits 130, also when its KeyboardInterrupt passed
    through a string ``exec`` before it was caught: CPython then marks it unhandled and,
    when a program run with ``-m`` (as ``python -m qlsched``) ends, kills the process with
    SIGINT (exit -2; seen when a Ctrl-C landed in a dataclass's creation while ``edge
    status`` loaded ``rich.table``)."""
    (tmp_path / "caught_in_exec.py").write_text(CAUGHT_IN_EXEC)
    done = subprocess.run(
        [sys.executable, "-m", "caught_in_exec"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (130, "qlsched: interrupted\n")


def test_a_ctrl_c_while_the_command_loads_leaves_sigint_ignored(
    monkeypatch: pytest.MonkeyPatch, handlers: None
) -> None:
    """Rule: a SIGINT noted while the command's modules load leaves SIGINT ignored, not
    raising: the KeyboardInterrupt ``main`` raises next is being handled, and a second
    Ctrl-C landing in that handling printed a traceback (exit -2)."""

    def chosen_with_a_ctrl_c(argv: object) -> str:
        os.kill(os.getpid(), signal.SIGINT)  # its handler runs at the next line
        return "status"

    monkeypatch.setattr(qlsched, "_early_sigints", [])
    monkeypatch.setattr(qlsched.cli, "chosen_command", chosen_with_a_ctrl_c)
    assert entry._load_command() == (True, "status")
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def _interrupted_at_entry_once(real: Callable[[BaseException], bool]) -> Callable[..., bool]:
    """``_signals_ignored_then_interrupted`` whose first call raises KeyboardInterrupt before
    its body runs: a second Ctrl-C's handler run at the function's first line."""
    calls: list[int] = []

    def wrapped(exc: BaseException) -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(exc)

    return wrapped


def test_a_second_ctrl_c_at_the_handlings_first_line_is_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], handlers: None
) -> None:
    """Rule: a second Ctrl-C whose handler runs as the first one's handling is entered (at
    the function's first line, before its own loop guards anything; 0.16 ms apart while
    `edge status` loaded Trio, once in CI) still ends as one ``qlsched: interrupted``, exit
    130, not a traceback."""
    monkeypatch.setattr(entry, "_load_command", lambda: (False, "status"))
    monkeypatch.setattr(qlsched.cli, "main", _interrupted_command)
    real = entry._signals_ignored_then_interrupted
    monkeypatch.setattr(
        entry, "_signals_ignored_then_interrupted", _interrupted_at_entry_once(real)
    )

    _ends_as_one_interrupt(capsys)


LOAD_EDGE = """
import sys
sys.argv = ["qlsched", "edge", "status"]
from qlsched import entry
from qlsched.commands.edge import SUBCOMMANDS
entry._load_command()
missing = [n for n in SUBCOMMANDS if "qlsched.commands.edge." + n not in sys.modules]
print(missing, "trio" in sys.modules)
"""


def test_an_edge_command_loads_its_subcommands_before_sigint_can_raise() -> None:
    """Rule: for ``edge ...``, the subcommands' modules (and Trio, which they import) load
    while a SIGINT is only noted: the parser imports them all for their flags, and a Ctrl-C
    raised into that import came out as a traceback."""
    done = subprocess.run(
        [sys.executable, "-c", LOAD_EDGE], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "[] True", done.stderr
