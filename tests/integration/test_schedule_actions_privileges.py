"""The audit of control actions (docs/contract.md §4, §10) under the roles' exact grants.

``qlsched.schedule_actions`` is append-only: the admin inserts (the database writes who and
when), nobody updates, deletes or truncates it; the runtime and the observer read it. The
refusals insist on SQLSTATE 42501, so a row that merely fails a check cannot pass for a
refusal; the control test grants UPDATE on purpose and shows the same statement then gets
through and readiness names the extra grant.
"""

from __future__ import annotations

import pytest

from tests.integration.schema_support import (
    assert_allowed,
    assert_refused,
    execute,
    fetch,
    readiness,
    seed_trigger,
)
from tests.support.pg import TestDatabase

INSERT_ACTION = (
    "INSERT INTO qlsched.schedule_actions (project_id, trigger_id, trigger_revision, kind,"
    " note, actor_label) VALUES ('p', 'g', 1, 'pause', 'maintenance', 'alice')"
)


def test_admin_appends_actions_and_the_database_says_who_and_when(pg_db: TestDatabase) -> None:
    """Rule: the admin role inserts an action; `actor` is its login role and `at_ms` the
    database's clock, filled in by the database, and the admin may not write either."""
    seed_trigger(pg_db.admin_dsn)
    before = fetch(
        pg_db.superuser_dsn, "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
    )
    execute(pg_db.admin_dsn, INSERT_ACTION)
    [row] = fetch(
        pg_db.admin_dsn,
        "SELECT action_id, kind, note, actor, actor_label, at_ms FROM qlsched.schedule_actions",
    )
    assert (row["kind"], row["note"], row["actor"], row["actor_label"]) == (
        "pause",
        "maintenance",
        "qlsched_admin",
        "alice",
    )
    assert row["at_ms"] >= before[0][0]
    assert_refused(
        pg_db.admin_dsn,
        "INSERT INTO qlsched.schedule_actions (project_id, trigger_id, trigger_revision, kind,"
        " actor) VALUES ('p', 'g', 1, 'pause', 'someone_else')",
    )
    assert_refused(
        pg_db.admin_dsn,
        "INSERT INTO qlsched.schedule_actions (project_id, trigger_id, trigger_revision, kind,"
        " at_ms) VALUES ('p', 'g', 1, 'pause', 0)",
    )


@pytest.mark.parametrize(
    "sql",
    [
        pytest.param("UPDATE qlsched.schedule_actions SET note = 'rewritten'", id="update"),
        pytest.param("UPDATE qlsched.schedule_actions SET at_ms = 0", id="update-time"),
        pytest.param("DELETE FROM qlsched.schedule_actions", id="delete"),
        pytest.param("TRUNCATE qlsched.schedule_actions", id="truncate"),
        pytest.param("DELETE FROM qlsched.schedule_action_totals", id="delete-totals"),
    ],
)
@pytest.mark.parametrize("role", ["qlsched_admin", "qlsched_runtime", "qlsched_observer"])
def test_nobody_rewrites_the_audit(pg_db: TestDatabase, role: str, sql: str) -> None:
    """Rule: schedule_actions is append-only: UPDATE, DELETE and TRUNCATE are refused
    (42501) for every qlsched role, the admin included, with a row present to rewrite."""
    seed_trigger(pg_db.admin_dsn)
    execute(pg_db.admin_dsn, INSERT_ACTION)
    assert_refused(pg_db.dsn(role), sql)


@pytest.mark.parametrize("role", ["qlsched_runtime", "qlsched_observer"])
def test_runtime_and_observer_read_the_audit_and_write_nothing(
    pg_db: TestDatabase, role: str
) -> None:
    """Rule: the runtime (for /v1/schedules and metrics) and the observer (status) read the
    actions and their totals, and may not insert either."""
    seed_trigger(pg_db.admin_dsn)
    assert_allowed(pg_db.dsn(role), "SELECT * FROM qlsched.schedule_actions")
    assert_allowed(pg_db.dsn(role), "SELECT * FROM qlsched.schedule_action_totals")
    assert_refused(pg_db.dsn(role), INSERT_ACTION)
    assert_refused(
        pg_db.dsn(role),
        "INSERT INTO qlsched.schedule_action_totals VALUES ('pause', 1, 0)",
    )


def test_a_granted_update_is_usable_and_readiness_refuses_it(pg_db: TestDatabase) -> None:
    """Rule (control): with UPDATE granted the admin could rewrite the audit, and readiness
    names that grant as extra, so the refusal above is the grants' doing."""
    seed_trigger(pg_db.admin_dsn)
    execute(pg_db.admin_dsn, INSERT_ACTION)
    assert readiness(pg_db.runtime_dsn).ready
    execute(pg_db.superuser_dsn, "GRANT UPDATE ON qlsched.schedule_actions TO qlsched_admin")
    assert_allowed(pg_db.admin_dsn, "UPDATE qlsched.schedule_actions SET note = 'rewritten'")
    report = readiness(pg_db.runtime_dsn)
    assert not report.ready
    assert "extra grant: UPDATE on table schedule_actions to qlsched_admin" in report.findings


@pytest.mark.parametrize(
    ("tamper", "finding"),
    [
        pytest.param(
            "REVOKE SELECT ON qlsched.schedule_actions FROM qlsched_observer",
            "missing grant: SELECT on table schedule_actions to qlsched_observer",
            id="observer-select-revoked",
        ),
        pytest.param(
            "GRANT INSERT (actor) ON qlsched.schedule_actions TO qlsched_admin",
            "extra grant: INSERT on column schedule_actions(actor) to qlsched_admin",
            id="admin-may-forge-actor",
        ),
        pytest.param(
            "GRANT DELETE ON qlsched.schedule_actions TO qlsched_admin",
            "extra grant: DELETE on table schedule_actions to qlsched_admin",
            id="admin-delete",
        ),
        pytest.param(
            "ALTER TABLE qlsched.trigger_schedules DROP CONSTRAINT"
            " trigger_schedules_paused_inactive",
            "constraint trigger_schedules.trigger_schedules_paused_inactive is missing",
            id="paused-inactive-check-dropped",
        ),
    ],
)
def test_tampered_control_grants_are_not_ready(
    pg_db: TestDatabase, tamper: str, finding: str
) -> None:
    """Rule: readiness covers the new objects by their migration: a missing or extra grant
    on the audit, or the dropped paused-is-inactive check, is a finding naming it."""
    assert readiness(pg_db.runtime_dsn).ready
    execute(pg_db.superuser_dsn, tamper)
    report = readiness(pg_db.runtime_dsn)
    assert not report.ready
    assert any(f.startswith(finding) for f in report.findings), report.findings
