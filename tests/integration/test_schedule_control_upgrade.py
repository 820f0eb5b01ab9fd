"""Upgrading to schedule control (migration 0006): a database migrated up to 0004 and in
use (a published trigger with a cursor, a claim, counters) takes the new migrations in
place, is ready afterwards, keeps every schedule row as it was (running, counters at 0),
and pause and resume work on it.

The old installation is simulated by a copy of the shipped schema directory holding only
``bootstrap.sql`` and the migrations up to 0004, which the runner is patched to read; the
upgrade then runs with the shipped files.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from qlsched import admin
from qlsched.admin import Paused, Resumed
from qlsched.postgres.migrate import MigrateReport, load_migrations, migrate
from tests.integration.schema_support import (
    empty_database,
    execute,
    fetch,
    readiness,
    schema_ending_at,
    seed_trigger,
)
from tests.support.pg import PgCluster, sql_run

OLD_LAST = 4
"""The last migration of the installation being upgraded."""


@pytest.fixture
def old_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """While active, the runner reads a schema directory that ends at migration 0004."""
    schema_ending_at(OLD_LAST, tmp_path / "postgres", monkeypatch)
    yield
    monkeypatch.undo()


def run_migrate(dsn: str) -> MigrateReport:
    return sql_run(dsn, migrate)


def test_a_database_at_0004_upgrades_in_place(
    pg_cluster: PgCluster, old_schema: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule: migrating a used 0004 database applies the newer migrations only, readiness
    is ready again, existing schedule rows keep cursor, claim and counters, are running
    (not paused, paused_total 0, still active), and can be paused and resumed."""
    with empty_database(pg_cluster, "qlup") as name:
        su = pg_cluster.dsn(name)
        first = run_migrate(su)
        assert first.applied[-1].startswith(f"{OLD_LAST:04d}_")
        seed_trigger(pg_cluster.dsn(name, "qlsched_admin"))
        execute(
            su,
            "UPDATE qlsched.trigger_schedules SET next_fire_at_ms = 4102444800000,"
            " claim_owner = 'r1', claim_token = gen_random_uuid(), claim_version = 7,"
            " claim_expires_at_ms = 4102444800000, skipped_total = 3, coalesced_total = 2",
        )
        [before] = fetch(su, "SELECT * FROM qlsched.trigger_schedules")

        monkeypatch.undo()  # the shipped files from here on
        upgrade = run_migrate(su)

        newer = [m.name for m in load_migrations() if m.version > OLD_LAST]
        assert upgrade.applied == newer
        assert "0006_schedule_control.sql" in newer
        report = readiness(pg_cluster.dsn(name, "qlsched_runtime"))
        assert report.ready, report.findings
        [after] = fetch(su, "SELECT * FROM qlsched.trigger_schedules")
        assert {k: after[k] for k in dict(before)} == dict(before)
        assert (after["paused_at_ms"], after["pause_note"], after["paused_total"]) == (
            None,
            None,
            0,
        )

        admin_dsn = pg_cluster.dsn(name, "qlsched_admin")
        assert isinstance(admin.sync.pause(admin_dsn, "p/g", note="after upgrade"), Paused)
        assert isinstance(admin.sync.resume(admin_dsn, "p/g"), Resumed)
