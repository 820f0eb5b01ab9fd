"""Diagnostics on a terminal (README "Configuration", ``diagnostics``): one readable line
each, never a JSON line, and a repeat of the same failure within 30 s counted and told in
one line, so an outage does not scroll a stream of identical lines past the operator."""

from __future__ import annotations

import io

from qlsched.core.diagnostics import Diagnostic
from qlsched.readable_sink import FOLD_S, ReadableSink


def test_lines_are_readable_and_repeats_fold() -> None:
    """Rule: a diagnostic is ``PREFIX HH:MM:SS LEVEL CODE fields (EXC, SQLSTATE S)``;
    the same code, exception and SQLSTATE again within FOLD_S prints nothing; the next
    different line (or one after FOLD_S, or close) first says how many were folded."""
    out, now = io.StringIO(), [0.0]
    sink = ReadableSink(out, prefix="qlsched run:", clock=lambda: now[0])
    lost = Diagnostic(code="round_failed", exception="FileNotFoundError")
    for _ in range(50):
        sink.emit(lost)
        now[0] += 0.2
    sink.emit(Diagnostic(code="admit_failed", project_id="p", trigger_id="t", sqlstate="40001"))
    now[0] += FOLD_S
    sink.emit(lost)
    sink.emit(lost)
    sink.close()
    lines = out.getvalue().splitlines()
    assert [line.split(" ", 3)[3] for line in lines] == [
        "error round_failed (FileNotFoundError)",
        "… 49 more like it in the last 10 s",
        "error admit_failed p/t (SQLSTATE 40001)",
        "error round_failed (FileNotFoundError)",
        "… 1 more like it in the last 0 s",
    ]
    assert all(line.startswith("qlsched run: ") for line in lines)
    assert sink.emitted == 3


def test_a_library_record_names_its_logger() -> None:
    """Rule: a library's record shows its logger and level, never text."""
    out = io.StringIO()
    ReadableSink(out, prefix="p:").emit(
        Diagnostic(code="library_log", logger="asyncpg.pool", level="warning", exception="OSError")
    )
    assert out.getvalue().split(" ", 2)[2] == "warning library_log logger=asyncpg.pool (OSError)\n"
