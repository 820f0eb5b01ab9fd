"""The built wheel ships the Edge schema and its named queries (``pip install .``, not only
an editable install, must be able to create and check an Edge file)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.edge.support import REPO

pytestmark = pytest.mark.slow


def test_wheel_ships_the_edge_schema_and_queries(tmp_path: Path) -> None:
    """Rule: ``qlsched/_schema/sqlite`` holds every file of ``schema/sqlite`` and
    ``qlsched/sqlite/sql`` every named-query file."""
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (wheel,) = tmp_path.glob("qlsched-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())

    schema = {n.rsplit("/", 1)[1] for n in names if n.startswith("qlsched/_schema/sqlite/")}
    queries = {n.rsplit("/", 1)[1] for n in names if n.startswith("qlsched/sqlite/sql/")}
    assert schema == {p.name for p in (REPO / "schema" / "sqlite").glob("*.sql")}
    assert queries == {p.name for p in (REPO / "qlsched" / "sqlite" / "sql").glob("*.sql")}
    assert "ledger.sql" in schema
