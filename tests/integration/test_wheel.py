"""The built wheel ships the SQL (docs/contract.md §4: "`pip install .` (not only editable) must
ship the SQL"; §SQL: migrations "tested from the built wheel").

The wheel is built from this checkout, installed with its dependencies into a fresh venv
(no access to the checkout or the dev venv), and its console script is run from a directory
outside the repository against a migrated database: `check` must find the packaged
migrations (with checksums equal to the ledger's) and the packaged named queries.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import pytest

from tests.integration.schema_support import MIGRATIONS, clean_env
from tests.support.pg import TestDatabase

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _run(args: Sequence[str], *, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = clean_env()
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
        env.pop(name, None)
    return subprocess.run(
        list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, built in an isolated build environment."""
    out = tmp_path_factory.mktemp("dist")
    result = _run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(REPO)],
        cwd=out,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (built,) = out.glob("qlsched-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel (and its dependencies from the package index)."""
    venv = tmp_path_factory.mktemp("venv")
    made = _run([sys.executable, "-m", "venv", str(venv)], cwd=venv, timeout=120)
    assert made.returncode == 0, made.stderr
    pip = _run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
        cwd=venv,
        timeout=300,
    )
    assert pip.returncode == 0, pip.stdout[-2000:] + pip.stderr[-2000:]
    return venv


def test_wheel_contains_the_sql_and_the_type_marker(wheel: Path) -> None:
    """Rule: the wheel carries the migrations and bootstrap under qlsched/_schema/postgres,
    every named-query file of qlsched/postgres/sql, the tools' SQL, the example triggers
    under qlsched/_examples, py.typed, and every template and asset of the dashboard (it
    loads nothing from elsewhere)."""
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    sql_files = sorted(
        entry.name
        for entry in resources.files("qlsched.postgres").joinpath("sql").iterdir()
        if entry.name.endswith(".sql")
    )
    assert sql_files
    expected = {
        *(f"qlsched/_schema/postgres/{m}" for m in MIGRATIONS),
        "qlsched/_schema/postgres/bootstrap.sql",
        "qlsched/py.typed",
        "qlsched/_examples/triggers.toml",
        *(f"qlsched/postgres/sql/{name}" for name in sql_files),
        *(f"qlsched/tools/sql/{name}" for name in ("bench.sql", "demo.sql")),
        "qlsched/tools/pgbench/pair.sql",
        *(
            f"qlsched/ui/{folder}/{entry.name}"
            for folder in ("templates", "static")
            for entry in resources.files("qlsched.ui").joinpath(folder).iterdir()
        ),
    }
    assert expected <= names, sorted(expected - names)
    migrations = {n.rsplit("/", 1)[1] for n in names if n.startswith("qlsched/_schema/postgres/")}
    in_source = {p.name for p in (REPO / "schema" / "postgres").glob("*.sql")}
    assert migrations == in_source


def test_installed_wheel_checks_a_database_from_outside_the_repo(
    installed: Path, pg_db: TestDatabase, tmp_path: Path
) -> None:
    """Rule: the installed package finds its SQL inside itself (not in a source tree):
    `qlsched check` from the wheel's venv, run outside the repository, reports the
    database ready, and `qlsched migrate` from it finds the migration already applied
    (the shipped file's checksum equals the ledger's)."""
    python = installed / "bin" / "python"
    where = _run(
        [
            str(python),
            "-c",
            "import qlsched, qlsched.postgres.migrate as m;"
            " print(qlsched.__file__); print(m.schema_dir())",
        ],
        cwd=tmp_path,
        timeout=60,
    )
    assert where.returncode == 0, where.stderr
    package_file, schema_dir = where.stdout.splitlines()
    for path in (package_file, schema_dir):
        assert Path(path).resolve().is_relative_to(installed.resolve()), path
    assert not Path(schema_dir).resolve().is_relative_to(REPO)

    qlsched = str(installed / "bin" / "qlsched")
    check = _run([qlsched, "check", "--dsn", pg_db.runtime_dsn], cwd=tmp_path, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.startswith("ready: PostgreSQL ")
    assert f"{len(MIGRATIONS)} migration(s) applied, grants exact" in check.stdout

    migrated = _run([qlsched, "migrate", "--dsn", pg_db.superuser_dsn], cwd=tmp_path, timeout=60)
    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stdout == "".join(f"migration {m}: already applied\n" for m in MIGRATIONS)


def test_installed_demo_reads_the_packaged_example_triggers(
    installed: Path, tmp_path: Path
) -> None:
    """Rule: the demo's triggers are examples/triggers.toml as packaged in the wheel
    (qlsched/_examples), byte for byte, not a hand-kept copy nor the source tree's file."""
    result = _run(
        [
            str(installed / "bin" / "python"),
            "-c",
            "from qlsched.tools.demo.plan import triggers_file, triggers_source;"
            " print(triggers_file()); import sys;"
            " sys.stdout.flush(); sys.stdout.buffer.write(triggers_source()[1])",
        ],
        cwd=tmp_path,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    where, _, content = result.stdout.partition("\n")
    assert Path(where).resolve().is_relative_to(installed.resolve()), where
    assert Path(where).parent.name == "_examples"
    assert content == (REPO / "examples" / "triggers.toml").read_text()
