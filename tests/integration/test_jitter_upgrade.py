"""Upgrading to jitter (migration 0008): a database at migration 0007 with published,
scheduled triggers takes 0008 in place, is ready afterwards, and every trigger keeps its
revision, digest and cursor, with no jitter and a due time equal to its cursor; the same
file published again changes nothing, and the rows are claimed as before.

The old installation is simulated by a copy of the shipped schema directory ending at 0007
(the runner is patched to read it); its rows are written as that version's publish wrote
them, digests computed by the core (a default jitter adds nothing to them).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from qlsched import admin
from qlsched.core.specs import (
    ProjectEntry,
    PublishFile,
    TaskEntry,
    TriggerEntry,
    execution_payload,
    sha256_hex,
)
from qlsched.postgres.migrate import MigrateReport, load_migrations, migrate
from tests.integration.adapter_support import trigger
from tests.integration.schema_support import (
    empty_database,
    execute,
    execute_with,
    fetch,
    readiness,
    schema_ending_at,
)
from tests.support.pg import PgCluster, sql_run

OLD_LAST = 7
CURSOR_MS = 4_102_444_800_000  # 2100-01-01
TASK = TaskEntry(project="p", id="task", command="true")
FILE = PublishFile(
    projects=[ProjectEntry(id="p")],
    tasks=[TASK],
    triggers=[
        trigger("p", "g"),
        trigger("p", "h", cron="0 3 * * *", timezone="America/New_York", dst_fold="both"),
    ],
)


@pytest.fixture
def old_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """While active, the runner reads a schema directory that ends at migration 0007."""
    schema_ending_at(OLD_LAST, tmp_path / "postgres", monkeypatch)
    yield
    monkeypatch.undo()


def run_migrate(dsn: str) -> MigrateReport:
    return sql_run(dsn, migrate)


def digest_0007(t: TriggerEntry, task_digest: str) -> str:
    """The trigger digest as migration 0007's publish computed it (before jitter existed):
    written out here, so a change of the core's digest rule cannot hide from this test."""
    fields: dict[str, object] = {
        "cron": t.cron,
        "enabled": t.enabled,
        "kind": "cron",
        "misfire": t.misfire,
        "misfire_grace_ms": t.misfire_grace_ms,
        "task": t.task,
        "task_digest": task_digest,
        "timezone": t.timezone,
    }
    if t.dst_gap != "shift":
        fields["dst_gap"] = t.dst_gap
    if t.dst_fold != "first":
        fields["dst_fold"] = t.dst_fold
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def seed_published(admin_dsn: str) -> None:
    """``FILE`` as migration 0007's publish stored it: revision 1 of each, digests of the
    content (no jitter field existed), schedule rows active with a cursor."""
    payload = execution_payload("p", TASK)
    task_digest = sha256_hex(payload)
    execution = "00000000-0000-4000-8000-000000000001"
    execute(
        admin_dsn,
        "INSERT INTO qlsched.projects (project_id, created_at_ms, updated_at_ms)"
        " VALUES ('p', 0, 0)",
    )
    execute_with(
        admin_dsn,
        "INSERT INTO qlsched.tasks (project_id, task_id, revision, content_digest, command,"
        " created_at_ms, updated_at_ms) VALUES ('p', 'task', 1, $1, 'true', 0, 0)",
        task_digest,
    )
    execute_with(
        admin_dsn,
        "INSERT INTO qlsched.execution_revisions (execution_revision_id, project_id, task_id,"
        " task_revision, executor_kind, payload, digest, created_at_ms)"
        " VALUES ($1::uuid, 'p', 'task', 1, 'remote_worker', $2, $3, 0)",
        execution,
        payload,
        task_digest,
    )
    for t in FILE.triggers:
        execute_with(
            admin_dsn,
            "INSERT INTO qlsched.triggers (project_id, trigger_id, revision, cron, timezone,"
            " task_id, task_revision, execution_revision_id, content_digest, created_at_ms,"
            " updated_at_ms, dst_fold) VALUES ('p', $1, 1, $2, $3, 'task', 1, $4::uuid, $5,"
            " 0, 0, $6)",
            t.id,
            t.cron,
            t.timezone,
            execution,
            digest_0007(t, task_digest),
            t.dst_fold,
        )
        execute_with(
            admin_dsn,
            "INSERT INTO qlsched.trigger_schedules (project_id, trigger_id, trigger_revision,"
            " active, updated_at_ms, next_fire_at_ms) VALUES ('p', $1, 1, true, 0, $2)",
            t.id,
            CURSOR_MS,
        )


def test_a_database_at_0007_upgrades_keeping_revisions_and_cursors(
    pg_cluster: PgCluster, old_schema: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule: migrating a used 0007 database applies 0008 only; readiness is ready; each
    schedule row keeps revision, cursor and versions, with ``jitter_ms`` 0 and
    ``due_at_ms`` equal to the cursor; publishing the same file again is unchanged (no
    re-revision), and the rows are claimable by their cursor as before."""
    with empty_database(pg_cluster, "qljit") as name:
        su = pg_cluster.dsn(name)
        assert run_migrate(su).applied[-1].startswith(f"{OLD_LAST:04d}_")
        admin_dsn = pg_cluster.dsn(name, "qlsched_admin")
        seed_published(admin_dsn)
        before = {
            r["trigger_id"]: dict(r) for r in fetch(su, "SELECT * FROM qlsched.trigger_schedules")
        }

        monkeypatch.undo()  # the shipped files from here on
        upgrade = run_migrate(su)

        assert upgrade.applied == [m.name for m in load_migrations() if m.version > OLD_LAST]
        assert upgrade.applied[0] == "0008_jitter.sql"
        report = readiness(pg_cluster.dsn(name, "qlsched_runtime"))
        assert report.ready, report.findings
        after = {
            r["trigger_id"]: dict(r) for r in fetch(su, "SELECT * FROM qlsched.trigger_schedules")
        }
        for trigger_id, old in before.items():
            row = after[trigger_id]
            assert {k: row[k] for k in old} == old
            assert (row["jitter_ms"], row["due_at_ms"]) == (0, CURSOR_MS)

        result = admin.sync.publish(
            admin_dsn, projects=FILE.projects, tasks=FILE.tasks, triggers=FILE.triggers
        )
        assert result.triggers == {"p/g": "unchanged", "p/h": "unchanged"}
        again = {
            r["trigger_id"]: dict(r) for r in fetch(su, "SELECT * FROM qlsched.trigger_schedules")
        }
        assert again == after
        jitters = fetch(su, "SELECT revision, jitter_ms FROM qlsched.triggers ORDER BY trigger_id")
        assert [tuple(r) for r in jitters] == [(1, 0), (1, 0)]
