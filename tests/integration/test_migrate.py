"""The migration runner (docs/contract.md §4 "Migrations"): numbered SQL files, applied once each
as qlsched_owner, checksummed (SHA-256), refused when an applied file was edited or is
missing, and safe to run twice or concurrently.

Edited and missing files are simulated on a copy of the schema directory that
``qlsched.postgres.migrate.schema_dir`` is patched to return; the shipped files are never
touched. Concurrency is made deterministic by holding the runner's own advisory lock while
two runners start, waiting until both queue behind it, then letting them go.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import qlsched.postgres.migrate as migrate_module
from qlsched.postgres.migrate import MigrateReport, MigrationError, load_migrations, migrate
from qlsched.postgres.queries import query
from tests.integration.schema_support import (
    MIGRATION,
    MIGRATIONS,
    acl_snapshot,
    clean_env,
    empty_database,
    fetch,
    fetchval,
    ledger,
    readiness,
    refusal,
    seed_trigger,
)
from tests.support.pg import PgCluster, TestDatabase, sql_run

PROBE_MIGRATION = "0999_probe.sql"
PROBE_SQL = "CREATE TABLE qlsched.migration_probe (i integer);\n"


@pytest.fixture
def schema_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the shipped schema directory that the runner reads instead."""
    copy = tmp_path / "postgres"
    source = migrate_module.schema_dir()
    copy.mkdir()
    for entry in source.iterdir():
        if entry.name.endswith(".sql"):
            (copy / entry.name).write_bytes(entry.read_bytes())

    def patched() -> Traversable:
        return copy

    monkeypatch.setattr(migrate_module, "schema_dir", patched)
    return copy


def run_migrate(dsn: str) -> MigrateReport:
    return sql_run(dsn, migrate)


def test_migrate_twice_is_a_no_op(pg_cluster: PgCluster) -> None:
    """Rule: the first run applies every migration; the second applies nothing and leaves
    the ledger (applied_at included), every grant and readiness exactly as they were."""
    with empty_database(pg_cluster) as name:
        su = pg_cluster.dsn(name)
        first = run_migrate(su)
        assert first.applied == MIGRATIONS
        assert first.already == []
        recorded, grants = ledger(su), acl_snapshot(su)

        second = run_migrate(su)
        assert second.applied == []
        assert second.already == MIGRATIONS
        assert ledger(su) == recorded
        assert acl_snapshot(su) == grants
        assert readiness(pg_cluster.dsn(name, "qlsched_runtime")).ready


def test_the_ledger_records_each_file_with_its_sha256(pg_db: TestDatabase) -> None:
    """Rule: the ledger holds one row per migration file: its version, its file name and
    the SHA-256 of its exact bytes as shipped."""
    files = load_migrations()
    shipped = migrate_module.schema_dir().joinpath(MIGRATION).read_bytes()
    assert [(v, n, c) for v, n, c, _ in ledger(pg_db.superuser_dsn)] == [
        (m.version, m.name, m.checksum) for m in files
    ]
    assert files[0].checksum == hashlib.sha256(shipped).hexdigest()


def _advisory_locks(cluster: PgCluster, database: str, *, granted: bool) -> int:
    """Advisory locks in ``database``: held (granted) or waited for."""
    return int(
        fetchval(
            cluster.dsn("postgres"),
            "SELECT count(*) FROM pg_catalog.pg_locks AS l"
            " JOIN pg_catalog.pg_database AS d ON d.oid = l.database"
            " WHERE l.locktype = 'advisory' AND l.granted = $2 AND d.datname = $1",
            database,
            granted,
        )
    )


def _wait_for(predicate: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.02)


@contextmanager
def lock_held(cluster: PgCluster, database: str) -> Iterator[None]:
    """Hold the migration runners' advisory lock on ``database`` for the block."""
    release = threading.Event()

    async def hold(conn: asyncpg.Connection[Any]) -> None:
        await conn.execute(query("migrate_lock"))
        try:
            while not release.is_set():
                await conn.execute("SELECT pg_catalog.pg_sleep(0.02)")
        finally:
            await conn.execute(query("migrate_unlock"))

    with ThreadPoolExecutor(max_workers=1) as pool:
        holder = pool.submit(sql_run, cluster.dsn(database), hold)
        try:
            _wait_for(
                lambda: holder.done() or _advisory_locks(cluster, database, granted=True) > 0,
                "the lock holder",
            )
            yield
        finally:
            release.set()
            holder.result(timeout=30)


def test_concurrent_runners_queue_on_the_lock_and_apply_each_migration_once(
    pg_cluster: PgCluster,
) -> None:
    """Rule: two runners started together on a fresh database both succeed: they queue on
    the migration advisory lock (seen in pg_locks), one applies, the other then finds
    everything applied; the ledger has each migration exactly once."""
    with empty_database(pg_cluster) as name, ThreadPoolExecutor(max_workers=2) as pool:
        su = pg_cluster.dsn(name)
        with lock_held(pg_cluster, name):
            runners = [pool.submit(run_migrate, su) for _ in range(2)]
            _wait_for(
                lambda: (
                    any(r.done() for r in runners)
                    or _advisory_locks(pg_cluster, name, granted=False) == 2
                ),
                "both runners queued on the lock",
            )
            assert not any(r.done() for r in runners), "a runner did not wait for the lock"
        reports = [r.result(timeout=60) for r in runners]
        assert sorted(r.applied for r in reports) == [[], MIGRATIONS]
        assert [n for _, n, _, _ in ledger(su)] == MIGRATIONS
        assert readiness(pg_cluster.dsn(name, "qlsched_runtime")).ready


def test_concurrent_migrate_commands_both_succeed(pg_cluster: PgCluster) -> None:
    """Rule: the same holds for two `qlsched migrate` processes: both exit 0, one reports
    the migration applied, the other already applied, and the ledger has it once."""
    with empty_database(pg_cluster) as name:
        su = pg_cluster.dsn(name)
        cmd = [sys.executable, "-m", "qlsched", "migrate", "--dsn", su]
        with lock_held(pg_cluster, name):
            procs = [
                subprocess.Popen(
                    cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env()
                )
                for _ in range(2)
            ]
            try:
                _wait_for(
                    lambda: (
                        any(p.poll() is not None for p in procs)
                        or _advisory_locks(pg_cluster, name, granted=False) == 2
                    ),
                    "both commands queued on the lock",
                )
                waited = all(p.poll() is None for p in procs)
            except BaseException:
                for p in procs:
                    p.kill()
                raise
        outputs = [p.communicate(timeout=60) for p in procs]
        assert waited, "a command did not wait for the lock"
        assert [p.returncode for p in procs] == [0, 0], [err for _, err in outputs]
        assert sorted(out for out, _ in outputs) == [
            "".join(f"migration {m}: already applied\n" for m in MIGRATIONS),
            "".join(f"migration {m}: applied\n" for m in MIGRATIONS),
        ]
        assert [n for _, n, _, _ in ledger(su)] == MIGRATIONS


def test_a_pending_migration_is_applied_once_as_the_owner(
    pg_db: TestDatabase, schema_copy: Path
) -> None:
    """Rule: a new numbered file is applied on the next run, as qlsched_owner (which owns
    what it creates), and recorded with its SHA-256; the run after that applies nothing."""
    (schema_copy / PROBE_MIGRATION).write_text(PROBE_SQL)
    su = pg_db.superuser_dsn
    report = run_migrate(su)
    assert report.applied == [PROBE_MIGRATION]
    assert report.already == MIGRATIONS
    assert (
        fetchval(
            su,
            "SELECT pg_catalog.pg_get_userbyid(relowner)::text FROM pg_catalog.pg_class"
            " WHERE oid = 'qlsched.migration_probe'::regclass",
        )
        == "qlsched_owner"
    )
    assert [(v, n, c) for v, n, c, _ in ledger(su)][-1] == (
        999,
        PROBE_MIGRATION,
        hashlib.sha256(PROBE_SQL.encode()).hexdigest(),
    )
    assert run_migrate(su).applied == []


def test_upgrading_to_0005_gives_existing_triggers_the_default_dst_policy(
    pg_cluster: PgCluster, schema_copy: Path
) -> None:
    """Rule: a database at 0004 holding a trigger upgrades to 0005 (and whatever follows):
    the existing row gets ``dst_gap = 'shift'`` and ``dst_fold = 'first'``, the rule it was
    scheduled by so far, the CHECKs refuse another value, and readiness holds after."""
    later = {
        f.name: f.read_bytes()
        for f in schema_copy.iterdir()
        if f.name[:4].isdigit() and f.name[:4] >= "0005"
    }
    assert "0005_dst_policy.sql" in later
    for file_name in later:
        (schema_copy / file_name).unlink()
    with empty_database(pg_cluster) as name:
        su = pg_cluster.dsn(name)
        assert run_migrate(su).applied == [m for m in MIGRATIONS if m[:4] < "0005"]
        seed_trigger(pg_cluster.dsn(name, "qlsched_admin"))
        for file_name, text in later.items():
            (schema_copy / file_name).write_bytes(text)
        assert run_migrate(su).applied == sorted(later)
        assert [tuple(r) for r in fetch(su, "SELECT dst_gap, dst_fold FROM qlsched.triggers")] == [
            ("shift", "first")
        ]
        for column, value in (("dst_gap", "later"), ("dst_fold", "twice")):
            error = refusal(
                pg_cluster.dsn(name, "qlsched_admin"),
                f"UPDATE qlsched.triggers SET {column} = $1",  # noqa: S608 - fixed names
                value,
            )
            assert isinstance(error, asyncpg.CheckViolationError)
        assert readiness(pg_cluster.dsn(name, "qlsched_runtime")).ready


def test_an_edited_migration_is_refused_naming_the_file(
    pg_db: TestDatabase, schema_copy: Path
) -> None:
    """Rule: a migration file whose bytes differ from what was applied stops the runner
    before it applies anything, and the error names the file; readiness says the same."""
    with (schema_copy / MIGRATION).open("a") as f:
        f.write("-- an innocent-looking comment is still an edit\n")
    (schema_copy / PROBE_MIGRATION).write_text(PROBE_SQL)
    su = pg_db.superuser_dsn
    before = ledger(su)
    with pytest.raises(MigrationError) as refused:
        run_migrate(su)
    assert str(refused.value) == f"migration {MIGRATION} was edited after it was applied (checksum)"
    assert ledger(su) == before
    assert fetchval(su, "SELECT to_regclass('qlsched.migration_probe')") is None
    report = readiness(pg_db.runtime_dsn)
    assert f"migration {MIGRATION} was edited after it was applied (checksum)" in report.findings


def test_a_missing_migration_file_is_refused_naming_it(
    pg_db: TestDatabase, schema_copy: Path
) -> None:
    """Rule: an applied migration whose file is gone from the installation stops the runner
    (nothing pending is applied), naming the file."""
    (schema_copy / MIGRATION).unlink()
    (schema_copy / PROBE_MIGRATION).write_text(PROBE_SQL)
    su = pg_db.superuser_dsn
    before = ledger(su)
    with pytest.raises(MigrationError) as refused:
        run_migrate(su)
    assert str(refused.value) == (
        f"applied migration {MIGRATION} is missing from this installation"
    )
    assert ledger(su) == before
    assert fetchval(su, "SELECT to_regclass('qlsched.migration_probe')") is None


def test_two_files_with_one_version_are_refused(schema_copy: Path) -> None:
    """Rule: migration versions are unique; two files numbered alike are refused outright."""
    shutil.copy(schema_copy / MIGRATION, schema_copy / "0001_duplicate.sql")
    with pytest.raises(MigrationError, match="two migration files share a version number"):
        load_migrations()


def test_a_non_superuser_cannot_bootstrap(pg_cluster: PgCluster) -> None:
    """Rule: without a superuser the runner will not bootstrap; on an empty database it
    stops with a message that says to run init-db, and creates nothing."""
    with empty_database(pg_cluster) as name:
        with pytest.raises(MigrationError, match="not bootstrapped: run `qlsched init-db`"):
            run_migrate(pg_cluster.dsn(name, "qlsched_admin"))
        assert fetchval(pg_cluster.dsn(name), "SELECT to_regnamespace('qlsched')") is None


def test_a_server_older_than_15_is_refused(
    pg_cluster: PgCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule: PostgreSQL 15 or newer. No older server can be had here, so the server's
    version is faked in-process (``server_facts`` patched to report 14.11); the runner
    refuses before touching the database."""
    real = migrate_module.server_facts

    async def fake_facts(conn: Any) -> tuple[int, bool, str]:
        _, superuser, database = await real(conn)
        return 140011, superuser, database

    monkeypatch.setattr(migrate_module, "server_facts", fake_facts)
    with empty_database(pg_cluster) as name:
        with pytest.raises(MigrationError, match=r"^PostgreSQL 14 is too old: qlsched needs 15"):
            run_migrate(pg_cluster.dsn(name))
        assert fetchval(pg_cluster.dsn(name), "SELECT to_regnamespace('qlsched')") is None


def test_the_schedule_table_is_vacuumed_once_one_percent_is_dead(pg_db: TestDatabase) -> None:
    """Rule: migration 0016 gives ``trigger_schedules`` autovacuum thresholds of 1,000 rows
    plus 1 % (PostgreSQL's default waits for a fifth of the table, while every claim walks
    the dead entries of its index); they are a DBA's to change: readiness holds after."""
    su = pg_db.superuser_dsn
    options = fetchval(
        su,
        "SELECT reloptions FROM pg_catalog.pg_class"
        " WHERE oid = 'qlsched.trigger_schedules'::regclass",
    )
    assert sorted(options) == [
        "autovacuum_vacuum_scale_factor=0.01",
        "autovacuum_vacuum_threshold=1000",
    ]
    sql_run(
        su,
        lambda conn: conn.execute(
            "ALTER TABLE qlsched.trigger_schedules SET (autovacuum_vacuum_scale_factor = 0.05)"
        ),
    )
    assert readiness(pg_db.runtime_dsn).ready
