"""``init-db``: database, roles, passwords, schema. Superuser only; idempotent.

Passwords never reach the server in plain text: each is sent as a SCRAM-SHA-256 verifier
computed here. A role that already has a password keeps it unless one is given in
``QLSCHED_<ROLE>_PASSWORD``; a generated password is returned once for printing and
nowhere else. Runs started together are safe (see ``init_db``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import unicodedata
from collections.abc import Mapping

import msgspec

from qlsched.core.config import ConfigError
from qlsched.postgres.dsn import check_dsn, has_password, password_of, user_of, with_credentials
from qlsched.postgres.errors import sqlstate
from qlsched.postgres.migrate import (
    MIN_SERVER_VERSION,
    MigrateReport,
    MigrationError,
    RoleTimeouts,
    migrate,
    server_facts,
)
from qlsched.postgres.pool import Connection, connect, connect_once
from qlsched.postgres.queries import query

LOGIN_ROLES = ("qlsched_admin", "qlsched_runtime", "qlsched_worker_ingress", "qlsched_observer")
SCRAM_ITERATIONS = 4096
CONNECT_TIMEOUT = 10.0
# duplicate_database, duplicate_object, unique_violation (pg_database/pg_authid indexes):
# what a CREATE DATABASE or CREATE ROLE racing another run's gets.
ALREADY_EXISTS = frozenset({"42P04", "42710", "23505"})
BOOTSTRAP_ATTEMPTS = 3


class RoleDsn(msgspec.Struct, frozen=True):
    role: str
    dsn: str
    password: str | None
    generated: bool


class InitReport(msgspec.Struct, frozen=True):
    database: str
    created_database: bool
    migrate: MigrateReport
    roles: list[RoleDsn]


def scram_verifier(
    password: str, *, salt: bytes | None = None, iterations: int = SCRAM_ITERATIONS
) -> str:
    """A PostgreSQL SCRAM-SHA-256 verifier (RFC 5802/7677) for ``password``."""
    salt = salt or secrets.token_bytes(16)
    normalized = unicodedata.normalize("NFKC", password).encode("utf-8")
    salted = hashlib.pbkdf2_hmac("sha256", normalized, salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    b64 = base64.b64encode
    return (
        f"SCRAM-SHA-256${iterations}:{b64(salt).decode()}"
        f"${b64(stored_key).decode()}:{b64(server_key).decode()}"
    )


def password_env(role: str) -> str:
    return "QLSCHED_" + role.removeprefix("qlsched_").upper() + "_PASSWORD"


async def _require_superuser(conn: Connection) -> str:
    version, superuser, _ = await server_facts(conn)
    if version < MIN_SERVER_VERSION:
        raise MigrationError(f"PostgreSQL {version // 10000} is too old: qlsched needs 15 or newer")
    if not superuser:
        raise MigrationError("init-db needs a superuser DSN (this role is not a superuser)")
    return str(version)


async def _create_database(conn: Connection, database: str) -> bool:
    """CREATE DATABASE unless it exists; False when it existed (or another run made it)."""
    if await conn.fetchval(query("database_exists"), database):
        return False
    statement = await conn.fetchval(query("create_database_statement"), database)
    try:
        await conn.execute(statement)
    except Exception as exc:
        # A run not serialised by init_lock (another maintenance database) got there first.
        if sqlstate(exc) in ALREADY_EXISTS and await conn.fetchval(
            query("database_exists"), database
        ):
            return False
        raise
    return True


async def _migrate(conn: Connection, timeouts: RoleTimeouts | None) -> MigrateReport:
    """``migrate``, again when its bootstrap lost a CREATE ROLE race (it is idempotent)."""
    attempt = 1
    while True:
        try:
            return await migrate(conn, timeouts)
        except Exception as exc:
            if sqlstate(exc) not in ALREADY_EXISTS or attempt >= BOOTSTRAP_ATTEMPTS:
                raise
            attempt += 1


def check_database_name(database: str) -> None:
    """A name PostgreSQL keeps as given: 1..63 bytes, no NUL (longer ones are truncated)."""
    if not database or len(database.encode("utf-8")) > 63 or "\x00" in database:
        raise ConfigError(f"database name {database!r}: expected 1..63 bytes")


async def init_db(
    superuser_dsn: str,
    *,
    database: str = "qlsched",
    timeouts: RoleTimeouts | None = None,
    env: Mapping[str, str] | None = None,
    want_passwords: bool | None = None,
) -> InitReport:
    """Create the database when missing, bootstrap, migrate, set passwords; return DSNs.

    ``want_passwords`` None means: generate passwords only when the superuser DSN itself
    carries one (trust/peer setups need none).

    Concurrent runs are safe: each holds ``init_lock`` on the DSN's own (maintenance)
    database for the whole run, so runs through one maintenance database take turns; runs
    through different ones may still race, and then an "already exists" answer (42P04,
    42710, 23505 on a catalog) means another run made it: the database is re-checked, the
    bootstrap (idempotent) is run again.
    """
    check_dsn(superuser_dsn)
    check_database_name(database)
    environ = os.environ if env is None else env
    if want_passwords is None:
        want_passwords = has_password(superuser_dsn)
    target = with_credentials(
        superuser_dsn,
        user=user_of(superuser_dsn) or environ.get("PGUSER") or "postgres",
        password=password_of(superuser_dsn),
        database=database,
    )

    async def setup(conn: Connection) -> tuple[MigrateReport, list[RoleDsn]]:
        await _require_superuser(conn)
        report = await _migrate(conn, timeouts)
        roles: list[RoleDsn] = []
        for role in LOGIN_ROLES:
            given = environ.get(password_env(role))
            has = bool(await conn.fetchval(query("role_has_password"), role))
            password: str | None = given
            generated = False
            if password is None and want_passwords and not has:
                password, generated = secrets.token_urlsafe(24), True
            if password is not None:
                statement = await conn.fetchval(
                    query("role_password_statement"), role, scram_verifier(password)
                )
                await conn.execute(statement)
            roles.append(
                RoleDsn(
                    role=role,
                    dsn=with_credentials(
                        superuser_dsn, user=role, password=password, database=database
                    ),
                    password=password,
                    generated=generated,
                )
            )
        return report, roles

    async def run(conn: Connection) -> InitReport:
        await _require_superuser(conn)
        # Released by init_unlock, or by closing the session when the run fails.
        await conn.execute(query("init_lock"))
        created = await _create_database(conn, database)
        # A second connection from inside connect_once (already on the asyncio side).
        target_conn = await connect(target, connect_timeout=CONNECT_TIMEOUT)
        try:
            report, roles = await setup(target_conn)
        finally:
            await target_conn.close(timeout=5)
        await conn.execute(query("init_unlock"))
        return InitReport(database=database, created_database=created, migrate=report, roles=roles)

    return await connect_once(superuser_dsn, run, connect_timeout=CONNECT_TIMEOUT)
