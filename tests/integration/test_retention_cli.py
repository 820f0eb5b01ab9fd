"""``qlsched retention`` as an operator runs it (subprocesses), and what the retention
refuses: a backfill reaching before its horizon (docs/contract.md §14).

``set`` prints one line and exits 0; a bad duration is one line on stderr and exit 2,
before anything connects; ``show`` and ``status`` say what is kept and what was deleted.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest

from qlsched import admin
from qlsched.core.requests import NotRecorded, Recorded
from tests.integration.cluster_support import PROJECT, publish_triggers, trigger
from tests.integration.schema_support import execute, execute_with, fetch, run_cli
from tests.support.pg import TestDatabase

DAY_MS = 86_400_000


def _retention(db: TestDatabase) -> Any:
    [row] = fetch(db.superuser_dsn, "SELECT * FROM qlsched.retention")
    return row


def test_set_show_and_off(pg_db: TestDatabase) -> None:
    """Rule: `retention set 30d` stores 30 days (by the admin, recorded with who), `show`
    gives the retention, the horizon by the database's clock and the deleted totals,
    `set off` turns it off; each prints its lines and exits 0."""
    admin_dsn = ("--dsn", pg_db.admin_dsn)
    done = run_cli(["retention", "set", "30d", "--actor", "alice", *admin_dsn])
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout.startswith("retention 30d: finished Runs that ended before ")
    row = _retention(pg_db)
    assert (row["retention_ms"], row["updated_by"]) == (30 * DAY_MS, "alice")

    shown = run_cli(["retention", "show", "--dsn", pg_db.observer_dsn])
    assert shown.returncode == 0, shown.stderr
    first, second = shown.stdout.splitlines()
    assert first.startswith("retention 30d: finished Runs that ended before ")
    assert first.endswith("(set by alice at " + first.rsplit(" at ", 1)[1])
    horizon = dt.datetime.fromisoformat(first.split("before ")[1].split(" (")[0])
    expected = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
    assert abs((horizon - expected).total_seconds()) < 120
    assert second == "deleted so far: 0 runs, 0 attempts, 0 events, 0 recovery marks"

    again = run_cli(["retention", "set", "1d12h", *admin_dsn])
    assert again.returncode == 0
    assert _retention(pg_db)["retention_ms"] == 36 * 3_600_000
    assert _retention(pg_db)["updated_by"] == "qlsched_admin"
    off = run_cli(["retention", "set", "off", *admin_dsn])
    assert (off.returncode, off.stdout) == (0, off.stdout)
    assert off.stdout.startswith("retention off: every finished Run is kept")
    assert _retention(pg_db)["retention_ms"] is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("30", "give a unit, e.g. 30d, 30h or 30m", id="bare-number"),
        pytest.param("30x", "expected a duration such as 30d", id="unknown-unit"),
        pytest.param("1.5d", "expected a duration such as 30d", id="fraction"),
        pytest.param("d30", "expected a duration such as 30d", id="unit-first"),
        pytest.param("", "expected a duration such as 30d", id="empty"),
        pytest.param("30s", "must be from 1m to 36500d", id="too-short"),
        pytest.param("36501d", "must be from 1m to 36500d", id="too-long"),
    ],
)
def test_a_bad_duration_is_one_line_and_exit_2(
    pg_db: TestDatabase, value: str, message: str
) -> None:
    """Rule: a bad duration is refused before anything connects: one line on stderr
    naming the value and what is expected, no traceback, exit 2, nothing changed."""
    result = run_cli(["retention", "set", value, "--dsn", pg_db.admin_dsn])
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"qlsched retention set: retention {value!r}: ")
    assert message in lines[0]
    assert _retention(pg_db)["retention_ms"] is None


def test_set_needs_the_admin_role(pg_db: TestDatabase) -> None:
    """Rule: `retention set` with the runtime's or the observer's DSN is refused in one
    line (the role is named), and nothing changes."""
    for dsn in (pg_db.runtime_dsn, pg_db.observer_dsn):
        result = run_cli(["retention", "set", "30d", "--dsn", dsn])
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.splitlines()) == 1
        assert "qlsched_admin" in result.stderr
    assert _retention(pg_db)["retention_ms"] is None


def test_status_shows_the_retention(pg_db: TestDatabase) -> None:
    """Rule: `status` says whether Runs are kept or until when, by the database's clock."""
    before = run_cli(["status", "--dsn", pg_db.observer_dsn])
    assert "retention off: every finished Run is kept" in before.stdout.splitlines()
    execute(pg_db.superuser_dsn, "UPDATE qlsched.retention SET retention_ms = 7 * 86400000")
    after = run_cli(["status", "--dsn", pg_db.observer_dsn])
    assert any(
        line.startswith("retention 7d: finished Runs that ended before ")
        for line in after.stdout.splitlines()
    ), after.stdout


async def test_a_backfill_before_the_horizon_is_refused_with_it(pg_db: TestDatabase) -> None:
    """Rule: a backfill whose start lies before the retention horizon is refused when it is
    requested (CLI: one line naming the horizon, exit 2; Python API: ``NotRecorded`` with
    reason ``before_retention`` and the horizon), nothing recorded; a start after the
    horizon is recorded. With retention off, any past start is recorded again, unless
    retention already deleted that trigger's Runs there."""
    await publish_triggers(pg_db, [trigger("a", cron="0 * * * *")])
    execute(pg_db.superuser_dsn, "UPDATE qlsched.retention SET retention_ms = 86400000")
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    old, recent = now - dt.timedelta(days=3), now - dt.timedelta(hours=5)
    span = ["--to", (now - dt.timedelta(hours=1)).isoformat()]
    refused = run_cli(
        ["backfill", f"{PROJECT}/a", "--from", old.isoformat(), *span, "--dsn", pg_db.admin_dsn]
    )
    assert refused.returncode == 2
    [line] = refused.stderr.splitlines()
    assert line.startswith(f"qlsched backfill: {PROJECT}/a: refused: --from is before the")
    found = re.search(r"retention horizon (\S+Z): Runs that ended before it are deleted", line)
    assert found is not None, line
    horizon = dt.datetime.fromisoformat(found.group(1))
    assert abs((horizon - (now - dt.timedelta(days=1))).total_seconds()) < 3_600

    typed = await admin.backfill(pg_db.admin_dsn, f"{PROJECT}/a", start=old, end=recent)
    kept = await admin.backfill(pg_db.admin_dsn, f"{PROJECT}/a", start=recent, end=recent)
    assert isinstance(typed, NotRecorded)
    assert typed.reason == "before_retention"
    assert typed.horizon_ms is not None
    assert abs(typed.horizon_ms - (now.timestamp() * 1000 - 86_400_000)) < 3_600_000
    assert isinstance(kept, Recorded)

    # Retention deleted a Run scheduled two days ago; off now, a backfill reaching
    # back over it is still refused (its key is free: it would run again).
    deleted_at = int((now - dt.timedelta(days=2)).timestamp() * 1000)
    execute_with(
        pg_db.superuser_dsn,
        "WITH off AS (UPDATE qlsched.retention SET retention_ms = NULL)"
        " INSERT INTO qlsched.retention_pruned VALUES ($1, 'a', 1, 1, 1, 2, 0, 1, $2)",
        PROJECT,
        deleted_at,
    )
    again = await admin.backfill(pg_db.admin_dsn, f"{PROJECT}/a", start=old, end=recent)
    after = await admin.backfill(
        pg_db.admin_dsn, f"{PROJECT}/a", start=now - dt.timedelta(days=1), end=recent
    )
    assert isinstance(again, NotRecorded)
    assert again.horizon_ms == deleted_at + 1
    assert isinstance(after, Recorded)
    requests = fetch(pg_db.superuser_dsn, "SELECT from_ms FROM qlsched.control_requests")
    assert len(requests) == 2
