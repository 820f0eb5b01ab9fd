"""``qlsched status`` as a user reads it: a subprocess with the observer DSN.

The report's clock is the database's, read even when nothing is published; ``--json``
gives that clock once, at the top level, with the rows' other keys unchanged; the table has
a zone column and, off a terminal (a pipe here), is plain text: one line per trigger and no
escape codes.
"""

from __future__ import annotations

import io
import json

import msgspec
import pytest

from qlsched.commands.status import render
from qlsched.core.jitter import jitter_offset_ms
from qlsched.core.specs import TriggerEntry
from qlsched.core.store import ScheduleRow
from qlsched.postgres.status import StatusReport
from tests.integration.cluster_support import PROJECT, open_superuser, publish_triggers
from tests.integration.schema_support import run_cli
from tests.support.pg import TestDatabase

ROW_KEYS = {
    "last_outcome",
    "last_duration_ms",
    "last_finished_at_ms",
    "project_id",
    "trigger_id",
    "trigger_revision",
    "active",
    "cron",
    "timezone",
    "next_fire_at_ms",
    "last_scheduled_at_ms",
    "claim_owner",
    "claim_expires_at_ms",
    "skipped_total",
    "coalesced_total",
    "paused_at_ms",
    "pause_note",
    "paused_total",
    "actions",
    "dst_gap",
    "dst_fold",
    "jitter_ms",
    "due_at_ms",
    "overlap_skipped_total",
    "deadline_cancelled_total",
}


def _trigger(trigger_id: str, timezone: str, dst_fold: str = "first") -> TriggerEntry:
    return TriggerEntry(
        project=PROJECT,
        id=trigger_id,
        task="task",
        cron="0 3 * * *",
        timezone=timezone,
        dst_fold=dst_fold,  # type: ignore[arg-type]
    )


async def test_an_empty_database_shows_the_database_time(pg_db: TestDatabase) -> None:
    """Rule: with no trigger published, ``status`` still shows the database's clock (not
    the epoch), in text and in JSON."""
    async with open_superuser(pg_db) as su:
        before = await su.now_ms()
        result = run_cli(["status", "--json", "--dsn", pg_db.observer_dsn])
        after = await su.now_ms()
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert before <= report["now_ms"] <= after
    assert report["schedules"] == []
    text = run_cli(["status", "--dsn", pg_db.observer_dsn])
    assert text.returncode == 0, text.stderr
    assert not text.stdout.startswith("database time 1970")
    assert "no triggers published" in text.stdout


async def test_json_gives_now_ms_once_and_keeps_the_row_keys(pg_db: TestDatabase) -> None:
    """Rule: ``status --json`` has ``now_ms`` at the top level only; each schedule row keeps
    every other key it had."""
    await publish_triggers(pg_db, [_trigger("a", "UTC"), _trigger("b", "Asia/Shanghai")])
    result = run_cli(["status", "--json", "--dsn", pg_db.observer_dsn])
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) == {
        "now_ms",
        "due_backlog",
        "due_backlog_capped",
        "due_backlog_limit",
        "schedules",
        "recent_runs",
        "refused",
        "requests",
        "failing",
        "runs_running",
        "runs_failed",
        "schedules_more",
        "retention",
        "pruned",
    }
    assert [set(row) for row in report["schedules"]] == [ROW_KEYS, ROW_KEYS]
    assert [row["timezone"] for row in report["schedules"]] == ["UTC", "Asia/Shanghai"]


async def test_the_table_has_a_zone_column_and_is_plain_off_a_terminal(
    pg_db: TestDatabase,
) -> None:
    """Rule: each trigger's IANA zone is a column; piped, the table has no escape codes and
    one line per trigger, whatever the width of its ids."""
    long_id = "a-trigger-id-long-enough-to-wrap-an-eighty-column-table"
    await publish_triggers(pg_db, [_trigger(long_id, "America/New_York")])
    result = run_cli(["status", "--dsn", pg_db.observer_dsn])
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout
    lines = result.stdout.splitlines()
    header = next(line for line in lines if line.startswith("TRIGGER"))
    assert header.split()[:3] == ["TRIGGER", "CRON", "ZONE"]
    rows = [line for line in lines if long_id in line]
    assert len(rows) == 1
    assert "America/New_York" in rows[0]


async def test_a_non_default_dst_policy_is_shown(pg_db: TestDatabase) -> None:
    """Rule: ``status`` names a trigger's DST policy beside its zone when it is not the
    default, and ``--json`` gives both fields of every row."""
    await publish_triggers(
        pg_db, [_trigger("plain", "Europe/London"), _trigger("twice", "Europe/London", "both")]
    )
    text = run_cli(["status", "--dsn", pg_db.observer_dsn])
    assert text.returncode == 0, text.stderr
    rows = {line.split()[0]: line for line in text.stdout.splitlines() if "Europe/London" in line}
    assert "Europe/London dst_fold=both" in rows[f"{PROJECT}/twice"]
    assert "dst_" not in rows[f"{PROJECT}/plain"]
    report = json.loads(run_cli(["status", "--json", "--dsn", pg_db.observer_dsn]).stdout)
    assert [(r["dst_gap"], r["dst_fold"]) for r in report["schedules"]] == [
        ("shift", "first"),
        ("shift", "both"),
    ]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _report() -> StatusReport:
    row = ScheduleRow(
        project_id="p",
        trigger_id="nightly",
        trigger_revision=1,
        active=True,
        cron="0 3 * * *",
        timezone="Asia/Shanghai",
        next_fire_at_ms=1_800_000_000_000,
        last_scheduled_at_ms=None,
        claim_owner=None,
        claim_expires_at_ms=None,
        skipped_total=2,
        coalesced_total=19,
    )
    return StatusReport(now_ms=1_799_999_000_000, due_backlog=0, schedules=[row], recent_runs=[])


def test_a_terminal_gets_styles_and_a_pipe_gets_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule: the same cells either way; a terminal gets rich's styles, a rule under the
    header and a legend for SKIP and COAL, a pipe or file none of them."""
    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal: no cell folds
    terminal, plain = _Terminal(), io.StringIO()
    render(_report(), terminal)
    render(_report(), plain)
    for out in (terminal.getvalue(), plain.getvalue()):
        assert "p/nightly" in out
        assert "Asia/Shanghai" in out
        assert "2027-01-15 08:00:00" in out
    assert "\x1b[" in terminal.getvalue()
    assert "─" in terminal.getvalue()
    assert "COAL: occurrences a late Fire passed over" in terminal.getvalue()
    assert "\x1b[" not in plain.getvalue()
    assert "─" not in plain.getvalue()
    assert "late Fire" not in plain.getvalue()


async def test_a_jittered_trigger_shows_its_due_time_and_lags_from_it(
    pg_db: TestDatabase,
) -> None:
    """Rule: ``status --json`` gives each row's ``jitter_ms`` and ``due_at_ms`` (the
    cursor plus h; the cursor without jitter), and the table shows a jittered trigger's
    due time beside its next fire time and measures the lag from the due time."""
    jittered = msgspec.structs.replace(_trigger("j", "UTC"), jitter_ms=3_000_000)
    await publish_triggers(pg_db, [jittered, _trigger("plain", "UTC")])
    cursor = 1_700_000_000_000
    async with open_superuser(pg_db) as su:
        await su.execute("UPDATE qlsched.trigger_schedules SET next_fire_at_ms = $1", cursor)
    report = json.loads(run_cli(["status", "--json", "--dsn", pg_db.observer_dsn]).stdout)
    due = cursor + jitter_offset_ms(PROJECT, "j", 1, cursor, 3_000_000)
    assert [(r["trigger_id"], r["jitter_ms"], r["due_at_ms"]) for r in report["schedules"]] == [
        ("j", 3_000_000, due),
        ("plain", 0, cursor),
    ]
    text = run_cli(["status", "--dsn", pg_db.observer_dsn]).stdout
    rows = {line.split()[0]: line for line in text.splitlines() if " UTC " in line}
    assert " due 2023-11-14 " in rows[f"{PROJECT}/j"]
    assert " due " not in rows[f"{PROJECT}/plain"]
    lag = {t: float(line.split("s ")[0].split()[-1]) for t, line in rows.items()}
    assert lag[f"{PROJECT}/plain"] - lag[f"{PROJECT}/j"] == pytest.approx(
        (due - cursor) / 1000, abs=5
    )


def test_a_capped_backlog_says_it_was_counted_up_to_its_limit() -> None:
    """Rule: ``status`` shows the bounded due backlog as ``N+ (counted up to N)`` when more
    rows are due than it counted, and as the plain count otherwise."""
    capped = msgspec.structs.replace(_report(), due_backlog=1000, due_backlog_capped=True)
    exact = msgspec.structs.replace(_report(), due_backlog=999)
    out, plain = io.StringIO(), io.StringIO()
    render(capped, out)
    render(exact, plain)
    assert "due backlog 1000+ (counted up to 1000)" in out.getvalue()
    assert "due backlog 999\n" in plain.getvalue()
