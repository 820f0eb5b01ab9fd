"""Checksummed, forward-only migrations of an Edge file, checked at every start.

``schema/sqlite/NNNN_name.sql`` (shipped in the wheel as ``qlsched/_schema/sqlite``) are
applied in order inside ``BEGIN IMMEDIATE``, each recorded with its SHA-256 in
``schema_migrations``; ``ledger.sql`` creates the ledger and marks the file as qlsched's
(``PRAGMA application_id``). A start refuses, naming the cause: a foreign SQLite file, a
migration applied here but changed or unknown to this version, or a catalog (tables,
columns, indexes) that differs from what the migrations define.
"""

from __future__ import annotations

import sqlite3
from importlib.abc import Traversable

from qlsched.migrations import Migration, read_migrations, shipped_schema
from qlsched.sqlite.errors import EdgeSchemaError
from qlsched.sqlite.queries import query

EDGE_APPLICATION_ID = 0x716C7363
"""``'qlsc'``: written by ``ledger.sql``; any other non-zero id is another program's file."""


def schema_dir() -> Traversable:
    """The SQL files: inside the installed wheel, else the source tree's ``schema/sqlite``."""
    return shipped_schema("sqlite", EdgeSchemaError)


def load_migrations(directory: Traversable | None = None) -> list[Migration]:
    return read_migrations(directory or schema_dir(), EdgeSchemaError)


def statements(script: str) -> list[str]:
    """A script split into complete statements (sqlite3's own tokenizer decides the ends),
    so each runs inside the caller's transaction: ``executescript`` would commit first."""
    out: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            out.append(buffer.strip())
            buffer = ""
    if buffer.strip() and not all(
        ln.strip().startswith("--") or not ln.strip() for ln in buffer.splitlines()
    ):
        raise EdgeSchemaError("a schema file ends inside a statement")
    return out


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    for statement in statements(script):
        conn.execute(statement)


def _ledger_sql(directory: Traversable) -> str:
    return directory.joinpath("ledger.sql").read_text(encoding="utf-8")


def expected_catalog(directory: Traversable | None = None) -> list[tuple[str, str, str]]:
    """What the migrations define, built in a throwaway in-memory database."""
    directory = directory or schema_dir()
    mem = sqlite3.connect(":memory:", isolation_level=None)
    try:
        _run_script(mem, _ledger_sql(directory))
        for mig in load_migrations(directory):
            _run_script(mem, mig.sql)
        return [tuple(r) for r in mem.execute(query("catalog"))]
    finally:
        mem.close()


def _check_ledger(
    path: str, applied: list[tuple[int, str, str]], known: dict[int, Migration]
) -> None:
    for version, name, checksum in applied:
        mig = known.get(version)
        if mig is None:
            newest = max(known, default=0)
            raise EdgeSchemaError(
                f"{path}: migration {version:04d} ({name}) was applied by a newer qlsched"
                f" (this one knows up to {newest:04d}); refusing to use the file"
            )
        if mig.checksum != checksum or mig.name != name:
            raise EdgeSchemaError(
                f"{path}: migration {mig.name} differs from the one applied to this file"
                " (checksum); refusing to use the file"
            )


def _check_catalog(conn: sqlite3.Connection, path: str, directory: Traversable) -> None:
    want = {(t, n): s for t, n, s in expected_catalog(directory)}
    have = {(t, n): s for t, n, s in conn.execute(query("catalog"))}
    for key in sorted(want.keys() | have.keys()):
        kind, name = key
        if key not in have:
            raise EdgeSchemaError(f"{path}: {kind} {name} is missing; refusing to use the file")
        if key not in want:
            raise EdgeSchemaError(f"{path}: unexpected {kind} {name}; refusing to use the file")
        if want[key] != have[key]:
            raise EdgeSchemaError(
                f"{path}: {kind} {name} differs from its migration; refusing to use the file"
            )


def _check_foreign_keys(conn: sqlite3.Connection, path: str) -> None:
    """Refuse to commit migrations that left a row pointing nowhere."""
    broken = conn.execute(query("foreign_key_check")).fetchone()
    if broken is not None:
        raise EdgeSchemaError(
            f"{path}: a migration left {broken[0]} rows without their {broken[2]} row;"
            " nothing was applied"
        )


def _identify(conn: sqlite3.Connection, path: str) -> tuple[int, set[str]]:
    app_id = int(conn.execute(query("application_id")).fetchone()[0])
    tables = {str(r[0]) for r in conn.execute(query("table_names"))}
    if app_id == 0 and not tables:
        return app_id, tables
    if app_id != EDGE_APPLICATION_ID:
        raise EdgeSchemaError(
            f"{path}: not a qlsched Edge database (a foreign SQLite file: application_id"
            f" {app_id}, {len(tables)} tables); refusing to touch it"
        )
    if "schema_migrations" not in tables:
        raise EdgeSchemaError(f"{path}: the migration ledger is missing; refusing to use the file")
    return app_id, tables


def check_schema(conn: sqlite3.Connection, path: str, *, apply: bool, now_ms: int) -> list[str]:
    """Check the file's schema; with ``apply``, create it or apply pending migrations first.

    Returns:
        The names of the migrations applied now (empty when the file was up to date).

    Raises:
        EdgeSchemaError: foreign, changed, newer or incomplete schema (the message says which).
        sqlite3.Error: SQLite failed (a corrupt file, a full disk): the caller classifies it.
    """
    directory = schema_dir()
    migrations = load_migrations(directory)
    known = {m.version: m for m in migrations}
    app_id, _ = _identify(conn, path)
    if app_id == 0 and not apply:
        raise EdgeSchemaError(
            f"{path}: an empty file, not yet an Edge database (publish a file to create it)"
        )
    applied_now: list[str] = []
    if apply:
        enforced = bool(conn.execute(query("foreign_keys_get")).fetchone()[0])
        # A migration may rebuild a referenced table (SQLite's documented way to change a
        # CHECK): enforcement is off during the transaction and checked whole before COMMIT.
        conn.execute(query("foreign_keys_off"))
        conn.execute(query("begin_immediate"))
        try:
            # Again under the write lock: another process may have migrated meanwhile.
            app_id, _ = _identify(conn, path)
            if app_id == 0:
                _run_script(conn, _ledger_sql(directory))
            applied = [tuple(r) for r in conn.execute(query("migrations_applied"))]
            _check_ledger(path, applied, known)
            done = {int(r[0]) for r in applied}
            for mig in migrations:
                if mig.version not in done:
                    _run_script(conn, mig.sql)
                    conn.execute(
                        query("migration_record"), (mig.version, mig.name, mig.checksum, now_ms)
                    )
                    applied_now.append(mig.name)
            _check_foreign_keys(conn, path)
            conn.execute(query("commit"))
        except BaseException:
            if conn.in_transaction:
                conn.execute(query("rollback"))
            raise
        finally:
            if enforced:
                conn.execute(query("foreign_keys_on"))
    applied = [tuple(r) for r in conn.execute(query("migrations_applied"))]
    _check_ledger(path, applied, known)
    pending = [m.name for m in migrations if m.version not in {int(r[0]) for r in applied}]
    if pending:
        raise EdgeSchemaError(
            f"{path}: {len(pending)} migration(s) pending ({pending[0]}...): run"
            " `qlsched edge publish` or `qlsched edge run` to apply them"
        )
    _check_catalog(conn, path, directory)
    return applied_now
