"""Schema readiness (docs/contract.md §4): ready on a freshly migrated database, and fail closed,
naming the cause in one line, on every way the database can differ from what the code
expects: an extra or missing grant, an edited or missing migration, a missing capability,
a widened role, a runtime timeout missing or not below the lease, PUBLIC CONNECT.

Readiness runs as the runtime role, as the composition root runs it. Breakage is done as the
superuser. Grants live in the test's own database and go with it; role attributes,
memberships and role-wide settings are cluster-wide, so those tests restore them in a
``finally`` (``role_changed``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import asyncpg
import pytest

from qlsched.postgres.migrate import load_migrations, migrate
from qlsched.postgres.readiness import Readiness, check_readiness
from qlsched.postgres.store import CLAIM_SETTINGS
from tests.integration.schema_support import (
    DEFAULT_LEASE_MS,
    MIGRATION,
    MIGRATIONS,
    execute,
    fetchval,
    readiness,
    role_changed,
    run_cli,
)
from tests.support.pg import TestDatabase, sql_run


@pytest.mark.parametrize("role", ["qlsched_runtime", "qlsched_observer", None])
def test_a_fresh_database_is_ready(pg_db: TestDatabase, role: str | None) -> None:
    """Rule: a database made by init-db/migrate is ready, with no finding, for each role
    that checks it (runtime at start, observer for status, the superuser for `check`)."""
    dsn = pg_db.dsn(role) if role else pg_db.superuser_dsn
    report = readiness(dsn)
    assert report.findings == []
    assert report.ready
    assert report.applied == MIGRATIONS
    assert report.server_version >= 150000


@pytest.mark.parametrize(
    ("breakage", "finding"),
    [
        pytest.param(
            "GRANT DELETE ON qlsched.runs TO qlsched_runtime",
            "extra grant: DELETE on table runs to qlsched_runtime",
            id="extra-grant",
        ),
        pytest.param(
            "GRANT SELECT ON qlsched.runs TO PUBLIC",
            "extra grant: SELECT on table runs to PUBLIC",
            id="grant-to-public",
        ),
        pytest.param(
            "GRANT UPDATE (active) ON qlsched.trigger_schedules TO qlsched_runtime",
            "extra grant: UPDATE on column trigger_schedules(active) to qlsched_runtime",
            id="extra-column-grant",
        ),
        pytest.param(
            "GRANT CREATE ON SCHEMA qlsched TO qlsched_runtime",
            "extra grant: CREATE on schema qlsched to qlsched_runtime",
            id="extra-schema-grant",
        ),
        pytest.param(
            "REVOKE SELECT ON qlsched.triggers FROM qlsched_runtime",
            "missing grant: SELECT on table triggers to qlsched_runtime",
            id="missing-grant",
        ),
        pytest.param(
            "REVOKE UPDATE (claim_token) ON qlsched.trigger_schedules FROM qlsched_runtime",
            "missing grant: UPDATE on column trigger_schedules(claim_token) to qlsched_runtime",
            id="missing-column-grant",
        ),
        pytest.param(
            "UPDATE qlsched.schema_migrations SET checksum = repeat('0', 64) WHERE version = 1",
            f"migration {MIGRATION} was edited after it was applied (checksum)",
            id="edited-migration",
        ),
        pytest.param(
            "DELETE FROM qlsched.schema_migrations WHERE version = 1",
            f"migration {MIGRATION} is not applied",
            id="missing-migration-row",
        ),
        pytest.param(
            "INSERT INTO qlsched.schema_migrations (version, name, checksum)"
            " VALUES (9999, '9999_from_the_future.sql', repeat('0', 64))",
            "applied migration 9999_from_the_future.sql is missing from this installation",
            id="unknown-migration-row",
        ),
        pytest.param(
            "DELETE FROM qlsched.capability",
            "capability qlsched.cluster_scheduler is missing",
            id="missing-capability",
        ),
        pytest.param(
            "UPDATE qlsched.capability SET version = 0",
            "capability qlsched.cluster_scheduler is version 0, need 1",
            id="old-capability",
        ),
        pytest.param(
            "ALTER TABLE qlsched.capability OWNER TO qlsched_admin",
            [
                "capability is owned by qlsched_admin, not qlsched_owner",
                "capability_pkey is owned by qlsched_admin, not qlsched_owner",
            ],
            id="table-owner",
        ),
        pytest.param(
            "ALTER DEFAULT PRIVILEGES FOR ROLE qlsched_owner GRANT EXECUTE ON FUNCTIONS TO PUBLIC",
            "default privileges do not revoke EXECUTE on functions from PUBLIC",
            id="default-privileges",
        ),
        pytest.param(
            "SET ROLE qlsched_owner; CREATE FUNCTION qlsched.probe() RETURNS int"
            " LANGUAGE sql SECURITY DEFINER AS 'SELECT 1'; RESET ROLE",
            [
                "SECURITY DEFINER function qlsched.probe() has no pinned search_path",
                "unexpected function qlsched.probe()",
            ],
            id="unpinned-security-definer",
        ),
    ],
)
def test_readiness_fails_closed_naming_the_cause(
    pg_db: TestDatabase, breakage: str, finding: str | list[str]
) -> None:
    """Rule: each departure from the migrated schema, its grants (exactly, in both
    directions), its ledger and capability, its ownership and its function hardening makes
    readiness not ready, with exactly the findings that name it (one per departure)."""
    assert readiness(pg_db.runtime_dsn).ready
    execute(pg_db.superuser_dsn, breakage)
    report = readiness(pg_db.runtime_dsn)
    assert not report.ready
    assert sorted(report.findings) == ([finding] if isinstance(finding, str) else finding)


@pytest.mark.parametrize(
    ("grant", "finding"),
    [
        pytest.param("CONNECT ON DATABASE {db} TO PUBLIC", "CONNECT on database {db} to PUBLIC"),
        pytest.param(
            "TEMPORARY ON DATABASE {db} TO PUBLIC", "TEMPORARY on database {db} to PUBLIC"
        ),
        pytest.param(
            "CONNECT ON DATABASE {db} TO qlsched_worker_ingress",
            "CONNECT on database {db} to qlsched_worker_ingress",
        ),
        pytest.param(
            "CREATE ON DATABASE {db} TO qlsched_runtime",
            "CREATE on database {db} to qlsched_runtime",
        ),
    ],
)
def test_database_level_grants_are_exact(pg_db: TestDatabase, grant: str, finding: str) -> None:
    """Rule: PUBLIC holds nothing on the database (REVOKE ALL ... FROM PUBLIC) and CONNECT
    goes only to admin, runtime and observer; any other database grant is an extra grant."""
    execute(pg_db.superuser_dsn, "GRANT " + grant.format(db=f'"{pg_db.name}"'))
    assert readiness(pg_db.runtime_dsn).findings == [
        "extra grant: " + finding.format(db=pg_db.name)
    ]


def test_a_missing_connect_grant_is_named(pg_db: TestDatabase) -> None:
    """Rule: CONNECT for each LOGIN role that needs it is part of the exact grant set."""
    execute(pg_db.superuser_dsn, f'REVOKE CONNECT ON DATABASE "{pg_db.name}" FROM qlsched_observer')
    assert readiness(pg_db.runtime_dsn).findings == [
        f"missing grant: CONNECT on database {pg_db.name} to qlsched_observer"
    ]


def test_every_finding_is_collected(pg_db: TestDatabase) -> None:
    """Rule: readiness never stops at the first finding; the operator sees them all."""
    execute(
        pg_db.superuser_dsn,
        "GRANT DELETE ON qlsched.runs TO qlsched_runtime",
        "REVOKE SELECT ON qlsched.triggers FROM qlsched_runtime",
        "DELETE FROM qlsched.capability",
    )
    assert sorted(readiness(pg_db.runtime_dsn).findings) == [
        "capability qlsched.cluster_scheduler is missing",
        "extra grant: DELETE on table runs to qlsched_runtime",
        "missing grant: SELECT on table triggers to qlsched_runtime",
    ]


# ---------------------------------------------------------------------------------------------
# Cluster-wide role changes (restored in finally: every database of the session shares them)


def test_a_role_with_createdb_is_refused(pg_db: TestDatabase) -> None:
    """Rule: no qlsched role may have CREATEDB (nor SUPERUSER, CREATEROLE, REPLICATION,
    BYPASSRLS); readiness names the role and the attribute."""
    with role_changed(
        pg_db.superuser_dsn,
        "ALTER ROLE qlsched_runtime CREATEDB",
        "ALTER ROLE qlsched_runtime NOCREATEDB",
    ):
        assert readiness(pg_db.runtime_dsn).findings == ["role qlsched_runtime has CREATEDB"]
    assert readiness(pg_db.runtime_dsn).ready


def test_membership_in_a_pg_role_is_refused(pg_db: TestDatabase) -> None:
    """Rule: no qlsched role is a member of a pg_* role: pg_read_all_data would hand the
    observer every table of every schema, around the grants readiness compares."""
    with role_changed(
        pg_db.superuser_dsn,
        "GRANT pg_read_all_data TO qlsched_observer",
        "REVOKE pg_read_all_data FROM qlsched_observer",
    ):
        assert readiness(pg_db.runtime_dsn).findings == [
            "role qlsched_observer is a member of pg_read_all_data"
        ]
    assert readiness(pg_db.runtime_dsn).ready


def _runtime_role_setting(dsn: str, name: str) -> str | None:
    """The runtime role's role-wide (all databases) value of setting ``name``."""
    value = fetchval(
        dsn,
        "SELECT split_part(c, '=', 2) FROM pg_catalog.pg_db_role_setting AS s,"
        " unnest(s.setconfig) AS c"
        " WHERE s.setrole = 'qlsched_runtime'::regrole AND s.setdatabase = 0"
        " AND split_part(c, '=', 1) = $1",
        name,
    )
    return None if value is None else str(value)


def test_a_removed_runtime_timeout_is_refused(pg_db: TestDatabase) -> None:
    """Rule: the runtime role must have idle_in_transaction_session_timeout set (a stalled
    admit cannot hold a schedule row past its lease); without it readiness says so."""
    su = pg_db.superuser_dsn
    before = _runtime_role_setting(su, "idle_in_transaction_session_timeout")
    assert before is not None
    with role_changed(
        su,
        "ALTER ROLE qlsched_runtime RESET idle_in_transaction_session_timeout",
        f"ALTER ROLE qlsched_runtime SET idle_in_transaction_session_timeout = '{before}'",
    ):
        assert readiness(pg_db.runtime_dsn).findings == [
            "qlsched_runtime has no idle_in_transaction_session_timeout set"
        ]
    assert _runtime_role_setting(su, "idle_in_transaction_session_timeout") == before
    assert readiness(pg_db.runtime_dsn).ready


def test_timeouts_at_or_above_the_lease_are_refused(pg_db: TestDatabase) -> None:
    """Rule: each runtime timeout must be strictly below lease_ms: with a 5 s lease the
    default 5 s idle and statement timeouts are refused, the 2 s lock timeout is not."""
    assert readiness(pg_db.runtime_dsn, lease_ms=5_001).ready
    report = readiness(pg_db.runtime_dsn, lease_ms=5_000)
    assert not report.ready
    assert report.findings == [
        "qlsched_runtime idle_in_transaction_session_timeout=5000ms is not below the lease"
        " (5000 ms)",
        "qlsched_runtime statement_timeout=5000ms is not below the lease (5000 ms)",
    ]


def test_a_per_database_timeout_at_the_lease_is_refused(pg_db: TestDatabase) -> None:
    """Rule: a per-database setting for the runtime role overrides its role-wide one (the
    server applies it last), so readiness must judge the per-database value: 30 s in this
    database is not below a 30 s lease. This holds also after a later migrate rewrote the
    role-wide setting (which must not hide the override)."""
    execute(
        pg_db.superuser_dsn,
        f'ALTER ROLE qlsched_runtime IN DATABASE "{pg_db.name}"'
        " SET idle_in_transaction_session_timeout = '30s'",
    )
    try:
        assert fetchval(pg_db.runtime_dsn, "SHOW idle_in_transaction_session_timeout") == "30s"
        expected = [
            "qlsched_runtime idle_in_transaction_session_timeout=30s is not below the lease"
            " (30000 ms)"
        ]
        assert readiness(pg_db.runtime_dsn).findings == expected
        # An operator re-runs migrate: the bootstrap re-asserts the role-wide 5 s.
        sql_run(pg_db.superuser_dsn, migrate)
        assert fetchval(pg_db.runtime_dsn, "SHOW idle_in_transaction_session_timeout") == "30s"
        assert readiness(pg_db.runtime_dsn).findings == expected
    finally:
        execute(
            pg_db.superuser_dsn,
            f'ALTER ROLE qlsched_runtime IN DATABASE "{pg_db.name}"'
            " RESET idle_in_transaction_session_timeout",
        )


def test_a_disabled_runtime_timeout_is_refused(pg_db: TestDatabase) -> None:
    """Rule: a timeout of 0 disables it; readiness refuses a non-positive duration."""
    execute(
        pg_db.superuser_dsn,
        f'ALTER ROLE qlsched_runtime IN DATABASE "{pg_db.name}" SET lock_timeout = 0',
    )
    assert readiness(pg_db.runtime_dsn).findings == [
        "qlsched_runtime lock_timeout=0 is not a positive duration"
    ]


# ---------------------------------------------------------------------------------------------
# `qlsched check`, as an operator runs it


def _break_two_ways(db: TestDatabase) -> list[str]:
    execute(
        db.superuser_dsn,
        "GRANT DELETE ON qlsched.runs TO qlsched_runtime",
        "DELETE FROM qlsched.capability",
    )
    findings = readiness(db.runtime_dsn).findings
    assert sorted(findings) == [
        "capability qlsched.cluster_scheduler is missing",
        "extra grant: DELETE on table runs to qlsched_runtime",
    ]
    return findings


def test_check_cli_reports_ready(pg_db: TestDatabase) -> None:
    """Rule: `qlsched check` exits 0 and prints one "ready" line on a ready database."""
    result = run_cli(["check", "--dsn", pg_db.runtime_dsn])
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    version = fetchval(pg_db.runtime_dsn, "SELECT current_setting('server_version_num')::int")
    assert result.stdout == (
        f"ready: PostgreSQL {version // 10000}, {len(MIGRATIONS)} migration(s) applied,"
        " grants exact\n"
    )


def test_check_cli_prints_one_line_per_finding_and_exits_1(pg_db: TestDatabase) -> None:
    """Rule: when not ready, `qlsched check` exits 1 and prints exactly one
    "not ready: FINDING" line per finding, no "ready" line, no traceback."""
    findings = _break_two_ways(pg_db)
    result = run_cli(["check", "--dsn", pg_db.runtime_dsn])
    assert result.returncode == 1
    assert result.stderr == ""
    assert result.stdout.splitlines() == [f"not ready: {f}" for f in findings]


def test_check_cli_json(pg_db: TestDatabase) -> None:
    """Rule: `qlsched check --json` prints one JSON object (ready, findings, server
    version, applied migrations), with exit 0 when ready and 1 when not."""
    good = run_cli(["check", "--json", "--dsn", pg_db.runtime_dsn])
    assert good.returncode == 0, good.stderr
    doc = json.loads(good.stdout)
    assert doc["ready"] is True
    assert doc["findings"] == []
    assert doc["applied"] == MIGRATIONS
    assert doc["server_version"] >= 150000

    findings = _break_two_ways(pg_db)
    bad = run_cli(["check", "--json", "--dsn", pg_db.runtime_dsn])
    assert bad.returncode == 1
    doc = json.loads(bad.stdout)
    assert doc["ready"] is False
    assert doc["findings"] == findings


def _cannot_read(what: str, role: str) -> str:
    return (
        f"cannot read {what}: permission denied to role {role} (SQLSTATE 42501); "
        "check as the runtime, observer or a superuser"
    )


def test_a_role_that_may_not_read_the_ledger_gets_a_finding(pg_db: TestDatabase) -> None:
    """Rule: readiness as a role refused a read (the admin role has no SELECT on the
    ledger) is a finding naming what could not be read and the role, never a traceback;
    the rest is still checked. `check` prints it as a "not ready" line and exits 1."""
    what = "the migration ledger qlsched.schema_migrations"
    report = readiness(pg_db.admin_dsn)
    assert not report.ready
    assert report.findings == [_cannot_read(what, "qlsched_admin")]
    assert report.applied == []

    result = run_cli(["check", "--dsn", pg_db.admin_dsn])
    assert result.returncode == 1
    assert result.stderr == ""
    assert result.stdout == f"not ready: {_cannot_read(what, 'qlsched_admin')}\n"

    as_json = run_cli(["check", "--json", "--dsn", pg_db.admin_dsn])
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["findings"] == [_cannot_read(what, "qlsched_admin")]


def test_a_role_with_no_grant_on_the_schema_gets_a_finding(pg_db: TestDatabase) -> None:
    """Rule: a role that may connect but holds nothing in schema qlsched (no USAGE) is
    told it cannot read the schema (and, as an extra CONNECT grant, is itself a finding);
    `check` exits 1 with one "not ready" line per finding and no traceback."""
    role = f"qlt_plain_{os.getpid()}"
    with role_changed(
        pg_db.superuser_dsn,
        f'CREATE ROLE "{role}" LOGIN; GRANT CONNECT ON DATABASE "{pg_db.name}" TO "{role}"',
        f'REVOKE ALL ON DATABASE "{pg_db.name}" FROM "{role}"; DROP ROLE IF EXISTS "{role}"',
    ):
        dsn = pg_db.dsn(role)
        expected = [
            _cannot_read("schema qlsched", role),
            f"extra grant: CONNECT on database {pg_db.name} to {role}",
        ]
        assert readiness(dsn).findings == expected
        result = run_cli(["check", "--dsn", dsn])
        assert result.returncode == 1
        assert "Traceback" not in result.stderr
        assert result.stderr == ""
        assert result.stdout.splitlines() == [f"not ready: {f}" for f in expected]


# ---------------------------------------------------------------------------------------------
# The tamper matrix (contract §4): the whole catalog against what the migrations define

INTRUDER = f"qlt_intruder_{os.getpid()}"
CLAIM_INDEX = (
    "CREATE INDEX trigger_schedules_claim_idx ON qlsched.trigger_schedules"
    " ((COALESCE(due_at_ms, -1)), project_id, trigger_id)"
    " WHERE active AND claim_token IS NULL AND due_at_ms IS NOT NULL"
)
_JITTER_SQL = next(m.sql for m in load_migrations() if m.version == 8)
JITTER_FUNCTION = _JITTER_SQL[
    _JITTER_SQL.index("CREATE FUNCTION") : _JITTER_SQL.index(";", _JITTER_SQL.index("RETURN "))
].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
"""The shipped hash function, to put back; a changed body is tampering."""
SCHEDULE_CHECK = (
    "ALTER TABLE qlsched.trigger_schedules ADD CONSTRAINT trigger_schedules_check"
    " CHECK ((claim_token IS NULL) = (claim_owner IS NULL)"
    " AND (claim_token IS NULL) = (claim_expires_at_ms IS NULL))"
)


def _tampering(
    case_id: str, named: str, tamper: list[str], restore: list[str]
) -> object:  # a pytest ParameterSet
    return pytest.param(named, tamper, restore, id=case_id)


TAMPERINGS = [
    _tampering(
        "drop-idempotency-unique",
        "runs_idempotency_key_key",
        ["ALTER TABLE qlsched.runs DROP CONSTRAINT runs_idempotency_key_key"],
        [
            "ALTER TABLE qlsched.runs ADD CONSTRAINT runs_idempotency_key_key"
            " UNIQUE (idempotency_key)"
        ],
    ),
    _tampering(
        "drop-trigger-id-unique",
        "triggers_trigger_id_key",
        ["ALTER TABLE qlsched.triggers DROP CONSTRAINT triggers_trigger_id_key"],
        ["ALTER TABLE qlsched.triggers ADD CONSTRAINT triggers_trigger_id_key UNIQUE (trigger_id)"],
    ),
    _tampering(
        "drop-claim-index",
        "trigger_schedules_claim_idx",
        ["DROP INDEX qlsched.trigger_schedules_claim_idx"],
        [CLAIM_INDEX],
    ),
    _tampering(
        "alter-claim-index",
        "trigger_schedules_claim_idx",
        [
            "DROP INDEX qlsched.trigger_schedules_claim_idx",
            CLAIM_INDEX.replace(" AND claim_token IS NULL", ""),
        ],
        ["DROP INDEX qlsched.trigger_schedules_claim_idx", CLAIM_INDEX],
    ),
    _tampering(
        "claim-index-on-cursor",
        "trigger_schedules_claim_idx",
        [
            "DROP INDEX qlsched.trigger_schedules_claim_idx",
            CLAIM_INDEX.replace("COALESCE(due_at_ms", "COALESCE(next_fire_at_ms"),
        ],
        ["DROP INDEX qlsched.trigger_schedules_claim_idx", CLAIM_INDEX],
    ),
    _tampering(
        "jitter-function-body",
        "jitter_offset_ms",
        [JITTER_FUNCTION.replace("% jitter_ms", "% (jitter_ms + 1)")],
        [JITTER_FUNCTION],
    ),
    _tampering(
        "drop-schedule-check",
        "trigger_schedules_check",
        ["ALTER TABLE qlsched.trigger_schedules DROP CONSTRAINT trigger_schedules_check"],
        [SCHEDULE_CHECK],
    ),
    _tampering(
        "before-update-trigger",
        "trigger_schedules.qlt_hour",
        [
            "CREATE FUNCTION public.qlt_hour() RETURNS trigger LANGUAGE plpgsql AS"
            " $$BEGIN NEW.claim_expires_at_ms := NEW.claim_expires_at_ms + 3600000;"
            " RETURN NEW; END$$",
            "CREATE TRIGGER qlt_hour BEFORE UPDATE ON qlsched.trigger_schedules"
            " FOR EACH ROW EXECUTE FUNCTION public.qlt_hour()",
        ],
        [
            "DROP TRIGGER qlt_hour ON qlsched.trigger_schedules",
            "DROP FUNCTION public.qlt_hour()",
        ],
    ),
    _tampering(
        "rls-policy-using-false",
        "trigger_schedules.qlt_hide",
        [
            "ALTER TABLE qlsched.trigger_schedules ENABLE ROW LEVEL SECURITY",
            "CREATE POLICY qlt_hide ON qlsched.trigger_schedules USING (false)",
        ],
        [
            "DROP POLICY qlt_hide ON qlsched.trigger_schedules",
            "ALTER TABLE qlsched.trigger_schedules DISABLE ROW LEVEL SECURITY",
        ],
    ),
    _tampering(
        "rls-alone",
        "relation trigger_schedules",
        ["ALTER TABLE qlsched.trigger_schedules ENABLE ROW LEVEL SECURITY"],
        ["ALTER TABLE qlsched.trigger_schedules DISABLE ROW LEVEL SECURITY"],
    ),
    _tampering(
        "changed-column-default",
        "triggers.misfire_grace_ms",
        ["ALTER TABLE qlsched.triggers ALTER COLUMN misfire_grace_ms SET DEFAULT 0"],
        ["ALTER TABLE qlsched.triggers ALTER COLUMN misfire_grace_ms SET DEFAULT 60000"],
    ),
    _tampering(
        "grant-option",
        "SELECT on table runs to qlsched_runtime",
        ["GRANT SELECT ON qlsched.runs TO qlsched_runtime WITH GRANT OPTION"],
        ["REVOKE GRANT OPTION FOR SELECT ON qlsched.runs FROM qlsched_runtime"],
    ),
    _tampering(
        "runtime-granted-to-intruder",
        f"role {INTRUDER} is a member of qlsched_runtime",
        [f'CREATE ROLE "{INTRUDER}"', f'GRANT qlsched_runtime TO "{INTRUDER}"'],
        [f'DROP ROLE IF EXISTS "{INTRUDER}"'],
    ),
    _tampering(
        "owner-granted-to-intruder",
        f"role {INTRUDER} is a member of qlsched_owner",
        [f'CREATE ROLE "{INTRUDER}"', f'GRANT qlsched_owner TO "{INTRUDER}"'],
        [f'DROP ROLE IF EXISTS "{INTRUDER}"'],
    ),
    _tampering(
        "role-inherit",
        "role qlsched_observer has INHERIT",
        ["ALTER ROLE qlsched_observer INHERIT"],
        ["ALTER ROLE qlsched_observer NOINHERIT"],
    ),
    _tampering(
        "added-function",
        "function qlsched.qlt_probe()",
        [
            "SET ROLE qlsched_owner; CREATE FUNCTION qlsched.qlt_probe() RETURNS int"
            " LANGUAGE sql AS 'SELECT 1'; RESET ROLE"
        ],
        ["DROP FUNCTION qlsched.qlt_probe()"],
    ),
    _tampering(
        "added-rule",
        "run_events.qlt_drop",
        ["CREATE RULE qlt_drop AS ON INSERT TO qlsched.run_events DO INSTEAD NOTHING"],
        ["DROP RULE qlt_drop ON qlsched.run_events"],
    ),
    _tampering(
        "added-index",
        "qlt_extra_idx",
        ["CREATE INDEX qlt_extra_idx ON qlsched.runs (state)"],
        ["DROP INDEX qlsched.qlt_extra_idx"],
    ),
    _tampering(
        "altered-column-type",
        "run_events.actor",
        ["ALTER TABLE qlsched.run_events ALTER COLUMN actor TYPE varchar(200)"],
        ["ALTER TABLE qlsched.run_events ALTER COLUMN actor TYPE text"],
    ),
    _tampering(
        "altered-nullability",
        "runs.queued_at_ms",
        ["ALTER TABLE qlsched.runs ALTER COLUMN queued_at_ms SET NOT NULL"],
        ["ALTER TABLE qlsched.runs ALTER COLUMN queued_at_ms DROP NOT NULL"],
    ),
    _tampering(
        "foreign-keys-disabled",
        "relation attempts",
        ["ALTER TABLE qlsched.attempts DISABLE TRIGGER ALL"],
        ["ALTER TABLE qlsched.attempts ENABLE TRIGGER ALL"],
    ),
    _tampering(
        "inherited-child",
        "public.qlt_child",
        ["CREATE TABLE public.qlt_child () INHERITS (qlsched.runs)"],
        ["DROP TABLE public.qlt_child"],
    ),
    _tampering(
        "view-made-security-invoker",
        "relation attempts_redacted",
        ["ALTER VIEW qlsched.attempts_redacted SET (security_invoker = true)"],
        ["ALTER VIEW qlsched.attempts_redacted RESET (security_invoker)"],
    ),
    _tampering(
        "added-view",
        "qlt_view",
        ["SET ROLE qlsched_owner; CREATE VIEW qlsched.qlt_view AS SELECT 1 AS one; RESET ROLE"],
        ["DROP VIEW qlsched.qlt_view"],
    ),
]


@pytest.mark.parametrize(("named", "tamper", "restore"), TAMPERINGS)
def test_every_tampering_is_not_ready_until_put_back(
    pg_db: TestDatabase, named: str, tamper: list[str], restore: list[str]
) -> None:
    """Rule: readiness compares the whole catalog with what the shipped migrations define
    (tables, columns with types, defaults and nullability, constraints and indexes by
    definition, triggers, rules, policies and row-level security, functions, grants with
    their grant option, memberships in both directions): each tampering, alone, on a fresh
    database, is `not ready` with a finding naming the object; put back, it is ready."""
    su = pg_db.superuser_dsn
    assert readiness(pg_db.runtime_dsn).ready
    execute(su, *tamper)
    try:
        report = readiness(pg_db.runtime_dsn)
        assert not report.ready
        assert any(named in f for f in report.findings), report.findings
    finally:
        execute(su, *restore)
    report = readiness(pg_db.runtime_dsn)
    assert report.findings == []
    assert report.ready


def test_storage_tuning_is_not_tampering(pg_db: TestDatabase) -> None:
    """Rule: a table's storage parameters (autovacuum, fillfactor) are a DBA's tuning, not
    the schema the migrations define: setting them leaves the database ready."""
    execute(
        pg_db.superuser_dsn,
        "ALTER TABLE qlsched.runs SET (autovacuum_vacuum_scale_factor = 0.01, fillfactor = 90)",
    )
    assert readiness(pg_db.runtime_dsn).findings == []


def test_readiness_on_a_claim_pool_connection_plans_as_usual(pg_db: TestDatabase) -> None:
    """Rule: a replica checks readiness on its claim pool, whose connections turn sequential
    scans off and force generic plans; readiness runs with the planner's defaults there (on
    PostgreSQL 15 the catalog joins otherwise outran the runtime role's statement timeout)
    and hands the connection back with the pool's own settings."""

    async def fn(conn: asyncpg.Connection[Any]) -> tuple[Readiness, list[str]]:
        report = await check_readiness(conn, lease_ms=DEFAULT_LEASE_MS)
        after = [str(await conn.fetchval(f"SHOW {name}")) for name in sorted(CLAIM_SETTINGS)]
        return report, after

    report, after = sql_run(pg_db.runtime_dsn, fn, server_settings=CLAIM_SETTINGS)
    assert report.findings == []
    assert report.ready
    assert after == [CLAIM_SETTINGS[name] for name in sorted(CLAIM_SETTINGS)]
