"""``init-db``: database, roles, passwords, schema. Superuser only; idempotent.

Passwords never reach the server in plain text: each is sent as a SCRAM-SHA-256 verifier
computed here. A role that already has a password keeps it unless one is given in
``QLSCHED_<ROLE>_PASSWORD``; a generated password is returned once for showing and nowhere
else. The DSNs meant for showing (``RoleDsn.shown``) never carry a password from the
environment or the superuser's DSN. Runs started together are safe (see ``init_db``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import unicodedata
from collections.abc import Mapping
from typing import Literal

import msgspec

from qlsched.core.config import ConfigError
from qlsched.postgres.dsn import (
    as_uri,
    check_dsn,
    has_password,
    with_credentials,
    with_database,
)
from qlsched.postgres.errors import sqlstate
from qlsched.postgres.migrate import (
    MIN_SERVER_VERSION,
    MigrateReport,
    MigrationError,
    migrate,
    server_facts,
)
from qlsched.postgres.pool import Connection, connect, connect_once
from qlsched.postgres.queries import query
from qlsched.postgres.timeouts import RoleTimeouts

LOGIN_ROLES = (
    "qlsched_admin",
    "qlsched_runtime",
    "qlsched_worker_ingress",
    "qlsched_observer",
    "qlsched_worker",
)
SCRAM_ITERATIONS = 4096
CONNECT_TIMEOUT = 10.0
# duplicate_database, duplicate_object, unique_violation (pg_database/pg_authid indexes):
# what a CREATE DATABASE or CREATE ROLE racing another run's gets.
ALREADY_EXISTS = frozenset({"42P04", "42710", "23505"})
BOOTSTRAP_ATTEMPTS = 3


PasswordSource = Literal["generated", "environment"]
PASSWORD_AUTH_METHODS = frozenset({"password", "md5", "scram-sha-256"})
"""``pg_hba`` methods that check a password stored in the server."""


class RoleDsn(msgspec.Struct, frozen=True):
    """One LOGIN role's DSN.

    ``dsn`` connects (it carries the password set by this run, wherever it came from): for
    the caller's own use, never for printing. ``bare`` never carries a password; ``shown``
    (the one to print) carries one only when this run generated it.
    """

    role: str
    dsn: str
    bare: str
    password: str | None
    source: PasswordSource | None
    """Where the password set by this run came from; None when none was set."""

    @property
    def generated(self) -> bool:
        return self.source == "generated"

    @property
    def shown(self) -> str:
        return self.dsn if self.generated else self.bare


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


async def _require_superuser(conn: Connection) -> int:
    version, superuser, _ = await server_facts(conn)
    if version < MIN_SERVER_VERSION:
        raise MigrationError(f"PostgreSQL {version // 10000} is too old: qlsched needs 15 or newer")
    if not superuser:
        raise MigrationError("init-db needs a superuser DSN (this role is not a superuser)")
    return version


async def _uses_password_auth(conn: Connection, version: int) -> bool:
    """Whether the server checked this session's password (PostgreSQL 16+ says; older
    servers cannot, and the caller falls back to what the client side knows)."""
    if version < 160000:
        return False
    method = await conn.fetchval(query("session_auth_method"))
    return method in PASSWORD_AUTH_METHODS


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

    ``want_passwords`` None means: generate passwords only when the superuser logged in
    with one: its DSN carries one (any form), ``PGPASSWORD`` is set, or the server says it
    checked one (PostgreSQL 16+, which also covers a password file). Trust and peer
    setups need none.

    Concurrent runs are safe: each holds ``init_lock`` on the DSN's own (maintenance)
    database for the whole run, so runs through one maintenance database take turns; runs
    through different ones may still race, and then an "already exists" answer (42P04,
    42710, 23505 on a catalog) means another run made it: the database is re-checked, the
    bootstrap (idempotent) is run again.
    """
    superuser_dsn = as_uri(superuser_dsn)  # libpq's keyword=value form too
    check_dsn(superuser_dsn)
    check_database_name(database)
    environ = os.environ if env is None else env
    # The same login (userinfo, query, PG* variables, password file) to the new database.
    target = with_database(superuser_dsn, database)

    async def setup(conn: Connection, generate: bool) -> tuple[MigrateReport, list[RoleDsn]]:
        await _require_superuser(conn)
        report = await _migrate(conn, timeouts)
        roles: list[RoleDsn] = []
        for role in LOGIN_ROLES:
            password = environ.get(password_env(role))
            source: PasswordSource | None = "environment" if password is not None else None
            has = bool(await conn.fetchval(query("role_has_password"), role))
            if password is None and generate and not has:
                password, source = secrets.token_urlsafe(24), "generated"
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
                    bare=with_credentials(superuser_dsn, user=role, database=database),
                    password=password,
                    source=source,
                )
            )
        return report, roles

    async def run(conn: Connection) -> InitReport:
        version = await _require_superuser(conn)
        generate = want_passwords
        if generate is None:
            generate = (
                has_password(superuser_dsn)
                or bool(environ.get("PGPASSWORD"))
                or await _uses_password_auth(conn, version)
            )
        # Released by init_unlock, or by closing the session when the run fails.
        await conn.execute(query("init_lock"))
        created = await _create_database(conn, database)
        # A second connection from inside connect_once (already on the asyncio side).
        target_conn = await connect(target, connect_timeout=CONNECT_TIMEOUT)
        try:
            report, roles = await setup(target_conn, generate)
        finally:
            await target_conn.close(timeout=5)
        await conn.execute(query("init_unlock"))
        return InitReport(database=database, created_database=created, migrate=report, roles=roles)

    return await connect_once(superuser_dsn, run, connect_timeout=CONNECT_TIMEOUT)
