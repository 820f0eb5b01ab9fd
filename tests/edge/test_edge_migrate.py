"""The Edge file's migration check (docs/contract.md §12, issue #19 items 2 and 6): numbered,
checksummed migrations, checked at every start; a foreign, corrupt, changed or newer file
is refused with one clear line and exit 1, and a foreign file is not modified."""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
from pathlib import Path

import pytest

from qlsched.sqlite.errors import EdgeSchemaError
from qlsched.sqlite.migrate import EDGE_APPLICATION_ID, load_migrations, schema_dir
from tests.edge.support import REPO, publish_file, qlsched, read


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def published(tmp_path: Path) -> Path:
    db = tmp_path / "edge.sqlite3"
    toml = publish_file(tmp_path / "t.toml", 2)
    assert qlsched("edge", "publish", str(toml), "--db", str(db)).returncode == 0
    return db


def refused(db: Path, tmp_path: Path, expected: str) -> None:
    """Publish, run and status all refuse ``db`` with exit 1 and one line containing
    ``expected``."""
    toml = publish_file(tmp_path / "again.toml", 1)
    for args in (
        ("edge", "publish", str(toml), "--db", str(db)),
        ("edge", "run", "--db", str(db)),
        ("edge", "status", "--db", str(db)),
    ):
        result = qlsched(*args)
        assert result.returncode == 1, (args, result.stderr)
        assert "Traceback" not in result.stderr
        assert expected in result.stderr, (args, result.stderr)
        assert result.stderr.count("\n") == 1, result.stderr


def test_migrations_are_recorded_with_checksums(tmp_path: Path) -> None:
    """A new file carries every shipped migration in the ledger with its SHA-256, the
    qlsched application id, WAL journaling, and the capability row."""
    db = published(tmp_path)
    shipped = {(m.version, m.name, m.checksum) for m in load_migrations()}
    assert set(read(db, "SELECT version, name, checksum FROM schema_migrations")) == shipped
    assert {p.name for p in (REPO / "schema" / "sqlite").glob("0*.sql")} == {
        m.name for m in load_migrations(schema_dir())
    }
    assert read(db, "PRAGMA application_id") == [(EDGE_APPLICATION_ID,)]
    assert read(db, "PRAGMA journal_mode") == [("wal",)]
    assert read(db, "SELECT name, version FROM capability") == [("qlsched.edge_scheduler", 1)]


def test_two_files_with_one_version_are_refused(tmp_path: Path) -> None:
    """Rule: Edge migration versions are unique, as the cluster's are; two files numbered
    alike are refused outright (the ledger, keyed by version, could record only one)."""
    for shipped in schema_dir().iterdir():
        (tmp_path / shipped.name).write_bytes(shipped.read_bytes())
    (tmp_path / "0001_duplicate.sql").write_text("SELECT 1;\n")
    with pytest.raises(EdgeSchemaError, match="two migration files share a version number"):
        load_migrations(tmp_path)


def test_foreign_sqlite_file_is_refused_untouched(tmp_path: Path) -> None:
    """Another program's SQLite file is refused by name and left byte for byte as it was
    (no ledger, no WAL switch)."""
    db = tmp_path / "other.sqlite3"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('alice')")
    conn.commit()
    conn.close()
    before = digest(db)

    refused(db, tmp_path, "not a qlsched Edge database (a foreign SQLite file")

    assert digest(db) == before
    assert not Path(str(db) + "-wal").exists() or Path(str(db) + "-wal").stat().st_size == 0


@pytest.mark.parametrize("kind", ["garbage", "truncated"])
def test_corrupt_file_is_refused(tmp_path: Path, kind: str) -> None:
    """A file that is not a database, or an Edge file cut short, is refused with one line."""
    if kind == "garbage":
        db = tmp_path / "edge.sqlite3"
        db.write_bytes(os.urandom(16384))
        expected = "SQLITE_NOTADB"
    else:
        db = published(tmp_path)
        conn = sqlite3.connect(db)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.close()
        data = db.read_bytes()
        db.write_bytes(data[: len(data) // 2])
        expected = "corrupt"
    before = digest(db)

    refused(db, tmp_path, expected)

    assert digest(db) == before


def test_changed_migration_is_refused(tmp_path: Path) -> None:
    """A ledger checksum that differs from the shipped file stops every command, naming the
    migration."""
    db = published(tmp_path)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE schema_migrations SET checksum = ? WHERE version = 1", ("0" * 64,))
    conn.commit()
    conn.close()

    refused(db, tmp_path, "migration 0001_edge_scheduler.sql differs from the one applied")


def test_newer_migration_is_refused(tmp_path: Path) -> None:
    """A file migrated by a newer qlsched (a version this one does not ship) is refused."""
    db = published(tmp_path)
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO schema_migrations VALUES (9999, '9999_future.sql', ?, 0)", ("a" * 64,)
    )
    conn.commit()
    conn.close()

    refused(db, tmp_path, "migration 9999 (9999_future.sql) was applied by a newer qlsched")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("DROP INDEX trigger_schedules_due_idx", "index trigger_schedules_due_idx is missing"),
        ("CREATE TABLE extra (x INTEGER)", "unexpected table extra"),
        ("ALTER TABLE runs ADD COLUMN note TEXT", "table runs differs from its migration"),
    ],
)
def test_catalog_drift_is_refused(tmp_path: Path, change: str, expected: str) -> None:
    """The file's catalog must be what the migrations define: a dropped index, an extra
    table or an altered table is refused, naming the object."""
    db = published(tmp_path)
    conn = sqlite3.connect(db)
    conn.execute(change)
    conn.commit()
    conn.close()

    refused(db, tmp_path, expected)


SHARED_TABLES = (
    "projects",
    "tasks",
    "execution_revisions",
    "triggers",
    "trigger_schedules",
    "runs",
    "attempts",
    "run_events",
    "schedule_actions",
    "control_requests",
)


def _postgres_columns() -> dict[str, set[str]]:
    """Column names of each table the PostgreSQL migrations create (or alter)."""
    columns: dict[str, set[str]] = {}
    for path in sorted((REPO / "schema" / "postgres").glob("0*.sql")):
        text = path.read_text()
        for m in re.finditer(r"CREATE TABLE qlsched\.(\w+) \((.*?)\n\);", text, re.S):
            names = re.findall(r"^\s{4}([a-z_]+)\s+[a-z]", m.group(2), re.M)
            columns.setdefault(m.group(1), set()).update(
                n for n in names if n not in {"primary", "foreign", "unique", "check", "constraint"}
            )
        for m in re.finditer(r"ALTER TABLE qlsched\.(\w+)\s+(.*?);", text, re.S):
            added = re.findall(r"ADD COLUMN (\w+)", m.group(2))
            columns.setdefault(m.group(1), set()).update(added)
    return columns


def test_tables_and_columns_carry_the_postgres_names(tmp_path: Path) -> None:
    """Every table the audit reads exists in the Edge file under its PostgreSQL name, and
    each of its columns is a column of the PostgreSQL table (only the lease, the pinned
    jitter, the accounting and failure columns are absent), so the same audit queries run
    on both profiles."""
    db = published(tmp_path)
    postgres = _postgres_columns()
    for table in SHARED_TABLES:
        edge = {str(r[1]) for r in read(db, f"PRAGMA table_info({table})")}
        assert edge, table
        assert edge <= postgres[table], (table, sorted(edge - postgres[table]))
    lease = {"claim_owner", "claim_token", "claim_version", "claim_expires_at_ms"}
    # PostgreSQL pins the revision's jitter on the row for its generated due time; the Edge
    # round reads it from the trigger row of the same revision and writes the due time.
    pinned = {"jitter_ms"}
    # The accounting window and the failure counters serve the cluster's requests and its
    # give-back of claims; one Edge runner has neither (it counts a taken key, as they do).
    accounting = {
        "decided_from_ms",
        "backfilled_total",
        "failures",
        "last_failure",
        "last_failure_at_ms",
    }
    assert (
        postgres["trigger_schedules"]
        - {str(r[1]) for r in read(db, "PRAGMA table_info(trigger_schedules)")}
        == lease | pinned | accounting
    )
