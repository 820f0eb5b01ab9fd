"""``init-db``: database, roles, passwords, schema. Superuser only; idempotent.

Passwords never reach the server in plain text: each is sent as a SCRAM-SHA-256 verifier
computed here. A role that already has a password keeps it unless one is given in
``QLSCHED_<ROLE>_PASSWORD``; a generated password is returned once for printing and
nowhere else.
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

from qlsched.postgres.dsn import has_password, password_of, user_of, with_credentials
from qlsched.postgres.migrate import (
    MIN_SERVER_VERSION,
    MigrateReport,
    MigrationError,
    RoleTimeouts,
    migrate,
    server_facts,
)
from qlsched.postgres.pool import Connection, connect_once
from qlsched.postgres.queries import query

LOGIN_ROLES = ("qlsched_admin", "qlsched_runtime", "qlsched_worker_ingress", "qlsched_observer")
SCRAM_ITERATIONS = 4096


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
    """
    environ = os.environ if env is None else env
    if want_passwords is None:
        want_passwords = has_password(superuser_dsn)

    async def create(conn: Connection) -> bool:
        await _require_superuser(conn)
        if await conn.fetchval(query("database_exists"), database):
            return False
        statement = await conn.fetchval(query("create_database_statement"), database)
        await conn.execute(statement)
        return True

    created = await connect_once(superuser_dsn, create)
    target = with_credentials(
        superuser_dsn,
        user=user_of(superuser_dsn) or environ.get("PGUSER") or "postgres",
        password=password_of(superuser_dsn),
        database=database,
    )

    async def setup(conn: Connection) -> tuple[MigrateReport, list[RoleDsn]]:
        await _require_superuser(conn)
        report = await migrate(conn, timeouts)
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

    report, roles = await connect_once(target, setup)
    return InitReport(database=database, created_database=created, migrate=report, roles=roles)
