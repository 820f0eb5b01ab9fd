"""Settings that void a promise (docs/operations.md "Settings readiness refuses"): with every
object and grant as the migrations define them, a superuser's setting on the database or the
runtime role can still break what the README promises. Readiness names each, so ``check``
says not ready and ``run`` does not start; resetting it makes the database ready again. And
the bootstrap's hardening: PUBLIC may not use large objects, the observer's statements end."""

from __future__ import annotations

import asyncpg
import pytest

from tests.integration.schema_support import execute, fetchval, readiness, refusal, run_cli
from tests.support.pg import TestDatabase

DB = "{db}"
CASES = [
    pytest.param(
        f'ALTER DATABASE "{DB}" SET synchronous_commit = off',
        f'ALTER DATABASE "{DB}" RESET synchronous_commit',
        f"synchronous_commit=off for database {DB}: an admit is acknowledged before",
        id="synchronous-commit-database",
    ),
    pytest.param(
        f'ALTER ROLE qlsched_runtime IN DATABASE "{DB}" SET synchronous_commit = local',
        f'ALTER ROLE qlsched_runtime IN DATABASE "{DB}" RESET synchronous_commit',
        f"synchronous_commit=local for role qlsched_runtime in database {DB}: an admit",
        id="synchronous-commit-role",
    ),
    pytest.param(
        f'ALTER ROLE qlsched_runtime IN DATABASE "{DB}" SET session_replication_role = replica',
        f'ALTER ROLE qlsched_runtime IN DATABASE "{DB}" RESET session_replication_role',
        f"session_replication_role=replica for role qlsched_runtime in database {DB}: foreign"
        " keys and triggers do not fire",
        id="session-replication-role",
    ),
    pytest.param(
        f'ALTER ROLE qlsched_runtime IN DATABASE "{DB}" SET search_path = public, pg_catalog',
        f'ALTER ROLE qlsched_runtime IN DATABASE "{DB}" RESET search_path',
        f"search_path=public, pg_catalog for role qlsched_runtime in database {DB}: runtime"
        " sessions must use pg_catalog, pg_temp",
        id="search-path",
    ),
    pytest.param(
        f'ALTER DATABASE "{DB}" SET default_transaction_read_only = true',
        f'ALTER DATABASE "{DB}" RESET default_transaction_read_only',
        f"default_transaction_read_only=true for database {DB}: every admit would fail",
        id="read-only",
    ),
    pytest.param(
        "CREATE PUBLICATION leak FOR TABLE qlsched.attempts",
        "DROP PUBLICATION leak",
        "publication leak streams qlsched.attempts: their rows leave the grants",
        id="publication",
    ),
    pytest.param(
        "GRANT EXECUTE ON FUNCTION pg_catalog.lo_from_bytea(oid, bytea) TO PUBLIC",
        "REVOKE EXECUTE ON FUNCTION pg_catalog.lo_from_bytea(oid, bytea) FROM PUBLIC",
        "PUBLIC may execute the large-object functions (lo_from_bytea, …)",
        id="large-objects",
    ),
]


def _on_postgres(db: TestDatabase, sql: str) -> None:
    """ALTER DATABASE on another database's session (not the one it changes)."""
    execute(db.cluster.dsn("postgres") if "DATABASE" in sql else db.superuser_dsn, sql)


@pytest.mark.parametrize(("change", "restore", "finding"), CASES)
def test_a_setting_that_voids_a_promise_is_a_finding(
    pg_db: TestDatabase, change: str, restore: str, finding: str
) -> None:
    """Rule: the setting makes readiness not ready with exactly one finding that names the
    setting and where it is set; reset, the database is ready again."""
    _on_postgres(pg_db, change.replace(DB, pg_db.name))
    try:
        report = readiness(pg_db.runtime_dsn)
        assert len(report.findings) == 1, report.findings
        assert report.findings[0].startswith(finding.replace(DB, pg_db.name)), report.findings
    finally:
        _on_postgres(pg_db, restore.replace(DB, pg_db.name))
    assert readiness(pg_db.runtime_dsn).ready


def test_check_names_it_and_run_does_not_start(pg_db: TestDatabase) -> None:
    """Rule: ``check`` prints the finding and exits 1; ``run`` refuses to start (exit 1),
    naming it, while ``synchronous_commit=off`` is set on the database."""
    _on_postgres(pg_db, f'ALTER DATABASE "{pg_db.name}" SET synchronous_commit = off')
    try:
        check = run_cli(["check", "--dsn", pg_db.superuser_dsn])
        run = run_cli(["run", "--dsn", pg_db.runtime_dsn, "--summary", "0"], timeout=60)
    finally:
        _on_postgres(pg_db, f'ALTER DATABASE "{pg_db.name}" RESET synchronous_commit')
    assert check.returncode == 1, check.stdout
    assert f"not ready: synchronous_commit=off for database {pg_db.name}" in check.stdout
    assert run.returncode == 1, run.stderr
    assert "synchronous_commit=off" in run.stderr


def test_public_may_not_store_large_objects(pg_db: TestDatabase) -> None:
    """Rule: the observer (any role but a superuser) cannot create a large object in the
    qlsched database: ``lo_from_bytea`` is refused (SQLSTATE 42501)."""
    refused = refusal(pg_db.observer_dsn, "SELECT pg_catalog.lo_from_bytea(0, 'x'::bytea)")
    assert isinstance(refused, asyncpg.InsufficientPrivilegeError), refused


def test_the_observer_has_a_statement_timeout(pg_db: TestDatabase) -> None:
    """Rule: an observer session starts with the bootstrap's 30 s statement_timeout."""
    assert fetchval(pg_db.observer_dsn, "SHOW statement_timeout") == "30s"
