"""The roles of docs/contract.md §4, exercised by logging in as each one.

Positive: every grant the table lists works for its role. Negative: everything else is
refused by the server with SQLSTATE 42501 (insufficient_privilege), or, where CONNECT is
withheld, the login itself is refused. A refusal for some other reason (a NOT NULL, a
missing row) would hide a grant, so the negative checks insist on 42501.

Statements that must be refused run inside a rolled-back transaction on a database shared by
this module: if one were wrongly allowed it still leaves nothing behind. The "control" tests
add the missing grant on purpose and show the same statement then gets through and readiness
names the extra grant, so the negative tests are known to fail when their rule breaks.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import asyncpg
import pytest

from qlsched.postgres.queries import query
from qlsched.postgres.status import read_status
from qlsched.tools.verify import verify_exactly_once
from tests.integration.schema_support import (
    LOGIN_ROLES,
    ROLES,
    assert_allowed,
    assert_refused,
    execute,
    execute_with,
    fetch,
    fetchval,
    readiness,
    refusal,
    seed_trigger,
)
from tests.support.pg import PgCluster, TestDatabase, create_database, drop_database, sql_run

TABLES = (
    "projects",
    "tasks",
    "execution_revisions",
    "triggers",
    "trigger_schedules",
    "runs",
    "attempts",
    "run_events",
    "recovery_marks",
    "capability",
    "schema_migrations",
)
SPECS = ("projects", "tasks", "execution_revisions", "triggers")
# The lease fence and the cursor: what claim, admit, skip, initialize and release write.
LEASE_CURSOR_COLUMNS = (
    "next_fire_at_ms",
    "last_scheduled_at_ms",
    "state_version",
    "claim_owner",
    "claim_token",
    "claim_version",
    "claim_expires_at_ms",
    "updated_at_ms",
    "skipped_total",
    "coalesced_total",
    # the accounting and the stuck-row counters its decisions and failures change (0009)
    "decided_from_ms",
    "already_admitted_total",
    "backfilled_total",
    "failures",
    "last_failure",
    "last_failure_at_ms",
    # the overlap policy's and the start deadline's buckets (0014)
    "overlap_skipped_total",
    "deadline_cancelled_total",
)
TRIGGER_SPEC_COLUMNS = (
    "revision",
    "enabled",
    "cron",
    "timezone",
    "misfire_policy",
    "misfire_grace_ms",
    "task_id",
    "task_revision",
    "execution_revision_id",
    "content_digest",
    "dst_gap",
    "dst_fold",
    "jitter_ms",
)


@pytest.fixture(scope="module")
def shared_db(pg_cluster: PgCluster) -> Iterator[TestDatabase]:
    """One migrated database for the refusal lists (every statement there is rolled back)."""
    db = create_database(pg_cluster)
    try:
        yield db
    finally:
        drop_database(db)


# ---------------------------------------------------------------------------------------------
# What each role may do


def test_admin_publishes_specs_and_resets_schedules(pg_db: TestDatabase) -> None:
    """Rule: qlsched_admin may INSERT and UPDATE (and SELECT) projects, tasks, execution
    revisions, triggers and schedule rows: publish is one admin transaction."""
    seed_trigger(pg_db.admin_dsn)
    execute(
        pg_db.admin_dsn,
        "UPDATE qlsched.projects SET revision = revision + 1, updated_at_ms = 1",
        "UPDATE qlsched.tasks SET revision = 2, content_digest = repeat('d', 64)",
        "UPDATE qlsched.execution_revisions SET payload = '{\"a\": 1}'",
        "UPDATE qlsched.triggers SET revision = 2, enabled = false, cron = '0 3 * * *'",
        # A re-published revision resets the schedule row: cursor and claim cleared.
        "UPDATE qlsched.trigger_schedules SET trigger_revision = 2, active = false,"
        " next_fire_at_ms = NULL, state_version = state_version + 1,"
        " claim_version = claim_version + 1, claim_owner = NULL, claim_token = NULL,"
        " claim_expires_at_ms = NULL, updated_at_ms = 2",
    )
    row = fetch(
        pg_db.admin_dsn,
        "SELECT t.revision, t.enabled, s.trigger_revision, s.active, s.state_version"
        " FROM qlsched.triggers AS t JOIN qlsched.trigger_schedules AS s USING (project_id,"
        " trigger_id)",
    )
    assert [tuple(r) for r in row] == [(2, False, 2, False, 1)]


def test_runtime_reads_specs_and_moves_only_the_lease_and_cursor(pg_db: TestDatabase) -> None:
    """Rule: qlsched_runtime may SELECT the specs (of a task only what admit compares), the
    ledger, the capability and the catalog reference, lock
    schedule rows (the claim's FOR UPDATE SKIP LOCKED) and UPDATE each lease/cursor column."""
    seed_trigger(pg_db.admin_dsn)
    for table in ("projects", "execution_revisions", "triggers", "trigger_schedules"):
        assert_allowed(pg_db.runtime_dsn, f"SELECT * FROM qlsched.{table}")  # noqa: S608 - fixed names
    for table in ("capability", "schema_migrations", "catalog_reference"):
        assert_allowed(pg_db.runtime_dsn, f"SELECT * FROM qlsched.{table}")  # noqa: S608 - fixed names
    # Of a task, the admit compares only these (the command is the worker's business).
    assert_allowed(
        pg_db.runtime_dsn, "SELECT project_id, task_id, revision, content_digest FROM qlsched.tasks"
    )
    assert_allowed(
        pg_db.runtime_dsn,
        "SELECT project_id FROM qlsched.trigger_schedules WHERE active"
        " FOR UPDATE SKIP LOCKED LIMIT 16",
    )
    token = uuid.uuid4()
    # The claim writes the whole fence at once (the CHECK wants owner, token, expiry together).
    status = execute_with(
        pg_db.runtime_dsn,
        "UPDATE qlsched.trigger_schedules SET claim_owner = 'r1', claim_token = $1,"
        " claim_version = claim_version + 1, claim_expires_at_ms = 31000,"
        " state_version = state_version + 1, updated_at_ms = 1",
        token,
    )
    assert status == "UPDATE 1"
    for column in LEASE_CURSOR_COLUMNS:
        assert_allowed(
            pg_db.runtime_dsn,
            f"UPDATE qlsched.trigger_schedules SET {column} = {column}",  # noqa: S608 - fixed names
        )
    execute(
        pg_db.runtime_dsn,
        "UPDATE qlsched.trigger_schedules SET next_fire_at_ms = 60000,"
        " last_scheduled_at_ms = 0, skipped_total = skipped_total + 1,"
        " coalesced_total = coalesced_total + 2, claim_owner = NULL, claim_token = NULL,"
        " claim_expires_at_ms = NULL, state_version = state_version + 1, updated_at_ms = 2",
    )
    rows = fetch(
        pg_db.runtime_dsn,
        "SELECT next_fire_at_ms, state_version, claim_version, skipped_total,"
        " coalesced_total, claim_token FROM qlsched.trigger_schedules",
    )
    assert [tuple(r) for r in rows] == [(60000, 2, 1, 1, 2, None)]


def test_runtime_inserts_runs_attempts_events_and_recovery_marks(pg_db: TestDatabase) -> None:
    """Rule: qlsched_runtime may INSERT runs, attempts, run_events and recovery_marks:
    admit writes the first three, startup recovery the last (it reads runs, attempts and
    marks; run_events it only writes, see the read matrix below)."""
    run_id, attempt_id = uuid.uuid4(), uuid.uuid4()

    async def admit_and_mark(conn: asyncpg.Connection[asyncpg.Record]) -> None:
        async with conn.transaction():
            await conn.execute(
                "INSERT INTO qlsched.runs (run_id, project_id, trigger_id, trigger_revision,"
                " task_id, task_revision, execution_revision_id, scheduled_for_ms,"
                " idempotency_key, state, owner, queued_at_ms, created_at_ms,"
                " admitted_by_owner, admitted_claim_token, admitted_claim_version)"
                " VALUES ($1, 'p', 'g', 1, 't', 1, $2, 60000, 'ql3:cron:v1:g:1:60000',"
                " 'queued', 'runtime', 60001, 60001, 'r1', $3, 1)",
                run_id,
                uuid.uuid4(),
                uuid.uuid4(),
            )
            await conn.execute(
                "INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind,"
                " state, created_at_ms) VALUES ($1, $2, 1, 'remote_worker', 'claimed', 60001)",
                attempt_id,
                run_id,
            )
            for seq, kind in ((1, "run.created"), (2, "run.queued")):
                await conn.execute(
                    "INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)"
                    " VALUES ($1, $2, $3, $4, 60001, 'r1')",
                    uuid.uuid4(),
                    run_id,
                    seq,
                    kind,
                )
            await conn.execute(
                "INSERT INTO qlsched.recovery_marks (attempt_id, run_id, reason, marked_at_ms,"
                " marked_by) VALUES ($1, $2, 'drift', 60002, 'r2')",
                attempt_id,
                run_id,
            )

    sql_run(pg_db.runtime_dsn, admit_and_mark)
    counts = fetch(
        pg_db.superuser_dsn,
        "SELECT (SELECT count(*) FROM qlsched.runs), (SELECT count(*) FROM qlsched.attempts),"
        " (SELECT count(*) FROM qlsched.run_events),"
        " (SELECT count(*) FROM qlsched.recovery_marks)",
    )
    assert tuple(counts[0]) == (1, 1, 2, 1)


# ---------------------------------------------------------------------------------------------
# What each role may read, column by column


# The columns that carry secrets: what a worker will run and how it calls back.
SECRET_COLUMNS = (
    ("tasks", "command"),
    ("execution_revisions", "payload"),
    ("attempts", "callback_token"),
    ("attempts", "output_tail"),
)
RELATIONS = (
    *TABLES,
    "catalog_reference",
    "attempts_redacted",
    "control_requests",
    "worker_payloads",
)
# The worker (migration 0010): a Run without its admission fence, the Attempt without the
# callback token or the output it writes, the event numbers, the payload through its view.
WORKER_RUN_COLUMNS = (
    "run_id",
    "project_id",
    "trigger_id",
    "trigger_revision",
    "task_id",
    "task_revision",
    "execution_revision_id",
    "scheduled_for_ms",
    "idempotency_key",
    "state",
    "queued_at_ms",
    "cancel_requested",
    "created_at_ms",
    "started_at_ms",
    "finished_at_ms",
    "retry_at_ms",
    "start_by_ms",  # 0014: set when it releases a held Run
)
WORKER_READS = {
    "runs": WORKER_RUN_COLUMNS,
    "attempts": (
        "attempt_id",
        "run_id",
        "attempt_no",
        "executor_kind",
        "state",
        "worker_id",
        "session_id",
        "lease_id",
        "offer_id",
        "started_at_ms",
        "result",
        "error",
        "created_at_ms",
        "lease_expires_at_ms",
        "heartbeat_at_ms",
        "finished_at_ms",
        "exit_code",
    ),
    "run_events": ("run_id", "seq"),
    # the start deadline a released held Run gets (0014)
    "triggers": ("project_id", "trigger_id", "start_deadline_ms"),
}
# The admin's cancel: a Run's identity and state, its Attempts' states, the event numbers.
ADMIN_RUN_READS = {
    "runs": ("run_id", "project_id", "trigger_id", "trigger_revision", "state", "cancel_requested"),
    "attempts": ("attempt_id", "run_id", "attempt_no", "state"),
    "run_events": ("run_id", "seq"),
}
# Of a task, what admit compares; the command is never the runtime's business.
RUNTIME_TASK_COLUMNS = ("project_id", "task_id", "revision", "content_digest")


def _columns(dsn: str) -> list[tuple[str, str]]:
    """Every (relation, column) of RELATIONS, from the catalog (a new column is covered)."""
    return [
        (str(r[0]), str(r[1]))
        for r in fetch(
            dsn,
            "SELECT c.relname::text, a.attname::text FROM pg_catalog.pg_attribute AS a"
            " JOIN pg_catalog.pg_class AS c ON c.oid = a.attrelid"
            " JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'qlsched' AND c.relname = ANY($1::text[])"
            " AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1, a.attnum",
            list(RELATIONS),
        )
    ]


def _may_read(relation: str, column: str, role: str) -> bool:
    """docs/contract.md §4's read rights, column by column (the rule the matrix test pins)."""
    if role == "qlsched_observer":
        return (relation, column) not in SECRET_COLUMNS and relation != "worker_payloads"
    if role == "qlsched_runtime":
        if relation == "tasks":
            return column in RUNTIME_TASK_COLUMNS
        if relation == "run_events":  # the event numbers it writes after (0014)
            return column in ("run_id", "seq")
        return relation not in ("attempts_redacted", "worker_payloads")
    if role == "qlsched_worker":
        if relation in WORKER_READS:
            return column in WORKER_READS[relation]
        return relation in (
            "capability",
            "schema_migrations",
            "catalog_reference",
            "worker_payloads",
        )
    assert role == "qlsched_admin"
    if relation in ADMIN_RUN_READS:
        return column in ADMIN_RUN_READS[relation]
    return relation in (*SPECS, "trigger_schedules", "control_requests")


def _readable(dsn: str, columns: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Each column's SELECT as ``dsn``'s role, on one connection: "ok" or the SQLSTATE."""

    async def fn(conn: asyncpg.Connection[asyncpg.Record]) -> dict[tuple[str, str], str]:
        out: dict[tuple[str, str], str] = {}
        for relation, column in columns:
            try:
                async with conn.transaction():
                    await conn.execute(
                        f'SELECT "{column}" FROM qlsched."{relation}" LIMIT 0'  # noqa: S608 - catalog names
                    )
                out[(relation, column)] = "ok"
            except asyncpg.PostgresError as exc:
                out[(relation, column)] = str(exc.sqlstate)
        return out

    return sql_run(dsn, fn)


@pytest.mark.parametrize(
    "role", ["qlsched_observer", "qlsched_runtime", "qlsched_admin", "qlsched_worker"]
)
def test_each_role_reads_exactly_its_columns(shared_db: TestDatabase, role: str) -> None:
    """Rule: each role may SELECT exactly the columns it needs and every other column is
    refused with SQLSTATE 42501: the observer every column but tasks.command,
    execution_revisions.payload and attempts.callback_token; the runtime no task command,
    nothing of run_events (it only writes them); the admin the specs and schedules, and of
    Runs what cancel needs; the worker a Run without its admission fence, an Attempt without
    its callback token or output, and the payload only through worker_payloads."""
    columns = _columns(shared_db.superuser_dsn)
    assert set(SECRET_COLUMNS) <= set(columns)
    expected = {c: "ok" if _may_read(*c, role) else "42501" for c in columns}
    assert _readable(shared_db.dsn(role), columns) == expected


@pytest.mark.parametrize(("table", "column"), SECRET_COLUMNS)
def test_the_observer_cannot_read_a_secret_even_indirectly(
    shared_db: TestDatabase, table: str, column: str
) -> None:
    """Rule: the observer cannot reach a secret column by `SELECT *`, a filter or a count
    over it: each is refused with SQLSTATE 42501, never silently narrowed."""
    for sql in (
        f"SELECT * FROM qlsched.{table}",  # noqa: S608 - fixed names
        f"SELECT count(*) FROM qlsched.{table} WHERE {column} IS NOT NULL",  # noqa: S608
        f"SELECT count({column}) FROM qlsched.{table}",  # noqa: S608 - fixed names
    ):
        assert_refused(shared_db.observer_dsn, sql)


def test_the_observer_sees_whether_a_callback_token_is_set_not_the_token(
    pg_db: TestDatabase,
) -> None:
    """Rule: attempts_redacted tells the observer whether an Attempt has a callback token
    (the verifier's pristine check needs that) and never the token itself."""
    run_id, attempt_id = uuid.uuid4(), uuid.uuid4()
    execute_with(
        pg_db.superuser_dsn,
        "WITH r AS (INSERT INTO qlsched.runs (run_id, project_id, trigger_id,"
        " trigger_revision, task_id, task_revision, execution_revision_id, scheduled_for_ms,"
        " idempotency_key, state, owner, created_at_ms, admitted_by_owner,"
        " admitted_claim_token, admitted_claim_version) VALUES ($1, 'p', 'g', 1, 't', 1, $1,"
        " 0, 'k', 'queued', 'runtime', 0, 'r1', $1, 1) RETURNING run_id)"
        " INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind, state,"
        " callback_token, created_at_ms) SELECT $2, run_id, 1, 'remote_worker', 'claimed',"
        " 'secret-token', 0 FROM r",
        run_id,
        attempt_id,
    )
    rows = fetch(pg_db.observer_dsn, "SELECT * FROM qlsched.attempts_redacted")
    assert [(r["attempt_id"], r["has_callback_token"]) for r in rows] == [(attempt_id, True)]
    assert "secret-token" not in repr([tuple(r) for r in rows])


def test_status_the_verifier_and_the_http_reads_work_with_the_trimmed_grants(
    pg_db: TestDatabase,
) -> None:
    """Rule: trimming the reads breaks no reader: `qlsched status` and the demo's verifier
    run as the observer, and the reads behind `/metrics` and `/v1/schedules` (the due
    backlog, the schedule list) as the runtime and as the observer, each seeing the Run and
    its pristine Attempt (no callback token) as admitted."""
    seed_trigger(pg_db.admin_dsn)
    run_id = uuid.uuid4()
    execute_with(
        pg_db.superuser_dsn,
        "WITH r AS (INSERT INTO qlsched.runs (run_id, project_id, trigger_id,"
        " trigger_revision, task_id, task_revision, execution_revision_id, scheduled_for_ms,"
        " idempotency_key, state, owner, queued_at_ms, created_at_ms, admitted_by_owner,"
        " admitted_claim_token, admitted_claim_version) VALUES ($1, 'p', 'g', 1, 't', 1,"
        " '00000000-0000-4000-8000-000000000001', 60000, 'ql3:cron:v1:g:1:60000', 'queued',"
        " 'runtime', 60001, 60001, 'r1', $1, 1) RETURNING run_id),"
        " a AS (INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind,"
        " state, created_at_ms) SELECT $1, run_id, 1, 'remote_worker', 'claimed', 60001 FROM r)"
        " INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)"
        " SELECT gen_random_uuid(), run_id, s, t, 60001, 'r1' FROM r,"
        " (VALUES (1, 'run.created'), (2, 'run.queued')) AS e(s, t)",
        run_id,
    )
    status = sql_run(pg_db.observer_dsn, read_status)
    assert [(s.project_id, s.trigger_id) for s in status.schedules] == [("p", "g")]
    assert [(r.trigger_id, r.state) for r in status.recent_runs] == [("g", "queued")]
    audit = sql_run(pg_db.observer_dsn, verify_exactly_once)
    assert audit.runs == 1
    assert audit.bad_attempts == []
    assert audit.bad_events == []
    for dsn in (pg_db.runtime_dsn, pg_db.observer_dsn):
        assert_allowed(dsn, query("due_backlog"))
        assert_allowed(dsn, query("list_schedules"), 100)
        assert_allowed(dsn, query("due_backlog_bounded"), 100)
        assert_allowed(dsn, query("list_schedules_after"), "p", "a", 100)
    assert_allowed(pg_db.observer_dsn, query("refused_due_triggers"), 100, 100)


# ---------------------------------------------------------------------------------------------
# What each role may not do


def _runtime_refusals() -> list[object]:
    cases: list[object] = [
        pytest.param(
            "INSERT INTO qlsched.trigger_schedules (project_id, trigger_id, trigger_revision,"
            " updated_at_ms) VALUES ('p', 'g', 1, 0)",
            id="insert-schedule",
        ),
        pytest.param("DELETE FROM qlsched.trigger_schedules", id="delete-schedule"),
        pytest.param("TRUNCATE qlsched.trigger_schedules", id="truncate-schedule"),
        pytest.param("UPDATE qlsched.trigger_schedules SET active = true", id="update-active"),
        pytest.param(
            "UPDATE qlsched.trigger_schedules SET trigger_revision = trigger_revision + 1",
            id="update-trigger_revision",
        ),
        pytest.param("CREATE TABLE qlsched.intruder (i int)", id="create-table-qlsched"),
        pytest.param("CREATE TABLE public.intruder (i int)", id="create-table-public"),
        pytest.param("CREATE TEMP TABLE intruder (i int)", id="create-temp-table"),
        pytest.param(
            "CREATE FUNCTION qlsched.intruder() RETURNS int LANGUAGE sql AS 'SELECT 1'",
            id="create-function-qlsched",
        ),
        pytest.param(
            "CREATE FUNCTION public.intruder() RETURNS int LANGUAGE sql AS 'SELECT 1'",
            id="create-function-public",
        ),
        pytest.param(
            "CREATE FUNCTION pg_temp.intruder() RETURNS int LANGUAGE sql AS 'SELECT 1'",
            id="create-function-temp",
        ),
        pytest.param("CREATE SCHEMA intruder", id="create-schema"),
        pytest.param("CREATE ROLE intruder", id="create-role"),
        pytest.param("SET ROLE qlsched_admin", id="set-role-admin"),
        pytest.param("SET ROLE qlsched_owner", id="set-role-owner"),
        pytest.param("COPY (SELECT 1) TO PROGRAM 'true'", id="copy-to-program"),
        pytest.param("COPY qlsched.runs FROM PROGRAM 'true'", id="copy-from-program"),
        pytest.param("COPY (SELECT 1) TO 'qlsched-intruder.out'", id="copy-to-file"),
        pytest.param("SELECT pg_catalog.pg_read_file('PG_VERSION')", id="pg_read_file"),
        pytest.param("SELECT pg_catalog.pg_ls_dir('.')", id="pg_ls_dir"),
        pytest.param("UPDATE qlsched.runs SET scheduled_for_ms = 0", id="update-runs"),
        pytest.param("UPDATE qlsched.runs SET idempotency_key = 'k'", id="update-runs-key"),
        pytest.param("DELETE FROM qlsched.runs", id="delete-runs"),
        pytest.param("DELETE FROM qlsched.attempts", id="delete-attempts"),
        pytest.param("UPDATE qlsched.attempts SET worker_id = 'w'", id="update-attempts"),
        pytest.param("DELETE FROM qlsched.run_events", id="delete-run_events"),
        pytest.param("DELETE FROM qlsched.recovery_marks", id="delete-recovery_marks"),
        pytest.param("UPDATE qlsched.capability SET version = 2", id="update-capability"),
        pytest.param(
            "INSERT INTO qlsched.schema_migrations (version, name, checksum)"
            " VALUES (9999, 'x', repeat('0', 64))",
            id="insert-ledger",
        ),
    ]
    for column in TRIGGER_SPEC_COLUMNS:
        cases.append(
            pytest.param(
                f"UPDATE qlsched.triggers SET {column} = {column}",  # noqa: S608 - fixed names
                id=f"update-triggers-{column}",
            )
        )
    for table in SPECS:
        cases.append(
            pytest.param(
                f"INSERT INTO qlsched.{table} DEFAULT VALUES",
                id=f"insert-{table}",
            )
        )
        cases.append(
            pytest.param(f"DELETE FROM qlsched.{table}", id=f"delete-{table}")  # noqa: S608
        )
    return cases


@pytest.mark.parametrize("sql", _runtime_refusals())
def test_runtime_is_refused(shared_db: TestDatabase, sql: str) -> None:
    """Rule: qlsched_runtime has no INSERT/DELETE/TRUNCATE on schedules, no UPDATE of a
    schedule's `active`/`trigger_revision` or of any spec, no CREATE anywhere (schema,
    temp, function, role), cannot become another role, cannot reach the server's programs
    or files, and cannot rewrite a Run's identity, attempts' worker fields, events, marks,
    the capability or the ledger: each is refused with SQLSTATE 42501. (It moves a Run's
    state only to cancel an unstarted one at its deadline, or under `cancel_other`, and to
    release a held one: docs/contract.md §13.)"""
    assert_refused(shared_db.runtime_dsn, sql)


def test_runtime_updates_no_schedule_column_outside_the_lease_and_cursor(
    shared_db: TestDatabase,
) -> None:
    """Rule: of trigger_schedules' columns (read from the catalog, so a new column is
    covered too), qlsched_runtime may UPDATE exactly the lease/cursor set, nothing else."""
    columns = [
        r[0]
        for r in fetch(
            shared_db.superuser_dsn,
            "SELECT attname::text FROM pg_catalog.pg_attribute"
            " WHERE attrelid = 'qlsched.trigger_schedules'::regclass AND attnum > 0"
            " AND NOT attisdropped ORDER BY attnum",
        )
    ]
    others = [c for c in columns if c not in LEASE_CURSOR_COLUMNS]
    assert {"project_id", "trigger_id", "trigger_revision", "active"} <= set(others)
    allowed = [
        c
        for c in others
        if refusal(shared_db.runtime_dsn, f"UPDATE qlsched.trigger_schedules SET {c} = {c}")  # noqa: S608
        is None
    ]
    assert allowed == []


@pytest.mark.parametrize("table", TABLES)
@pytest.mark.parametrize(
    "template",
    [
        pytest.param("INSERT INTO qlsched.{} DEFAULT VALUES", id="insert"),
        pytest.param("UPDATE qlsched.{} SET {} = {}", id="update"),
        pytest.param("DELETE FROM qlsched.{}", id="delete"),
        pytest.param("TRUNCATE qlsched.{}", id="truncate"),
    ],
)
def test_observer_is_refused_every_write(
    shared_db: TestDatabase, table: str, template: str
) -> None:
    """Rule: qlsched_observer is read-only: INSERT, UPDATE, DELETE and TRUNCATE on every
    qlsched table are refused with SQLSTATE 42501."""
    first_column = fetchval(
        shared_db.superuser_dsn,
        "SELECT attname::text FROM pg_catalog.pg_attribute"
        " WHERE attrelid = ('qlsched.' || $1)::regclass AND attnum = 1",
        table,
    )
    sql = template.format(table, first_column, first_column)
    assert_refused(shared_db.observer_dsn, sql)


@pytest.mark.parametrize(
    "sql",
    [
        pytest.param("DELETE FROM qlsched.triggers", id="delete-triggers"),
        pytest.param("DELETE FROM qlsched.trigger_schedules", id="delete-schedules"),
        pytest.param("TRUNCATE qlsched.projects", id="truncate-projects"),
        pytest.param("SELECT * FROM qlsched.runs", id="select-runs"),
        pytest.param("INSERT INTO qlsched.runs DEFAULT VALUES", id="insert-runs"),
        pytest.param("INSERT INTO qlsched.attempts DEFAULT VALUES", id="insert-attempts"),
        pytest.param("UPDATE qlsched.capability SET version = 2", id="update-capability"),
        pytest.param("DELETE FROM qlsched.schema_migrations", id="delete-ledger"),
        pytest.param("CREATE TABLE qlsched.intruder (i int)", id="create-table"),
        pytest.param("CREATE TEMP TABLE intruder (i int)", id="create-temp-table"),
        pytest.param("SET ROLE qlsched_runtime", id="set-role-runtime"),
    ],
)
def test_admin_is_refused_beyond_publish(shared_db: TestDatabase, sql: str) -> None:
    """Rule: qlsched_admin publishes specs and schedules and does nothing else: no DELETE
    or TRUNCATE, no access to runs or attempts, the capability or the ledger, no CREATE."""
    assert_refused(shared_db.admin_dsn, sql)


JITTER_CALL = "SELECT qlsched.jitter_offset_ms('p', 't', 1, 0, 1000)"


@pytest.mark.parametrize(
    ("role", "allowed"),
    [
        ("qlsched_admin", True),
        ("qlsched_runtime", True),
        ("qlsched_observer", False),
    ],
)
def test_the_jitter_function_is_executable_by_the_cursor_writers_only(
    shared_db: TestDatabase, role: str, allowed: bool
) -> None:
    """Rule: ``qlsched.jitter_offset_ms`` (the due time's hash, migration 0008) may be run by
    the roles that write a cursor, whose writes compute the generated due time: the admin
    (publish, pause, resume) and the runtime (admit, initialize, skip); not the observer."""
    dsn = {
        "qlsched_admin": shared_db.admin_dsn,
        "qlsched_runtime": shared_db.runtime_dsn,
        "qlsched_observer": shared_db.observer_dsn,
    }[role]
    if allowed:
        assert_allowed(dsn, JITTER_CALL)
    else:
        assert_refused(dsn, JITTER_CALL)


def test_runtime_cannot_execute_a_function_it_was_not_granted(pg_db: TestDatabase) -> None:
    """Rule: EXECUTE on functions is revoked from PUBLIC by qlsched_owner's default
    privileges, so a function a later migration adds is closed until granted. Control: the
    explicit grant opens it, and readiness names that grant as extra."""
    execute(
        pg_db.superuser_dsn,
        "SET ROLE qlsched_owner;"
        " CREATE FUNCTION qlsched.probe() RETURNS int LANGUAGE sql AS 'SELECT 1';"
        " RESET ROLE",
    )
    assert_refused(pg_db.runtime_dsn, "SELECT qlsched.probe()")
    assert readiness(pg_db.runtime_dsn).findings == ["unexpected function qlsched.probe()"]

    execute(pg_db.superuser_dsn, "GRANT EXECUTE ON FUNCTION qlsched.probe() TO qlsched_runtime")
    assert fetchval(pg_db.runtime_dsn, "SELECT qlsched.probe()") == 1
    assert sorted(readiness(pg_db.runtime_dsn).findings) == [
        "extra grant: EXECUTE on function qlsched.probe() to qlsched_runtime",
        "unexpected function qlsched.probe()",
    ]


def test_without_the_default_privileges_new_functions_are_open_and_readiness_says_so(
    pg_db: TestDatabase,
) -> None:
    """Rule (control for the test above): the refusal comes from the default privileges;
    with them widened a new function is executable by PUBLIC, and readiness fails naming
    both the default privileges and the PUBLIC grant."""
    execute(
        pg_db.superuser_dsn,
        "ALTER DEFAULT PRIVILEGES FOR ROLE qlsched_owner GRANT EXECUTE ON FUNCTIONS TO PUBLIC",
        "SET ROLE qlsched_owner;"
        " CREATE FUNCTION qlsched.probe() RETURNS int LANGUAGE sql AS 'SELECT 1';"
        " RESET ROLE",
    )
    assert fetchval(pg_db.runtime_dsn, "SELECT qlsched.probe()") == 1
    assert sorted(readiness(pg_db.runtime_dsn).findings) == [
        "default privileges do not revoke EXECUTE on functions from PUBLIC",
        "extra grant: EXECUTE on function qlsched.probe() to PUBLIC",
        "unexpected function qlsched.probe()",
    ]


def test_a_widened_schedule_grant_is_usable_and_readiness_refuses_it(pg_db: TestDatabase) -> None:
    """Rule (control for the refusal lists): if the runtime were granted INSERT/DELETE on
    trigger_schedules or UPDATE of `active`, those statements would go through, so the
    refusal tests above are sensitive to the grant; readiness names each extra grant."""
    seed_trigger(pg_db.admin_dsn)
    execute(
        pg_db.superuser_dsn,
        "GRANT INSERT, DELETE ON qlsched.trigger_schedules TO qlsched_runtime",
        "GRANT UPDATE (active) ON qlsched.trigger_schedules TO qlsched_runtime",
    )
    assert_allowed(pg_db.runtime_dsn, "DELETE FROM qlsched.trigger_schedules")
    assert_allowed(pg_db.runtime_dsn, "UPDATE qlsched.trigger_schedules SET active = false")
    report = readiness(pg_db.runtime_dsn)
    assert not report.ready
    assert sorted(report.findings) == [
        "extra grant: DELETE on table trigger_schedules to qlsched_runtime",
        "extra grant: INSERT on table trigger_schedules to qlsched_runtime",
        "extra grant: UPDATE on column trigger_schedules(active) to qlsched_runtime",
    ]


# ---------------------------------------------------------------------------------------------
# worker_ingress: nothing at all


def test_worker_ingress_cannot_connect_to_the_qlsched_database(pg_db: TestDatabase) -> None:
    """Rule: qlsched_worker_ingress has no CONNECT on the qlsched database: the login is
    refused with SQLSTATE 42501. Control: granting CONNECT lets it in, and readiness names
    the grant."""
    ingress = pg_db.dsn("qlsched_worker_ingress")
    with pytest.raises(asyncpg.InsufficientPrivilegeError) as refused:
        fetchval(ingress, "SELECT 1")
    assert refused.value.sqlstate == "42501"

    execute(
        pg_db.superuser_dsn, f'GRANT CONNECT ON DATABASE "{pg_db.name}" TO qlsched_worker_ingress'
    )
    assert fetchval(ingress, "SELECT current_user") == "qlsched_worker_ingress"
    assert readiness(pg_db.runtime_dsn).findings == [
        f"extra grant: CONNECT on database {pg_db.name} to qlsched_worker_ingress"
    ]


def test_worker_ingress_holds_no_privilege_on_anything(shared_db: TestDatabase) -> None:
    """Rule: qlsched_worker_ingress has zero privileges on the database, the schema, and
    every table, column and function in it (directly or through PUBLIC)."""
    su = shared_db.superuser_dsn
    held = fetch(
        su,
        "SELECT 'table ' || c.relname || ' ' || p AS what"
        "  FROM pg_catalog.pg_class AS c"
        "  JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace,"
        "       unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES',"
        "                    'TRIGGER']) AS p"
        " WHERE n.nspname = 'qlsched' AND c.relkind IN ('r', 'p', 'v', 'm', 'S')"
        "   AND pg_catalog.has_table_privilege('qlsched_worker_ingress', c.oid, p)"
        " UNION ALL"
        " SELECT 'columns of ' || c.relname || ' ' || p"
        "  FROM pg_catalog.pg_class AS c"
        "  JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace,"
        "       unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'REFERENCES']) AS p"
        " WHERE n.nspname = 'qlsched' AND c.relkind IN ('r', 'p', 'v', 'm')"
        "   AND pg_catalog.has_any_column_privilege('qlsched_worker_ingress', c.oid, p)"
        " UNION ALL"
        " SELECT 'function ' || f.oid::regprocedure::text"
        "  FROM pg_catalog.pg_proc AS f"
        "  JOIN pg_catalog.pg_namespace AS n ON n.oid = f.pronamespace"
        " WHERE n.nspname = 'qlsched'"
        "   AND pg_catalog.has_function_privilege('qlsched_worker_ingress', f.oid, 'EXECUTE')"
        " UNION ALL"
        " SELECT 'schema qlsched ' || p FROM unnest(ARRAY['USAGE', 'CREATE']) AS p"
        " WHERE pg_catalog.has_schema_privilege('qlsched_worker_ingress', 'qlsched', p)"
        " UNION ALL"
        " SELECT 'database ' || p FROM unnest(ARRAY['CONNECT', 'CREATE', 'TEMPORARY']) AS p"
        " WHERE pg_catalog.has_database_privilege('qlsched_worker_ingress',"
        "                                         pg_catalog.current_database(), p)",
    )
    assert [r["what"] for r in held] == []
    # The probe itself can see a privilege: the runtime's, through the same query shape.
    assert fetchval(
        su, "SELECT pg_catalog.has_table_privilege('qlsched_runtime', 'qlsched.runs', 'INSERT')"
    )


# ---------------------------------------------------------------------------------------------
# Role attributes and PUBLIC


def test_no_role_is_privileged_or_a_member_of_anything(shared_db: TestDatabase) -> None:
    """Rule: none of the five roles is SUPERUSER, CREATEROLE, CREATEDB, REPLICATION or
    BYPASSRLS, none is a member of any role (pg_* included), qlsched_owner cannot log in,
    the other four can, and each has the pinned search_path."""
    rows = fetch(
        shared_db.superuser_dsn,
        "SELECT r.rolname::text AS role, r.rolsuper, r.rolcreaterole, r.rolcreatedb,"
        "       r.rolreplication, r.rolbypassrls, r.rolcanlogin,"
        "       (SELECT pg_catalog.array_agg(g.rolname::text ORDER BY g.rolname)"
        "          FROM pg_catalog.pg_auth_members AS m"
        "          JOIN pg_catalog.pg_roles AS g ON g.oid = m.roleid"
        "         WHERE m.member = r.oid) AS member_of,"
        "       (SELECT pg_catalog.array_agg(c ORDER BY c)"
        "          FROM pg_catalog.pg_db_role_setting AS s, unnest(s.setconfig) AS c"
        "         WHERE s.setrole = r.oid AND s.setdatabase = 0"
        "           AND c LIKE 'search_path=%') AS search_path"
        "  FROM pg_catalog.pg_roles AS r WHERE r.rolname = ANY($1::text[]) ORDER BY 1",
        list(ROLES),
    )
    assert sorted(r["role"] for r in rows) == sorted(ROLES)
    for r in rows:
        role = r["role"]
        for attr in ("rolsuper", "rolcreaterole", "rolcreatedb", "rolreplication", "rolbypassrls"):
            assert r[attr] is False, f"{role} has {attr}"
        assert r["member_of"] is None, f"{role} is a member of {r['member_of']}"
        assert r["rolcanlogin"] is (role in LOGIN_ROLES), role
        assert r["search_path"] == ["search_path=pg_catalog, pg_temp"], role
    assert fetchval(shared_db.runtime_dsn, "SHOW search_path") == "pg_catalog, pg_temp"


def test_public_holds_nothing(shared_db: TestDatabase) -> None:
    """Rule: nothing in the qlsched database is granted to PUBLIC: no table, column, function
    or the schema, and not CONNECT or TEMPORARY on the database itself (NULL ACLs are read
    as their built-in defaults, which would grant PUBLIC CONNECT and TEMPORARY)."""
    public_grants = fetch(
        shared_db.superuser_dsn,
        "WITH acls AS ("
        "  SELECT 'table ' || c.relname AS what,"
        "         COALESCE(c.relacl, pg_catalog.acldefault('r', c.relowner)) AS acl"
        "    FROM pg_catalog.pg_class AS c"
        "    JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace"
        "   WHERE n.nspname = 'qlsched'"
        "  UNION ALL"
        "  SELECT 'column ' || c.relname || '.' || a.attname, a.attacl"
        "    FROM pg_catalog.pg_attribute AS a"
        "    JOIN pg_catalog.pg_class AS c ON c.oid = a.attrelid"
        "    JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace"
        "   WHERE n.nspname = 'qlsched' AND a.attacl IS NOT NULL"
        "  UNION ALL"
        "  SELECT 'function ' || p.oid::regprocedure::text,"
        "         COALESCE(p.proacl, pg_catalog.acldefault('f', p.proowner))"
        "    FROM pg_catalog.pg_proc AS p"
        "    JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace"
        "   WHERE n.nspname = 'qlsched'"
        "  UNION ALL"
        "  SELECT 'schema qlsched', COALESCE(n.nspacl, pg_catalog.acldefault('n', n.nspowner))"
        "    FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'qlsched'"
        "  UNION ALL"
        "  SELECT 'database', COALESCE(d.datacl, pg_catalog.acldefault('d', d.datdba))"
        "    FROM pg_catalog.pg_database AS d WHERE d.datname = pg_catalog.current_database()"
        ")"
        " SELECT a.what || ' ' || x.privilege_type AS grant"
        "   FROM acls AS a, pg_catalog.aclexplode(a.acl) AS x WHERE x.grantee = 0",
    )
    assert [r["grant"] for r in public_grants] == []
