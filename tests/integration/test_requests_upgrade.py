"""Upgrading to requests (migration 0007): a database at migration 0001 with a trigger in
use takes every newer migration in place, is ready, and serves a trigger-now request
recorded right after (its Run admitted by a replica's requests pass, under the manual key).

The old installation is a copy of the shipped schema directory holding only
``bootstrap.sql`` and 0001, which the runner is patched to read; the upgrade then runs
with the shipped files.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import qlsched.postgres.migrate as migrate_module
from qlsched import admin
from qlsched.admin import ProjectEntry, Recorded, TaskEntry, TriggerEntry
from qlsched.cluster.metrics import Metrics
from qlsched.cluster.requests import RequestsPass
from qlsched.core.config import Config
from qlsched.core.keys import manual_key
from qlsched.postgres.migrate import MigrateReport, load_migrations, migrate
from qlsched.postgres.pool import open_database
from qlsched.postgres.requests import PostgresRequestStore
from qlsched.postgres.store import ADMIT_SETTINGS, CLAIM_SETTINGS
from tests.integration.schema_support import (
    empty_database,
    execute,
    fetch,
    readiness,
    schema_ending_at,
    seed_trigger,
)
from tests.support.memory_sink import MemorySink
from tests.support.pg import PgCluster, sql_run

OLD_LAST = 1


@pytest.fixture
def old_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """While active, the runner reads a schema directory that ends at migration 0001, and
    writes no catalog reference (the table for it comes with 0003; a 0001-era runner had
    none)."""
    schema_ending_at(OLD_LAST, tmp_path / "postgres", monkeypatch)

    async def no_reference(*args: object) -> None:
        return None

    monkeypatch.setattr(migrate_module, "record_reference", no_reference)
    yield
    monkeypatch.undo()


def run_migrate(dsn: str) -> MigrateReport:
    return sql_run(dsn, migrate)


async def _one_pass(runtime_dsn: str) -> int:
    async with (
        open_database(runtime_dsn, max_size=1, settings=CLAIM_SETTINGS) as claim_db,
        open_database(
            runtime_dsn, isolation="serializable", max_size=1, settings=ADMIT_SETTINGS
        ) as admit_db,
    ):
        rp = RequestsPass(
            PostgresRequestStore(claim_db, admit_db),
            Config(owner="r1"),
            MemorySink(),
            Metrics(),
            budget=16,
            poll_s=0.0,
        )
        return (await rp.run()).admitted


async def test_a_database_at_0001_upgrades_and_serves_requests(
    pg_cluster: PgCluster, old_schema: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule: migrating a used 0001 database applies every newer migration (0007 among
    them), readiness is ready, the trigger's schedule row is untouched, and a trigger-now
    request for a trigger published afterwards is admitted once under its manual key."""
    with empty_database(pg_cluster, "qlrq") as name:
        su = pg_cluster.dsn(name)
        first = run_migrate(su)
        assert first.applied == [m.name for m in load_migrations() if m.version <= OLD_LAST]
        seed_trigger(pg_cluster.dsn(name, "qlsched_admin"))
        execute(su, "UPDATE qlsched.trigger_schedules SET next_fire_at_ms = 4102444800000")
        [before] = fetch(su, "SELECT * FROM qlsched.trigger_schedules")

        monkeypatch.undo()  # the shipped files from here on
        upgrade = run_migrate(su)
        assert upgrade.applied == [m.name for m in load_migrations() if m.version > OLD_LAST]
        assert "0007_control_requests.sql" in upgrade.applied
        report = readiness(pg_cluster.dsn(name, "qlsched_runtime"))
        assert report.ready, report.findings
        [after] = fetch(su, "SELECT * FROM qlsched.trigger_schedules")
        assert {k: after[k] for k in dict(before)} == dict(before)

        admin_dsn = pg_cluster.dsn(name, "qlsched_admin")
        await admin.publish(
            admin_dsn,
            projects=[ProjectEntry(id="q")],
            tasks=[TaskEntry(project="q", id="t", command="true")],
            triggers=[TriggerEntry(project="q", id="qx", task="t", cron="0 0 1 1 *")],
        )
        recorded = await admin.trigger_now(admin_dsn, "q/qx")
        assert isinstance(recorded, Recorded)
        assert await _one_pass(pg_cluster.dsn(name, "qlsched_runtime")) == 1
        keys = [r[0] for r in fetch(su, "SELECT idempotency_key FROM qlsched.runs")]
        assert keys == [manual_key("qx", recorded.trigger_revision, recorded.request_id)]
