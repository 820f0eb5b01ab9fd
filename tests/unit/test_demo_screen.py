"""The demo's live view is rich's ``Live`` on a terminal (redrawn in place, events kept
above it, the last table left on screen) and plain lines in a pipe (issue #32: no
hand-written cursor codes)."""

from __future__ import annotations

import io
import re

from qlsched.tools.demo.monitor import Screen


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def visible(raw: str) -> str:
    """What stays on a terminal: the text with rich's cursor and erase codes applied."""
    lines: list[str] = []
    for piece in re.split(r"(\x1b\[[0-9;?]*[A-Za-z]|\r|\n)", raw):
        if piece == "\n":
            lines.append("")
        elif piece == "\x1b[1A" and lines:
            lines.pop()
        elif piece == "\x1b[2K":
            if lines:
                lines[-1] = ""
        elif piece and not piece.startswith("\x1b") and piece != "\r":
            if not lines:
                lines.append("")
            lines[-1] += piece
    return "\n".join(line for line in lines if line)


def test_on_a_terminal_the_table_is_redrawn_in_place() -> None:
    """Two draws and an event between them leave the event and the second table only."""
    out = Terminal()
    screen = Screen(out)
    screen.live(["runs 1", "lag 0.1 s"], "plain")
    screen.note("killed r2")
    screen.live(["runs 5", "lag 0.2 s"], "plain")
    screen.done()
    assert visible(out.getvalue()) == "killed r2\nruns 5\nlag 0.2 s"
    assert "plain" not in out.getvalue()


def test_in_a_pipe_each_draw_is_one_plain_line() -> None:
    """Off a terminal: the plain line per draw, events as lines, no escape code."""
    out = io.StringIO()
    screen = Screen(out)
    screen.live(["runs 1"], "[1.0s] runs 1")
    screen.note("killed r2")
    screen.live(["runs 5"], "[2.0s] runs 5")
    screen.done()
    assert out.getvalue() == "[1.0s] runs 1\nkilled r2\n[2.0s] runs 5\n"
