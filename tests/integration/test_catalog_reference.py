"""The expected catalog's reference (contract §4, ``qlsched.postgres.catalog``): built
from the shipped files, never from the live schema; pinned by a digest only a superuser or
the database owner can set; trusted by readiness only when rows and digest agree.

Breakage is done as the superuser, or as qlsched_owner where the point is what the owner
of the schema (who can ALTER it) can and cannot forge.
"""

from __future__ import annotations

from importlib.abc import Traversable
from pathlib import Path

import pytest

from qlsched.postgres import catalog
from qlsched.postgres import migrate as migrate_module
from qlsched.postgres.catalog import digest
from qlsched.postgres.migrate import bootstrap_sql, load_migrations, migrate
from tests.integration.schema_support import execute, readiness
from tests.support.pg import TestDatabase, sql_run

UNTRUSTED = (
    "the catalog reference qlsched.catalog_reference does not match its pinned digest"
    " (altered after `migrate` wrote it, or written for other migrations):"
    " run `qlsched migrate` as a superuser"
)
NO_DIGEST = (
    "the catalog reference has no pinned digest (qlsched.catalog_digest):"
    " run `qlsched migrate` as a superuser"
)
EXTRA_INDEX = "CREATE INDEX qlt_extra_idx ON qlsched.runs (state)"
EXTRA_INDEX_ROW = (
    "INSERT INTO qlsched.catalog_reference VALUES ('index', 'qlt_extra_idx',"
    " 'CREATE INDEX qlt_extra_idx ON qlsched.runs USING btree (state)')"
)


def as_owner(*statements: str) -> str:
    """Statements run as qlsched_owner (the role that can ALTER the schema)."""
    return "SET ROLE qlsched_owner; " + " ".join(f"{s};" for s in statements) + " RESET ROLE"


def test_migrate_never_launders_a_tampered_schema_into_the_reference(pg_db: TestDatabase) -> None:
    """Rule: the reference is built from the shipped files, not read off the live schema:
    an index added before an operator re-runs `migrate` is still not ready afterwards."""
    execute(pg_db.superuser_dsn, EXTRA_INDEX)
    catalog._built.clear()  # as an operator's new `migrate` process: nothing built yet
    sql_run(pg_db.superuser_dsn, migrate)
    findings = readiness(pg_db.runtime_dsn).findings
    assert findings == [
        "unexpected index qlt_extra_idx: CREATE INDEX qlt_extra_idx ON qlsched.runs"
        " USING btree (state)"
    ]


def test_the_owner_cannot_forge_the_reference_to_match_its_tampering(
    pg_db: TestDatabase,
) -> None:
    """Rule: qlsched_owner can alter the schema and rewrite the reference rows to match,
    but not the pinned digest: readiness refuses to trust the reference. Control: the same
    rows written by `migrate` (which pins their digest) would be trusted."""
    execute(pg_db.superuser_dsn, as_owner(EXTRA_INDEX, EXTRA_INDEX_ROW))
    assert readiness(pg_db.runtime_dsn).findings == [UNTRUSTED]
    with pytest.raises(Exception, match="must be owner of database"):
        execute(
            pg_db.superuser_dsn,
            as_owner(f"ALTER DATABASE \"{pg_db.name}\" SET qlsched.catalog_digest = 'x'"),
        )


def test_the_owner_cannot_replace_the_reference_table(pg_db: TestDatabase) -> None:
    """Rule: the schema owner may drop the reference table and create its own, empty or
    filled, and it is still not trusted (its rows do not match the pinned digest)."""
    execute(
        pg_db.superuser_dsn,
        as_owner(
            "DROP TABLE qlsched.catalog_reference",
            "CREATE TABLE qlsched.catalog_reference (kind text, object text, definition text)",
            "GRANT SELECT ON qlsched.catalog_reference TO qlsched_runtime",
        ),
    )
    assert readiness(pg_db.runtime_dsn).findings == [UNTRUSTED]


def test_a_role_setting_cannot_stand_in_for_the_pinned_digest(pg_db: TestDatabase) -> None:
    """Rule: only the database-wide setting counts: a forged reference with its true digest
    set for the runtime role (in this database) is still refused."""
    execute(pg_db.superuser_dsn, as_owner(EXTRA_INDEX, EXTRA_INDEX_ROW))
    forged = {
        (str(k), str(o)): str(d)
        for k, o, d in (
            tuple(r)
            for r in sql_run(
                pg_db.superuser_dsn,
                lambda c: c.fetch("SELECT kind, object, definition FROM qlsched.catalog_reference"),
            )
        )
    }
    execute(
        pg_db.superuser_dsn,
        f'ALTER ROLE qlsched_runtime IN DATABASE "{pg_db.name}" SET qlsched.catalog_digest'
        f" = '{digest(forged, load_migrations(), bootstrap_sql())}'",
    )
    assert readiness(pg_db.runtime_dsn).findings == [UNTRUSTED]


def test_a_missing_digest_is_not_ready_until_migrate_pins_it(pg_db: TestDatabase) -> None:
    """Rule: without the pinned digest the reference is not trusted (not ready, one
    finding); a superuser `migrate` rebuilds the reference and pins it again."""
    execute(pg_db.superuser_dsn, f'ALTER DATABASE "{pg_db.name}" RESET qlsched.catalog_digest')
    assert readiness(pg_db.runtime_dsn).findings == [NO_DIGEST]
    sql_run(pg_db.superuser_dsn, migrate)
    assert readiness(pg_db.runtime_dsn).ready


def test_a_database_owned_by_a_qlsched_role_is_refused(pg_db: TestDatabase) -> None:
    """Rule: the database owner may change the pinned digest, so a qlsched role owning the
    database is a finding naming it."""
    execute(pg_db.superuser_dsn, f'ALTER DATABASE "{pg_db.name}" OWNER TO qlsched_owner')
    findings = readiness(pg_db.runtime_dsn).findings
    assert (
        f"database {pg_db.name} is owned by qlsched_owner, which could rewrite the pinned"
        " catalog digest"
    ) in findings


PROBE_MIGRATION = "9001_probe_function.sql"
PROBE_SQL = (
    "CREATE FUNCTION qlsched.qlt_answer() RETURNS integer LANGUAGE sql IMMUTABLE AS 'SELECT 42';\n"
)


@pytest.fixture
def schema_with_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shipped schema directory plus one more migration, read instead of the shipped."""
    copy = tmp_path / "postgres"
    copy.mkdir()
    for entry in migrate_module.schema_dir().iterdir():
        if entry.name.endswith(".sql"):
            (copy / entry.name).write_bytes(entry.read_bytes())
    (copy / PROBE_MIGRATION).write_text(PROBE_SQL)

    def patched() -> Traversable:
        return copy

    monkeypatch.setattr(migrate_module, "schema_dir", patched)
    return copy


def test_a_shipped_migration_is_expected_by_being_shipped_and_bodies_are_compared(
    pg_db: TestDatabase, schema_with_probe: Path
) -> None:
    """Rule: the reference follows whatever migrations are shipped (no hand list): a new
    migration's function is expected once migrated; a changed body is named; put back, the
    database is ready again."""
    assert any(PROBE_MIGRATION in f for f in readiness(pg_db.runtime_dsn).findings)
    sql_run(pg_db.superuser_dsn, migrate)
    assert readiness(pg_db.runtime_dsn).findings == []
    execute(
        pg_db.superuser_dsn,
        "CREATE OR REPLACE FUNCTION qlsched.qlt_answer() RETURNS integer LANGUAGE sql"
        " IMMUTABLE AS 'SELECT 41'",
    )
    assert readiness(pg_db.runtime_dsn).findings == [
        "function qlsched.qlt_answer() differs from the migrations (body or attributes)"
    ]
    execute(pg_db.superuser_dsn, PROBE_SQL.replace("CREATE", "CREATE OR REPLACE"))
    assert readiness(pg_db.runtime_dsn).ready
