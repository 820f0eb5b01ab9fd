"""The grants on ``qlsched.control_requests`` (migration 0007, docs/contract.md §4): the admin
records requests, the runtime claims, admits and settles them, the observer reads them.
Who asked and when are the database's: the admin's INSERT grant leaves those columns out."""

from __future__ import annotations

from tests.integration.schema_support import (
    assert_allowed,
    assert_refused,
    execute,
    fetch,
    seed_trigger,
)
from tests.support.pg import TestDatabase

INSERT = (
    "INSERT INTO qlsched.control_requests (project_id, trigger_id, trigger_revision, kind{cols})"
    " VALUES ('p', 'g', 1, 'trigger'{vals})"
)
ANY_ROW = "UPDATE qlsched.control_requests SET {set} WHERE true"


def test_admin_records_a_request_and_the_database_fills_who_and_when(
    pg_db: TestDatabase,
) -> None:
    """Rule: the admin may insert a request but not choose its id, role, time, state,
    counts or fence; the row gets SESSION_USER and the database's time; the admin may not
    update or delete a request."""
    seed_trigger(pg_db.admin_dsn)
    assert_allowed(pg_db.admin_dsn, INSERT.format(cols=", note, actor", vals=", 'n', 'a'"))
    for col, val in (
        ("request_id", "'00000000-0000-4000-8000-000000000009'"),
        ("requested_by", "'someone'"),
        ("created_at_ms", "0"),
        ("state", "'done'"),
        ("admitted", "1"),
        ("claim_owner", "'x'"),
        ("cursor_ms", "1"),
    ):
        assert_refused(pg_db.admin_dsn, INSERT.format(cols=f", {col}", vals=f", {val}"))
    execute(pg_db.admin_dsn, INSERT.format(cols="", vals=""))
    [row] = fetch(
        pg_db.superuser_dsn,
        "SELECT requested_by, created_at_ms,"
        " (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint AS now_ms"
        " FROM qlsched.control_requests",
    )
    assert row["requested_by"] == "qlsched_admin"
    assert 0 <= row["now_ms"] - row["created_at_ms"] < 60_000
    assert_refused(pg_db.admin_dsn, ANY_ROW.format(set="state = 'done', done_at_ms = 1"))
    assert_refused(pg_db.admin_dsn, "DELETE FROM qlsched.control_requests")


def test_runtime_settles_requests_but_never_inserts_rewrites_or_deletes_one(
    pg_db: TestDatabase,
) -> None:
    """Rule: the runtime may move a request's fence, cursor, counts and state, and nothing
    else: not insert one, not change what was asked (target, revision, kind, range, note,
    who, when), not delete one."""
    seed_trigger(pg_db.admin_dsn)
    execute(pg_db.admin_dsn, INSERT.format(cols="", vals=""))
    rt = pg_db.runtime_dsn
    assert_refused(rt, INSERT.format(cols="", vals=""))
    assert_refused(rt, "DELETE FROM qlsched.control_requests")
    for assignment in (
        "trigger_revision = 2",
        "kind = 'backfill'",
        "note = 'x'",
        "actor = 'x'",
        "requested_by = 'x'",
        "created_at_ms = 0",
        "from_ms = 0",
        "to_ms = 0",
        "total = 0",
        "max_occurrences = 1",
        "project_id = 'p'",
    ):
        assert_refused(rt, ANY_ROW.format(set=assignment))
    assert_allowed(
        rt,
        ANY_ROW.format(
            set="state = 'done', done_at_ms = 1, admitted = 1, claim_version = 1, updated_at_ms = 1"
        ),
    )


def test_observer_reads_requests_and_writes_none(pg_db: TestDatabase) -> None:
    """Rule: the observer reads every request column and may not insert, update or delete."""
    seed_trigger(pg_db.admin_dsn)
    execute(pg_db.admin_dsn, INSERT.format(cols="", vals=""))
    ob = pg_db.observer_dsn
    assert_allowed(ob, "SELECT * FROM qlsched.control_requests")
    assert_refused(ob, INSERT.format(cols="", vals=""))
    assert_refused(ob, ANY_ROW.format(set="state = 'done', done_at_ms = 1"))
    assert_refused(ob, "DELETE FROM qlsched.control_requests")
