"""The migration runner: numbered SQL files, checksummed, forward-only, safe to run twice.

``schema/postgres/NNNN_name.sql`` are applied in order, each in its own transaction as
``qlsched_owner``, under a session advisory lock, so two concurrent runners are safe: one
applies, the other waits and then finds everything applied. The SHA-256 of each applied
file is recorded; a file edited after it was applied, or missing, stops the runner, naming
the file. ``bootstrap.sql`` (roles, database hardening, the schema and the ledger) runs
first when the caller is a superuser; it is idempotent. A superuser run ends by recording
the expected catalog, built from the files alone (``catalog.record_reference``).
"""

from __future__ import annotations

from importlib.abc import Traversable

import msgspec

from qlsched.migrations import Migration, read_migrations, shipped_schema
from qlsched.postgres.catalog import record_reference
from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query
from qlsched.postgres.timeouts import RoleTimeouts, apply_role_timeouts

MIN_SERVER_VERSION = 150000


class MigrationError(RuntimeError):
    """The schema cannot be migrated; the message names the file or the cause."""


class MigrateReport(msgspec.Struct, frozen=True):
    applied: list[str]
    already: list[str]
    bootstrapped: bool


def schema_dir() -> Traversable:
    """The SQL files: inside the installed wheel, else the source tree's ``schema/``."""
    return shipped_schema("postgres", MigrationError)


def load_migrations(directory: Traversable | None = None) -> list[Migration]:
    return read_migrations(directory or schema_dir(), MigrationError)


def bootstrap_sql(directory: Traversable | None = None) -> str:
    return (directory or schema_dir()).joinpath("bootstrap.sql").read_text(encoding="utf-8")


def verify_ledger(applied: list[tuple[int, str, str]], files: list[Migration]) -> list[str]:
    """Findings comparing the ledger to the files: edited, missing, or unknown versions."""
    by_version = {m.version: m for m in files}
    findings: list[str] = []
    for version, name, checksum in applied:
        mig = by_version.get(version)
        if mig is None:
            findings.append(f"applied migration {name} is missing from this installation")
        elif mig.checksum != checksum:
            findings.append(f"migration {mig.name} was edited after it was applied (checksum)")
    return findings


async def server_facts(conn: Connection) -> tuple[int, bool, str]:
    row = await conn.fetchrow(query("server_facts"))
    assert row is not None
    return int(row["version_num"]), bool(row["superuser"]), str(row["database"])


async def bootstrap(conn: Connection, timeouts: RoleTimeouts) -> None:
    """Roles, hardening, schema and ledger (superuser, idempotent, inside one transaction)."""
    async with conn.transaction():
        await apply_role_timeouts(conn, timeouts)
        await conn.execute(bootstrap_sql())


async def migrate(conn: Connection, timeouts: RoleTimeouts | None = None) -> MigrateReport:
    """Bootstrap (when superuser) and apply pending migrations under the advisory lock."""
    version_num, superuser, _ = await server_facts(conn)
    if version_num < MIN_SERVER_VERSION:
        raise MigrationError(
            f"PostgreSQL {version_num // 10000} is too old: qlsched needs 15 or newer"
        )
    files = load_migrations()
    await conn.execute(query("migrate_lock"))
    try:
        bootstrapped = False
        timeouts = timeouts or RoleTimeouts()
        if superuser:
            await bootstrap(conn, timeouts)
            bootstrapped = True
        elif not await conn.fetchval(query("ledger_exists")):
            raise MigrationError(
                "the qlsched schema is not bootstrapped: run `qlsched init-db` "
                "(or `qlsched migrate`) with a superuser DSN first"
            )
        rows = await conn.fetch(query("migrations_applied"))
        applied = [(int(r["version"]), str(r["name"]), str(r["checksum"])) for r in rows]
        findings = verify_ledger(applied, files)
        if findings:
            raise MigrationError("; ".join(findings))
        done = {v for v, _, _ in applied}
        newly: list[str] = []
        for mig in files:
            if mig.version in done:
                continue
            async with conn.transaction():
                await conn.execute(query("become_owner"))
                await conn.execute(mig.sql)
                await conn.execute(query("record_migration"), mig.version, mig.name, mig.checksum)
            newly.append(mig.name)
        if superuser:
            await record_reference(conn, files, bootstrap_sql(), timeouts, version_num)
        return MigrateReport(
            applied=newly,
            already=[m.name for m in files if m.version in done],
            bootstrapped=bootstrapped,
        )
    finally:
        await conn.execute(query("migrate_unlock"))
