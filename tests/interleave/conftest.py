"""The explorer's summary line: how many orderings this session explored."""

from __future__ import annotations

from typing import Any

from tests.interleave.tally import TALLY


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TALLY.explorations == 0:
        return
    terminalreporter.write_sep("-", "interleaving explorer")
    terminalreporter.write_line(
        f"interleave: {TALLY.orderings} orderings explored in {TALLY.explorations} explorations"
        f" ({TALLY.waits} with a lock wait, {TALLY.reordered} ran a step late behind one),"
        f" {TALLY.failed} failed"
    )
    for line in TALLY.lines:
        terminalreporter.write_line(f"  {line}")
