"""Schema readiness: fail closed unless the database is exactly what this code expects.

Ready means: PostgreSQL 15+, every migration applied with a matching checksum, the
capability present, and the whole catalog of schema qlsched equal to the reference the
shipped migrations define (contract §4; ``qlsched.postgres.catalog`` says where the
reference comes from and why the schema's owner cannot forge it): relations, columns with
types, defaults and nullability, constraints and indexes by definition, triggers, rules,
policies and row-level security, functions by body, and every grant with its grant option
(an extra grant fails as surely as a missing one). Besides: the database's own grants as
the bootstrap sets them (CONNECT for admin, runtime, observer and worker, nothing for
PUBLIC), no
role with superuser/createrole/createdb/replication/bypassrls/inherit, no membership in
either direction (no qlsched role in another role, no role in a qlsched role), EXECUTE kept
from PUBLIC by default privileges, every SECURITY DEFINER function with a pinned
search_path, and the runtime role's idle-in-transaction, lock and statement timeouts set
and below the lease; no setting that voids a promise (``promises``: synchronous_commit
off, session_replication_role, search_path, default_transaction_read_only, a publication
of a qlsched table, large objects open to PUBLIC, no observer statement_timeout). Every
finding is one line naming the object; the lifecycle never
starts while there is one.

A role that may not read something (SQLSTATE 42501, e.g. the admin role and the ledger, or
a role with no grant at all) gets a finding naming what it could not read and the role,
and the rest is still checked: not being able to look is never "ready". Run it outside a
transaction block (each read is its own statement).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec

from qlsched.migrations import Migration
from qlsched.postgres.catalog import (
    Grant,
    Shape,
    compare,
    digest,
    grant_rows,
    read_shape,
)
from qlsched.postgres.errors import sqlstate
from qlsched.postgres.migrate import (
    MIN_SERVER_VERSION,
    bootstrap_sql,
    load_migrations,
    verify_ledger,
)
from qlsched.postgres.pool import Connection
from qlsched.postgres.promises import promise_findings
from qlsched.postgres.queries import query

INSUFFICIENT_PRIVILEGE = "42501"

CAPABILITY = ("qlsched.cluster_scheduler", 1)
ROLES = (
    "qlsched_owner",
    "qlsched_admin",
    "qlsched_runtime",
    "qlsched_worker_ingress",
    "qlsched_observer",
    "qlsched_worker",
)
LOGIN_ROLES = frozenset(ROLES) - {"qlsched_owner"}


def expected_database_grants(database: str) -> dict[Grant, bool]:
    """The bootstrap's grants on the database itself (they name it, so no migration does):
    CONNECT for the four LOGIN roles that need it, nothing for PUBLIC."""
    return {
        ("database", database, None, role, "CONNECT"): False
        for role in ("qlsched_admin", "qlsched_runtime", "qlsched_observer", "qlsched_worker")
    }


class Readiness(msgspec.Struct, frozen=True):
    ready: bool
    findings: list[str]
    server_version: int
    applied: list[str]


_DURATION = re.compile(r"^(\d+)\s*(ms|s|min|h|d)?$")
_UNIT_MS = {None: 1, "ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def setting_ms(value: str) -> int | None:
    """A PostgreSQL duration setting in milliseconds (bare numbers are milliseconds)."""
    m = _DURATION.match(value.strip())
    if m is None:
        return None
    return int(m.group(1)) * _UNIT_MS[m.group(2)]


class _Reading:
    """What a guarded block is reading now (set before each statement, for the finding)."""

    def __init__(self, what: str) -> None:
        self.what = what


@asynccontextmanager
async def _guard(findings: list[str], role: str, what: str) -> AsyncIterator[_Reading]:
    """Turn "permission denied" inside the block into a finding; anything else propagates."""
    reading = _Reading(what)
    try:
        yield reading
    except Exception as exc:
        if sqlstate(exc) != INSUFFICIENT_PRIVILEGE:
            raise
        findings.append(
            f"cannot read {reading.what}: permission denied to role {role} "
            f"(SQLSTATE {INSUFFICIENT_PRIVILEGE}); check as the runtime, observer or a superuser"
        )


async def _reference(
    conn: Connection,
    pinned: str | None,
    files: list[Migration],
    bootstrap: str,
    findings: list[str],
) -> Shape | None:
    """The recorded expected catalog, or None (with a finding) when it cannot be trusted."""
    # Read and hashed at every check, never cached: an altered reference is tampering to
    # report even while this process still holds a good copy.
    shape: Shape = {
        (str(r["kind"]), str(r["object"])): str(r["definition"])
        for r in await conn.fetch(query("catalog_reference_rows"))
    }
    if pinned is None:
        findings.append(
            "the catalog reference has no pinned digest (qlsched.catalog_digest):"
            " run `qlsched migrate` as a superuser"
        )
        return None
    if digest(shape, files, bootstrap) != pinned:
        findings.append(
            "the catalog reference qlsched.catalog_reference does not match its pinned digest"
            " (altered after `migrate` wrote it, or written for other migrations):"
            " run `qlsched migrate` as a superuser"
        )
        return None
    return shape


async def check_readiness(conn: Connection, *, lease_ms: int) -> Readiness:
    """Collect every finding (never stop at the first) and say whether the schema is ready.

    Runs with the planner's defaults whatever the connection's pool set, and gives the
    connection back with its own settings. On an error the connection is closed instead:
    a pool that keeps sessions (``open_database(reset_session=False)``) would otherwise lend
    it out again with the planner's defaults."""
    await conn.execute(query("planner_defaults"))
    try:
        readiness = await _check_readiness(conn, lease_ms=lease_ms)
    except BaseException:
        conn.terminate()
        raise
    await conn.execute(query("planner_restore"))
    return readiness


async def _check_readiness(conn: Connection, *, lease_ms: int) -> Readiness:
    findings: list[str] = []
    row = await conn.fetchrow(query("readiness_facts"))
    assert row is not None
    version_num, database = int(row["version_num"]), str(row["database"])
    role = str(row["role"])
    pinned = None if row["catalog_digest"] is None else str(row["catalog_digest"])
    if row["database_owner"] in ROLES:
        findings.append(
            f"database {database} is owned by {row['database_owner']}, which could rewrite"
            " the pinned catalog digest"
        )
    if version_num < MIN_SERVER_VERSION:
        findings.append(f"PostgreSQL {version_num // 10000} is too old: 15 or newer is needed")

    applied_names, expected = await _ledger(conn, role, pinned, findings)
    async with _guard(findings, role, "the catalog (pg_catalog)"):
        live, on_database = await read_shape(conn)
        if expected is not None:
            findings += compare(live, expected)
        want = expected_database_grants(database)
        findings += compare(grant_rows(on_database), grant_rows(want))

    async with _guard(findings, role, "the owners of qlsched objects (pg_class)"):
        for r in await conn.fetch(query("object_owners")):
            findings.append(f"{r['object']} is owned by {r['owner']}, not qlsched_owner")

    await _role_findings(conn, role, findings)

    async with _guard(findings, role, "the default privileges (pg_default_acl)"):
        if not await conn.fetchval(query("default_function_acl")):
            findings.append("default privileges do not revoke EXECUTE on functions from PUBLIC")
    async with _guard(findings, role, "the qlsched functions (pg_proc)"):
        for r in await conn.fetch(query("unpinned_definer_functions")):
            findings.append(f"SECURITY DEFINER function {r[0]} has no pinned search_path")

    await _runtime_settings(conn, role, lease_ms, findings)

    async with _guard(findings, role, "the settings that keep the promises (pg_db_role_setting)"):
        findings += await promise_findings(conn)

    return Readiness(
        ready=not findings,
        findings=findings,
        server_version=version_num,
        applied=applied_names,
    )


async def _ledger(
    conn: Connection, role: str, pinned: str | None, findings: list[str]
) -> tuple[list[str], Shape | None]:
    """The ledger against the shipped files, the capability, and the catalog reference the
    live catalog is compared with (None when the ledger is not complete)."""
    files, bootstrap = load_migrations(), bootstrap_sql()
    applied_names: list[str] = []
    expected: Shape | None = None
    async with _guard(findings, role, "schema qlsched") as reading:
        if not await conn.fetchval(query("ledger_exists")):
            findings.append("schema qlsched is not installed (run `qlsched init-db`)")
        else:
            reading.what = "the migration ledger qlsched.schema_migrations"
            rows = await conn.fetch(query("migrations_applied"))
            applied = [(int(r["version"]), str(r["name"]), str(r["checksum"])) for r in rows]
            applied_names = [name for _, name, _ in applied]
            findings += verify_ledger(applied, files)
            done = {v for v, _, _ in applied}
            findings += [
                f"migration {m.name} is not applied" for m in files if m.version not in done
            ]
            if all(m.version in done for m in files):
                reading.what = "the capability table qlsched.capability"
                version = await conn.fetchval(query("capability_version"), CAPABILITY[0])
                if version is None:
                    findings.append(f"capability {CAPABILITY[0]} is missing")
                elif int(version) < CAPABILITY[1]:
                    findings.append(
                        f"capability {CAPABILITY[0]} is version {version}, need {CAPABILITY[1]}"
                    )
                reading.what = "the catalog reference qlsched.catalog_reference"
                expected = await _reference(conn, pinned, files, bootstrap, findings)
    return applied_names, expected


async def _role_findings(conn: Connection, role: str, findings: list[str]) -> None:
    """Each role's attributes and memberships as the bootstrap leaves them."""
    async with _guard(findings, role, "the role attributes (pg_roles)"):
        seen: set[str] = set()
        for r in await conn.fetch(query("role_attributes")):
            name = str(r["role"])
            seen.add(name)
            if r["rolinherit"]:
                findings.append(f"role {name} has INHERIT")
            for attr, label in (
                ("rolsuper", "SUPERUSER"),
                ("rolcreaterole", "CREATEROLE"),
                ("rolcreatedb", "CREATEDB"),
                ("rolreplication", "REPLICATION"),
                ("rolbypassrls", "BYPASSRLS"),
            ):
                if r[attr]:
                    findings.append(f"role {name} has {label}")
            if bool(r["rolcanlogin"]) != (name in LOGIN_ROLES):
                findings.append(
                    f"role {name} should be {'LOGIN' if name in LOGIN_ROLES else 'NOLOGIN'}"
                )
        findings += [f"role {name} is missing" for name in ROLES if name not in seen]

    async with _guard(findings, role, "the role memberships (pg_auth_members)"):
        for r in await conn.fetch(query("role_memberships")):
            findings.append(f"role {r['member']} is a member of {r['granted']}")


async def _runtime_settings(
    conn: Connection, role: str, lease_ms: int, findings: list[str]
) -> None:
    """The runtime role's timeouts: set, positive, and below the lease."""
    async with _guard(findings, role, "the runtime role's settings (pg_db_role_setting)"):
        settings: dict[str, str] = {}
        for r in await conn.fetch(query("runtime_settings")):
            name, _, value = str(r["setting"]).partition("=")
            settings[name] = value
        for name in ("idle_in_transaction_session_timeout", "lock_timeout", "statement_timeout"):
            raw = settings.get(name)
            ms = setting_ms(raw) if raw is not None else None
            if raw is None:
                findings.append(f"qlsched_runtime has no {name} set")
            elif ms is None or ms <= 0:
                findings.append(f"qlsched_runtime {name}={raw} is not a positive duration")
            elif ms >= lease_ms:
                findings.append(
                    f"qlsched_runtime {name}={raw} is not below the lease ({lease_ms} ms)"
                )
