"""Free text in plain-text output: a note, an actor or an owner name someone else wrote is
shown escaped (``\\x1b``, ``\\x0a``), never as the control sequences or the line breaks it
holds, in ``pause``'s own echo, ``status``, ``check`` and ``edge status`` (README
"Command line"; ``--json`` is JSON-escaped already)."""

from __future__ import annotations

import io

import msgspec
import pytest

from qlsched.commands.edge.status import render as render_edge
from qlsched.commands.status import render
from qlsched.core.shown import shown
from qlsched.core.store import ScheduleRow, ScheduleView
from qlsched.postgres.status import StatusReport
from qlsched.sqlite.status import EdgeStatus, RecentRun
from tests.integration.cluster_support import PROJECT, publish_triggers, trigger
from tests.integration.schema_support import run_cli
from tests.support.pg import TestDatabase

CLEAR = "\x1b[2J\x1b[H"
TITLE = "\x1b]0;owned\x07"
FORGED = f"\n{PROJECT}/t paused since 1999"
HOSTILE = f"{CLEAR}{TITLE}bye{FORGED}"


def _assert_inert(text: str) -> None:
    assert "\x1b" not in text, repr(text)
    assert "\x07" not in text, repr(text)
    assert not any(line.startswith(f"{PROJECT}/t paused since 1999") for line in text.splitlines())


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_shown_escapes_controls_and_the_backslash() -> None:
    """Rule: ``shown`` leaves printable text alone and escapes every control character,
    a lone surrogate and the backslash, so the escaped form cannot be forged either."""
    assert shown("vendor outage é") == "vendor outage é"
    assert shown("a\x1bb\nc\ud800\\x1b") == "a\\x1bb\\x0ac\\ud800\\\\x1b"
    assert shown(None) == "-"


async def test_pause_note_and_actor_reach_no_terminal_raw(pg_db: TestDatabase) -> None:
    """Rule: a note and an actor holding ESC sequences, a BEL and a newline are shown
    escaped by ``pause``'s echo, ``pause`` of a paused trigger, ``trigger``'s request line
    and ``status`` (one line each, no ESC, no forged line), and kept as given in the
    database (``--json`` returns them unchanged)."""
    await publish_triggers(pg_db, [trigger("t")])
    ref, dsn = f"{PROJECT}/t", ("--dsn", pg_db.admin_dsn)
    first = run_cli(["pause", ref, "--note", HOSTILE, "--actor", HOSTILE, *dsn])
    again = run_cli(["pause", ref, *dsn])
    asked = run_cli(["trigger", ref, "--note", HOSTILE, "--actor", HOSTILE, *dsn])
    for result in (first, again, asked):
        assert result.returncode == 0, result.stderr
        _assert_inert(result.stdout)
        assert len(result.stdout.splitlines()) == 1
    assert "\\x1b[2J\\x1b[H\\x1b]0;owned\\x07bye\\x0a" in first.stdout
    status = run_cli(["status", "--dsn", pg_db.observer_dsn])
    assert status.returncode == 0, status.stderr
    _assert_inert(status.stdout)
    assert status.stdout.count("bye\\x0a") >= 3  # the pause note, the actor, the request
    raw = run_cli(["status", "--json", "--dsn", pg_db.observer_dsn])
    doc = msgspec.json.decode(raw.stdout)
    assert doc["schedules"][0]["pause_note"] == HOSTILE


def test_an_owner_name_is_neither_markup_nor_a_sequence_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rule: on a terminal (rich's styled table) a claim owner or run owner such as
    ``[/bold]`` or an ESC sequence is printed as text: no markup error, no sequence of
    its own; ``edge status`` does the same for its run owners."""
    monkeypatch.setenv("COLUMNS", "250")  # a wide terminal: no cell folds
    owner = "[/bold][red]x" + CLEAR
    row = ScheduleRow(
        project_id="p",
        trigger_id="t",
        trigger_revision=1,
        active=True,
        cron="0 3 * * *",
        timezone="UTC",
        next_fire_at_ms=1_800_000_000_000,
        last_scheduled_at_ms=None,
        claim_owner=owner,
        claim_expires_at_ms=1_800_000_000_000,
        skipped_total=0,
        coalesced_total=0,
    )
    out = _Terminal()
    render(
        StatusReport(now_ms=1_799_999_000_000, due_backlog=0, schedules=[row], recent_runs=[]), out
    )
    assert "[/bold][red]x" in out.getvalue()
    assert CLEAR not in out.getvalue()
    fields = {f: getattr(row, f) for f in ScheduleView.__struct_fields__ if hasattr(row, f)}
    view = ScheduleView(**(fields | {"now_ms": 1}))
    edge = EdgeStatus(
        path="/x.sqlite3",
        now_ms=1,
        scheduler_pid=None,
        due_backlog=0,
        runs_total=1,
        schedules=[view],
        recent_runs=[RecentRun("p", "t", 1, "queued", 2, owner + FORGED)],
    )
    text = io.StringIO()
    render_edge(edge, text)
    _assert_inert(text.getvalue())
