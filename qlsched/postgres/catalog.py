"""The expected catalog (contract §4): what the shipped migrations define, recorded by
``migrate`` and compared by readiness against the live catalog, object by object.

Where the reference comes from, and why it cannot be forged silently:

- **Built from the files, never from the live schema.** ``migrate`` (as a superuser) builds
  the reference in a savepoint that is always rolled back: it moves the live schema aside
  (``ALTER SCHEMA ... RENAME``), runs ``bootstrap.sql`` and every shipped migration into a
  pristine ``qlsched`` beside it, reads that shape, and rolls all of it back. A live schema
  that was tampered with before a later ``migrate`` is therefore never laundered into the
  reference. Nothing in it is a hand list: a new migration is in the reference by being
  shipped. Rejected: a snapshot of the live catalog right after migrating (it records
  whatever was there), and a fingerprint generated into the wheel (it differs between
  PostgreSQL versions and goes stale with every migration).
- **Stored where the roles can read it, pinned where the owner cannot write.** The rows go
  to ``qlsched.catalog_reference`` (SELECT for runtime and observer, so findings name each
  object). Its SHA-256, over the rows, ``bootstrap.sql`` and the shipped migrations'
  checksums, is pinned as the database-wide setting ``qlsched.catalog_digest``, which only
  a superuser or the database owner can change (``ALTER DATABASE ... SET``). Whoever can
  ALTER the schema (``qlsched_owner``) can rewrite the rows, and even drop and recreate the
  table, but not the digest: readiness then reports the reference as altered. A role's or a
  session's own setting of that name is ignored (readiness reads ``pg_db_role_setting`` for
  the database alone), and a database owned by a qlsched role is itself a finding.

The shape is one catalog query (``catalog_shape``) plus the grants (``acl_entries``).
``migrate`` builds the reference once per process per file set and server version;
readiness reads and hashes the stored rows at every check (a few hundred short rows).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec
from asyncpg import Record

from qlsched.postgres.pool import Connection
from qlsched.postgres.queries import query
from qlsched.postgres.timeouts import RoleTimeouts, apply_role_timeouts

if TYPE_CHECKING:
    from qlsched.migrations import Migration

Key = tuple[str, str]  # kind, object
Shape = dict[Key, str]  # -> definition
Grant = tuple[str, str, str | None, str, str]  # kind, object, column, grantee, privilege

GRANT = "grant"
WITH_GRANT_OPTION = "WITH GRANT OPTION"


def grant_text(g: Grant) -> str:
    kind, obj, col, grantee, priv = g
    target = f"{obj}({col})" if col else obj
    return f"{priv} on {kind} {target} to {grantee}"


def grants_of(rows: Iterable[Record]) -> dict[Grant, bool]:
    """``acl_entries`` rows as grant -> whether it carries the grant option."""
    out: dict[Grant, bool] = {}
    for r in rows:
        col = r["col"]
        g: Grant = (
            str(r["kind"]),
            str(r["object"]),
            None if col is None else str(col),
            str(r["grantee"]),
            str(r["privilege"]),
        )
        out[g] = bool(r["grantable"]) or out.get(g, False)
    return out


def grant_rows(grants: Mapping[Grant, bool]) -> Shape:
    """Grants as shape rows: the grant is the object, the grant option its definition."""
    return {(GRANT, grant_text(g)): WITH_GRANT_OPTION if o else "" for g, o in grants.items()}


async def read_shape(conn: Connection) -> tuple[Shape, dict[Grant, bool]]:
    """The live shape of schema qlsched with its grants, and apart the grants on the
    database itself (they name the database and come from the bootstrap, not from the
    migrations)."""
    shape: Shape = {
        (str(r["kind"]), str(r["object"])): str(r["definition"] or "")
        for r in await conn.fetch(query("catalog_shape"))
    }
    grants = grants_of(await conn.fetch(query("acl_entries")))
    shape |= grant_rows({g: o for g, o in grants.items() if g[0] != "database"})
    return shape, {g: o for g, o in grants.items() if g[0] == "database"}


def digest(shape: Shape, files: Sequence[Migration], bootstrap: str) -> str:
    """SHA-256 over the rows, ``bootstrap.sql`` and the migrations they were built from."""
    doc = [
        hashlib.sha256(bootstrap.encode("utf-8")).hexdigest(),
        [m.checksum for m in files],
        sorted([k, o, d] for (k, o), d in shape.items()),
    ]
    return hashlib.sha256(msgspec.json.encode(doc)).hexdigest()


class _Discard(Exception):
    """Raised to roll the reference build back (its savepoint must never commit)."""


_built: dict[tuple[int, str], Shape] = {}


async def build_reference(
    conn: Connection,
    files: Sequence[Migration],
    bootstrap: str,
    timeouts: RoleTimeouts,
    server_version: int,
) -> Shape:
    """The shape the shipped files build, in a rolled-back transaction (superuser only).

    Kept once per process per server version and file set: the same files on the same
    server version build the same shape.
    """
    key = (server_version, digest({}, files, bootstrap))
    if key in _built:
        return _built[key]
    shape: Shape = {}
    try:
        async with conn.transaction():
            await conn.execute(query("catalog_build_set_aside"))
            await apply_role_timeouts(conn, timeouts)
            await conn.execute(bootstrap)
            await conn.execute(query("become_owner"))
            for mig in files:
                await conn.execute(mig.sql)
            await conn.execute(query("catalog_build_search_path"))
            shape, _ = await read_shape(conn)
            raise _Discard
    except _Discard:
        pass
    _built[key] = shape
    return shape


async def record_reference(
    conn: Connection,
    files: Sequence[Migration],
    bootstrap: str,
    timeouts: RoleTimeouts,
    server_version: int,
) -> None:
    """Rebuild the reference from the files, store its rows and pin its digest (superuser)."""
    shape = await build_reference(conn, files, bootstrap, timeouts, server_version)
    keys = sorted(shape)
    async with conn.transaction():
        await conn.execute(query("catalog_reference_clear"))
        await conn.execute(
            query("catalog_reference_insert"),
            [k for k, _ in keys],
            [o for _, o in keys],
            [shape[k] for k in keys],
        )
        statement = await conn.fetchval(
            query("catalog_digest_statement"), digest(shape, files, bootstrap)
        )
        await conn.execute(statement)


def _line(text: str | None) -> str | None:
    """A definition on one line (a finding is one line; view and rule text span several)."""
    return None if text is None else " ".join(text.split())


def compare(live: Shape, expected: Shape) -> list[str]:
    """One finding per object that is missing, unexpected or defined differently."""
    findings: list[str] = []
    for key in sorted(expected.keys() | live.keys()):
        kind, obj = key
        want, have = _line(expected.get(key)), _line(live.get(key))
        if want == have:
            continue
        if kind == GRANT:
            if want is None:
                findings.append(f"extra grant: {obj}" + (f" {have}" if have else ""))
            elif have is None:
                findings.append(f"missing grant: {obj}")
            else:
                findings.append(f"grant {obj} " + ("has " + have if have else "lost " + want))
        elif want is None:
            shown = "" if kind == "function" else f": {have}"
            findings.append(f"unexpected {kind} {obj}{shown}")
        elif have is None:
            findings.append(f"{kind} {obj} is missing (expected: {want})")
        elif kind == "function":
            findings.append(f"function {obj} differs from the migrations (body or attributes)")
        else:
            findings.append(f"{kind} {obj} differs from the migrations: {have} (expected: {want})")
    return findings
