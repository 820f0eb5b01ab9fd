"""Retention's grants and its prune plan (docs/contract.md §4, §14), on real PostgreSQL.

The admin alone sets the retention; the runtime, the worker and the observer read it and
are refused (SQLSTATE 42501) when they try to change it. The runtime deletes nothing
directly: it may only call ``qlsched.prune_finished_runs``, which deletes finished Runs past
the horizon. A control test widens a grant on purpose: the refused statement then goes
through and readiness names the extra grant, so the refusals are known to be sensitive.

The plan test reads the function's own statement from the catalog and EXPLAINs it as the
replica's pool runs it: an index scan of ``runs_finished_idx`` under its LIMIT, reading
only the batch's rows whatever the history's size.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from qlsched.postgres.claim import CLAIM_SETTINGS
from tests.integration.schema_support import (
    assert_allowed,
    assert_refused,
    execute,
    execute_with,
    fetchval,
    readiness,
    seed_trigger,
)
from tests.support.pg import TestDatabase, sql_run

SET_RETENTION = "UPDATE qlsched.retention SET retention_ms = 60000"
PRUNE = "SELECT * FROM qlsched.prune_finished_runs(10)"


def test_only_the_admin_sets_the_retention_and_every_role_reads_it(pg_db: TestDatabase) -> None:
    """Rule: the admin may change retention_ms; the runtime, the worker and the observer may
    read it and are refused any change (UPDATE, INSERT, DELETE); nobody inserts or deletes
    the one row, not even the admin."""
    assert_allowed(pg_db.admin_dsn, SET_RETENTION)
    for dsn in (pg_db.runtime_dsn, pg_db.worker_dsn, pg_db.observer_dsn, pg_db.admin_dsn):
        assert fetchval(dsn, "SELECT retention_ms FROM qlsched.retention") is None
        assert_refused(dsn, "INSERT INTO qlsched.retention (id) VALUES (false)")
        assert_refused(dsn, "DELETE FROM qlsched.retention")
    for dsn in (pg_db.runtime_dsn, pg_db.worker_dsn, pg_db.observer_dsn):
        assert_refused(dsn, SET_RETENTION)
        assert_refused(dsn, "UPDATE qlsched.retention SET updated_by = 'me'")
    assert_refused(pg_db.admin_dsn, "UPDATE qlsched.retention SET id = true")


def test_only_the_runtime_prunes_and_only_through_the_function(pg_db: TestDatabase) -> None:
    """Rule: the runtime may call prune_finished_runs and may not DELETE from runs,
    attempts, run_events or recovery_marks itself; no other role may call the function
    or write the pruned totals (the function's owner does)."""
    assert_allowed(pg_db.runtime_dsn, PRUNE)
    for table in ("runs", "attempts", "run_events", "recovery_marks"):
        assert_refused(pg_db.runtime_dsn, f"DELETE FROM qlsched.{table}")  # noqa: S608 - fixed names
    for dsn in (pg_db.admin_dsn, pg_db.worker_dsn, pg_db.observer_dsn):
        assert_refused(dsn, PRUNE)
    for dsn in (pg_db.runtime_dsn, pg_db.admin_dsn, pg_db.observer_dsn):
        assert_refused(
            dsn,
            "INSERT INTO qlsched.retention_pruned VALUES ('p', 'g', 1, 1, 0, 0, 0, 0, 0)",
        )
    assert_allowed(pg_db.observer_dsn, "SELECT * FROM qlsched.retention_pruned")
    assert_allowed(pg_db.admin_dsn, "SELECT * FROM qlsched.retention_pruned")


def test_a_widened_retention_grant_works_and_readiness_names_it(pg_db: TestDatabase) -> None:
    """Rule (control for the refusals above): granted UPDATE of retention_ms, the runtime's
    change goes through, and readiness refuses the replica naming the extra grant."""
    assert readiness(pg_db.runtime_dsn).ready
    execute(
        pg_db.superuser_dsn, "GRANT UPDATE (retention_ms) ON qlsched.retention TO qlsched_runtime"
    )
    assert_allowed(pg_db.runtime_dsn, SET_RETENTION)
    report = readiness(pg_db.runtime_dsn)
    assert report.findings == [
        "extra grant: UPDATE on column retention(retention_ms) to qlsched_runtime"
    ]


def test_a_missing_retention_grant_is_a_readiness_finding(pg_db: TestDatabase) -> None:
    """Rule: readiness checks the retention grants like the others: a replica whose role
    cannot read the setting or call the prune is not ready."""
    execute(
        pg_db.superuser_dsn,
        "REVOKE SELECT ON qlsched.retention FROM qlsched_worker",
        "REVOKE EXECUTE ON FUNCTION qlsched.prune_finished_runs(integer) FROM qlsched_runtime",
    )
    assert sorted(readiness(pg_db.runtime_dsn).findings) == [
        "missing grant: EXECUTE on function qlsched.prune_finished_runs(integer)"
        " to qlsched_runtime",
        "missing grant: SELECT on table retention to qlsched_worker",
    ]


# ---------------------------------------------------------------------------------------------
# The prune's plan


HISTORY = 50_000
BATCH = 100


def _history(dsn: str) -> None:
    """``HISTORY`` Runs (one in a hundred unfinished, the rest ended long ago: past an
    hour's horizon), an Attempt and two events each, one in ten marked by recovery, the
    statistics fresh, retention an hour."""
    execute_with(
        dsn,
        "INSERT INTO qlsched.runs (run_id, project_id, trigger_id, trigger_revision, task_id,"
        " task_revision, execution_revision_id, scheduled_for_ms, idempotency_key, state,"
        " owner, queued_at_ms, created_at_ms, admitted_by_owner, admitted_claim_token,"
        " admitted_claim_version, finished_at_ms)"
        " SELECT gen_random_uuid(), 'p', 'g', 1, 't', 1,"
        " '00000000-0000-4000-8000-000000000001', i * 1000, 'plan:' || i,"
        " CASE WHEN i % 100 = 0 THEN 'queued' ELSE"
        " (ARRAY['succeeded', 'failed', 'cancelled'])[1 + i % 3] END, 'runtime', i * 1000,"
        " i * 1000, 'test', gen_random_uuid(), 1,"
        " CASE WHEN i % 100 = 0 THEN NULL ELSE i * 1000 END"
        " FROM generate_series(1, $1::int) AS i",
        HISTORY,
    )
    execute(
        dsn,
        "INSERT INTO qlsched.attempts (attempt_id, run_id, attempt_no, executor_kind, state,"
        " created_at_ms) SELECT gen_random_uuid(), run_id, 1, 'remote_worker', 'succeeded',"
        " created_at_ms FROM qlsched.runs",
        "INSERT INTO qlsched.run_events (event_id, run_id, seq, type, at_ms, actor)"
        " SELECT gen_random_uuid(), run_id, s, 'run.created', created_at_ms, 'test'"
        " FROM qlsched.runs, generate_series(1, 2) AS s",
        "INSERT INTO qlsched.recovery_marks (attempt_id, run_id, reason, marked_at_ms,"
        " marked_by) SELECT attempt_id, run_id, 'test', 0, 'test' FROM qlsched.attempts"
        " WHERE created_at_ms % 10000 = 0",
        "ANALYZE qlsched.runs, qlsched.attempts, qlsched.run_events, qlsched.recovery_marks",
        "UPDATE qlsched.retention SET retention_ms = 3600000",
    )


def _plan(dsn: str, settings: dict[str, str]) -> dict[str, Any]:
    """EXPLAIN ANALYZE of the function's own statement, LIMIT ``BATCH``, rolled back."""

    async def fn(conn: asyncpg.Connection[Any]) -> dict[str, Any]:
        body = await conn.fetchval(
            "SELECT prosrc FROM pg_proc WHERE proname = 'prune_finished_runs'"
        )
        tx = conn.transaction()
        await tx.start()
        try:
            await conn.execute(f"PREPARE prune(integer) AS {body}")
            raw = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE prune({BATCH})")
        finally:
            await tx.rollback()
        return dict(json.loads(raw)[0]["Plan"])

    return sql_run(dsn, fn, server_settings=settings)


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out += _nodes(child)
    return out


def _batch_scan(plan: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Limit of the batch CTE and the scan of runs beneath it."""
    [limit] = [
        n
        for n in _nodes(plan)
        if n["Node Type"] == "Limit" and n.get("Subplan Name") == "CTE batch"
    ]
    [scan] = [n for n in _nodes(limit) if n.get("Relation Name") == "runs"]
    return limit, scan


@pytest.mark.parametrize(
    "settings",
    [pytest.param(dict(CLAIM_SETTINGS), id="replica-pool"), pytest.param({}, id="defaults")],
)
def test_the_prune_batch_is_an_index_scan_bounded_by_its_limit(
    pg_db: TestDatabase, settings: dict[str, str]
) -> None:
    """Rule: a prune batch's cost does not grow with the history: its Runs come from an
    index scan of runs_finished_idx in finished_at_ms order under the batch's LIMIT, which
    reads the batch's rows (not the 50,000 behind them), with no sort and no sequential
    scan of a table the history grows; with the pool's settings and with the planner's
    defaults. The deletes of what references the batch are index scans too."""
    seed_trigger(pg_db.admin_dsn)
    _history(pg_db.superuser_dsn)
    plan = _plan(pg_db.superuser_dsn, settings)
    limit, scan = _batch_scan(plan)
    assert scan["Node Type"] == "Index Scan", scan["Node Type"]
    assert scan["Index Name"] == "runs_finished_idx"
    assert limit["Actual Rows"] == BATCH
    assert scan["Actual Rows"] == BATCH  # read no further than the LIMIT
    seq = {n["Relation Name"] for n in _nodes(plan) if n["Node Type"] == "Seq Scan"}
    # Never a table that grows with the history. With the planner's defaults a one-row
    # trigger_schedules may be read whole (it grows with the triggers, not the history);
    # with the replica's pool settings only the one-row setting is.
    assert not seq & {"runs", "attempts", "run_events", "recovery_marks"}, seq
    assert seq <= ({"retention"} if settings else {"retention", "trigger_schedules"}), seq
    assert "Sort" not in {n["Node Type"] for n in _nodes(limit)}
    deleted = {n["Relation Name"]: n for n in _nodes(plan) if n["Node Type"] == "ModifyTable"}
    assert set(deleted) == {"runs", "attempts", "run_events", "recovery_marks", "retention_pruned"}
