"""Helpers for the foundation tests: privileges, readiness, migrations, init-db, the wheel.

Everything here is synchronous: each call opens its own asyncpg connection on a worker
thread (``tests.support.pg.sql_run``), so a test reads top to bottom as the operator's
sequence of steps, and a connection that a test expects to be refused is never pooled.

Roles are cluster-wide, shared by every database of the session: a test that changes a role
(attribute, membership, setting) must undo it, which ``role_changed`` does in a ``finally``.
Grants on tables, schemas and the database itself belong to one database and go with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import qlsched.postgres.migrate as migrate_module
from qlsched.postgres.migrate import load_migrations
from qlsched.postgres.queries import query
from qlsched.postgres.readiness import Readiness, check_readiness
from tests.support.pg import PgCluster, sql_run

ROLES = (
    "qlsched_owner",
    "qlsched_admin",
    "qlsched_runtime",
    "qlsched_worker_ingress",
    "qlsched_observer",
    "qlsched_worker",
)
LOGIN_ROLES = ROLES[1:]
MIGRATIONS = [m.name for m in load_migrations()]
"""Every shipped migration file, in order."""
MIGRATION = MIGRATIONS[0]
"""The first migration: the one the ledger tests edit, drop or look up."""
DEFAULT_LEASE_MS = 30_000


def execute(dsn: str, *statements: str) -> None:
    """Run each statement in turn (simple query protocol: several per string are fine)."""

    async def fn(conn: asyncpg.Connection[Any]) -> None:
        for statement in statements:
            await conn.execute(statement)

    sql_run(dsn, fn)


def execute_with(dsn: str, sql: str, *args: object) -> str:
    """One statement with ``$n`` parameters; returns the command status (``UPDATE 1``)."""

    async def fn(conn: asyncpg.Connection[Any]) -> str:
        return await conn.execute(sql, *args)

    return sql_run(dsn, fn)


def fetch(dsn: str, sql: str, *args: object) -> list[asyncpg.Record]:
    async def fn(conn: asyncpg.Connection[Any]) -> list[asyncpg.Record]:
        return list(await conn.fetch(sql, *args))

    return sql_run(dsn, fn)


def fetchval(dsn: str, sql: str, *args: object) -> Any:
    async def fn(conn: asyncpg.Connection[Any]) -> Any:
        return await conn.fetchval(sql, *args)

    return sql_run(dsn, fn)


def refusal(dsn: str, sql: str, *args: object) -> asyncpg.PostgresError | None:
    """The server's error for ``sql`` run as ``dsn``'s role, or None when it was allowed.

    The statement runs inside a transaction that is always rolled back, so a statement that
    is wrongly allowed leaves nothing behind for the next test to trip over.
    """

    async def fn(conn: asyncpg.Connection[Any]) -> asyncpg.PostgresError | None:
        tx = conn.transaction()
        await tx.start()
        try:
            await conn.execute(sql, *args)
        except asyncpg.PostgresError as exc:
            return exc
        finally:
            await tx.rollback()
        return None

    return sql_run(dsn, fn)


def assert_refused(dsn: str, sql: str, *args: object) -> None:
    """``sql`` must fail with SQLSTATE 42501 (insufficient_privilege), not merely fail."""
    exc = refusal(dsn, sql, *args)
    assert exc is not None, f"allowed, should be refused: {sql}"
    assert isinstance(exc, asyncpg.InsufficientPrivilegeError), (
        f"{sql}: refused for another reason: {type(exc).__name__} SQLSTATE {exc.sqlstate}"
    )
    assert exc.sqlstate == "42501"


def assert_allowed(dsn: str, sql: str, *args: object) -> None:
    exc = refusal(dsn, sql, *args)
    assert exc is None, f"{sql}: {type(exc).__name__} SQLSTATE {exc.sqlstate}: {exc}"


def readiness(dsn: str, *, lease_ms: int = DEFAULT_LEASE_MS) -> Readiness:
    """``check_readiness`` on a fresh connection of ``dsn``'s role."""

    async def fn(conn: asyncpg.Connection[Any]) -> Readiness:
        return await check_readiness(conn, lease_ms=lease_ms)

    return sql_run(dsn, fn)


def acl_snapshot(dsn: str) -> list[tuple[Any, ...]]:
    """Every grant on qlsched objects, the schema and the database (readiness's own view)."""
    return [tuple(r) for r in fetch(dsn, query("acl_entries"))]


def ledger(dsn: str) -> list[tuple[Any, ...]]:
    """The migration ledger, applied_at included (a re-applied migration would change it)."""
    return [
        tuple(r)
        for r in fetch(
            dsn,
            "SELECT version, name, checksum, applied_at FROM qlsched.schema_migrations"
            " ORDER BY version",
        )
    ]


def database_exists(cluster: PgCluster, name: str) -> bool:
    return bool(
        fetchval(
            cluster.dsn("postgres"),
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_database WHERE datname = $1)",
            name,
        )
    )


def unique_name(prefix: str) -> str:
    """A database name no other test (or parallel session) will pick."""
    return f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


def drop_database(cluster: PgCluster, name: str) -> None:
    execute(cluster.dsn("postgres"), f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def empty_database(cluster: PgCluster, prefix: str = "qle") -> Iterator[str]:
    """A new database with nothing of qlsched in it (not cloned from the template)."""
    name = unique_name(prefix)
    execute(cluster.dsn("postgres"), f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        drop_database(cluster, name)


@contextmanager
def dropped_afterwards(cluster: PgCluster, prefix: str = "qli") -> Iterator[str]:
    """A database name that does not exist yet; whatever a test creates under it is dropped."""
    name = unique_name(prefix)
    try:
        yield name
    finally:
        drop_database(cluster, name)


@contextmanager
def role_changed(superuser_dsn: str, change: str, restore: str) -> Iterator[None]:
    """Apply a cluster-wide role change for the block; ``restore`` runs whatever happens."""
    execute(superuser_dsn, change)
    try:
        yield
    finally:
        execute(superuser_dsn, restore)


def seed_trigger(admin_dsn: str) -> None:
    """One project ``p``, task ``t``, execution revision, trigger ``g`` and its schedule row,
    inserted as the admin role (so the inserts themselves exercise the admin's grants)."""
    execute(
        admin_dsn,
        "INSERT INTO qlsched.projects (project_id, created_at_ms, updated_at_ms)"
        " VALUES ('p', 0, 0)",
        "INSERT INTO qlsched.tasks (project_id, task_id, revision, content_digest, command,"
        " created_at_ms, updated_at_ms) VALUES ('p', 't', 1, repeat('a', 64), 'true', 0, 0)",
        "INSERT INTO qlsched.execution_revisions (execution_revision_id, project_id, task_id,"
        " task_revision, executor_kind, payload, digest, created_at_ms)"
        " VALUES ('00000000-0000-4000-8000-000000000001', 'p', 't', 1, 'remote_worker', '{}',"
        " repeat('b', 64), 0)",
        "INSERT INTO qlsched.triggers (project_id, trigger_id, revision, cron, task_id,"
        " task_revision, execution_revision_id, content_digest, created_at_ms, updated_at_ms)"
        " VALUES ('p', 'g', 1, '* * * * *', 't', 1, '00000000-0000-4000-8000-000000000001',"
        " repeat('c', 64), 0, 0)",
        "INSERT INTO qlsched.trigger_schedules (project_id, trigger_id, trigger_revision,"
        " active, updated_at_ms) VALUES ('p', 'g', 1, true, 0)",
    )


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment without any ``QLSCHED_*`` setting that could steer a command."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QLSCHED_")}
    env.update(extra or {})
    return env


def run_cli(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``python -m qlsched ARGS`` in a subprocess, as an operator would run it."""
    return subprocess.run(
        [sys.executable, "-m", "qlsched", *args],
        capture_output=True,
        text=True,
        env=clean_env(env),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def schema_ending_at(last: int, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the migration runner read a copy of the shipped schema directory in ``folder``
    that ends at migration ``last``: an installation of an earlier version, to upgrade from.
    ``monkeypatch.undo()`` (or the test's end) restores the shipped directory."""
    shipped = migrate_module.schema_dir()
    folder.mkdir()
    for entry in shipped.iterdir():
        name = entry.name
        if name == "bootstrap.sql" or (name[:4].isdigit() and int(name[:4]) <= last):
            (folder / name).write_bytes(entry.read_bytes())

    def patched() -> Traversable:
        return folder

    monkeypatch.setattr(migrate_module, "schema_dir", patched)
