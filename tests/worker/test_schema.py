"""Migration 0010 (the worker's role, grants and columns): readiness checks the worker's
grants exactly, a database that already has Runs upgrades in place, and the worker role can
do nothing outside its part (docs/contract.md §4, §13)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

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
from tests.worker.support import admitted, claim, events, worker_db


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
            runs = await admitted(env, 2)
            monkeypatch.undo()
            upgrade = await trio.to_thread.run_sync(sql_run, su, migrate)
            assert upgrade.applied == [m.name for m in load_migrations() if m.version > before]
            assert "0010_worker.sql" in upgrade.applied
            report = await trio.to_thread.run_sync(readiness, db.runtime_dsn)
            assert report.ready, report.findings
            assert await env.runtime(recovery_candidates) == []
            async with worker_db(env) as wdb:
                claimed = await claim(wdb)
                assert {c.run_id for c in claimed} == {str(r.run_id) for r in runs}
                for c in claimed:
                    await worker.finish(
                        wdb,
                        attempt_id=c.attempt_id,
                        lease_token=c.lease_token,
                        result=JobResult(end="succeeded", code="succeeded", exit_code=0),
                    )
            for c in claimed:
                assert (await events(env, c.run_id))[-1] == "run.succeeded"
