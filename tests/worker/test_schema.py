"""Migration 0010 (the worker's role, grants and columns): readiness checks the worker's
grants exactly, a database that already has Runs upgrades in place, and the worker role can
do nothing outside its part (docs/contract.md §4, §13)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from qlsched.core.specs import TaskEntry, execution_payload, sha256_hex
from qlsched.core.work import JobResult
from qlsched.postgres import worker
from qlsched.postgres.migrate import load_migrations, migrate
from qlsched.postgres.recovery import recovery_candidates
from tests.integration.adapter_support import open_env
from tests.integration.schema_support import (
    assert_refused,
    empty_database,
    readiness,
    role_changed,
    schema_ending_at,
)
from tests.support.pg import PgCluster, TestDatabase, sql_run
from tests.worker.support import claim, events, worker_db

_OLD_RUNS = """
WITH p AS (INSERT INTO qlsched.projects (project_id, created_at_ms, updated_at_ms)
           VALUES ('p', 1, 1)),
     k AS (INSERT INTO qlsched.tasks (project_id, task_id, revision, content_digest, command,
                                      created_at_ms, updated_at_ms)
           VALUES ('p', 'job', 1, $2, 'true', 1, 1)),
     e AS (INSERT INTO qlsched.execution_revisions (execution_revision_id, project_id, task_id,
                                                    task_revision, executor_kind, payload,
                                                    digest, created_at_ms)
           VALUES ('00000000-0000-4000-8000-000000000001', 'p', 'job', 1, 'remote_worker',
                   $1, $2, 1)),
     t AS (INSERT INTO qlsched.triggers (project_id, trigger_id, revision, cron, task_id,
                                         task_revision, execution_revision_id, content_digest,
                                         created_at_ms, updated_at_ms)
           VALUES ('p', 't', 1, '* * * * *', 'job', 1,
                   '00000000-0000-4000-8000-000000000001', $2, 1, 1)),
     r AS (INSERT INTO qlsched.runs (run_id, project_id, trigger_id, trigger_revision, task_id,
                                     task_revision, execution_revision_id, scheduled_for_ms,
                                     idempotency_key, state, owner, queued_at_ms, created_at_ms,
                                     admitted_by_owner, admitted_claim_token,
                                     admitted_claim_version)
           SELECT gen_random_uuid(), 'p', 't', 1, 'job', 1,
                  '00000000-0000-4000-8000-000000000001', i * 60000,
                  'ql3:cron:v1:t:1:' || (i * 60000), 'queued', 'runtime', 1, 1, 'r1',
                  gen_random_uuid(), 1
             FROM generate_series(1, 2) AS i
           RETURNING run_id),
     a AS (INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind, state,
                                         created_at_ms)
           SELECT gen_random_uuid(), r.run_id, 1, 'remote_worker', 'claimed', 1 FROM r),
     v AS (INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)
           SELECT gen_random_uuid(), r.run_id, n, ty, 1, 'r1'
             FROM r, (VALUES (1, 'run.created'), (2, 'run.queued')) AS x(n, ty))
SELECT run_id::text FROM r
"""
"""Two queued Runs with pristine Attempts and their two events, as a scheduler before
0010 wrote them (written directly: this version's publish and admit need later columns)."""


def test_readiness_is_ready_as_the_worker_and_refuses_an_extra_grant(pg_db: TestDatabase) -> None:
    """Rule: readiness holds the worker's grants exactly: ready as the worker itself; one
    extra grant (the payload column, the dispatcher example's old advice) is a finding."""
    report = readiness(pg_db.worker_dsn)
    assert report.ready, report.findings
    with role_changed(
        pg_db.superuser_dsn,
        "GRANT SELECT (payload) ON qlsched.execution_revisions TO qlsched_worker",
        "REVOKE SELECT (payload) ON qlsched.execution_revisions FROM qlsched_worker",
    ):
        findings = readiness(pg_db.runtime_dsn).findings
        assert any("qlsched_worker" in f and "payload" in f for f in findings), findings
    assert readiness(pg_db.runtime_dsn).ready


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT payload FROM qlsched.execution_revisions",
        "SELECT command FROM qlsched.tasks",
        "SELECT admitted_claim_token FROM qlsched.runs",
        "SELECT callback_token FROM qlsched.attempts",
        "UPDATE qlsched.trigger_schedules SET next_fire_at_ms = 0",
        "UPDATE qlsched.runs SET idempotency_key = 'x'",
        "UPDATE qlsched.attempts SET callback_token = 'x'",
        "INSERT INTO qlsched.runs (run_id) VALUES (gen_random_uuid())",
        "DELETE FROM qlsched.attempts",
        "UPDATE qlsched.control_requests SET state = 'done'",
    ],
)
def test_the_worker_cannot_leave_its_part(pg_db: TestDatabase, sql: str) -> None:
    """Rule: the worker reads no secret but its claimed payload (through worker_payloads),
    and writes no schedule, trigger, request, fence or admission column."""
    assert_refused(pg_db.worker_dsn, sql)


async def test_a_database_with_runs_upgrades_and_its_runs_are_worked(
    pg_cluster: PgCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule: a database at the migration before 0010 holding queued Runs (admitted by this
    version's scheduler) takes 0010 in place: it is ready, the old Runs stay pristine for
    recovery, and a worker claims and finishes them."""
    before = max(m.version for m in load_migrations() if m.version < 10)
    schema_ending_at(before, tmp_path / "postgres", monkeypatch)
    with empty_database(pg_cluster, "qlwup") as name:
        su = pg_cluster.dsn(name)
        old = await trio.to_thread.run_sync(sql_run, su, migrate)
        assert old.applied[-1].startswith(f"{before:04d}_")
        db = TestDatabase(pg_cluster, name)
        async with open_env(db) as env:
            payload = execution_payload("p", TaskEntry(project="p", id="job", command="true"))
            runs = [r["run_id"] for r in await env.su(_OLD_RUNS, payload, sha256_hex(payload))]
            monkeypatch.undo()
            upgrade = await trio.to_thread.run_sync(sql_run, su, migrate)
            assert upgrade.applied == [m.name for m in load_migrations() if m.version > before]
            assert "0010_worker.sql" in upgrade.applied
            report = await trio.to_thread.run_sync(readiness, db.runtime_dsn)
            assert report.ready, report.findings
            assert await env.runtime(recovery_candidates) == []
            async with worker_db(env) as wdb:
                claimed = await claim(wdb)
                assert {c.run_id for c in claimed} == set(runs)
                for c in claimed:
                    await worker.finish(
                        wdb,
                        attempt_id=c.attempt_id,
                        lease_token=c.lease_token,
                        result=JobResult(end="succeeded", code="succeeded", exit_code=0),
                    )
            for c in claimed:
                assert (await events(env, c.run_id))[-1] == "run.succeeded"
